//! How a verb's firmware commands run: at once (the blocking verbs) or
//! queued on a [`CmdComp`] (their `_async` forms).
//!
//! Each multi-command verb is written once, as an `async` description over
//! an [`Exec`]: a *pre* part builds each mailbox, the command runs through
//! the `Exec`, a *post* part reads the outbox and makes the object. The
//! blocking verb runs that description with [`Exec::Now`] (every command
//! completes during its call, so the description never waits); the async
//! form runs it with [`Exec::Queued`]. Dropping an async form's future drops
//! what the description made so far (UMEMs, UARs, objects: RAII), and the
//! command still in flight cancels itself (a create the firmware finishes
//! anyway is destroyed, see [`devx::Pending`]); a release in flight (a
//! replaced key's destroy, an old ring's deregistration) still completes.

use std::future::Future;

use devx::{CmdComp, DestroyFailed, ExclusiveMemory, Obj, StableMemory, Uar, UarKind, Umem};

/// The bit set in the `wr_id` of every command the async verbs queue
/// ([`CmdComp::library_wr_id`]): a channel they share with the caller's own
/// commands keeps the two apart when the caller's `wr_id`s leave it clear.
pub const VERBS_WR_ID_BIT: u64 = devx::cmd_comp::LIBRARY_WR_ID_BIT;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Exec<'c> {
    /// Each command runs during its call.
    Now,
    /// Each command is queued on the channel and awaited.
    Queued(&'c CmdComp),
}

impl Exec<'_> {
    pub(crate) async fn create(
        self,
        ctx: &devx::Context,
        inbox: &[u8],
        outlen: usize,
    ) -> devx::Result<Obj> {
        match self {
            Exec::Now => ctx.create(inbox, outlen),
            Exec::Queued(comp) => {
                ctx.create_async(inbox, outlen, comp.library_wr_id(), comp)?
                    .await
            }
        }
    }

    pub(crate) async fn modify(
        self,
        obj: &Obj,
        inbox: &[u8],
        outlen: usize,
    ) -> devx::Result<Vec<u8>> {
        match self {
            Exec::Now => obj.modify(inbox, outlen),
            Exec::Queued(comp) => {
                obj.modify_pending(inbox, outlen, comp.library_wr_id(), comp)?
                    .await
            }
        }
    }

    pub(crate) async fn register<M: ExclusiveMemory>(
        self,
        ctx: &devx::Context,
        memory: M,
        access: u32,
    ) -> devx::Result<Umem<M>> {
        match self {
            Exec::Now => Umem::register(ctx, memory, access),
            Exec::Queued(comp) => {
                Umem::register_async(ctx, memory, access, comp.library_wr_id(), comp)?.await
            }
        }
    }

    /// Destroys `obj` (as [`Obj::destroy`]). Dropping the queued form's
    /// future leaves the destroy to finish (see [`Obj::destroy_async`]).
    pub(crate) async fn destroy(self, obj: Obj) -> Result<(), DestroyFailed> {
        match self {
            Exec::Now => obj.destroy(),
            Exec::Queued(comp) => obj.destroy_async(comp.library_wr_id(), comp).await,
        }
    }

    /// Deregisters `umem` and gives its memory back; `None` while the
    /// device still uses it (dropping the UMEM then leaves its memory to the
    /// context). Dropping the queued form's future leaves the
    /// deregistration to finish (see [`Umem::deregister_async`]).
    pub(crate) async fn deregister<M: StableMemory>(self, umem: Umem<M>) -> Option<M> {
        match self {
            Exec::Now => umem.deregister().ok(),
            Exec::Queued(comp) => umem.deregister_async(comp.library_wr_id(), comp).await.ok(),
        }
    }

    /// A BlueFlame UAR (as [`Uar::alloc`]).
    pub(crate) async fn alloc_uar(self, ctx: &devx::Context) -> devx::Result<Uar> {
        match self {
            Exec::Now => Uar::alloc(ctx),
            Exec::Queued(comp) => {
                Uar::alloc_async(ctx, UarKind::BlueFlame, comp.library_wr_id(), comp)?.await
            }
        }
    }
}

/// Runs a description with [`Exec::Now`]: it completes at its first poll.
pub(crate) fn now<F: Future>(description: F) -> F::Output {
    devx::reactor::block_on(description)
}
