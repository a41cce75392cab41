//! Big-endian integers at byte offsets of a raw buffer, for the bytes no
//! layout describes (network headers, WQE dwords read in a hot loop, ioctl
//! payloads).
//!
//! Reads past the end of the buffer give 0, the way a short mailbox reads
//! as zero-padded: callers check lengths where a short buffer is an error.

/// The big-endian u16 at byte `at`, or 0 when `buf` ends before it.
#[inline]
#[must_use]
pub fn be16(buf: &[u8], at: usize) -> u16 {
    at.checked_add(2)
        .and_then(|end| buf.get(at..end))
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// The big-endian u32 at byte `at`, or 0 when `buf` ends before it.
#[inline]
#[must_use]
pub fn be32(buf: &[u8], at: usize) -> u32 {
    at.checked_add(4)
        .and_then(|end| buf.get(at..end))
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The big-endian u64 at byte `at`, or 0 when `buf` ends before it.
#[inline]
#[must_use]
pub fn be64(buf: &[u8], at: usize) -> u64 {
    at.checked_add(8)
        .and_then(|end| buf.get(at..end))
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_and_zero_past_the_end() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(be16(&b, 0), 0x0102);
        assert_eq!(be32(&b, 1), 0x0203_0405);
        assert_eq!(be64(&b, 1), 0x0203_0405_0607_0809);
        assert_eq!(be16(&b, 8), 0);
        assert_eq!(be32(&b, 6), 0);
        assert_eq!(be64(&b, 2), 0);
        assert_eq!(be32(&b, usize::MAX), 0);
    }
}
