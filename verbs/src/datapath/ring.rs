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
    #[inline(always)]
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

    /// Where the ring starts.
    pub(crate) fn addr(&self) -> usize {
        self.addr
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
        if data.len() <= self.len() - start {
            // SAFETY: `start + data.len() ≤ len`: inside the mapping; `data`
            // is caller memory, never the ring. One copy of the caller's
            // length, which the compiler may know, where the split below
            // has two of unknown lengths. Ordering as in `write_seg`.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.at(start), data.len());
            }
            return;
        }
        let first = self.len() - start;
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

impl Ring64 {
    /// Copies `data` starting at ring offset `off`, which lies in `block`,
    /// as [`Ring::write_bytes`] does, but in pieces: up to the end of
    /// `block`, then the rest from the next block's start. So no store
    /// straddles two blocks (two cache lines) where the data does, the
    /// first piece goes where `block` was already found, and where the
    /// caller's length and the offset within the block are known, as for a
    /// WQE's inline data, the pieces are copies of fixed sizes.
    #[inline(always)]
    pub(crate) fn write_blocks(&self, block: Entry64, off: usize, data: &[u8]) {
        let n = (64 - off % 64).min(data.len());
        let (head, tail) = data.split_at(n);
        block.write_bytes(off % 64, head);
        if tail.len() > 64 {
            self.0.write_bytes(off + n, tail);
        } else if !tail.is_empty() {
            // A non-empty tail starts the next block (`off + n` is a
            // multiple of 64) and fits in it.
            self.next64(block).write_bytes(0, tail);
        }
    }
}

/// One 64-byte entry of a [`Ring`] (a CQE, or a WQE basic block), located
/// once so its fields are read or written without wrapping each offset again.
/// Made only by [`Ring64::entry64`] and [`Run64::get`], so it always lies
/// inside its ring, a multiple of 64 bytes from the (16-aligned) start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry64 {
    addr: usize,
}

/// A [`Ring`] of whole 64-byte entries (a send queue or a CQ): at least 64
/// bytes long, so an entry found by masking an offset always lies inside it.
/// The only ring [`Ring64::entry64`] and [`Ring64::walk64`] are defined on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ring64(Ring);

impl Ring64 {
    /// # Safety
    /// As for [`Ring::new`], with `len` a power of two ≥ 64.
    #[inline(always)]
    pub(crate) unsafe fn new(addr: usize, len: usize) -> Ring64 {
        assert!(len >= 64, "a ring of 64-byte entries holds at least one");
        // SAFETY: the caller vouches for the mapping as `Ring::new` asks.
        Ring64(unsafe { Ring::new(addr, len) })
    }

    /// The 64-byte entry holding offset `off` (a multiple of 64, wrapped).
    #[inline(always)]
    pub(crate) fn entry64(&self, off: usize) -> Entry64 {
        debug_assert!(off.is_multiple_of(64));
        Entry64 {
            addr: self.0.at(off & !63) as usize,
        }
    }

    /// The entry after `e`, the first after the last. Found from where `e`
    /// lies, already wrapped: one add and one mask, where the entry of an
    /// unwrapped offset would keep that offset live as well.
    #[inline(always)]
    pub(crate) fn next64(&self, e: Entry64) -> Entry64 {
        Entry64 {
            addr: self.0.addr + ((e.addr - self.0.addr + 64) & self.0.mask),
        }
    }
}

impl std::ops::Deref for Ring64 {
    type Target = Ring;

    #[inline(always)]
    fn deref(&self) -> &Ring {
        &self.0
    }
}

/// Consecutive 64-byte entries of a [`Ring`] that do not wrap: stepping
/// through them is one pointer increment each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run64 {
    addr: usize,
    len: usize,
}

impl Run64 {
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entry `j` of the run, if it has that many: `j < len` keeps it before
    /// the ring's end.
    #[inline(always)]
    pub(crate) fn get(&self, j: usize) -> Option<Entry64> {
        (j < self.len).then(|| Entry64 {
            addr: self.addr + 64 * j,
        })
    }
}

impl Run64 {
    /// The run's entries beside `out`'s items, pair by pair, as many pairs
    /// as the shorter has: the entry moves with the item, so a loop over
    /// the pairs has one bound, `out`'s end.
    #[inline(always)]
    pub(crate) fn beside<T>(self, out: &mut [T]) -> Beside<'_, T> {
        let n = self.len.min(out.len());
        Beside {
            addr: self.addr,
            items: out[..n].iter_mut(),
        }
    }
}

/// [`Run64::beside`]'s pairs: an entry of the run and an item of the
/// slice. No more items than the run has entries, so each entry lies
/// inside it.
pub(crate) struct Beside<'a, T> {
    /// The next pair's entry.
    addr: usize,
    items: std::slice::IterMut<'a, T>,
}

impl<'a, T> Iterator for Beside<'a, T> {
    type Item = (Entry64, &'a mut T);

    #[inline(always)]
    fn next(&mut self) -> Option<(Entry64, &'a mut T)> {
        let w = self.items.next()?;
        let e = Entry64 { addr: self.addr };
        self.addr += 64;
        Some((e, w))
    }

    #[inline(always)]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl<T> ExactSizeIterator for Beside<'_, T> {}

/// A walk through a [`Ring64`], entry by entry, wrapping at its end: the
/// entry's address, so a step is an add and a compare, with no offset to
/// wrap per entry. Made only by [`Ring64::walk64`]; the entry stays a
/// multiple of 64 bytes from the ring's start and before its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk64 {
    at: usize,
    start: usize,
    end: usize,
}

impl Ring64 {
    /// A walk from offset `off` (a multiple of 64, wrapped) on.
    #[inline(always)]
    pub(crate) fn walk64(&self, off: usize) -> Walk64 {
        Walk64 {
            at: self.entry64(off).addr,
            start: self.0.addr,
            end: self.0.addr + self.len(),
        }
    }
}

impl Walk64 {
    /// The entry the walk is at.
    #[inline(always)]
    pub(crate) fn entry(&self) -> Entry64 {
        Entry64 { addr: self.at }
    }

    /// Moves to the next entry; true when that wrapped to the ring's start.
    #[inline(always)]
    pub(crate) fn step(&mut self) -> bool {
        self.at += 64;
        let wrapped = self.at == self.end;
        if wrapped {
            self.at = self.start;
        }
        wrapped
    }

    /// The entry's index in the ring.
    #[inline(always)]
    pub(crate) fn index(&self) -> usize {
        (self.at - self.start) / 64
    }

    /// The ring walked.
    #[inline(always)]
    pub(crate) fn ring(&self) -> Ring64 {
        Ring64(Ring {
            addr: self.start,
            mask: self.end - self.start - 1,
        })
    }

    /// Up to `max` entries from the walk's entry on, stopping at the
    /// ring's end.
    #[inline(always)]
    pub(crate) fn run64(&self, max: usize) -> Run64 {
        // Whole entries from the walk's to the end: the walk stays before
        // the end, so this is at least 1.
        Run64 {
            addr: self.at,
            len: ((self.end - self.at) / 64).min(max),
        }
    }
}

impl Entry64 {
    /// Byte `at` (< 64) with acquire ordering: the owner byte, after which
    /// the rest of the entry may be read.
    #[inline(always)]
    pub(crate) fn load_acquire(&self, at: usize) -> u8 {
        assert!(at < 64);
        // SAFETY: a byte of a 64-byte entry inside the ring (see `Entry64`); an
        // atomic view of a byte is always aligned, and the device's
        // concurrent store to it is atomic on every target we run on.
        unsafe { AtomicU8::from_ptr((self.addr + at) as *mut u8).load(Ordering::Acquire) }
    }

    /// Stores one 16-byte segment at byte `at` of the entry (rounded down to
    /// a multiple of 16 below 64). Used on WQE blocks, which the device reads
    /// only after the doorbell record store that follows.
    #[inline(always)]
    pub(crate) fn write_seg(&self, at: usize, seg: [u8; 16]) {
        debug_assert!(at < 64 && at.is_multiple_of(16));
        // SAFETY: `at & 48` keeps the 16 bytes inside the 64-byte entry, which
        // lies in the ring a multiple of 64 bytes from its 16-aligned start
        // (see `Entry64`), so they are 16-aligned too; the ordering argument
        // is the one of `Ring::write_seg`.
        unsafe { ((self.addr + (at & 48)) as *mut [u8; 16]).write(seg) }
    }

    /// Stores one big-endian dword at byte `at` of the entry (rounded down
    /// to a multiple of 4 below 64), over what a segment put there. Used on
    /// WQE blocks, as [`Entry64::write_seg`].
    #[inline(always)]
    pub(crate) fn write_dword(&self, at: usize, dword: [u8; 4]) {
        debug_assert!(at < 64 && at.is_multiple_of(4));
        // SAFETY: `at & 60` keeps the 4 bytes inside the 64-byte entry (see
        // `Entry64`); a `[u8; 4]` needs no alignment. The ordering argument
        // is the one of `Ring::write_seg`.
        unsafe { ((self.addr + (at & 60)) as *mut [u8; 4]).write(dword) }
    }

    /// Copies `data` to byte `at` of the entry on (`at` taken below 64),
    /// as much as fits before the entry's end. Used on WQE blocks, as
    /// [`Entry64::write_seg`].
    #[inline(always)]
    pub(crate) fn write_bytes(&self, at: usize, data: &[u8]) {
        let at = at % 64;
        let n = data.len().min(64 - at);
        // SAFETY: `at + n ≤ 64` keeps the copy inside the entry (see
        // `Entry64`); `data` is caller memory, never the ring, so they do
        // not overlap. The ordering argument is the one of
        // `Ring::write_seg`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr + at) as *mut u8, n) }
    }

    /// Reads the big-endian dword at byte `at` of the entry (rounded down to
    /// a multiple of 4 below 64). Used by an SQ's producer on a WQE block it
    /// wrote and has not yet reused.
    #[inline(always)]
    pub(crate) fn read_dword(&self, at: usize) -> [u8; 4] {
        // SAFETY: `at & 60` keeps the 4 bytes inside the 64-byte entry (see
        // `Entry64`); a `[u8; 4]` needs no alignment. The device only reads
        // WQE blocks, and the producer, the one writer, is the reader here.
        unsafe { ((self.addr + (at & 60)) as *const [u8; 4]).read() }
    }

    /// Loads the dword at byte `at` of the entry (rounded down to a
    /// multiple of 4 below 64) as it lies in memory, atomically: for a
    /// reader that is not the ring's consumer, which the device may write
    /// the entry under once the consumer has passed it.
    #[inline(always)]
    pub(crate) fn load_dword(&self, at: usize) -> [u8; 4] {
        // SAFETY: `at & 60` keeps the 4 bytes inside the 64-byte entry,
        // which lies a multiple of 64 bytes from the ring's 16-aligned start
        // (see `Entry64`), so they are 4-aligned; the device's stores to
        // the entry are atomic on every target we run on.
        let word = unsafe { AtomicU32::from_ptr((self.addr + (at & 60)) as *mut u32) };
        word.load(Ordering::Relaxed).to_ne_bytes()
    }

    /// Asks the CPU to fetch, for writing, the cache line `blocks` 64-byte
    /// blocks past this entry: where a WQE a few posts on will go, so its
    /// stores need not wait for the line. Not wrapped at the ring's end:
    /// past it the hint is only wasted.
    #[inline(always)]
    pub(crate) fn prefetch_write_ahead(&self, blocks: usize) {
        let at = self.addr.wrapping_add(64 * blocks);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults, whatever the
        // address, and changes no memory.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
            _mm_prefetch::<_MM_HINT_ET0>(at as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    /// Copies the whole entry out. Call only after
    /// [`Entry64::load_acquire`] showed the entry is ours.
    #[inline(always)]
    pub(crate) fn read64b(&self) -> [u8; 64] {
        // SAFETY: the entry lies in the ring, 16-aligned (see `Entry64`); a
        // `[u8; 64]` needs no alignment. The caller's acquire load of the
        // owner byte orders this read after the device's writes of the entry,
        // and the device does not write it again until the consumer index
        // moves past it, so a plain read does not race. Not volatile: that
        // would force 64 byte loads, where a plain read lets the compiler load
        // only the fields the decoder uses.
        unsafe { (self.addr as *const [u8; 64]).read() }
    }
}

/// A table indexed by a free-running counter, a power of two long: the
/// counter's low bits pick the entry, so every index lands in bounds and
/// needs no check. It always holds at least one entry (a table made for
/// none keeps one that is never used), so masking always lands somewhere;
/// [`Pow2Table::get`] finds nothing in such a table.
pub(crate) struct Pow2Table<T> {
    items: Box<[T]>,
    /// `items.len() - 1`.
    mask: usize,
    /// Entries asked for: `items.len()`, or 0 for a table made for none.
    len: usize,
}

impl<T: Default> Pow2Table<T> {
    /// A table of `n` default entries; `n` is 0 or a power of two
    /// (any other count is rounded up to the next power of two).
    pub(crate) fn new(n: u32) -> Pow2Table<T> {
        debug_assert!(n == 0 || n.is_power_of_two());
        let cap = (n as usize).next_power_of_two().max(1);
        Pow2Table {
            items: (0..cap).map(|_| T::default()).collect(),
            mask: cap - 1,
            len: if n == 0 { 0 } else { cap },
        }
    }
}

impl<T> Pow2Table<T> {
    /// A table of `items`; `None` unless their count is a power of two.
    pub(crate) fn from_items(items: Vec<T>) -> Option<Pow2Table<T>> {
        let n = items.len();
        n.is_power_of_two().then(|| Pow2Table {
            items: items.into_boxed_slice(),
            mask: n - 1,
            len: n,
        })
    }

    /// The entry counter `i` falls on (its low bits).
    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> &T {
        // SAFETY: `items.len()` is `mask + 1` (set together in `new`, never
        // changed), so `i & mask < items.len()`.
        unsafe { self.items.get_unchecked(i & self.mask) }
    }

    /// The table by value: its entries and mask, for a loop to keep in
    /// registers where a reference to the table would be read again after
    /// every store the compiler cannot tell apart from it.
    #[inline(always)]
    pub(crate) fn view(&self) -> Pow2View<'_, T> {
        Pow2View {
            items: &self.items,
            mask: self.mask,
        }
    }

    /// Whether the table was made for no entries.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry counter `i` falls on, if the table was made for any.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        (self.len != 0).then(|| self.at(i))
    }
}

/// A [`Pow2Table`] by value. Made only by [`Pow2Table::view`], so `mask`
/// is always `items.len() - 1`.
pub(crate) struct Pow2View<'a, T> {
    items: &'a [T],
    mask: usize,
}

// By hand: derived, they would ask `T: Copy`.
impl<T> Clone for Pow2View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Pow2View<'_, T> {}

impl<'a, T> Pow2View<'a, T> {
    /// The entry counter `i` falls on (its low bits).
    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> &'a T {
        // SAFETY: `mask` is `items.len() - 1` (see `Pow2View`), so
        // `i & mask < items.len()`.
        unsafe { self.items.get_unchecked(i & self.mask) }
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

    /// Reads counter `which` back (host order): for tests and tools, and
    /// for a QP's reset, which looks for its completions from the CQ's
    /// published consumer index on.
    pub(crate) fn load(&self, which: usize) -> u32 {
        debug_assert!(which < 2);
        // SAFETY: as in `store`.
        u32::from_be(unsafe {
            AtomicU32::from_ptr((self.addr as *mut u32).add(which)).load(Ordering::Acquire)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_pairs_as_many_as_the_shorter_has() {
        #[repr(align(64))]
        struct Entries([u8; 64 * 4]);
        let buf = Entries([0; 64 * 4]);
        // SAFETY: a local, aligned buffer of four entries, alive for the
        // test.
        let ring = unsafe { Ring64::new(buf.0.as_ptr() as usize, buf.0.len()) };
        for (off, out_len, pairs) in [(0, 8, 4), (64 * 2, 8, 2), (0, 3, 3), (64 * 3, 0, 0)] {
            let mut out = vec![0u64; out_len];
            let run = ring.walk64(off).run64(out_len);
            let mut it = run.beside(&mut out);
            assert_eq!(it.len(), pairs);
            let mut k = 0;
            while let Some((e, w)) = it.next() {
                assert_eq!(e.addr, ring.addr + off + 64 * k);
                *w = k as u64 + 1;
                k += 1;
                assert_eq!(it.len(), pairs - k);
            }
            assert_eq!(k, pairs);
            let want: Vec<u64> = (1..=pairs as u64)
                .chain(std::iter::repeat(0))
                .take(out_len)
                .collect();
            assert_eq!(out, want);
        }
    }
}
