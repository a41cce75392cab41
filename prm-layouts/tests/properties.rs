//! Properties of every field of every layout, through the metadata path.

use prm_layouts::{bits, registry, FieldKind, FieldMeta, FieldValue, LayoutError, LayoutMeta};
use proptest::prelude::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic background patterns.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

fn mask(width: u32) -> u64 {
    if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Every bit outside `[off, off + width)` is the same in `a` and `b`.
fn same_outside(a: &[u8], b: &[u8], off: u32, width: u32) -> bool {
    let (first, last) = ((off / 8) as usize, ((off + width - 1) / 8) as usize);
    if a[..first] != b[..first] || a[last + 1..] != b[last + 1..] {
        return false;
    }
    (first..=last).all(|i| {
        let mut keep = 0xffu8;
        for bit in 0..8u32 {
            let abs = i as u32 * 8 + bit;
            if abs >= off && abs < off + width {
                keep &= !(0x80 >> bit);
            }
        }
        a[i] & keep == b[i] & keep
    })
}

fn check_field(meta: &LayoutMeta, f: &FieldMeta, base: &[u8], rng: &mut Rng) {
    let mut buf = base.to_vec();
    match f.kind {
        FieldKind::Scalar => {
            let m = mask(f.width_bits);
            for v in [0, m, rng.next() & m, 1u64 << (f.width_bits - 1)] {
                meta.set(&mut buf, f.name, v).unwrap();
                assert_eq!(
                    meta.get(&buf, f.name).unwrap(),
                    FieldValue::Scalar(v),
                    "{}.{}",
                    meta.name,
                    f.name
                );
                assert_eq!(bits::get(&buf, f.offset_bits, f.width_bits), Some(v));
                assert!(
                    same_outside(base, &buf, f.offset_bits, f.width_bits),
                    "{}.{} spills",
                    meta.name,
                    f.name
                );
            }
            if f.width_bits < 64 {
                let before = buf.clone();
                let err = meta.set(&mut buf, f.name, m + 1).unwrap_err();
                assert!(matches!(err, LayoutError::ValueTooWide { .. }), "{err}");
                assert!(bits::set(&mut buf, f.offset_bits, f.width_bits, m + 1).is_err());
                assert_eq!(buf, before, "rejected value must not write");
                // The masking path keeps the low bits.
                bits::set_masked(&mut buf, f.offset_bits, f.width_bits, (m + 1) | 1).unwrap();
                assert_eq!(bits::get(&buf, f.offset_bits, f.width_bits), Some(1));
            }
        }
        FieldKind::Bytes => {
            let mut v = vec![0u8; f.width_bits as usize / 8];
            rng.fill(&mut v);
            meta.set_value(&mut buf, f.name, &FieldValue::Bytes(v.clone()))
                .unwrap();
            assert_eq!(meta.get(&buf, f.name).unwrap(), FieldValue::Bytes(v));
            assert!(
                same_outside(base, &buf, f.offset_bits, f.width_bits),
                "{}.{} spills",
                meta.name,
                f.name
            );
        }
    }
}

#[test]
fn every_field_sets_gets_and_stays_in_bounds() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut checked = 0usize;
    for meta in registry() {
        let mut base = vec![0u8; meta.size_bytes()];
        rng.fill(&mut base);
        for f in meta.fields {
            check_field(meta, f, &base, &mut rng);
            checked += 1;
        }
    }
    assert!(checked > 10_000, "only {checked} fields");
}

#[test]
fn decode_encode_round_trip() {
    let mut rng = Rng(42);
    for meta in registry() {
        let mut src = vec![0u8; meta.size_bytes()];
        rng.fill(&mut src);
        let all = meta.decode(&src, true).unwrap();
        assert_eq!(all.len(), meta.fields.len());
        let mut dst = vec![0u8; meta.size_bytes()];
        for (name, v) in &all {
            meta.set_value(&mut dst, name, v).unwrap();
        }
        assert_eq!(meta.decode(&dst, true).unwrap(), all, "{}", meta.name);
        // Only reserved bits may differ, and those stay zero in `dst`.
        for f in meta.fields {
            assert_eq!(
                bits::get(&dst, f.offset_bits, f.width_bits.min(64)),
                bits::get(&src, f.offset_bits, f.width_bits.min(64)),
            );
        }
        let nz = meta.decode(&dst, false).unwrap();
        assert!(nz.iter().all(|(_, v)| !v.is_zero()));
    }
}

fn field_choice() -> impl Strategy<Value = (&'static LayoutMeta, &'static FieldMeta)> {
    let scalar_layouts: Vec<&'static LayoutMeta> = registry()
        .iter()
        .copied()
        .filter(|m| !m.fields.is_empty())
        .collect();
    (0..scalar_layouts.len(), any::<prop::sample::Index>()).prop_map(move |(li, fi)| {
        let m = scalar_layouts[li];
        (m, &m.fields[fi.index(m.fields.len())])
    })
}

proptest! {
    #[test]
    fn random_field_round_trip((meta, f) in field_choice(), seed in any::<u64>(), v in any::<u64>()) {
        let mut rng = Rng(seed | 1);
        let mut base = vec![0u8; meta.size_bytes()];
        rng.fill(&mut base);
        let mut buf = base.clone();
        match f.kind {
            FieldKind::Scalar => {
                let m = mask(f.width_bits);
                let res = meta.set(&mut buf, f.name, v);
                if v & !m != 0 {
                    prop_assert!(res.is_err());
                    prop_assert_eq!(&buf, &base);
                } else {
                    prop_assert!(res.is_ok());
                    prop_assert_eq!(meta.get(&buf, f.name).unwrap(), FieldValue::Scalar(v));
                }
                meta.set(&mut buf, f.name, v & m).unwrap();
                prop_assert_eq!(bits::get(&buf, f.offset_bits, f.width_bits), Some(v & m));
                prop_assert!(same_outside(&base, &buf, f.offset_bits, f.width_bits));
            }
            FieldKind::Bytes => {
                let bytes: Vec<u8> = (0..f.width_bits / 8).map(|i| (v >> (i % 8)) as u8).collect();
                meta.set_value(&mut buf, f.name, &FieldValue::Bytes(bytes.clone())).unwrap();
                prop_assert_eq!(meta.get(&buf, f.name).unwrap(), FieldValue::Bytes(bytes));
                prop_assert!(same_outside(&base, &buf, f.offset_bits, f.width_bits));
            }
        }
    }

    #[test]
    fn bits_any_alignment(off in 0u32..256, width in 1u32..=64, v in any::<u64>(), seed in any::<u64>()) {
        let mut rng = Rng(seed | 1);
        let mut base = vec![0u8; 48];
        rng.fill(&mut base);
        let mut buf = base.clone();
        let v = v & mask(width);
        bits::set(&mut buf, off, width, v).unwrap();
        prop_assert_eq!(bits::get(&buf, off, width), Some(v));
        prop_assert!(same_outside(&base, &buf, off, width));
        prop_assert!(bits::get(&buf, 48 * 8 - width + 1, width).is_none());
    }
}
