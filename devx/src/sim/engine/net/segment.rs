//! Building the packets of one message: opcode per segment, headers, and
//! the 24-bit PSN arithmetic both transport sides share.

use std::net::IpAddr;

use super::super::msg::{Msg, Op};
use crate::sim::wire::{
    Aeth, AtomicAckEth, AtomicEth, Bth, BthOpcode, Headers, ImmDt, NetPort, Operation, Reth,
    Service, Syndrome,
};

const PSN_BITS: u32 = 24;
const PSN_MASK: u32 = (1 << PSN_BITS) - 1;

/// `psn + n`, modulo 2^24.
pub(crate) fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// `a - b` as a signed distance in the 24-bit PSN space.
pub(crate) fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << (32 - PSN_BITS)) as i32) >> (32 - PSN_BITS)
}

/// Packets a message of `len` bytes takes at path MTU `mtu` (at least one).
pub(crate) fn packets(len: usize, mtu: usize) -> u32 {
    len.div_ceil(mtu).max(1) as u32
}

/// Which part of a message a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    First,
    Middle,
    Last,
    Only,
}

impl Part {
    pub(crate) fn of(i: u32, n: u32) -> Part {
        match (i == 0, i + 1 == n) {
            (true, true) => Part::Only,
            (true, false) => Part::First,
            (false, false) => Part::Middle,
            (false, true) => Part::Last,
        }
    }

    /// Whether the packet starts a message.
    pub(crate) fn starts(self) -> bool {
        matches!(self, Part::First | Part::Only)
    }

    /// Whether the packet ends a message.
    pub(crate) fn ends(self) -> bool {
        matches!(self, Part::Last | Part::Only)
    }
}

/// The message kind and part of a request or read-response operation.
pub(crate) fn classify(op: Operation) -> Option<(Op, Part)> {
    use Operation::*;
    Some(match op {
        SendFirst => (Op::Send, Part::First),
        SendMiddle => (Op::Send, Part::Middle),
        SendLast | SendLastImm => (Op::Send, Part::Last),
        SendOnly | SendOnlyImm => (Op::Send, Part::Only),
        WriteFirst => (Op::Write, Part::First),
        WriteMiddle => (Op::Write, Part::Middle),
        WriteLast | WriteLastImm => (Op::Write, Part::Last),
        WriteOnly | WriteOnlyImm => (Op::Write, Part::Only),
        ReadRequest => (Op::Read, Part::Only),
        CompareSwap => (Op::CmpSwap, Part::Only),
        FetchAdd => (Op::FetchAdd, Part::Only),
        _ => return None,
    })
}

fn operation(op: Op, part: Part, imm: bool) -> Operation {
    use Operation::*;
    match (op, part, imm) {
        (Op::Send, Part::First, _) => SendFirst,
        (Op::Send, Part::Middle, _) => SendMiddle,
        (Op::Send, Part::Last, false) => SendLast,
        (Op::Send, Part::Last, true) => SendLastImm,
        (Op::Send, Part::Only, false) => SendOnly,
        (Op::Send, Part::Only, true) => SendOnlyImm,
        (Op::Write, Part::First, _) => WriteFirst,
        (Op::Write, Part::Middle, _) => WriteMiddle,
        (Op::Write, Part::Last, false) => WriteLast,
        (Op::Write, Part::Last, true) => WriteLastImm,
        (Op::Write, Part::Only, false) => WriteOnly,
        (Op::Write, Part::Only, true) => WriteOnlyImm,
        (Op::Read, _, _) => ReadRequest,
        (Op::CmpSwap, _, _) => CompareSwap,
        (Op::FetchAdd, _, _) => FetchAdd,
    }
}

/// Where a message's packets go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dest {
    pub(crate) ip: IpAddr,
    pub(crate) qpn: u32,
    pub(crate) service: Service,
    pub(crate) mtu: usize,
}

fn opcode(service: Service, op: Operation) -> Option<BthOpcode> {
    BthOpcode::new(service, op).ok()
}

/// Request packets a requester sends ahead of the first unacknowledged
/// one at most; its bytes are bounded too, by what the port's socket
/// buffers hold (`NetPort::window_bytes`): many small messages fill the
/// packets, big ones the bytes. With an ACK asked for every quarter of
/// the window's packets (half of its bytes), the window keeps moving.
pub(crate) const WINDOW: u32 = 256;
/// An ACK is asked for at least every this many packets.
pub(crate) const ACK_EVERY: u32 = WINDOW / 4;
/// Bytes of headers (IP, UDP, BTH, RETH, ICRC) the window counts per packet.
pub(crate) const PACKET_OVERHEAD: usize = 64;

/// Request packets `msg` takes at the destination's MTU.
pub(crate) fn request_packets(msg: &Msg, mtu: usize) -> u32 {
    match msg.op {
        Op::Send | Op::Write => packets(msg.data.len(), mtu),
        _ => 1,
    }
}

/// Sends request packet `i` of `msg`, whose first PSN is `first`; with
/// `ack` (RC) it asks for an ACK.
pub(crate) fn send_request(port: &NetPort, d: &Dest, msg: &Msg, first: u32, i: u32, ack: bool) {
    let n = request_packets(msg, d.mtu);
    let psn = psn_add(first, i);
    let part = Part::of(i, n);
    let imm = part.ends() && msg.imm.is_some();
    let Some(opc) = opcode(d.service, operation(msg.op, part, imm)) else {
        return;
    };
    let mut bth = Bth::new(opc.raw(), d.qpn, psn);
    bth.set_solicited(part.ends() && msg.solicited);
    bth.set_ack_req(ack && d.service == Service::Rc);
    let mut h = Headers::new(bth);
    let x = opc.extensions();
    if x.reth {
        let len = match msg.op {
            Op::Read => msg.len,
            _ => msg.data.len() as u64,
        };
        h.reth = Some(Reth::new(msg.raddr, msg.rkey, len as u32));
    }
    if x.atomic_eth {
        h.atomic_eth = Some(AtomicEth::new(
            msg.raddr,
            msg.rkey,
            msg.swap_add,
            msg.compare,
        ));
    }
    if imm {
        h.imm = msg.imm.map(|imm| ImmDt { imm });
    }
    let lo = (i as usize * d.mtu).min(msg.data.len());
    let hi = (lo + d.mtu).min(msg.data.len());
    let payload = if x.payload {
        &msg.data[lo..hi]
    } else {
        &[][..]
    };
    // An encode error cannot happen for these sizes; a lost packet is
    // what the transport recovers from anyway.
    let _ = port.send(d.ip, &h, payload);
}

/// Sends a READ request for `len` bytes at `va` with PSN `psn` (the rest
/// of a READ whose first responses arrived).
pub(crate) fn send_read_request(port: &NetPort, d: &Dest, psn: u32, va: u64, rkey: u32, len: u64) {
    let Some(opc) = opcode(d.service, Operation::ReadRequest) else {
        return;
    };
    let mut bth = Bth::new(opc.raw(), d.qpn, psn);
    bth.set_ack_req(true);
    let mut h = Headers::new(bth);
    h.reth = Some(Reth::new(va, rkey, len as u32));
    let _ = port.send(d.ip, &h, &[]);
}

/// Sends an ACK or NAK for `psn`.
pub(crate) fn send_ack(port: &NetPort, d: &Dest, psn: u32, s: Syndrome, msn: u32) {
    let Some(opc) = opcode(Service::Rc, Operation::Acknowledge) else {
        return;
    };
    let mut h = Headers::new(Bth::new(opc.raw(), d.qpn, psn));
    h.aeth = Some(Aeth::new(s, msn));
    let _ = port.send(d.ip, &h, &[]);
}

/// Sends READ response packets with `data` from PSN `first`.
pub(crate) fn send_read_response(port: &NetPort, d: &Dest, first: u32, data: &[u8], msn: u32) {
    port.batch(|| read_response_packets(port, d, first, data, msn));
}

fn read_response_packets(port: &NetPort, d: &Dest, first: u32, data: &[u8], msn: u32) {
    let n = packets(data.len(), d.mtu);
    for i in 0..n {
        use Operation::*;
        let part = Part::of(i, n);
        let op = match part {
            Part::First => ReadResponseFirst,
            Part::Middle => ReadResponseMiddle,
            Part::Last => ReadResponseLast,
            Part::Only => ReadResponseOnly,
        };
        let Some(opc) = opcode(Service::Rc, op) else {
            return;
        };
        let mut h = Headers::new(Bth::new(opc.raw(), d.qpn, psn_add(first, i)));
        if opc.extensions().aeth {
            h.aeth = Some(Aeth::new(
                Syndrome::Ack {
                    credits: crate::sim::wire::NO_CREDIT_LIMIT,
                },
                msn,
            ));
        }
        let lo = i as usize * d.mtu;
        let hi = (lo + d.mtu).min(data.len());
        let _ = port.send(d.ip, &h, &data[lo.min(hi)..hi]);
    }
}

/// Sends an atomic's original value for `psn`.
pub(crate) fn send_atomic_ack(port: &NetPort, d: &Dest, psn: u32, orig: u64, msn: u32) {
    let Some(opc) = opcode(Service::Rc, Operation::AtomicAcknowledge) else {
        return;
    };
    let mut h = Headers::new(Bth::new(opc.raw(), d.qpn, psn));
    h.aeth = Some(Aeth::new(
        Syndrome::Ack {
            credits: crate::sim::wire::NO_CREDIT_LIMIT,
        },
        msn,
    ));
    h.atomic_ack_eth = Some(AtomicAckEth { orig: orig.into() });
    let _ = port.send(d.ip, &h, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(PSN_MASK, 1), 0);
        assert_eq!(psn_diff(0, PSN_MASK), 1);
        assert_eq!(psn_diff(PSN_MASK, 0), -1);
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(packets(0, 256), 1);
        assert_eq!(packets(257, 256), 2);
        assert_eq!(Part::of(0, 1), Part::Only);
        assert_eq!(Part::of(2, 3), Part::Last);
    }
}
