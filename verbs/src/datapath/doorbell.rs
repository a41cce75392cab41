//! The send doorbell, rung in the order of rdma-core's mlx5 `post_send_db`
//! (providers/mlx5/qp.c):
//!
//! 1. `udma_to_device_barrier()`: the WQEs before the doorbell record;
//! 2. the SND counter into the doorbell record;
//! 3. `mmio_wc_start()` (or the lock of a shared register, which orders as
//!    much): the record before the write-combined store;
//! 4. the first 8 bytes of the last WQE's control segment as one 8-byte store
//!    to the UAR's BlueFlame register (`mmio_write64_be`): the ringer's own
//!    store where the page allows it ([`devx::BfStore`]; a mapped device page
//!    always does), with no call through the page;
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
use devx::{BfStore, Uar};

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
    /// `uar`'s page, found once: through its `Arc`, each ring would work
    /// out again where the page sits behind the counts (which depends on
    /// the type behind the `dyn`). `uar` keeps it alive and never replaces it.
    page: NonNull<dyn UarPage>,
    /// How the page takes a doorbell ([`UarPage::bf_store`]), and where
    /// a ring that stores itself writes: the page's first byte.
    store: BfStore,
    base: usize,
    /// This QP's [`devx::HeldDoorbell::key`], for [`BfStore::UnlessHeld`].
    held_key: u64,
    uar: Arc<Uar>,
    /// The register is shared with other QPs: its half lives under the
    /// UAR's lock. Otherwise it is the QP's own and `rung` holds it.
    shared: bool,
    /// The register is write-combining memory (a mapped device BAR), which
    /// steps 3 and 5 fence; an emulated device's page is ordinary memory,
    /// which plain store order serves.
    wc: bool,
    /// Neither: the QP's own register in ordinary memory, the common case
    /// on the emulated device, as one flag so that it is one compare.
    plain: bool,
    /// The half the last doorbell went to, on a register of the QP's own
    /// (the second before the first doorbell): the next one takes the
    /// other, and the value toggled is the value rung.
    rung: BfHalf,
}

// SAFETY: `page` is a shared reference to a `UarPage`, which is `Send` and
// `Sync`, kept alive by `uar`; `store` and `base` point into that page (its
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
        let store = page.bf_store();
        Doorbell {
            dbrec,
            page: NonNull::from(&**page),
            store,
            base: page.base() as usize,
            held_key: match store {
                BfStore::UnlessHeld(held) => held.key(qpn),
                BfStore::Call | BfStore::Mmio => 0,
            },
            uar,
            shared: !dedicated,
            wc,
            plain: dedicated && !wc,
            rung: BfHalf::FIRST.other(),
        }
    }

    /// The register offset the next doorbell goes to.
    pub fn bf_offset(&self) -> usize {
        if self.shared {
            self.uar.blue_flame().lock().offset()
        } else {
            self.rung.other().offset()
        }
    }

    /// True when the QP shares its UAR's register and rings under its lock.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Rings for everything written up to SQ counter `cur_post`; `ctrl8` is
    /// the first 8 bytes of the last WQE's control segment as they sit in
    /// memory. No allocation, no system call; a shared register costs one
    /// uncontended lock.
    #[inline(always)]
    pub(crate) fn ring(&mut self, cur_post: u32, ctrl8: u64) {
        barrier::to_device();
        self.dbrec.store(SND_DBR, cur_post & 0xffff);
        if self.plain {
            let at = self.next_half();
            barrier::wc_start(false);
            self.write_bf(at, ctrl8);
            barrier::wc_flush(false);
        } else if !self.shared {
            // The QP's own register, write-combining.
            let at = self.next_half();
            barrier::wc_start(true);
            self.write_bf(at, ctrl8);
            barrier::wc_flush(true);
        } else {
            // Read before the page's (dynamic) store, as `next_half` is.
            let wc = self.wc;
            let mut next = self.uar.blue_flame().lock();
            barrier::wc_start_locked();
            self.write_bf(*next, ctrl8);
            barrier::wc_flush(wc);
            *next = next.other();
        }
    }

    /// The doorbell's store into half `at` of the register, the way the
    /// page takes it: by the ringer's own store where the page allows,
    /// with no call through it.
    #[inline(always)]
    fn write_bf(&self, at: BfHalf, ctrl8: u64) {
        let reg = (self.base + at.offset()) as *mut u64;
        match self.store {
            BfStore::UnlessHeld(held) => {
                // SAFETY: `reg` is a BlueFlame half of the page `uar` keeps
                // alive: inside it and 8-byte aligned (the page is
                // page-aligned). The page is ordinary memory that its own
                // stores write atomically too.
                unsafe { AtomicU64::from_ptr(reg) }.store(ctrl8, Ordering::Release);
                // SAFETY: `uar` keeps the page, and with it the note, alive.
                if !unsafe { held.holds(self.held_key) } {
                    self.tell_page(at, ctrl8);
                }
            }
            // SAFETY: as above, in the device's mapped register page: one
            // volatile store, as a doorbell needs.
            BfStore::Mmio => unsafe { reg.write_volatile(ctrl8) },
            BfStore::Call => self.page().write_bf(at, ctrl8),
        }
    }

    /// A doorbell the page's device does not hold yet, out of line: a
    /// running emulated engine executes the QP in it, which dwarfs a call.
    #[cold]
    #[inline(never)]
    fn tell_page(&self, at: BfHalf, ctrl8: u64) {
        self.page().write_bf(at, ctrl8);
    }

    #[inline(always)]
    fn page(&self) -> &dyn UarPage {
        // SAFETY: `page` points to `uar`'s page, which lives as long as
        // `uar`, held by `self`.
        unsafe { self.page.as_ref() }
    }

    /// The half of the QP's own register to ring now. Taken before the
    /// page's (dynamic) store, which the compiler cannot tell leaves the
    /// doorbell alone.
    #[inline(always)]
    fn next_half(&mut self) -> BfHalf {
        self.rung = self.rung.other();
        self.rung
    }

    /// The QP went back to RST: the SND counter restarts at 0 with the
    /// queue's (as mlx5's modify to RESET clears it), so nothing posted
    /// before is rung again. A shared register's half belongs to all its
    /// writers and stays where it is.
    pub(crate) fn reset(&mut self) {
        self.dbrec.store(SND_DBR, 0);
        self.rung = BfHalf::FIRST.other();
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if !self.is_shared() {
            self.uar.blue_flame().release_dedicated();
        }
    }
}
