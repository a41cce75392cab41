//! User access regions: the doorbell pages.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prm_layouts::fields;
use prm_layouts::words::Words;

use crate::cmd_comp::{CmdComp, Completion};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::pending::{self, Pending, Step};
use crate::provider::{Handle, UarKind, UarPage};

/// Offset of the first doorbell/BlueFlame register in a UAR page.
pub const BF_OFFSET: usize = 0x800;
/// Bytes of a UAR page (the device's 4 KiB adapter page).
pub const UAR_PAGE_SIZE: usize = 4096;
/// Offset of the CQ arm doorbell in a UAR page.
pub const CQ_DOORBELL_OFFSET: usize = 0x20;
/// Half a 512-byte BlueFlame register (`bf->buf_size`): successive doorbells
/// alternate halves.
pub const BF_HALF: usize = 0x100;

/// The half of the BlueFlame register at [`BF_OFFSET`] a send doorbell goes
/// to: one of two known offsets, so that a page can take the store with no
/// check of where it lands ([`UarPage::write_bf`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfHalf {
    /// The second half, `BF_HALF` past the first: a flag rather than the
    /// offset, so that where it lands is plain to the compiler too.
    second: bool,
}

impl BfHalf {
    /// The half at [`BF_OFFSET`], where a register's doorbells start.
    pub const FIRST: BfHalf = BfHalf { second: false };

    /// Offset of the half in the page: [`BF_OFFSET`] or [`BF_HALF`] past it.
    #[inline(always)]
    #[must_use]
    pub const fn offset(self) -> usize {
        BF_OFFSET + self.second as usize * BF_HALF
    }

    /// The half the doorbell after this one goes to.
    #[inline(always)]
    #[must_use]
    pub const fn other(self) -> BfHalf {
        BfHalf {
            second: !self.second,
        }
    }
}

/// How a send doorbell may reach a page's BlueFlame register with the
/// ringer's own store rather than a call through the page
/// ([`UarPage::bf_store`]): on a mapped device page the store is all a
/// doorbell is, as in mlx5's `mmio_write64_be`.
#[derive(Clone, Copy, Debug)]
pub enum BfStore {
    /// Only [`UarPage::write_bf`] rings.
    Call,
    /// A volatile 8-byte store at `base() + half.offset()` is the whole
    /// doorbell: the page is the device's register page, mapped.
    Mmio,
    /// An 8-byte atomic store there (ordinary memory), and then
    /// [`UarPage::write_bf`] unless [`HeldDoorbell::holds`] says the device
    /// holds a doorbell for the QP already: a device run in software
    /// whose engine is paused.
    UnlessHeld(HeldDoorbell),
}

/// A device's note of the last send doorbell it holds back (its engine
/// paused): the doorbell's UAR page and QPN as one word, so that a repeat
/// for the same QP, which adds nothing, is told on one load and a compare.
#[derive(Clone, Copy, Debug)]
pub struct HeldDoorbell {
    last: NonNull<AtomicU64>,
    page_bits: u64,
}

// SAFETY: the note is an atomic, which any thread may load; whether it is
// still alive is `holds`'s contract, wherever the value went.
unsafe impl Send for HeldDoorbell {}
// SAFETY: as for `Send`; `&HeldDoorbell` only copies the pointer out.
unsafe impl Sync for HeldDoorbell {}

impl HeldDoorbell {
    /// The note `last`, as seen through UAR page `page`.
    #[cfg(feature = "emulator")]
    pub(crate) fn new(last: &AtomicU64, page: u32) -> HeldDoorbell {
        HeldDoorbell {
            last: NonNull::from(last),
            page_bits: page_bits(page),
        }
    }

    /// The word the note holds while the device holds a doorbell of QP
    /// `qpn` through this page: worked out once per QP.
    pub fn key(&self, qpn: u32) -> u64 {
        let ctrl = Words::<2>::new().with(fields::wqe_ctrl_seg::QPN, qpn);
        held_key(self.page_bits, ctrl.pair(0).to_be())
    }

    /// The word the note holds while the device holds send doorbell
    /// `value` (the first 8 bytes of its ctrl segment as in memory) or
    /// another of the same QP through this page.
    #[inline(always)]
    pub fn key_of(&self, value: u64) -> u64 {
        held_key(self.page_bits, value)
    }

    /// Whether the device holds a doorbell whose [`HeldDoorbell::key`] is
    /// `key` already.
    ///
    /// # Safety
    /// The page this came from is alive (it keeps the note alive).
    #[inline(always)]
    pub unsafe fn holds(&self, key: u64) -> bool {
        // SAFETY: the caller vouches for the page, which holds the device
        // whose note this points to.
        unsafe { self.last.as_ref() }.load(Ordering::Acquire) == key
    }
}

/// The bits of a send doorbell's value (the first 8 bytes of the WQE's
/// ctrl segment as they are in memory) that hold the QPN.
const QPN_BITS: u64 = Words::<2>::new()
    .with(fields::wqe_ctrl_seg::QPN, u32::MAX)
    .pair(0)
    .to_be();

/// UAR page `page` in the bytes of a doorbell's value that [`QPN_BITS`]
/// leaves out (the ctrl segment's first dword: WQE index and opcode), for
/// [`held_key`]; worked out once per page.
pub(crate) const fn page_bits(page: u32) -> u64 {
    Words::<2>([page, 0]).pair(0).to_be()
}

const _: () = assert!(page_bits(u32::MAX) & QPN_BITS == 0);

/// A held doorbell as one word (a [`HeldDoorbell`]'s note): the QPN bits of
/// its value, `value`, with its page's [`page_bits`]. An AND and an OR, so
/// that a UAR page checks a repeat on its store with one compare.
#[inline(always)]
pub(crate) fn held_key(page_bits: u64, value: u64) -> u64 {
    value & QPN_BITS | page_bits
}

/// An allocated UAR page. Freed on drop.
pub struct Uar {
    ctx: Context,
    handle: Handle,
    page_id: u32,
    kind: UarKind,
    page: Arc<dyn UarPage>,
    bf: BlueFlame,
}

/// Who rings the page's BlueFlame register at [`BF_OFFSET`], as mlx5's
/// `struct mlx5_bf` tracks it: either one writer alone, which keeps the
/// half it rings next itself and takes no lock, or any number of writers
/// that take turns under [`BlueFlame::lock`], whose guard holds the half
/// they share. Writers of one register must not interleave their stores
/// (a BlueFlame copy is several stores into write-combining memory) nor
/// their toggling of the half.
pub struct BlueFlame {
    state: AtomicU8,
    next: Mutex<BfHalf>,
}

const BF_FREE: u8 = 0;
const BF_DEDICATED: u8 = 1;
const BF_SHARED: u8 = 2;

impl BlueFlame {
    fn new() -> BlueFlame {
        BlueFlame {
            state: AtomicU8::new(BF_FREE),
            next: Mutex::new(BfHalf::FIRST),
        }
    }

    /// Takes the register for one writer that rings without a lock. Fails
    /// when it is already dedicated or shared.
    pub fn dedicate(&self) -> Result<()> {
        match self.state.compare_exchange(
            BF_FREE,
            BF_DEDICATED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(BF_DEDICATED) => Err(Error::argument(
                "the UAR's BlueFlame register is already dedicated to one send queue",
            )),
            Err(_) => Err(Error::argument(
                "the UAR's BlueFlame register is shared by several send queues",
            )),
        }
    }

    /// Gives a register taken with [`BlueFlame::dedicate`] back.
    pub fn release_dedicated(&self) {
        let _ =
            self.state
                .compare_exchange(BF_DEDICATED, BF_FREE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Joins the writers that share the register under its lock. Fails
    /// when one writer has it to itself.
    pub fn share(&self) -> Result<()> {
        match self
            .state
            .compare_exchange(BF_FREE, BF_SHARED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) | Err(BF_SHARED) => Ok(()),
            Err(_) => Err(Error::argument(
                "the UAR's BlueFlame register is dedicated to another send queue; allocate a \
                 UAR (Uar::alloc) to share between queues",
            )),
        }
    }

    /// True once writers share the register.
    pub fn is_shared(&self) -> bool {
        self.state.load(Ordering::Acquire) == BF_SHARED
    }

    /// The sharing writers' lock; the guard holds the half the next
    /// doorbell goes to.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, BfHalf> {
        // Holders only store and toggle a half, which leaves it valid
        // even if one panicked: a poisoned lock is still good.
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Uar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uar(page {:#x}, {:?})", self.page_id, self.kind)
    }
}

impl Uar {
    /// A write-combining UAR with BlueFlame registers.
    pub fn alloc(ctx: &Context) -> Result<Uar> {
        Uar::alloc_kind(ctx, UarKind::BlueFlame)
    }

    pub fn alloc_kind(ctx: &Context, kind: UarKind) -> Result<Uar> {
        let a = ctx.inner.provider.uar_alloc(kind)?;
        Ok(Uar {
            ctx: ctx.clone(),
            handle: a.handle,
            page_id: a.page_id,
            kind,
            page: a.page,
            bf: BlueFlame::new(),
        })
    }

    /// Queues the allocation on `comp`, tagged `wr_id`; the future resolves
    /// to the UAR. On the emulated device ALLOC_UAR waits for a slot of the
    /// firmware's command queue. DEVX has no asynchronous UAR allocation:
    /// the kernel provider allocates during this call and the future is
    /// ready at once. Dropping the future frees what was allocated (at
    /// once, or as soon as the firmware allocates it).
    pub fn alloc_async<'c>(
        ctx: &Context,
        kind: UarKind,
        wr_id: u64,
        comp: &'c CmdComp,
    ) -> Result<Pending<'c, Result<Uar>>> {
        ctx.check_comp(comp)?;
        pending::submit(
            comp,
            wr_id,
            || {
                let queued = ctx
                    .inner
                    .provider
                    .uar_alloc_async(kind, wr_id, comp.channel())?;
                Ok(queued.map(|handle| UarStep {
                    ctx: ctx.clone(),
                    handle,
                    kind,
                }))
            },
            || Uar::alloc_kind(ctx, kind),
        )
    }

    /// The UAR index that `uar_page` fields of CQs and QPs take.
    pub fn page_id(&self) -> u32 {
        self.page_id
    }

    pub fn kind(&self) -> UarKind {
        self.kind
    }

    /// The mapped page.
    pub fn page(&self) -> &Arc<dyn UarPage> {
        &self.page
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The state of the page's first BlueFlame register.
    pub fn blue_flame(&self) -> &BlueFlame {
        &self.bf
    }

    /// Lets the device do work pending for the program on this thread,
    /// when it runs in software ([`UarPage::progress`]); call it when a
    /// poll found nothing. Whether it did any.
    #[inline]
    pub fn progress(&self) -> bool {
        self.page.progress()
    }

    /// Rings a 64-bit doorbell at `offset` in the page; `value` is stored as its
    /// in-memory bytes. The offset must name an aligned 8-byte slot of the page.
    #[inline]
    pub fn write64(&self, offset: usize, value: u64) -> Result<()> {
        if offset & 7 != 0 || offset >= UAR_PAGE_SIZE {
            return Err(Error::argument(format!(
                "doorbell offset {offset:#x} is not an aligned 8-byte slot of the {UAR_PAGE_SIZE:#x}-byte UAR page"
            )));
        }
        self.page.write64(offset, value);
        Ok(())
    }
}

impl Drop for Uar {
    fn drop(&mut self) {
        let _ = self.ctx.inner.provider.uar_free(self.handle);
    }
}

/// A queued UAR allocation.
struct UarStep {
    ctx: Context,
    handle: Handle,
    kind: UarKind,
}

impl<'a> Step<'a> for UarStep {
    type Output = Result<Uar>;

    fn finish(self: Box<Self>, out: Result<Vec<u8>>) -> Result<Uar> {
        out?;
        let provider = &self.ctx.inner.provider;
        let a = match provider.uar_allocated(self.handle) {
            Ok(a) => a,
            Err(e) => {
                let _ = provider.uar_free(self.handle);
                return Err(e);
            }
        };
        Ok(Uar {
            ctx: self.ctx,
            handle: a.handle,
            page_id: a.page_id,
            kind: self.kind,
            page: a.page,
            bf: BlueFlame::new(),
        })
    }

    fn abandon(self: Box<Self>, completion: Completion<'a>) {
        drop(completion);
        // Frees it, or dooms an allocation the firmware has not made yet.
        let _ = self.ctx.inner.provider.uar_free(self.handle);
    }
}
