//! Asynchronous events of a context (`ibv_get_async_event`,
//! `ibv_ack_async_event`): port state changes and the device-fatal error
//! from the context's async-event file, and the affiliated events of its
//! CQs, QPs and SRQs from a DEVX event channel they subscribe to when they
//! are created.
//!
//! Any number of waiters, blocking or `async`, may wait at once; each event
//! completes exactly one of them. Closing the queue
//! ([`AsyncEvents::close`]) wakes every waiter with [`Error::Cancelled`], and
//! every later wait fails the same way.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

use devx::{event_type as eqe, ib_event, AsyncEventFile, DevxEvent};

use crate::error::{Error, Result, VerbResult};

/// What an async event reports (`enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventType {
    CqErr,
    QpFatal,
    QpReqErr,
    QpAccessErr,
    CommEst,
    SqDrained,
    PathMig,
    PathMigErr,
    DeviceFatal,
    PortActive,
    PortErr,
    LidChange,
    PkeyChange,
    SmChange,
    SrqErr,
    SrqLimitReached,
    QpLastWqeReached,
    ClientReregister,
    GidChange,
    WqFatal,
    /// A type this library does not name (its `ib_event_type` number).
    Other(u32),
}

impl AsyncEventType {
    /// The type an `ib_event_type` number names.
    pub fn from_ib(t: u32) -> AsyncEventType {
        use AsyncEventType::*;
        match t {
            ib_event::CQ_ERR => CqErr,
            ib_event::QP_FATAL => QpFatal,
            ib_event::QP_REQ_ERR => QpReqErr,
            ib_event::QP_ACCESS_ERR => QpAccessErr,
            ib_event::COMM_EST => CommEst,
            ib_event::SQ_DRAINED => SqDrained,
            ib_event::PATH_MIG => PathMig,
            ib_event::PATH_MIG_ERR => PathMigErr,
            ib_event::DEVICE_FATAL => DeviceFatal,
            ib_event::PORT_ACTIVE => PortActive,
            ib_event::PORT_ERR => PortErr,
            ib_event::LID_CHANGE => LidChange,
            ib_event::PKEY_CHANGE => PkeyChange,
            ib_event::SM_CHANGE => SmChange,
            ib_event::SRQ_ERR => SrqErr,
            ib_event::SRQ_LIMIT_REACHED => SrqLimitReached,
            ib_event::QP_LAST_WQE_REACHED => QpLastWqeReached,
            ib_event::CLIENT_REREGISTER => ClientReregister,
            ib_event::GID_CHANGE => GidChange,
            ib_event::WQ_FATAL => WqFatal,
            other => Other(other),
        }
    }
}

/// What an async event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// A CQ, by number.
    Cq(u32),
    /// A QP, by number.
    Qp(u32),
    /// An SRQ, by number.
    Srq(u32),
    /// A port, from 1.
    Port(u8),
    /// The device itself.
    Device,
}

/// One async event. Dropping it acknowledges it, as
/// `ibv_ack_async_event` does; [`AsyncEvent::ack`] says so explicitly.
pub struct AsyncEvent {
    pub event_type: AsyncEventType,
    pub element: AsyncElement,
    unacked: Arc<AtomicUsize>,
}

impl fmt::Debug for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AsyncEvent({:?} on {:?})", self.event_type, self.element)
    }
}

impl AsyncEvent {
    /// `ibv_ack_async_event`.
    pub fn ack(self) {}
}

impl Drop for AsyncEvent {
    fn drop(&mut self) {
        self.unacked.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where the affiliated events of one CQ, QP or SRQ go when it is given one
/// at creation ([`crate::CqInit::events`], [`crate::QpInit::events`],
/// [`crate::SrqInit::events`]): that object's own dispatch entry, instead
/// of the context-wide queue. The caller's context value travels in the
/// closure (or with the receiver). Events come from the context's event
/// thread, started with the first handler; dropping an event acknowledges
/// it as usual.
#[derive(Clone)]
pub enum EventHandler {
    /// Called with each event, on the context's event thread. It must not
    /// block for long: the context's other objects wait meanwhile.
    Call(Arc<dyn Fn(AsyncEvent) + Send + Sync>),
    /// Sent down the channel (an event whose receiver is gone is dropped).
    Send(mpsc::Sender<AsyncEvent>),
}

impl fmt::Debug for EventHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventHandler::Call(_) => f.write_str("EventHandler::Call"),
            EventHandler::Send(_) => f.write_str("EventHandler::Send"),
        }
    }
}

impl EventHandler {
    /// A handler calling `f` with each event.
    pub fn call(f: impl Fn(AsyncEvent) + Send + Sync + 'static) -> EventHandler {
        EventHandler::Call(Arc::new(f))
    }

    /// A handler sending each event to the receiver returned with it.
    pub fn channel() -> (EventHandler, mpsc::Receiver<AsyncEvent>) {
        let (tx, rx) = mpsc::channel();
        (EventHandler::Send(tx), rx)
    }

    fn deliver(&self, ev: AsyncEvent) {
        match self {
            EventHandler::Call(f) => f(ev),
            EventHandler::Send(tx) => {
                let _ = tx.send(ev);
            }
        }
    }
}

/// An object's entry in its context's dispatch table; dropping it (with the
/// object) removes the entry.
pub(crate) struct HandlerEntry {
    events: std::sync::Weak<AsyncEvents>,
    element: AsyncElement,
    token: u64,
}

impl Drop for HandlerEntry {
    fn drop(&mut self) {
        if let Some(q) = self.events.upgrade() {
            let mut t = q.table();
            if t.get(&self.element)
                .is_some_and(|(tok, _)| *tok == self.token)
            {
                t.remove(&self.element);
            }
        }
    }
}

/// Which object a DEVX subscription's cookie names: kind above bit 32.
#[derive(Clone, Copy)]
pub(crate) enum Subscriber {
    Cq = 1,
    Qp = 2,
    Srq = 3,
}

impl Subscriber {
    pub(crate) fn element(self, number: u32) -> AsyncElement {
        match self {
            Subscriber::Cq => AsyncElement::Cq(number),
            Subscriber::Qp => AsyncElement::Qp(number),
            Subscriber::Srq => AsyncElement::Srq(number),
        }
    }

    fn cookie(self, number: u32) -> u64 {
        (self as u64) << 32 | u64::from(number)
    }

    /// The DEVX event types each kind subscribes to.
    fn types(self) -> &'static [u16] {
        match self {
            Subscriber::Cq => &[eqe::CQ_ERROR],
            Subscriber::Qp => &[
                eqe::COMM_EST,
                eqe::SQ_DRAINED,
                eqe::WQ_CATAS_ERROR,
                eqe::WQ_INVAL_REQ_ERROR,
                eqe::WQ_ACCESS_ERROR,
                eqe::SRQ_LAST_WQE,
            ],
            Subscriber::Srq => &[eqe::SRQ_CATAS_ERROR, eqe::SRQ_RQ_LIMIT],
        }
    }
}

/// The event an object's DEVX event stands for.
fn object_event(ev: &DevxEvent) -> (AsyncEventType, AsyncElement) {
    use AsyncEventType::*;
    let number = ev.cookie as u32;
    let t = ev.event_type().map_or(u16::MAX, u16::from);
    let element = match ev.cookie >> 32 {
        k if k == Subscriber::Cq as u64 => AsyncElement::Cq(number),
        k if k == Subscriber::Srq as u64 => AsyncElement::Srq(number),
        _ => AsyncElement::Qp(number),
    };
    let event_type = match t {
        eqe::CQ_ERROR => CqErr,
        eqe::WQ_CATAS_ERROR => QpFatal,
        eqe::WQ_INVAL_REQ_ERROR => QpReqErr,
        eqe::WQ_ACCESS_ERROR => QpAccessErr,
        eqe::COMM_EST => CommEst,
        eqe::SQ_DRAINED => SqDrained,
        eqe::SRQ_LAST_WQE => QpLastWqeReached,
        eqe::SRQ_RQ_LIMIT => SrqLimitReached,
        eqe::SRQ_CATAS_ERROR => SrqErr,
        other => Other(u32::from(other)),
    };
    (event_type, element)
}

/// The event a descriptor of the async-event file stands for.
fn file_event(d: devx::AsyncEventDesc) -> (AsyncEventType, AsyncElement) {
    let t = AsyncEventType::from_ib(d.event_type);
    let element = match t {
        AsyncEventType::PortActive
        | AsyncEventType::PortErr
        | AsyncEventType::LidChange
        | AsyncEventType::PkeyChange
        | AsyncEventType::SmChange
        | AsyncEventType::ClientReregister
        | AsyncEventType::GidChange => AsyncElement::Port(d.element as u8),
        _ => AsyncElement::Device,
    };
    (t, element)
}

#[derive(Default)]
struct Queue {
    events: VecDeque<(AsyncEventType, AsyncElement)>,
    closed: bool,
    /// Waiters to wake when the queue closes or holds more than one taker.
    wakers: Vec<Waker>,
    /// Events of objects with a handler, read and not handed over yet
    /// (handlers run outside the queue's lock).
    routed: Vec<(EventHandler, (AsyncEventType, AsyncElement))>,
}

type Table = HashMap<AsyncElement, (u64, EventHandler)>;

/// A context's async-event queue ([`crate::Context::async_events`]): port
/// state and device-fatal events from the context's async-event file, and
/// the affiliated events of CQs, QPs and SRQs made after the queue. Any
/// number of waiters, blocking or `async`, may wait at once; each event
/// completes exactly one of them; [`AsyncEvents::close`] wakes them all
/// with [`Error::Cancelled`].
pub struct AsyncEvents {
    /// Affiliated events of the context's CQs, QPs and SRQs.
    objects: Option<devx::Events>,
    /// Port and device events.
    file: Option<Arc<dyn AsyncEventFile>>,
    q: Mutex<Queue>,
    unacked: Arc<AtomicUsize>,
    /// Objects whose events go to their own handler.
    handlers: Mutex<Table>,
    /// The event thread, started with the first handler.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    next_token: AtomicU64,
}

impl fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("objects", &self.objects.is_some())
            .field("file", &self.file.is_some())
            .finish_non_exhaustive()
    }
}

const VERB: &str = "get_async_event";

impl AsyncEvents {
    /// The queue of `ctx`: its async-event file and a DEVX event channel
    /// for objects, whichever the provider has (at least one).
    pub(crate) fn open(ctx: &devx::Context) -> Result<AsyncEvents> {
        let objects = devx::Events::new(ctx, false).ok();
        let file = ctx.async_event_file().ok();
        if objects.is_none() && file.is_none() {
            return Err(Error::unsupported(
                VERB,
                "the device's provider reports no asynchronous events",
            ));
        }
        Ok(AsyncEvents {
            objects,
            file,
            q: Mutex::default(),
            unacked: Arc::default(),
            handlers: Mutex::default(),
            thread: Mutex::default(),
            next_token: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes a new object's affiliated events (none without a DEVX
    /// event channel).
    pub(crate) fn subscribe(&self, obj: &devx::Obj, kind: Subscriber) -> devx::Result<()> {
        match &self.objects {
            Some(events) => obj.subscribe(events, kind.types(), kind.cookie(obj.id())),
            None => Ok(()),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.handlers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends the affiliated events of `obj` (`kind`) to `handler` from now
    /// on; the entry lasts as long as what this returns. Starts the event
    /// thread with the first handler.
    pub(crate) fn register(
        self: &Arc<Self>,
        obj: &devx::Obj,
        kind: Subscriber,
        handler: EventHandler,
    ) -> Result<HandlerEntry> {
        let element = kind.element(obj.id());
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.table().insert(element, (token, handler));
        let mut thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if thread.is_none() {
            let me = Arc::downgrade(self);
            let t = std::thread::Builder::new()
                .name("verbs-async-events".into())
                .spawn(move || dispatch(me))
                .map_err(|e| Error::Device {
                    verb: VERB,
                    source: devx::Error::os(
                        "spawning the async-event thread",
                        e.raw_os_error().unwrap_or(libc::EAGAIN),
                    ),
                })?;
            *thread = Some(t);
        }
        Ok(HandlerEntry {
            events: Arc::downgrade(self),
            element,
            token,
        })
    }

    /// Hands the routed events to their handlers.
    fn deliver(&self) {
        let routed = std::mem::take(&mut self.lock().routed);
        for (handler, (event_type, element)) in routed {
            self.unacked.fetch_add(1, Ordering::AcqRel);
            handler.deliver(AsyncEvent {
                event_type,
                element,
                unacked: Arc::clone(&self.unacked),
            });
        }
    }

    /// Moves what the sources hold into the queue, or aside for the
    /// handler of the object an event is about.
    fn pump(&self, q: &mut Queue) -> Result<()> {
        if let Some(events) = &self.objects {
            while let Some(ev) = events.try_get().verb(VERB)? {
                let ev = object_event(&ev);
                match self.table().get(&ev.1) {
                    Some((_, h)) => q.routed.push((h.clone(), ev)),
                    None => q.events.push_back(ev),
                }
            }
        }
        if let Some(file) = &self.file {
            while let Some(d) = file.try_get().verb(VERB)? {
                q.events.push_back(file_event(d));
            }
        }
        Ok(())
    }

    fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        use std::os::fd::AsRawFd;
        self.objects
            .iter()
            .map(|e| e.as_raw_fd())
            .chain(self.file.iter().map(|f| f.fd()))
    }

    fn cancelled() -> Error {
        Error::Cancelled {
            verb: VERB,
            why: "the context's async-event queue was closed".into(),
        }
    }

    /// The next event if one is ready.
    pub fn try_get(&self) -> Result<Option<AsyncEvent>> {
        let mut q = self.lock();
        let got = self.take(&mut q);
        drop(q);
        self.deliver();
        got
    }

    fn take(&self, q: &mut Queue) -> Result<Option<AsyncEvent>> {
        if q.closed {
            return Err(Self::cancelled());
        }
        self.pump(q)?;
        let Some((event_type, element)) = q.events.pop_front() else {
            return Ok(None);
        };
        if !q.events.is_empty() {
            // Another waiter may take the rest.
            q.wakers.drain(..).for_each(Waker::wake);
        }
        self.unacked.fetch_add(1, Ordering::AcqRel);
        Ok(Some(AsyncEvent {
            event_type,
            element,
            unacked: Arc::clone(&self.unacked),
        }))
    }

    /// `ibv_get_async_event`: blocks until an event comes (or the queue
    /// closes).
    pub fn get(&self) -> Result<AsyncEvent> {
        devx::reactor::block_on(self.next())
    }

    /// The next event, as a future woken by the sources' fds (no async
    /// runtime needed).
    pub fn next(&self) -> NextAsyncEvent<'_> {
        NextAsyncEvent { queue: self }
    }

    /// Closes the queue: every waiter wakes with [`Error::Cancelled`], and
    /// so does every later wait.
    pub fn close(&self) {
        let wakers = {
            let mut q = self.lock();
            q.closed = true;
            std::mem::take(&mut q.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
        // The event thread sees the queue closed within one wait.
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Events handed out and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.unacked.load(Ordering::Acquire)
    }
}

/// Future of [`AsyncEvents::next`].
#[derive(Debug)]
pub struct NextAsyncEvent<'a> {
    queue: &'a AsyncEvents,
}

impl Future for NextAsyncEvent<'_> {
    type Output = Result<AsyncEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let queue = self.queue;
        let mut q = queue.lock();
        let got = queue.take(&mut q);
        if !q.routed.is_empty() {
            drop(q);
            queue.deliver();
            q = queue.lock();
        }
        match got {
            Ok(Some(ev)) => return Poll::Ready(Ok(ev)),
            Err(e) => return Poll::Ready(Err(e)),
            Ok(None) => {}
        }
        if !q.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            q.wakers.push(cx.waker().clone());
        }
        drop(q);
        // Level-triggered: an event arriving since the pump wakes it too.
        for fd in queue.fds() {
            if let Err(e) = devx::reactor::wake_when_readable(fd, cx.waker()) {
                return Poll::Ready(Err(e).verb(VERB));
            }
        }
        Poll::Pending
    }
}

/// How long the event thread waits on the sources before it looks whether
/// its queue is still there.
const DISPATCH_WAIT_MS: i32 = 50;

/// The event thread: reads the sources while the queue lives and is open,
/// hands the events of objects with a handler to it, and wakes the waiters
/// of the queue when it moved others into it.
fn dispatch(queue: std::sync::Weak<AsyncEvents>) {
    loop {
        let fds: Vec<libc::pollfd> = {
            let Some(q) = queue.upgrade() else { return };
            if q.is_closed() {
                return;
            }
            q.fds()
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect()
        };
        let mut fds = fds;
        // SAFETY: `fds` is a live array of `fds.len()` pollfd entries; an
        // fd closed meanwhile (the queue went) only reports POLLNVAL.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                DISPATCH_WAIT_MS,
            )
        };
        let Some(q) = queue.upgrade() else { return };
        let wakers = {
            let mut g = q.lock();
            if g.closed {
                return;
            }
            let before = g.events.len();
            if q.pump(&mut g).is_err() {
                // The sources failed: waiters meet the error themselves.
                std::mem::take(&mut g.wakers)
            } else if g.events.len() > before {
                std::mem::take(&mut g.wakers)
            } else {
                Vec::new()
            }
        };
        wakers.into_iter().for_each(Waker::wake);
        q.deliver();
    }
}
