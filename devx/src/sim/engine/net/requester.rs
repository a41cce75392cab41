//! The requester half of RC (and UC) over the network: many messages in
//! flight per QP, their packets numbered in one stream from the QP's send
//! PSN and sent in a window of [`WINDOW`] unacknowledged packets and
//! bytes the port's socket buffers hold ([`NetPort::window_bytes`]). ACKs are
//! cumulative: one for a PSN completes every message ending there or
//! before, strictly in order. A sequence-error NAK sends again from the
//! NAKed PSN, the ACK timeout from the first unacknowledged one
//! (go-back-N, across messages), an RNR NAK from that message's first PSN
//! after the responder's RNR delay; `retry_count` timeouts in a row end
//! the first message with a transport retry error, `rnr_retry` RNR NAKs
//! of one message (7: no limit) with an RNR retry error; an error ends
//! that message and drops the ones after it, never sent again (the engine
//! flushes their WQEs). A READ or
//! atomic is the last message in flight until answered. UC messages
//! complete when sent.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::super::msg::{Msg, Op, Reply};
use super::super::queue::QpView;
use super::super::responder::rnr_delay;
use super::segment::{
    packets, psn_add, psn_diff, request_packets, send_read_request, send_request, Dest, ACK_EVERY,
    PACKET_OVERHEAD, WINDOW,
};
use super::QpnMap;
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
    /// Queued for the wire, not answered yet: the WQE stays posted.
    Pending,
}

/// What the transport knows of the WQE at a send queue position.
pub(crate) enum Known {
    /// Sent (or queued), not answered yet.
    Pending,
    /// Answered: the reply and the message (READ data or the atomic's
    /// original value in it); its buffer goes back through
    /// [`Requesters::recycle`].
    Done(Reply, Msg),
}

/// One message on the wire.
struct InFlight {
    /// The send queue position of its WQE, which names it across re-runs,
    /// and the WQE's size in basic blocks.
    at: u16,
    bbs: u16,
    msg: Msg,
    dest: Dest,
    first: u32,
    /// PSNs the message takes (READ: one per response packet).
    span: u32,
    /// Request packets (READ and atomics: one).
    packets: u32,
    /// READ: the next response PSN expected, and the one a request for
    /// the rest was last sent for.
    next_resp: u32,
    asked_from: u32,
    /// RNR NAKs this message may still take.
    rnr_left: u8,
}

impl InFlight {
    fn last(&self) -> u32 {
        psn_add(self.first, self.span - 1)
    }

    fn within(&self, psn: u32) -> bool {
        let d = psn_diff(psn, self.first);
        d >= 0 && (d as u32) < self.span
    }

    /// The bytes request packet `i` puts on the wire, about: its payload
    /// and headers.
    fn wire_bytes(&self, i: u32) -> usize {
        let payload = match self.msg.op {
            Op::Send | Op::Write => {
                let lo = i as usize * self.dest.mtu;
                self.msg.data.len().saturating_sub(lo).min(self.dest.mtu)
            }
            _ => 0,
        };
        payload + PACKET_OVERHEAD
    }

    /// Whether the message ends before `psn`.
    fn before(&self, psn: u32) -> bool {
        psn_diff(psn, self.last()) > 0
    }

    /// Whether a later message may go out before this one is answered:
    /// a READ's or atomic's answer places data locally that a later WQE
    /// might gather.
    fn lets_others_pass(&self) -> bool {
        matches!(self.msg.op, Op::Send | Op::Write)
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
    }
}

/// A QP's requester state: its messages in flight, in PSN order, one PSN
/// stream across them.
#[derive(Default)]
pub(crate) struct ReqQp {
    next_psn: u32,
    msgs: VecDeque<InFlight>,
    /// Answered messages waiting, in order, for the engine to settle them:
    /// the WQE position, the reply and the message.
    done: VecDeque<(u16, Reply, Msg)>,
    /// The first request PSN not acknowledged, and the next to send.
    una: u32,
    nxt: u32,
    /// The PSN after the highest one ever sent: answers reach below it.
    hi: u32,
    /// Packets and bytes sent since the last one that asked for an ACK.
    unasked: (u32, usize),
    /// The largest payload of a request packet of the messages in flight
    /// (or once in flight, since the queue last emptied).
    max_payload: usize,
    retry_count: u8,
    retries_left: u8,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// Resend from the RNR-NAKed message's first PSN at this time.
    resend_at: Option<Instant>,
}

impl ReqQp {
    /// The PSN after the last one given to a message.
    fn end(&self) -> u32 {
        self.next_psn
    }

    fn restart_timer(&mut self) {
        self.deadline = if self.msgs.is_empty() {
            None
        } else {
            self.timeout.map(|t| Instant::now() + t)
        };
    }

    /// Bytes the window counts for the request packets in flight.
    fn bytes_in_flight(&self) -> usize {
        let mut bytes = 0;
        for f in &self.msgs {
            if psn_diff(f.first, self.nxt) >= 0 {
                break;
            }
            let from = psn_diff(self.una, f.first).max(0) as u32;
            let to = (psn_diff(self.nxt, f.first) as u32).min(f.packets);
            bytes += (from..to).map(|i| f.wire_bytes(i)).sum::<usize>();
        }
        bytes
    }

    /// Sends what the window ([`WINDOW`] packets, the port's window bytes) allows
    /// from `nxt` on, and restarts the ACK timer when anything went. A
    /// packet asks for an ACK every [`ACK_EVERY`] packets or half the
    /// window's bytes, and when it is the last one of the burst or fills
    /// the window, so the responder answers each burst a few times.
    fn pump(&mut self, port: &NetPort) {
        let before = self.nxt;
        let window_bytes = port.window_bytes();
        // A full window of the largest packets in flight that fits the
        // bytes needs no count of them.
        let most = WINDOW as usize * (self.max_payload + PACKET_OVERHEAD);
        let mut bytes = if most < window_bytes {
            0
        } else {
            self.bytes_in_flight()
        };
        let (una, msgs) = (self.una, &self.msgs);
        let mut nxt = self.nxt;
        let mut unasked = self.unasked;
        // Messages are in PSN order: skip those that end before `nxt`.
        let start = msgs.partition_point(|f| f.before(nxt));
        port.batch(|| {
            let count = msgs.len();
            for (k, f) in msgs.iter().enumerate().skip(start) {
                if !f.within(nxt) {
                    continue;
                }
                let mut i = psn_diff(nxt, f.first) as u32;
                while i < f.packets && psn_diff(nxt, una) < WINDOW as i32 && bytes < window_bytes {
                    let size = f.wire_bytes(i);
                    bytes += size;
                    unasked.0 += 1;
                    unasked.1 += size;
                    let full =
                        psn_diff(psn_add(nxt, 1), una) >= WINDOW as i32 || bytes >= window_bytes;
                    let tail = i + 1 == f.packets && k + 1 == count;
                    let half = unasked.0 >= ACK_EVERY || unasked.1 >= window_bytes / 2;
                    let ack = tail || full || half;
                    if ack {
                        unasked = (0, 0);
                    }
                    send_request(port, &f.dest, &f.msg, f.first, i, ack);
                    nxt = psn_add(nxt, 1);
                    i += 1;
                }
                if i < f.packets {
                    break;
                }
                // READ: its response PSNs are not sent.
                nxt = psn_add(f.first, f.span);
            }
        });
        self.nxt = nxt;
        self.unasked = unasked;
        if psn_diff(nxt, self.hi) > 0 {
            self.hi = nxt;
        }
        if nxt != before {
            self.restart_timer();
        }
    }

    /// Goes back to request PSN `psn` (go-back-N) and sends again.
    fn back_to(&mut self, port: &NetPort, psn: u32) {
        if let Some(f) = self.msgs.iter_mut().find(|f| f.within(psn)) {
            if f.msg.op == Op::Read && f.next_resp != f.first {
                f.ask_rest(port);
                self.restart_timer();
                return;
            }
        }
        self.nxt = psn;
        self.pump(port);
        self.restart_timer();
    }

    /// Forward progress: the retry count starts again.
    fn progress(&mut self) {
        self.retries_left = self.retry_count;
        self.restart_timer();
    }

    /// Completes, with an ACK, the SEND and WRITE messages ending before
    /// `psn`: a response to a later PSN acknowledges them (IBA 9.7.5.1.4).
    fn ack_before(&mut self, psn: u32) -> bool {
        let mut any = false;
        while let Some(f) = self.msgs.front() {
            if !f.before(psn) || !f.lets_others_pass() {
                break;
            }
            let done = psn_add(f.last(), 1);
            self.settle_front(Reply::Ack);
            if psn_diff(done, self.una) > 0 {
                self.una = done;
            }
            any = true;
        }
        if psn_diff(self.nxt, self.una) < 0 {
            self.nxt = self.una;
        }
        if any {
            self.progress();
        }
        any
    }

    /// Ends the first message with `reply`.
    fn settle_front(&mut self, reply: Reply) {
        if let Some(f) = self.msgs.pop_front() {
            self.done.push_back((f.at, reply, f.msg));
        }
    }

    /// Ends the first message with an error; the rest never complete (the
    /// engine flushes their WQEs) and are not sent again.
    fn fail_front(&mut self, s: CqeSyndrome, spare: &mut Vec<Vec<u8>>) -> bool {
        if self.msgs.is_empty() {
            return false;
        }
        self.settle_front(Reply::Nak(s));
        for f in self.msgs.drain(..) {
            keep_spare(spare, f.msg.data);
        }
        self.deadline = None;
        self.resend_at = None;
        true
    }
}

/// Every QP's requester state; lives in the engine's bookkeeping.
#[derive(Default)]
pub(crate) struct Requesters {
    qps: QpnMap<ReqQp>,
    /// Message buffers handed back to the engine in exchange for the ones
    /// a message in flight keeps, so none is allocated per message.
    spare: Vec<Vec<u8>>,
}

/// Buffers kept in [`Requesters::spare`] at most: about a window of small
/// messages (big ones are few in flight, since a window holds few).
const SPARE: usize = 2 * WINDOW as usize;
/// Unsent packets a doorbell's run sends as one burst while others are
/// in flight: as many as an ACK answers, so the answers clock the
/// sending and bursts stay long (one segmented send each).
const BURST: u32 = ACK_EVERY;
/// Messages in flight per QP at most.
const MAX_MESSAGES: usize = 4 * WINDOW as usize;

fn keep_spare(spare: &mut Vec<Vec<u8>>, data: Vec<u8>) {
    if spare.len() < SPARE {
        spare.push(data);
    }
}

impl Requesters {
    /// Keeps the state of the QPs `live` says are still there.
    pub(crate) fn retain(&mut self, mut live: impl FnMut(u32) -> bool) {
        self.qps.retain(|q, _| live(*q));
    }

    /// Drops QP `qpn`'s state: it left RTS, and whatever was in flight is
    /// flushed (or, after a reset, never completes).
    pub(crate) fn forget(&mut self, qpn: u32) {
        if let Some(q) = self.qps.remove(&qpn) {
            for (_, _, m) in q.done {
                keep_spare(&mut self.spare, m.data);
            }
            for f in q.msgs {
                keep_spare(&mut self.spare, f.msg.data);
            }
        }
    }

    /// What is known of QP `qpn`'s WQE at send queue position `at`; `None`
    /// for a WQE not sent yet. State left from another run of the queue
    /// (its first message is not at `at`) is dropped.
    pub(crate) fn lookup(&mut self, qpn: u32, at: u16) -> Option<Known> {
        let q = self.qps.get_mut(&qpn)?;
        if q.done.front().is_some_and(|d| d.0 == at) {
            let (_, reply, msg) = q.done.pop_front()?;
            return Some(Known::Done(reply, msg));
        }
        if q.done.is_empty() && q.msgs.front().is_some_and(|f| f.at == at) {
            return Some(Known::Pending);
        }
        if !q.done.is_empty() || !q.msgs.is_empty() {
            for (_, _, m) in q.done.drain(..) {
                keep_spare(&mut self.spare, m.data);
            }
            for f in q.msgs.drain(..) {
                keep_spare(&mut self.spare, f.msg.data);
            }
            q.una = q.next_psn;
            q.nxt = q.next_psn;
            q.hi = q.next_psn;
            q.deadline = None;
            q.resend_at = None;
        }
        None
    }

    /// Whether QP `qpn`'s WQE at send queue position `at` is the first
    /// message in flight, not answered yet ([`Known::Pending`] from
    /// [`lookup`](Self::lookup), which says the same without changing
    /// anything).
    pub(crate) fn in_flight(&self, qpn: u32, at: u16) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|q| q.done.is_empty() && q.msgs.front().is_some_and(|f| f.at == at))
    }

    /// Where the WQE after QP `qpn`'s last one in flight starts, if a
    /// later WQE may go out now: the window has room and no READ or
    /// atomic waits for its answer.
    pub(crate) fn next_issue(&self, qpn: u32) -> Option<u16> {
        let q = self.qps.get(&qpn)?;
        let back = q.msgs.back()?;
        let room =
            q.msgs.len() + q.done.len() < MAX_MESSAGES && psn_diff(q.end(), q.una) < WINDOW as i32;
        (room && back.lets_others_pass()).then_some(back.at.wrapping_add(back.bbs))
    }

    /// Sends what QP `qpn`'s window allows of its queued messages. Runs
    /// the engine starts itself (`eager`: an answer settled messages, a
    /// timer) send at once: their packets leave together with the batch
    /// the receive thread sends. A doorbell's run sends when nothing is
    /// in flight or [`BURST`] packets wait; otherwise the next answer or
    /// doorbell takes them, so many small messages posted one by one
    /// share a system call.
    pub(crate) fn pump(&mut self, qpn: u32, port: &NetPort, eager: bool) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            let waiting = psn_diff(q.end(), q.nxt);
            if q.resend_at.is_none() && (eager || q.una == q.nxt || waiting >= BURST as i32) {
                q.pump(port);
            }
        }
    }

    /// Takes back the buffer of a message [`lookup`](Self::lookup) handed
    /// out.
    pub(crate) fn recycle(&mut self, data: Vec<u8>) {
        keep_spare(&mut self.spare, data);
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

/// Queues WQE `at` (`bbs` basic blocks) of QP `v`, whose message is `msg`,
/// for the wire (RC;
/// UC messages go at once and are done). The caller sends what was queued
/// with [`Requesters::pump`].
pub(crate) fn request(
    all: &mut Requesters,
    port: &NetPort,
    v: &QpView,
    a: Attrs,
    (at, bbs): (u16, u16),
    msg: &mut Msg,
    dest: Dest,
) -> Status {
    let q = all.qps.entry(v.qpn).or_insert_with(|| ReqQp {
        next_psn: a.sq_psn,
        una: a.sq_psn,
        nxt: a.sq_psn,
        hi: a.sq_psn,
        ..ReqQp::default()
    });
    let n = request_packets(msg, dest.mtu);
    let span = match msg.op {
        Op::Read => packets(msg.len as usize, dest.mtu),
        _ => n,
    };
    let first = q.next_psn;
    q.next_psn = psn_add(first, span);
    if dest.service == Service::Uc {
        q.una = q.next_psn;
        q.nxt = q.next_psn;
        q.hi = q.next_psn;
        port.batch(|| {
            for i in 0..n {
                send_request(port, &dest, msg, first, i, false);
            }
        });
        return Status::Done(Reply::Ack);
    }
    if q.msgs.is_empty() {
        q.retry_count = a.retry_count;
        q.retries_left = a.retry_count;
        q.timeout = ack_timeout(a.ack_timeout);
        q.max_payload = 0;
    }
    if matches!(msg.op, Op::Send | Op::Write) {
        q.max_payload = q.max_payload.max(msg.data.len().min(dest.mtu));
    }
    // The message keeps the engine's buffer; the engine gets a spare one.
    let spare = all.spare.pop().unwrap_or_default();
    let mut kept = std::mem::replace(msg, Msg::new(msg.op, spare));
    if kept.op == Op::Read {
        // Filled by the responses.
        kept.data.clear();
    }
    q.msgs.push_back(InFlight {
        at,
        bbs,
        msg: kept,
        dest,
        first,
        span,
        packets: n,
        next_resp: first,
        asked_from: first,
        rnr_left: v.rnr_retry,
    });
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

/// A response packet (ACK, NAK, READ response, atomic ACK) for QP `qpn`.
/// Returns whether the QP's send queue should run again.
pub(crate) fn response(all: &mut Requesters, port: &NetPort, qpn: u32, p: &Packet<'_>) -> bool {
    let Some(q) = all.qps.get_mut(&qpn) else {
        return false;
    };
    let psn = p.bth.psn();
    // Only PSNs sent and not yet acknowledged are answered now; anything
    // else is a late answer to what is settled.
    let outstanding = |q: &ReqQp, psn: u32| {
        psn_diff(psn, q.una) >= 0 && psn_diff(psn, q.hi) < 0 && !q.msgs.is_empty()
    };
    if !outstanding(q, psn) {
        return false;
    }
    match p.opcode.operation() {
        Operation::Acknowledge => {
            let Some(Ok(s)) = p.aeth.map(|a| a.syndrome()) else {
                return false;
            };
            match s {
                Syndrome::Ack { .. } => {
                    let run = q.ack_before(psn_add(psn, 1));
                    // Progress inside the (now) first message.
                    let inside = q
                        .msgs
                        .front()
                        .is_some_and(|f| f.lets_others_pass() && f.within(psn));
                    if inside && psn_diff(psn, q.una) >= 0 {
                        q.una = psn_add(psn, 1);
                        if psn_diff(q.nxt, q.una) < 0 {
                            q.nxt = q.una;
                        }
                        q.progress();
                    }
                    if q.resend_at.is_none() {
                        q.pump(port);
                    }
                    run
                }
                Syndrome::RnrNak { timer } => {
                    let run = q.ack_before(psn);
                    let Some(f) = q.msgs.front_mut() else {
                        return run;
                    };
                    if !f.within(psn) {
                        return run;
                    }
                    if f.rnr_left != RNR_RETRY_FOREVER {
                        if f.rnr_left == 0 {
                            return q.fail_front(CqeSyndrome::RnrRetryExcErr, &mut all.spare)
                                || run;
                        }
                        f.rnr_left -= 1;
                    }
                    q.deadline = None;
                    q.resend_at = Some(Instant::now() + rnr_delay(timer));
                    run
                }
                Syndrome::Nak(NakCode::PsnSequenceError) => {
                    let run = q.ack_before(psn);
                    // While an RNR wait runs, the responder refuses what
                    // follows the waiting message; the wait's end resends.
                    if q.resend_at.is_none() {
                        q.back_to(port, psn);
                    }
                    run
                }
                Syndrome::Nak(c) => {
                    let run = q.ack_before(psn);
                    if !q.msgs.front().is_some_and(|f| f.within(psn)) {
                        return run;
                    }
                    q.fail_front(nak_syndrome(c), &mut all.spare) || run
                }
            }
        }
        Operation::ReadResponseFirst
        | Operation::ReadResponseMiddle
        | Operation::ReadResponseLast
        | Operation::ReadResponseOnly => {
            let run = q.ack_before(psn);
            let Some(f) = q.msgs.front_mut() else {
                return run;
            };
            if f.msg.op != Op::Read || !f.within(psn) {
                return run;
            }
            if psn != f.next_resp {
                // A gap: ask for the rest at once, once per gap.
                if psn_diff(psn, f.next_resp) > 0 && f.asked_from != f.next_resp {
                    f.ask_rest(port);
                    q.restart_timer();
                }
                return run;
            }
            if f.msg.data.len() + p.payload.len() > f.msg.len as usize {
                return q.fail_front(CqeSyndrome::RemoteInvalReqErr, &mut all.spare) || run;
            }
            f.msg.data.extend_from_slice(p.payload);
            f.next_resp = psn_add(psn, 1);
            let last = matches!(
                p.opcode.operation(),
                Operation::ReadResponseLast | Operation::ReadResponseOnly
            );
            if last {
                let end = psn_add(f.last(), 1);
                q.settle_front(Reply::Ack);
                q.una = end;
                if psn_diff(q.nxt, q.una) < 0 {
                    q.nxt = q.una;
                }
                q.progress();
                q.pump(port);
                return true;
            }
            q.progress();
            run
        }
        Operation::AtomicAcknowledge => {
            let Some(orig) = p.atomic_ack_eth else {
                return false;
            };
            let run = q.ack_before(psn);
            let Some(f) = q.msgs.front_mut() else {
                return run;
            };
            if !matches!(f.msg.op, Op::CmpSwap | Op::FetchAdd) || f.first != psn {
                return run;
            }
            f.msg.data.clear();
            f.msg.data.extend_from_slice(&orig.orig.get().to_ne_bytes());
            let end = psn_add(f.last(), 1);
            q.settle_front(Reply::Ack);
            q.una = end;
            if psn_diff(q.nxt, q.una) < 0 {
                q.nxt = q.una;
            }
            q.progress();
            q.pump(port);
            true
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
        if q.msgs.is_empty() {
            continue;
        }
        if q.resend_at.is_some_and(|t| t <= now) {
            // After an RNR NAK the responder takes the message from its
            // first packet.
            q.resend_at = None;
            if let Some(first) = q.msgs.front().map(|f| f.first) {
                q.back_to(port, first);
            }
        } else if q.deadline.is_some_and(|t| t <= now) {
            if q.retries_left == 0 {
                if q.fail_front(CqeSyndrome::TransportRetryExcErr, &mut all.spare) {
                    kick.push(*qpn);
                }
                continue;
            }
            q.retries_left -= 1;
            let una = q.una;
            q.back_to(port, una);
        }
        for t in [q.resend_at, q.deadline].into_iter().flatten() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    next.map(|t| t.saturating_duration_since(now))
}
