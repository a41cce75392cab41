//! Completion entries: building CQE64 / error CQEs (prm-guide §6.1, §6.4)
//! and publishing them into a CQ ring with the owner bit of the producer's
//! wrap parity.

use prm_layouts::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};

use super::cache::Cache;
use super::dma::Span;
use super::notify;
use crate::sim::fw::state::State;

/// `cqc.status` after an overrun.
const CQ_STATUS_OVERFLOW: u8 = 0x9;

/// The fields of one completion; everything else in the CQE is zero.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    pub(crate) opcode: CqeOpcode,
    /// Solicited event (responder CQEs of SE sends).
    pub(crate) se: bool,
    pub(crate) qpn: u32,
    /// Requester: the WQE's send opcode (sop_drop_qpn[31:24]).
    pub(crate) send_opcode: u8,
    pub(crate) wqe_counter: u16,
    pub(crate) byte_cnt: u32,
    /// The immediate as it sat in the WQE (already network order).
    pub(crate) imm: [u8; 4],
    /// flags_rqpn: source QPN and GRH bits.
    pub(crate) flags_rqpn: u32,
    /// user_index (CQE version 1) in srqn_uidx.
    pub(crate) user_index: u32,
    /// Error CQEs only.
    pub(crate) syndrome: Option<CqeSyndrome>,
}

impl Default for Completion {
    fn default() -> Completion {
        Completion {
            opcode: CqeOpcode::Req,
            se: false,
            qpn: 0,
            send_opcode: 0,
            wqe_counter: 0,
            byte_cnt: 0,
            imm: [0; 4],
            flags_rqpn: 0,
            user_index: 0,
            syndrome: None,
        }
    }
}

impl Completion {
    fn encode(&self) -> Cqe64 {
        let mut c = Cqe64::new()
            .with_srqn_uidx(self.user_index & 0x00ff_ffff)
            .with_wqe_counter(self.wqe_counter)
            .with_sop_drop_qpn((u32::from(self.send_opcode) << 24) | (self.qpn & 0x00ff_ffff))
            .with_opcode(self.opcode.raw())
            .with_se(u8::from(self.se));
        if self.is_error() {
            let mut e = ErrCqe(c.0);
            e.set_syndrome(self.syndrome.map_or(0, CqeSyndrome::raw));
            c = Cqe64(e.0);
        } else {
            c.set_flags_rqpn(self.flags_rqpn);
            c.set_imm_inval_pkey(u32::from_be_bytes(self.imm));
            c.set_byte_cnt(self.byte_cnt);
        }
        c
    }

    fn is_error(&self) -> bool {
        matches!(self.opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr)
    }
}

/// The memory of one CQ: its ring and its doorbell record, resolved from
/// the CQ's context and UMEMs. Commands alone change either (and bump
/// the firmware epoch), so a [`Cache`] keeps them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CqMemory {
    ring: Span,
    dbr: Span,
}

/// Where CQ `cqn`'s entries and doorbell record are; `None` when the CQ
/// or either memory is gone.
pub(crate) fn memory(st: &State, cqn: u32) -> Option<CqMemory> {
    let cq = &st.cq.peek(cqn)?.obj;
    let n = 1u64 << cq.cqc.log_cq_size();
    let ring = st
        .umem
        .peek(cq.umem)
        .and_then(|u| Span::of_umem(&u.obj, cq.umem_offset, n * cq.cqe_bytes()))?;
    let dbr = st
        .umem
        .peek(cq.dbr_umem)
        .and_then(|u| Span::of_umem(&u.obj, cq.dbr_addr, 8))?;
    Some(CqMemory { ring, dbr })
}

/// Writes `cqe` into CQ `cqn`. Returns false when the completion was
/// dropped: no such CQ, ring memory gone, or the CQ is full (the CQ then
/// enters the overflow state and drops every later completion, as
/// firmware does for a CQ without overrun-ignore).
pub(crate) fn push(st: &mut State, cqn: u32, cqe: &Completion) -> bool {
    match memory(st, cqn) {
        Some(m) => push_to(st, cqn, m, cqe),
        None => false,
    }
}

/// [`push`], with the CQ's memory as `cache` keeps it.
pub(crate) fn push_cached(st: &mut State, cache: &mut Cache, cqn: u32, cqe: &Completion) -> bool {
    match cache.cq_memory(st, cqn) {
        Some(m) => push_to(st, cqn, m, cqe),
        None => false,
    }
}

/// [`push`] into `mem`, CQ `cqn`'s memory.
fn push_to(st: &mut State, cqn: u32, mem: CqMemory, cqe: &Completion) -> bool {
    let Some(e) = st.cq.peek_mut(cqn) else {
        return false;
    };
    let cq = &mut e.obj;
    if cq.cqc.status() != 0 {
        return false;
    }
    let log = cq.cqc.log_cq_size();
    let n = 1u32 << log;
    let stride = cq.cqe_bytes();
    let pi = cq.cqc.producer_counter();
    let ci = mem.dbr.read_be32(0).unwrap_or(0) & 0x00ff_ffff;
    let oi = cq.cqc.oi() == 1;
    let overrun = pi.wrapping_sub(ci) & 0x00ff_ffff >= n;
    if overrun && !oi {
        cq.cqc.set_status(CQ_STATUS_OVERFLOW);
        notify::overrun(st, cqn);
        return false;
    }
    let mut c = cqe.encode();
    c.set_owner(((pi >> log) & 1) as u8);
    let bytes = c.0;
    // A 128-byte CQE carries the CQE64 in its second half.
    let at = (pi & (n - 1)) as usize * stride as usize + (stride as usize - 64);
    if !mem.ring.write_publish(at, &bytes) {
        return false;
    }
    cq.cqc.set_producer_counter((pi + 1) & 0x00ff_ffff);
    let armed = cq.arm.is_some();
    let solicited = cqe.se || cqe.is_error();
    // The common case (not armed, not solicited) costs no second lookup.
    if armed || solicited {
        notify::completed(st, cqn, pi, solicited);
    }
    true
}
