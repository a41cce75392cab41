//! Memory key checks for every local and remote access: key and variant,
//! PD, access rights, bounds, and the key's backing UMEM. Only a key that
//! passes them all yields a [`Span`] the engine may touch.

use super::dma::Span;
use crate::sim::fw::mkey::{self, mode, Access};
use crate::sim::fw::state::State;

/// What an access needs from the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Gather from local memory (send data, WQE gather list).
    LocalRead,
    /// Scatter into local memory (receive, READ response, atomic result).
    LocalWrite,
    RemoteRead,
    RemoteWrite,
    RemoteAtomic,
}

/// Why a key check failed (the caller maps it to a syndrome by side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFault {
    /// No such key, wrong variant byte, free or not a UMEM-backed key.
    BadKey,
    Pd,
    Access,
    Bounds,
}

/// Whether a key with rights `a` allows `need`.
pub(crate) fn granted(a: Access, need: Need) -> bool {
    match need {
        Need::LocalRead => a.local_read,
        Need::LocalWrite => a.local_write,
        Need::RemoteRead => a.remote_read,
        Need::RemoteWrite => a.remote_write,
        Need::RemoteAtomic => a.atomic,
    }
}

/// `[addr, addr + len)` under `key` for a QP of protection domain `pd`.
pub(crate) fn resolve(
    st: &State,
    key: u32,
    addr: u64,
    len: u64,
    pd: u32,
    need: Need,
) -> Result<Span, KeyFault> {
    let m = mkey::lookup(st, key).ok_or(KeyFault::BadKey)?;
    if super::umr::is_window(m) {
        return super::umr::resolve(st, m, addr, len, pd, need);
    }
    if m.mkc.free() == 1 || m.mode != mode::MTT {
        return Err(KeyFault::BadKey);
    }
    if m.pd != pd {
        return Err(KeyFault::Pd);
    }
    if !granted(m.access, need) {
        return Err(KeyFault::Access);
    }
    let off = addr.checked_sub(m.start_addr).ok_or(KeyFault::Bounds)?;
    let end = off.checked_add(len).ok_or(KeyFault::Bounds)?;
    if end > m.len {
        return Err(KeyFault::Bounds);
    }
    let (umem_id, base) = m.umem.ok_or(KeyFault::BadKey)?;
    let umem = st.umem.peek(umem_id).ok_or(KeyFault::BadKey)?;
    let at = base.checked_add(off).ok_or(KeyFault::Bounds)?;
    // CREATE_MKEY refuses a key longer than its UMEM, so this only fails
    // if the tables disagree; then nothing is touched.
    Span::of_umem(&umem.obj, at, len).ok_or(KeyFault::Bounds)
}
