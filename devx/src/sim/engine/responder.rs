//! The responder side: a message arrives at a QP of this device. Receive
//! WQEs come from the QP's RQ or its SRQ (RMP); the responder checks its
//! state, transport, q_key, lengths, keys and access rights, performs the
//! operation and writes its own CQEs. The returned [`Reply`] is what the
//! requester's transport learns.

use std::time::Duration;

use super::cache::Cache;
use super::cqe::{self, Completion};
use super::flush;
use super::keys::Need;
use super::msg::{Msg, Op, Placed, Reply};
use super::queue::{self, QpView, INVALID_LKEY, MAX_RQ_WQE};
use super::Inner;
use crate::sim::fw::qp::{rq_type, st, state};
use crate::sim::fw::state::State;
use prm_layouts::{CqeOpcode, CqeSyndrome, WqeDataSeg, WqeSrqNextSeg};

/// Bytes of the GRH a UD receive buffer gets before the payload.
pub(crate) const GRH_BYTES: usize = 40;

/// One consumed receive WQE.
struct Recv {
    /// The engine's reused receive buffer ([`Inner::recv`]); hand it back
    /// with [`Recv::done`].
    wqe: Vec<u8>,
    len: usize,
    /// Where the data segments start (after an SRQ's next segment).
    sge_off: usize,
    wqe_counter: u16,
}

impl Recv {
    fn done(self, inner: &mut Inner) {
        inner.recv = self.wqe;
    }
}

/// Delivers `msg` to QP `msg.dst_qpn` of this device.
pub(crate) fn deliver(st: &mut State, inner: &mut Inner, msg: &mut Msg) -> Reply {
    let reliable = msg.service == st::RC;
    // Nobody there, or not listening: an RC requester's retries run out;
    // unreliable transports just lose the packet.
    let lost = if reliable {
        Reply::Nak(CqeSyndrome::TransportRetryExcErr)
    } else {
        Reply::Ack
    };
    let Some(v) = inner.cache.qp_view(st, msg.dst_qpn) else {
        return lost;
    };
    if v.service != msg.service || !matches!(v.state, state::RTR | state::RTS) {
        return lost;
    }
    if v.service == st::UD && msg.qkey != v.q_key {
        return Reply::Ack;
    }
    let len = match msg.op {
        Op::Read => msg.len,
        Op::Write if msg.placed != Placed::No => msg.len,
        _ => msg.data.len() as u64,
    };
    if len > v.max_msg() {
        return fail(
            st,
            inner,
            &v,
            None,
            CqeSyndrome::RemoteInvalReqErr,
            reliable,
        );
    }
    match msg.op {
        Op::Send => receive(st, inner, &v, msg, reliable),
        Op::Write => write(st, inner, &v, msg, reliable),
        Op::Read => read(st, inner, &v, msg),
        Op::CmpSwap | Op::FetchAdd => atomic(st, inner, &v, msg),
    }
}

/// Where a WRITE's payload comes from on the in-process link's fast path.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// Gathered into a buffer while the requester's device was locked.
    Bytes(&'a [u8]),
    /// Still in the requester's registered memory, checked for its local
    /// key, with the requester's device locked as well as this one.
    Span(super::dma::Span),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::Bytes(d) => d.len(),
            Payload::Span(s) => s.len(),
        }
    }
}

/// Whether QP `v` takes RC WRITEs at all: an RC QP in RTR or RTS.
fn takes_rc_writes(v: &QpView) -> bool {
    v.service == st::RC && matches!(v.state, state::RTR | state::RTS)
}

/// An RC RDMA WRITE without immediate of `data` to `raddr` under `rkey`,
/// for QP `qpn` as `view` (resolved by the first WRITE of a run, then kept:
/// such a WRITE changes nothing in the QP unless it fails, and the run
/// stops at the first that fails). The checks and the outcome are
/// [`deliver`]'s for the same message, without building one.
pub(crate) fn deliver_write(
    st: &mut State,
    inner: &mut Inner,
    view: &mut Option<QpView>,
    qpn: u32,
    raddr: u64,
    rkey: u32,
    data: Payload<'_>,
) -> Reply {
    let lost = Reply::Nak(CqeSyndrome::TransportRetryExcErr);
    if view.is_none() {
        *view = inner.cache.qp_view(st, qpn);
    }
    let Some(v) = view.as_ref() else {
        return lost;
    };
    if !takes_rc_writes(v) {
        return lost;
    }
    let len = data.len() as u64;
    if len > v.max_msg() {
        return fail(st, inner, v, None, CqeSyndrome::RemoteInvalReqErr, true);
    }
    let Some(span) = remote_range(st, &mut inner.cache, v, rkey, raddr, len, Need::RemoteWrite)
    else {
        return fail(st, inner, v, None, CqeSyndrome::RemoteAccessErr, true);
    };
    // The span was resolved for the payload's length: both copies fit.
    match data {
        Payload::Bytes(d) => span.write(0, d),
        Payload::Span(s) => s.copy_to(&span),
    };
    Reply::Ack
}

/// The checks [`deliver_write`] makes of a WRITE that hold for every
/// WRITE of a run to one QP under one key: the QP's transport, state and
/// remote write right, the key's PD and rights. Made by [`write_target`];
/// valid while the run holds this device's locks and stops at its first
/// failure (nothing else changes the QP or the key meanwhile).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteTarget {
    max_msg: u64,
    grant: super::cache::Grant,
}

impl WriteTarget {
    /// The key the target was checked for.
    #[inline(always)]
    pub(crate) fn rkey(&self) -> u32 {
        self.grant.key
    }

    /// Where a WRITE of `len` bytes to `raddr` under `rkey` lands, when it
    /// passes what is left to check: its key is the target's, its length
    /// and range fit. `None`: [`deliver_write`] decides it.
    #[inline(always)]
    pub(crate) fn place(&self, rkey: u32, raddr: u64, len: u64) -> Option<super::dma::Span> {
        if rkey != self.grant.key || len > self.max_msg {
            return None;
        }
        self.grant.range(raddr, len).ok()
    }
}

/// [`WriteTarget`] of QP `qpn` under `rkey`; `None` when a WRITE there
/// would not pass, or its key always takes the uncached path:
/// [`deliver_write`] then handles each.
pub(crate) fn write_target(
    st: &State,
    cache: &mut Cache,
    qpn: u32,
    rkey: u32,
) -> Option<WriteTarget> {
    let v = cache.qp_view_ref(st, qpn)?;
    if !takes_rc_writes(v) || !v.rwe {
        return None;
    }
    let (pd, max_msg) = (v.pd, v.max_msg());
    let grant = cache.grant(st, rkey, pd, Need::RemoteWrite)?;
    Some(WriteTarget { max_msg, grant })
}

/// A responder-side error: the receive WQE (if one was consumed) completes
/// with its syndrome and the QP enters ERR; the requester hears `remote` on a
/// reliable transport and nothing otherwise.
fn fail(
    st: &mut State,
    inner: &mut Inner,
    v: &QpView,
    recv: Option<(&Recv, CqeSyndrome)>,
    remote: CqeSyndrome,
    reliable: bool,
) -> Reply {
    if let Some((r, local)) = recv {
        let c = Completion {
            opcode: CqeOpcode::RespErr,
            qpn: v.qpn,
            wqe_counter: r.wqe_counter,
            user_index: v.user_index,
            syndrome: Some(local),
            ..Completion::default()
        };
        cqe::push(st, v.cqn_rcv, &c);
    }
    let busy = inner.busy.contains(&v.qpn);
    flush::to_error(st, v.qpn, busy);
    super::notify::qp_error(st, v.qpn, remote);
    if reliable {
        Reply::Nak(remote)
    } else {
        Reply::Ack
    }
}

/// Remote access checks shared by WRITE, READ and atomics: the QP's
/// rre/rwe/rae, then the rkey.
fn remote_span(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    msg: &Msg,
    len: u64,
    need: Need,
) -> Option<super::dma::Span> {
    remote_range(st, cache, v, msg.rkey, msg.raddr, len, need)
}

/// [`remote_span`] for a key and address given apart from a message.
fn remote_range(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    rkey: u32,
    raddr: u64,
    len: u64,
    need: Need,
) -> Option<super::dma::Span> {
    let qp_allows = match need {
        Need::RemoteRead => v.rre,
        Need::RemoteWrite => v.rwe,
        Need::RemoteAtomic => v.rae,
        _ => false,
    };
    if !qp_allows {
        return None;
    }
    cache.resolve(st, rkey, raddr, len, v.pd, need).ok()
}

fn rnr(v: &QpView, reliable: bool) -> Reply {
    if reliable {
        Reply::Rnr(rnr_delay(v.min_rnr_nak))
    } else {
        Reply::Ack
    }
}

fn receive(st: &mut State, inner: &mut Inner, v: &QpView, msg: &Msg, reliable: bool) -> Reply {
    let Some(r) = take_recv(st, inner, v) else {
        return rnr(v, reliable);
    };
    let mut grh = [0u8; GRH_BYTES];
    let ud = v.service == st::UD;
    if ud {
        grh = make_grh(msg);
    }
    let parts: [&[u8]; 2] = [if ud { &grh[..] } else { &[] }, &msg.data];
    let reply = match scatter(st, &mut inner.cache, v.pd, &r.wqe[r.sge_off..r.len], parts) {
        Ok(n) => {
            let c = Completion {
                opcode: if msg.imm.is_some() {
                    CqeOpcode::RespSendImm
                } else {
                    CqeOpcode::RespSend
                },
                se: msg.solicited,
                qpn: v.qpn,
                wqe_counter: r.wqe_counter,
                byte_cnt: n as u32,
                imm: msg.imm.unwrap_or_default(),
                flags_rqpn: (msg.src_qpn & 0x00ff_ffff) | if ud { 1 << 28 } else { 0 },
                user_index: v.user_index,
                ..Completion::default()
            };
            cqe::push(st, v.cqn_rcv, &c);
            Reply::Ack
        }
        Err(ScatterError::Length) => fail(
            st,
            inner,
            v,
            Some((&r, CqeSyndrome::LocalLengthErr)),
            CqeSyndrome::RemoteInvalReqErr,
            reliable,
        ),
        Err(ScatterError::Protection) => fail(
            st,
            inner,
            v,
            Some((&r, CqeSyndrome::LocalProtErr)),
            CqeSyndrome::RemoteOpErr,
            reliable,
        ),
    };
    r.done(inner);
    reply
}

/// Places `data` at byte `at` of the WRITE `msg` (its RETH's address, key
/// and length) on QP `v`, after the checks [`write`] makes of the whole
/// range; whether they passed.
pub(crate) fn place_write(
    st: &State,
    cache: &mut Cache,
    v: &QpView,
    msg: &Msg,
    at: u64,
    data: &[u8],
) -> bool {
    let Some(span) = remote_span(st, cache, v, msg, msg.len, Need::RemoteWrite) else {
        return false;
    };
    usize::try_from(at).is_ok_and(|at| span.write(at, data))
}

fn write(st: &mut State, inner: &mut Inner, v: &QpView, msg: &Msg, reliable: bool) -> Reply {
    let len = match msg.placed {
        Placed::No => msg.data.len() as u64,
        Placed::Done | Placed::Refused => msg.len,
    };
    // A placed message is checked again as a whole, as one that travelled
    // whole is.
    let span = match msg.placed {
        Placed::Refused => None,
        _ => remote_span(st, &mut inner.cache, v, msg, len, Need::RemoteWrite),
    };
    let Some(span) = span else {
        // UC has no NAKs: a bad write is dropped, the QP keeps going.
        if !reliable {
            return Reply::Ack;
        }
        return fail(st, inner, v, None, CqeSyndrome::RemoteAccessErr, true);
    };
    let recv = if msg.imm.is_some() {
        match take_recv(st, inner, v) {
            Some(r) => Some(r),
            None => return rnr(v, reliable),
        }
    } else {
        None
    };
    if msg.placed == Placed::No {
        span.write(0, &msg.data);
    }
    if let Some(r) = recv {
        let c = Completion {
            opcode: CqeOpcode::RespWrImm,
            se: msg.solicited,
            qpn: v.qpn,
            wqe_counter: r.wqe_counter,
            byte_cnt: len as u32,
            imm: msg.imm.unwrap_or_default(),
            flags_rqpn: msg.src_qpn & 0x00ff_ffff,
            user_index: v.user_index,
            ..Completion::default()
        };
        cqe::push(st, v.cqn_rcv, &c);
        r.done(inner);
    }
    Reply::Ack
}

fn read(st: &mut State, inner: &mut Inner, v: &QpView, msg: &mut Msg) -> Reply {
    let Some(span) = remote_span(st, &mut inner.cache, v, msg, msg.len, Need::RemoteRead) else {
        return fail(st, inner, v, None, CqeSyndrome::RemoteAccessErr, true);
    };
    msg.data.clear();
    if !span.read_append(0, span.len(), &mut msg.data) {
        msg.data.resize(span.len(), 0);
    }
    Reply::Ack
}

/// Atomics see the target as a host-order (little-endian on x86) u64, the
/// value an application reads from its own memory; the original value goes
/// back to the requester in the same order.
fn atomic(st: &mut State, inner: &mut Inner, v: &QpView, msg: &mut Msg) -> Reply {
    if !msg.raddr.is_multiple_of(8) {
        return fail(st, inner, v, None, CqeSyndrome::RemoteInvalReqErr, true);
    }
    let Some(span) = remote_span(st, &mut inner.cache, v, msg, 8, Need::RemoteAtomic) else {
        return fail(st, inner, v, None, CqeSyndrome::RemoteAccessErr, true);
    };
    let mut b = [0u8; 8];
    span.read(0, &mut b);
    let old = u64::from_ne_bytes(b);
    let new = match msg.op {
        Op::CmpSwap if old == msg.compare => Some(msg.swap_add),
        Op::FetchAdd => Some(old.wrapping_add(msg.swap_add)),
        _ => None,
    };
    if let Some(n) = new {
        span.write(0, &n.to_ne_bytes());
    }
    msg.data.clear();
    msg.data.extend_from_slice(&b);
    Reply::Ack
}

/// A GRH-shaped header: IPv6 version, payload length, next header 0x1b
/// (BTH), hop limit, source and destination GIDs.
fn make_grh(msg: &Msg) -> [u8; GRH_BYTES] {
    let mut g = [0u8; GRH_BYTES];
    g[0] = 0x60;
    let plen = (msg.data.len() as u32).min(0xffff) as u16;
    g[4..6].copy_from_slice(&plen.to_be_bytes());
    g[6] = 0x1b;
    g[7] = 64;
    g[8..24].copy_from_slice(&msg.src_gid);
    g[24..40].copy_from_slice(&msg.dst_gid);
    g
}

enum ScatterError {
    Length,
    Protection,
}

/// Scatters `parts` (in order) over the receive WQE's data segments.
fn scatter(
    st: &State,
    cache: &mut Cache,
    pd: u32,
    segs: &[u8],
    parts: [&[u8]; 2],
) -> Result<usize, ScatterError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut part = 0;
    let mut at = 0;
    let mut placed = 0;
    for seg in segs
        .chunks_exact(WqeDataSeg::SIZE_BYTES)
        .filter_map(WqeDataSeg::from_slice)
    {
        if placed == total {
            break;
        }
        let (bc, lkey, addr) = (seg.byte_count(), seg.lkey(), seg.addr());
        if bc == 0 && lkey == INVALID_LKEY {
            break;
        }
        if bc == 0 {
            continue;
        }
        let take = (bc as usize).min(total - placed);
        let span = cache
            .resolve(st, lkey, addr, take as u64, pd, Need::LocalWrite)
            .map_err(|_| ScatterError::Protection)?;
        let mut done = 0;
        while done < take {
            let src = &parts[part][at..];
            let n = src.len().min(take - done);
            span.write(done, &src[..n]);
            done += n;
            at += n;
            if at == parts[part].len() && part + 1 < parts.len() {
                part += 1;
                at = 0;
            }
        }
        placed += take;
        // Skip empty parts so the next segment starts on real data.
        while part + 1 < parts.len() && at == parts[part].len() {
            part += 1;
            at = 0;
        }
    }
    if placed < total {
        return Err(ScatterError::Length);
    }
    Ok(total)
}

/// Consumes the next receive WQE of the QP's RQ or SRQ; `None` when
/// software has posted none (or the queue memory is unusable).
fn take_recv(st: &mut State, inner: &mut Inner, v: &QpView) -> Option<Recv> {
    // Zeroed once per engine, not per receive: only the `len` bytes just
    // read are ever looked at.
    let mut wqe = std::mem::take(&mut inner.recv);
    wqe.resize(MAX_RQ_WQE, 0);
    let mut r = Recv {
        wqe,
        len: 0,
        sge_off: 0,
        wqe_counter: 0,
    };
    if read_recv(st, inner, v, &mut r).is_some() {
        return Some(r);
    }
    r.done(inner);
    None
}

fn read_recv(st: &mut State, inner: &mut Inner, v: &QpView, r: &mut Recv) -> Option<()> {
    match v.rq_type {
        rq_type::REGULAR => {
            let posted = v.rcv_counter()?;
            if posted == v.rq_ci as u16 {
                return None;
            }
            r.len = v.read_recv_wqe(v.rq_ci, &mut r.wqe)?;
            r.wqe_counter = v.rq_ci as u16;
            queue::save_rq(st, v.qpn, v.rq_ci.wrapping_add(1));
            Some(())
        }
        rq_type::SRQ => {
            let s = queue::srq_view(st, v.srqn)?;
            if !s.ready {
                return None;
            }
            let posted = s.posted()?;
            if posted as u16 == s.consumed as u16 {
                return None;
            }
            // The linked list's current head is the engine's own state; it
            // restarts at WQE 0 whenever the RMP's counter shows a new ring.
            let head = match inner.srq_heads.get(&s.srqn) {
                Some(&(consumed, head)) if consumed == s.consumed => head,
                _ => 0,
            };
            let index = if s.linked_list {
                head & (s.wqes - 1)
            } else {
                s.consumed & (s.wqes - 1)
            };
            r.len = s.read_wqe(index, &mut r.wqe)?;
            r.wqe_counter = index as u16;
            let consumed = s.consumed.wrapping_add(1);
            let next = if s.linked_list {
                r.sge_off = WqeSrqNextSeg::SIZE_BYTES;
                WqeSrqNextSeg::from_slice(&r.wqe).map_or(0, |n| u32::from(n.next_wqe_index()))
            } else {
                consumed
            };
            inner.srq_heads.insert(s.srqn, (consumed, next));
            queue::save_srq_counter(st, s.srqn, consumed);
            queue::srq_limit(st, s.srqn, (posted as u16).wrapping_sub(consumed as u16));
            Some(())
        }
        _ => None,
    }
}

/// The IB RNR timer code table (min_rnr_nak), capped so an emulated wait
/// never stalls a test for long.
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    let us = US[usize::from(code & 31)].min(2_000);
    Duration::from_micros(u64::from(us))
}
