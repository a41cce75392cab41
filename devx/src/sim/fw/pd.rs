//! Protection domains, transport domains and XRC domains: objects with no
//! context of their own, only a number and an owner.

use prm_layouts::{
    AllocPdOut, AllocTransportDomainOut, AllocXrcdOut, DeallocPdIn, DeallocTransportDomainIn,
    DeallocXrcdIn,
};

use super::cmd::{out_view, Cmd, FwResult};
use super::state::{Holder, State};

#[derive(Debug, Default)]
pub(crate) struct Pd;
#[derive(Debug, Default)]
pub(crate) struct TransportDomain;
#[derive(Debug, Default)]
pub(crate) struct Xrcd;

impl Holder for Pd {}
impl Holder for TransportDomain {}
impl Holder for Xrcd {}

pub(crate) fn alloc_pd(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = st.pd.insert(cmd.uid, Pd)?;
    out_view::<AllocPdOut>(out)?.set_pd(n);
    Ok(())
}

pub(crate) fn dealloc_pd(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DeallocPdIn>()?.pd();
    st.pd.remove(n, cmd.uid)?;
    Ok(())
}

pub(crate) fn alloc_td(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = st.td.insert(cmd.uid, TransportDomain)?;
    out_view::<AllocTransportDomainOut>(out)?.set_transport_domain(n);
    Ok(())
}

pub(crate) fn dealloc_td(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DeallocTransportDomainIn>()?.transport_domain();
    st.td.remove(n, cmd.uid)?;
    Ok(())
}

pub(crate) fn alloc_xrcd(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let n = st.xrcd.insert(cmd.uid, Xrcd)?;
    out_view::<AllocXrcdOut>(out)?.set_xrcd(n);
    Ok(())
}

pub(crate) fn dealloc_xrcd(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DeallocXrcdIn>()?.xrcd();
    st.xrcd.remove(n, cmd.uid)?;
    Ok(())
}
