//! Asynchronous commands: completion channels (a pollable eventfd plus a
//! queue) and the per-device firmware thread that runs them.
//!
//! The firmware owns a command queue of [`CMD_QUEUE_SLOTS`] slots, as the
//! PRM's command interface does. A command takes a slot when the firmware
//! thread starts it and holds it for the latency its opcode has in the
//! profile (`Profile::cmd_latency`); its completion is posted when that
//! time is up, so completions come in finish order, not submission order.
//! Submitting while every slot is busy does not fail: the command waits in
//! the driver's submission queue (bounded by each channel's output-byte cap,
//! beyond which a submit fails with `EAGAIN`) and starts when a slot frees.
//!
//! Commands run one at a time, as on the device's command processor (the
//! firmware's state lock serializes them). The firmware thread runs them,
//! except that a command submitted while the command interface is idle
//! (nothing queued or executing, a slot free, not paused) and whose opcode
//! has no latency in the profile is run by the submitting thread itself
//! before the submit returns; its completion is posted on its channel like
//! any other. The submitter reads the idle state from an atomic flag kept
//! current under the queue's lock, so such a command takes no lock but its
//! channel's and the firmware's.
//! That spares the hand-off to the firmware thread and back, which costs
//! two thread wake-ups (microseconds) against a command that takes a
//! fraction of one. Commands with latency, commands submitted behind
//! others and commands beyond the free slots wait for the firmware thread
//! as described above. Both sides of a hand-off watch briefly before they
//! sleep (the firmware thread for a new command, a `block_on` waiter for
//! its wake-up), bounded by [`IDLE_SPIN`] and the reactor's own bound.
//!
//! A channel's eventfd is kept readable while a completion is queued only
//! once someone asked for it ([`CmdChannel::fd`]): until then the queue's
//! own wake-ups serve every waiter and a completion costs no syscall.
//! Until then, too, a completion posted to an empty queue is kept in a
//! one-entry slot beside it, which its taker (usually the submitter, right
//! after submitting) empties with one atomic exchange instead of a round
//! trip through the queue's lock.
//!
//! A context that goes away cancels its queued commands: each completes
//! with `Error::Cancelled` on its channel. Its commands already started have
//! run; their completions are posted at once.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::error::{Error, Result};
use crate::provider::{AsyncCompletion, CmdChannel};
use crate::sim::fw::Firmware;

/// Outstanding output bytes a channel may hold (the kernel's per-fd cap).
pub const MAX_OUTSTANDING_BYTES: usize = 1 << 20;

/// Slots of the firmware command queue (PRM: 32 command queue entries).
pub const CMD_QUEUE_SLOTS: usize = 32;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes the futures a queued completion took from its channel (usually
/// none: a command awaited by its submitter finds its completion queued).
#[inline]
fn wake(wakers: Vec<std::task::Waker>) {
    if !wakers.is_empty() {
        wake_all(wakers);
    }
}

fn wake_all(wakers: Vec<std::task::Waker>) {
    wakers.into_iter().for_each(std::task::Waker::wake);
}

struct ChanQ {
    /// Finished completions with the output bytes they hold, after the one
    /// in [`ChanInner::slot`] if that is full.
    done: VecDeque<(AsyncCompletion, usize)>,
    /// Output bytes of the completion last put in the slot, still counted
    /// in `bytes` (settled once the slot is found empty).
    slot_bytes: usize,
    /// Submitted, not yet finished.
    pending: usize,
    /// Output bytes of pending and unread completions.
    bytes: usize,
    /// Futures waiting for the next completion.
    wakers: Vec<std::task::Waker>,
    /// Threads blocked in `get` (notified only when there are some).
    blocked: usize,
    /// The eventfd was handed out ([`CmdChannel::fd`]): from then on it is
    /// kept readable while a completion is queued. Until then the queue's
    /// own wake-ups serve every waiter and no completion costs a syscall.
    fd_live: bool,
}

pub(crate) struct ChanInner {
    pub(crate) ctx_id: u64,
    q: Mutex<ChanQ>,
    cv: Condvar,
    efd: EventFd,
    slot: Slot,
}

/// One completion kept beside the queue: a completion posted while the
/// queue is empty and its fd not handed out goes here, and its taker
/// (typically the submitter, right after the submit) takes it with one
/// atomic exchange instead of a round trip through the queue's lock.
/// It is always older than everything in [`ChanQ::done`].
struct Slot {
    state: AtomicU8,
    value: UnsafeCell<Option<AsyncCompletion>>,
}

/// [`Slot::state`]: nothing in it; a completion in it; a taker moving it out.
const SLOT_EMPTY: u8 = 0;
const SLOT_FULL: u8 = 1;
const SLOT_TAKING: u8 = 2;

// SAFETY: `value` is written only by a holder of the queue's lock that saw
// the state EMPTY (a taker's Release store of EMPTY comes after its read),
// and read only by the one thread whose exchange moved the state from FULL
// (stored with Release after the write) to TAKING; so no two threads touch
// it at once and each sees the other's last access.
unsafe impl Sync for Slot {}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: AtomicU8::new(SLOT_EMPTY),
            value: UnsafeCell::new(None),
        }
    }

    fn is_empty(&self) -> bool {
        self.state.load(Ordering::Acquire) == SLOT_EMPTY
    }

    fn is_full(&self) -> bool {
        self.state.load(Ordering::Acquire) == SLOT_FULL
    }

    /// Puts `c` in the slot; only under the queue's lock, with the slot
    /// seen empty there.
    fn put(&self, c: AsyncCompletion) {
        // SAFETY: the caller holds the queue's lock (no other writer) and
        // saw the state EMPTY (no reader until the store below).
        unsafe { *self.value.get() = Some(c) };
        self.state.store(SLOT_FULL, Ordering::Release);
    }

    /// The completion in the slot, if there is one and no one else takes it.
    #[inline]
    fn take(&self) -> Option<AsyncCompletion> {
        if self.state.load(Ordering::Relaxed) != SLOT_FULL {
            return None;
        }
        self.state
            .compare_exchange(SLOT_FULL, SLOT_TAKING, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: the exchange above made this thread the only reader, and
        // writers wait for the EMPTY stored below.
        let c = unsafe { (*self.value.get()).take() };
        self.state.store(SLOT_EMPTY, Ordering::Release);
        c
    }
}

impl ChanInner {
    /// Accounts for a new command of `outlen` output bytes.
    fn reserve(&self, outlen: usize) -> Result<()> {
        self.reserve_in(&mut lock(&self.q), outlen)
    }

    /// Stops counting the bytes of a completion taken from the slot
    /// without the lock.
    #[inline]
    fn settle(&self, q: &mut ChanQ) {
        if q.slot_bytes > 0 && self.slot.is_empty() {
            q.bytes = q.bytes.saturating_sub(q.slot_bytes);
            q.slot_bytes = 0;
        }
    }

    #[inline]
    fn reserve_in(&self, q: &mut ChanQ, outlen: usize) -> Result<()> {
        self.settle(q);
        if q.bytes + outlen > MAX_OUTSTANDING_BYTES {
            return Err(Error::os(
                "async command: channel has 1 MiB of output outstanding",
                libc::EAGAIN,
            ));
        }
        q.bytes += outlen;
        q.pending += 1;
        Ok(())
    }

    fn complete(&self, c: AsyncCompletion, outlen: usize) {
        let wakers = self.queue(&mut lock(&self.q), c, outlen);
        wake(wakers);
    }

    /// Reserves, runs `exec` and queues its completion under one hold of
    /// the queue's lock (a command run at once by its submitter); the
    /// wakers to wake once the caller has let go of its own locks.
    #[inline]
    fn run_now(
        &self,
        wr_id: u64,
        outlen: usize,
        exec: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Vec<std::task::Waker>> {
        let mut q = lock(&self.q);
        self.reserve_in(&mut q, outlen)?;
        let result = exec();
        Ok(self.queue(&mut q, (wr_id, result), outlen))
    }

    /// Queues a finished command's completion; returns the futures to wake.
    #[inline]
    fn queue(&self, q: &mut ChanQ, c: AsyncCompletion, outlen: usize) -> Vec<std::task::Waker> {
        q.pending = q.pending.saturating_sub(1);
        self.settle(q);
        if !q.fd_live && q.done.is_empty() && self.slot.is_empty() {
            q.slot_bytes = outlen;
            self.slot.put(c);
        } else {
            if q.fd_live && q.done.is_empty() {
                // Readable while anything is queued; an eventfd write only
                // fails on counter overflow, which one pending unit never
                // reaches.
                let _ = self.efd.write(1);
            }
            q.done.push_back((c, outlen));
        }
        if q.blocked > 0 {
            self.cv.notify_all();
        }
        std::mem::take(&mut q.wakers)
    }

    /// The first queued completion, if any.
    #[inline]
    fn pop_done(&self, q: &mut ChanQ) -> Option<AsyncCompletion> {
        if let Some(c) = self.slot.take() {
            self.settle(q);
            return Some(c);
        }
        let (c, outlen) = q.done.pop_front()?;
        q.bytes = q.bytes.saturating_sub(outlen);
        if q.fd_live && q.done.is_empty() {
            // Drain the counter: the fd stops polling readable.
            let _ = self.efd.read();
        }
        Some(c)
    }

    fn pop(&self, block: bool) -> Result<Option<AsyncCompletion>> {
        let mut q = lock(&self.q);
        loop {
            if let Some(c) = self.pop_done(&mut q) {
                return Ok(Some(c));
            }
            if !block {
                return Ok(None);
            }
            if q.pending == 0 {
                return Err(Error::argument(
                    "no asynchronous command is outstanding on this channel",
                ));
            }
            q.blocked += 1;
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.blocked -= 1;
        }
    }
}

/// A completion channel of the emulated device.
pub(crate) struct SimCmdChannel {
    pub(crate) inner: Arc<ChanInner>,
}

impl SimCmdChannel {
    pub(crate) fn new(ctx_id: u64) -> Result<SimCmdChannel> {
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::os("eventfd", e as i32))?;
        Ok(SimCmdChannel {
            inner: Arc::new(ChanInner {
                ctx_id,
                q: Mutex::new(ChanQ {
                    done: VecDeque::new(),
                    slot_bytes: 0,
                    pending: 0,
                    bytes: 0,
                    wakers: Vec::new(),
                    blocked: 0,
                    fd_live: false,
                }),
                cv: Condvar::new(),
                efd,
                slot: Slot::new(),
            }),
        })
    }
}

impl CmdChannel for SimCmdChannel {
    fn fd(&self) -> RawFd {
        let mut q = lock(&self.inner.q);
        if !q.fd_live {
            q.fd_live = true;
            // The fd tells from now on whether a completion waits: the one
            // in the slot joins the queue, at its head.
            match self.inner.slot.take() {
                Some(c) => {
                    let outlen = std::mem::take(&mut q.slot_bytes);
                    q.done.push_front((c, outlen));
                }
                None => self.inner.settle(&mut q),
            }
            if !q.done.is_empty() {
                let _ = self.inner.efd.write(1);
            }
        }
        self.inner.efd.as_raw_fd()
    }

    /// Never used for waiting: [`CmdChannel::wake_on_completion`] always
    /// takes the waker, so the fd is not made live for it.
    fn wait_fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    fn try_get(&self) -> Result<Option<AsyncCompletion>> {
        self.inner.pop(false)
    }

    #[inline]
    fn try_get_queued(&self) -> Option<AsyncCompletion> {
        self.inner
            .slot
            .take()
            .or_else(|| self.inner.pop_done(&mut lock(&self.inner.q)))
    }

    fn get(&self) -> Result<AsyncCompletion> {
        self.inner
            .pop(true)
            .and_then(|c| c.ok_or_else(|| Error::argument("no completion")))
    }

    fn wake_on_completion(&self, waker: &std::task::Waker) -> bool {
        let mut q = lock(&self.inner.q);
        if !q.done.is_empty() || self.inner.slot.is_full() {
            drop(q);
            waker.wake_by_ref();
        } else if !q.wakers.iter().any(|w| w.will_wake(waker)) {
            q.wakers.push(waker.clone());
        }
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What a queued command does on the firmware thread instead of running
/// its inbox as is: a create that also enters its handle, a UMEM
/// registration. Dropped unrun when the command is cancelled.
pub(crate) type Work = Box<dyn FnOnce(&Firmware) -> Result<Vec<u8>> + Send>;

struct Job {
    ctx: u64,
    /// The command (see [`AsyncEngine::submit_work`]): names it, picks its
    /// latency, runs as is without `work`.
    cmd: Vec<u8>,
    outlen: usize,
    wr_id: u64,
    chan: Arc<ChanInner>,
    work: Option<Work>,
}

impl Job {
    fn inbox(&self) -> &[u8] {
        inbox_of(&self.cmd, self.outlen, self.work.is_some())
    }
}

/// The inbox in a command's buffer: after the room for its outbox's
/// `outlen` bytes for a plain command, the whole buffer for one that runs
/// `work`.
fn inbox_of(cmd: &[u8], outlen: usize, work: bool) -> &[u8] {
    match work {
        true => cmd,
        false => cmd.get(outlen..).unwrap_or_default(),
    }
}

/// A started command holding a queue slot until `due`.
struct InFlight {
    due: Instant,
    ctx: u64,
    outlen: usize,
    wr_id: u64,
    chan: Arc<ChanInner>,
    result: Result<Vec<u8>>,
}

impl InFlight {
    fn post(self) {
        self.chan.complete((self.wr_id, self.result), self.outlen);
    }
}

struct EngineQ {
    jobs: VecDeque<Job>,
    slots: Vec<InFlight>,
    paused: bool,
    started: bool,
    /// The device is gone: the thread ends.
    stop: bool,
    /// Context of the command being executed (on the firmware thread or
    /// by a submitter that found the command interface idle), if any.
    running: Option<u64>,
    /// Threads waiting for `running` to clear (cancel, fatal error).
    watchers: usize,
    /// The firmware thread waits on the condition variable (a submit must
    /// notify it; while it runs or watches, it sees new commands itself).
    sleeping: bool,
}

impl EngineQ {
    /// The command interface is idle: its firmware thread started, nothing
    /// queued or executing, a slot free, not paused.
    fn idle(&self) -> bool {
        self.started
            && !self.paused
            && self.jobs.is_empty()
            && self.running.is_none()
            && self.slots.len() < CMD_QUEUE_SLOTS
    }
}

/// How long the firmware thread watches for a new command before it
/// sleeps (see `reactor::watch`): a command submitted meanwhile starts
/// without a thread wake-up, as a polling firmware picks up a doorbell.
const IDLE_SPIN: Duration = Duration::from_micros(50);

/// The device's firmware command thread.
pub(crate) struct AsyncEngine {
    /// The thread's name (`sim<index>-fw`).
    name: String,
    fw: Arc<Firmware>,
    latency: Vec<(u16, Duration)>,
    q: Mutex<EngineQ>,
    cv: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Commands submitted so far; the idle firmware thread watches it.
    submitted: AtomicU64,
    /// [`EngineQ::idle`] as of the last change (stored under the lock,
    /// read without it): a submit that finds it set runs its command
    /// without taking the queue's lock.
    idle: AtomicBool,
}

impl AsyncEngine {
    pub(crate) fn new(
        name: String,
        fw: Arc<Firmware>,
        latency: Vec<(u16, Duration)>,
    ) -> AsyncEngine {
        AsyncEngine {
            name,
            fw,
            latency,
            q: Mutex::new(EngineQ {
                jobs: VecDeque::new(),
                slots: Vec::new(),
                paused: false,
                started: false,
                stop: false,
                running: None,
                watchers: 0,
                sleeping: false,
            }),
            cv: Condvar::new(),
            thread: Mutex::new(None),
            submitted: AtomicU64::new(0),
            idle: AtomicBool::new(false),
        }
    }

    /// Ends the thread (the device is gone, so no context is left to
    /// submit or wait) and waits for it.
    pub(crate) fn shutdown(&self) {
        lock(&self.q).stop = true;
        self.cv.notify_all();
        let handle = lock(&self.thread).take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    #[inline]
    fn latency_of(&self, inbox: &[u8]) -> Duration {
        // Most profiles give no command latency: no opcode to read then.
        if self.latency.is_empty() {
            return Duration::ZERO;
        }
        let op = crate::admission::opcode_of(inbox);
        self.latency
            .iter()
            .find(|(o, _)| *o == op)
            .map_or(Duration::ZERO, |(_, d)| *d)
    }

    /// Queues a plain command (its buffer `cmd` holds room for its
    /// outbox's `outlen` bytes, then its inbox, already admitted and
    /// stamped) for `chan`; see [`AsyncEngine::submit_work`]. A command the
    /// submitter may run (the usual case) is run here, without the rest of
    /// `submit_work`.
    pub(crate) fn submit(
        self: &Arc<Self>,
        ctx: u64,
        cmd: Vec<u8>,
        outlen: usize,
        wr_id: u64,
        chan: &Arc<ChanInner>,
    ) -> Result<()> {
        if self.idle.load(Ordering::Acquire)
            && self.latency_of(inbox_of(&cmd, outlen, false)).is_zero()
        {
            return self.run_plain_now(cmd, outlen, wr_id, chan);
        }
        self.submit_work(ctx, cmd, outlen, wr_id, chan, None)
    }

    /// Stores [`EngineQ::idle`] for submitters to read without the lock;
    /// called under the lock after every change of what it depends on.
    fn publish(&self, q: &EngineQ) {
        self.idle.store(q.idle(), Ordering::Release);
    }

    /// Runs a plain command for its submitter and posts its completion
    /// (see [`AsyncEngine::submit_work`]). A plain command takes a
    /// fraction of a microsecond, calls back into nothing and touches the
    /// firmware only under its state lock, which keeps it one at a time
    /// with every other command; it holds its channel's lock throughout,
    /// so reserving, running and posting cost one hold of it.
    #[inline]
    fn run_plain_now(
        &self,
        cmd: Vec<u8>,
        outlen: usize,
        wr_id: u64,
        chan: &ChanInner,
    ) -> Result<()> {
        let wakers = chan.run_now(wr_id, outlen, || self.execute_plain(cmd, outlen))?;
        wake(wakers);
        Ok(())
    }

    /// Runs one command: `work` when given, else the inbox in `cmd` as is.
    fn execute(&self, cmd: Vec<u8>, outlen: usize, work: Option<Work>) -> Result<Vec<u8>> {
        match work {
            Some(work) => work(&self.fw),
            None => self.execute_plain(cmd, outlen),
        }
    }

    /// Runs the inbox in `cmd` as is, writing the answer in the room before
    /// it: the buffer, cut to that room, becomes the outbox, so a command
    /// costs no allocation or copy for its outbox.
    #[inline]
    fn execute_plain(&self, cmd: Vec<u8>, outlen: usize) -> Result<Vec<u8>> {
        let mut buf = cmd;
        let room = outlen.min(buf.len());
        let (out, inbox) = buf.split_at_mut(room);
        match self.fw.execute(inbox, out) {
            Ok(()) => {
                buf.truncate(outlen);
                Ok(buf)
            }
            Err(e) => Err(super::with_outbox(inbox, e)),
        }
    }

    /// `running` cleared: wakes whoever waits for it (the firmware thread
    /// with commands queued behind it, a cancel, a fatal error).
    fn ran(&self, q: &mut EngineQ) {
        q.running = None;
        self.publish(q);
        if q.watchers > 0 || (q.sleeping && !q.jobs.is_empty()) {
            self.cv.notify_all();
        }
    }

    /// Queues a command that runs `work` (when given; `cmd` is then its
    /// inbox, which names it) or else the inbox in `cmd` (after room for
    /// its outbox's `outlen` bytes, where the answer is written).
    ///
    /// When the command interface is idle (nothing queued or executing, a
    /// slot free, not paused) and the profile gives the command no latency,
    /// the submitting thread takes the firmware's execution role for it:
    /// it runs the command and posts the completion on `chan` before
    /// returning, sparing the hand-off to the
    /// firmware thread and back (two thread wake-ups). Everything else —
    /// commands with latency, commands submitted while others are queued
    /// or executing, beyond the free slots, while paused — waits for the
    /// firmware thread.
    pub(crate) fn submit_work(
        self: &Arc<Self>,
        ctx: u64,
        cmd: Vec<u8>,
        outlen: usize,
        wr_id: u64,
        chan: &Arc<ChanInner>,
        work: Option<Work>,
    ) -> Result<()> {
        let mut q = lock(&self.q);
        if !q.started {
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || me.run());
            match spawned {
                Ok(h) => *lock(&self.thread) = Some(h),
                Err(e) => {
                    drop(q);
                    chan.reserve(outlen)?;
                    chan.complete(
                        (
                            wr_id,
                            Err(Error::os(
                                "spawn firmware thread",
                                e.raw_os_error().unwrap_or(libc::EAGAIN),
                            )),
                        ),
                        outlen,
                    );
                    return Ok(());
                }
            }
            q.started = true;
            self.publish(&q);
        }
        if q.idle()
            && self
                .latency_of(inbox_of(&cmd, outlen, work.is_some()))
                .is_zero()
        {
            let Some(work) = work else {
                drop(q);
                return self.run_plain_now(cmd, outlen, wr_id, chan);
            };
            // A create or registration may drop what it holds (a context,
            // whose going cancels through this queue): it runs unlocked,
            // marked `running`.
            chan.reserve(outlen)?;
            q.running = Some(ctx);
            self.publish(&q);
            drop(q);
            let result = self.execute(cmd, outlen, Some(work));
            self.ran(&mut lock(&self.q));
            chan.complete((wr_id, result), outlen);
            return Ok(());
        }
        chan.reserve(outlen)?;
        q.jobs.push_back(Job {
            ctx,
            cmd,
            outlen,
            wr_id,
            chan: Arc::clone(chan),
            work,
        });
        self.publish(&q);
        self.submitted.fetch_add(1, Ordering::Release);
        if q.sleeping {
            self.cv.notify_all();
        }
        Ok(())
    }

    fn run(&self) {
        let mut q = lock(&self.q);
        // Watched for new commands since the queue last ran dry.
        let mut spun = false;
        loop {
            if q.stop {
                return;
            }
            // Post every completion whose time is up, earliest first.
            let now = Instant::now();
            q.slots.sort_by_key(|s| s.due);
            let due = q.slots.iter().take_while(|s| s.due <= now).count();
            let done: Vec<InFlight> = q.slots.drain(..due).collect();
            if !done.is_empty() {
                self.publish(&q);
                drop(q);
                done.into_iter().for_each(InFlight::post);
                q = lock(&self.q);
                spun = false;
                continue;
            }
            if !q.paused && q.running.is_none() && q.slots.len() < CMD_QUEUE_SLOTS {
                if let Some(job) = q.jobs.pop_front() {
                    q.running = Some(job.ctx);
                    self.publish(&q);
                    drop(q);
                    let latency = self.latency_of(job.inbox());
                    let result = self.execute(job.cmd, job.outlen, job.work);
                    let slot = InFlight {
                        due: Instant::now() + latency,
                        ctx: job.ctx,
                        outlen: job.outlen,
                        wr_id: job.wr_id,
                        chan: job.chan,
                        result,
                    };
                    q = lock(&self.q);
                    q.slots.push(slot);
                    self.ran(&mut q);
                    spun = false;
                    continue;
                }
            }
            q = match q.slots.iter().map(|s| s.due).min() {
                Some(next) => {
                    let wait = next.saturating_duration_since(Instant::now());
                    q.sleeping = true;
                    let mut q = self
                        .cv
                        .wait_timeout(q, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    q.sleeping = false;
                    q
                }
                None if !spun && !q.paused && q.running.is_none() => {
                    spun = true;
                    let seen = self.submitted.load(Ordering::Acquire);
                    drop(q);
                    crate::reactor::watch(IDLE_SPIN, || {
                        self.submitted.load(Ordering::Acquire) != seen
                    });
                    lock(&self.q)
                }
                None => {
                    q.sleeping = true;
                    let mut q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.sleeping = false;
                    q
                }
            };
        }
    }

    /// Cancels every queued command of context `ctx`, waits for one of its
    /// commands that is executing right now, and posts the completions of
    /// its started commands at once.
    pub(crate) fn cancel_ctx(&self, ctx: u64) {
        let (cancelled, started): (Vec<Job>, Vec<InFlight>) = {
            let mut q = lock(&self.q);
            let (mine, rest): (VecDeque<Job>, VecDeque<Job>) = std::mem::take(&mut q.jobs)
                .into_iter()
                .partition(|j| j.ctx == ctx);
            q.jobs = rest;
            while q.running == Some(ctx) {
                q.watchers += 1;
                q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.watchers -= 1;
            }
            let (started, others): (Vec<InFlight>, Vec<InFlight>) = std::mem::take(&mut q.slots)
                .into_iter()
                .partition(|s| s.ctx == ctx);
            q.slots = others;
            self.publish(&q);
            self.cv.notify_all();
            (mine.into_iter().collect(), started)
        };
        started.into_iter().for_each(InFlight::post);
        for j in cancelled {
            let what = format!(
                "{} (wr_id {})",
                prm_layouts::enums::opcode_name(crate::admission::opcode_of(j.inbox())),
                j.wr_id
            );
            j.chan
                .complete((j.wr_id, Err(Error::Cancelled(what))), j.outlen);
        }
    }

    /// Completes every queued command with a device-fatal error (the device
    /// `dev` died before running them); started ones are posted at once.
    pub(crate) fn fail_all(&self, dev: &str) {
        let (queued, started) = {
            let mut q = lock(&self.q);
            let queued = std::mem::take(&mut q.jobs);
            while q.running.is_some() {
                q.watchers += 1;
                q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                q.watchers -= 1;
            }
            let started = std::mem::take(&mut q.slots);
            self.publish(&q);
            self.cv.notify_all();
            (queued, started)
        };
        started.into_iter().for_each(InFlight::post);
        for j in queued {
            let what = format!(
                "{}: {} (wr_id {})",
                dev,
                prm_layouts::enums::opcode_name(crate::admission::opcode_of(j.inbox())),
                j.wr_id
            );
            j.chan
                .complete((j.wr_id, Err(Error::DeviceFatal(what))), j.outlen);
        }
    }

    /// Holds queued commands back (tests use it to make cancellation certain).
    pub(crate) fn set_paused(&self, paused: bool) {
        let mut q = lock(&self.q);
        q.paused = paused;
        self.publish(&q);
        drop(q);
        self.cv.notify_all();
    }

    /// Commands queued and not yet started.
    pub(crate) fn queued(&self) -> usize {
        lock(&self.q).jobs.len()
    }

    /// Commands started whose completion is not posted yet (queue slots busy).
    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.q).slots.len()
    }
}
