//! Fixed-position accessors used by the generated layout code.
//!
//! Positions are compile-time constants at every call site and the buffers
//! are fixed-size arrays, so after inlining the index checks fold away.

/// Reads `width` bits ending `shift` bits above the LSB of the big-endian dword at `byte`.
///
/// A byte or 16-bit field on byte boundaries is read from just its bytes: a CQE's 16-bit
/// `wqe_counter` is then one 16-bit load, which a preceding store of the
/// neighbouring owner byte cannot stall (a wider load spanning two stores
/// waits for both to reach the cache instead of being forwarded).
#[inline(always)]
pub(crate) fn get32<const N: usize>(b: &[u8; N], byte: usize, shift: u32, width: u32) -> u32 {
    if shift % 8 == 0 && (width == 8 || width == 16) {
        // Big-endian: the field's most significant byte comes first.
        let first = byte + ((32 - shift - width) / 8) as usize;
        return if width == 8 {
            u32::from(b[first])
        } else {
            u32::from(u16::from_be_bytes([b[first], b[first + 1]]))
        };
    }
    let d = u32::from_be_bytes([b[byte], b[byte + 1], b[byte + 2], b[byte + 3]]);
    (d >> shift) & (u32::MAX >> (32 - width))
}

/// Read-modify-write of one field inside a big-endian dword; `v` is masked to `width`.
#[inline(always)]
pub(crate) fn set32<const N: usize>(b: &mut [u8; N], byte: usize, shift: u32, width: u32, v: u32) {
    let mask = (u32::MAX >> (32 - width)) << shift;
    let d = u32::from_be_bytes([b[byte], b[byte + 1], b[byte + 2], b[byte + 3]]);
    let d = (d & !mask) | ((v << shift) & mask);
    b[byte..byte + 4].copy_from_slice(&d.to_be_bytes());
}

/// Reads a big-endian u64 at `byte`.
#[inline(always)]
pub(crate) fn get64<const N: usize>(b: &[u8; N], byte: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[byte..byte + 8]);
    u64::from_be_bytes(w)
}

/// Writes a big-endian u64 at `byte`.
#[inline(always)]
pub(crate) fn set64<const N: usize>(b: &mut [u8; N], byte: usize, v: u64) {
    b[byte..byte + 8].copy_from_slice(&v.to_be_bytes());
}

/// Any field of at most 64 bits at any bit position (crossing dwords).
#[inline]
pub(crate) fn get_span<const N: usize>(b: &[u8; N], off: usize, width: u32) -> u64 {
    crate::bits::get_unchecked(b, off, width)
}

/// Writes a field of at most 64 bits at any bit position; `v` is masked to `width`.
#[inline]
pub(crate) fn set_span<const N: usize>(b: &mut [u8; N], off: usize, width: u32, v: u64) {
    crate::bits::set_unchecked(b, off, width, v);
}

/// `M` bytes of `a` starting at `off`.
#[inline(always)]
pub(crate) fn sub<const N: usize, const M: usize>(a: &[u8; N], off: usize) -> &[u8; M] {
    a[off..off + M].try_into().expect("constant sub-range")
}

/// `M` writable bytes of `a` starting at `off`.
#[inline(always)]
pub(crate) fn sub_mut<const N: usize, const M: usize>(a: &mut [u8; N], off: usize) -> &mut [u8; M] {
    (&mut a[off..off + M])
        .try_into()
        .expect("constant sub-range")
}
