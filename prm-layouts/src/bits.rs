//! Bit-field access at run-time positions (for by-name tools and fixtures).
//!
//! Bits are numbered MSB-first within big-endian dwords, as in the PRM:
//! bit `o` is bit `31 - o % 32` of the big-endian dword at byte `4 * (o / 32)`.
//! Since dwords are stored big-endian this is simply bit `7 - o % 8` of byte
//! `o / 8`, so fields may span any number of bytes.

/// Why a run-time bit access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BitsError {
    /// Width is 0 or above 64.
    BadWidth(u32),
    /// The field ends past the buffer.
    OutOfRange {
        /// First bit past the field.
        end_bit: u64,
        /// Buffer length in bytes.
        len: usize,
    },
    /// The value has bits set above the field width.
    ValueTooWide {
        /// Field width in bits.
        width: u32,
        /// Rejected value.
        value: u64,
    },
}

impl core::fmt::Display for BitsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadWidth(w) => write!(f, "bit width {w} is not in 1..=64"),
            Self::OutOfRange { end_bit, len } => {
                write!(f, "bit range ends at bit {end_bit}, buffer has {len} bytes")
            }
            Self::ValueTooWide { width, value } => {
                write!(f, "value {value:#x} does not fit in {width} bits")
            }
        }
    }
}

impl std::error::Error for BitsError {}

fn check(buf_len: usize, offset_bits: u32, width_bits: u32) -> Result<(), BitsError> {
    if width_bits == 0 || width_bits > 64 {
        return Err(BitsError::BadWidth(width_bits));
    }
    let end_bit = u64::from(offset_bits) + u64::from(width_bits);
    if end_bit > buf_len as u64 * 8 {
        return Err(BitsError::OutOfRange {
            end_bit,
            len: buf_len,
        });
    }
    Ok(())
}

/// Reads `width_bits` (1..=64) at `offset_bits`; `None` if out of range or bad width.
#[must_use]
pub fn get(buf: &[u8], offset_bits: u32, width_bits: u32) -> Option<u64> {
    check(buf.len(), offset_bits, width_bits).ok()?;
    Some(get_unchecked(buf, offset_bits as usize, width_bits))
}

/// Writes `v` into `width_bits` (1..=64) at `offset_bits`, leaving all other bits alone.
///
/// # Errors
/// Bad width, range past the buffer, or `v` wider than the field.
pub fn set(buf: &mut [u8], offset_bits: u32, width_bits: u32, v: u64) -> Result<(), BitsError> {
    check(buf.len(), offset_bits, width_bits)?;
    if width_bits < 64 && v >> width_bits != 0 {
        return Err(BitsError::ValueTooWide {
            width: width_bits,
            value: v,
        });
    }
    set_unchecked(buf, offset_bits as usize, width_bits, v);
    Ok(())
}

/// Like [`set`] but keeps only the low `width_bits` of `v` (the `DEVX_SET` rule).
///
/// # Errors
/// Bad width or range past the buffer.
pub fn set_masked(
    buf: &mut [u8],
    offset_bits: u32,
    width_bits: u32,
    v: u64,
) -> Result<(), BitsError> {
    check(buf.len(), offset_bits, width_bits)?;
    set_unchecked(buf, offset_bits as usize, width_bits, v);
    Ok(())
}

/// Caller guarantees `1 <= width <= 64` and the range lies inside `buf`.
#[inline]
pub(crate) fn get_unchecked(buf: &[u8], off: usize, width: u32) -> u64 {
    let first = off / 8;
    let last = (off + width as usize - 1) / 8;
    let mut acc: u128 = 0;
    for &byte in &buf[first..=last] {
        acc = (acc << 8) | u128::from(byte);
    }
    let nbits = (last - first + 1) * 8;
    let shift = nbits - (off % 8) - width as usize;
    ((acc >> shift) & ((1u128 << width) - 1)) as u64
}

/// Caller guarantees `1 <= width <= 64` and the range lies inside `buf`; `v` is masked.
#[inline]
pub(crate) fn set_unchecked(buf: &mut [u8], off: usize, width: u32, v: u64) {
    let first = off / 8;
    let last = (off + width as usize - 1) / 8;
    let nbits = (last - first + 1) * 8;
    let shift = nbits - (off % 8) - width as usize;
    let mask = ((1u128 << width) - 1) << shift;
    let mut acc: u128 = 0;
    for &byte in &buf[first..=last] {
        acc = (acc << 8) | u128::from(byte);
    }
    acc = (acc & !mask) | ((u128::from(v) << shift) & mask);
    for (i, byte) in buf[first..=last].iter_mut().rev().enumerate() {
        *byte = (acc >> (8 * i)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example() {
        // cqc: log_cq_size at 0x63/5 and uar_page at 0x68/24 share dword 3.
        let mut b = [0u8; 64];
        set(&mut b, 0x63, 5, 5).unwrap();
        set(&mut b, 0x68, 24, 0x123).unwrap();
        assert_eq!(&b[12..16], &[0x05, 0x00, 0x01, 0x23]);
        assert_eq!(get(&b, 0x63, 5), Some(5));
        assert_eq!(get(&b, 0x68, 24), Some(0x123));
    }

    #[test]
    fn refusals() {
        let mut b = [0u8; 8];
        assert_eq!(get(&b, 0, 65), None);
        assert_eq!(get(&b, 1, 64), None);
        assert!(matches!(
            set(&mut b, 60, 5, 1),
            Err(BitsError::OutOfRange { .. })
        ));
        assert!(matches!(
            set(&mut b, 0, 4, 16),
            Err(BitsError::ValueTooWide { .. })
        ));
        set_masked(&mut b, 0, 4, 0x1f).unwrap();
        assert_eq!(b[0], 0xf0);
    }
}
