//! Polling a CQ (prm-guide §6): take entries the owner bit hands to software,
//! decode them into work completions, publish the consumer index.

use std::sync::Arc;

use super::ring::{DbRec, Entry64, Ring};
use super::track::{HotSq, PendingTail, PollCache, Registry};
use super::wc::{Wc, WcOpcode, WcStatus};
use crate::cq::{Cq, CQE_SIZE};

/// CQE opcodes (`op_own[7:4]`).
const REQ: u8 = 0x0;
const RESP_WR_IMM: u8 = 0x1;
const RESP_SEND: u8 = 0x2;
const RESP_SEND_IMM: u8 = 0x3;
const RESP_SEND_INV: u8 = 0x4;
const RESIZE_CQ: u8 = 0x5;
const REQ_ERR: u8 = 0xd;
const RESP_ERR: u8 = 0xe;
const INVALID: u8 = 0xf;
/// `op_own[3:2]` of a compressed CQE; never enabled by this library.
const FORMAT_COMPRESSED: u8 = 3;
/// `dbrec[0]`: set_ci.
const SET_CI: usize = 0;

/// One 64-byte CQE as the device wrote it, with its fields by name
/// (prm-guide §6.1, §6.4).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawCqe(pub [u8; 64]);

impl std::fmt::Debug for RawCqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCqe")
            .field("opcode", &self.opcode())
            .field("qpn", &self.qpn())
            .field("wqe_counter", &self.wqe_counter())
            .field("byte_cnt", &self.byte_cnt())
            .field("owner", &self.owner())
            .finish()
    }
}

impl RawCqe {
    #[inline(always)]
    fn be32(&self, at: usize) -> u32 {
        u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        self.0[63]
    }

    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own() >> 4
    }

    #[inline(always)]
    pub fn format(&self) -> u8 {
        (self.op_own() >> 2) & 3
    }

    #[inline(always)]
    pub fn solicited(&self) -> bool {
        self.op_own() & 2 != 0
    }

    #[inline(always)]
    pub fn owner(&self) -> u8 {
        self.op_own() & 1
    }

    /// The software-ownership rule for consumer counter `ci` in a ring of
    /// `2^log_size` entries.
    #[inline(always)]
    pub fn is_sw_owned(op_own: u8, ci: u32, log_size: u32) -> bool {
        op_own >> 4 != INVALID && u32::from(op_own & 1) == (ci >> log_size) & 1
    }

    /// `sop_drop_qpn[23:0]` (`s_wqe_opcode_qpn` in error CQEs).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.be32(56) & 0xff_ffff
    }

    /// Requester CQEs: the mlx5 opcode of the completed (or failed) WQE.
    #[inline(always)]
    pub fn send_opcode(&self) -> u8 {
        self.0[56]
    }

    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        u16::from_be_bytes([self.0[60], self.0[61]])
    }

    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.be32(44)
    }

    #[inline(always)]
    pub fn imm_inval_pkey(&self) -> u32 {
        self.be32(36)
    }

    #[inline(always)]
    pub fn srqn_uidx(&self) -> u32 {
        self.be32(32) & 0xff_ffff
    }

    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.be32(24)
    }

    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        self.0[55]
    }

    #[inline(always)]
    pub fn vendor_err_synd(&self) -> u8 {
        self.0[54]
    }
}

/// CQE byte offsets the fast path reads (prm-guide §6.1).
const BYTE_CNT: usize = 44;
const SOP_DROP_QPN: usize = 56;
const WQE_COUNTER: usize = 60;

/// Decodes the software-owned CQE `e` if it is the common
/// case, a successful requester completion of a known opcode on the cached
/// QP, reading just the fields it needs from the ring; `None`, touching
/// nothing, for anything else, which the general path then decodes.
#[inline(always)]
fn complete_hot(e: Entry64, op_own: u8, hot: HotSq<'_>, pending: &mut PendingTail) -> Option<Wc> {
    // Opcode REQ and not the compressed format.
    if op_own >> 4 != REQ || (op_own >> 2) & 3 == FORMAT_COMPRESSED {
        return None;
    }
    let sop = e.read_be32(SOP_DROP_QPN);
    let opcode = WcOpcode::from_send_opcode((sop >> 24) as u8)?;
    let qpn = sop & 0xff_ffff;
    let (wr_id, next) = hot.slot(qpn, e.read_be16(WQE_COUNTER))?;
    *pending = Some(next);
    let byte_len = match opcode {
        WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
        _ => e.read_be32(BYTE_CNT),
    };
    Some(Wc {
        wr_id,
        opcode,
        byte_len,
        qp_num: qpn,
        ..Wc::default()
    })
}

/// Decodes any software-owned CQE; `None` for a resize marker. Takes and
/// returns the pending SQ tail by value, so the fast path's copy of it is
/// never spilled for this call.
#[inline(never)]
fn complete_any(
    c: &RawCqe,
    cache: &mut PollCache,
    mut pending: PendingTail,
) -> (Option<Wc>, PendingTail) {
    let wc = decode_any(c, cache, &mut pending);
    (wc, pending)
}

#[inline(always)]
fn decode_any(c: &RawCqe, cache: &mut PollCache, pending: &mut PendingTail) -> Option<Wc> {
    let op = c.opcode();
    let mut wc = Wc {
        qp_num: c.qpn(),
        ..Wc::default()
    };
    if op == RESIZE_CQ {
        return None;
    }
    let known = match op {
        REQ | REQ_ERR | RESP_WR_IMM | RESP_SEND | RESP_SEND_IMM | RESP_SEND_INV | RESP_ERR
            if c.format() != FORMAT_COMPRESSED =>
        {
            cache.lookup(c.qpn(), pending).is_some()
        }
        _ => false,
    };
    if !known {
        // Garbage, a format we never enable, or a QP nobody knows.
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    }
    if op == REQ_ERR || op == RESP_ERR {
        wc.status = WcStatus::from_syndrome(c.syndrome());
        wc.vendor_err = c.vendor_err_synd();
    }
    if op == REQ || op == REQ_ERR {
        let Some(wr_id) = cache.sq_retire(c.qpn(), c.wqe_counter(), pending) else {
            wc.status = WcStatus::GeneralErr;
            return Some(wc);
        };
        wc.wr_id = wr_id;
        match WcOpcode::from_send_opcode(c.send_opcode()) {
            Some(o) => wc.opcode = o,
            None if op == REQ => wc.status = WcStatus::GeneralErr,
            None => {}
        }
        wc.byte_len = match wc.opcode {
            WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
            _ => c.byte_cnt(),
        };
        return Some(wc);
    }
    let Some(track) = cache.lookup(c.qpn(), pending) else {
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    };
    let wr_id = match &track.srq {
        Some(srq) => Some(srq.retire(c.wqe_counter())),
        None => track.rq_retire(),
    };
    let Some(wr_id) = wr_id else {
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    };
    wc.wr_id = wr_id;
    wc.opcode = if op == RESP_WR_IMM {
        WcOpcode::RecvRdmaWithImm
    } else {
        WcOpcode::Recv
    };
    if op == RESP_WR_IMM || op == RESP_SEND_IMM {
        wc.imm_data = c.imm_inval_pkey();
        wc.has_imm = true;
    }
    if op != RESP_ERR {
        wc.byte_len = c.byte_cnt();
        wc.src_qp = c.flags_rqpn() & 0xff_ffff;
        wc.grh = (c.flags_rqpn() >> 28) & 3 != 0;
        wc.solicited = c.solicited();
    }
    Some(wc)
}

/// A CQ's poller state: its QP cache and doorbell record.
pub(crate) struct Poller {
    cache: PollCache,
    dbrec: DbRec,
}

impl Poller {
    /// `dbr_addr`: the CQ's doorbell record, which lives as long as the CQ.
    pub(crate) fn new(reg: Arc<Registry>, dbr_addr: usize) -> Poller {
        Poller {
            cache: PollCache::new(reg),
            // SAFETY: the CQ's 64-byte doorbell record UMEM, owned by the CQ
            // that owns this poller and never moved (resize keeps it).
            dbrec: unsafe { DbRec::new(dbr_addr) },
        }
    }
}

impl Cq {
    /// `ibv_poll_cq`: fills `wc` from the front with up to `wc.len()`
    /// completions and returns how many. Updates the consumer index in the
    /// doorbell record once per call. `&mut`: one consumer at a time.
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        let log = self.log_size;
        let n = 1u32 << log;
        // SAFETY: `ring_addr` is this CQ's current ring of `n` 64-byte
        // entries, kept mapped by the CQ; `resize` (which moves it) needs
        // `&mut self` too, so it cannot run during this call.
        let ring = unsafe { Ring::new(self.ring_addr, n as usize * CQE_SIZE) };
        let mut got = 0;
        let start = self.ci;
        // A local copy: stores into `wc` would otherwise make the compiler
        // reload the counter from `self` for every entry.
        let mut ci = start;
        let mut pending: PendingTail = None;
        let mut hot = self.dp.cache.hot_sq();
        while got < wc.len() {
            let e = ring.entry64((ci & (n - 1)) as usize * CQE_SIZE);
            let op_own = e.load_acquire(CQE_SIZE - 1);
            if !RawCqe::is_sw_owned(op_own, ci, log) {
                break;
            }
            ci = ci.wrapping_add(1);
            if let Some(w) = hot.and_then(|h| complete_hot(e, op_own, h, &mut pending)) {
                wc[got] = w;
                got += 1;
                continue;
            }
            let raw = RawCqe(e.read64b());
            let (w, tail) = complete_any(&raw, &mut self.dp.cache, pending);
            pending = tail;
            if let Some(w) = w {
                wc[got] = w;
                got += 1;
            }
            // The general path may have moved the cache to another QP.
            hot = self.dp.cache.hot_sq();
        }
        if ci != start {
            // SQ room first, then the CQ's: the order per-entry retiring had.
            self.dp.cache.publish(pending);
            self.ci = ci;
            self.dp.dbrec.store(SET_CI, ci & 0xff_ffff);
        }
        got
    }

    /// The consumer counter (free running): CQEs taken so far.
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Reads the consumer index the doorbell record holds (`set_ci`).
    pub fn doorbell_ci(&self) -> u32 {
        self.dp.dbrec.load(SET_CI)
    }
}
