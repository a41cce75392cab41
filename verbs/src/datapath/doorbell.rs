//! The send doorbell, rung in the order of rdma-core's mlx5 `post_send_db`
//! (providers/mlx5/qp.c):
//!
//! 1. `udma_to_device_barrier()`: the WQEs before the doorbell record;
//! 2. the SND counter into the doorbell record;
//! 3. `mmio_wc_start()` (or the lock of a shared register, which orders as
//!    much): the record before the write-combined store;
//! 4. the first 8 bytes of the last WQE's control segment as one 8-byte store
//!    to the UAR's BlueFlame register (`mmio_write64_be`);
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

use std::sync::Arc;

use devx::provider::UarPage;
use devx::Uar;

use super::barrier;
use super::ring::DbRec;

/// First BlueFlame register of a UAR page (`MLX5_BF_OFFSET`).
pub use devx::uar::BF_OFFSET;
/// Half a 512-byte BlueFlame register (`bf->buf_size`): successive doorbells
/// alternate halves.
pub const BF_HALF: usize = 0x100;
/// `dbrec[1]`: the SND counter.
const SND_DBR: usize = 1;

/// Who holds the half the next doorbell goes to.
enum Register {
    /// The QP's own UAR: the half, kept here, no lock.
    Dedicated(usize),
    /// A UAR shared with other QPs: the half lives under its lock.
    Shared,
}

/// A QP's send doorbell: its doorbell record, its UAR and its use of the
/// UAR's BlueFlame register.
pub struct Doorbell {
    dbrec: DbRec,
    /// `uar`'s page, held directly: one pointer less to follow per ring.
    page: Arc<dyn UarPage>,
    uar: Arc<Uar>,
    register: Register,
    /// The register is write-combining memory (a mapped device BAR), which
    /// steps 3 and 5 fence; an emulated device's page is ordinary memory,
    /// which plain store order serves.
    wc: bool,
}

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
    /// A doorbell through `uar`, which the caller took with
    /// `blue_flame().dedicate()` (`dedicated`) or `.share()`.
    pub(crate) fn new(dbrec: DbRec, uar: Arc<Uar>, dedicated: bool) -> Doorbell {
        let register = if dedicated {
            Register::Dedicated(BF_OFFSET)
        } else {
            Register::Shared
        };
        let wc = uar.page().write_combining();
        Doorbell {
            dbrec,
            page: uar.page().clone(),
            uar,
            register,
            wc,
        }
    }

    /// The register offset the next doorbell goes to.
    pub fn bf_offset(&self) -> usize {
        match self.register {
            Register::Dedicated(offset) => offset,
            Register::Shared => *self.uar.blue_flame().lock(),
        }
    }

    /// True when the QP shares its UAR's register and rings under its lock.
    pub fn is_shared(&self) -> bool {
        matches!(self.register, Register::Shared)
    }

    /// Rings for everything written up to SQ counter `cur_post`; `ctrl8` is
    /// the first 8 bytes of the last WQE's control segment as they sit in
    /// memory. No allocation, no system call; a shared register costs one
    /// uncontended lock.
    #[inline(always)]
    pub(crate) fn ring(&mut self, cur_post: u32, ctrl8: u64) {
        // Read before the register store: the compiler cannot tell that the
        // page's (dynamic) store leaves the doorbell alone, so it would read
        // them again after it.
        let wc = self.wc;
        barrier::to_device();
        self.dbrec.store(SND_DBR, cur_post & 0xffff);
        match &mut self.register {
            Register::Dedicated(offset) => {
                // The offset is always one of the two halves: no check needed.
                let at = *offset;
                *offset ^= BF_HALF;
                barrier::wc_start(wc);
                self.page.write64(at, ctrl8);
                barrier::wc_flush(wc);
            }
            Register::Shared => {
                let mut next = self.uar.blue_flame().lock();
                barrier::wc_start_locked();
                self.page.write64(*next, ctrl8);
                barrier::wc_flush(wc);
                *next ^= BF_HALF;
            }
        }
    }

    /// The QP went back to RST: the SND counter restarts at 0 with the
    /// queue's (as mlx5's modify to RESET clears it), so nothing posted
    /// before is rung again. A shared register's half belongs to all its
    /// writers and stays where it is.
    pub(crate) fn reset(&mut self) {
        self.dbrec.store(SND_DBR, 0);
        if let Register::Dedicated(offset) = &mut self.register {
            *offset = BF_OFFSET;
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if let Register::Dedicated(_) = self.register {
            self.uar.blue_flame().release_dedicated();
        }
    }
}
