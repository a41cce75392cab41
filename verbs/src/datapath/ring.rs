//! Raw access to queue memory the device shares with us: WQE rings, CQE rings
//! and doorbell records. All of the data path's pointer work lives here.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// A power-of-two ring of bytes in registered queue memory. Offsets wrap at
/// the ring end, so a WQE that runs past it continues at the start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ring {
    addr: usize,
    mask: usize,
}

impl Ring {
    /// # Safety
    /// `addr..addr + len` must be mapped, writable queue memory that stays
    /// mapped as long as this `Ring` (or a copy) is used, `addr` must be
    /// 16-byte aligned and `len` a power of two ≥ 16. Nothing may hold a Rust
    /// reference into it: the device writes it concurrently.
    pub(crate) unsafe fn new(addr: usize, len: usize) -> Ring {
        debug_assert!(len.is_power_of_two() && len >= 16 && addr.is_multiple_of(16));
        Ring {
            addr,
            mask: len - 1,
        }
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.mask + 1
    }

    #[inline(always)]
    fn at(&self, off: usize) -> *mut u8 {
        (self.addr + (off & self.mask)) as *mut u8
    }

    /// Stores one 16-byte segment at `off` (a multiple of 16, wrapped).
    #[inline(always)]
    pub(crate) fn write_seg(&self, off: usize, seg: [u8; 16]) {
        debug_assert!(off.is_multiple_of(16));
        // SAFETY: `off & mask` is 16-aligned and ≤ len − 16 (len is a power
        // of two ≥ 16), so the 16 bytes lie in the mapping `new` vouched for.
        // The device reads this slot only after the doorbell record store
        // that follows (release), so the plain store does not race with it.
        unsafe { self.at(off).cast::<[u8; 16]>().write(seg) }
    }

    /// Copies `data` starting at `off`, continuing at the ring start if it
    /// runs past the end.
    #[inline(always)]
    pub(crate) fn write_bytes(&self, off: usize, data: &[u8]) {
        let start = off & self.mask;
        let first = data.len().min(self.len() - start);
        let (head, tail) = data.split_at(first);
        // SAFETY: `start + first ≤ len` and `tail.len() < len` (callers copy at
        // most one WQE, smaller than the ring), so both copies stay inside the
        // mapping; `data` is caller memory, never the ring, so no overlap. The
        // ordering argument is the one of `write_seg`.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), self.at(start), head.len());
            std::ptr::copy_nonoverlapping(tail.as_ptr(), self.at(0), tail.len());
        }
    }
}

/// One 64-byte entry of a [`Ring`] (a CQE), located once so its fields are
/// read without wrapping each offset again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry64 {
    addr: usize,
}

impl Ring {
    /// The 64-byte entry holding offset `off` (a multiple of 64, wrapped).
    #[inline(always)]
    pub(crate) fn entry64(&self, off: usize) -> Entry64 {
        debug_assert!(off.is_multiple_of(64) && self.len() >= 64);
        Entry64 {
            addr: self.at(off & !63) as usize,
        }
    }
}

impl Entry64 {
    /// Byte `at` (< 64) with acquire ordering: the owner byte, after which
    /// the rest of the entry may be read.
    #[inline(always)]
    pub(crate) fn load_acquire(&self, at: usize) -> u8 {
        assert!(at < 64);
        // SAFETY: a byte of a 64-byte entry of the ring (`entry64` rounded the
        // wrapped offset down to 64 in a power-of-two ring of ≥ 64 bytes); an
        // atomic view of a byte is always aligned, and the device's
        // concurrent store to it is atomic on every target we run on.
        unsafe { AtomicU8::from_ptr((self.addr + at) as *mut u8).load(Ordering::Acquire) }
    }

    /// The big-endian u32 at `at` (a multiple of 4, < 64): one CQE field.
    /// Call only after [`Entry64::load_acquire`] showed the entry is ours.
    #[inline(always)]
    pub(crate) fn read_be32(&self, at: usize) -> u32 {
        assert!(at <= 60 && at.is_multiple_of(4));
        // SAFETY: 4 aligned bytes inside the entry (the ring base is
        // 16-aligned), ordered after the device's write of the entry by the
        // caller's acquire load, as in `read64b`.
        u32::from_be(unsafe { ((self.addr + at) as *const u32).read() })
    }

    /// The big-endian u16 at `at` (a multiple of 2, < 64).
    #[inline(always)]
    pub(crate) fn read_be16(&self, at: usize) -> u16 {
        assert!(at <= 62 && at.is_multiple_of(2));
        // SAFETY: as in `read_be32`, for 2 bytes at a 2-aligned offset.
        u16::from_be(unsafe { ((self.addr + at) as *const u16).read() })
    }

    /// Copies the whole entry out. Call only after
    /// [`Entry64::load_acquire`] showed the entry is ours.
    #[inline(always)]
    pub(crate) fn read64b(&self) -> [u8; 64] {
        // SAFETY: the entry lies in the ring. The caller's acquire load of the
        // owner byte orders this read after the device's writes of the entry,
        // and the device does not write it again until the consumer index
        // moves past it, so a plain read does not race. Not volatile: that
        // would force 64 byte loads, where a plain read lets the compiler load
        // only the fields the decoder uses.
        unsafe { (self.addr as *const [u8; 64]).read() }
    }
}

/// A doorbell record: big-endian 32-bit counters the device reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DbRec {
    addr: usize,
}

impl DbRec {
    /// # Safety
    /// `addr` must point at ≥ 8 mapped, 4-byte aligned bytes that stay mapped
    /// as long as this value (or a copy) is used.
    pub(crate) unsafe fn new(addr: usize) -> DbRec {
        debug_assert!(addr.is_multiple_of(4));
        DbRec { addr }
    }

    /// Publishes counter `which` (0 or 1) as be32 with release ordering, so
    /// every WQE byte written before is visible to whoever reads the record.
    #[inline(always)]
    pub(crate) fn store(&self, which: usize, value: u32) {
        debug_assert!(which < 2);
        // SAFETY: `which < 2` keeps the word inside the 8 bytes `new` vouched
        // for, 4-byte aligned; the device reads it atomically.
        unsafe {
            AtomicU32::from_ptr((self.addr as *mut u32).add(which))
                .store(value.to_be(), Ordering::Release)
        }
    }

    /// Reads counter `which` back (host order), for tests and tools.
    pub(crate) fn load(&self, which: usize) -> u32 {
        debug_assert!(which < 2);
        // SAFETY: as in `store`.
        u32::from_be(unsafe {
            AtomicU32::from_ptr((self.addr as *mut u32).add(which)).load(Ordering::Acquire)
        })
    }
}
