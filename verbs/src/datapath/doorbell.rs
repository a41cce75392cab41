//! The send doorbell, rung in the order of rdma-core's mlx5 `post_send_db`
//! (providers/mlx5/qp.c):
//!
//! 1. `udma_to_device_barrier()`: the WQEs before the doorbell record;
//! 2. the SND counter into the doorbell record;
//! 3. `mmio_wc_start()` (or the lock of a shared register, which orders as
//!    much): the record before the write-combined store;
//! 4. the first 8 bytes of the last WQE's control segment as one 8-byte store
//!    to the UAR's BlueFlame register (`mmio_write64_be`): the ringer's own
//!    store where the page allows it ([`devx::BfStore`], as a mapped device
//!    page does), with no call through the page;
//! 5. `mmio_flush_writes()`: the store leaves the CPU's write-combining
//!    buffer now, still inside the lock, so the device sees doorbells of a
//!    shared register in the order the lock hands it out;
//! 6. the next doorbell goes to the other half of the register.
//!
//! mlx5 may copy a whole small WQE into the register instead of the 8-byte
//! store (BlueFlame); the UAR page behind the provider seam takes 8-byte
//! doorbells only, which mlx5 also falls back to (batches, `shut_up_bf`).
//!
//! A QP that allocates its own UAR has the register to itself: it keeps the
//! half in the doorbell and rings with no lock. QPs given a UAR share its
//! register and take turns under the UAR's lock (mlx5's `need_lock`), which
//! also holds the half they share. The UAR refuses to be both
//! ([`devx::BlueFlame`]), so no unlocked writer can race a locked one.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use devx::provider::UarPage;
use devx::uar::UAR_PAGE_SIZE;
use devx::{BfStore, HeldDoorbell, Uar};

use super::barrier;
use super::ring::DbRec;

/// First BlueFlame register of a UAR page (`MLX5_BF_OFFSET`), and half of
/// it (`bf->buf_size`): successive doorbells alternate halves.
pub use devx::uar::{BfHalf, BF_HALF, BF_OFFSET};
/// `dbrec[1]`: the SND counter.
const SND_DBR: usize = 1;

/// A QP's send doorbell: its doorbell record, its UAR and its use of the
/// UAR's BlueFlame register.
pub struct Doorbell {
    dbrec: DbRec,
    /// How a ring reaches the register, worked out once.
    way: Way,
    /// On a register of the QP's own: where the half the next doorbell
    /// goes to lies, counted from `origin`, the page's first byte where the
    /// ringer stores itself and 0 where it calls through the page. Both
    /// are page-aligned, so toggling [`BF_HALF`] alternates the halves, as
    /// mlx5's `bf->offset ^= bf->buf_size` does, and a ring that stores
    /// itself has the address at hand.
    next: usize,
    origin: usize,
    /// `uar`'s page, found once: through its `Arc`, each call would work
    /// out again where the page sits behind the counts (which depends on
    /// the type behind the `dyn`). `uar` keeps it alive and never replaces it.
    page: NonNull<dyn UarPage>,
    uar: Arc<Uar>,
}

/// How [`Doorbell::ring`] reaches the register: one choice per ring, made
/// from the page's [`BfStore`], its memory and the register's use.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// The QP's own register in an emulated device's page (ordinary
    /// memory): the ringer's atomic store, then a call through the page
    /// unless the device, its engine paused, holds a doorbell of this QP
    /// already (`key`, the QP's [`devx::HeldDoorbell::key`]). The common
    /// case on the emulated device.
    OwnUnlessHeld { held: HeldDoorbell, key: u64 },
    /// The QP's own register in a mapped device page (write-combining
    /// memory): a volatile store between `sfence`s.
    OwnMmio,
    /// The QP's own register in a page reached only through
    /// [`UarPage::write_bf`]; `wc`: write-combining memory, which steps 3
    /// and 5 fence.
    OwnCall { wc: bool },
    /// A register shared with other QPs: its half lives under the UAR's
    /// lock; `wc` as above.
    Shared { wc: bool },
}

// SAFETY: `page` is a shared reference to a `UarPage`, which is `Send` and
// `Sync`, kept alive by `uar`; `next` and `way` point into that page (its
// registers, or its device's atomic note), which any thread may store to or
// load from; the other fields are `Send` and `Sync`.
unsafe impl Send for Doorbell {}
// SAFETY: as for `Send`.
unsafe impl Sync for Doorbell {}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Doorbell(uar page {}, bf {:#x}{})",
            self.uar.page_id(),
            self.bf_offset(),
            if self.is_shared() { ", shared" } else { "" }
        )
    }
}

impl Doorbell {
    /// QP `qpn`'s doorbell through `uar`, which the caller took with
    /// `blue_flame().dedicate()` (`dedicated`) or `.share()`.
    pub(crate) fn new(dbrec: DbRec, uar: Arc<Uar>, dedicated: bool, qpn: u32) -> Doorbell {
        let page = uar.page();
        let wc = page.write_combining();
        let base = page.base() as usize;
        // The ringer's own store needs the halves at fixed addresses.
        let aligned = base & (UAR_PAGE_SIZE - 1) == 0;
        let way = match (dedicated, page.bf_store()) {
            (false, _) => Way::Shared { wc },
            (true, BfStore::UnlessHeld(held)) if aligned && !wc => Way::OwnUnlessHeld {
                held,
                key: held.key(qpn),
            },
            (true, BfStore::Mmio) if aligned => Way::OwnMmio,
            (true, _) => Way::OwnCall { wc },
        };
        let origin = match way {
            Way::OwnUnlessHeld { .. } | Way::OwnMmio => base,
            Way::OwnCall { .. } | Way::Shared { .. } => 0,
        };
        Doorbell {
            dbrec,
            way,
            next: origin + BfHalf::FIRST.offset(),
            origin,
            page: NonNull::from(&**page),
            uar,
        }
    }

    /// The register offset the next doorbell goes to.
    pub fn bf_offset(&self) -> usize {
        if self.is_shared() {
            self.uar.blue_flame().lock().offset()
        } else {
            self.next - self.origin
        }
    }

    /// True when the QP shares its UAR's register and rings under its lock.
    pub fn is_shared(&self) -> bool {
        matches!(self.way, Way::Shared { .. })
    }

    /// Rings for everything written up to SQ counter `cur_post`; `ctrl8` is
    /// the first 8 bytes of the last WQE's control segment as they sit in
    /// memory. No allocation, no system call; a shared register costs one
    /// uncontended lock.
    #[inline(always)]
    pub(crate) fn ring(&mut self, cur_post: u32, ctrl8: u64) {
        barrier::to_device();
        self.dbrec.store(SND_DBR, cur_post & 0xffff);
        match self.way {
            Way::OwnUnlessHeld { held, key } => {
                let reg = self.take_next();
                barrier::wc_start(false);
                // SAFETY: `reg` is a BlueFlame half of the page `uar` keeps
                // alive: inside it and 8-byte aligned (the page is
                // page-aligned). The page is ordinary memory, which its own
                // stores write atomically too.
                unsafe { AtomicU64::from_ptr(reg as *mut u64) }.store(ctrl8, Ordering::Release);
                // SAFETY: `uar` keeps the page, and with it the note, alive.
                if !unsafe { held.holds(key) } {
                    self.tell_page(reg, ctrl8);
                }
                barrier::wc_flush(false);
            }
            Way::OwnMmio => {
                let reg = self.take_next();
                barrier::wc_start(true);
                // SAFETY: as above, in the device's mapped register page:
                // one volatile store, as a doorbell needs.
                unsafe { (reg as *mut u64).write_volatile(ctrl8) };
                barrier::wc_flush(true);
            }
            Way::OwnCall { .. } | Way::Shared { .. } => self.ring_through_page(ctrl8),
        }
    }

    /// A ring through the page's [`UarPage::write_bf`]: out of line, as
    /// the call it makes (and a shared register's lock) cost more anyway,
    /// and laid out apart from the two ways above.
    #[cold]
    #[inline(never)]
    fn ring_through_page(&mut self, ctrl8: u64) {
        match self.way {
            Way::OwnCall { wc } => {
                let reg = self.take_next();
                let at = self.half(reg);
                barrier::wc_start(wc);
                self.page().write_bf(at, ctrl8);
                barrier::wc_flush(wc);
            }
            Way::Shared { wc } => {
                let mut next = self.uar.blue_flame().lock();
                barrier::wc_start_locked();
                self.page().write_bf(*next, ctrl8);
                barrier::wc_flush(wc);
                *next = next.other();
            }
            Way::OwnUnlessHeld { .. } | Way::OwnMmio => {}
        }
    }

    /// Where the half of the QP's own register to ring now lies (from
    /// `origin`); the doorbell after goes to the other half.
    #[inline(always)]
    fn take_next(&mut self) -> usize {
        let reg = self.next;
        self.next = reg ^ BF_HALF;
        reg
    }

    /// A doorbell the emulated device does not hold yet, stored at `reg`
    /// already, told to it through the page; out of line: a running
    /// engine executes the QP in it, which dwarfs a call.
    #[cold]
    #[inline(never)]
    fn tell_page(&self, reg: usize, ctrl8: u64) {
        self.page().write_bf(self.half(reg), ctrl8);
    }

    /// The half of the QP's own register that `next` named as `at`.
    fn half(&self, at: usize) -> BfHalf {
        if at - self.origin == BfHalf::FIRST.offset() {
            BfHalf::FIRST
        } else {
            BfHalf::FIRST.other()
        }
    }

    #[inline(always)]
    fn page(&self) -> &dyn UarPage {
        // SAFETY: `page` points to `uar`'s page, which lives as long as
        // `uar`, held by `self`.
        unsafe { self.page.as_ref() }
    }

    /// The QP went back to RST: the SND counter restarts at 0 with the
    /// queue's (as mlx5's modify to RESET clears it), so nothing posted
    /// before is rung again. A shared register's half belongs to all its
    /// writers and stays where it is.
    pub(crate) fn reset(&mut self) {
        self.dbrec.store(SND_DBR, 0);
        self.next = self.origin + BfHalf::FIRST.offset();
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if !self.is_shared() {
            self.uar.blue_flame().release_dedicated();
        }
    }
}
