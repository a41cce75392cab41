//! Lazy polling, as rdma-core's extended CQ (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` readers):
//! completions one at a time, a successful requester completion carrying
//! just its few fields, nothing written into a [`Wc`] array. Successful requester completions of
//! the CQ's cached QPs take the fast path; every other entry is decoded in
//! full, so error completions still come by name.

use prm_layouts::Cqe64;

use super::poll::{decode_any, is_hot_req, RawCqe, OP_OWN, SET_CI};
use super::ring::Ring;
use super::track::PendingTail;
use super::wc::{Wc, WcOpcode, WcStatus};
use crate::cq::{Cq, CQE_SIZE};

/// A poll in progress: [`Poll::next`] (or iterating) yields completions;
/// dropping it ends the poll, publishing the consumer index and the SQ room
/// the completions freed. Holds the CQ exclusively, as polling must.
pub struct Poll<'a> {
    cq: &'a mut Cq,
    /// The CQ's ring and size, and the consumer counter, kept here while
    /// the poll runs (the counter goes back to the CQ when it ends).
    ring: Ring,
    log: u32,
    ci: u32,
    start: u32,
    /// The SQ tail the cached QP's completions so far retire up to.
    pending: PendingTail,
}

/// One completion, read through its accessors (`ibv_wc_read_*`).
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A successful requester completion: the few fields it has.
    Req {
        wr_id: u64,
        opcode: WcOpcode,
        qpn: u32,
        byte_len: u32,
    },
    /// Anything else, decoded in full.
    Decoded(Wc),
}

impl Completion {
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        match &self.kind {
            Kind::Req { wr_id, .. } => *wr_id,
            Kind::Decoded(w) => w.wr_id,
        }
    }

    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        match &self.kind {
            Kind::Req { .. } => WcStatus::Success,
            Kind::Decoded(w) => w.status,
        }
    }

    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        self.status().is_ok()
    }

    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        match &self.kind {
            Kind::Req { opcode, .. } => *opcode,
            Kind::Decoded(w) => w.opcode,
        }
    }

    /// Bytes moved: received, read, or 8 for atomics.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        match &self.kind {
            Kind::Req { byte_len, .. } => *byte_len,
            Kind::Decoded(w) => w.byte_len,
        }
    }

    /// The local QP the completion belongs to.
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        match &self.kind {
            Kind::Req { qpn, .. } => *qpn,
            Kind::Decoded(w) => w.qp_num,
        }
    }

    /// Every field, as [`Cq::poll`] would have written it.
    pub fn wc(&self) -> Wc {
        match &self.kind {
            Kind::Req {
                wr_id,
                opcode,
                qpn,
                byte_len,
            } => Wc {
                wr_id: *wr_id,
                opcode: *opcode,
                byte_len: *byte_len,
                qp_num: *qpn,
                ..Wc::default()
            },
            Kind::Decoded(w) => *w,
        }
    }
}

impl Cq {
    /// Starts a lazy poll (`ibv_start_poll`): see [`Poll`].
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let mut cq = ctx.create_cq(16)?;
    /// let mut n = 0;
    /// for c in cq.start_poll() {
    ///     assert!(c.is_ok(), "{:?}", c.wc());
    ///     n += c.byte_len();
    /// }
    /// assert_eq!(n, 0, "nothing posted, nothing completed");
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn start_poll(&mut self) -> Poll<'_> {
        let start = self.ci;
        Poll {
            ring: self.ring(),
            log: self.log_size,
            ci: start,
            cq: self,
            start,
            pending: None,
        }
    }
}

impl Poll<'_> {
    /// The next completion (`ibv_next_poll`), `None` once the CQ is empty.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Completion> {
        let (ring, log) = (self.ring, self.log);
        loop {
            let c = self.ci;
            let e = ring.entry64(c as usize * CQE_SIZE);
            let op_own = e.load_acquire(OP_OWN);
            if is_hot_req(op_own, ((c >> log) & 1) as u8) {
                let cqe = Cqe64(e.read64b());
                if let Some(kind) = self.hot(cqe) {
                    self.ci = c.wrapping_add(1);
                    return Some(Completion { kind });
                }
            }
            if !RawCqe::is_sw_owned(op_own, c, log) {
                return None;
            }
            self.ci = c.wrapping_add(1);
            // The general decoder may move the cache: what the cached QP's
            // completions freed goes out first. Inlined rather than called:
            // a call in the caller's loop clobbers the registers that carry
            // the poll's counter and the caller's own state across
            // completions, so the hot path would spill and reload them.
            let cache = &mut self.cq.dp.cache;
            cache.publish(self.pending.take());
            let mut tail = None;
            let w = decode_any(&RawCqe(e.read64b()), cache, &mut tail);
            cache.publish(tail);
            if let Some(w) = w {
                return Some(Completion {
                    kind: Kind::Decoded(w),
                });
            }
        }
    }

    /// A successful requester CQE of a cached QP, taken; `None` leaves it
    /// to the general decoder.
    #[inline(always)]
    fn hot(&mut self, cqe: Cqe64) -> Option<Kind> {
        let sop_drop_qpn = cqe.sop_drop_qpn();
        let qpn = sop_drop_qpn & 0xff_ffff;
        let opcode = WcOpcode::from_send_opcode((sop_drop_qpn >> 24) as u8)?;
        let cache = &mut self.cq.dp.cache;
        let sq = match cache.hot_sq() {
            Some(sq) if sq.qpn() == qpn => sq,
            _ => {
                cache.publish(self.pending.take());
                if !cache.switch(qpn) {
                    return None;
                }
                cache.hot_sq()?
            }
        };
        let counter = cqe.wqe_counter();
        let (wr_id, tail) = sq.slot(counter)?;
        self.pending = Some(tail);
        let byte_len = match opcode {
            WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
            _ => cqe.byte_cnt(),
        };
        Some(Kind::Req {
            wr_id,
            opcode,
            qpn,
            byte_len,
        })
    }
}

impl Iterator for Poll<'_> {
    type Item = Completion;

    #[inline]
    fn next(&mut self) -> Option<Completion> {
        Poll::next(self)
    }
}

impl Drop for Poll<'_> {
    /// `ibv_end_poll`: the freed SQ room, then the consumer index. Always
    /// inlined, so the poll's state can live in registers while it runs.
    #[inline(always)]
    fn drop(&mut self) {
        self.cq.dp.cache.publish(self.pending.take());
        self.cq.ci = self.ci;
        if self.ci != self.start {
            self.cq.dp.dbrec.store(SET_CI, self.ci & 0xff_ffff);
        }
    }
}
