//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial value and
//! final XOR all ones), the CRC the ICRC uses; table-driven, sixteen bytes
//! a step.

const POLY: u32 = 0xedb8_8320;

/// Bytes one step takes.
const STEP: usize = 16;

/// `TABLES[k][b]`: the CRC contribution of byte `b` followed by `k` zero
/// bytes (slicing-by-16).
static TABLES: [[u32; 256]; STEP] = tables();

const fn tables() -> [[u32; 256]; STEP] {
    let mut t = [[0u32; 256]; STEP];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 { POLY ^ (c >> 1) } else { c >> 1 };
            bit += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < STEP {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// A running CRC-32.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crc32(u32);

impl Default for Crc32 {
    fn default() -> Crc32 {
        Crc32::new()
    }
}

impl Crc32 {
    pub(crate) const fn new() -> Crc32 {
        Crc32(u32::MAX)
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        let t = &TABLES;
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        // Byte `k` of a step meets the table of the bytes after it.
        let fold = |w: u32, hi: usize| {
            t[hi][(w & 0xff) as usize]
                ^ t[hi - 1][((w >> 8) & 0xff) as usize]
                ^ t[hi - 2][((w >> 16) & 0xff) as usize]
                ^ t[hi - 3][(w >> 24) as usize]
        };
        let mut c = self.0;
        let mut chunks = data.chunks_exact(STEP);
        for ch in &mut chunks {
            c = fold(c ^ word(&ch[0..4]), 15)
                ^ fold(word(&ch[4..8]), 11)
                ^ fold(word(&ch[8..12]), 7)
                ^ fold(word(&ch[12..16]), 3);
        }
        for &b in chunks.remainder() {
            c = (c >> 8) ^ t[0][((c ^ u32::from(b)) & 0xff) as usize];
        }
        self.0 = c;
    }

    pub(crate) fn finish(self) -> u32 {
        !self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Crc32;

    #[test]
    fn standard_check_value() {
        let mut c = Crc32::new();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0xcbf4_3926);
    }

    #[test]
    fn tables_match_the_bitwise_definition() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 1000] {
            let mut want = u32::MAX;
            for &b in &data[..len] {
                want ^= u32::from(b);
                for _ in 0..8 {
                    want = if want & 1 != 0 {
                        super::POLY ^ (want >> 1)
                    } else {
                        want >> 1
                    };
                }
            }
            let mut c = Crc32::new();
            c.update(&data[..len]);
            assert_eq!(c.finish(), !want, "{len} bytes");
        }
    }

    #[test]
    fn split_updates_match_one_update() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut whole = Crc32::new();
        whole.update(&data);
        for cut in [0, 1, 7, 8, 9, 500, 999, 1000] {
            let mut c = Crc32::new();
            c.update(&data[..cut]);
            c.update(&data[cut..]);
            assert_eq!(c.finish(), whole.finish(), "cut at {cut}");
        }
    }
}
