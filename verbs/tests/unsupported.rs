//! The channel-interface verbs mlx5 does not provide answer Unsupported with
//! a reason, and send nothing to the device.

mod common;

use verbs::{AccessFlags, PhysBuf, SpecialQp};

#[test]
fn unsupported_verbs_say_why() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.reg_mr(vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    let before = sim.commands_executed();

    let e = ctx.alloc_rdd().unwrap_err();
    assert!(e.is_unsupported());
    assert_eq!(
        e.to_string(),
        "alloc_rdd is not supported: RD transport is not implemented by mlx5 devices \
         (no reliable datagram domains or EE contexts)"
    );
    for (e, why) in [
        (
            ctx.create_spl_qp(&pd, SpecialQp::Gsi, 1)
                .map(|_| ())
                .unwrap_err(),
            "special QPs",
        ),
        (
            ctx.create_spl_qp(&pd, SpecialQp::Smi, 1)
                .map(|_| ())
                .unwrap_err(),
            "QP0/QP1",
        ),
        (
            ctx.local_mad(1, &[0u8; 256]).map(|_| ()).unwrap_err(),
            "MAD_IFC",
        ),
        (
            pd.register_pmr(
                &[PhysBuf {
                    addr: 0x1000,
                    size: 4096,
                }],
                0,
            )
            .unwrap_err(),
            "physical",
        ),
        (pd.modify_pmr(&[], 0).unwrap_err(), "UMEM-backed"),
    ] {
        assert!(e.is_unsupported(), "{e}");
        assert!(e.to_string().contains(why), "{e}");
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
    }
    // A bad port is still an argument error first.
    assert!(ctx.local_mad(7, &[0u8; 256]).unwrap_err().is_argument());
    // mlx5 SRQs do not resize; the limit is what modify_srq changes.
    let srq = pd.create_srq(&verbs::SrqInit::new(8, 1)).unwrap();
    let n = sim.commands_executed();
    let e = srq.resize(100).unwrap_err();
    assert!(
        e.is_unsupported() && e.to_string().contains("no resize"),
        "{e}"
    );
    assert_eq!(sim.commands_executed(), n);
    // Shared MRs map naturally: a second key on the same UMEM.
    let shared = mr.register_shared(&pd, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(shared.umem_id(), mr.umem_id());
    drop(shared);
    mr.rereg(
        Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
        None,
    )
    .unwrap();
    assert!(sim.commands_executed() > before);
}
