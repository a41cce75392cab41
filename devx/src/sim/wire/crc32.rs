//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial value and
//! final XOR all ones), the CRC the ICRC uses; table-driven, sixteen bytes
//! a step (the tail eight and four), or carry-less multiplication folding
//! where the CPU has it.

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
        #[cfg(target_arch = "x86_64")]
        if data.len() >= clmul::MIN_LEN
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1")
        {
            let wide = data.len() >= clmul::WIDE_MIN_LEN
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
                && std::arch::is_x86_feature_detected!("avx512f");
            // SAFETY: the CPU has the instructions each function uses.
            let (c, rest) = unsafe {
                if wide {
                    clmul::fold_wide(self.0, data)
                } else {
                    clmul::fold(self.0, data)
                }
            };
            self.0 = c;
            self.update_tables(rest);
            return;
        }
        self.update_tables(data);
    }

    fn update_tables(&mut self, data: &[u8]) {
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
        // The tail (headers are often shorter than a step): eight, then
        // four bytes a step, then single bytes.
        let mut rest = chunks.remainder();
        if rest.len() >= 8 {
            c = fold(c ^ word(&rest[0..4]), 7) ^ fold(word(&rest[4..8]), 3);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            c = fold(c ^ word(&rest[0..4]), 3);
            rest = &rest[4..];
        }
        for &b in rest {
            c = (c >> 8) ^ t[0][((c ^ u32::from(b)) & 0xff) as usize];
        }
        self.0 = c;
    }

    pub(crate) fn finish(self) -> u32 {
        !self.0
    }
}

/// Carry-less multiplication folding (Intel, "Fast CRC Computation for
/// Generic Polynomials Using PCLMULQDQ", bit-reflected variant): sixty-four
/// bytes a step in four lanes, then one lane, then a Barrett reduction.
/// Where the CPU multiplies four lanes in one 512-bit instruction
/// (VPCLMULQDQ), long inputs first fold 256 bytes a step in sixteen lanes.
#[cfg(target_arch = "x86_64")]
mod clmul {
    use std::arch::x86_64::{
        __m128i, __m512i, _mm512_broadcast_i32x4, _mm512_clmulepi64_epi128,
        _mm512_extracti32x4_epi32, _mm512_loadu_si512, _mm512_ternarylogic_epi64, _mm512_xor_si512,
        _mm512_zextsi128_si512, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtsi32_si128,
        _mm_extract_epi32, _mm_loadu_si128, _mm_set_epi32, _mm_set_epi64x, _mm_srli_si128,
        _mm_xor_si128,
    };

    /// Shorter inputs go through the tables.
    pub(super) const MIN_LEN: usize = 64;
    /// Shorter inputs take the 128-bit folding.
    pub(super) const WIDE_MIN_LEN: usize = 256;

    // x^(16*128+32) mod P and x^(16*128-32) mod P: folding across sixteen
    // lanes (four 512-bit registers).
    const K16_1: i64 = 0x1_1542_778a;
    const K16_2: i64 = 0x1_322d_1430;

    // x^(4*128+32) mod P and x^(4*128-32) mod P: folding across four lanes.
    const K1: i64 = 0x1_5444_2bd4;
    const K2: i64 = 0x1_c6e4_1596;
    // x^(128+32) mod P and x^(128-32) mod P: folding one lane.
    const K3: i64 = 0x1_7519_97d0;
    const K4: i64 = 0x0_ccaa_009e;
    // x^64 mod P: 96 to 64 bits.
    const K5: i64 = 0x1_63cd_6124;
    /// The polynomial and μ = x^64 / P, bit-reflected.
    const P_X: i64 = 0x1_db71_0641;
    const MU: i64 = 0x1_f701_1641;

    /// Folds `data` (at least [`MIN_LEN`] bytes) into the running CRC
    /// register `crc`; returns the register and the bytes left (under 16).
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE4.1.
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    pub(super) unsafe fn fold(crc: u32, mut data: &[u8]) -> (u32, &[u8]) {
        let mut x3 = get(&mut data);
        let mut x2 = get(&mut data);
        let mut x1 = get(&mut data);
        let mut x0 = get(&mut data);
        x3 = _mm_xor_si128(x3, _mm_cvtsi32_si128(crc as i32));
        let k1k2 = _mm_set_epi64x(K2, K1);
        while data.len() >= 64 {
            x3 = reduce(x3, get(&mut data), k1k2);
            x2 = reduce(x2, get(&mut data), k1k2);
            x1 = reduce(x1, get(&mut data), k1k2);
            x0 = reduce(x0, get(&mut data), k1k2);
        }
        // SAFETY: the caller's CPU has what `finish` needs.
        unsafe { finish([x3, x2, x1, x0], data) }
    }

    /// [`fold`], with sixteen lanes first: `data` has at least
    /// [`WIDE_MIN_LEN`] bytes.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ, SSE4.1, VPCLMULQDQ and AVX-512F.
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1,vpclmulqdq,avx512f")]
    pub(super) unsafe fn fold_wide(crc: u32, mut data: &[u8]) -> (u32, &[u8]) {
        let mut z0 = get_wide(&mut data);
        let mut z1 = get_wide(&mut data);
        let mut z2 = get_wide(&mut data);
        let mut z3 = get_wide(&mut data);
        z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(crc as i32)));
        let k16 = _mm512_broadcast_i32x4(_mm_set_epi64x(K16_2, K16_1));
        while data.len() >= 256 {
            z0 = reduce_wide(z0, get_wide(&mut data), k16);
            z1 = reduce_wide(z1, get_wide(&mut data), k16);
            z2 = reduce_wide(z2, get_wide(&mut data), k16);
            z3 = reduce_wide(z3, get_wide(&mut data), k16);
        }
        // Four lanes apart, as in one register.
        let k4 = _mm512_broadcast_i32x4(_mm_set_epi64x(K2, K1));
        let mut z = reduce_wide(z0, z1, k4);
        z = reduce_wide(z, z2, k4);
        z = reduce_wide(z, z3, k4);
        while data.len() >= 64 {
            z = reduce_wide(z, get_wide(&mut data), k4);
        }
        let lanes = [
            _mm512_extracti32x4_epi32::<0>(z),
            _mm512_extracti32x4_epi32::<1>(z),
            _mm512_extracti32x4_epi32::<2>(z),
            _mm512_extracti32x4_epi32::<3>(z),
        ];
        // SAFETY: the caller's CPU has what `finish` needs.
        unsafe { finish(lanes, data) }
    }

    /// Folds four lanes (the earliest first) into one, then the whole
    /// 16-byte blocks of `data`, and reduces to the CRC register; returns
    /// it and the bytes left (under 16).
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    unsafe fn finish([x3, x2, x1, x0]: [__m128i; 4], mut data: &[u8]) -> (u32, &[u8]) {
        let k3k4 = _mm_set_epi64x(K4, K3);
        let mut x = reduce(x3, x2, k3k4);
        x = reduce(x, x1, k3k4);
        x = reduce(x, x0, k3k4);
        while data.len() >= 16 {
            x = reduce(x, get(&mut data), k3k4);
        }
        // 128 to 96, then to 64 bits.
        let low32 = _mm_set_epi32(0, 0, 0, !0);
        let x = _mm_xor_si128(_mm_clmulepi64_si128(x, k3k4, 0x10), _mm_srli_si128(x, 8));
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, K5), 0x00),
            _mm_srli_si128(x, 4),
        );
        // Barrett reduction to 32 bits.
        let pu = _mm_set_epi64x(MU, P_X);
        let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pu, 0x10);
        let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pu, 0x00);
        let c = _mm_extract_epi32(_mm_xor_si128(x, t2), 1) as u32;
        (c, data)
    }

    #[target_feature(enable = "pclmulqdq,sse2")]
    unsafe fn reduce(a: __m128i, b: __m128i, keys: __m128i) -> __m128i {
        let t1 = _mm_clmulepi64_si128(a, keys, 0x00);
        let t2 = _mm_clmulepi64_si128(a, keys, 0x11);
        _mm_xor_si128(_mm_xor_si128(b, t1), t2)
    }

    /// [`reduce`] in each of four lanes.
    #[target_feature(enable = "vpclmulqdq,avx512f")]
    unsafe fn reduce_wide(a: __m512i, b: __m512i, keys: __m512i) -> __m512i {
        let t1 = _mm512_clmulepi64_epi128::<0x00>(a, keys);
        let t2 = _mm512_clmulepi64_epi128::<0x11>(a, keys);
        // Three-way exclusive or.
        _mm512_ternarylogic_epi64::<0x96>(b, t1, t2)
    }

    /// The next 64 bytes of `a` (it has them).
    #[target_feature(enable = "avx512f")]
    unsafe fn get_wide(a: &mut &[u8]) -> __m512i {
        let (head, rest) = a.split_at(64);
        // SAFETY: `head` is 64 readable bytes; the load is unaligned.
        let r = unsafe { _mm512_loadu_si512(head.as_ptr().cast()) };
        *a = rest;
        r
    }

    /// The next 16 bytes of `a` (it has them).
    #[target_feature(enable = "sse2")]
    unsafe fn get(a: &mut &[u8]) -> __m128i {
        let (head, rest) = a.split_at(16);
        // SAFETY: `head` is 16 readable bytes; the load is unaligned.
        let r = unsafe { _mm_loadu_si128(head.as_ptr().cast()) };
        *a = rest;
        r
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
        let data: Vec<u8> = (0..4200u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [
            0, 1, 3, 4, 5, 8, 11, 12, 13, 15, 16, 17, 20, 24, 28, 31, 32, 33, 63, 64, 65, 76, 92,
            127, 128, 129, 200, 255, 256, 257, 271, 319, 320, 383, 511, 512, 513, 1000, 4096, 4161,
            4200,
        ] {
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

    /// Where the CPU has both, the sixteen-lane folding gives what the
    /// four-lane one gives (both checked against the definition above only
    /// through the one `update` picks).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_folding_matches_narrow_folding() {
        let wide = std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("avx512f");
        let narrow = std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1");
        if !(wide && narrow) {
            return;
        }
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        for len in [
            256, 257, 300, 319, 320, 511, 512, 575, 576, 1000, 2048, 3000,
        ] {
            for crc in [u32::MAX, 0, 0x1234_5678] {
                // SAFETY: the CPU has both instruction sets (checked above).
                let (a, ra) = unsafe { super::clmul::fold_wide(crc, &data[..len]) };
                // SAFETY: as above.
                let (b, rb) = unsafe { super::clmul::fold(crc, &data[..len]) };
                assert_eq!((a, ra), (b, rb), "{len} bytes from {crc:#x}");
            }
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
