//! Futures of queued creates, destroys, UMEM registrations and
//! deregistrations and UAR allocations ([`crate::Context::create_async`],
//! [`crate::Obj::destroy_async`], [`crate::Umem::register_async`],
//! [`crate::Umem::deregister_async`], [`crate::Uar::alloc_async`]).
//!
//! Each is one command on a [`CmdComp`], tagged with the caller's `wr_id`;
//! its future resolves to what the command made (an [`Obj`], a [`Umem`], a
//! [`Uar`]) or to the error. Where the provider cannot queue the command (the
//! kernel: DEVX has no asynchronous create, destroy, UMEM or UAR method) it
//! runs during the submitting call and its future is ready at once.
//!
//! Dropping a future before it resolves cancels cleanly: what a queued
//! create made is destroyed (at once, or as soon as the firmware makes it),
//! and an object whose queued destroy the firmware refuses comes back to be
//! dropped like any other. A future dropped after its completion arrived
//! takes it first and drops what it made like any RAII object, so a
//! recording holds the completion and an ordinary destroy.
//!
//! [`Obj`]: crate::Obj
//! [`Umem`]: crate::Umem
//! [`Uar`]: crate::Uar

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use crate::cmd_comp::{CmdComp, Completion};
use crate::error::Result;

/// How a queued command's completion becomes its future's output.
pub(crate) trait Step<'a>: Send + 'a {
    type Output;
    /// Makes the output from the command's outbox (or its error).
    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Self::Output;
    /// The future was dropped before the completion came.
    fn abandon(self: Box<Self>, completion: Completion<'a>);
}

enum State<'a, T: 'a> {
    Queued(Completion<'a>, Box<dyn Step<'a, Output = T>>),
    Ready(T),
    Taken,
}

/// A queued command's future; [`Pending::wait`] is its blocking form.
#[must_use = "dropping a pending command cancels it"]
pub struct Pending<'a, T: 'a> {
    state: State<'a, T>,
}

// Never pinned structurally: `T` only moves out whole.
impl<'a, T: 'a> Unpin for Pending<'a, T> {}

impl<'a, T: 'a> fmt::Debug for Pending<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Queued(..) => "queued",
            State::Ready(_) => "ready",
            State::Taken => "resolved",
        };
        write!(f, "Pending({state})")
    }
}

impl<'a, T: 'a> Pending<'a, T> {
    pub(crate) fn queued(completion: Completion<'a>, step: Box<dyn Step<'a, Output = T>>) -> Self {
        Pending {
            state: State::Queued(completion, step),
        }
    }

    /// A command that ran during the submitting call.
    pub(crate) fn ready(out: T) -> Self {
        Pending {
            state: State::Ready(out),
        }
    }

    /// True while the command waits for its completion (false when the
    /// provider ran it during the submitting call).
    pub fn is_queued(&self) -> bool {
        matches!(self.state, State::Queued(..))
    }

    /// Blocks the calling thread until the command completes.
    pub fn wait(self) -> T {
        crate::reactor::block_on(self)
    }
}

impl<'a, T: 'a> Future for Pending<'a, T> {
    type Output = T;

    /// # Panics
    /// When polled again after it resolved, as futures may.
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<T> {
        if let State::Queued(c, _) = &mut self.state {
            let Poll::Ready(out) = Pin::new(c).poll(cx) else {
                return Poll::Pending;
            };
            let State::Queued(_, step) = std::mem::replace(&mut self.state, State::Taken) else {
                unreachable!("matched just above");
            };
            return Poll::Ready(step.finish(out));
        }
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Ready(v) => Poll::Ready(v),
            _ => panic!("a pending devx command was polled after it resolved"),
        }
    }
}

impl<'a, T: 'a> Drop for Pending<'a, T> {
    /// A command whose completion is already here finishes as if awaited
    /// and its output is dropped (what it made is destroyed, deregistered
    /// or freed through its own `Drop`), so the provider sees — and a
    /// recorder writes — the completion followed by an ordinary release.
    /// Otherwise the step abandons it.
    fn drop(&mut self) {
        if let State::Queued(mut c, step) = std::mem::replace(&mut self.state, State::Taken) {
            let mut cx = TaskContext::from_waker(std::task::Waker::noop());
            match Pin::new(&mut c).poll(&mut cx) {
                Poll::Ready(out) => drop(step.finish(out)),
                Poll::Pending => step.abandon(c),
            }
        }
    }
}

/// Registers the completion of `wr_id` on `comp` before `submit` queues the
/// command (so no `get` takes it meanwhile): `Some(step)` makes a queued
/// future, `None` runs `sync` (the provider cannot queue it).
pub(crate) fn submit<'a, T: 'a, S>(
    comp: &'a CmdComp,
    wr_id: u64,
    submit: impl FnOnce() -> Result<Option<S>>,
    sync: impl FnOnce() -> T,
) -> Result<Pending<'a, T>>
where
    S: Step<'a, Output = T>,
{
    let completion = comp.completion(wr_id);
    match submit() {
        Ok(Some(step)) => Ok(Pending::queued(completion, Box::new(step))),
        Ok(None) => {
            completion.unsubmitted();
            Ok(Pending::ready(sync()))
        }
        Err(e) => {
            completion.unsubmitted();
            Err(e)
        }
    }
}
