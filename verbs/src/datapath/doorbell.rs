//! The send doorbell (prm-guide §5.6): publish the SND counter in the
//! doorbell record, then the 8-byte MMIO store through the UAR's BlueFlame
//! register, alternating its two halves.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use devx::Uar;

use super::ring::DbRec;

/// First BlueFlame register of a UAR page (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;
/// Half a 512-byte BlueFlame register: successive doorbells alternate halves.
pub const BF_HALF: usize = 0x100;
/// `dbrec[1]`: the SND counter.
const SND_DBR: usize = 1;

/// A QP's send doorbell: its doorbell record, its UAR and the BlueFlame half
/// to use next.
pub struct Doorbell {
    dbrec: DbRec,
    uar: Arc<Uar>,
    bf_offset: usize,
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Doorbell(uar page {}, bf {:#x})",
            self.uar.page_id(),
            self.bf_offset
        )
    }
}

impl Doorbell {
    pub(crate) fn new(dbrec: DbRec, uar: Arc<Uar>) -> Doorbell {
        Doorbell {
            dbrec,
            uar,
            bf_offset: BF_OFFSET,
        }
    }

    /// The register offset the next doorbell goes to.
    pub fn bf_offset(&self) -> usize {
        self.bf_offset
    }

    /// Rings for everything written up to SQ counter `cur_post`; `ctrl8` is
    /// the first 8 bytes of the last WQE's control segment as they sit in
    /// memory.
    #[inline(always)]
    pub(crate) fn ring(&mut self, cur_post: u32, ctrl8: u64) {
        // Release store: the WQE bytes are visible before the counter.
        self.dbrec.store(SND_DBR, cur_post & 0xffff);
        // The record must be visible before the MMIO reaches the device.
        fence(Ordering::Release);
        // The offset is always one of the two BlueFlame halves: no check needed.
        self.uar.page().write64(self.bf_offset, ctrl8);
        self.bf_offset ^= BF_HALF;
    }

    pub(crate) fn reset(&mut self) {
        self.bf_offset = BF_OFFSET;
    }
}
