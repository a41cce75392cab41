//! Work completions (`ibv_wc`).

use std::fmt;

use prm_layouts::{Cqe64, CqeSyndrome, ErrCqe, SendOpcode};

use super::LOW_24;

/// Completion status (`ibv_wc_status`), decoded from the error CQE syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    #[default]
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    RemAbortErr,
    /// Any other syndrome, or a CQE this library cannot make sense of.
    GeneralErr,
}

impl WcStatus {
    /// The status for an error CQE syndrome (prm-guide §6.4).
    pub fn from_syndrome(syndrome: u8) -> WcStatus {
        use CqeSyndrome as S;
        match CqeSyndrome::from_raw(syndrome) {
            Some(S::LocalLengthErr) => WcStatus::LocLenErr,
            Some(S::LocalQpOpErr) => WcStatus::LocQpOpErr,
            Some(S::LocalProtErr) => WcStatus::LocProtErr,
            Some(S::WrFlushErr) => WcStatus::WrFlushErr,
            Some(S::MwBindErr) => WcStatus::MwBindErr,
            Some(S::BadRespErr) => WcStatus::BadRespErr,
            Some(S::LocalAccessErr) => WcStatus::LocAccessErr,
            Some(S::RemoteInvalReqErr) => WcStatus::RemInvReqErr,
            Some(S::RemoteAccessErr) => WcStatus::RemAccessErr,
            Some(S::RemoteOpErr) => WcStatus::RemOpErr,
            Some(S::TransportRetryExcErr) => WcStatus::RetryExcErr,
            Some(S::RnrRetryExcErr) => WcStatus::RnrRetryExcErr,
            Some(S::RemoteAbortedErr) => WcStatus::RemAbortErr,
            None => WcStatus::GeneralErr,
        }
    }

    /// The verbs name without the `IBV_WC_` prefix (`LOC_LEN_ERR`).
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "SUCCESS",
            WcStatus::LocLenErr => "LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "LOC_PROT_ERR",
            WcStatus::WrFlushErr => "WR_FLUSH_ERR",
            WcStatus::MwBindErr => "MW_BIND_ERR",
            WcStatus::BadRespErr => "BAD_RESP_ERR",
            WcStatus::LocAccessErr => "LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "REM_ACCESS_ERR",
            WcStatus::RemOpErr => "REM_OP_ERR",
            WcStatus::RetryExcErr => "RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
            WcStatus::RemAbortErr => "REM_ABORT_ERR",
            WcStatus::GeneralErr => "GENERAL_ERR",
        }
    }

    /// `ibv_wc_status_str`.
    pub fn description(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::RemAbortErr => "remote aborted error",
            WcStatus::GeneralErr => "general error",
        }
    }

    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The requester opcode of each mlx5 WQE opcode: a table rather than a
/// match, one load instead of an indirect jump per polled completion. Every
/// u8 has an entry, so a lookup needs no bounds check.
const fn send_opcodes() -> [Option<WcOpcode>; 0x100] {
    use SendOpcode as S;
    let mut t = [None; 0x100];
    t[S::SendInval as usize] = Some(WcOpcode::Send);
    t[S::Send as usize] = Some(WcOpcode::Send);
    t[S::SendImm as usize] = Some(WcOpcode::Send);
    t[S::RdmaWrite as usize] = Some(WcOpcode::RdmaWrite);
    t[S::RdmaWriteImm as usize] = Some(WcOpcode::RdmaWrite);
    t[S::RdmaRead as usize] = Some(WcOpcode::RdmaRead);
    t[S::AtomicCs as usize] = Some(WcOpcode::CompSwap);
    t[S::AtomicMaskedCs as usize] = Some(WcOpcode::CompSwap);
    t[S::AtomicFa as usize] = Some(WcOpcode::FetchAdd);
    t[S::AtomicMaskedFa as usize] = Some(WcOpcode::FetchAdd);
    t[S::BindMw as usize] = Some(WcOpcode::BindMw);
    t[S::LocalInval as usize] = Some(WcOpcode::LocalInv);
    t[S::Umr as usize] = Some(WcOpcode::BindMw);
    t
}

const SEND_OPCODES: [Option<WcOpcode>; 0x100] = send_opcodes();

/// What completed (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    BindMw,
    LocalInv,
    /// A SEND arrived (with or without immediate).
    Recv,
    /// An RDMA WRITE with immediate arrived.
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// The verbs name without the `IBV_WC_` prefix (`RDMA_WRITE`).
    pub fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "SEND",
            WcOpcode::RdmaWrite => "RDMA_WRITE",
            WcOpcode::RdmaRead => "RDMA_READ",
            WcOpcode::CompSwap => "COMP_SWAP",
            WcOpcode::FetchAdd => "FETCH_ADD",
            WcOpcode::BindMw => "BIND_MW",
            WcOpcode::LocalInv => "LOCAL_INV",
            WcOpcode::Recv => "RECV",
            WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
        }
    }

    /// The requester opcode for the mlx5 WQE opcode a CQE reports.
    #[inline(always)]
    pub(crate) fn from_send_opcode(op: u8) -> Option<WcOpcode> {
        SEND_OPCODES[usize::from(op)]
    }

    /// A requester CQE's `sop_drop_qpn` (the WQE's opcode in the top byte,
    /// the QPN below) read for a fast path that takes only the requester
    /// opcodes whose completion's length is the CQE's byte count (all but
    /// the atomics, whose length is a fixed 8): the QPN and the opcode, or,
    /// for any other opcode, a value above 24 bits in place of the QPN,
    /// which equals no QPN. So one comparison with the QPN a fast path
    /// expects (or a track's key) checks both, and the copy of the byte
    /// count needs no test. The opcode is read as its own field, the
    /// dword's first byte in memory: a zero-extension of the loaded dword,
    /// where cutting it out of the byte-swapped value is a copy and a
    /// shift.
    #[inline(always)]
    pub(crate) fn counted_req(cqe: &Cqe64) -> (u32, WcOpcode) {
        let op = ErrCqe(cqe.0).s_wqe_opcode();
        let d = COUNTED_REQ[usize::from(op)];
        (cqe.sop_drop_qpn() ^ d.strip, d.opcode)
    }
}

/// Where a requester CQE's `sop_drop_qpn` holds the WQE's opcode: above
/// the 24-bit QPN.
const OPCODE_SHIFT: u32 = LOW_24.count_ones();

/// [`WcOpcode::counted_req`]'s entry for one opcode: what an xor with
/// `sop_drop_qpn` leaves the QPN (the opcode's bits, plus the lowest bit
/// above the QPN for an opcode the fast path leaves), and the opcode.
/// Eight bytes, so the index scales with no multiply.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CountedReq {
    strip: u32,
    opcode: WcOpcode,
}

const COUNTED_REQ: [CountedReq; 0x100] = {
    let mut t = [CountedReq {
        strip: 0,
        opcode: WcOpcode::Send,
    }; 0x100];
    let mut i = 0;
    while i < t.len() {
        let counted = match SEND_OPCODES[i] {
            Some(WcOpcode::CompSwap | WcOpcode::FetchAdd) | None => None,
            Some(o) => Some(o),
        };
        t[i] = match counted {
            Some(opcode) => CountedReq {
                strip: (i as u32) << OPCODE_SHIFT,
                opcode,
            },
            None => CountedReq {
                strip: (i as u32) << OPCODE_SHIFT ^ (LOW_24 + 1),
                opcode: WcOpcode::Send,
            },
        };
        i += 1;
    }
    t
};

/// One work completion. 32 bytes, laid out so that a successful requester
/// completion (wr_id, length and QPN, the rest zero) is written in few
/// stores: the fields it sets first, the ones it leaves zero together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Wc {
    pub wr_id: u64,
    /// Bytes received (responder), read (RDMA READ) or 8 (atomics).
    pub byte_len: u32,
    /// The local QP this completion belongs to.
    pub qp_num: u32,
    /// The immediate of SEND_WITH_IMM / RDMA_WRITE_WITH_IMM, host order;
    /// meaningful only with `has_imm` (see [`Wc::imm`]), 0 otherwise.
    pub imm_data: u32,
    /// Responder: the sender's QPN (meaningful for UD).
    pub src_qp: u32,
    pub opcode: WcOpcode,
    pub status: WcStatus,
    /// The device's vendor syndrome of an error completion.
    pub vendor_err: u8,
    /// The hardware syndrome of an error completion (`hw_err_synd`).
    pub hw_err_synd: u8,
    /// The hardware syndrome's type byte (`hw_synd_type`, type in the high nibble).
    pub hw_synd_type: u8,
    /// `imm_data` holds an immediate (`IBV_WC_WITH_IMM`).
    pub has_imm: bool,
    /// Responder: the sender set the solicited-event bit.
    pub solicited: bool,
    /// Responder (UD): a GRH precedes the payload.
    pub grh: bool,
}

const _: () = assert!(std::mem::size_of::<Wc>() == 32);

impl Wc {
    /// A successful requester completion: these fields, the rest zero.
    #[inline(always)]
    pub(crate) fn req(wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) -> Wc {
        Wc {
            wr_id,
            opcode,
            byte_len,
            qp_num,
            ..Wc::default()
        }
    }

    /// Overwrites this with [`Wc::req`]. All zero first, then the fields
    /// set: the zeros go out as one wide store rather than one per field
    /// around the opcode.
    #[inline(always)]
    pub(crate) fn set_req(&mut self, wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) {
        *self = Wc::default();
        self.wr_id = wr_id;
        self.byte_len = byte_len;
        self.qp_num = qp_num;
        self.opcode = opcode;
    }

    pub fn is_ok(&self) -> bool {
        self.status.is_ok()
    }

    /// The immediate, if the completion carries one.
    pub fn imm(&self) -> Option<u32> {
        self.has_imm.then_some(self.imm_data)
    }
}

/// `wr_id 7 RDMA_WRITE: SUCCESS, 64 bytes`; an error completion adds every
/// syndrome the device gave:
/// `wr_id 7 RDMA_WRITE: REM_ACCESS_ERR (remote access error), vendor syndrome 0x88, hw syndrome 0x12 type 0x1`.
impl fmt::Display for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wr_id {} {}: {}",
            self.wr_id,
            self.opcode.name(),
            self.status
        )?;
        if self.is_ok() {
            return write!(f, ", {} bytes", self.byte_len);
        }
        write!(
            f,
            " ({}), vendor syndrome {:#x}, hw syndrome {:#x} type {:#x}",
            self.status.description(),
            self.vendor_err,
            self.hw_err_synd,
            self.hw_synd_type >> 4
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every opcode byte: a counted requester opcode gives back the QPN and
    /// its opcode; any other (atomics, undefined values) a value that is no
    /// QPN, nor a dead track's key.
    #[test]
    fn counted_req_gives_the_qpn_only_for_counted_opcodes() {
        for op in 0..=u8::MAX {
            for qpn in [0, 1, 0x123, LOW_24] {
                let cqe = Cqe64::new().with_sop_drop_qpn(u32::from(op) << OPCODE_SHIFT | qpn);
                let (got, opcode) = WcOpcode::counted_req(&cqe);
                match WcOpcode::from_send_opcode(op) {
                    Some(WcOpcode::CompSwap | WcOpcode::FetchAdd) | None => {
                        assert!(got > LOW_24 && got != u32::MAX, "{op:#x}: {got:#x}")
                    }
                    Some(o) => assert_eq!((got, opcode), (qpn, o), "{op:#x}"),
                }
            }
        }
    }
}
