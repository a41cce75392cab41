//! Memory window binds: a UMR WQE (opcode `UMR`) that gives a window a range
//! of a memory region, remote rights and a new R_Key (prm-guide §5.3, §5.4).
//!
//! The WQE is ctrl + UMR ctrl seg (48 B) + mkey context seg (64 B) + the
//! inline translation: one KLM `{length, MR lkey, addr}` padded to four
//! octowords, as the device reads translations in 64-byte units. A bind of
//! length 0 unbinds (the context says `free`) and carries no KLM.

use devx::StableMemory;
use prm_layouts::SendOpcode;

use super::ready::{send_refused, sends_allowed};
use super::send::{has_room, SendQueue};
use super::wqe::{bbs_of, ctrl8, ctrl_seg, CTRL_SIGNALED, DS, WQEBB};
use crate::access::AccessFlags;
use crate::error::{Error, Result};
use crate::mr::Mr;
use crate::mw::{Mw, MwType};
use crate::qp::{Qp, QpType};

const VERB: &str = "bind_mw";

/// `mlx5_wqe_umr_ctrl_seg.flags`.
const FLAG_INLINE: u8 = 1 << 7;
const FLAG_CHECK_FREE: u8 = 1 << 5;
const FLAG_TRANSLATION_OFFSET: u8 = 1 << 4;

/// `mlx5_wqe_umr_ctrl_seg.mkey_mask`.
const MASK_LEN: u64 = 1 << 0;
const MASK_START_ADDR: u64 = 1 << 6;
const MASK_MKEY: u64 = 1 << 13;
const MASK_QPN: u64 = 1 << 14;
const MASK_LOCAL_WRITE: u64 = 1 << 18;
const MASK_REMOTE_READ: u64 = 1 << 19;
const MASK_REMOTE_WRITE: u64 = 1 << 20;
const MASK_ATOMIC: u64 = 1 << 21;
const MASK_FREE: u64 = 1 << 29;

/// `mlx5_wqe_mkey_context_seg` bits.
const CTX_FREE: u8 = 1 << 6;
const CTX_REMOTE_READ: u8 = 1 << 4;
const CTX_REMOTE_WRITE: u8 = 1 << 5;
const CTX_ATOMIC: u8 = 1 << 6;

/// KLM octowords of a one-range bind (one entry, rounded up to four).
const KLM_OCTOWORDS: u16 = 4;
/// `qpn` of a window tied to no QP.
const NO_QPN: u32 = 0x00ff_ffff;

/// One memory window bind (`ibv_mw_bind` / `IBV_WR_BIND_MW`).
pub struct MwBind<'a, M: StableMemory> {
    pub wr_id: u64,
    pub mw: &'a Mw,
    /// The region the window exposes part of; same PD as the window and QP.
    pub mr: &'a Mr<M>,
    /// Start of the window (an address inside the MR; not zero based).
    pub addr: u64,
    /// Bytes of the window; 0 unbinds it (the key stays as it is).
    pub length: u64,
    /// Remote rights: any of REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.
    pub access: AccessFlags,
    pub signaled: bool,
}

/// `ibv_inc_rkey`: the key tag (low byte) advances, the index stays.
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

#[cold]
#[inline(never)]
fn bad(msg: impl Into<String>) -> Error {
    Error::argument(VERB, msg)
}

fn check<M: StableMemory>(qp_type: QpType, b: &MwBind<'_, M>) -> Result<()> {
    if !matches!(qp_type, QpType::Rc | QpType::Uc) {
        return Err(bad("windows bind through RC or UC QPs"));
    }
    let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if !remote.contains(b.access) {
        return Err(bad(format!(
            "{:?}: a window grants only remote read, write and atomic",
            b.access
        )));
    }
    if b.length == 0 {
        return Ok(());
    }
    let mr_pd = b.mr.pd();
    if !mr_pd.context().same_as(b.mw.pd().context()) || mr_pd.pdn() != b.mw.pd().pdn() {
        return Err(bad("the MR and the window belong to different PDs"));
    }
    if !b.mr.access().contains(AccessFlags::MW_BIND) {
        return Err(bad("the MR was registered without MW_BIND access"));
    }
    let start = b.mr.addr() as u64;
    let end = start + b.mr.len() as u64;
    let fits = b.addr >= start && b.addr.checked_add(b.length).is_some_and(|e| e <= end);
    if !fits {
        return Err(bad(format!(
            "[{:#x}, +{:#x}) lies outside the MR [{start:#x}, {end:#x})",
            b.addr, b.length
        )));
    }
    if b.length > u64::from(u32::MAX >> 1) {
        return Err(bad("a window spans at most 2 GiB (one KLM)"));
    }
    Ok(())
}

fn be_pair(a: u64, b: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&a.to_be_bytes());
    s[8..].copy_from_slice(&b.to_be_bytes());
    s
}

impl SendQueue {
    /// Writes and rings one bind WQE; returns the window's new R_Key (also
    /// recorded in the window). Argument errors leave the queue untouched.
    pub fn post_bind_mw<M: StableMemory>(&mut self, b: &MwBind<'_, M>) -> Result<u32> {
        check(self.shape.qp_type, b)?;
        let qpn = self.shape.qpn;
        let state = self.state.raw();
        if !sends_allowed(state) {
            return Err(send_refused(VERB, qpn, state));
        }
        let type2 = b.mw.mw_type() == MwType::Type2;
        let old = b.mw.rkey();
        let bind = b.length != 0;
        // An unbind keeps the key: it names the window as it is.
        let new = if bind { next_rkey(old) } else { old };
        let ds: u32 = if bind { 12 } else { 8 };
        let nbb = bbs_of(ds);
        let next = self.cur_post.wrapping_add(nbb);
        // The state takes sends: its limit is the SQ's size.
        if !has_room(
            next,
            self.cur_post,
            &self.ring,
            &self.state,
            self.track.sq_view(),
        ) {
            return Err(Error::QueueFull {
                verb: VERB,
                queue: "send queue",
            });
        }
        let base = self.cur_post as usize * WQEBB as usize;

        // UMR ctrl: which context fields change, and how many KLM octowords follow.
        let mut flags = FLAG_INLINE | FLAG_TRANSLATION_OFFSET;
        let mut mask = MASK_FREE | MASK_MKEY;
        if type2 {
            mask |= MASK_QPN;
        }
        let octowords = if bind {
            if type2 {
                // A type 2 window must be free (invalidated) to bind again.
                flags |= FLAG_CHECK_FREE;
            }
            mask |= MASK_LEN
                | MASK_START_ADDR
                | MASK_LOCAL_WRITE
                | MASK_REMOTE_READ
                | MASK_REMOTE_WRITE
                | MASK_ATOMIC;
            KLM_OCTOWORDS
        } else {
            0
        };
        let w0 = (u64::from(flags) << 56) | (u64::from(octowords) << 16);
        self.ring.write_seg(base + DS, be_pair(w0, mask));
        self.ring.write_seg(base + 2 * DS, [0; 16]);
        self.ring.write_seg(base + 3 * DS, [0; 16]);

        // Mkey context: free or the new range, rights and key tag.
        let tied = if type2 && bind { qpn } else { NO_QPN };
        let qpn_mkey = (tied << 8) | (new & 0xff);
        let (free, access) = if bind {
            let mut a = 0u8;
            if b.access.contains(AccessFlags::REMOTE_READ) {
                a |= CTX_REMOTE_READ;
            }
            if b.access.contains(AccessFlags::REMOTE_WRITE) {
                a |= CTX_REMOTE_WRITE;
            }
            if b.access.contains(AccessFlags::REMOTE_ATOMIC) {
                a |= CTX_ATOMIC;
            }
            (0u8, a)
        } else {
            (CTX_FREE, 0)
        };
        let c0 = (u64::from(free) << 56) | (u64::from(access) << 40) | u64::from(qpn_mkey);
        let (start, len) = if bind { (b.addr, b.length) } else { (0, 0) };
        self.ring.write_seg(base + 4 * DS, be_pair(c0, 0));
        self.ring.write_seg(base + 5 * DS, be_pair(start, len));
        self.ring.write_seg(base + 6 * DS, [0; 16]);
        self.ring.write_seg(base + 7 * DS, [0; 16]);

        // The one translation: the window's bytes in the MR, then padding.
        if bind {
            let klm = (b.length << 32) | u64::from(b.mr.lkey());
            self.ring.write_seg(base + 8 * DS, be_pair(klm, b.addr));
            for i in 9..12 {
                self.ring.write_seg(base + i * DS, [0; 16]);
            }
        }

        // Ctrl last; its imm names the window by its current key.
        let fm_ce_se = if b.signaled {
            self.shape.fm_ce_se | CTRL_SIGNALED
        } else {
            self.shape.fm_ce_se
        };
        let ctrl = ctrl_seg(
            self.cur_post,
            SendOpcode::Umr,
            qpn,
            ds,
            fm_ce_se.into(),
            old,
        );
        self.ring.write_seg(base, ctrl.to_be_bytes());
        let ctrl8 = ctrl8(ctrl);
        self.track.sq_view().record(self.cur_post, b.wr_id);
        self.cur_post = next;
        self.db.ring(self.cur_post, ctrl8);
        b.mw.set_rkey(new);
        Ok(new)
    }
}

impl Qp {
    /// Binds (or, with length 0, unbinds) a memory window through this QP:
    /// `ibv_bind_mw` for type 1, `IBV_WR_BIND_MW` for type 2. Returns the
    /// window's new R_Key; the completion (opcode BindMw) or a MW_BIND_ERR
    /// error completion comes on the send CQ.
    pub fn post_bind_mw<M: StableMemory>(&mut self, b: &MwBind<'_, M>) -> Result<u32> {
        if b.length != 0 && b.mw.pd().pdn() != self.pd().pdn() {
            return Err(bad("the window belongs to another PD than the QP"));
        }
        self.dp.sq.post_bind_mw(b)
    }
}
