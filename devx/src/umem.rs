//! User memory registered with the device (UMEM).

use std::fmt;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::provider::Handle;

/// UMEM access flags (the DEVX UMEM_REG `access` attribute).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const RELAXED_ORDERING: u32 = 0x10_0000;
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | RELAXED_ORDERING;
}

/// Memory that stays at one address for as long as the value lives, so the
/// device may read and write it while it is registered.
///
/// # Safety
/// `range` must return the same pointer and length on every call, and the
/// memory must stay allocated and writable-by-device while `self` is alive.
pub unsafe trait StableMemory: Send + Sync {
    fn range(&self) -> (*const u8, usize);
}

// SAFETY: a shared borrow pins the slice for the borrow's lifetime.
unsafe impl StableMemory for &[u8] {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: as above; the exclusive borrow also keeps safe code from touching it.
unsafe impl StableMemory for &mut [u8] {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: a Vec the Umem owns is never resized while registered.
unsafe impl StableMemory for Vec<u8> {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: a boxed slice never moves its heap allocation.
unsafe impl StableMemory for Box<[u8]> {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: a mapping keeps its address until unmapped on drop.
unsafe impl StableMemory for memmap2::MmapMut {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: borrowing a mapping pins it for the borrow.
unsafe impl StableMemory for &memmap2::MmapMut {
    fn range(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}
// SAFETY: a shared mapping keeps its address for as long as any Arc lives.
unsafe impl<M: StableMemory> StableMemory for std::sync::Arc<M> {
    fn range(&self) -> (*const u8, usize) {
        (**self).range()
    }
}

/// A registered memory range. Holds (owns or borrows) its memory until
/// deregistered, so the device never sees freed memory.
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
    memory: Option<M>,
}

impl<M: StableMemory> fmt::Debug for Umem<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Umem(id {:#x}, {} bytes)", self.id, self.len())
    }
}

impl<M: StableMemory> Umem<M> {
    /// Registers `memory` with access flags from [`access`].
    pub fn register(ctx: &Context, memory: M, access: u32) -> Result<Umem<M>> {
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
        let (handle, id) = ctx.inner.provider.umem_reg(addr as usize, len, access)?;
        Ok(Umem {
            ctx: ctx.clone(),
            handle,
            id,
            access,
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

    pub fn addr(&self) -> usize {
        self.memory
            .as_ref()
            .map(|m| m.range().0 as usize)
            .unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.memory.as_ref().map(|m| m.range().1).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn memory(&self) -> &M {
        self.memory
            .as_ref()
            .expect("memory is present until deregistered")
    }

    pub fn context(&self) -> &Context {
        &self.ctx
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

impl<M: StableMemory> Drop for Umem<M> {
    fn drop(&mut self) {
        if self.memory.is_some() {
            let _ = self.ctx.inner.provider.umem_dereg(self.handle);
        }
    }
}
