//! UMR WQEs that bind and unbind memory windows (verbs BIND_MW, and the
//! unbind a zero-length bind asks for), and the translation of a bound
//! window's R_Key for remote access.
//!
//! A window is an MKEY created free, UMR-enabled, in KLM mode. A bind WQE is
//! ctrl (its imm names the window) + UMR ctrl seg (48 B) + mkey context seg
//! (64 B) + inline KLMs; it gives the window a range, rights and a new key
//! tag, with one KLM pointing into a memory region of the same PD. Remote
//! access through the window is then checked against the window's range and
//! rights and reaches the region's memory; the previous tag stops working.

use prm_layouts::{WqeCtrlSeg, WqeMkeyContextSeg, WqeUmrCtrlSeg};

use super::dma::Span;
use super::keys::{self, KeyFault, Need};
use super::queue::QpView;
use crate::sim::fw::mkey::{self, mode, Access, Klm, MkeyObj};
use crate::sim::fw::qp::st;
use crate::sim::fw::state::State;

use prm_layouts::CqeSyndrome;

/// `mlx5_wqe_umr_ctrl_seg.flags`.
#[allow(dead_code)] // The PRM's full list; not every value is read.
pub(crate) mod flag {
    pub(crate) const INLINE: u8 = 1 << 7;
    pub(crate) const CHECK_FREE: u8 = 1 << 5;
    pub(crate) const CHECK_QPN: u8 = 1 << 3;
}

/// `mlx5_wqe_umr_ctrl_seg.mkey_mask`: which context fields the WQE sets.
pub(crate) mod mask {
    pub(crate) const LEN: u64 = 1 << 0;
    pub(crate) const START_ADDR: u64 = 1 << 6;
    pub(crate) const MKEY: u64 = 1 << 13;
    pub(crate) const QPN: u64 = 1 << 14;
    pub(crate) const LOCAL_WRITE: u64 = 1 << 18;
    pub(crate) const REMOTE_READ: u64 = 1 << 19;
    pub(crate) const REMOTE_WRITE: u64 = 1 << 20;
    pub(crate) const ATOMIC: u64 = 1 << 21;
    pub(crate) const FREE: u64 = 1 << 29;
}

/// `mlx5_wqe_mkey_context_seg` fields.
pub(crate) mod ctx {
    /// `free` byte: the key goes (back) to the free state.
    pub(crate) const FREE: u8 = 1 << 6;
    pub(crate) const LOCAL_WRITE: u8 = 1 << 3;
    pub(crate) const REMOTE_READ: u8 = 1 << 4;
    pub(crate) const REMOTE_WRITE: u8 = 1 << 5;
    pub(crate) const ATOMIC: u8 = 1 << 6;
}

/// Segment offsets inside the WQE: control, UMR control, mkey context,
/// then the inline KLMs.
const UMR_CTRL: usize = WqeCtrlSeg::SIZE_BYTES;
const MKEY_CTX: usize = UMR_CTRL + WqeUmrCtrlSeg::SIZE_BYTES;
const KLMS: usize = MKEY_CTX + WqeMkeyContextSeg::SIZE_BYTES;
/// `qpn` of a window bound to no QP (type 1).
const NO_QPN: u32 = 0x00ff_ffff;

/// Whether `m` is a memory window (as opposed to an indirect key made by
/// CREATE_MKEY with its KLMs).
pub(crate) fn is_window(m: &MkeyObj) -> bool {
    m.mode == mode::KLMS && m.mkc.umr_en() == 1
}

/// A window only grants remote rights: its key is an R_Key, never an L_Key.
fn remote_only(a: Access) -> Access {
    Access {
        local_read: false,
        local_write: false,
        ..a
    }
}

/// The window's memory: the region its one KLM points into, resolved to the
/// whole bound range. `None` while free or when the region is gone.
fn target(st: &State, m: &MkeyObj) -> Option<Span> {
    if m.mkc.free() == 1 {
        return None;
    }
    let klm = m.klms.first()?;
    keys::resolve(st, klm.key, klm.addr, m.len, m.pd, Need::LocalRead).ok()
}

/// For the key cache: the rights and the memory of a bound window, or
/// `None` when it does not resolve now.
pub(crate) fn window_info(st: &State, m: &MkeyObj) -> Option<(Access, Span)> {
    Some((remote_only(m.access), target(st, m)?))
}

/// [`keys::resolve`] for a window key `m`.
pub(crate) fn resolve(
    st: &State,
    m: &MkeyObj,
    addr: u64,
    len: u64,
    pd: u32,
    need: Need,
) -> Result<Span, KeyFault> {
    if m.mkc.free() == 1 {
        return Err(KeyFault::BadKey);
    }
    if m.pd != pd {
        return Err(KeyFault::Pd);
    }
    if !keys::granted(remote_only(m.access), need) {
        return Err(KeyFault::Access);
    }
    let off = addr.checked_sub(m.start_addr).ok_or(KeyFault::Bounds)?;
    let end = off.checked_add(len).ok_or(KeyFault::Bounds)?;
    if end > m.len {
        return Err(KeyFault::Bounds);
    }
    let span = target(st, m).ok_or(KeyFault::BadKey)?;
    let off = usize::try_from(off).map_err(|_| KeyFault::Bounds)?;
    let len = usize::try_from(len).map_err(|_| KeyFault::Bounds)?;
    span.sub(off, len).ok_or(KeyFault::Bounds)
}

/// What a UMR WQE asks for, decoded.
struct Request {
    flags: u8,
    mask: u64,
    free: bool,
    access: u8,
    qpn: u32,
    tag: u8,
    start_addr: u64,
    len: u64,
    klm: Option<Klm>,
}

fn decode(wqe: &[u8]) -> Result<Request, CqeSyndrome> {
    let (Some(umr), Some(mkc)) = (
        wqe.get(UMR_CTRL..).and_then(WqeUmrCtrlSeg::from_slice),
        wqe.get(MKEY_CTX..).and_then(WqeMkeyContextSeg::from_slice),
    ) else {
        return Err(CqeSyndrome::LocalQpOpErr);
    };
    let flags = umr.flags();
    let klm = if umr.klm_octowords() == 0 {
        None
    } else {
        // Only inline translations, and a window maps one range.
        let first = wqe.get(KLMS..).and_then(prm_layouts::Klm::from_slice);
        let (Some(k), true) = (first, flags & flag::INLINE != 0) else {
            return Err(CqeSyndrome::LocalQpOpErr);
        };
        Some(Klm {
            bytes: k.byte_count(),
            key: k.mkey(),
            addr: k.address(),
        })
    };
    Ok(Request {
        flags,
        mask: umr.mkey_mask(),
        free: mkc.free() & ctx::FREE != 0,
        access: mkc.access_flags(),
        qpn: mkc.qpn(),
        tag: mkc.mkey(),
        start_addr: mkc.start_addr(),
        len: mkc.len(),
        klm,
    })
}

/// Executes a UMR WQE of QP `v`; `Err` is the error CQE syndrome.
pub(crate) fn execute(st: &mut State, v: &QpView, wqe: &[u8]) -> Result<(), CqeSyndrome> {
    if !matches!(v.service, st::RC | st::UC | st::XRC) {
        return Err(CqeSyndrome::LocalQpOpErr);
    }
    let r = decode(wqe)?;
    // The control segment's imm names the window's key.
    let key = super::requester::ctrl(wqe).imm();
    let index = key >> 8;
    let m = st
        .mkey
        .peek(index)
        .map(|e| &e.obj)
        .ok_or(CqeSyndrome::MwBindErr)?;
    if !is_window(m) || m.pd != v.pd {
        return Err(CqeSyndrome::MwBindErr);
    }
    let type2 = m.mkc.en_rinval() == 1;
    let bound_qpn = m.mkc.qpn();
    let was_free = m.mkc.free() == 1;
    if r.free {
        // Unbind / invalidate: the WQE must name the key as it is now, and a
        // type 2 window only through the QP it is bound to.
        if r.mask & mask::FREE == 0 || key != m.key {
            return Err(CqeSyndrome::MwBindErr);
        }
        if type2 && !was_free && bound_qpn != v.qpn {
            return Err(CqeSyndrome::MwBindErr);
        }
        let e = st.mkey.peek_mut(index).ok_or(CqeSyndrome::MwBindErr)?;
        e.obj.mkc.set_free(1);
        e.obj.klms.clear();
        bump(st);
        return Ok(());
    }
    let klm = r.klm.ok_or(CqeSyndrome::MwBindErr)?;
    let need = mask::LEN | mask::START_ADDR | mask::MKEY | mask::FREE;
    if r.mask & need != need {
        return Err(CqeSyndrome::MwBindErr);
    }
    if type2 {
        // A type 2 window is bound to one QP, and only while free: a bound
        // one must be invalidated first.
        if r.qpn != v.qpn || r.mask & mask::QPN == 0 || !was_free {
            return Err(CqeSyndrome::MwBindErr);
        }
    } else if r.qpn != NO_QPN {
        return Err(CqeSyndrome::MwBindErr);
    }
    if r.flags & flag::CHECK_FREE != 0 && !was_free {
        return Err(CqeSyndrome::MwBindErr);
    }
    // Zero-based windows are not supported: the window's address is the
    // region's.
    if r.len == 0 || klm.addr != r.start_addr || u64::from(klm.bytes) < r.len {
        return Err(CqeSyndrome::MwBindErr);
    }
    let mr = mkey::lookup(st, klm.key).ok_or(CqeSyndrome::MwBindErr)?;
    if mr.mode != mode::MTT || mr.mkc.free() == 1 || mr.pd != v.pd {
        return Err(CqeSyndrome::MwBindErr);
    }
    let end = r
        .start_addr
        .checked_add(r.len)
        .ok_or(CqeSyndrome::MwBindErr)?;
    if r.start_addr < mr.start_addr || end > mr.start_addr.saturating_add(mr.len) {
        return Err(CqeSyndrome::MwBindErr);
    }
    let bit = |m: u64, c: u8, old: bool| {
        if r.mask & m != 0 {
            r.access & c != 0
        } else {
            old
        }
    };
    let old = m.access;
    let access = Access {
        local_read: old.local_read,
        local_write: bit(mask::LOCAL_WRITE, ctx::LOCAL_WRITE, old.local_write),
        remote_read: bit(mask::REMOTE_READ, ctx::REMOTE_READ, old.remote_read),
        remote_write: bit(mask::REMOTE_WRITE, ctx::REMOTE_WRITE, old.remote_write),
        atomic: bit(mask::ATOMIC, ctx::ATOMIC, old.atomic),
    };
    // IB: writes through a window need a region the local side may write.
    if (access.remote_write || access.atomic) && !mr.access.local_write {
        return Err(CqeSyndrome::MwBindErr);
    }
    let e = st.mkey.peek_mut(index).ok_or(CqeSyndrome::MwBindErr)?;
    let w = &mut e.obj;
    w.mkc.set_free(0);
    w.mkc.set_start_addr(r.start_addr);
    w.mkc.set_len(r.len);
    w.mkc.set_mkey_7_0(r.tag);
    w.mkc.set_lw(u8::from(access.local_write));
    w.mkc.set_rr(u8::from(access.remote_read));
    w.mkc.set_rw(u8::from(access.remote_write));
    w.mkc.set_a(u8::from(access.atomic));
    if r.mask & mask::QPN != 0 {
        w.mkc.set_qpn(r.qpn);
    }
    w.key = (index << 8) | u32::from(r.tag);
    w.access = access;
    w.start_addr = r.start_addr;
    w.len = r.len;
    w.klms = vec![Klm {
        bytes: r.len as u32,
        ..klm
    }];
    bump(st);
    Ok(())
}

/// The key tables changed under the data path: what it cached is stale.
fn bump(st: &mut State) {
    st.epoch = st.epoch.wrapping_add(1);
}
