//! UAR pages: ALLOC_UAR / DEALLOC_UAR, issued by the kernel layer's UAR
//! allocation on behalf of a context. CQs and QPs name them in `uar_page`.

use prm_layouts::{AllocUarOut, DeallocUarIn};

use super::cmd::{out_view, Cmd, FwResult};
use super::state::{Holder, State};

#[derive(Debug, Default)]
pub(crate) struct UarObj;

impl Holder for UarObj {}

pub(crate) fn alloc(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = st.uar.insert(cmd.uid, UarObj)?;
    out_view::<AllocUarOut>(out)?.set_uar(n);
    Ok(())
}

/// Refused (RES_BUSY) while a CQ or QP rings its doorbells through the page.
pub(crate) fn dealloc(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DeallocUarIn>()?.uar();
    st.uar.remove(n, cmd.uid)?;
    Ok(())
}
