//! The engine's only access to process memory. A [`Span`] can only be made
//! from a registered UMEM and a range the UMEM covers, so every byte the
//! emulated device reads or writes lies inside memory a caller registered
//! (and the kernel layer probed at registration). Accesses are bounds
//! checked against the span again before any pointer is used.

use std::ptr;
use std::sync::atomic::{fence, Ordering};

use crate::sim::fw::umem::UmemObj;

/// A byte range of registered memory the device may access.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    base: usize,
    len: usize,
}

impl Span {
    /// `[offset, offset + len)` of `umem`, when the UMEM covers it.
    pub(crate) fn of_umem(umem: &UmemObj, offset: u64, len: u64) -> Option<Span> {
        if !umem.covers(offset, len) {
            return None;
        }
        let base = umem.addr.checked_add(offset)?;
        Some(Span {
            base: usize::try_from(base).ok()?,
            len: usize::try_from(len).ok()?,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The sub-range `[at, at + len)`, when it lies inside this span.
    #[inline]
    pub(crate) fn sub(&self, at: usize, len: usize) -> Option<Span> {
        let end = at.checked_add(len)?;
        (end <= self.len).then_some(Span {
            base: self.base + at,
            len,
        })
    }

    /// Copies `out.len()` bytes from offset `at`; false (and nothing read)
    /// when the range leaves the span.
    #[inline]
    pub(crate) fn read(&self, at: usize, out: &mut [u8]) -> bool {
        let Some(s) = self.sub(at, out.len()) else {
            return false;
        };
        // SAFETY: `s` lies inside a registered UMEM range the kernel layer
        // probed as mapped and readable; the destination is a distinct Rust
        // buffer. The application may write concurrently, as it may race
        // real DMA; the bytes are copied, never referenced.
        unsafe { ptr::copy_nonoverlapping(s.base as *const u8, out.as_mut_ptr(), out.len()) };
        true
    }

    /// Appends `len` bytes from offset `at` to `out` (no zero fill first);
    /// false (and `out` unchanged) when the range leaves the span.
    pub(crate) fn read_append(&self, at: usize, len: usize, out: &mut Vec<u8>) -> bool {
        let Some(s) = self.sub(at, len) else {
            return false;
        };
        out.reserve(len);
        let start = out.len();
        // SAFETY: the source lies inside a registered UMEM range as in
        // `read`; `reserve` made room for `len` more bytes after `start`,
        // and the length is raised only after all of them were written.
        unsafe {
            ptr::copy_nonoverlapping(s.base as *const u8, out.as_mut_ptr().add(start), len);
            out.set_len(start + len);
        }
        true
    }

    /// Copies `data` to offset `at`; false (and nothing written) when the
    /// range leaves the span.
    #[inline]
    pub(crate) fn write(&self, at: usize, data: &[u8]) -> bool {
        let Some(s) = self.sub(at, data.len()) else {
            return false;
        };
        // SAFETY: `s` lies inside a registered UMEM range; every span the
        // engine writes through was checked for write rights (MKEY local or
        // remote write, or a queue UMEM registered writable) before it was
        // made. The source is a distinct Rust buffer.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), s.base as *mut u8, data.len()) };
        true
    }

    /// Copies this whole span to `dst`, of the same length; false (and
    /// nothing copied) when the lengths differ. The two may be the same
    /// memory registered twice, so the copy allows overlap.
    pub(crate) fn copy_to(&self, dst: &Span) -> bool {
        if self.len != dst.len {
            return false;
        }
        // SAFETY: both spans lie inside registered UMEM ranges (see `Span`);
        // the source was checked for read rights (a local key's) and the
        // destination for write rights (a remote write key's) before they
        // were made, and both devices' locks are held, so neither UMEM is
        // deregistered meanwhile. `copy` allows the ranges to overlap.
        unsafe { ptr::copy(self.base as *const u8, dst.base as *mut u8, self.len) };
        true
    }

    /// A doorbell record word: be32 at `at`, read once, then an acquire
    /// fence so the queue entries software wrote before it are seen.
    #[inline]
    pub(crate) fn read_be32(&self, at: usize) -> Option<u32> {
        let s = self.sub(at, 4)?;
        let mut b = [0u8; 4];
        // SAFETY: inside a registered range (checked by `sub`); a volatile
        // read so the value is loaded fresh on every doorbell.
        unsafe {
            for (i, o) in b.iter_mut().enumerate() {
                *o = ptr::read_volatile((s.base + i) as *const u8);
            }
        }
        fence(Ordering::Acquire);
        Some(u32::from_be_bytes(b))
    }

    /// Publishes a CQE: all bytes but the last, a release fence, then the
    /// last byte (`op_own`), so software that sees the owner bit flip sees
    /// the whole entry.
    pub(crate) fn write_publish(&self, at: usize, entry: &[u8]) -> bool {
        let Some((last, body)) = entry.split_last() else {
            return false;
        };
        if self.sub(at, entry.len()).is_none() {
            return false;
        }
        self.write(at, body);
        fence(Ordering::Release);
        // SAFETY: the byte is inside the span (checked above); volatile so
        // the store is not merged with the body's.
        unsafe { ptr::write_volatile((self.base + at + body.len()) as *mut u8, *last) };
        true
    }
}
