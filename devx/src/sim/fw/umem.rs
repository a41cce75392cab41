//! Registered user memory (UMEM). The kernel layer pins (probes) the range
//! and hands the firmware the region directly: the emulated device's DMA
//! goes into this process's address space, so it keeps the exact byte range
//! rather than an MTT list, and never touches a byte outside it.

use prm_layouts::DestroyUmemIn;

use super::cmd::{ensure, Cmd, FwResult};
use super::state::{Holder, State};
use crate::sim::syndrome;

/// UMEM access flags (the UMEM_REG `access` attribute).
pub(crate) mod access {
    pub(crate) const LOCAL_WRITE: u32 = 1;
    pub(crate) const REMOTE_WRITE: u32 = 2;
    pub(crate) const REMOTE_READ: u32 = 4;
    pub(crate) const RELAXED_ORDERING: u32 = 0x10_0000;
}

/// A registered range of the caller's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UmemObj {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: u32,
}

impl Holder for UmemObj {}

impl UmemObj {
    /// True when `[offset, offset + bytes)` lies inside the UMEM.
    pub(crate) fn covers(&self, offset: u64, bytes: u64) -> bool {
        offset.checked_add(bytes).is_some_and(|end| end <= self.len)
    }

    pub(crate) fn writable(&self) -> bool {
        self.access & access::LOCAL_WRITE != 0
    }
}

/// CREATE_UMEM as the kernel issues it for UMEM_REG.
pub(crate) fn create(st: &mut State, uid: u16, region: UmemObj) -> FwResult<u32> {
    ensure(region.len > 0, syndrome::UMEM_EMPTY)?;
    st.umem.insert(uid, region)
}

/// DESTROY_UMEM; refused while a queue or mkey lives in the memory.
pub(crate) fn destroy(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let n = cmd.view::<DestroyUmemIn>()?.umem_id();
    st.umem.remove(n, cmd.uid)?;
    Ok(())
}

/// Resolves a queue buffer: `umem` must be usable by `uid` and cover
/// `bytes` at `offset`. Returns the UMEM for further checks.
pub(crate) fn resolve(
    st: &State,
    uid: u16,
    umem: u32,
    offset: u64,
    bytes: u64,
) -> FwResult<UmemObj> {
    let u = st.umem.usable(umem, uid)?.obj;
    ensure(u.covers(offset, bytes), syndrome::UMEM_TOO_SMALL)?;
    Ok(u)
}

/// Resolves an 8-byte doorbell record at `dbr_addr` (an offset in `umem`).
pub(crate) fn resolve_dbr(st: &State, uid: u16, umem: u32, dbr_addr: u64) -> FwResult<UmemObj> {
    let u = st.umem.usable(umem, uid)?.obj;
    ensure(u.covers(dbr_addr, 8), syndrome::DBR_OUT_OF_UMEM)?;
    ensure(
        u.addr.wrapping_add(dbr_addr) & 7 == 0,
        syndrome::DBR_MISALIGNED,
    )?;
    Ok(u)
}
