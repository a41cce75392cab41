//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial value and
//! final XOR all ones), the CRC the ICRC uses; table-driven, eight bytes a
//! step.

const POLY: u32 = 0xedb8_8320;

/// `TABLES[k][b]`: the CRC contribution of byte `b` followed by `k` zero
/// bytes (slicing-by-8).
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
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
    while k < 8 {
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
        let mut c = self.0;
        let mut chunks = data.chunks_exact(8);
        for ch in &mut chunks {
            let lo = c ^ u32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]);
            c = TABLES[7][(lo & 0xff) as usize]
                ^ TABLES[6][((lo >> 8) & 0xff) as usize]
                ^ TABLES[5][((lo >> 16) & 0xff) as usize]
                ^ TABLES[4][(lo >> 24) as usize]
                ^ TABLES[3][usize::from(ch[4])]
                ^ TABLES[2][usize::from(ch[5])]
                ^ TABLES[1][usize::from(ch[6])]
                ^ TABLES[0][usize::from(ch[7])];
        }
        for &b in chunks.remainder() {
            c = (c >> 8) ^ TABLES[0][((c ^ u32::from(b)) & 0xff) as usize];
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
