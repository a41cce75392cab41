//! The responder half of RC (and UC) over the network: packets are taken
//! in PSN order only; a message is gathered whole, then handed to the
//! engine's [`responder`](super::super::responder) (which checks keys,
//! access and lengths exactly as on the in-memory link) when its last
//! packet arrives. A WRITE is not gathered: each packet's payload goes
//! straight from the receive buffer to its target, through the same key,
//! access and range checks of the whole message; a refused piece stops
//! the placing, and the message fails when its last packet arrives, as
//! one delivered whole would.
//!
//! RC: a packet ahead of the expected PSN gets one sequence-error NAK; a
//! duplicate is answered again (SEND/WRITE: ACK; READ: read again; atomic:
//! the saved original value, never executed twice); an RNR NAK or an error
//! NAK rewinds the expected PSN to the message's first packet. ACKs are coalesced: one per
//! packet that asks for it (the requester asks every quarter window of
//! packets or half of its bytes, and on the last packet of a burst); an ACK acknowledges every PSN before it. UC: a gap drops the message being
//! gathered.

use std::collections::VecDeque;

use super::super::msg::{Msg, Op, Placed, Reply};
use super::super::queue::QpView;
use super::segment::{
    classify, packets, psn_add, psn_diff, send_ack, send_atomic_ack, send_read_response, Dest, Part,
};
use super::QpnMap;
use crate::sim::wire::{Counter, NakCode, NetPort, Packet, Service, Syndrome, NO_CREDIT_LIMIT};
use prm_layouts::CqeSyndrome;

/// Atomic results kept for duplicates (the responder's `log_rra_max`
/// bounds how many a requester can have outstanding).
const SAVED_ATOMICS: usize = 16;
/// How far behind the expected PSN a packet still counts as a duplicate
/// (half the PSN space, IBA 9.7.5.1.2).
const DUPLICATE_WINDOW: i32 = 1 << 22;

/// A message being gathered (WRITE: placed as it arrives).
struct Partial {
    msg: Msg,
    first: u32,
    /// WRITE: the length its RETH announced.
    expect: u64,
    /// WRITE: the bytes placed (or refused) so far.
    placed: u64,
}

/// A QP's responder state.
pub(crate) struct RespQp {
    epsn: u32,
    msn: u32,
    partial: Option<Partial>,
    /// A sequence NAK went out for `epsn`; not again until it moves.
    nak_sent: bool,
    atomics: VecDeque<(u32, u64)>,
}

/// Every QP's responder state.
#[derive(Default)]
pub(crate) struct Responders {
    qps: QpnMap<RespQp>,
    /// Buffers of delivered messages, for the next ones.
    spare: Vec<Vec<u8>>,
}

/// Buffers kept in [`Responders::spare`] at most.
const SPARE: usize = 8;

impl Responders {
    /// Keeps the state of the QPs `live` says are still there.
    pub(crate) fn retain(&mut self, mut live: impl FnMut(u32) -> bool) {
        self.qps.retain(|q, _| live(*q));
    }

    /// Takes back a delivered message's buffer.
    pub(crate) fn recycle(&mut self, mut data: Vec<u8>) {
        if self.spare.len() < SPARE {
            data.clear();
            self.spare.push(data);
        }
    }
}

/// What the engine must do for a request packet.
pub(crate) enum Action {
    Nothing,
    /// Deliver this whole message, whose first PSN is `.1`, to the QP, then
    /// call [`delivered`] with the reply; `.2`: a duplicate READ.
    Deliver(Msg, u32, bool),
}

fn nak(code: NakCode) -> Syndrome {
    Syndrome::Nak(code)
}

const ACK: Syndrome = Syndrome::Ack {
    credits: NO_CREDIT_LIMIT,
};

/// Places a WRITE packet's payload: the message (RETH address, key and
/// length), the offset in it, the bytes; whether the key checks passed.
pub(crate) type Place<'a> = dyn FnMut(&Msg, u64, &[u8]) -> bool + 'a;

/// A request packet for QP `v` (`rq_psn` is the QP's receive PSN at
/// connection). Gathers it (a WRITE's payload goes straight to its target
/// through `place`); returns the message when it is complete.
pub(crate) fn request(
    all: &mut Responders,
    port: &NetPort,
    v: &QpView,
    rq_psn: u32,
    p: &Packet<'_>,
    back: &Dest,
    place: &mut Place<'_>,
) -> Action {
    let rc = back.service == Service::Rc;
    let spare = &mut all.spare;
    let q = all.qps.entry(v.qpn).or_insert_with(|| RespQp {
        epsn: rq_psn,
        msn: 0,
        partial: None,
        nak_sent: false,
        atomics: VecDeque::new(),
    });
    let Some((op, part)) = classify(p.opcode.operation()) else {
        return Action::Nothing;
    };
    let psn = p.bth.psn();
    let d = psn_diff(psn, q.epsn);
    if d < 0 {
        if rc && d > -DUPLICATE_WINDOW {
            port.count(Counter::RxDuplicates);
            return duplicate(q, port, v, p, op, back);
        }
        port.count(Counter::RxSequenceErrors);
        return Action::Nothing;
    }
    if d > 0 {
        port.count(Counter::RxSequenceErrors);
        if rc {
            if !q.nak_sent {
                q.nak_sent = true;
                send_ack(port, back, q.epsn, nak(NakCode::PsnSequenceError), q.msn);
            }
            return Action::Nothing;
        }
        // UC: whatever was being gathered is lost; start again here.
        q.partial = None;
        q.epsn = psn;
        if !part.starts() {
            q.epsn = psn_add(psn, 1);
            return Action::Nothing;
        }
    }
    q.nak_sent = false;
    // Opcode sequence: a middle or last needs a first of the same kind.
    let continues = q.partial.as_ref().map(|m| m.msg.op);
    let fits = match part {
        Part::First | Part::Only => continues.is_none(),
        Part::Middle | Part::Last => continues == Some(op),
    };
    let full = p.payload.len() == back.mtu;
    if !fits || (matches!(part, Part::First | Part::Middle) && !full) {
        return invalid(q, port, back, rc);
    }
    if part.starts() {
        let mut msg = Msg::new(op, spare.pop().unwrap_or_default());
        msg.service = v.service;
        if let Some(r) = p.reth {
            msg.raddr = r.va.get();
            msg.rkey = r.rkey.get();
            msg.len = u64::from(r.dma_len.get());
        }
        if let Some(a) = p.atomic_eth {
            msg.raddr = a.va.get();
            msg.rkey = a.rkey.get();
            msg.swap_add = a.swap_add.get();
            msg.compare = a.compare.get();
            msg.len = 8;
        }
        let expect = if op == Op::Write {
            msg.placed = Placed::Done;
            msg.len
        } else {
            u64::MAX
        };
        q.partial = Some(Partial {
            msg,
            first: psn,
            expect,
            placed: 0,
        });
    }
    let Some(m) = q.partial.as_mut() else {
        return Action::Nothing;
    };
    let have = if op == Op::Write {
        m.placed
    } else {
        m.msg.data.len() as u64
    };
    let total = have + p.payload.len() as u64;
    if total > v.max_msg() || total > m.expect {
        return invalid(q, port, back, rc);
    }
    if op == Op::Write {
        // After a refused piece nothing more is placed.
        if m.msg.placed == Placed::Done && !place(&m.msg, m.placed, p.payload) {
            m.msg.placed = Placed::Refused;
        }
        m.placed = total;
    } else {
        m.msg.data.extend_from_slice(p.payload);
    }
    q.epsn = psn_add(psn, 1);
    if !part.ends() {
        if rc && p.bth.ack_req() {
            send_ack(port, back, psn, ACK, q.msn);
        }
        return Action::Nothing;
    }
    let Some(Partial {
        mut msg,
        first,
        placed,
        ..
    }) = q.partial.take()
    else {
        return Action::Nothing;
    };
    if op == Op::Write && placed != msg.len {
        return invalid(q, port, back, rc);
    }
    msg.imm = p.imm.map(|i| i.imm);
    msg.solicited = p.bth.solicited();
    if op == Op::Read {
        q.epsn = psn_add(psn, packets(msg.len as usize, back.mtu));
    }
    Action::Deliver(msg, first, false)
}

/// An opcode out of sequence, a short middle packet or a length beyond
/// what was announced: NAK (RC) and drop what was gathered.
fn invalid(q: &mut RespQp, port: &NetPort, back: &Dest, rc: bool) -> Action {
    port.count(Counter::RxInvalidRequests);
    q.partial = None;
    if rc {
        send_ack(port, back, q.epsn, nak(NakCode::InvalidRequest), q.msn);
    }
    Action::Nothing
}

/// A request the QP has seen before.
fn duplicate(
    q: &mut RespQp,
    port: &NetPort,
    v: &QpView,
    p: &Packet<'_>,
    op: Op,
    back: &Dest,
) -> Action {
    let psn = p.bth.psn();
    match op {
        Op::Send | Op::Write => {
            if p.bth.ack_req() {
                send_ack(port, back, psn_add(q.epsn, u32::MAX), ACK, q.msn);
            }
            Action::Nothing
        }
        Op::Read => {
            // Reading again has no side effect: run it as new, answering
            // from the duplicate's PSN.
            let Some(r) = p.reth else {
                return Action::Nothing;
            };
            let mut msg = Msg::new(Op::Read, Vec::new());
            msg.service = v.service;
            msg.raddr = r.va.get();
            msg.rkey = r.rkey.get();
            msg.len = u64::from(r.dma_len.get());
            Action::Deliver(msg, psn, true)
        }
        Op::CmpSwap | Op::FetchAdd => {
            if let Some((_, orig)) = q.atomics.iter().find(|(s, _)| *s == psn) {
                send_atomic_ack(port, back, psn, *orig, q.msn);
            }
            Action::Nothing
        }
    }
}

/// Answers a message the engine has delivered: `how` is its first PSN,
/// whether it is a duplicate READ, and whether its last packet asked for
/// an ACK (a SEND or WRITE that did not is acknowledged by a later ACK).
pub(crate) fn delivered(
    all: &mut Responders,
    port: &NetPort,
    v: &QpView,
    msg: &Msg,
    how: (u32, bool, bool),
    reply: Reply,
    back: &Dest,
) {
    let (first, duplicate_read, ack_req) = how;
    let rc = back.service == Service::Rc;
    let Some(q) = all.qps.get_mut(&v.qpn) else {
        return;
    };
    match reply {
        Reply::Ack => {
            if !duplicate_read {
                q.msn = psn_add(q.msn, 1);
            }
            if !rc {
                return;
            }
            match msg.op {
                Op::Send | Op::Write => {
                    if ack_req {
                        send_ack(port, back, psn_add(q.epsn, u32::MAX), ACK, q.msn);
                    }
                }
                Op::Read => send_read_response(port, back, first, &msg.data, q.msn),
                Op::CmpSwap | Op::FetchAdd => {
                    let mut b = [0u8; 8];
                    if let Some(d) = msg.data.get(..8) {
                        b.copy_from_slice(d);
                    }
                    let orig = u64::from_ne_bytes(b);
                    q.atomics.push_back((first, orig));
                    if q.atomics.len() > SAVED_ATOMICS {
                        q.atomics.pop_front();
                    }
                    send_atomic_ack(port, back, first, orig, q.msn);
                }
            }
        }
        Reply::Rnr(_) => {
            // The message is taken again from its first packet.
            q.epsn = first;
            if rc {
                let timer = v.min_rnr_nak;
                send_ack(port, back, first, Syndrome::RnrNak { timer }, q.msn);
            }
        }
        Reply::Nak(s) => {
            if !rc {
                return;
            }
            // Nothing after a NAKed message executes (the requester fails
            // it and flushes the rest, as a NAK stops delivery on the
            // in-memory link); the message itself, sent again, is NAKed
            // again.
            q.epsn = first;
            let code = match s {
                CqeSyndrome::RemoteAccessErr => NakCode::RemoteAccessError,
                CqeSyndrome::RemoteInvalReqErr => NakCode::InvalidRequest,
                _ => NakCode::RemoteOperationalError,
            };
            send_ack(port, back, first, nak(code), q.msn);
        }
    }
}
