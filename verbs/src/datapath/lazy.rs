//! Lazy polling, as rdma-core's extended CQ (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` readers):
//! completions one at a time, a successful requester completion carrying
//! just its few fields, nothing written into a [`Wc`] array. The hot QP's
//! successful requester completions other than atomics take the fast path,
//! those of the CQ's other cached QPs a shorter one; every other entry is
//! decoded in full, so error completions still come by name.

use prm_layouts::Cqe64;

use super::poll::{decode_any, is_hot_req, Head, Poller, RawCqe, OP_OWN, SET_CI};
use super::ring::{DbRec, Entry64, Ring64, Walk64};
use super::track::{PollCache, QpTrack, SqView};
use super::wc::{Wc, WcOpcode, WcStatus};
use super::LOW_24;
use crate::cq::{Cq, CQE_SIZE};

/// A poll in progress: [`Poll::next`] (or iterating) yields completions;
/// dropping it ends the poll, publishing the consumer index and the SQ room
/// the completions freed. Holds the CQ exclusively, as polling must.
pub struct Poll<'a> {
    cur: Cursor<'a>,
    /// Every other entry goes through the cache, as [`Cq::poll`]'s general
    /// path. Few fields in all: the more of them, the more of the caller's
    /// own state the compiler keeps on the stack.
    cache: &'a mut PollCache,
    /// Where the CQ's consumer goes back to (where the poll began until
    /// then).
    head: &'a mut Head,
}

/// The poll's position and what its hot path reads. A copy goes to the
/// slow path, and the poll takes the position back from it: so it is not
/// live across that call, and the caller's own loop state keeps the
/// registers the call preserves instead of going to the stack. The hot QP,
/// which the slow path never changes, stays the caller's, so the compiler
/// tests it once per poll, not per completion.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    /// The entry at the consumer counter: a completion moves it with an
    /// add and a compare.
    walk: Walk64,
    /// The consumer counter of the ring's first entry in the walk's lap
    /// (a multiple of the ring's entries): with the walk's index, the
    /// consumer counter.
    lap_ci: u32,
    /// The owner bit of software's entries in this lap.
    lap: u8,
    /// The CQ's hot QP ([`Poller::hot`]), if alive and with an SQ when the
    /// poll began: its successful requester completions are decoded in
    /// [`Poll::next`] itself.
    hot: Option<Hot<'a>>,
    /// The doorbell record.
    dbrec: DbRec,
}

/// The hot QP as the hot path reads it: its slot table's address and mask
/// as values, so they stay in registers rather than being loaded through
/// the track per completion.
#[derive(Clone, Copy)]
struct Hot<'a> {
    track: &'a QpTrack,
    sq: SqView<'a>,
}

/// One completion, read through its accessors (`ibv_wc_read_*`). A
/// successful requester completion has just its few fields set; the others
/// read as in [`Cq::poll`]'s (zero), and the compiler drops the ones a
/// caller never reads.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    wc: Wc,
}

impl Completion {
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wc.wr_id
    }

    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        self.wc.status
    }

    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        self.status().is_ok()
    }

    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        self.wc.opcode
    }

    /// Bytes moved: received, read, or 8 for atomics.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.wc.byte_len
    }

    /// The local QP the completion belongs to.
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        self.wc.qp_num
    }

    /// Every field, as [`Cq::poll`] would have written it.
    #[inline(always)]
    pub fn wc(&self) -> Wc {
        self.wc
    }
}

/// A successful requester completion's work completion, of any opcode.
#[inline(always)]
fn req_wc(wr_id: u64, opcode: WcOpcode, qpn: u32, cqe: &Cqe64) -> Wc {
    // Read unconditionally, so the atomics' fixed 8 is a select.
    let byte_len = match opcode {
        WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
        _ => cqe.byte_cnt(),
    };
    Wc::req(wr_id, opcode, byte_len, qpn)
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
        let start = self.head.ci;
        let ring = self.head.ring();
        if self.dp.cache.switched() {
            retarget(&mut self.dp);
        }
        let dp = &mut self.dp;
        let hot = dp.hot.as_deref().filter(|t| t.is_live() && t.has_sq());
        Poll {
            cur: Cursor {
                walk: ring.walk64(start as usize * CQE_SIZE),
                lap_ci: start & !((1 << self.log_size) - 1),
                lap: ((start >> self.log_size) & 1) as u8,
                hot: hot.map(|track| Hot {
                    track,
                    sq: track.sq_view(),
                }),
                dbrec: dp.dbrec,
            },
            cache: &mut dp.cache,
            head: &mut self.head,
        }
    }
}

/// Makes the cache's QP the lazy polls' hot QP. Out of line: it changes
/// only when completions of another QP came through the cache.
#[cold]
#[inline(never)]
fn retarget(dp: &mut Poller) {
    dp.hot = dp.cache.take_current().cloned();
}

/// What [`general`] made of the entry at the consumer counter.
enum Taken {
    /// Not software's: the CQ is empty.
    Empty,
    /// Consumed, with nothing to report (a resize marker, or a completion
    /// from before its QP's reset).
    Skip,
    Took(Completion),
}

/// Takes the software-owned entry `e` (owner byte `op_own`, consumer
/// counter `c` in `ring`) that the hot path left: a successful requester
/// completion of another cached QP (moving the cache to it), else
/// anything, decoded in full. Publishes the SQ tail of what it takes at
/// once (the caller has published the hot QP's). Out of line and cold, so
/// the hot path's state stays in the caller's registers; and with the C
/// ABI, which cannot unwind (a panic here would abort; nothing here
/// panics), so the caller's loop has no unwinding edge through it: on such
/// an edge the poll would be dropped out of line, taking its address, and
/// its state would live on the stack instead.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // Called from Rust only, for the nounwind.
extern "C" fn general(
    cache: &mut PollCache,
    hot_qpn: Option<u32>,
    ring: Ring64,
    e: Entry64,
    op_own: u8,
    c: u32,
) -> Taken {
    let log = (ring.len() / CQE_SIZE).trailing_zeros();
    if !RawCqe::is_sw_owned(op_own, c, log) {
        return Taken::Empty;
    }
    let raw = RawCqe(e.read64b());
    if is_hot_req(op_own, ((c >> log) & 1) as u8) && hot_qpn != Some(raw.qpn()) {
        if let Some(wc) = other_req(cache, raw.cqe()) {
            return Taken::Took(Completion { wc });
        }
    }
    let mut done = None;
    let w = decode_any(&raw, c, cache, &mut done);
    cache.publish(done);
    match w {
        Some(wc) => Taken::Took(Completion { wc }),
        None => Taken::Skip,
    }
}

/// A successful requester CQE of a cached QP other than the hot one,
/// taken; `None` leaves it to the full decoder.
#[inline(always)]
fn other_req(cache: &mut PollCache, cqe: Cqe64) -> Option<Wc> {
    let sop_drop_qpn = cqe.sop_drop_qpn();
    let qpn = sop_drop_qpn & LOW_24;
    let opcode = WcOpcode::from_send_opcode((sop_drop_qpn >> 24) as u8)?;
    let sq = match cache.hot_sq() {
        Some(sq) if sq.qpn() == qpn => sq,
        _ => {
            if !cache.switch(qpn) {
                return None;
            }
            cache.hot_sq()?
        }
    };
    let wqe_counter = cqe.wqe_counter();
    let wr_id = sq.wr_id(wqe_counter);
    sq.publish(Some(wqe_counter));
    Some(req_wc(wr_id, opcode, qpn, &cqe))
}

impl Poll<'_> {
    /// The next completion (`ibv_next_poll`), `None` once the CQ is empty.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Completion> {
        loop {
            let e = self.cur.walk.entry();
            let op_own = e.load_acquire(OP_OWN);
            if let Some(wc) = self.cur.hot(e, op_own) {
                self.cur.step();
                return Some(Completion { wc });
            }
            let mut cur = self.cur;
            let taken = slow(&mut cur, self.cache, self.head.ci);
            self.cur.walk = cur.walk;
            self.cur.lap_ci = cur.lap_ci;
            self.cur.lap = cur.lap;
            match taken {
                Taken::Empty => return None,
                Taken::Skip => {}
                Taken::Took(t) => return Some(t),
            }
        }
    }
}

impl Cursor<'_> {
    /// The consumer counter.
    #[inline(always)]
    fn ci(&self) -> u32 {
        self.lap_ci.wrapping_add(self.walk.index() as u32)
    }

    /// Moves past the entry at the consumer counter.
    #[inline(always)]
    fn step(&mut self) {
        if self.walk.step() {
            let entries = (self.walk.ring().len() / CQE_SIZE) as u32;
            self.lap_ci = self.lap_ci.wrapping_add(entries);
            self.lap ^= 1;
        }
    }

    /// A successful requester completion of the hot QP in entry `e` (owner
    /// byte `op_own`) whose length is the CQE's byte count (not an
    /// atomic's); `None` leaves it to [`slow`].
    #[inline(always)]
    fn hot(&self, e: Entry64, op_own: u8) -> Option<Wc> {
        if !is_hot_req(op_own, self.lap) {
            return None;
        }
        let h = self.hot?;
        // The entry is ours: only the fields used below are loaded.
        let cqe = Cqe64(e.read64b());
        let (cqe_qpn, opcode) = WcOpcode::counted_req(&cqe);
        let qpn = h.track.qpn;
        if cqe_qpn != qpn {
            return None;
        }
        Some(Wc::req(
            h.sq.wr_id(cqe.wqe_counter()),
            opcode,
            cqe.byte_cnt(),
            qpn,
        ))
    }
}

/// The entry at `cur`'s consumer counter, which the hot path left (the
/// consumer index was `cq_ci` when the poll began): the hot QP's SQ tail
/// so far goes out first, as the general path may decode a completion of
/// the hot QP (an error, say); then [`general`] takes the entry, and `cur`
/// moves past it unless the CQ is empty. No other entry needs looking at
/// for the tail: the tails of the hot QP's completions before an entry the
/// general path took went out when it took it, and a later completion's
/// tail covers the earlier ones'. Out of line and with the C ABI, for the
/// reasons [`general`] gives.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // Called from Rust only, for the nounwind.
extern "C" fn slow(cur: &mut Cursor<'_>, cache: &mut PollCache, cq_ci: u32) -> Taken {
    let e = cur.walk.entry();
    let op_own = e.load_acquire(OP_OWN);
    let c = cur.ci();
    let ring = cur.walk.ring();
    let hot = cur.hot.map(|h| h.track);
    if c != cq_ci {
        end_hot(hot, ring, c);
    }
    let taken = general(cache, hot.map(|t| t.qpn), ring, e, op_own, c);
    if !matches!(taken, Taken::Empty) {
        cur.step();
    }
    taken
}

/// Publishes the hot QP's SQ tail for consumer counter `ci`, if the entry
/// last taken, before it, is a completion of the hot QP. Out of line,
/// taking values, not the poll, and with the C ABI, for the reasons
/// [`general`] gives.
#[inline(never)]
#[allow(improper_ctypes_definitions)] // Called from Rust only, for the nounwind.
extern "C" fn end_hot(hot: Option<&QpTrack>, ring: Ring64, ci: u32) {
    let Some(t) = hot else {
        return;
    };
    let c = ci.wrapping_sub(1);
    let last = ring.entry64(c as usize * CQE_SIZE);
    let lap = ((c as usize * CQE_SIZE) & ring.len() != 0) as u8;
    let op_own = last.load_acquire(OP_OWN);
    let cqe = Cqe64(last.read64b());
    if !is_hot_req(op_own, lap) || cqe.sop_drop_qpn() & LOW_24 != t.qpn {
        return;
    }
    if t.has_sq() {
        t.set_sq_done(cqe.wqe_counter());
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
    /// `ibv_end_poll`: the freed SQ room, then the consumer index. A check
    /// and calls, so the compiler inlines it on every path: a drop left out
    /// of line would take the poll's address, and its state would then live
    /// on the stack, not in the caller's registers, while it runs.
    #[inline(always)]
    fn drop(&mut self) {
        let ci = self.cur.ci();
        if ci != self.head.ci {
            end_hot(self.cur.hot.map(|h| h.track), self.cur.walk.ring(), ci);
            self.head.seek(ci);
            self.cur.dbrec.store(SET_CI, ci & LOW_24);
        }
    }
}
