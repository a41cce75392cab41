//! A minimal reactor: futures that wait for a file descriptor to poll
//! readable, without an async runtime. One background thread runs `poll(2)`
//! over the descriptors futures are waiting on (level-triggered, so a
//! readiness that arrives between a future's check and its registration is
//! still seen) and wakes each waiter once its descriptor is readable.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::error::{Error, Result};

struct Reactor {
    /// Descriptors waited on and who to wake.
    waiting: Mutex<Vec<(RawFd, Waker)>>,
    /// Interrupts the poll when the set of descriptors changes.
    kick: EventFd,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reactor() -> Result<&'static Reactor> {
    static REACTOR: OnceLock<std::result::Result<&'static Reactor, Error>> = OnceLock::new();
    REACTOR
        .get_or_init(|| {
            let kick =
                EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                    .map_err(|e| Error::os("reactor eventfd", e as i32))?;
            let r: &'static Reactor = Box::leak(Box::new(Reactor {
                waiting: Mutex::new(Vec::new()),
                kick,
            }));
            std::thread::Builder::new()
                .name("devx-reactor".into())
                .spawn(move || r.run())
                .map_err(|e| {
                    Error::os(
                        "spawn reactor thread",
                        e.raw_os_error().unwrap_or(libc::EAGAIN),
                    )
                })?;
            Ok(r)
        })
        .clone()
}

impl Reactor {
    fn run(&self) {
        loop {
            let fds: Vec<RawFd> = lock(&self.waiting).iter().map(|(fd, _)| *fd).collect();
            let ready: Vec<RawFd> = {
                // SAFETY: a descriptor stays registered only while the future
                // waiting on it is alive and holds the object that owns it
                // open; a descriptor closed meanwhile polls POLLNVAL, which
                // wakes its (gone) waiter harmlessly and drops it.
                let borrowed: Vec<BorrowedFd<'_>> = std::iter::once(self.kick.as_raw_fd())
                    .chain(fds.iter().copied())
                    .map(|fd| unsafe { BorrowedFd::borrow_raw(fd) })
                    .collect();
                let mut pfds: Vec<PollFd<'_>> = borrowed
                    .iter()
                    .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
                    .collect();
                if poll(&mut pfds, PollTimeout::NONE).is_err() {
                    continue;
                }
                pfds.iter()
                    .zip(std::iter::once(self.kick.as_raw_fd()).chain(fds.iter().copied()))
                    .filter(|(p, _)| p.revents().is_some_and(|r| !r.is_empty()))
                    .map(|(_, fd)| fd)
                    .collect()
            };
            if ready.contains(&self.kick.as_raw_fd()) {
                let _ = self.kick.read();
            }
            let woken: Vec<Waker> = {
                let mut w = lock(&self.waiting);
                let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut *w)
                    .into_iter()
                    .partition(|(fd, _)| ready.contains(fd));
                *w = stay;
                go.into_iter().map(|(_, waker)| waker).collect()
            };
            woken.into_iter().for_each(Waker::wake);
        }
    }
}

/// Wakes `waker` once `fd` polls readable (at once if it already does).
/// `fd` must stay open until then.
pub fn wake_when_readable(fd: RawFd, waker: &Waker) -> Result<()> {
    let r = reactor()?;
    {
        let mut w = lock(&r.waiting);
        match w
            .iter_mut()
            .find(|(f, old)| *f == fd && old.will_wake(waker))
        {
            Some(_) => return Ok(()),
            None => w.push((fd, waker.clone())),
        }
    }
    // An eventfd write only fails on counter overflow; a pending kick suffices.
    let _ = r.kick.write(1);
    Ok(())
}

/// A future taking the next item of a source whose `fd` polls readable
/// while an item is ready: `try_next` is tried each time the fd is readable.
pub struct NextReady<F, W = fn(&Waker) -> bool> {
    fd: RawFd,
    try_next: F,
    /// Registers the waker with the source itself; `false`: use the fd.
    wake_with: W,
}

impl<F, W> fmt::Debug for NextReady<F, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NextReady(fd {})", self.fd)
    }
}

impl<T, F: FnMut() -> Result<Option<T>> + Unpin> NextReady<F> {
    /// `try_next` must stay able to answer while `fd` is open.
    pub(crate) fn new(fd: RawFd, try_next: F) -> NextReady<F> {
        NextReady {
            fd,
            try_next,
            wake_with: |_| false,
        }
    }

    /// Lets the source wake the future itself when it can (`wake_with`
    /// returns `true`), skipping the reactor thread.
    pub(crate) fn wake_with<W: Fn(&Waker) -> bool + Unpin>(self, wake_with: W) -> NextReady<F, W> {
        NextReady {
            fd: self.fd,
            try_next: self.try_next,
            wake_with,
        }
    }
}

impl<T, F, W> Future for NextReady<F, W>
where
    F: FnMut() -> Result<Option<T>> + Unpin,
    W: Fn(&Waker) -> bool + Unpin,
{
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match (self.try_next)() {
            Ok(Some(v)) => Poll::Ready(Ok(v)),
            Err(e) => Poll::Ready(Err(e)),
            Ok(None) if (self.wake_with)(cx.waker()) => Poll::Pending,
            Ok(None) => match wake_when_readable(self.fd, cx.waker()) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

/// How long [`block_on`] watches for a wake-up before it parks: an answer
/// that comes sooner (the emulated firmware's, typically) costs no futex
/// sleep and wake.
const WAIT_SPIN: Duration = Duration::from_micros(50);

/// The first part of a [`watch`] that spins with the CPU's spin-wait hint
/// alone; the rest yields the CPU between looks.
const HOT_SPIN: Duration = Duration::from_micros(5);

/// Looks at `ready` until it holds or `bound` has passed; true when it
/// held. For the first [`HOT_SPIN`] it spins with the CPU's spin-wait hint
/// (an answer from a thread on another core arrives with neither thread
/// sleeping or making a syscall); after that it yields between looks, so a
/// thread that shares this core (the one that will answer, on a busy
/// machine) gets to run.
pub(crate) fn watch(bound: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        // The clock is read once per 16 looks (each look is a load).
        for _ in 0..16 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let spent = start.elapsed();
        if spent >= bound {
            return ready();
        }
        if spent >= HOT_SPIN {
            std::thread::yield_now();
        }
    }
}

/// Wakes the thread that runs [`block_on`].
struct Unpark {
    thread: std::thread::Thread,
    woken: AtomicBool,
}

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

impl Unpark {
    fn waker() -> (Arc<Unpark>, Waker) {
        let unpark = Arc::new(Unpark {
            thread: std::thread::current(),
            woken: AtomicBool::new(false),
        });
        let waker = Waker::from(Arc::clone(&unpark));
        (unpark, waker)
    }
}

thread_local! {
    /// This thread's waker for [`block_on`], made once (a command awaited
    /// with `block_on` costs no allocation for it); `true` while an outer
    /// `block_on` of this thread uses it.
    static OWN_WAKER: ((Arc<Unpark>, Waker), Cell<bool>) =
        (Unpark::waker(), Cell::new(false));
}

/// Runs a future to completion on the calling thread, parking it between
/// polls: the blocking form of every future of this crate.
///
/// Inlined into its caller: a future ready at its first poll (a command
/// its submitter ran) then costs fewer copies of its output on the way out.
#[inline]
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let own = OWN_WAKER.try_with(|((unpark, waker), in_use)| {
        if in_use.replace(true) {
            // A `block_on` inside a future that an outer one polls: a waker
            // of its own, so neither takes the other's wake-ups.
            let (unpark, waker) = Unpark::waker();
            return run(f.as_mut(), &unpark, &waker);
        }
        /// Gives the waker back even when the future panics.
        struct Release<'a>(&'a Cell<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _release = Release(in_use);
        unpark.woken.store(false, Ordering::Release);
        run(f.as_mut(), unpark, waker)
    });
    match own {
        Ok(out) => out,
        // Called while this thread's locals are being destroyed.
        Err(_) => {
            let (unpark, waker) = Unpark::waker();
            run(f.as_mut(), &unpark, &waker)
        }
    }
}

#[inline]
fn run<F: Future>(mut f: Pin<&mut F>, unpark: &Unpark, waker: &Waker) -> F::Output {
    let mut cx = Context::from_waker(waker);
    if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
        return v;
    }
    wait(f, unpark, &mut cx)
}

/// [`run`] after the first poll: waits for each wake-up and polls again.
#[inline(never)]
fn wait<F: Future>(mut f: Pin<&mut F>, unpark: &Unpark, cx: &mut Context<'_>) -> F::Output {
    loop {
        watch(WAIT_SPIN, || unpark.woken.load(Ordering::Acquire));
        if !unpark.woken.swap(false, Ordering::AcqRel) {
            std::thread::park();
            unpark.woken.store(false, Ordering::Release);
        }
        if let Poll::Ready(v) = f.as_mut().poll(cx) {
            return v;
        }
    }
}
