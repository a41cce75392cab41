//! Which QP states accept posted work requests (IBA §10.3.1, the QP state
//! table; rdmavt's `ib_rvt_state_ops` follows it): sends are accepted in
//! RTS, SQD, SQE and ERR (in SQE and ERR they complete flushed), receives in
//! every state but RESET. Posting anywhere else fails at once instead of
//! leaving a WQE the device never executes.
//!
//! Each queue keeps a copy of the QP state, stored by the QP's modify path
//! after every transition, so the check is one byte load per post call or
//! batch. The copy follows this library's transitions only: a QP the device
//! moves to ERR on its own still shows its last state, which accepts posts as
//! ERR would (they flush).

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use prm_layouts::enums::QpState;

use crate::error::Error;

/// A queue's copy of its QP's state.
pub(crate) struct PostState(AtomicU8);

impl PostState {
    pub(crate) fn new() -> PostState {
        PostState(AtomicU8::new(QpState::Rst.raw()))
    }

    pub(crate) fn set(&self, s: QpState) {
        self.0.store(s.raw(), Ordering::Relaxed);
    }

    #[inline(always)]
    pub(crate) fn raw(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A send queue's copy of its QP's state, with the WQEBBs a post may fill
/// past the cached tail: the queue's size in the states that take sends,
/// none in the others. The room check of a single post then also refuses a
/// QP that takes no sends, and only then is the state read, to name it.
///
/// The cached tail is kept as the SQ counter posts may fill up to (the
/// tail plus that limit): a post compares its end with one value.
pub(crate) struct SendState {
    state: PostState,
    limit: AtomicU32,
    end: AtomicU32,
    bbs: u32,
}

impl SendState {
    /// For a queue of `bbs` WQEBBs, its QP in RST.
    pub(crate) fn new(bbs: u32) -> SendState {
        SendState {
            state: PostState::new(),
            limit: AtomicU32::new(0),
            end: AtomicU32::new(0),
            bbs,
        }
    }

    /// The QP reached state `s`. Transitions come from the QP's owner,
    /// never during a post (which holds the queue exclusively).
    pub(crate) fn set(&self, s: QpState) {
        self.state.set(s);
        let limit = if sends_allowed(s.raw()) { self.bbs } else { 0 };
        let tail = self.tail();
        self.limit.store(limit, Ordering::Relaxed);
        self.end.store(tail.wrapping_add(limit), Ordering::Relaxed);
    }

    /// The SQ tail as last worked out.
    pub(crate) fn tail(&self) -> u32 {
        self.end().wrapping_sub(self.limit())
    }

    /// The SQ counter posts may fill up to as of the cached tail.
    #[inline(always)]
    pub(crate) fn end(&self) -> u32 {
        self.end.load(Ordering::Relaxed)
    }

    /// Caches `end` (from [`SendState::end_at`] or a batch's copy).
    #[inline(always)]
    pub(crate) fn set_end(&self, end: u32) {
        self.end.store(end, Ordering::Relaxed);
    }

    /// The SQ counter posts may fill up to with the SQ tail at `tail`.
    #[inline(always)]
    pub(crate) fn end_at(&self, tail: u32) -> u32 {
        tail.wrapping_add(self.limit())
    }

    #[inline(always)]
    pub(crate) fn raw(&self) -> u8 {
        self.state.raw()
    }

    /// The queue's size in WQEBBs.
    pub(crate) fn bbs(&self) -> u32 {
        self.bbs
    }

    /// WQEBBs in use (posted, not retired) a post may bring the queue to.
    #[inline(always)]
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }
}

/// Whether a QP in state `raw` accepts send requests.
#[inline(always)]
pub(crate) fn sends_allowed(raw: u8) -> bool {
    const RTS: u8 = QpState::Rts.raw();
    const SQD: u8 = QpState::Sqd.raw();
    const SQER: u8 = QpState::Sqer.raw();
    const ERR: u8 = QpState::Err.raw();
    matches!(raw, RTS | SQD | SQER | ERR)
}

/// Whether a QP in state `raw` accepts receive requests.
#[inline(always)]
pub(crate) fn recvs_allowed(raw: u8) -> bool {
    raw != QpState::Rst.raw()
}

/// The verbs name of a state (`IBV_QPS_*` without the prefix).
fn state_name(raw: u8) -> String {
    match QpState::from_raw(raw) {
        Some(QpState::Rst) => "RESET".into(),
        Some(QpState::Sqer) => "SQE".into(),
        Some(s) => s.name().into(),
        None => format!("state {raw:#x}"),
    }
}

// `extern "C"`: cannot unwind, so the hot callers need no landing pad.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
pub(crate) extern "C" fn send_refused(verb: &'static str, qpn: u32, raw: u8) -> Error {
    Error::QpState {
        verb,
        qpn,
        state: state_name(raw),
        need: "sends need RTS (or SQD, SQE, ERR); connect the QP first",
    }
}

#[cold]
#[inline(never)]
pub(crate) fn recv_refused(qpn: u32, raw: u8) -> Error {
    Error::QpState {
        verb: "post_recv",
        qpn,
        state: state_name(raw),
        need: "receives need INIT or later; move the QP out of RESET first",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_table() {
        use QpState::*;
        for (s, send, recv) in [
            (Rst, false, false),
            (Init, false, true),
            (Rtr, false, true),
            (Rts, true, true),
            (Sqd, true, true),
            (Sqer, true, true),
            (Err, true, true),
        ] {
            assert_eq!(sends_allowed(s.raw()), send, "{s} sends");
            assert_eq!(recvs_allowed(s.raw()), recv, "{s} receives");
        }
    }
}
