//! The requester half of RC (and UC) over the network: one message in
//! flight per QP, its packets numbered from the QP's send PSN and sent in a
//! window of [`WINDOW`] unacknowledged packets. A sequence-error NAK sends
//! again from the NAKed PSN, the ACK timeout from the first unacknowledged
//! one (go-back-N), an RNR NAK from the message's first PSN after the
//! responder's RNR delay; `retry_count` timeouts in a row end it with a
//! transport retry error, `rnr_retry` RNR NAKs (7: no limit) with an RNR
//! retry error. UC messages complete when sent.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::super::msg::{Msg, Op, Reply};
use super::super::queue::QpView;
use super::super::responder::rnr_delay;
use super::segment::{
    packets, psn_add, psn_diff, request_packets, send_read_request, send_request, Dest, WINDOW,
};
use crate::sim::wire::{NakCode, NetPort, Operation, Packet, Service, Syndrome};
use prm_layouts::CqeSyndrome;

/// `rnr_retry` value meaning "retry forever".
const RNR_RETRY_FOREVER: u8 = 7;
/// The ACK timeout's unit: 4.096 µs × 2^ack_timeout (IBA 9.7.6.1.3).
const ACK_TIMEOUT_UNIT_NS: u64 = 4096;
/// ack_timeout above this is capped (about 8.6 s), so a test never waits
/// for hours.
const ACK_TIMEOUT_MAX: u8 = 21;

/// What [`request`] tells the engine about a WQE.
pub(crate) enum Status {
    /// Answered: the reply, and READ data or an atomic's original value
    /// in the message.
    Done(Reply),
    /// Sent, not answered yet: the WQE stays posted.
    Pending,
}

/// One message on the wire.
struct InFlight {
    /// The WQE's counter (ctrl segment), which names it across re-runs.
    wqe: u16,
    msg: Msg,
    dest: Dest,
    first: u32,
    /// PSNs the message takes (READ: one per response packet).
    span: u32,
    /// Request packets (READ and atomics: one).
    packets: u32,
    /// The first request packet not acknowledged, and the next to send.
    una: u32,
    nxt: u32,
    /// READ: the next response PSN expected, and the one a request for
    /// the rest was last sent for.
    next_resp: u32,
    asked_from: u32,
    retry_count: u8,
    retries_left: u8,
    rnr_left: u8,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// Resend from the first PSN at this time (after an RNR NAK).
    resend_at: Option<Instant>,
}

impl InFlight {
    fn last(&self) -> u32 {
        psn_add(self.first, self.span - 1)
    }

    fn within(&self, psn: u32) -> bool {
        let d = psn_diff(psn, self.first);
        d >= 0 && (d as u32) < self.span
    }

    /// Index of request packet `psn` in the message.
    fn index(&self, psn: u32) -> u32 {
        psn_diff(psn, self.first).max(0) as u32
    }

    /// Sends what the window allows from `nxt` on, and restarts the ACK
    /// timer.
    fn pump(&mut self, port: &NetPort) {
        port.batch(|| {
            while self.index(self.nxt) < self.packets
                && psn_diff(self.nxt, self.una) < WINDOW as i32
            {
                let i = self.index(self.nxt);
                send_request(port, &self.dest, &self.msg, self.first, i);
                self.nxt = psn_add(self.nxt, 1);
            }
        });
        self.deadline = self.timeout.map(|t| Instant::now() + t);
    }

    /// Goes back to request packet `psn` (go-back-N) and sends again.
    fn back_to(&mut self, port: &NetPort, psn: u32) {
        if self.msg.op == Op::Read && self.next_resp != self.first {
            self.ask_rest(port);
            return;
        }
        self.una = psn;
        self.nxt = psn;
        self.pump(port);
    }

    /// READ: asks for what has not arrived, from the next response PSN
    /// (IBA 9.7.4.1.4); the responder reads it again.
    fn ask_rest(&mut self, port: &NetPort) {
        let got = self.msg.data.len() as u64;
        send_read_request(
            port,
            &self.dest,
            self.next_resp,
            self.msg.raddr + got,
            self.msg.rkey,
            self.msg.len - got,
        );
        self.asked_from = self.next_resp;
        self.deadline = self.timeout.map(|t| Instant::now() + t);
    }

    /// Forward progress: the retry count starts again.
    fn progress(&mut self) {
        self.retries_left = self.retry_count;
        self.deadline = self.timeout.map(|t| Instant::now() + t);
    }
}

/// A QP's requester state.
#[derive(Default)]
pub(crate) struct ReqQp {
    next_psn: u32,
    inflight: Option<InFlight>,
    /// The answer to WQE `.0`, waiting for the engine to settle it.
    done: Option<(u16, Reply, Vec<u8>)>,
}

/// Every QP's requester state; lives in the engine's bookkeeping.
#[derive(Default)]
pub(crate) struct Requesters {
    qps: HashMap<u32, ReqQp>,
    /// Message buffers handed back to the engine in exchange for the ones
    /// a message in flight keeps, so none is allocated per message.
    spare: Vec<Vec<u8>>,
}

/// Buffers kept in [`Requesters::spare`] at most.
const SPARE: usize = 8;

impl Requesters {
    /// Keeps the state of the QPs `live` says are still there.
    pub(crate) fn retain(&mut self, mut live: impl FnMut(u32) -> bool) {
        self.qps.retain(|q, _| live(*q));
    }
}

/// The ACK timeout of `code`, `None` for 0 (wait forever).
fn ack_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration::from_nanos(ACK_TIMEOUT_UNIT_NS << code.min(ACK_TIMEOUT_MAX)))
}

/// The QP attributes the transport needs beyond [`QpView`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attrs {
    pub(crate) sq_psn: u32,
    pub(crate) retry_count: u8,
    pub(crate) ack_timeout: u8,
}

/// Sends (or reports on) WQE `wqe` of QP `v`, whose message is `msg`.
pub(crate) fn request(
    all: &mut Requesters,
    port: &NetPort,
    v: &QpView,
    a: Attrs,
    wqe: u16,
    msg: &mut Msg,
    dest: Dest,
) -> Status {
    let q = all.qps.entry(v.qpn).or_insert_with(|| ReqQp {
        next_psn: a.sq_psn,
        ..ReqQp::default()
    });
    if let Some((w, reply, mut data)) = q.done.take() {
        if w == wqe {
            // The message's own buffer (READ data, an atomic's original
            // value, or what was sent) goes back; the one gathered again
            // for this call is kept for the next message.
            std::mem::swap(&mut msg.data, &mut data);
            if all.spare.len() < SPARE {
                all.spare.push(data);
            }
            return Status::Done(reply);
        }
    }
    if let Some(f) = &q.inflight {
        if f.wqe == wqe {
            return Status::Pending;
        }
    }
    let n = request_packets(msg, dest.mtu);
    let span = match msg.op {
        Op::Read => packets(msg.len as usize, dest.mtu),
        _ => n,
    };
    let first = q.next_psn;
    q.next_psn = psn_add(first, span);
    if dest.service == Service::Uc {
        port.batch(|| {
            for i in 0..n {
                send_request(port, &dest, msg, first, i);
            }
        });
        return Status::Done(Reply::Ack);
    }
    // The message keeps the engine's buffer; the engine gets a spare one.
    let data = std::mem::replace(&mut msg.data, all.spare.pop().unwrap_or_default());
    let mut kept = msg.clone();
    kept.data = data;
    let mut f = InFlight {
        wqe,
        msg: kept,
        dest,
        first,
        span,
        packets: n,
        una: first,
        nxt: first,
        next_resp: first,
        asked_from: first,
        retry_count: a.retry_count,
        retries_left: a.retry_count,
        rnr_left: v.rnr_retry,
        timeout: ack_timeout(a.ack_timeout),
        deadline: None,
        resend_at: None,
    };
    if f.msg.op == Op::Read {
        // Filled by the responses.
        f.msg.data.clear();
    }
    f.pump(port);
    q.inflight = Some(f);
    Status::Pending
}

fn nak_syndrome(c: NakCode) -> CqeSyndrome {
    match c {
        NakCode::RemoteAccessError => CqeSyndrome::RemoteAccessErr,
        NakCode::RemoteOperationalError => CqeSyndrome::RemoteOpErr,
        NakCode::InvalidRequest | NakCode::InvalidRdRequest | NakCode::PsnSequenceError => {
            CqeSyndrome::RemoteInvalReqErr
        }
    }
}

/// Ends the message in flight with `reply`; true when the engine should
/// run the QP.
fn complete(q: &mut ReqQp, reply: Reply) -> bool {
    let Some(f) = q.inflight.take() else {
        return false;
    };
    q.done = Some((f.wqe, reply, f.msg.data));
    true
}

/// A response packet (ACK, NAK, READ response, atomic ACK) for QP `qpn`.
/// Returns whether the QP's send queue should run again.
pub(crate) fn response(all: &mut Requesters, port: &NetPort, qpn: u32, p: &Packet<'_>) -> bool {
    let Some(q) = all.qps.get_mut(&qpn) else {
        return false;
    };
    let Some(f) = q.inflight.as_mut() else {
        return false;
    };
    let psn = p.bth.psn();
    if !f.within(psn) {
        // A late answer to an earlier message: already settled.
        return false;
    }
    match p.opcode.operation() {
        Operation::Acknowledge => {
            let Some(Ok(s)) = p.aeth.map(|a| a.syndrome()) else {
                return false;
            };
            match s {
                Syndrome::Ack { .. } => {
                    if !matches!(f.msg.op, Op::Send | Op::Write) {
                        return false;
                    }
                    if psn == f.last() {
                        return complete(q, Reply::Ack);
                    }
                    // Progress: the window moves on.
                    if psn_diff(psn, f.una) >= 0 {
                        f.una = psn_add(psn, 1);
                        if psn_diff(f.nxt, f.una) < 0 {
                            f.nxt = f.una;
                        }
                        f.progress();
                        f.pump(port);
                    }
                    false
                }
                Syndrome::RnrNak { timer } => {
                    if f.rnr_left != RNR_RETRY_FOREVER {
                        if f.rnr_left == 0 {
                            return complete(q, Reply::Nak(CqeSyndrome::RnrRetryExcErr));
                        }
                        f.rnr_left -= 1;
                    }
                    f.deadline = None;
                    f.resend_at = Some(Instant::now() + rnr_delay(timer));
                    false
                }
                Syndrome::Nak(NakCode::PsnSequenceError) => {
                    f.back_to(port, psn);
                    false
                }
                Syndrome::Nak(c) => complete(q, Reply::Nak(nak_syndrome(c))),
            }
        }
        Operation::ReadResponseFirst
        | Operation::ReadResponseMiddle
        | Operation::ReadResponseLast
        | Operation::ReadResponseOnly => {
            if f.msg.op != Op::Read {
                return false;
            }
            if psn != f.next_resp {
                // A gap: ask for the rest at once, once per gap.
                if psn_diff(psn, f.next_resp) > 0 && f.asked_from != f.next_resp {
                    f.ask_rest(port);
                }
                return false;
            }
            if f.msg.data.len() + p.payload.len() > f.msg.len as usize {
                return complete(q, Reply::Nak(CqeSyndrome::RemoteInvalReqErr));
            }
            f.msg.data.extend_from_slice(p.payload);
            f.next_resp = psn_add(psn, 1);
            f.progress();
            let last = matches!(
                p.opcode.operation(),
                Operation::ReadResponseLast | Operation::ReadResponseOnly
            );
            if last {
                return complete(q, Reply::Ack);
            }
            false
        }
        Operation::AtomicAcknowledge => {
            let Some(orig) = p.atomic_ack_eth else {
                return false;
            };
            if !matches!(f.msg.op, Op::CmpSwap | Op::FetchAdd) {
                return false;
            }
            f.msg.data.clear();
            f.msg.data.extend_from_slice(&orig.orig.get().to_ne_bytes());
            complete(q, Reply::Ack)
        }
        _ => false,
    }
}

/// Retransmits what timed out; returns the QPs to run (their message
/// ended) and how long until the next deadline.
pub(crate) fn tick(all: &mut Requesters, port: &NetPort, kick: &mut Vec<u32>) -> Option<Duration> {
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    for (qpn, q) in all.qps.iter_mut() {
        let Some(f) = q.inflight.as_mut() else {
            continue;
        };
        if f.resend_at.is_some_and(|t| t <= now) {
            // After an RNR NAK the responder takes the message from its
            // first packet.
            f.resend_at = None;
            let first = f.first;
            f.back_to(port, first);
        } else if f.deadline.is_some_and(|t| t <= now) {
            if f.retries_left == 0 {
                if complete(q, Reply::Nak(CqeSyndrome::TransportRetryExcErr)) {
                    kick.push(*qpn);
                }
                continue;
            }
            f.retries_left -= 1;
            let una = f.una;
            f.back_to(port, una);
        }
        for t in [f.resend_at, f.deadline].into_iter().flatten() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    next.map(|t| t.saturating_duration_since(now))
}
