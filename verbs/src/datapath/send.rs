//! The send queue: post one request, or write a batch and ring once.

use std::sync::Arc;

use super::doorbell::Doorbell;
use super::ready::{send_refused, sends_allowed, SendState};
use super::ring::Ring64;
use super::track::{QpTrack, SqView};
use super::wqe::{self, SqShape};
use super::wr::{SendWr, Sge};
use crate::error::{Error, Result};
use crate::qp::Qp;

/// A QP's send queue. Reached through `&mut Qp`, so one producer at a time
/// writes WQEs; posting allocates nothing, takes no lock and makes no system
/// call.
pub struct SendQueue {
    pub(crate) ring: Ring64,
    /// Next free WQEBB (free running).
    pub(crate) cur_post: u32,
    pub(crate) shape: SqShape,
    pub(crate) db: Doorbell,
    pub(crate) track: Arc<QpTrack>,
    /// The QP's state as of its last transition (see `ready`), and the SQ
    /// tail as last read. The tail only moves forward, so room that shows is
    /// there; the shared tail is read again only when it shows none.
    pub(crate) state: SendState,
}

impl std::fmt::Debug for SendQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SendQueue(qpn {:#x}, {} of {} WQEBBs in use)",
            self.shape.qpn,
            self.in_use(),
            self.state.bbs()
        )
    }
}

// `extern "C"`: cannot unwind, see `wqe::refuse`.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn full(verb: &'static str) -> Error {
    Error::QueueFull {
        verb,
        queue: "send queue",
    }
}

/// Why a request found no room in the SQ of QP `qpn` in state `state`.
/// Values, not `&self`: a cold call taking the batch by reference would keep
/// it in memory on the hot path.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn no_room(qpn: u32, state: u8) -> Error {
    if sends_allowed(state) {
        full("post_send")
    } else {
        send_refused("post_send", qpn, state)
    }
}

/// Whether WQEBBs up to (not including) `next` fit in the SQ `ring`, whose
/// counter is at `cur_post`, refreshing the cached tail only when it says
/// they do not (never on a QP that takes no sends).
#[inline(always)]
pub(crate) fn has_room(
    next: u32,
    cur_post: u32,
    ring: &Ring64,
    state: &SendState,
    view: SqView<'_>,
) -> bool {
    if fits(next, state.end()) {
        return true;
    }
    let end = state.end_at(tail(ring, view.done(), cur_post, state.tail()));
    state.set_end(end);
    fits(next, end)
}

/// The SQ's tail: the SQ counter just past the last WQE a polled
/// completion retired (`done`, from [`SqView::done`]), or `cached`, the
/// tail as last worked out, when that WQE was counted already or none was
/// retired. The completion gives the WQE's 16-bit counter; it lies less
/// than an SQ (under 2^15 WQEBBs) behind `cur_post`, which gives the upper
/// bits. Its size is in its control segment, which stays as written until
/// the tail passes it: only then may a post reuse the block.
#[inline]
fn tail(ring: &Ring64, done: u32, cur_post: u32, cached: u32) -> u32 {
    let Ok(low) = u16::try_from(done) else {
        return cached;
    };
    let start = cur_post.wrapping_sub(u32::from((cur_post as u16).wrapping_sub(low)));
    // Starting before the cached tail: counted, its block perhaps reused.
    if !fits(cached, start) {
        return cached;
    }
    let end = start.wrapping_add(wqe::bbs_at(ring, start));
    // Past what was posted: a completion from before the QP's reset that
    // a poll on another thread took while the reset ran, whose WQE counter
    // names no WQE start now. (Those still in the CQ after the reset are
    // dropped.)
    if !fits(end, cur_post) {
        return cached;
    }
    end
}

/// Whether WQEBBs up to (not including) SQ counter `next` lie within
/// `limit`. The counters run free and lie less than 2^31 apart (an SQ holds
/// far fewer WQEBBs), so the sign of the wrapped difference orders them.
#[inline(always)]
fn fits(next: u32, limit: u32) -> bool {
    limit.wrapping_sub(next) as i32 >= 0
}

impl SendQueue {
    /// The SQ counter: WQEBBs posted so far (free running).
    #[inline]
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// WQEBBs posted and not yet retired by a polled completion.
    pub fn in_use(&self) -> u32 {
        let done = self.track.sq_view().done();
        let tail = tail(&self.ring, done, self.cur_post, self.state.tail());
        self.cur_post.wrapping_sub(tail)
    }

    pub fn doorbell(&self) -> &Doorbell {
        &self.db
    }

    /// `ibv_post_send` of one request: WQE, doorbell record, doorbell. A bad
    /// request (too many SGEs, inline too long, queue full, a QP not in RTS,
    /// SQD, SQE or ERR) fails before anything is written.
    ///
    /// Written straight from the queue rather than through a one-request
    /// [`SendBatch`]: no batch state to set up and write back, and the
    /// doorbell rings for the WQE just built.
    #[inline]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let p = match wqe::plan(&self.shape, wr) {
            Ok(p) => p,
            Err(r) => return Err(r.error()),
        };
        // Copied out before the WQE stores, which the compiler must assume
        // could write the queue itself.
        let (ring, shape, at) = (self.ring, self.shape, self.cur_post);
        let next = at.wrapping_add(p.nbb);
        let view = self.track.sq_view();
        // No room in a QP that takes no sends: one check for both.
        if !has_room(next, at, &ring, &self.state, view) {
            return Err(no_room(shape.qpn, self.state.raw()));
        }
        let ctrl8 = wqe::write(&ring, at, &shape, wr, p);
        view.record(at, wr.wr_id);
        self.cur_post = next;
        self.db.ring(next, ctrl8);
        Ok(())
    }

    /// Starts a batch: requests are written as they come and one doorbell
    /// rings for all of them at [`SendBatch::ring`] (or when the batch drops).
    /// The QP's state is checked here: if it takes no sends, every
    /// [`SendBatch::post`] fails naming the state.
    #[inline]
    pub fn batch(&mut self) -> SendBatch<'_> {
        let SendQueue {
            ring,
            cur_post,
            shape,
            db,
            track,
            state,
        } = self;
        SendBatch {
            ring: *ring,
            shape: *shape,
            cur_post: *cur_post,
            // `cur_post − tail ≤ bbs` always: WQEs are written only into
            // room the cached tail shows. A closed QP's limit is 0, so its
            // posts take the out-of-room path, which reports the state.
            limit: state.end(),
            view: track.sq_view(),
            home: Home {
                cur_post,
                db,
                qpn: &shape.qpn,
                state,
            },
            last: 0,
            count: 0,
        }
    }
}

/// Where a batch writes its counters back and rings, and what it reads
/// only when room runs out: left in the queue, not held in the batch's
/// registers (or copied to the stack) for the whole batch. The batch holds
/// the queue exclusively, so none of it changes meanwhile.
struct Home<'a> {
    cur_post: &'a mut u32,
    db: &'a mut Doorbell,
    qpn: &'a u32,
    state: &'a SendState,
}

/// Send requests written but not yet announced to the device. The queue's
/// state is copied in by value, so the compiler need not reload it through
/// the queue after every store into the ring (which it must assume could
/// alias the queue). The counters go back to the queue at the doorbell.
pub struct SendBatch<'a> {
    ring: Ring64,
    shape: SqShape,
    cur_post: u32,
    /// The SQ counter WQEs may fill up to as of the cached tail (the tail
    /// plus the SQ size): one compare with the request's end per request,
    /// and nothing to count down. `cur_post` when the QP takes no sends.
    limit: u32,
    view: SqView<'a>,
    home: Home<'a>,
    /// The doorbell value of the last request written; meaningful once
    /// one was.
    last: u64,
    count: usize,
}

impl SendBatch<'_> {
    /// Writes one request; on error nothing of it was written and the batch
    /// goes on. Always inlined, so a request built at the call site is
    /// folded into the WQE stores rather than built in memory and read back.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let p = match wqe::plan(&self.shape, wr) {
            Ok(p) => p,
            Err(r) => return Err(r.error()),
        };
        let next = self.cur_post.wrapping_add(p.nbb);
        if !fits(next, self.limit) && !self.refresh_room(next) {
            return Err(no_room(*self.home.qpn, self.home.state.raw()));
        }
        let ctrl8 = wqe::write(&self.ring, self.cur_post, &self.shape, wr, p);
        self.view.record(self.cur_post, wr.wr_id);
        self.cur_post = next;
        self.last = ctrl8;
        self.count += 1;
        Ok(())
    }

    /// Works out the SQ tail again; whether WQEBBs up to `next` fit now
    /// (never on a QP that takes no sends).
    #[inline(always)]
    fn refresh_room(&mut self, next: u32) -> bool {
        let state = self.home.state;
        let cached = self.limit.wrapping_sub(state.limit());
        let done = self.view.done();
        self.limit = state.end_at(tail(&self.ring, done, self.cur_post, cached));
        fits(next, self.limit)
    }

    #[inline]
    pub fn send(&mut self, wr_id: u64, sgl: &[Sge]) -> Result<()> {
        self.post(&SendWr::send(wr_id, sgl))
    }

    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(&SendWr::rdma_write(wr_id, sgl, remote_addr, rkey))
    }

    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post(&SendWr::rdma_read(wr_id, sgl, remote_addr, rkey))
    }

    /// Requests written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.count
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Rings the doorbell once for everything written.
    #[inline(always)]
    pub fn ring(self) {
        // Flushed here, so dropping would only flush an empty batch again.
        // Without drop glue nothing needs the batch in memory should the
        // doorbell's MMIO call unwind; always inlined, so the batch's state
        // stays in registers through the posting loop rather than being
        // kept in memory for an out-of-line call that takes it by value.
        let mut this = std::mem::ManuallyDrop::new(self);
        this.flush();
    }

    #[inline(always)]
    fn flush(&mut self) {
        // The state cannot change while the batch holds the queue, so this
        // is the tail last read plus the state's limit.
        self.home.state.set_end(self.limit);
        // Something was written when the counter moved: the queue's copy is
        // only brought up to date here. (Asking `count` instead would keep
        // it counting in the posting loop, where only `len` reads it.)
        if self.cur_post != *self.home.cur_post {
            *self.home.cur_post = self.cur_post;
            self.home.db.ring(self.cur_post, self.last);
        }
    }
}

impl Drop for SendBatch<'_> {
    #[inline]
    fn drop(&mut self) {
        self.flush();
    }
}

impl Qp {
    /// The send queue, borrowed exclusively: the single-producer contract.
    #[inline]
    pub fn send_queue(&mut self) -> &mut SendQueue {
        &mut self.dp.sq
    }

    /// `ibv_post_send` of one request. Fails at once, writing nothing, when
    /// the QP is not in RTS (or SQD, SQE, ERR).
    ///
    /// A SEND into a posted receive, both completions polled:
    ///
    /// ```
    /// use verbs::{AccessFlags, QpInit, QpType, RecvWr, SendWr, Sge, Wc, WcOpcode};
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let pd = ctx.alloc_pd()?;
    /// let mut cq = ctx.create_cq(16)?;
    /// let init = QpInit::new(QpType::Rc, &cq, &cq);
    /// let (mut a, mut b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
    /// a.connect(&b.endpoint()?)?;
    /// b.connect(&a.endpoint()?)?;
    /// let mr = pd.reg_mr(vec![0u8; 128], AccessFlags::LOCAL_WRITE)?;
    ///
    /// b.post_recv(&RecvWr::new(1, &[Sge::from_mr(&mr, 64, 64)]))?;
    /// a.post_send(&SendWr::send(2, &[Sge::from_mr(&mr, 0, 64)]))?;
    /// let mut wc = [Wc::default(); 2];
    /// let (mut got, start) = (0, std::time::Instant::now());
    /// while got < 2 && start.elapsed().as_secs() < 10 {
    ///     got += cq.poll(&mut wc[got..]);
    /// }
    /// assert_eq!(got, 2);
    /// assert!(wc.iter().all(|w| w.is_ok()));
    /// assert!(wc.iter().any(|w| w.opcode == WcOpcode::Recv && w.byte_len == 64));
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.dp.sq.post(wr)
    }

    /// A batch of send requests with one doorbell.
    #[inline]
    pub fn send_batch(&mut self) -> SendBatch<'_> {
        self.dp.sq.batch()
    }
}
