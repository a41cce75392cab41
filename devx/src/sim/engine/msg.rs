//! What travels over the emulated link between a requester QP and a
//! responder QP: one message per WQE and the responder's answer.

use std::time::Duration;

/// The operation a message asks the responder to perform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Send,
    Write,
    Read,
    CmpSwap,
    FetchAdd,
}

/// One request, with its payload (or, on the way back, the read data or
/// the atomic's original value).
#[derive(Debug, Clone)]
pub(crate) struct Msg {
    pub(crate) op: Op,
    /// Present for SEND_IMM and WRITE_IMM, as it sat in the WQE.
    pub(crate) imm: Option<[u8; 4]>,
    pub(crate) solicited: bool,
    pub(crate) service: u8,
    pub(crate) src_qpn: u32,
    pub(crate) dst_qpn: u32,
    pub(crate) src_gid: [u8; 16],
    pub(crate) dst_gid: [u8; 16],
    /// UD: the q_key the datagram carries.
    pub(crate) qkey: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    /// READ: bytes asked for.
    pub(crate) len: u64,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) data: Vec<u8>,
    /// WRITE: whether its payload was placed as its packets arrived (the
    /// network responder) instead of travelling in `data`.
    pub(crate) placed: Placed,
}

/// How a WRITE's payload reaches the target memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// It is in the message's `data`.
    No,
    /// Already in place, all `len` bytes, every piece through the key
    /// checks of the whole range.
    Done,
    /// A piece failed the key checks: nothing more was placed, and the
    /// message fails as a WRITE with that key would.
    Refused,
}

impl Msg {
    pub(crate) fn new(op: Op, data: Vec<u8>) -> Msg {
        Msg {
            op,
            imm: None,
            solicited: false,
            service: 0,
            src_qpn: 0,
            dst_qpn: 0,
            src_gid: [0; 16],
            dst_gid: [0; 16],
            qkey: 0,
            raddr: 0,
            rkey: 0,
            len: 0,
            swap_add: 0,
            compare: 0,
            data,
            placed: Placed::No,
        }
    }
}

/// The responder's answer, as the requester's transport sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Done (or, for unreliable transports, gone without a trace).
    Ack,
    /// No receive WQE: try again after `Duration`.
    Rnr(Duration),
    /// A NAK carrying the requester's error syndrome.
    Nak(prm_layouts::CqeSyndrome),
}
