//! Typed accessors agree with the metadata path (generated checks).

#[allow(clippy::unnecessary_cast, clippy::cast_possible_truncation)]
mod generated {
    use prm_layouts::*;
    include!(concat!(env!("OUT_DIR"), "/typed_checks.rs"));
}

#[test]
fn typed_matches_dynamic() {
    for seed in [1, 0x9e37_79b9_7f4a_7c15, 0xdead_beef] {
        generated::typed_vs_dynamic(seed);
    }
}
