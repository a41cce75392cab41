//! Copies between Rust buffers and memory registered with the device.
//!
//! Registered memory is bytes shared with the device, which may read or
//! write them at any time; safe code never holds a Rust reference into
//! writable registered memory. It copies bytes in and out instead, with
//! relaxed atomic accesses: never a data race in Rust's memory model,
//! whatever other threads do, and every byte is loaded or stored exactly
//! once (the compiler may not cache or elide it). Bytes read while the
//! device writes them may mix old and new values; read after the completion.
//!
//! Atomic accesses of different sizes to the same bytes must not race, so
//! the size is fixed per byte, by where the byte lies in the registration:
//! bytes of an aligned 8-byte word wholly inside the registration are always
//! accessed as that `u64` (a partial write merges with a compare-exchange),
//! the few bytes at an unaligned start or end of the registration always
//! one by one.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::error::{Error, Result};

/// A registered range: `len` bytes at `base`, mapped while the value is used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    pub base: usize,
    pub len: usize,
}

/// One step of a copy: a run of bytes sharing one access size.
enum Piece {
    /// One edge byte at this address.
    Byte(usize),
    /// `n` bytes from byte `from` of the aligned word at this address.
    Word { at: usize, from: usize, n: usize },
}

impl Region {
    /// Checks that `[offset, offset + len)` lies inside the region.
    pub(crate) fn check(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::argument(format!(
                "{what}: {len} bytes at offset {offset} run past the end of the {}-byte \
                 registration",
                self.len
            ))),
        }
    }

    /// Calls `f` for each piece of `[offset, offset + len)` in order, with
    /// the index of its first byte in the copy. The range must be checked.
    fn pieces(&self, offset: usize, len: usize, mut f: impl FnMut(usize, Piece)) {
        let end = self.base + offset + len;
        let lo = (self.base + 7) & !7;
        let hi = ((self.base + self.len) & !7).max(lo);
        let mut a = self.base + offset;
        while a < end {
            let i = a - (self.base + offset);
            if a < lo || a >= hi {
                f(i, Piece::Byte(a));
                a += 1;
            } else {
                let at = a & !7;
                let from = a - at;
                let n = (8 - from).min(end - a);
                f(i, Piece::Word { at, from, n });
                a += n;
            }
        }
    }
}

/// The aligned word at `at`.
///
/// # Safety
/// `at` must be 8-aligned, inside a live registration, and accessed by Rust
/// code only as this word (see the module docs).
unsafe fn word<'a>(at: usize) -> &'a AtomicU64 {
    // SAFETY: the caller vouches for the address and its alignment.
    unsafe { AtomicU64::from_ptr(at as *mut u64) }
}

/// The edge byte at `at`.
///
/// # Safety
/// `at` must lie inside a live registration and be accessed by Rust code
/// only as this byte.
unsafe fn byte<'a>(at: usize) -> &'a AtomicU8 {
    // SAFETY: the caller vouches for the address; bytes are always aligned.
    unsafe { AtomicU8::from_ptr(at as *mut u8) }
}

/// Copies `out.len()` bytes from `offset`.
///
/// # Safety
/// `region` must be registered memory mapped for the call that no Rust
/// reference covers mutably, and the range checked with [`Region::check`].
pub(crate) unsafe fn copy_out(region: Region, offset: usize, out: &mut [u8]) {
    region.pieces(offset, out.len(), |i, p| match p {
        // SAFETY: inside the checked range, accessed at its fixed size.
        Piece::Byte(at) => out[i] = unsafe { byte(at) }.load(Ordering::Relaxed),
        Piece::Word { at, from, n } => {
            // SAFETY: as above.
            let w = unsafe { word(at) }.load(Ordering::Relaxed).to_ne_bytes();
            if n == 8 {
                // A constant length: one 8-byte store, no memcpy call.
                out[i..i + 8].copy_from_slice(&w);
            } else {
                out[i..i + n].copy_from_slice(&w[from..from + n]);
            }
        }
    });
}

/// Where stored bytes come from.
trait Source {
    /// Byte `i` of the copy.
    fn at(&self, i: usize) -> u8;
    /// Bytes `i..i + 8` of the copy as a word in memory order.
    fn word(&self, i: usize) -> u64;
}

impl Source for &[u8] {
    #[inline(always)]
    fn at(&self, i: usize) -> u8 {
        self[i]
    }

    #[inline(always)]
    fn word(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self[i..i + 8]);
        u64::from_ne_bytes(b)
    }
}

/// One value repeated.
struct Repeat(u8);

impl Source for Repeat {
    #[inline(always)]
    fn at(&self, _: usize) -> u8 {
        self.0
    }

    #[inline(always)]
    fn word(&self, _: usize) -> u64 {
        u64::from_ne_bytes([self.0; 8])
    }
}

/// Stores `len` bytes of `src` from `offset`.
///
/// # Safety
/// `region` must be registered memory the registration owns exclusively (no
/// Rust reference to it exists), mapped for the call, and the range checked.
unsafe fn store(region: Region, offset: usize, len: usize, src: impl Source) {
    region.pieces(offset, len, |i, p| match p {
        // SAFETY: inside the checked range, accessed at its fixed size.
        Piece::Byte(at) => unsafe { byte(at) }.store(src.at(i), Ordering::Relaxed),
        // SAFETY: as above.
        Piece::Word { at, n: 8, .. } => unsafe { word(at) }.store(src.word(i), Ordering::Relaxed),
        Piece::Word { at, from, n } => {
            // The other bytes of the word may change meanwhile (the device,
            // another thread): merge into what is there.
            let merge = |old: u64| {
                let mut b = old.to_ne_bytes();
                for k in 0..n {
                    b[from + k] = src.at(i + k);
                }
                Some(u64::from_ne_bytes(b))
            };
            // SAFETY: as above.
            let w = unsafe { word(at) };
            let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, merge);
        }
    });
}

/// Copies `data` to `offset`.
///
/// # Safety
/// As for `store`.
pub(crate) unsafe fn copy_in(region: Region, offset: usize, data: &[u8]) {
    // SAFETY: forwarded.
    unsafe { store(region, offset, data.len(), data) }
}

/// Sets `len` bytes at `offset` to `value`.
///
/// # Safety
/// As for `store`.
pub(crate) unsafe fn fill(region: Region, offset: usize, len: usize, value: u8) {
    // SAFETY: forwarded.
    unsafe { store(region, offset, len, Repeat(value)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies at every offset and length, over regions starting at every
    /// alignment, land exactly where asked and touch nothing outside.
    #[test]
    fn copies_at_every_alignment() {
        for shift in 0..8 {
            let mut backing = vec![0u64; 10];
            let base = backing.as_mut_ptr() as usize + shift;
            let len = 50 + shift;
            let region = Region { base, len };
            for off in 0..20 {
                for n in 0..=(len - off).min(20) {
                    let data: Vec<u8> = (0..n).map(|i| (i + 1) as u8).collect();
                    // SAFETY: the region lies inside `backing`, referenced by
                    // nothing else while the copies run.
                    unsafe {
                        fill(region, 0, len, 0xee);
                        copy_in(region, off, &data);
                    }
                    let mut all = vec![0u8; len];
                    // SAFETY: as above.
                    unsafe { copy_out(region, 0, &mut all) };
                    for (k, &b) in all.iter().enumerate() {
                        let want = if (off..off + n).contains(&k) {
                            (k - off + 1) as u8
                        } else {
                            0xee
                        };
                        assert_eq!(b, want, "shift {shift} off {off} len {n} byte {k}");
                    }
                }
            }
            let raw: Vec<u8> = backing.iter().flat_map(|w| w.to_ne_bytes()).collect();
            assert!(raw[..shift].iter().all(|&b| b == 0), "shift {shift}");
            assert!(raw[shift + len..].iter().all(|&b| b == 0), "shift {shift}");
        }
    }
}
