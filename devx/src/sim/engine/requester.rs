//! The requester side: executes a QP's posted send WQEs in order, from the
//! device's consumer counter up to the SND counter in the doorbell record.
//!
//! A WQE to a QP of this device is delivered inline, under the one device
//! lock. WQEs to another emulated device leave as a [`Batch`]: the caller
//! drops this device's lock, delivers the batch in order under one
//! acquisition of the peer's lock, and comes back with the replies, so no
//! thread waits for a device lock while it holds another. RC RDMA WRITEs
//! of one data segment go faster where the peer's locks are free at once
//! ([`direct_writes`]): copied straight across and settled, with both
//! devices locked but no waiting. RC WQEs to a device on the network
//! go out while earlier ones await their answers, as far as the
//! transport's window allows, and complete in order as the answers come
//! ([`super::net`]). A per-QP busy mark keeps a second
//! doorbell from overtaking WQEs in flight; that doorbell's work is picked
//! up by the busy thread's loop.

use std::sync::Arc;

use super::cache::{Cache, Grant};
use super::cqe::{self, Completion};
use super::flush;
use super::keys::Need;
use super::msg::{Msg, Op, Reply};
use super::net::{Known, Status};
use super::queue::{self, QpView, MAX_SQ_WQE};
use super::responder;
use super::{Engine, Inner, Peer, RnrWait};
use crate::sim::fw::qp::{st, state};
use crate::sim::fw::state::State;
use prm_layouts::{
    CqeOpcode, CqeSyndrome, SendOpcode, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeDatagramSeg,
    WqeInlDataSeg, WqeRaddrSeg,
};

/// fm_ce_se: CQE on completion.
const CE_CQE: u8 = 0x08;
/// fm_ce_se: solicited event.
const SE: u8 = 0x02;
/// Inline data segment flag in byte_count.
const INLINE: u32 = 0x8000_0000;
/// Segment unit.
const DS: usize = WqeDataSeg::SIZE_BYTES;

/// WQEs gathered ahead into one batch for another device; bounds the work
/// redone when the first of them meets an RNR wait.
const MAX_BATCH: usize = 64;

/// What a doorbell loop returns to its caller.
pub(crate) enum Step {
    Idle,
    /// Deliver this to the peer device, then resume with its replies
    /// (boxed, so that a step moves as two words).
    Remote(Arc<Engine>, Box<Batch>),
}

/// Consecutive WQEs of one QP whose messages go to the same other device.
/// The peer delivers them in order and stops at the first reply that is
/// not an ACK; the WQEs after it stay posted, as if never started.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) msgs: Vec<Msg>,
    /// `replies[i]` answers `msgs[i]`; shorter when delivery stopped early.
    pub(crate) replies: Vec<Reply>,
    /// The WQEs' bytes back to back; WQE `i` ends at `ends[i]`.
    wqes: Vec<u8>,
    ends: Vec<usize>,
    /// Or, instead of `msgs`, a run of plain RDMA WRITEs (see
    /// [`write_run`]): their payloads back to back in `payload`, to QP
    /// `write_qpn` of the peer; `replies[i]` answers `writes[i]`.
    pub(crate) writes: Vec<Write>,
    pub(crate) payload: Vec<u8>,
    pub(crate) write_qpn: u32,
}

/// One RDMA WRITE (no immediate) of a [`Batch`]'s run: what the responder
/// needs (its RETH and the end of its payload in [`Batch::payload`]), and
/// what settling it needs (its control segment and size in WQEBBs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write {
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) end: usize,
    ctrl: [u8; WqeCtrlSeg::SIZE_BYTES],
    bbs: u16,
}

impl Batch {
    /// The payload of write `i`.
    pub(crate) fn write_data(&self, i: usize) -> &[u8] {
        let start = match i {
            0 => 0,
            _ => self.writes.get(i - 1).map_or(0, |w| w.end),
        };
        let end = self.writes.get(i).map_or(start, |w| w.end);
        self.payload.get(start..end).unwrap_or(&[])
    }
}

impl Batch {
    fn push(&mut self, wqe: &[u8], msg: Msg) {
        self.wqes.extend_from_slice(wqe);
        self.ends.push(self.wqes.len());
        self.msgs.push(msg);
    }

    fn wqe(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.wqes[start..self.ends[i]]
    }

    /// Empties the batch for reuse; message buffers go back to `inner`.
    fn recycle(&mut self, inner: &mut Inner) {
        for m in self.msgs.drain(..) {
            inner.spare.push(m.data);
        }
        self.replies.clear();
        self.wqes.clear();
        self.ends.clear();
        self.writes.clear();
        self.payload.clear();
    }
}

/// Whether a WQE may join a batch: its message cannot be delivered on this
/// device nor change anything here before the batch's replies are settled.
fn batchable(service: u8, opc: Option<SendOpcode>) -> bool {
    use SendOpcode::*;
    matches!(service, st::RC | st::UC)
        && matches!(
            opc,
            Some(Send | SendImm | RdmaWrite | RdmaWriteImm | RdmaRead | AtomicCs | AtomicFa)
        )
}

/// One WQE's result.
enum Outcome {
    /// Completed; the CQE if the WQE asked for one.
    Done(Option<Completion>),
    Error(CqeSyndrome),
    Rnr(std::time::Duration),
    /// The message (left in [`Inner::outgoing`], which keeps this type
    /// small) is for peer [`Inner::remote`] `.0`.
    Remote(usize),
    /// On the network, not answered yet: the WQE stays posted until the
    /// transport runs the QP again ([`super::net`]); later WQEs may go
    /// meanwhile.
    Pending,
}

// A WQE's segments by layout; bytes past a short WQE read as zero.

/// The control segment that starts every send WQE.
pub(crate) fn ctrl(wqe: &[u8]) -> WqeCtrlSeg {
    WqeCtrlSeg::from_slice(wqe).copied().unwrap_or_default()
}

/// The WQE's send opcode, if it is one the PRM defines.
fn send_opcode(wqe: &[u8]) -> Option<SendOpcode> {
    SendOpcode::from_raw(ctrl(wqe).opcode())
}

/// UD: the address vector after the control segment.
fn datagram(wqe: &[u8]) -> WqeDatagramSeg {
    wqe.get(WqeCtrlSeg::SIZE_BYTES..)
        .and_then(WqeDatagramSeg::from_slice)
        .copied()
        .unwrap_or_default()
}

/// RDMA and atomics: the remote address after the control segment.
fn raddr(wqe: &[u8]) -> WqeRaddrSeg {
    wqe.get(WqeCtrlSeg::SIZE_BYTES..)
        .and_then(WqeRaddrSeg::from_slice)
        .copied()
        .unwrap_or_default()
}

/// Atomics: the operands after the remote address.
fn atomic(wqe: &[u8]) -> WqeAtomicSeg {
    wqe.get(WqeCtrlSeg::SIZE_BYTES + WqeRaddrSeg::SIZE_BYTES..)
        .and_then(WqeAtomicSeg::from_slice)
        .copied()
        .unwrap_or_default()
}

/// How one doorbell (or timer tick) entered the loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// The UAR page the doorbell went through; `None` for internal retries.
    pub(crate) page: Option<u32>,
    pub(crate) by_timer: bool,
}

/// Executes QP `qpn`'s posted WQEs until it is idle, blocked on RNR, or
/// has WQEs in flight to another device.
pub(crate) fn drive(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    qpn: u32,
    entry: Entry,
    resume: Option<Box<Batch>>,
) -> Step {
    // One WQE buffer per engine, not zeroed per doorbell: only the bytes
    // read for the current WQE are ever looked at.
    let mut wqe = inner
        .wqe
        .take()
        .unwrap_or_else(|| Box::new([0u8; MAX_SQ_WQE]));
    let step = drive_with(eng, st, inner, qpn, entry, resume, &mut wqe);
    inner.wqe = Some(wqe);
    step
}

fn drive_with(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    qpn: u32,
    entry: Entry,
    resume: Option<Box<Batch>>,
    wqe: &mut [u8; MAX_SQ_WQE],
) -> Step {
    let Some(v) = inner.cache.qp_view(st, qpn) else {
        if let Some(mut b) = resume {
            b.recycle(inner);
            inner.batch = Some(b);
        }
        inner.busy.retain(|q| *q != qpn);
        inner.rnr.retain(|w| w.qpn != qpn);
        return Step::Idle;
    };
    let mut ci = v.sq_ci;
    // The view's state is the QP's until a WQE settles (a doorbell's
    // first pass reads it from there, not from the table again).
    let mut state_known = resume.is_none();
    match resume {
        Some(mut b) if !b.writes.is_empty() => {
            let mut posted = true;
            for (i, (w, reply)) in b.writes.iter().zip(&b.replies).enumerate() {
                let out = match *reply {
                    Reply::Ack => success(&v, &w.ctrl, b.write_data(i).len() as u32),
                    Reply::Nak(s) => Outcome::Error(s),
                    Reply::Rnr(d) => Outcome::Rnr(d),
                };
                if !settle(eng, st, inner, &v, &w.ctrl, w.bbs, out, entry, &mut ci) {
                    posted = false;
                    break;
                }
            }
            b.recycle(inner);
            inner.batch = Some(b);
            if !posted {
                return park(st, inner, qpn, ci);
            }
        }
        Some(mut b) => {
            let mut posted = true;
            for (i, reply) in b.replies.iter().enumerate() {
                let w = b.wqe(i);
                let out = match *reply {
                    Reply::Ack => finish(st, &mut inner.cache, &v, w, &b.msgs[i]),
                    Reply::Nak(s) => Outcome::Error(s),
                    Reply::Rnr(d) => Outcome::Rnr(d),
                };
                let bbs = queue::wqebbs(w.len());
                if !settle(eng, st, inner, &v, w, bbs, out, entry, &mut ci) {
                    posted = false;
                    break;
                }
            }
            b.recycle(inner);
            inner.batch = Some(b);
            if !posted {
                return park(st, inner, qpn, ci);
            }
        }
        None => {
            // The doorbell must come through the QP's own UAR page.
            if entry.page.is_some_and(|p| p != v.uar_page) {
                return Step::Idle;
            }
            if inner.busy.contains(&qpn) {
                return Step::Idle;
            }
            inner.busy.push(qpn);
        }
    }
    loop {
        let s = if std::mem::take(&mut state_known) {
            v.state
        } else {
            st.qp.peek(qpn).map_or(state::RST, |e| e.obj.qpc.state())
        };
        if flush::flushing(s) {
            if let Some(now) = queue::qp_view(st, qpn) {
                flush::flush_sq(st, &now, &mut ci);
                flush::flush_rq(st, &now);
            }
            inner.rnr.retain(|w| w.qpn != qpn);
            inner.net.req.forget(qpn);
            return park(st, inner, qpn, ci);
        }
        if s != state::RTS {
            // Reset or not yet ready: posted WQEs wait, RNR waits end,
            // messages in flight are forgotten.
            inner.rnr.retain(|w| w.qpn != qpn);
            inner.net.req.forget(qpn);
            return park(st, inner, qpn, ci);
        }
        let Some(pi) = v.snd_counter() else {
            return park(st, inner, qpn, ci);
        };
        if pi == ci {
            return park(st, inner, qpn, ci);
        }
        // The first WQE still in flight on the network: only later ones
        // may go now, and this one need not be read.
        if v.service == st::RC && inner.net.req.in_flight(qpn, ci) {
            issue_ahead(eng, st, inner, &v, pi, wqe, entry.page.is_none());
            return park(st, inner, qpn, ci);
        }
        let Some(len) = v.read_send_wqe(ci, wqe) else {
            return park(st, inner, qpn, ci);
        };
        if !queue::posted_whole(pi, ci, queue::wqebbs(len)) {
            truncated(st, &v, &wqe[..len], pi, &mut ci);
            continue;
        }
        let out = match network_answer(st, inner, &v, &wqe[..len], ci) {
            Some(out) => out,
            None => {
                if direct_writes(eng, st, inner, &v, len, &mut ci, pi, wqe, entry) {
                    continue;
                }
                if let Some(step) = write_run(eng, st, inner, &v, len, ci, pi, wqe) {
                    return step;
                }
                execute(eng, st, inner, &v, &wqe[..len], ci)
            }
        };
        if let Outcome::Pending = out {
            issue_ahead(eng, st, inner, &v, pi, wqe, entry.page.is_none());
            return park(st, inner, qpn, ci);
        }
        if let Outcome::Remote(at) = out {
            let msg = inner.outgoing.take();
            let (Some(peer), Some(msg)) = (inner.remote(at).cloned(), msg) else {
                return park(st, inner, qpn, ci);
            };
            let mut b = inner.batch.take().unwrap_or_default();
            let more = matches!(msg.op, Op::Send | Op::Write);
            b.push(&wqe[..len], msg);
            if more && batchable(v.service, send_opcode(&wqe[..len])) {
                gather_batch(eng, st, inner, &v, at, &mut b, ci, pi, wqe);
            }
            queue::save_sq(st, qpn, ci);
            return Step::Remote(peer, b);
        }
        let bbs = queue::wqebbs(len);
        if !settle(eng, st, inner, &v, &wqe[..len], bbs, out, entry, &mut ci) {
            return park(st, inner, qpn, ci);
        }
    }
}

/// What the network transport says of the RC WQE at `ci`, if it was sent:
/// still in flight, or answered (then settled here, in order).
fn network_answer(
    st: &State,
    inner: &mut Inner,
    v: &QpView,
    wqe: &[u8],
    ci: u16,
) -> Option<Outcome> {
    if v.service != st::RC {
        return None;
    }
    Some(match inner.net.req.lookup(v.qpn, ci)? {
        Known::Pending => Outcome::Pending,
        Known::Done(reply, msg) => {
            let out = match reply {
                Reply::Ack => finish(st, &mut inner.cache, v, wqe, &msg),
                Reply::Nak(s) => Outcome::Error(s),
                Reply::Rnr(d) => Outcome::Rnr(d),
            };
            inner.net.req.recycle(msg.data);
            out
        }
    })
}

/// Sends the WQEs after those in flight on the network while the RC
/// transport's window has room, up to the SND counter `pi`, then puts the
/// burst on the wire (`eager`: whatever the window allows; see
/// [`super::net::pump`]). They complete in order as their answers come; one
/// that cannot go now (not a message for the peer, or failing locally)
/// waits for the main loop, which executes it in its turn.
fn issue_ahead(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    pi: u16,
    wqe: &mut [u8; MAX_SQ_WQE],
    eager: bool,
) {
    let mut net = None;
    for _ in 0..MAX_BATCH {
        let Some(next) = inner.net.req.next_issue(v.qpn) else {
            break;
        };
        if next == pi {
            break;
        }
        // Looked up once, and only when a WQE may go.
        let to_net = *net.get_or_insert_with(|| {
            v.service == st::RC && matches!(eng.peer(inner, &v.rgid), Some(Peer::Net(_)))
        });
        if !to_net {
            break;
        }
        let Some(len) = v.read_send_wqe(next, wqe) else {
            break;
        };
        if !queue::posted_whole(pi, next, queue::wqebbs(len))
            || !batchable(v.service, send_opcode(&wqe[..len]))
        {
            break;
        }
        match execute(eng, st, inner, v, &wqe[..len], next) {
            Outcome::Pending => {}
            Outcome::Remote(_) => {
                if let Some(m) = inner.outgoing.take() {
                    inner.scratch = m.data;
                }
                break;
            }
            _ => break,
        }
    }
    super::net::pump(eng, inner, v.qpn, eager);
}

/// The in-process link's fastest path: RC RDMA WRITEs without immediate
/// of one data segment, from the WQE at `*ci` (`len` bytes in `wqe`,
/// posted whole) on, while the peer device's locks can be had without
/// waiting (this thread holds this device's; trying, never waiting, keeps
/// two threads from waiting for each other). Each WRITE's payload is copied
/// straight from this device's registered memory into the peer's, after
/// the local checks [`execute`] makes and the peer's [`deliver`] would
/// make ([`responder::deliver_write`]), and settles at once: the CQE if
/// signaled, or the error CQE and ERR on a NAK (which ends the run). The
/// checks that hold for the whole run (the QPs', and each key's but its
/// range: [`RunSource`], [`responder::WriteTarget`]) are made once per
/// key; nothing else runs meanwhile that could change them. False
/// when it took nothing: the WQE is not such a WRITE, fails locally, is not
/// for another device of this process, or the peer is busy; [`write_run`]
/// or [`execute`] take it then.
///
/// [`deliver`]: responder::deliver
#[allow(clippy::too_many_arguments)]
fn direct_writes(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    len: usize,
    ci: &mut u16,
    pi: u16,
    wqe: &mut [u8; MAX_SQ_WQE],
    entry: Entry,
) -> bool {
    if v.service != st::RC || send_opcode(&wqe[..len]) != Some(SendOpcode::RdmaWrite) {
        return false;
    }
    let Some(Peer::Remote(at)) = eng.peer(inner, &v.rgid) else {
        return false;
    };
    let Some(peer) = inner.remote(at).cloned() else {
        return false;
    };
    let took = peer.try_locked(|pst, pinner| {
        let mut view = None;
        // The peer's checks that hold for the run, made for the first
        // WRITE and again only when the key changes.
        let mut target: Option<responder::WriteTarget> = None;
        // The local checks that hold for the run, likewise.
        let mut source = RunSource {
            max_msg: v.max_msg(),
            grant: None,
        };
        let mut len = len;
        let mut took = false;
        // Each pass settles a WQE, moving `ci` towards `pi`.
        for _ in 0..v.sq_bbs {
            let w = &wqe[..len];
            let Some((src, r)) = source.one_sge_write(st, &mut inner.cache, v, w) else {
                break;
            };
            let (raddr, rkey) = (r.raddr(), r.rkey());
            if target.is_none_or(|t| t.rkey() != rkey) {
                target = responder::write_target(pst, &mut pinner.cache, v.remote_qpn, rkey);
            }
            let reply = match target.and_then(|t| t.place(rkey, raddr, src.len() as u64)) {
                Some(dst) => {
                    src.copy_to(&dst);
                    Reply::Ack
                }
                None => responder::deliver_write(
                    pst,
                    pinner,
                    &mut view,
                    v.remote_qpn,
                    raddr,
                    rkey,
                    responder::Payload::Span(src),
                ),
            };
            took = true;
            let bbs = queue::wqebbs(len);
            if reply == Reply::Ack && ctrl(w).fm_ce_se() & CE_CQE == 0 && inner.rnr.is_empty() {
                // All that `settle` does for a WQE that completed without
                // asking for a CQE, on a QP with no RNR wait to end.
                *ci = ci.wrapping_add(bbs);
            } else {
                let out = match reply {
                    Reply::Ack => success(v, w, src.len() as u32),
                    Reply::Nak(s) => Outcome::Error(s),
                    Reply::Rnr(d) => Outcome::Rnr(d),
                };
                if !settle(eng, st, inner, v, w, bbs, out, entry, ci) || reply != Reply::Ack {
                    break;
                }
            }
            if *ci == pi {
                break;
            }
            match v.read_send_wqe(*ci, wqe) {
                Some(l) if queue::posted_whole(pi, *ci, queue::wqebbs(l)) => len = l,
                _ => break,
            }
            if send_opcode(&wqe[..len]) != Some(SendOpcode::RdmaWrite) {
                break;
            }
        }
        took
    });
    let took = took.unwrap_or(false);
    if took {
        peer.arrived();
    }
    took
}

/// What [`direct_writes`] checks once for a run of RDMA WRITEs of one RC
/// QP: its largest message, and the local key of the last WRITE (checked
/// for the QP's PD and local read), so that a WRITE with the same key
/// needs only its range checked.
struct RunSource {
    max_msg: u64,
    grant: Option<Grant>,
}

impl RunSource {
    /// An RDMA WRITE WQE (the caller checked the opcode, and that the QP is
    /// RC) with one data segment (not inline, not empty) that passes the
    /// local checks [`execute`] makes: the source span and the remote
    /// address segment. `None` otherwise, for the other paths to take it.
    #[inline(always)]
    fn one_sge_write(
        &mut self,
        st: &State,
        cache: &mut Cache,
        v: &QpView,
        wqe: &[u8],
    ) -> Option<(super::dma::Span, WqeRaddrSeg)> {
        // `layout` of an RC RDMA WRITE.
        const DATA_OFF: usize = WqeCtrlSeg::SIZE_BYTES + WqeRaddrSeg::SIZE_BYTES;
        debug_assert_eq!(
            layout(v.service, send_opcode(wqe)),
            Some((Op::Write, DATA_OFF))
        );
        if wqe.len() != DATA_OFF + DS {
            return None;
        }
        let seg = WqeDataSeg::from_slice(&wqe[DATA_OFF..])?;
        let bc = seg.byte_count();
        if bc == 0 || bc & INLINE != 0 || u64::from(bc) > self.max_msg {
            return None;
        }
        let (lkey, addr, len) = (seg.lkey(), seg.addr(), u64::from(bc));
        if self.grant.is_none_or(|g| g.key != lkey) {
            self.grant = cache.grant(st, lkey, v.pd, Need::LocalRead);
        }
        let src = match self.grant {
            Some(g) => g.range(addr, len),
            // A key that fails, or one the cache never grants: decided
            // the long way.
            None => cache.resolve(st, lkey, addr, len, v.pd, Need::LocalRead),
        };
        Some((src.ok()?, raddr(wqe)))
    }
}

/// The in-process link's fast path for RC RDMA WRITEs without immediate:
/// from the WQE at `ci` (`len` bytes in `wqe`, posted whole), every such
/// WQE up to the SND counter `pi` (at most [`MAX_BATCH`]) that passes the
/// local checks [`execute`] makes has its payload gathered into one batch
/// buffer, beside its remote address and key; no message, no copy of the
/// WQE. The peer then checks and places each as [`responder::deliver`]
/// would ([`responder::deliver_write`]), and the replies settle in order as
/// any batch's. `None` when the WQE at `ci` is not such a WRITE, fails
/// locally or is not for another device of this process: [`execute`]
/// takes it. A later WQE that does not qualify ends the run and waits for
/// the main loop, as in [`gather_batch`].
#[allow(clippy::too_many_arguments)]
fn write_run(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    len: usize,
    ci: u16,
    pi: u16,
    wqe: &mut [u8; MAX_SQ_WQE],
) -> Option<Step> {
    if v.service != st::RC || send_opcode(&wqe[..len]) != Some(SendOpcode::RdmaWrite) {
        return None;
    }
    let Some(Peer::Remote(at)) = eng.peer(inner, &v.rgid) else {
        return None;
    };
    let peer = inner.remote(at)?.clone();
    let mut b = inner.batch.take().unwrap_or_default();
    b.recycle(inner);
    b.write_qpn = v.remote_qpn;
    let (mut next, mut len) = (ci, len);
    while let Some(w) = plain_write(st, &mut inner.cache, v, &wqe[..len], &mut b.payload) {
        b.writes.push(w);
        next = next.wrapping_add(queue::wqebbs(len));
        if b.writes.len() == MAX_BATCH || next == pi {
            break;
        }
        match v.read_send_wqe(next, wqe) {
            Some(l) if queue::posted_whole(pi, next, queue::wqebbs(l)) => len = l,
            _ => break,
        }
        if send_opcode(&wqe[..len]) != Some(SendOpcode::RdmaWrite) {
            break;
        }
    }
    if b.writes.is_empty() {
        inner.batch = Some(b);
        return None;
    }
    queue::save_sq(st, v.qpn, ci);
    Some(Step::Remote(peer, b))
}

/// An RDMA WRITE WQE of an RC QP, checked and gathered as [`execute`]
/// does, its payload appended to `payload`; `None` (and `payload` as it
/// was) when it fails a check, for [`execute`] to fail it in its turn.
fn plain_write(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    wqe: &[u8],
    payload: &mut Vec<u8>,
) -> Option<Write> {
    let (Op::Write, data_off) = layout(v.service, send_opcode(wqe))? else {
        return None;
    };
    let segs = wqe.get(data_off..)?;
    let start = payload.len();
    if gather_into(st, cache, v, segs, payload, start).is_err() {
        payload.truncate(start);
        return None;
    }
    let r = raddr(wqe);
    Some(Write {
        raddr: r.raddr(),
        rkey: r.rkey(),
        end: payload.len(),
        ctrl: ctrl(wqe).0,
        bbs: queue::wqebbs(wqe.len()),
    })
}

/// Adds the WQEs after the one at `ci` (already in `b`) that go to `peer`
/// too, up to the SND counter `pi`. Their messages are only built here:
/// nothing is delivered or completed until the batch's replies are settled
/// in order. A READ or atomic ends the batch, since its reply places data
/// locally that a later WQE might gather.
#[allow(clippy::too_many_arguments)]
fn gather_batch(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    peer: usize,
    b: &mut Batch,
    ci: u16,
    pi: u16,
    wqe: &mut [u8; MAX_SQ_WQE],
) {
    let mut next = ci.wrapping_add(queue::wqebbs(b.wqes.len()));
    while b.msgs.len() < MAX_BATCH && next != pi {
        let Some(len) = v.read_send_wqe(next, wqe) else {
            return;
        };
        // A WQE past the SND counter is failed by the main loop, in order.
        if !queue::posted_whole(pi, next, queue::wqebbs(len))
            || !batchable(v.service, send_opcode(&wqe[..len]))
        {
            return;
        }
        match execute(eng, st, inner, v, &wqe[..len], next) {
            Outcome::Remote(p) => {
                let Some(msg) = inner.outgoing.take() else {
                    return;
                };
                if p != peer {
                    inner.scratch = msg.data;
                    return;
                }
                let more = matches!(msg.op, Op::Send | Op::Write);
                b.push(&wqe[..len], msg);
                if !more {
                    return;
                }
                next = next.wrapping_add(queue::wqebbs(len));
            }
            // Completes (or fails) only after the batch: the loop executes
            // it again then, with the same result.
            _ => return,
        }
    }
}

/// Saves the counter and releases the QP.
fn park(st: &mut State, inner: &mut Inner, qpn: u32, ci: u16) -> Step {
    queue::save_sq(st, qpn, ci);
    inner.busy.retain(|q| *q != qpn);
    Step::Idle
}

/// Applies one WQE's outcome: CQE, counter, error state, RNR wait. `wqe`
/// is the WQE (its control segment at least), `bbs` the WQEBBs it takes.
/// Returns false when the WQE stays posted (RNR wait).
#[allow(clippy::too_many_arguments)]
fn settle(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    wqe: &[u8],
    bbs: u16,
    out: Outcome,
    entry: Entry,
    ci: &mut u16,
) -> bool {
    if let Outcome::Pending = out {
        return false;
    }
    let out = match out {
        Outcome::Rnr(delay) => {
            // rnr_retry 7 waits forever; otherwise the timer's retries count
            // down and doorbells in between do not spend them.
            let pos = inner.rnr.iter().position(|w| w.qpn == v.qpn);
            let exhausted = match pos {
                None => v.rnr_retry == 0,
                Some(i) if entry.by_timer && v.rnr_retry != 7 => {
                    inner.rnr[i].left = inner.rnr[i].left.saturating_sub(1);
                    inner.rnr[i].left == 0
                }
                Some(_) => false,
            };
            if !exhausted {
                if pos.is_none() {
                    inner.rnr.push(RnrWait {
                        qpn: v.qpn,
                        left: v.rnr_retry,
                        delay,
                    });
                }
                eng.start_timer(inner);
                return false;
            }
            Outcome::Error(CqeSyndrome::RnrRetryExcErr)
        }
        o => o,
    };
    inner.rnr.retain(|w| w.qpn != v.qpn);
    match out {
        Outcome::Done(Some(c)) => {
            cqe::push_cached(st, &mut inner.cache, v.cqn_snd, &c);
        }
        Outcome::Error(s) => {
            cqe::push_cached(st, &mut inner.cache, v.cqn_snd, &error_cqe(v, wqe, s));
            *ci = ci.wrapping_add(bbs);
            // This thread owns the send queue: the loop flushes it next.
            flush::to_error(st, v.qpn, true);
            return true;
        }
        _ => {}
    }
    *ci = ci.wrapping_add(bbs);
    true
}

/// Fails a WQE whose `ds` reaches past the SND counter `pi`, as a card
/// fails a malformed WQE: an error CQE for it, everything posted consumed,
/// the QP to ERR (the loop then flushes whatever else is posted: nothing).
fn truncated(st: &mut State, v: &QpView, wqe: &[u8], pi: u16, ci: &mut u16) {
    cqe::push(st, v.cqn_snd, &error_cqe(v, wqe, CqeSyndrome::LocalQpOpErr));
    *ci = pi;
    flush::to_error(st, v.qpn, true);
}

/// The requester's error CQE for `wqe`.
pub(crate) fn error_cqe(v: &QpView, wqe: &[u8], syndrome: CqeSyndrome) -> Completion {
    Completion {
        opcode: CqeOpcode::ReqErr,
        qpn: v.qpn,
        send_opcode: ctrl(wqe).opcode(),
        wqe_counter: ctrl(wqe).wqe_index(),
        user_index: v.user_index,
        syndrome: Some(syndrome),
        ..Completion::default()
    }
}

/// The requester's CQE for a WQE that completed.
fn success(v: &QpView, wqe: &[u8], byte_cnt: u32) -> Outcome {
    let c = ctrl(wqe);
    if c.fm_ce_se() & CE_CQE == 0 {
        return Outcome::Done(None);
    }
    Outcome::Done(Some(Completion {
        opcode: CqeOpcode::Req,
        qpn: v.qpn,
        send_opcode: c.opcode(),
        wqe_counter: c.wqe_index(),
        byte_cnt,
        user_index: v.user_index,
        ..Completion::default()
    }))
}

/// Where the data segments of an `opc` WQE start, for the QP's transport.
fn layout(service: u8, opc: Option<SendOpcode>) -> Option<(Op, usize)> {
    use SendOpcode::*;
    let opc = opc?;
    let ok = match service {
        st::RC => true,
        st::UC => matches!(opc, Send | SendImm | RdmaWrite | RdmaWriteImm),
        st::UD => matches!(opc, Send | SendImm),
        _ => false,
    };
    if !ok {
        return None;
    }
    // Segments after the ctrl segment: the address vector (UD), then the
    // remote address and the atomic's operands.
    let ud = if service == st::UD {
        WqeDatagramSeg::SIZE_BYTES
    } else {
        0
    };
    let ctrl = WqeCtrlSeg::SIZE_BYTES;
    let raddr = ctrl + WqeRaddrSeg::SIZE_BYTES;
    Some(match opc {
        Send | SendImm => (Op::Send, ctrl + ud),
        RdmaWrite | RdmaWriteImm => (Op::Write, raddr),
        RdmaRead => (Op::Read, raddr),
        AtomicCs => (Op::CmpSwap, raddr + WqeAtomicSeg::SIZE_BYTES),
        AtomicFa => (Op::FetchAdd, raddr + WqeAtomicSeg::SIZE_BYTES),
        _ => return None,
    })
}

/// Gathers the WQE's data (inline or through local keys) into `out`.
fn gather(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    segs: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), CqeSyndrome> {
    out.clear();
    gather_into(st, cache, v, segs, out, 0)
}

/// [`gather`], appending to `out`, whose message starts at `base`.
fn gather_into(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    segs: &[u8],
    out: &mut Vec<u8>,
    base: usize,
) -> Result<(), CqeSyndrome> {
    let mut at = 0;
    let byte_count = |at: usize| {
        segs.get(at..)
            .and_then(WqeInlDataSeg::from_slice)
            .map_or(0, WqeInlDataSeg::byte_count)
    };
    while at + DS <= segs.len() || byte_count(at) & INLINE != 0 {
        let bc = byte_count(at);
        if bc & INLINE != 0 {
            let n = (bc & !INLINE) as usize;
            let start = at + WqeInlDataSeg::SIZE_BYTES;
            let data = segs
                .get(start..start + n)
                .ok_or(CqeSyndrome::LocalQpOpErr)?;
            out.extend_from_slice(data);
            at += (WqeInlDataSeg::SIZE_BYTES + n).div_ceil(DS) * DS;
            continue;
        }
        let Some(seg) = segs.get(at..).and_then(WqeDataSeg::from_slice) else {
            break;
        };
        let (lkey, addr) = (seg.lkey(), seg.addr());
        at += DS;
        if bc == 0 {
            continue;
        }
        if (out.len() - base) as u64 + u64::from(bc) > v.max_msg() {
            return Err(CqeSyndrome::LocalLengthErr);
        }
        let span = cache
            .resolve(st, lkey, addr, u64::from(bc), v.pd, Need::LocalRead)
            .map_err(|_| CqeSyndrome::LocalProtErr)?;
        if !span.read_append(0, bc as usize, out) {
            out.resize(out.len() + bc as usize, 0);
        }
    }
    Ok(())
}

/// Checks (and with `data`, fills) the local scatter list of a READ or
/// atomic; returns the bytes it can take.
fn local_scatter(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    segs: &[u8],
    data: Option<&[u8]>,
) -> Result<u64, CqeSyndrome> {
    let mut room = 0u64;
    let mut placed = 0usize;
    for seg in segs.chunks_exact(DS).filter_map(WqeDataSeg::from_slice) {
        let bc = seg.byte_count();
        if bc == 0 {
            continue;
        }
        let span = cache
            .resolve(
                st,
                seg.lkey(),
                seg.addr(),
                u64::from(bc),
                v.pd,
                Need::LocalWrite,
            )
            .map_err(|_| CqeSyndrome::LocalProtErr)?;
        if let Some(d) = data {
            let n = (bc as usize).min(d.len() - placed);
            span.write(0, &d[placed..placed + n]);
            placed += n;
        }
        room += u64::from(bc);
    }
    Ok(room)
}

/// Executes one send WQE (at send queue position `at`) up to the point
/// where the responder is needed.
fn execute(
    eng: &Engine,
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    wqe: &[u8],
    at: u16,
) -> Outcome {
    let c = ctrl(wqe);
    let opc = SendOpcode::from_raw(c.opcode());
    if opc == Some(SendOpcode::Nop) {
        return success(v, wqe, 0);
    }
    if opc == Some(SendOpcode::Umr) {
        return super::umr::execute(st, v, wqe)
            .map_or_else(Outcome::Error, |()| success(v, wqe, 0));
    }
    let Some((op, data_off)) = layout(v.service, opc) else {
        return Outcome::Error(CqeSyndrome::LocalQpOpErr);
    };
    if wqe.len() < data_off {
        return Outcome::Error(CqeSyndrome::LocalQpOpErr);
    }
    let segs = &wqe[data_off..];
    let data = match inner.scratch.capacity() {
        0 => inner.spare.pop().unwrap_or_default(),
        _ => std::mem::take(&mut inner.scratch),
    };
    let mut msg = Msg::new(op, data);
    msg.service = v.service;
    msg.src_qpn = v.qpn;
    msg.solicited = c.fm_ce_se() & SE != 0;
    if matches!(opc, Some(SendOpcode::SendImm | SendOpcode::RdmaWriteImm)) {
        msg.imm = Some(c.imm().to_be_bytes());
    }
    let (dst_gid, dst_qpn, sgid_index) = if v.service == st::UD {
        let av = datagram(wqe);
        let qkey = av.key().qkey().qkey();
        // A q_key with the high bit set means "use the QP's own".
        msg.qkey = if qkey & 0x8000_0000 != 0 {
            v.q_key
        } else {
            qkey
        };
        // grh_gid_fl: [27:20] the SGID index.
        (*av.rgid(), av.dqp_dct(), (av.grh_gid_fl() >> 20) as u8)
    } else {
        (v.rgid, v.remote_qpn, v.sgid_index)
    };
    msg.dst_qpn = dst_qpn;
    msg.dst_gid = dst_gid;
    msg.src_gid = eng.gid(sgid_index);
    let r = match op {
        Op::Send | Op::Write => {
            if op == Op::Write {
                msg.raddr = raddr(wqe).raddr();
                msg.rkey = raddr(wqe).rkey();
            }
            gather(st, &mut inner.cache, v, segs, &mut msg.data).and_then(|()| {
                if v.service == st::UD && msg.data.len() as u64 > v.mtu_bytes() {
                    Err(CqeSyndrome::LocalLengthErr)
                } else {
                    Ok(())
                }
            })
        }
        Op::Read => {
            msg.raddr = raddr(wqe).raddr();
            msg.rkey = raddr(wqe).rkey();
            local_scatter(st, &mut inner.cache, v, segs, None).and_then(|room| {
                msg.len = room;
                if room > v.max_msg() {
                    Err(CqeSyndrome::LocalLengthErr)
                } else {
                    Ok(())
                }
            })
        }
        Op::CmpSwap | Op::FetchAdd => {
            msg.raddr = raddr(wqe).raddr();
            msg.rkey = raddr(wqe).rkey();
            msg.swap_add = atomic(wqe).swap_add();
            msg.compare = atomic(wqe).compare();
            msg.len = 8;
            match local_scatter(st, &mut inner.cache, v, segs, None) {
                Ok(8) => Ok(()),
                Ok(_) => Err(CqeSyndrome::LocalLengthErr),
                Err(e) => Err(e),
            }
        }
    };
    if let Err(s) = r {
        inner.scratch = msg.data;
        return Outcome::Error(s);
    }
    let peer = match eng.peer(inner, &dst_gid) {
        Some(p) => p,
        None => {
            inner.scratch = msg.data;
            return if v.service == st::RC {
                Outcome::Error(CqeSyndrome::TransportRetryExcErr)
            } else {
                success(v, wqe, 0)
            };
        }
    };
    if let Peer::Remote(i) = peer {
        inner.outgoing = Some(msg);
        return Outcome::Remote(i);
    }
    if let Peer::Net(ip) = peer {
        let pos = (at, queue::wqebbs(wqe.len()));
        let out = match super::net::request(eng, st, inner, v, pos, &mut msg, ip) {
            Ok(Status::Done(Reply::Ack)) => finish(st, &mut inner.cache, v, wqe, &msg),
            Ok(Status::Done(Reply::Nak(s))) | Err(s) => Outcome::Error(s),
            Ok(Status::Done(Reply::Rnr(d))) => Outcome::Rnr(d),
            Ok(Status::Pending) => Outcome::Pending,
        };
        inner.scratch = msg.data;
        return out;
    }
    let out = match responder::deliver(st, inner, &mut msg) {
        Reply::Ack => finish(st, &mut inner.cache, v, wqe, &msg),
        Reply::Nak(s) => Outcome::Error(s),
        Reply::Rnr(d) => Outcome::Rnr(d),
    };
    inner.scratch = msg.data;
    out
}

/// The requester's part after an ACK: place READ data or the atomic's
/// original value, and build the CQE.
fn finish(st: &State, cache: &mut Cache, v: &QpView, wqe: &[u8], msg: &Msg) -> Outcome {
    let Some((_, data_off)) = layout(v.service, send_opcode(wqe)) else {
        return success(v, wqe, 0);
    };
    let segs = wqe.get(data_off..).unwrap_or(&[]);
    match msg.op {
        Op::Read | Op::CmpSwap | Op::FetchAdd => {
            if let Err(s) = local_scatter(st, cache, v, segs, Some(&msg.data)) {
                return Outcome::Error(s);
            }
            success(v, wqe, msg.data.len() as u32)
        }
        Op::Send | Op::Write => success(v, wqe, msg.data.len() as u32),
    }
}
