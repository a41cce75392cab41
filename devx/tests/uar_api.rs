//! `Uar` through the public API: doorbells land in the page, bad offsets are
//! refused with an argument error instead of a stray store.

use devx::{Device, Uar};

#[test]
fn doorbell_offsets_are_checked() {
    let ctx = Device::emulated("sim40").unwrap().open().unwrap();
    let uar = Uar::alloc(&ctx).unwrap();
    uar.write64(devx::uar::CQ_DOORBELL_OFFSET, 0x0102_0304_0506_0708)
        .unwrap();
    for bad in [0x801, 4096, usize::MAX - 7] {
        let e = uar.write64(bad, 1).unwrap_err();
        assert!(e.is_argument(), "{e}");
        assert!(e.to_string().contains("doorbell offset"), "{e}");
    }
}
