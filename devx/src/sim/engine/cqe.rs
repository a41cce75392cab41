//! Completion entries: building CQE64 / error CQEs (prm-guide §6.1, §6.4)
//! and publishing them into a CQ ring with the owner bit of the producer's
//! wrap parity.

use super::dma::Span;
use super::notify;
use crate::sim::fw::state::State;

/// CQE opcodes (op_own[7:4]).
pub mod op {
    pub const REQ: u8 = 0x0;
    pub const RESP_WR_IMM: u8 = 0x1;
    pub const RESP_SEND: u8 = 0x2;
    pub const RESP_SEND_IMM: u8 = 0x3;
    pub const REQ_ERR: u8 = 0xd;
    pub const RESP_ERR: u8 = 0xe;
}

/// Error CQE syndromes (§6.4).
pub mod syn {
    pub const LOCAL_LENGTH: u8 = 0x01;
    pub const LOCAL_QP_OP: u8 = 0x02;
    pub const LOCAL_PROT: u8 = 0x04;
    pub const WR_FLUSH: u8 = 0x05;
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    pub const REMOTE_ACCESS: u8 = 0x13;
    pub const REMOTE_OP: u8 = 0x14;
    pub const TRANSPORT_RETRY_EXC: u8 = 0x15;
    pub const RNR_RETRY_EXC: u8 = 0x16;
}

/// `cqc.status` after an overrun.
const CQ_STATUS_OVERFLOW: u8 = 0x9;

/// The fields of one completion; everything else in the CQE is zero.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completion {
    pub opcode: u8,
    /// Solicited event (responder CQEs of SE sends).
    pub se: bool,
    pub qpn: u32,
    /// Requester: the WQE's send opcode (sop_drop_qpn[31:24]).
    pub send_opcode: u8,
    pub wqe_counter: u16,
    pub byte_cnt: u32,
    /// The immediate as it sat in the WQE (already network order).
    pub imm: [u8; 4],
    /// flags_rqpn: source QPN and GRH bits.
    pub flags_rqpn: u32,
    /// user_index (CQE version 1) in srqn_uidx.
    pub user_index: u32,
    /// Error CQEs only.
    pub syndrome: u8,
}

impl Completion {
    fn encode(&self) -> [u8; 64] {
        let mut c = [0u8; 64];
        let put32 =
            |c: &mut [u8; 64], at: usize, v: u32| c[at..at + 4].copy_from_slice(&v.to_be_bytes());
        put32(&mut c, 32, self.user_index & 0x00ff_ffff);
        c[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        let qpn = self.qpn & 0x00ff_ffff;
        if matches!(self.opcode, op::REQ_ERR | op::RESP_ERR) {
            c[55] = self.syndrome;
            put32(&mut c, 56, (u32::from(self.send_opcode) << 24) | qpn);
        } else {
            put32(&mut c, 24, self.flags_rqpn);
            c[36..40].copy_from_slice(&self.imm);
            put32(&mut c, 44, self.byte_cnt);
            put32(&mut c, 56, (u32::from(self.send_opcode) << 24) | qpn);
        }
        c[63] = (self.opcode << 4) | (u8::from(self.se) << 1);
        c
    }
}

/// Writes `cqe` into CQ `cqn`. Returns false when the completion was
/// dropped: no such CQ, ring memory gone, or the CQ is full (the CQ then
/// enters the overflow state and drops every later completion, as
/// firmware does for a CQ without overrun-ignore).
pub fn push(st: &mut State, cqn: u32, cqe: &Completion) -> bool {
    let Some(e) = st.cq.peek(cqn) else {
        return false;
    };
    let cq = &e.obj;
    if cq.cqc.status() != 0 {
        return false;
    }
    let log = cq.cqc.log_cq_size();
    let n = 1u32 << log;
    let stride = cq.cqe_bytes();
    let Some(ring) = st
        .umem
        .peek(cq.umem)
        .and_then(|u| Span::of_umem(&u.obj, cq.umem_offset, u64::from(n) * stride))
    else {
        return false;
    };
    let Some(dbr) = st
        .umem
        .peek(cq.dbr_umem)
        .and_then(|u| Span::of_umem(&u.obj, cq.dbr_addr, 8))
    else {
        return false;
    };
    let pi = cq.cqc.producer_counter();
    let ci = dbr.read_be32(0).unwrap_or(0) & 0x00ff_ffff;
    let oi = cq.cqc.oi() == 1;
    let overrun = pi.wrapping_sub(ci) & 0x00ff_ffff >= n;
    if overrun && !oi {
        if let Some(e) = st.cq.peek_mut(cqn) {
            e.obj.cqc.set_status(CQ_STATUS_OVERFLOW);
        }
        notify::overrun(st, cqn);
        return false;
    }
    let mut bytes = cqe.encode();
    bytes[63] |= ((pi >> log) & 1) as u8;
    // A 128-byte CQE carries the CQE64 in its second half.
    let at = (pi & (n - 1)) as usize * stride as usize + (stride as usize - 64);
    if !ring.write_publish(at, &bytes) {
        return false;
    }
    let armed = match st.cq.peek_mut(cqn) {
        Some(e) => {
            e.obj.cqc.set_producer_counter((pi + 1) & 0x00ff_ffff);
            e.obj.arm.is_some()
        }
        None => false,
    };
    let solicited = cqe.se || matches!(cqe.opcode, op::REQ_ERR | op::RESP_ERR);
    // The common case (not armed, not solicited) costs no second lookup.
    if armed || solicited {
        notify::completed(st, cqn, pi, solicited);
    }
    true
}
