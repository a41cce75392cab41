//! Polling a CQ (prm-guide §6): take entries the owner bit hands to software,
//! decode them into work completions, publish the consumer index.

use std::sync::Arc;

use super::ring::{DbRec, Ring64, Run64, Walk64};
use super::track::{HotSq, PendingDone, PollCache, QpTrack, Registry, SqIndex, SqView};
use super::wc::{Wc, WcOpcode, WcStatus};
use super::LOW_24;
use crate::cq::{Cq, CQE_SIZE};
use prm_layouts::{Cqe64, CqeOpcode, ErrCqe};

/// `op_own[3:2]` of a compressed CQE; never enabled by this library.
const FORMAT_COMPRESSED: u8 = 3;
/// `dbrec[0]`: set_ci.
pub(super) const SET_CI: usize = 0;
/// `op_own` (opcode, format, solicited, owner) is a CQE's last byte, the
/// one the device writes last.
pub(super) const OP_OWN: usize = Cqe64::SIZE_BYTES - 1;

/// One 64-byte CQE as the device wrote it, with its fields by name
/// (prm-guide §6.1, §6.4).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RawCqe(pub [u8; 64]);

impl std::fmt::Debug for RawCqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCqe")
            .field("opcode", &self.opcode())
            .field("qpn", &self.qpn())
            .field("wqe_counter", &self.wqe_counter())
            .field("byte_cnt", &self.byte_cnt())
            .field("owner", &self.owner())
            .finish()
    }
}

impl RawCqe {
    /// The fields of a successful completion.
    #[inline(always)]
    pub fn cqe(&self) -> Cqe64 {
        Cqe64(self.0)
    }

    /// The fields of an error completion.
    #[inline(always)]
    pub fn err(&self) -> ErrCqe {
        ErrCqe(self.0)
    }

    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        self.0[OP_OWN]
    }

    /// `op_own[7:4]`, raw; [`RawCqe::kind`] names it.
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.cqe().opcode()
    }

    /// The CQE opcode by name, `None` for a value the PRM does not define.
    #[inline(always)]
    pub fn kind(&self) -> Option<CqeOpcode> {
        CqeOpcode::from_raw(self.opcode())
    }

    #[inline(always)]
    pub fn format(&self) -> u8 {
        self.cqe().format()
    }

    #[inline(always)]
    pub fn solicited(&self) -> bool {
        self.cqe().se() != 0
    }

    #[inline(always)]
    pub fn owner(&self) -> u8 {
        self.cqe().owner()
    }

    /// The software-ownership rule for consumer counter `ci` in a ring of
    /// `2^log_size` entries.
    #[inline(always)]
    pub fn is_sw_owned(op_own: u8, ci: u32, log_size: u32) -> bool {
        let c = op_own_cqe(op_own);
        c.opcode() != CqeOpcode::Invalid.raw() && u32::from(c.owner()) == (ci >> log_size) & 1
    }

    /// `sop_drop_qpn[23:0]` (`qpn` in error CQEs).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.err().qpn()
    }

    /// Requester CQEs: the mlx5 opcode of the completed (or failed) WQE.
    #[inline(always)]
    pub fn send_opcode(&self) -> u8 {
        self.err().s_wqe_opcode()
    }

    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        self.cqe().wqe_counter()
    }

    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.cqe().byte_cnt()
    }

    #[inline(always)]
    pub fn imm_inval_pkey(&self) -> u32 {
        self.cqe().imm_inval_pkey()
    }

    #[inline(always)]
    pub fn srqn_uidx(&self) -> u32 {
        self.cqe().srqn_uidx() & LOW_24
    }

    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.cqe().flags_rqpn()
    }

    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        self.err().syndrome()
    }

    #[inline(always)]
    pub fn vendor_err_synd(&self) -> u8 {
        self.err().vendor_err_synd()
    }

    /// Error CQEs: the hardware syndrome (`mlx5_err_cqe.hw_err_synd`).
    #[inline(always)]
    pub fn hw_err_synd(&self) -> u8 {
        self.err().hw_err_synd()
    }

    /// Error CQEs: the hardware syndrome's type byte
    /// (`mlx5_err_cqe.hw_synd_type`; the type is its high nibble).
    #[inline(always)]
    pub fn hw_synd_type(&self) -> u8 {
        self.err().hw_synd_type()
    }
}

/// A CQE holding just `op_own`, to read its fields by name.
#[inline(always)]
fn op_own_cqe(op_own: u8) -> Cqe64 {
    let mut c = Cqe64::new();
    c.0[OP_OWN] = op_own;
    c
}

/// Whether `op_own` is that of a requester CQE in the uncompressed format
/// that software owns in the lap with owner bit `lap`: opcode REQ (high
/// nibble 0), format (bits 3:2) not 3, owner bit (bit 0) equal to `lap`.
/// Rotating the owner bit (after the xor, 0 when it matches) to the top
/// leaves one range check: the result is below 6 exactly when the top bit,
/// the opcode bits and the format bits are all as required.
#[inline(always)]
pub(super) fn is_hot_req(op_own: u8, lap: u8) -> bool {
    const { assert!(CqeOpcode::Req.raw() == 0 && FORMAT_COMPRESSED == 3) };
    (op_own ^ lap).rotate_right(1) < 6
}

/// The hot path over one stretch of the ring in lap `lap` for one QP's
/// completions: takes successful requester completions of `sq`'s QP, other
/// than atomics, into `out` until an entry is not one (or not software's,
/// or another QP's); returns how many, and the WQE counter of the last
/// one, which retires the SQ up to it. Nothing but the QPN and the slot
/// table carried through the loop, so a CQ of one QP's completions runs
/// with the fewest registers; [`take_run`] takes over where QPs take
/// turns, the general path for atomics.
#[inline(always)]
fn take_run_one(run: Run64, lap: u8, sq: HotSq<'_>, out: &mut [Wc]) -> (usize, PendingDone) {
    let qpn = sq.qpn();
    // The slot table's address and mask as values: read through the track,
    // they would be loaded again after each owner byte's acquire.
    let slots = sq.view();
    // One index for both, so one bound: `run64` gave no more entries than
    // `out` has room for.
    let Some(out) = out.get_mut(..run.len()) else {
        return (0, None);
    };
    // The lap as a constant, as in `take_run`.
    let k = if lap == 0 {
        take_run_one_loop::<0>(run, qpn, slots, out)
    } else {
        take_run_one_loop::<1>(run, qpn, slots, out)
    };
    // The last completion retires the run: its WQE counter is read once
    // here rather than carried through the loop. The entry stays ours until
    // `set_ci` moves past it.
    let last = k.checked_sub(1).and_then(|j| run.get(j));
    (k, last.map(|e| Cqe64(e.read64b()).wqe_counter()))
}

/// [`take_run_one`]'s loop, with `out` as long as `run`, in the lap with
/// owner bit `LAP`.
#[inline(always)]
fn take_run_one_loop<const LAP: u8>(
    run: Run64,
    qpn: u32,
    slots: SqView<'_>,
    out: &mut [Wc],
) -> usize {
    let n = run.len().min(out.len());
    let mut pairs = run.beside(out);
    while let Some((e, w)) = pairs.next() {
        let k = n - pairs.len() - 1;
        if !is_hot_req(e.load_acquire(OP_OWN), LAP) {
            return k;
        }
        // The entry is ours: read it as a CQE64. Only the fields used below
        // are loaded.
        let c = Cqe64(e.read64b());
        // Atomics (length a fixed 8) are left to the general path.
        let (cqe_qpn, opcode) = WcOpcode::counted_req(&c);
        if cqe_qpn != qpn {
            return k;
        }
        // The wr_id alone: the run's last completion retires the run.
        w.set_req(slots.wr_id(c.wqe_counter()), opcode, c.byte_cnt(), qpn);
    }
    n
}

/// The hot path over one stretch of the ring in lap `lap`: takes successful
/// requester completions of the QPs in `index` into `out` until an entry
/// is not one (or not software's); returns how many. Where QPs take turns
/// most completions are of another QP than the one before, so each looks
/// its QP up in the index, as a C driver's `table[qpn & mask]`, and
/// publishes its WQE counter (the SQ retired up to it), the store a move
/// to another QP makes anyway. A QP the index lacks (or has dead) ends the
/// run: the general path looks.
#[inline(always)]
fn take_run(run: Run64, lap: u8, index: SqIndex<'_>, out: &mut [Wc]) -> usize {
    // The lap as a constant: one register fewer in the loop, and none of
    // its values spilled.
    if lap == 0 {
        take_run_in::<0>(run, index, out)
    } else {
        take_run_in::<1>(run, index, out)
    }
}

/// [`take_run`] in the lap with owner bit `LAP`.
#[inline(always)]
fn take_run_in<const LAP: u8>(run: Run64, index: SqIndex<'_>, out: &mut [Wc]) -> usize {
    let n = run.len().min(out.len());
    let mut pairs = run.beside(out);
    while let Some((e, w)) = pairs.next() {
        if !is_hot_req(e.load_acquire(OP_OWN), LAP) {
            return n - pairs.len() - 1;
        }
        // The entry is ours: read it as a CQE64. Only the fields used
        // below are loaded.
        let c = Cqe64(e.read64b());
        let sop_drop_qpn = c.sop_drop_qpn();
        // Atomics (length a fixed 8) are left to the general path: their
        // `key` is no QPN, so no track's key matches it. The QPN's bits
        // pick the index slot, so its load does not wait for the opcode
        // table's.
        let (key, opcode) = WcOpcode::counted_req(&c);
        let Some(sq) = index.find(sop_drop_qpn, key) else {
            return n - pairs.len() - 1;
        };
        let wqe_counter = c.wqe_counter();
        let wr_id = sq.wr_id(wqe_counter);
        // SQ room first, then the CQ's (the caller's `set_ci`).
        sq.publish(Some(wqe_counter));
        w.set_req(wr_id, opcode, c.byte_cnt(), key);
    }
    n
}

/// Decodes any software-owned CQE, at consumer counter `ci`; `None` for
/// one with nothing to report. Also returns the WQE counter it retires the
/// SQ up to on the QP the cache then points at, for the caller to publish.
#[inline(never)]
pub(super) fn complete_any(
    c: &RawCqe,
    ci: u32,
    cache: &mut PollCache,
) -> (Option<Wc>, PendingDone) {
    let mut pending = None;
    let wc = decode_any(c, ci, cache, &mut pending);
    (wc, pending)
}

/// Decodes any software-owned CQE, at consumer counter `ci`: `None` for a
/// resize marker or a completion from before its QP's reset (as mlx5's
/// `mlx5_cq_clean` removes those when the QP is reset: a receive from an
/// SRQ gives its WQE back; nothing else of the QP's new work is touched).
#[inline(always)]
pub(super) fn decode_any(
    c: &RawCqe,
    ci: u32,
    cache: &mut PollCache,
    pending: &mut PendingDone,
) -> Option<Wc> {
    use CqeOpcode::*;
    if let Some(track) = cache.stale(c.qpn(), ci) {
        if let (Some(srq), Some(RespWrImm | RespSend | RespSendImm | RespSendInv | RespErr)) =
            (&track.srq, c.kind())
        {
            srq.retire(c.wqe_counter());
        }
        return None;
    }
    let Some(op) = c.kind() else {
        return Some(Wc {
            qp_num: c.qpn(),
            status: WcStatus::GeneralErr,
            ..Wc::default()
        });
    };
    let mut wc = Wc {
        qp_num: c.qpn(),
        ..Wc::default()
    };
    if op == ResizeCq {
        return None;
    }
    let known = match op {
        Req | ReqErr | RespWrImm | RespSend | RespSendImm | RespSendInv | RespErr
            if c.format() != FORMAT_COMPRESSED =>
        {
            cache.lookup(c.qpn(), pending).is_some()
        }
        _ => false,
    };
    if !known {
        // Garbage, a format we never enable, or a QP nobody knows.
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    }
    if op == ReqErr || op == RespErr {
        wc.status = WcStatus::from_syndrome(c.syndrome());
        wc.vendor_err = c.vendor_err_synd();
        wc.hw_err_synd = c.hw_err_synd();
        wc.hw_synd_type = c.hw_synd_type();
    }
    if op == Req || op == ReqErr {
        let Some(wr_id) = cache.sq_retire(c.qpn(), c.wqe_counter(), pending) else {
            wc.status = WcStatus::GeneralErr;
            return Some(wc);
        };
        wc.wr_id = wr_id;
        match WcOpcode::from_send_opcode(c.send_opcode()) {
            Some(o) => wc.opcode = o,
            None if op == Req => wc.status = WcStatus::GeneralErr,
            None => {}
        }
        wc.byte_len = match wc.opcode {
            WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
            _ => c.byte_cnt(),
        };
        return Some(wc);
    }
    let Some(track) = cache.lookup(c.qpn(), pending) else {
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    };
    let wr_id = match &track.srq {
        Some(srq) => Some(srq.retire(c.wqe_counter())),
        None => track.rq_retire(),
    };
    let Some(wr_id) = wr_id else {
        wc.status = WcStatus::GeneralErr;
        return Some(wc);
    };
    wc.wr_id = wr_id;
    wc.opcode = if op == RespWrImm {
        WcOpcode::RecvRdmaWithImm
    } else {
        WcOpcode::Recv
    };
    if op == RespWrImm || op == RespSendImm {
        wc.imm_data = c.imm_inval_pkey();
        wc.has_imm = true;
    }
    if op != RespErr {
        wc.byte_len = c.byte_cnt();
        wc.src_qp = c.flags_rqpn() & LOW_24;
        wc.grh = (c.flags_rqpn() >> 28) & 3 != 0;
        wc.solicited = c.solicited();
    }
    Some(wc)
}

/// A CQ's poller state: its QP cache and doorbell record.
pub(crate) struct Poller {
    pub(super) cache: PollCache,
    pub(super) dbrec: DbRec,
    /// The QP a lazy poll takes completions of without asking the cache:
    /// the cache's, as of the last lazy poll that began after the cache
    /// moved. Held apart from the cache, so a poll can keep its slot table
    /// borrowed while the cache changes under the general path.
    pub(super) hot: Option<Arc<QpTrack>>,
    /// The last array poll's last two completions were of different QPs:
    /// the next starts with the loop that moves between QPs.
    turns: bool,
}

impl Poller {
    /// `dbr_addr`: the CQ's doorbell record, which lives as long as the CQ.
    pub(crate) fn new(reg: Arc<Registry>, dbr_addr: usize) -> Poller {
        Poller {
            cache: PollCache::new(reg),
            // SAFETY: the CQ's 64-byte doorbell record UMEM, owned by the CQ
            // that owns this poller and never moved (resize keeps it).
            dbrec: unsafe { DbRec::new(dbr_addr) },
            hot: None,
            turns: false,
        }
    }
}

/// Where a CQ's consumer stands: the consumer counter, the entry it
/// names and the owner bit of software's entries in that lap, kept
/// together as they move. So a poll tests the next entry with its address
/// and owner bit at hand, a load and a compare each, with no offset to
/// mask nor lap to work out from the counter and the ring's size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head {
    /// Consumer counter (free running): CQEs taken so far.
    pub(super) ci: u32,
    /// The owner bit software's entries have at `ci`: the counter's bit
    /// `log_size`.
    pub(super) lap: u8,
    /// The entry at `ci`; the walk holds the ring.
    pub(super) at: Walk64,
}

impl Head {
    /// Counter `ci` in the ring of `2^log` 64-byte entries at `addr`.
    ///
    /// # Safety
    /// As for [`Ring64::new`]: the ring must stay mapped as long as the
    /// head (or a copy) is used.
    pub(crate) unsafe fn new(addr: usize, log: u32, ci: u32) -> Head {
        // SAFETY: the caller vouches for the ring.
        let ring = unsafe { Ring64::new(addr, CQE_SIZE << log) };
        Head::at(ring, ci)
    }

    /// Counter `ci` in `ring`.
    #[inline(always)]
    fn at(ring: Ring64, ci: u32) -> Head {
        let off = ci as usize * CQE_SIZE;
        Head {
            ci,
            lap: u8::from(off & ring.len() != 0),
            at: ring.walk64(off),
        }
    }

    #[inline(always)]
    pub(crate) fn ci(&self) -> u32 {
        self.ci
    }

    /// The CQE ring.
    #[inline(always)]
    pub(crate) fn ring(&self) -> Ring64 {
        self.at.ring()
    }

    /// Moves to counter `ci`.
    #[inline(always)]
    pub(super) fn seek(&mut self, ci: u32) {
        *self = Head::at(self.ring(), ci);
    }

    /// Moves past the entry at the counter.
    #[inline(always)]
    fn step(&mut self) {
        self.ci = self.ci.wrapping_add(1);
        if self.at.step() {
            self.lap ^= 1;
        }
    }
}

/// Where the completions of QP `qpn` still in a CQ end, when the QP is
/// reset: the consumer counter (24 bits) just past the last of them among
/// the entries software owns from the published consumer index on; `None`
/// if there is none. The ring of `2^log` entries at `addr` and its doorbell
/// record at `dbr_addr` are the CQ's; the device writes no more completions
/// of the QP (it is in RST).
///
/// # Safety
/// The ring and the record stay mapped while this runs.
pub(crate) unsafe fn stale_end(addr: usize, log: u32, dbr_addr: usize, qpn: u32) -> Option<u32> {
    use prm_layouts::fields::cqe64 as f;
    // SAFETY: the caller vouches for the record.
    let ci = unsafe { DbRec::new(dbr_addr) }.load(SET_CI);
    // SAFETY: the caller vouches for the ring.
    let mut head = unsafe { Head::new(addr, log, ci) };
    let mut end = None;
    for _ in 0..1u32 << log {
        let e = head.at.entry();
        if !RawCqe::is_sw_owned(e.load_acquire(OP_OWN), head.ci, log) {
            break;
        }
        let sop_drop_qpn = u32::from_be_bytes(e.load_dword(f::SOP_DROP_QPN.byte));
        head.step();
        if f::SOP_DROP_QPN.get(sop_drop_qpn) & LOW_24 == qpn {
            end = Some(head.ci & LOW_24);
        }
    }
    end
}

impl Cq {
    /// `ibv_poll_cq`: fills `wc` from the front with up to `wc.len()`
    /// completions and returns how many. Updates the consumer index in the
    /// doorbell record once per call. `&mut`: one consumer at a time.
    ///
    /// A poll that finds nothing lets a device that runs in software do
    /// its pending work on this thread ([`devx::Uar::progress`]: the
    /// emulated device receives what arrived at its network port) and
    /// looks again if it did any, so a busy-polling program needs no
    /// other thread to make progress.
    ///
    /// A poll for one completion that finds the cached QP's successful
    /// requester completion takes it inline, with no loop set up; anything
    /// else goes the general way.
    #[inline]
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        if let [w] = wc {
            if let Some((wr_id, opcode, byte_len, qpn)) = self.take_one() {
                w.set_req(wr_id, opcode, byte_len, qpn);
                return 1;
            }
        }
        self.poll_past_one(wc)
    }

    /// One completion, if the CQ holds one: [`Cq::poll`] with room for
    /// one, the completion returned by value. A loop that waits for each
    /// completion in turn (a ping-pong) reads its fields where they were
    /// decoded rather than from memory it passed in.
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let mut cq = ctx.create_cq(16)?;
    /// assert!(cq.poll_one().is_none(), "nothing posted, nothing completed");
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn poll_one(&mut self) -> Option<Wc> {
        if let Some((wr_id, opcode, byte_len, qpn)) = self.take_one() {
            return Some(Wc::req(wr_id, opcode, byte_len, qpn));
        }
        let mut wc = [Wc::default()];
        (self.poll_past_one(&mut wc) == 1).then_some(wc[0])
    }

    /// A poll past the one-completion fast path: the entry at the consumer
    /// counter is not the cached QP's successful requester completion, or
    /// `wc` has room for more than one.
    #[inline(always)]
    fn poll_past_one(&mut self, wc: &mut [Wc]) -> usize {
        if self.dp.turns {
            return self.poll_turns(wc);
        }
        self.poll_many(wc)
    }

    #[inline(never)]
    fn poll_many(&mut self, wc: &mut [Wc]) -> usize {
        let start = self.head.ci;
        let got = self.take_hot(wc);
        self.poll_rest(wc, start, got)
    }

    /// A poll that follows one whose last two completions were of
    /// different QPs: the loop that moves between QPs from the first
    /// entry, and where that fills `wc`, nothing else to set up or look
    /// at. Out of line, as the one call such a poll makes.
    #[inline(never)]
    fn poll_turns(&mut self, wc: &mut [Wc]) -> usize {
        let start = self.head.ci;
        // At most 2^32 − 1 at once: the count is the counter's progress.
        let n = wc.len().min(u32::MAX as usize);
        let run = self.head.at.run64(n);
        let k = take_run(run, self.head.lap, self.dp.cache.sq_index(), wc);
        match wc.get(..k) {
            Some(taken @ [_, ..]) if k == n => {
                let c = start.wrapping_add(k as u32);
                self.head.seek(c);
                self.turned(taken);
                self.dp.dbrec.store(SET_CI, c & LOW_24);
                k
            }
            _ => self.poll_turns_on(wc, k),
        }
    }

    /// [`Cq::poll_turns`] on from `wc[got]`, where its loop stopped short
    /// of filling `wc` (at the ring's end or an entry of another kind).
    #[inline(never)]
    fn poll_turns_on(&mut self, wc: &mut [Wc], got: usize) -> usize {
        let start = self.head.ci;
        let got = self.take_hot_on(wc, got, None, true);
        self.poll_rest(wc, start, got)
    }

    /// A poll's end, after its hot path took `got` completions (moving the
    /// consumer counter from `start`): the general path for the rest, the
    /// consumer index published, and an empty poll's second look.
    #[inline(always)]
    fn poll_rest(&mut self, wc: &mut [Wc], start: u32, got: usize) -> usize {
        let got = self.poll_general(wc, start, got);
        if got == 0 && !wc.is_empty() {
            return self.poll_after_progress(wc);
        }
        got
    }

    /// The general path from `wc[got]` on if the next entry is software's,
    /// then the consumer index published if the consumer counter moved
    /// from `start`; the count in all.
    #[inline(always)]
    fn poll_general(&mut self, wc: &mut [Wc], start: u32, mut got: usize) -> usize {
        if got < wc.len() && self.next_is_sw_owned() {
            got = self.take_general(wc, got);
        }
        if self.head.ci != start {
            self.dp.dbrec.store(SET_CI, self.head.ci & LOW_24);
        }
        got
    }

    /// The entry at the consumer counter if it is a successful requester
    /// completion of the cached QP: taken, its SQ room and the consumer
    /// index published, and its wr_id, opcode, length and QPN returned for
    /// [`Wc::set_req`]. Anything else is left for the general path, which
    /// looks at it afresh.
    #[inline(always)]
    fn take_one(&mut self) -> Option<(u64, WcOpcode, u32, u32)> {
        let e = self.head.at.entry();
        if !is_hot_req(e.load_acquire(OP_OWN), self.head.lap) {
            return None;
        }
        let c = Cqe64(e.read64b());
        // Atomics (length a fixed 8) go the general way.
        let (qpn, opcode) = WcOpcode::counted_req(&c);
        let sq = self.dp.cache.hot_sq_of(qpn)?;
        // Taken: the head moves on while its entry's address is at hand,
        // before the stores below, which the compiler cannot tell apart
        // from it.
        self.head.step();
        let ci = self.head.ci;
        let wqe_counter = c.wqe_counter();
        let wr_id = sq.wr_id(wqe_counter);
        // SQ room first, then the CQ's.
        sq.publish(Some(wqe_counter));
        self.dp.dbrec.store(SET_CI, ci & LOW_24);
        Some((wr_id, opcode, c.byte_cnt(), qpn))
    }

    /// An empty poll's second look, out of line: the found-something path
    /// stays short.
    #[inline(never)]
    fn poll_after_progress(&mut self, wc: &mut [Wc]) -> usize {
        if self.uar().progress() {
            let start = self.head.ci;
            let got = self.take_hot(wc);
            self.poll_general(wc, start, got)
        } else {
            0
        }
    }

    /// Polls until one completion arrives and returns it (successful or
    /// not: check [`Wc::is_ok`]), or fails with [`Error::Timeout`] once
    /// `timeout` has passed. Spins, yielding the core between empty polls:
    /// for waiting without a busy core, arm the CQ and use its completion
    /// channel.
    ///
    /// [`Error::Timeout`]: crate::Error::Timeout
    pub fn wait_one(&mut self, timeout: std::time::Duration) -> crate::Result<Wc> {
        let start = std::time::Instant::now();
        loop {
            if let Some(wc) = self.poll_one() {
                return Ok(wc);
            }
            if start.elapsed() >= timeout {
                return Err(crate::Error::Timeout {
                    verb: "poll_cq",
                    waited: timeout,
                });
            }
            std::thread::yield_now();
        }
    }

    /// Whether the entry at the consumer counter is software's.
    #[inline(always)]
    fn next_is_sw_owned(&self) -> bool {
        let e = self.head.at.entry();
        RawCqe::is_sw_owned(e.load_acquire(OP_OWN), self.head.ci, self.log_size)
    }

    /// Takes successful requester completions into `wc`, reading just the
    /// fields they need, until the ring runs dry or an entry needs the
    /// general path (which then looks at it afresh); returns how many. The
    /// SQ of the last completion's QP stays in registers; once another
    /// QP's completion stops its run, the loop where each completion looks
    /// its QP up. Moves the consumer counter and publishes the WQE counter
    /// it retires the SQ up to: per run of one QP, per completion where QPs
    /// take turns.
    ///
    /// The first stretch, of the cached QP's completions, is taken here
    /// (unless QPs took turns at the end of the last call);
    /// [`Cq::take_hot_on`] goes on only if it stopped short of filling `wc`
    /// at the ring's end or at an entry software owns: so a poll that fills
    /// `wc` or empties the ring in one stretch keeps little in registers
    /// and sets nothing up for the rest.
    #[inline(always)]
    fn take_hot(&mut self, wc: &mut [Wc]) -> usize {
        if self.dp.turns {
            // QPs took turns at the end of the last call: the loop that
            // moves between QPs from the start.
            return self.take_hot_on(wc, 0, None, true);
        }
        let start = self.head.ci;
        let Some(hot) = self.dp.cache.hot_sq() else {
            return 0;
        };
        // At most 2^32 − 1 at once: the count is the counter's progress.
        let n = wc.len().min(u32::MAX as usize);
        let log = self.log_size;
        let run = self.head.at.run64(n);
        let (k, pending) = take_run_one(run, self.head.lap, hot, wc);
        let c = start.wrapping_add(k as u32);
        if k == n
            || run
                .get(k)
                .is_some_and(|e| !RawCqe::is_sw_owned(e.load_acquire(OP_OWN), c, log))
        {
            // SQ room first, then the CQ's (the caller's `set_ci`).
            hot.publish(pending);
            self.head.seek(c);
            return k;
        }
        self.take_hot_on(wc, k, pending, k < run.len())
    }

    /// [`Cq::take_hot`] on from `wc[got]`, where its first stretch stopped
    /// (at an entry of another kind if `turns`, else at the ring's end),
    /// with `pending` the WQE counter that stretch retires up to; returns
    /// the count in all. Out of line, for the first stretch's sake.
    #[inline(never)]
    fn take_hot_on(
        &mut self,
        wc: &mut [Wc],
        mut got: usize,
        mut pending: PendingDone,
        mut turns: bool,
    ) -> usize {
        let start = self.head.ci;
        let mut h = self.head;
        h.seek(start.wrapping_add(got as u32));
        // At most 2^32 − 1 at once: the count is the counter's progress.
        let n = wc.len().min(u32::MAX as usize);
        let cache = &self.dp.cache;
        // Only a stretch of one QP's completions needs it, and has it: the
        // caller found it for the first (`turns` false).
        let hot = cache.hot_sq();
        // One QP's runs first; once another QP's completion stops one, the
        // loop that moves between QPs.
        while let Some(out) = wc.get_mut(got..n) {
            // A stretch up to the ring's end: one lap, no wrapping.
            let run = h.at.run64(out.len());
            let lap = h.lap;
            let k = match hot {
                Some(hot) if !turns => {
                    let (k, done) = take_run_one(run, lap, hot, out);
                    if done.is_some() {
                        pending = done;
                    }
                    k
                }
                _ => {
                    // SQ room first, the run's own as it goes, then the
                    // CQ's (the caller's `set_ci`).
                    if let Some(hot) = hot {
                        hot.publish(pending.take());
                    }
                    turns = true;
                    take_run(run, lap, cache.sq_index(), out)
                }
            };
            h.seek(h.ci.wrapping_add(k as u32));
            got += k;
            if got == n {
                break;
            }
            if k < run.len() && !turns {
                // Perhaps another QP's completion: look again, moving.
                turns = true;
                continue;
            }
            // Done unless the whole stretch was taken (`k == 0` also ends a
            // stretch of none, which `run64` never makes while `out` has
            // room).
            if k == 0 || k < run.len() {
                break;
            }
        }
        // SQ room first, then the CQ's (the caller's `set_ci`).
        if let Some(hot) = hot {
            hot.publish(pending);
        }
        if let Some(taken) = wc.get(..got).filter(|_| turns) {
            self.turned(taken);
        }
        self.head = h;
        h.ci.wrapping_sub(start) as usize
    }

    /// After the loop that moves between QPs took `taken`: the cache, which
    /// only that loop may have left, goes to the last completion's QP, and
    /// the next call starts with that loop if the last two were of
    /// different QPs.
    #[inline(always)]
    fn turned(&mut self, taken: &[Wc]) {
        match taken {
            [.., a, b] => {
                self.dp.turns = a.qp_num != b.qp_num;
                self.dp.cache.point_at(b.qp_num);
            }
            [b] => self.dp.cache.point_at(b.qp_num),
            _ => {}
        }
    }

    /// Polls on from `wc[got]` with the general decoder, back to the hot
    /// path after each entry it takes; returns the count so far. Out of
    /// line: a CQ of one QP's requester completions never gets here but to
    /// find its ring empty.
    #[inline(never)]
    fn take_general(&mut self, wc: &mut [Wc], mut got: usize) -> usize {
        while got < wc.len() {
            let e = self.head.at.entry();
            let op_own = e.load_acquire(OP_OWN);
            if !RawCqe::is_sw_owned(op_own, self.head.ci, self.log_size) {
                break;
            }
            let ci = self.head.ci;
            self.head.step();
            let raw = RawCqe(e.read64b());
            let (w, done) = complete_any(&raw, ci, &mut self.dp.cache);
            // Published now, as the hot path that follows publishes its own
            // (later) one; the cache may have moved to another QP.
            self.dp.cache.publish(done);
            if let Some(w) = w {
                wc[got] = w;
                got += 1;
            }
            got += self.take_hot(&mut wc[got..]);
        }
        got
    }

    /// The consumer counter (free running): CQEs taken so far.
    #[inline]
    pub fn consumer_index(&self) -> u32 {
        self.head.ci
    }

    /// Reads the consumer index the doorbell record holds (`set_ci`).
    pub fn doorbell_ci(&self) -> u32 {
        self.dp.dbrec.load(SET_CI)
    }
}
