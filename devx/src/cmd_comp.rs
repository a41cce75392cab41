//! Completion channels for asynchronous commands.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll};

use crate::context::Context;
use crate::error::Result;
use crate::num_hash::{NumMap, NumSet};
use crate::provider::{AsyncCompletion, CmdChannel};
use crate::reactor::NextReady;

/// A completion channel: `Obj::query_async` queues commands, `get`/`try_get`
/// return `(wr_id, outbox or error)` in completion order. The fd polls
/// readable while a completion waits, so any event loop can watch it.
///
/// ```
/// use prm_layouts::enums::Opcode;
/// use prm_layouts::{QueryCqIn, QueryCqOut};
/// # use prm_layouts::{CreateCqIn, CreateCqOut};
/// # fn main() -> devx::Result<()> {
/// # let ctx = devx::Device::by_name("sim0")?.open()?;
/// # let mem = memmap2::MmapMut::map_anon(4096).expect("memory");
/// # let ring = devx::Umem::register(&ctx, mem, devx::access::LOCAL_WRITE)?;
/// # let mem = memmap2::MmapMut::map_anon(4096).expect("memory");
/// # let dbr = devx::Umem::register(&ctx, mem, devx::access::LOCAL_WRITE)?;
/// # let uar = devx::Uar::alloc(&ctx)?;
/// # let mut c = CreateCqIn::new();
/// # c.set_opcode(Opcode::CreateCq.raw());
/// # c.set_cq_umem_id(ring.id());
/// # let cqc = c.cq_context_mut();
/// # cqc.set_log_cq_size(6);
/// # cqc.set_uar_page(uar.page_id());
/// # cqc.set_c_eqn_or_apu_element(ctx.query_eqn(0)?);
/// # cqc.set_dbr_umem_id(dbr.id());
/// # let cq = ctx.create(c.as_bytes(), CreateCqOut::SIZE_BYTES)?;
/// // `cq`: a CQ object made with `ctx.create` (CREATE_CQ).
/// let comp = devx::CmdComp::new(&ctx)?;
/// let mut q = QueryCqIn::new();
/// q.set_opcode(Opcode::QueryCq.raw());
/// q.set_cqn(cq.id());
/// cq.query_async(q.as_bytes(), QueryCqOut::SIZE_BYTES, 42, &comp)?;
/// let (wr_id, out) = comp.get()?;
/// let out = out?;
/// let out = QueryCqOut::from_slice(&out).expect("a full outbox");
/// assert_eq!((wr_id, out.cq_context().log_cq_size()), (42, 6));
/// # Ok(()) }
/// ```
pub struct CmdComp {
    ctx: Context,
    channel: Arc<dyn CmdChannel>,
    sorted: Mutex<Sorted>,
    /// Nothing is parked or abandoned in `sorted` (written under its lock,
    /// read without it): a completion that [`CmdComp::completion`] finds
    /// queued for its own `wr_id` then has no other claimant.
    quiet: AtomicBool,
    /// The next [`CmdComp::library_wr_id`].
    tags: AtomicU64,
}

/// The bit set in every [`CmdComp::library_wr_id`]: a caller sharing the
/// channel with a library keeps its own `wr_id`s apart by leaving it clear.
pub const LIBRARY_WR_ID_BIT: u64 = 1 << 63;

/// Completions read from the channel on behalf of [`CmdComp::completion`]
/// futures waiting for other `wr_id`s.
#[derive(Default)]
struct Sorted {
    /// Read, waiting for their future (or `get`) to take them.
    parked: NumMap<u64, Result<Vec<u8>>>,
    /// Awaited by a future; others read on their behalf are parked.
    awaited: NumSet<u64>,
    /// Their future was dropped: the completion is discarded on arrival,
    /// or handed to what the future left to finish it.
    abandoned: NumMap<u64, Option<OnArrival>>,
}

/// [`Sorted`] locked; keeps [`CmdComp::quiet`] current as it lets go.
struct SortedGuard<'a> {
    s: MutexGuard<'a, Sorted>,
    quiet: &'a AtomicBool,
}

impl Deref for SortedGuard<'_> {
    type Target = Sorted;
    fn deref(&self) -> &Sorted {
        &self.s
    }
}

impl DerefMut for SortedGuard<'_> {
    fn deref_mut(&mut self) -> &mut Sorted {
        &mut self.s
    }
}

impl Drop for SortedGuard<'_> {
    fn drop(&mut self) {
        let quiet = self.s.parked.is_empty() && self.s.abandoned.is_empty();
        self.quiet.store(quiet, Ordering::Release);
    }
}

/// What finishes a command whose future was dropped (a queued destroy:
/// the object it holds goes, or comes back to be dropped).
pub(crate) type OnArrival = Box<dyn FnOnce(Result<Vec<u8>>) + Send>;

impl fmt::Debug for CmdComp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmdComp(fd {})", self.channel.wait_fd())
    }
}

impl CmdComp {
    pub fn new(ctx: &Context) -> Result<CmdComp> {
        let channel = ctx.inner.provider.create_cmd_channel()?;
        Ok(CmdComp {
            ctx: ctx.clone(),
            channel,
            sorted: Mutex::new(Sorted::default()),
            quiet: AtomicBool::new(true),
            tags: AtomicU64::new(0),
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// A `wr_id` no other call of this on this channel returned, with
    /// [`LIBRARY_WR_ID_BIT`] set: for libraries that queue their own
    /// commands on a caller's channel. They count up per channel, so the
    /// same program tags its commands the same way every run (a recorded
    /// fixture replays).
    pub fn library_wr_id(&self) -> u64 {
        LIBRARY_WR_ID_BIT | self.tags.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn channel(&self) -> &dyn CmdChannel {
        &*self.channel
    }

    fn sorted(&self) -> SortedGuard<'_> {
        SortedGuard {
            s: self.sorted.lock().unwrap_or_else(|e| e.into_inner()),
            quiet: &self.quiet,
        }
    }

    /// Waits for the next completion.
    pub fn get(&self) -> Result<AsyncCompletion> {
        loop {
            if let Some(c) = self.try_get()? {
                return Ok(c);
            }
            let c = self.channel.get()?;
            if let Some(c) = self.sort(c) {
                return Ok(c);
            }
        }
    }

    /// The next completion if one is ready.
    pub fn try_get(&self) -> Result<Option<AsyncCompletion>> {
        {
            let mut s = self.sorted();
            let free = s.parked.keys().copied().find(|w| !s.awaited.contains(w));
            if let Some(wr_id) = free {
                let out = s.parked.remove(&wr_id).expect("key just found");
                return Ok(Some((wr_id, out)));
            }
        }
        while let Some(c) = self.channel.try_get()? {
            if let Some(c) = self.sort(c) {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Reads at most one completion from the channel and sorts it as `get`
    /// does: kept for its future, discarded (or finished) if its future was
    /// dropped, else kept for `get`/`next`. A fixture replay lets the
    /// channel take so a completion the recorded application's channel
    /// took on its own.
    pub(crate) fn read_one(&self) -> Result<()> {
        if let Some(c) = self.channel.try_get()? {
            if let Some((w, out)) = self.sort(c) {
                self.sorted().parked.insert(w, out);
            }
        }
        Ok(())
    }

    /// Keeps a completion a future waits for (or nobody does any more) out
    /// of `get`'s way; returns the others.
    fn sort(&self, (wr_id, out): AsyncCompletion) -> Option<AsyncCompletion> {
        let mut s = self.sorted();
        if let Some(then) = s.abandoned.remove(&wr_id) {
            drop(s);
            if let Some(then) = then {
                then(out);
            }
            return None;
        }
        if s.awaited.contains(&wr_id) {
            s.parked.insert(wr_id, out);
            return None;
        }
        Some((wr_id, out))
    }

    /// The next completion, as a future: resolves when the channel's fd
    /// polls readable and a completion no [`CmdComp::completion`] future
    /// waits for is there.
    pub fn next(
        &self,
    ) -> NextReady<
        impl FnMut() -> Result<Option<AsyncCompletion>> + Unpin + '_,
        impl Fn(&std::task::Waker) -> bool + Unpin + '_,
    > {
        NextReady::new(self.channel.wait_fd(), move || self.try_get())
            .wake_with(move |w| self.channel.wake_on_completion(w))
    }

    /// A future resolving to the outbox of the command submitted with
    /// `wr_id` (or its error). Completions of other commands read meanwhile
    /// stay for `get`/`next` or their own future. Dropping the future
    /// abandons the command: its completion is discarded when it arrives.
    #[inline]
    pub fn completion(&self, wr_id: u64) -> Completion<'_> {
        match self.channel.try_get_queued() {
            // A command run during its submit, awaited next: nothing else
            // claims its completion, so the future holds it without being
            // registered.
            Some((w, out)) if w == wr_id && self.quiet.load(Ordering::Acquire) => Completion {
                comp: self,
                wr_id,
                done: false,
                early: Some(out),
            },
            other => self.register(wr_id, other),
        }
    }

    /// [`CmdComp::completion`] of a command whose completion is not the
    /// one just taken (`queued`, sorted here) or that others may claim.
    fn register(&self, wr_id: u64, queued: Option<AsyncCompletion>) -> Completion<'_> {
        self.sorted().awaited.insert(wr_id);
        if let Some(c) = queued {
            if let Some((w, out)) = self.sort(c) {
                // Nobody awaits it: keep it for `get`/`next`.
                self.sorted().parked.insert(w, out);
            }
        }
        Completion {
            comp: self,
            wr_id,
            done: false,
            early: None,
        }
    }
}

/// Future of [`CmdComp::completion`].
#[derive(Debug)]
pub struct Completion<'a> {
    comp: &'a CmdComp,
    wr_id: u64,
    done: bool,
    /// Its completion, taken from the channel when the future was made
    /// (it is then not registered in `awaited`).
    early: Option<Result<Vec<u8>>>,
}

impl Future for Completion<'_> {
    type Output = Result<Vec<u8>>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        if let Some(out) = self.early.take() {
            self.done = true;
            return Poll::Ready(out);
        }
        self.poll_channel(cx)
    }
}

impl<'a> Completion<'a> {
    /// [`Future::poll`] of a completion not taken when the future was made.
    fn poll_channel(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<Vec<u8>>> {
        let comp = self.comp;
        let wr_id = self.wr_id;
        let drained = (|| {
            while let Some(c) = comp.channel.try_get()? {
                if c.0 == wr_id {
                    // Its own completion, the usual case when one command
                    // at a time is awaited: taken without parking it.
                    let mut s = comp.sorted();
                    if !s.abandoned.contains_key(&wr_id) && !s.parked.contains_key(&wr_id) {
                        s.awaited.remove(&wr_id);
                        return Ok(Some(c.1));
                    }
                }
                if let Some((w, out)) = comp.sort(c) {
                    // Nobody awaits it: keep it for `get`/`next`.
                    comp.sorted().parked.insert(w, out);
                }
            }
            Ok::<_, crate::Error>(None)
        })();
        match drained {
            Err(e) => return Poll::Ready(Err(e)),
            Ok(Some(out)) => {
                self.done = true;
                return Poll::Ready(out);
            }
            Ok(None) => {}
        }
        let mut s = comp.sorted();
        if let Some(out) = s.parked.remove(&wr_id) {
            s.awaited.remove(&wr_id);
            drop(s);
            self.done = true;
            return Poll::Ready(out);
        }
        drop(s);
        if comp.channel.wake_on_completion(cx.waker()) {
            return Poll::Pending;
        }
        match crate::reactor::wake_when_readable(comp.channel.wait_fd(), cx.waker()) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Withdraws the registration of a command that was never submitted.
    pub(crate) fn unsubmitted(mut self) {
        self.done = true;
        match self.early.take() {
            // A completion of another command with the same `wr_id`: it
            // stays for `get`, as it would have arrived.
            Some(out) => {
                self.comp.sorted().parked.insert(self.wr_id, out);
            }
            None => {
                self.comp.sorted().awaited.remove(&self.wr_id);
            }
        }
    }

    /// Abandons the command, leaving `then` to finish it when its
    /// completion arrives (at once if it is here already).
    pub(crate) fn abandon_with(mut self, then: OnArrival) {
        self.done = true;
        if let Some(out) = self.early.take() {
            then(out);
            return;
        }
        let mut s = self.comp.sorted();
        s.awaited.remove(&self.wr_id);
        match s.parked.remove(&self.wr_id) {
            Some(out) => {
                drop(s);
                then(out);
            }
            None => {
                s.abandoned.insert(self.wr_id, Some(then));
            }
        }
    }
}

impl Drop for Completion<'_> {
    #[inline]
    fn drop(&mut self) {
        // A completion taken early is discarded with the future, as it
        // would have been on arrival.
        if self.done || self.early.is_some() {
            return;
        }
        self.abandon();
    }
}

impl Completion<'_> {
    /// The future goes before its completion came: the completion is
    /// discarded when it arrives.
    fn abandon(&mut self) {
        let mut s = self.comp.sorted();
        s.awaited.remove(&self.wr_id);
        if s.parked.remove(&self.wr_id).is_none() {
            s.abandoned.insert(self.wr_id, None);
        }
    }
}

impl Drop for CmdComp {
    /// Finishes the commands whose futures were dropped and left something
    /// to finish (queued destroys) with the completions already here; the
    /// rest learn that the channel closed (`Error::Cancelled`) without
    /// waiting for the firmware.
    fn drop(&mut self) {
        while let Ok(Some(c)) = self.channel.try_get() {
            let _ = self.sort(c);
        }
        let left: Vec<(u64, OnArrival)> = self
            .sorted()
            .abandoned
            .drain()
            .filter_map(|(w, a)| Some((w, a?)))
            .collect();
        for (wr_id, then) in left {
            then(Err(crate::Error::Cancelled(format!(
                "the completion channel closed before command {wr_id} completed"
            ))));
        }
    }
}

impl AsRawFd for CmdComp {
    fn as_raw_fd(&self) -> RawFd {
        self.channel.fd()
    }
}
