//! User memory registered with the device (UMEM).
//!
//! Registered memory is bytes shared with the device. Three rules keep that
//! sound in safe code:
//! * only memory the registration owns exclusively ([`ExclusiveMemory`]) may
//!   be registered writable; memory others can read through shared
//!   references ([`SharedMemory`]) is registered read-only;
//! * writable registered memory is never reachable through a Rust
//!   reference: [`Umem::read_at`], [`Umem::read_vec`], [`Umem::write_at`]
//!   and [`Umem::fill`] copy bytes in and out with relaxed atomic accesses
//!   (never a data race, whatever other threads do), and only read-only
//!   registrations of shared memory hand out `&M`;
//! * the memory lives as long as the device may use it: a UMEM dropped while
//!   an object still uses it stays registered, its memory kept by the
//!   context, and is released once the last object using it is destroyed
//!   (at the latest when the context closes). This is why registered memory
//!   is `'static`: a borrow cannot be kept past its owner's scope.

use std::fmt;

use prm_layouts::CreateUmemOut;

use crate::cmd_comp::{CmdComp, Completion};
use crate::context::Context;
use crate::devmem;
use crate::error::{Error, Result};
use crate::pending::{self, Pending, Step};
use crate::provider::Handle;

/// UMEM access flags (the DEVX UMEM_REG `access` attribute).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const RELAXED_ORDERING: u32 = 0x10_0000;
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | RELAXED_ORDERING;
    /// The flags that let the device write the memory.
    pub const WRITE: u32 = LOCAL_WRITE | REMOTE_WRITE;
}

/// Memory that stays at one address for as long as the value lives, so the
/// device may use it while it is registered.
///
/// # Safety
/// `range` must return the same pointer and length on every call, and the
/// memory must stay allocated while `self` is alive.
pub unsafe trait StableMemory: Send + Sync + 'static {
    fn range(&self) -> (*const u8, usize);
}

/// Memory the value owns exclusively: while the registration holds it, no
/// Rust reference to the bytes exists anywhere else, so the device may write
/// them and the registration may hand out copies ([`Umem::write_at`]).
///
/// # Safety
/// No reference to the range may be reachable except through `self`, and
/// `range` must point at writable memory. Never implement it together with
/// [`SharedMemory`].
pub unsafe trait ExclusiveMemory: StableMemory {}

/// Memory that others may read through shared references while it is
/// registered: it can only be registered read-only, and a registration may
/// hand out `&Self` ([`Umem::memory`]).
///
/// # Safety
/// Never implement it together with [`ExclusiveMemory`].
pub unsafe trait SharedMemory: StableMemory {}

// SAFETY: a 'static shared borrow pins the slice forever.
unsafe impl StableMemory for &'static [u8] {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: others may hold the same borrow.
unsafe impl SharedMemory for &'static [u8] {}

// SAFETY: a 'static exclusive borrow pins the slice forever.
unsafe impl StableMemory for &'static mut [u8] {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: the exclusive borrow is the only way to the bytes.
unsafe impl ExclusiveMemory for &'static mut [u8] {}

// SAFETY: a Vec the Umem owns is never resized while registered.
unsafe impl StableMemory for Vec<u8> {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: the Umem owns the Vec; nothing else reaches its buffer.
unsafe impl ExclusiveMemory for Vec<u8> {}

// SAFETY: a boxed slice never moves its heap allocation.
unsafe impl StableMemory for Box<[u8]> {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: as for Vec.
unsafe impl ExclusiveMemory for Box<[u8]> {}

// SAFETY: a mapping keeps its address until unmapped on drop.
unsafe impl StableMemory for memmap2::MmapMut {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: the Umem owns the mapping; nothing else reaches it through Rust.
unsafe impl ExclusiveMemory for memmap2::MmapMut {}

// SAFETY: a 'static borrow of a mapping pins it forever.
unsafe impl StableMemory for &'static memmap2::MmapMut {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: others may hold the same borrow.
unsafe impl SharedMemory for &'static memmap2::MmapMut {}

// SAFETY: the memory keeps its address for as long as any Arc lives.
unsafe impl<M: StableMemory> StableMemory for std::sync::Arc<M> {
    fn range(&self) -> (*const u8, usize) {
        (**self).range()
    }
}
// SAFETY: other clones of the Arc reach the same memory.
unsafe impl<M: StableMemory> SharedMemory for std::sync::Arc<M> {}

/// A registered memory range. Holds its memory until deregistered; when
/// dropped while the device still uses it, the context keeps the memory until
/// the device lets go (see the [module docs](self)).
///
/// ```
/// # fn main() -> devx::Result<()> {
/// let ctx = devx::Device::by_name("sim0")?.open()?;
/// let umem = devx::Umem::register(&ctx, vec![0u8; 4096], devx::access::LOCAL_WRITE)?;
/// println!("UMEM {} over {} bytes", umem.id(), umem.len()); // id goes into *_umem_id
/// let memory: Vec<u8> = umem.deregister().map_err(|(_, e)| e)?;
/// assert_eq!(memory.len(), 4096);
/// # Ok(()) }
/// ```
pub struct Umem<M: StableMemory> {
    ctx: Context,
    handle: Handle,
    id: u32,
    access: u32,
    addr: usize,
    len: usize,
    memory: Option<M>,
}

impl<M: StableMemory> fmt::Debug for Umem<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Umem(id {:#x}, {} bytes)", self.id, self.len())
    }
}

impl<M: ExclusiveMemory> Umem<M> {
    /// Registers `memory` with access flags from [`access`]. Memory others
    /// can read must go through [`Umem::register_read_only`] instead:
    ///
    /// ```compile_fail
    /// let ctx = devx::Device::emulated("sim0").unwrap().open().unwrap();
    /// let shared = std::sync::Arc::new(vec![0u8; 64]);
    /// // `Arc<_>` is not `ExclusiveMemory`: the device may not write it.
    /// devx::Umem::register(&ctx, shared, devx::access::LOCAL_WRITE);
    /// ```
    pub fn register(ctx: &Context, memory: M, access: u32) -> Result<Umem<M>> {
        Umem::reg(ctx, memory, access)
    }

    /// Queues the registration on `comp`, tagged `wr_id`; the future
    /// resolves to the UMEM. The range is checked (pinned) during this
    /// call; on the emulated device the firmware command then waits for a
    /// slot of the firmware's command queue. DEVX has no asynchronous
    /// registration: the kernel provider registers during this call and
    /// the future is ready at once. Dropping the future deregisters what
    /// was registered (at once, or as soon as the firmware registers it).
    pub fn register_async<'c>(
        ctx: &Context,
        memory: M,
        access: u32,
        wr_id: u64,
        comp: &'c CmdComp,
    ) -> Result<Pending<'c, Result<Umem<M>>>> {
        ctx.check_comp(comp)?;
        let (addr, len) = Umem::check(&memory, access)?;
        // Goes to whichever of the two closures runs.
        let memory = std::cell::Cell::new(Some(memory));
        pending::submit(
            comp,
            wr_id,
            || {
                let queued =
                    ctx.inner
                        .provider
                        .umem_reg_async(addr, len, access, wr_id, comp.channel())?;
                Ok(queued.map(|handle| UmemStep {
                    ctx: ctx.clone(),
                    handle,
                    access,
                    addr,
                    len,
                    memory: memory.take(),
                }))
            },
            || match memory.take() {
                Some(m) => Umem::reg(ctx, m, access),
                None => Err(Error::argument("the memory went to a queued registration")),
            },
        )
    }

    /// Copies `data` into the memory at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        let r = self.region();
        r.check("UMEM write", offset, data.len())?;
        // SAFETY: the range lies inside the memory this Umem owns exclusively
        // and keeps mapped (`ExclusiveMemory`), reached only by copies.
        unsafe { devmem::copy_in(r, offset, data) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        let r = self.region();
        r.check("UMEM fill", offset, len)?;
        // SAFETY: as in `write_at`.
        unsafe { devmem::fill(r, offset, len, value) };
        Ok(())
    }
}

impl<M: SharedMemory> Umem<M> {
    /// The registered memory. Shared memory is always registered read-only,
    /// so the device never writes what this reference covers.
    pub fn memory(&self) -> &M {
        self.memory
            .as_ref()
            .expect("memory is present until deregistered")
    }
}

impl<M: StableMemory> Umem<M> {
    /// Registers `memory` for the device to read only: `access` may not
    /// contain [`access::LOCAL_WRITE`] or [`access::REMOTE_WRITE`]. The only
    /// way to register memory that others may reference ([`SharedMemory`]).
    pub fn register_read_only(ctx: &Context, memory: M, access: u32) -> Result<Umem<M>> {
        if access & access::WRITE != 0 {
            return Err(Error::argument(format!(
                "a read-only registration cannot have write access {:#x}; register memory the \
                 registration owns exclusively (Vec, Box, MmapMut) to let the device write it",
                access & access::WRITE
            )));
        }
        Umem::reg(ctx, memory, access)
    }

    /// The checks every registration makes first; the range to register.
    fn check(memory: &M, access: u32) -> Result<(usize, usize)> {
        if access & !access::ALL != 0 {
            return Err(Error::argument(format!(
                "umem access {access:#x} has unknown bits {:#x}",
                access & !access::ALL
            )));
        }
        if access & access::REMOTE_WRITE != 0 && access & access::LOCAL_WRITE == 0 {
            return Err(Error::argument(
                "umem remote write needs local write as well",
            ));
        }
        let (addr, len) = memory.range();
        if len == 0 {
            return Err(Error::argument("cannot register an empty memory range"));
        }
        Ok((addr as usize, len))
    }

    fn reg(ctx: &Context, memory: M, access: u32) -> Result<Umem<M>> {
        let (addr, len) = Umem::check(&memory, access)?;
        let (handle, id) = ctx.inner.provider.umem_reg(addr, len, access)?;
        Ok(Umem {
            ctx: ctx.clone(),
            handle,
            id,
            access,
            addr,
            len,
            memory: Some(memory),
        })
    }

    /// The umem id that `*_umem_id` fields take.
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn access(&self) -> u32 {
        self.access
    }

    /// True when the device may write the memory.
    pub fn writable(&self) -> bool {
        self.access & access::WRITE != 0
    }

    pub fn addr(&self) -> usize {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    fn region(&self) -> devmem::Region {
        devmem::Region {
            base: self.addr,
            len: self.len,
        }
    }

    /// Copies `out.len()` bytes from the memory at `offset`. Bytes the device
    /// is writing meanwhile may mix old and new values: read after the
    /// completion of the work that writes them.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let r = self.region();
        r.check("UMEM read", offset, out.len())?;
        // SAFETY: the range lies inside the registered memory, mapped while
        // `self` lives; writable registrations are never referenced by Rust
        // (`ExclusiveMemory`), read-only ones are only read.
        unsafe { devmem::copy_out(r, offset, out) };
        Ok(())
    }

    /// `len` bytes from `offset`, as a new vector.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.region().check("UMEM read", offset, len)?;
        let mut v = vec![0u8; len];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }

    /// Deregisters and gives the memory back. Fails (returning the umem) while
    /// an object still uses it.
    pub fn deregister(mut self) -> Result<M, (Umem<M>, Error)> {
        match self.ctx.inner.provider.umem_dereg(self.handle) {
            Ok(()) => Ok(self
                .memory
                .take()
                .expect("memory is present until deregistered")),
            Err(e) => Err((self, e)),
        }
    }
}

impl<M: StableMemory> Umem<M> {
    /// Queues the deregistration on `comp`, tagged `wr_id`; the future
    /// resolves like [`Umem::deregister`]. On the emulated device its
    /// DESTROY_UMEM waits for a slot of the firmware's command queue. DEVX
    /// has no asynchronous deregistration: the kernel provider (and a
    /// registration the provider cannot queue) deregisters during this
    /// call and the future is ready at once. Dropping the future leaves the
    /// deregistration to finish: the memory is freed once the firmware has
    /// released it, and kept by the context if the firmware refuses.
    pub fn deregister_async(
        self,
        wr_id: u64,
        comp: &CmdComp,
    ) -> Pending<'_, std::result::Result<M, (Umem<M>, Error)>> {
        if let Err(e) = self.ctx.check_comp(comp) {
            return Pending::ready(Err((self, e)));
        }
        let queued = comp.completion(wr_id);
        let provider = std::sync::Arc::clone(&self.ctx.inner.provider);
        match provider.umem_dereg_async(self.handle, wr_id, comp.channel()) {
            Ok(true) => Pending::queued(queued, Box::new(UmemDeregStep { umem: self })),
            Ok(false) => {
                queued.unsubmitted();
                Pending::ready(self.deregister())
            }
            Err(e) => {
                queued.unsubmitted();
                Pending::ready(Err((self, e)))
            }
        }
    }

    /// Leaves the memory to the context, which deregisters it again once
    /// the device lets go (at the latest when the context closes).
    fn keep_in_context(mut self) {
        if let Some(memory) = self.memory.take() {
            self.ctx
                .inner
                .deferred
                .keep_umem(self.handle, Box::new(memory));
        }
    }

    /// The provider deregistered it: the memory is free to go.
    fn released(mut self) -> M {
        self.ctx.retry_deferred();
        self.memory
            .take()
            .expect("memory is present until deregistered")
    }
}

/// A queued deregistration, holding its UMEM (and memory) until the
/// completion.
struct UmemDeregStep<M: StableMemory> {
    umem: Umem<M>,
}

impl<'a, M: StableMemory> Step<'a> for UmemDeregStep<M> {
    type Output = std::result::Result<M, (Umem<M>, Error)>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Self::Output {
        match out {
            Ok(_) => Ok(self.umem.released()),
            Err(e) => Err((self.umem, e)),
        }
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        let umem = self.umem;
        completion.abandon_with(Box::new(move |out| match out {
            Ok(_) => drop(umem.released()),
            // The outcome will not be known: the memory stays with the
            // context until it closes.
            Err(e) if e.is_cancelled() => umem.keep_in_context(),
            // Refused: the handle names it again; dropping retries.
            Err(_) => drop(umem),
        }));
    }
}

impl<M: StableMemory> Drop for Umem<M> {
    fn drop(&mut self) {
        let Some(memory) = self.memory.take() else {
            return;
        };
        if self.ctx.inner.provider.umem_dereg(self.handle).is_err() {
            // Still in use by the device: the context keeps the memory until
            // the deregistration succeeds or the context closes.
            self.ctx
                .inner
                .deferred
                .keep_umem(self.handle, Box::new(memory));
            // Its last user may have gone since the refusal.
            self.ctx.retry_deferred();
        }
    }
}

/// A queued registration, holding its memory until the completion.
struct UmemStep<M> {
    ctx: Context,
    handle: Handle,
    access: u32,
    addr: usize,
    len: usize,
    memory: Option<M>,
}

impl<'a, M: StableMemory> Step<'a> for UmemStep<M> {
    type Output = Result<Umem<M>>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Result<Umem<M>> {
        let out = out?;
        let id = CreateUmemOut::from_slice(&out).map(|o| o.umem_id());
        let umem = Umem {
            ctx: self.ctx,
            handle: self.handle,
            id: id.unwrap_or(0),
            access: self.access,
            addr: self.addr,
            len: self.len,
            memory: self.memory,
        };
        match id {
            Some(_) => Ok(umem),
            // Dropping `umem` deregisters it.
            None => Err(Error::argument(
                "the UMEM registration completed without a CREATE_UMEM outbox",
            )),
        }
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        drop(completion);
        let Some(memory) = self.memory else {
            return;
        };
        // Deregisters, or dooms a registration the firmware has not made
        // yet; a handle already gone had its registration fail.
        if let Err(e) = self.ctx.inner.provider.umem_dereg(self.handle) {
            if e.errno() != libc::ENOENT {
                self.ctx
                    .inner
                    .deferred
                    .keep_umem(self.handle, Box::new(memory));
                self.ctx.retry_deferred();
            }
        }
    }
}
