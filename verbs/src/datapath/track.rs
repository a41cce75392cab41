//! Which work request a completion retires. The producer (a QP's or SRQ's
//! post) records wr_ids per slot; the consumer (a CQ's poll, perhaps on
//! another thread) reads them back by the CQE's QPN and WQE counter. Each
//! field has a single writer, and the device's CQE write sits between the two
//! sides, so relaxed slot accesses suffice; what tells the producer what is
//! free again is release/acquire.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::ring::{Pow2Table, Pow2View};
use super::LOW_24;

fn slots<T: Default>(n: u32) -> Box<[T]> {
    (0..n).map(|_| T::default()).collect()
}

/// [`QpTrack::key`] of a destroyed QP: no 24-bit QPN.
const DEAD: u32 = u32::MAX;

/// Set in [`QpTrack::key`] while a CQ of the QP may still hold completions
/// from before the QP's last reset: no CQE's QPN then matches the key, so
/// the fast paths leave the QP's completions to the general path, which
/// knows where the old ones end ([`Registry::stale`]).
const STALE: u32 = 1 << 31;

/// [`QpTrack::sq_done`] while no completion was polled since the SQ
/// (re)started: no 16-bit WQE counter.
const NONE_DONE: u32 = u32::MAX;

/// One QP's outstanding work, shared with the CQs it completes into. In
/// field order and cache-line aligned: what a completion reads (the key,
/// the slot table's address and mask) and writes (the last WQE retired)
/// share the first cache line.
#[repr(C, align(64))]
pub(crate) struct QpTrack {
    /// `qpn` while the QP lives, [`DEAD`] once it is destroyed: one
    /// comparison with a CQE's QPN tells both that the track is that QP's
    /// and that it is alive. With [`STALE`] added while `stale_cqs` is not
    /// zero.
    key: AtomicU32,
    /// The WQE counter (16 bits, the CQE's) of the last WQE a polled
    /// completion retired, with everything before it; [`NONE_DONE`] while
    /// none was. The producer works out from it where the SQ's tail is
    /// (the WQE's own size is in its control segment), so the consumer
    /// reads nothing per completion but the wr_id.
    sq_done: AtomicU32,
    /// Per WQEBB index of a WQE's first block: its wr_id, 8 bytes, so a
    /// cache line holds eight. A power of two long, so the SQ counter's low
    /// bits pick a slot with no bounds check; without an SQ, `get` finds
    /// none.
    sq: Pow2Table<AtomicU64>,
    pub(crate) qpn: u32,
    rq_wrid: Box<[AtomicU64]>,
    /// Receive WQEs completed (free running).
    rq_tail: AtomicU32,
    pub(crate) srq: Option<Arc<SrqTrack>>,
    /// CQs that may still hold completions of this QP from before its last
    /// reset.
    stale_cqs: AtomicU32,
}

impl QpTrack {
    pub(crate) fn new(qpn: u32, sq_bbs: u32, rq_wqes: u32, srq: Option<Arc<SrqTrack>>) -> QpTrack {
        QpTrack {
            qpn,
            key: AtomicU32::new(qpn),
            sq: Pow2Table::new(sq_bbs),
            sq_done: AtomicU32::new(NONE_DONE),
            rq_wrid: slots(rq_wqes),
            rq_tail: AtomicU32::new(0),
            srq,
            stale_cqs: AtomicU32::new(0),
        }
    }

    #[inline(always)]
    pub(crate) fn is_alive(&self) -> bool {
        self.key.load(Ordering::Relaxed) != DEAD
    }

    pub(crate) fn kill(&self) {
        self.key.store(DEAD, Ordering::Relaxed);
    }

    /// Alive, and no CQ may hold completions of the QP from before its last
    /// reset: what a fast path that takes the track's completions without
    /// comparing its key checks first.
    #[inline(always)]
    pub(crate) fn is_live(&self) -> bool {
        self.key.load(Ordering::Relaxed) <= LOW_24
    }

    /// One more CQ may hold completions from before the QP's reset.
    fn hold_stale(&self) {
        self.stale_cqs.fetch_add(1, Ordering::AcqRel);
        let _ = self.key.compare_exchange(
            self.qpn,
            self.qpn | STALE,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A CQ's poller passed the last of them.
    fn release_stale(&self) {
        if self.stale_cqs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let (live, stale) = (self.qpn, self.qpn | STALE);
        let _ = self
            .key
            .compare_exchange(stale, live, Ordering::AcqRel, Ordering::Relaxed);
        // A reset that marked another CQ meanwhile keeps the key stale.
        if self.stale_cqs.load(Ordering::Acquire) != 0 {
            let _ = self
                .key
                .compare_exchange(live, stale, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The producer's view of the SQ bookkeeping, borrowed once per batch so
    /// the slot table's address stays in a register while WQEs are written.
    #[inline(always)]
    pub(crate) fn sq_view(&self) -> SqView<'_> {
        SqView {
            slots: self.sq.view(),
            done: &self.sq_done,
        }
    }

    /// Whether the QP has an SQ.
    #[inline(always)]
    pub(crate) fn has_sq(&self) -> bool {
        !self.sq.is_empty()
    }

    /// Consumer: the wr_id of the WQE at WQEBB index `wqe_counter`; `None`
    /// without an SQ.
    #[inline(always)]
    pub(crate) fn sq_wr_id(&self, wqe_counter: u16) -> Option<u64> {
        let slot = self.sq.get(usize::from(wqe_counter))?;
        Some(slot.load(Ordering::Relaxed))
    }

    /// Consumer: the WQE at WQE counter `wqe_counter` is retired, and with
    /// it every WQE before it: their WQEBBs are free again.
    #[inline(always)]
    pub(crate) fn set_sq_done(&self, wqe_counter: u16) {
        self.sq_done
            .store(u32::from(wqe_counter), Ordering::Release);
    }

    #[inline(always)]
    pub(crate) fn rq_record(&self, head: u32, wr_id: u64) {
        let i = head as usize & (self.rq_wrid.len() - 1);
        self.rq_wrid[i].store(wr_id, Ordering::Relaxed);
    }

    #[inline(always)]
    pub(crate) fn rq_tail(&self) -> u32 {
        self.rq_tail.load(Ordering::Acquire)
    }

    /// Consumer: the oldest outstanding receive is done.
    #[inline(always)]
    pub(crate) fn rq_retire(&self) -> Option<u64> {
        if self.rq_wrid.is_empty() {
            return None;
        }
        let t = self.rq_tail.load(Ordering::Relaxed);
        let id = self.rq_wrid[t as usize & (self.rq_wrid.len() - 1)].load(Ordering::Relaxed);
        self.rq_tail.store(t.wrapping_add(1), Ordering::Release);
        Some(id)
    }

    /// After the QP went back to RST: nothing is outstanding.
    pub(crate) fn reset(&self) {
        self.sq_done.store(NONE_DONE, Ordering::Release);
        self.rq_tail.store(0, Ordering::Release);
    }
}

/// The SQ half of a [`QpTrack`] as the producer uses it.
#[derive(Clone, Copy)]
pub(crate) struct SqView<'a> {
    slots: Pow2View<'a, AtomicU64>,
    done: &'a AtomicU32,
}

impl SqView<'_> {
    /// The WQE starting at SQ counter `at` has id `wr_id`. The SQ is not
    /// empty here: a post into an SQ of no WQEBBs fails as full first.
    #[inline(always)]
    pub(crate) fn record(&self, at: u32, wr_id: u64) {
        // A masked index: no bounds check and no panic branch (with its
        // unwinding drop of the batch) in the posting loop.
        self.slots.at(at as usize).store(wr_id, Ordering::Relaxed);
    }

    /// Producer: [`QpTrack::sq_done`] as last published.
    #[inline(always)]
    pub(crate) fn done(&self) -> u32 {
        self.done.load(Ordering::Acquire)
    }

    /// Consumer: the wr_id of the WQE at WQEBB index `wqe_counter`, read
    /// through a view a poll holds in registers; the holder has made sure
    /// the QP has an SQ ([`QpTrack::has_sq`]).
    #[inline(always)]
    pub(crate) fn wr_id(&self, wqe_counter: u16) -> u64 {
        self.slots
            .at(usize::from(wqe_counter))
            .load(Ordering::Relaxed)
    }
}

/// An SRQ's outstanding receives. The device consumes the linked list in
/// ring order, but completions may be polled out of order through several
/// CQs, so each slot says whether it is still in use.
pub(crate) struct SrqTrack {
    wrid: Box<[AtomicU64]>,
    busy: Box<[AtomicBool]>,
    /// Receives completed (free running).
    done: AtomicU32,
}

impl SrqTrack {
    pub(crate) fn new(wqes: u32) -> SrqTrack {
        SrqTrack {
            wrid: slots(wqes),
            busy: slots(wqes),
            done: AtomicU32::new(0),
        }
    }

    fn index(&self, i: u32) -> usize {
        i as usize & (self.wrid.len() - 1)
    }

    /// Producer: whether slot `head` can take a new WQE with `posted` WQEs
    /// posted so far (one slot always stays unused, as the linked list wants).
    #[inline(always)]
    pub(crate) fn has_room(&self, head: u32) -> bool {
        let done = self.done.load(Ordering::Acquire);
        let outstanding = head.wrapping_sub(done);
        (outstanding as usize) < self.wrid.len() - 1
            && !self.busy[self.index(head)].load(Ordering::Acquire)
    }

    #[inline(always)]
    pub(crate) fn record(&self, head: u32, wr_id: u64) {
        let i = self.index(head);
        self.wrid[i].store(wr_id, Ordering::Relaxed);
        self.busy[i].store(true, Ordering::Relaxed);
    }

    /// Consumer: the WQE at index `wqe_counter` is done.
    #[inline(always)]
    pub(crate) fn retire(&self, wqe_counter: u16) -> u64 {
        let i = self.index(u32::from(wqe_counter));
        let id = self.wrid[i].load(Ordering::Relaxed);
        self.busy[i].store(false, Ordering::Release);
        self.done.fetch_add(1, Ordering::Release);
        id
    }
}

/// The QPs completing into one CQ, for the poller to find by QPN. Locked only
/// when a QP is created or reset, or a poller meets a QPN it has not cached
/// yet or a completion the fast paths left for a QP that was reset.
#[derive(Default)]
pub(crate) struct Registry {
    tracks: Mutex<Vec<Arc<QpTrack>>>,
    /// Per QP reset with completions still in this CQ: the consumer
    /// counter (24 bits) the last of them is before.
    stale: Mutex<Vec<(Arc<QpTrack>, u32)>>,
    /// `stale` is not empty: the one load the general path pays without.
    any_stale: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    pub(crate) fn add(&self, t: Arc<QpTrack>) {
        let mut v = lock(&self.tracks);
        v.retain(|t| t.is_alive());
        v.push(t);
    }

    fn find(&self, qpn: u32) -> Option<Arc<QpTrack>> {
        let v = lock(&self.tracks);
        v.iter().find(|t| t.qpn == qpn && t.is_alive()).cloned()
    }

    /// QP `track` was reset while this CQ held completions of it, the last
    /// before consumer counter `end` (24 bits): a poll drops them rather
    /// than report them against the QP's new work
    /// (`decode_any`).
    pub(crate) fn mark_stale(&self, track: &Arc<QpTrack>, end: u32) {
        let mut v = lock(&self.stale);
        match v.iter_mut().find(|(t, _)| Arc::ptr_eq(t, track)) {
            // Reset again before the poller got there: the later end.
            Some(mark) => mark.1 = end,
            None => {
                track.hold_stale();
                v.push((track.clone(), end));
            }
        }
        self.any_stale.store(true, Ordering::Release);
    }

    /// The track of QP `qpn` if the entry at consumer counter `ci` is one
    /// of its completions from before its reset. Forgets the marks `ci` has
    /// passed.
    pub(crate) fn stale(&self, qpn: u32, ci: u32) -> Option<Arc<QpTrack>> {
        if !self.any_stale.load(Ordering::Acquire) {
            return None;
        }
        let mut v = lock(&self.stale);
        let mut found = None;
        v.retain(|(t, end)| {
            // Entries from `ci` to the end: a ring holds under 2^23.
            let left = end.wrapping_sub(ci) & LOW_24;
            if left == 0 || left >= 1 << 23 {
                t.release_stale();
                return false;
            }
            if t.qpn == qpn {
                found = Some(t.clone());
            }
            true
        });
        if v.is_empty() {
            self.any_stale.store(false, Ordering::Release);
        }
        found
    }
}

/// A CQ's own lock-free cache of the registry.
pub(crate) struct PollCache {
    reg: Arc<Registry>,
    qps: Vec<Arc<QpTrack>>,
    /// `qps[i].qpn`, side by side, so finding a QP reads no track.
    qpns: Vec<u32>,
    /// Direct-mapped index by the QPN's low bits: a QP's track, so moving
    /// to a cached QP reads its slot and its track, nothing else; an empty
    /// slot holds a track of no QP (never alive), so a lookup compares a
    /// key and has no emptiness to check. Only QPs with an SQ are indexed,
    /// each in a slot of its own unless their QPNs share more low bits
    /// than [`INDEX_GROWTH`] allows for; then the later one has the slot.
    /// The other, and a QP without an SQ, is found by a scan of `qpns` (on
    /// the general path).
    index: Pow2Table<Arc<QpTrack>>,
    /// Per slot of `index`: its QP's place in `qps`.
    index_pos: Pow2Table<u32>,
    /// The track of the index's empty slots: no QP's, never alive.
    vacant: Arc<QpTrack>,
    last: usize,
    /// `qps[last]` if it has an SQ, else `vacant`: so the cached QP's SQ
    /// is a load and a comparison of its key away, with no bound or
    /// emptiness to check.
    hot: Arc<QpTrack>,
    /// `last` moved (or the cache was refilled) since a lazy poll last
    /// took the cached QP as its own (see [`PollCache::take_current`]).
    switched: bool,
}

/// How far [`PollCache::index`] may grow past four slots a QP (a factor)
/// to give each QP a slot of its own.
const INDEX_GROWTH: usize = 16;

/// The track of no QP, never alive: what empty slots of
/// [`PollCache::index`] hold.
impl Default for QpTrack {
    fn default() -> QpTrack {
        QpTrack::new(DEAD, 0, 0, None)
    }
}

/// [`PollCache`]'s direct-mapped index by value, for a loop that moves
/// between QPs to keep its address and mask in registers.
#[derive(Clone, Copy)]
pub(crate) struct SqIndex<'a>(Pow2View<'a, Arc<QpTrack>>);

impl<'a> SqIndex<'a> {
    /// The SQ of `qpn` if its index slot holds it, alive: a load of the
    /// slot's track and a comparison of its key, as a C driver's
    /// `table[qpn & mask]`. The slot is picked by `bits`, whose low 24 bits
    /// are `qpn` (a CQE's `sop_drop_qpn`, say), so it is found without
    /// waiting for the QPN to be cut out; past 2^24 slots, `bits` may pick
    /// another slot than `qpn`'s, whose key is then another QPN. A `qpn`
    /// above 24 bits ([`WcOpcode::counted_req`]'s for an opcode a fast
    /// path leaves) matches no track.
    ///
    /// [`WcOpcode::counted_req`]: super::wc::WcOpcode::counted_req
    #[inline(always)]
    pub(crate) fn find(&self, bits: u32, qpn: u32) -> Option<HotSq<'a>> {
        let t = &**self.0.at(bits as usize);
        // Indexed: it has an SQ.
        (t.key.load(Ordering::Relaxed) == qpn).then_some(HotSq { track: t })
    }
}

/// The cached QP's SQ as a poll call's fast path reads it: its track,
/// taken once per call (and again when the general path moves the cache),
/// so a completion reloads nothing to find it; the QPN, slot table and
/// last retired WQE are at fixed offsets from the one register. Made only
/// for a live QP with an SQ, so a completion's slot needs no check.
#[derive(Clone, Copy)]
pub(crate) struct HotSq<'a> {
    track: &'a QpTrack,
}

impl<'a> HotSq<'a> {
    #[inline(always)]
    pub(crate) fn qpn(&self) -> u32 {
        self.track.qpn
    }

    /// The slot table as a view, whose address and mask a loop keeps in
    /// registers.
    #[inline(always)]
    pub(crate) fn view(&self) -> SqView<'a> {
        self.track.sq_view()
    }

    /// The wr_id of the WQE at WQEBB index `wqe_counter`.
    #[inline(always)]
    pub(crate) fn wr_id(&self, wqe_counter: u16) -> u64 {
        self.view().wr_id(wqe_counter)
    }

    /// Publishes a pending retirement of this QP's SQ.
    #[inline(always)]
    pub(crate) fn publish(&self, pending: PendingDone) {
        if let Some(wqe_counter) = pending {
            self.track.set_sq_done(wqe_counter);
        }
    }
}

/// The WQE counter of the last WQE a poll retired on the QP the cache
/// points at, not yet published. The hot path publishes once per run of one
/// QP's completions and the general path once per entry, not per
/// completion: a store per completion would write the shared cache line the
/// producer reads. (Where QPs take turns, a run is mostly one completion,
/// and the hot path publishes per completion.)
pub(crate) type PendingDone = Option<u16>;

impl PollCache {
    pub(crate) fn new(reg: Arc<Registry>) -> PollCache {
        let index = Pow2Table::<Arc<QpTrack>>::new(1);
        let vacant = index.at(0).clone();
        PollCache {
            reg,
            qps: Vec::new(),
            qpns: Vec::new(),
            index,
            index_pos: Pow2Table::new(1),
            hot: vacant.clone(),
            vacant,
            last: 0,
            switched: false,
        }
    }

    /// The index, for [`SqIndex::find`].
    #[inline(always)]
    pub(crate) fn sq_index(&self) -> SqIndex<'_> {
        SqIndex(self.index.view())
    }

    /// Where `qpn` is in `qps`, if cached: its index slot, else a scan.
    #[inline(always)]
    fn position(&self, qpn: u32) -> Option<usize> {
        if self.index.at(qpn as usize).qpn == qpn {
            Some(*self.index_pos.at(qpn as usize) as usize)
        } else {
            self.qpns.iter().position(|&q| q == qpn)
        }
    }

    /// Rebuilds `qpns` and `index` after `qps` changed.
    fn reindex(&mut self) {
        self.qpns = self.qps.iter().map(|t| t.qpn).collect();
        let sqs = || {
            self.qps
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.sq.is_empty())
        };
        // Four slots per QP keep collisions of consecutive QPNs away; more,
        // up to a bound, for QPNs that share their low bits.
        let min = (self.qps.len() * 4).next_power_of_two().max(16);
        let mut len = min;
        let mut taken = Vec::new();
        while len < min * INDEX_GROWTH {
            taken.clear();
            taken.extend(sqs().map(|(_, t)| t.qpn as usize & (len - 1)));
            taken.sort_unstable();
            if taken.windows(2).all(|w| w[0] != w[1]) {
                break;
            }
            len *= 2;
        }
        let mut index = vec![self.vacant.clone(); len];
        let mut pos = vec![0; len];
        for (i, t) in sqs() {
            index[t.qpn as usize & (len - 1)] = t.clone();
            pos[t.qpn as usize & (len - 1)] = i as u32;
        }
        if let (Some(index), Some(pos)) = (Pow2Table::from_items(index), Pow2Table::from_items(pos))
        {
            (self.index, self.index_pos) = (index, pos);
        }
    }

    /// The track of `qpn`: the QP of the previous completion on the fast
    /// path, else a scan of the cache, else the registry. Moving to another
    /// QP publishes `pending` first, as it belongs to the one before.
    #[inline(always)]
    pub(crate) fn lookup(&mut self, qpn: u32, pending: &mut PendingDone) -> Option<&QpTrack> {
        if self.hot(qpn).is_none() {
            self.publish(pending.take());
            self.refresh(qpn)?;
        }
        self.qps.get(self.last).map(|t| &**t)
    }

    /// The cached track of the previous completion, if it is `qpn`'s.
    #[inline(always)]
    fn hot(&self, qpn: u32) -> Option<&QpTrack> {
        self.qps
            .get(self.last)
            .filter(|t| t.qpn == qpn && t.is_alive())
            .map(|t| &**t)
    }

    /// The SQ of the cached QP, if it is still live and has one.
    #[inline(always)]
    pub(crate) fn hot_sq(&self) -> Option<HotSq<'_>> {
        let t = &*self.hot;
        t.is_live().then_some(HotSq { track: t })
    }

    /// [`Registry::stale`] of this CQ.
    pub(crate) fn stale(&self, qpn: u32, ci: u32) -> Option<Arc<QpTrack>> {
        self.reg.stale(qpn, ci)
    }

    /// The SQ of the cached QP if that is `qpn`'s, alive and with an SQ:
    /// one comparison with its key.
    #[inline(always)]
    pub(crate) fn hot_sq_of(&self, qpn: u32) -> Option<HotSq<'_>> {
        let t = &*self.hot;
        (t.key.load(Ordering::Relaxed) == qpn).then_some(HotSq { track: t })
    }

    /// Points the cache at `qps[i]`.
    #[inline(always)]
    fn set_last(&mut self, i: usize) {
        self.switched |= self.last != i;
        self.last = i;
        self.hot = match self.qps.get(i) {
            Some(t) if t.has_sq() => t.clone(),
            _ => self.vacant.clone(),
        };
    }

    /// Whether `last` moved (or the cache was refilled) since
    /// [`PollCache::take_current`] last cleared this.
    #[inline(always)]
    pub(crate) fn switched(&self) -> bool {
        self.switched
    }

    /// The cached QP's track, if alive; clears [`PollCache::switched`].
    pub(crate) fn take_current(&mut self) -> Option<&Arc<QpTrack>> {
        self.switched = false;
        self.qps.get(self.last).filter(|t| t.is_alive())
    }

    /// Points the cache at `qpn` (cached, with an SQ) after the fast path
    /// moved to it.
    #[inline]
    pub(crate) fn point_at(&mut self, qpn: u32) {
        if self.hot.qpn != qpn {
            self.switch(qpn);
        }
    }

    /// Retires the SQ of `qpn` up to and including the WQE at
    /// `wqe_counter`; its wr_id, or `None` for an unknown QP or one without
    /// an SQ. The retirement goes to `pending`.
    #[inline(always)]
    pub(crate) fn sq_retire(
        &mut self,
        qpn: u32,
        wqe_counter: u16,
        pending: &mut PendingDone,
    ) -> Option<u64> {
        let wr_id = self.lookup(qpn, pending)?.sq_wr_id(wqe_counter)?;
        *pending = Some(wqe_counter);
        Some(wr_id)
    }

    /// Stores a pending retirement into the QP it belongs to.
    #[inline(always)]
    pub(crate) fn publish(&self, pending: PendingDone) {
        if let (Some(wqe_counter), Some(t)) = (pending, self.qps.get(self.last)) {
            t.set_sq_done(wqe_counter);
        }
    }

    /// Points `last` at `qpn`'s track if the cache holds it (alive); the
    /// registry is not asked. How polling moves between the QPs of a CQ.
    #[inline]
    pub(crate) fn switch(&mut self, qpn: u32) -> bool {
        let found = self.position(qpn);
        match found.and_then(|i| Some(i).zip(self.qps.get(i))) {
            Some((i, t)) if t.is_alive() => {
                if i != self.last {
                    self.set_last(i);
                }
                true
            }
            _ => false,
        }
    }

    /// Points `last` at `qpn`'s track, fetching it from the registry if the
    /// cache lacks it. Out of line: the hot path polls one QP after another.
    #[cold]
    #[inline(never)]
    fn refresh(&mut self, qpn: u32) -> Option<()> {
        if !self.switch(qpn) {
            let t = self.reg.find(qpn)?;
            self.qps.retain(|t| t.is_alive());
            self.qps.push(t);
            self.reindex();
            self.set_last(self.qps.len() - 1);
            self.switched = true;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of QPs with SQs numbered `qpns`, each met by the poller.
    fn cache_of(qpns: &[u32]) -> (PollCache, Vec<Arc<QpTrack>>) {
        let reg = Arc::new(Registry::default());
        let tracks: Vec<_> = qpns
            .iter()
            .map(|&q| Arc::new(QpTrack::new(q, 8, 0, None)))
            .collect();
        for t in &tracks {
            reg.add(t.clone());
        }
        let mut cache = PollCache::new(reg);
        for &q in qpns {
            assert!(cache.refresh(q).is_some());
        }
        (cache, tracks)
    }

    #[test]
    fn qpns_sharing_low_bits_get_slots_of_their_own() {
        let qpns = [1, 2, 3, 4, 5, 6, 7, 8, 0x41];
        let (cache, _tracks) = cache_of(&qpns);
        for q in qpns {
            assert_eq!(cache.sq_index().find(q, q).map(|s| s.qpn()), Some(q));
            // Bits above the QPN (a CQE's opcode) do not move the slot.
            let bits = u32::from(prm_layouts::SendOpcode::Send as u8) << 24 | q;
            assert_eq!(cache.sq_index().find(bits, q).map(|s| s.qpn()), Some(q));
        }
        assert!(cache.sq_index().find(9, 9).is_none());
    }

    #[test]
    fn the_index_finds_live_qps_only_and_the_cache_the_rest() {
        // Beyond the index's growth: one of the two has no slot.
        let (a, b) = (1, 1 | 1 << 20);
        let (mut cache, tracks) = cache_of(&[a, b, 2]);
        let found = [a, b].map(|q| cache.sq_index().find(q, q).is_some());
        assert_eq!(found.iter().filter(|&&f| f).count(), 1);
        for q in [a, b, 2] {
            assert!(cache.switch(q));
            assert_eq!(cache.hot_sq().map(|s| s.qpn()), Some(q));
        }
        tracks[2].kill();
        assert!(cache.sq_index().find(2, 2).is_none());
        assert!(!cache.switch(2));
    }
}
