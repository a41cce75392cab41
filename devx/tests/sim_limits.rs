//! Capability limits: a device built from a smaller profile refuses what
//! exceeds it, with LIM for counts and BAD_PARAM for sizes.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::sim::{ObjKind, Profile};
use devx::ProviderContext;
use prm_layouts::*;
use support::*;

/// A device of the test's own with a small profile.
fn small() -> std::sync::Arc<devx::sim::SimDevice> {
    let p = Profile {
        log_max_pd: 3,
        log_max_qp_sz: 6,
        log_max_cq: 2,
        log_max_uctx: 1,
        log_max_umem: 5,
        num_comp_vectors: 2,
        ..Profile::connectx6_dx()
    };
    devx::sim::SimDevice::new(p)
}

#[test]
fn counts_and_sizes_follow_the_profile() {
    let dev = small();
    let env = Env::on(dev.clone());
    let mut pds = Vec::new();
    for _ in 0..8 {
        pds.push(env.pd().0);
    }
    let e = env
        .create(&hdr(Opcode::AllocPd.raw(), 0, 16), 16)
        .unwrap_err();
    check(&e, syn::table_full(ObjKind::Pd));
    env.destroy(pds.pop().unwrap()).unwrap();
    env.pd();

    // QUERY_HCA_CAP reports the same profile the firmware enforces.
    let caps = env
        .general(
            &hdr(Opcode::QueryHcaCap.raw(), 1, 16),
            QueryHcaCapOut::SIZE_BYTES,
        )
        .unwrap();
    let c = QueryHcaCapOut::from_slice(&caps).unwrap();
    assert_eq!(c.capability().cmd_hca_cap().log_max_pd(), 3);
    assert_eq!(c.capability().cmd_hca_cap().log_max_qp_sz(), 6);

    // Completion vectors beyond the profile's: ENOENT.
    assert!(env.ctx.query_eqn(1).is_ok());
    assert_eq!(errno(&env.ctx.query_eqn(2).unwrap_err()), libc::ENOENT);
    drop(dev);
}

#[test]
fn queue_sizes_beyond_caps() {
    let mut env = Env::on(small());
    let (_, pd) = env.pd();
    let (_, cqn) = env.cq(6);
    let base = env.qp_inbox(0, pd, cqn);
    let mut b = base.clone();
    CreateQpIn::from_slice_mut(&mut b)
        .unwrap()
        .qpc_mut()
        .set_log_sq_size(7);
    check(&env.create(&b, 16).unwrap_err(), syn::SQ_TOO_LARGE);
    let mut b = base.clone();
    CreateQpIn::from_slice_mut(&mut b)
        .unwrap()
        .qpc_mut()
        .set_log_rq_size(7);
    check(&env.create(&b, 16).unwrap_err(), syn::RQ_TOO_LARGE);
    env.create(&base, 16).unwrap();
    // Four CQs at most (log_max_cq 2).
    for _ in 0..3 {
        env.cq(4);
    }
    let inbox = env.cq_inbox(4);
    check(
        &env.create(&inbox, 16).unwrap_err(),
        syn::table_full(ObjKind::Cq),
    );
}

#[test]
fn user_contexts_are_limited() {
    let dev = small();
    let a = dev.open_sim().unwrap();
    let b = dev.open_sim().unwrap();
    let e = dev.open_sim().err().unwrap();
    assert_eq!(
        fw(&e),
        (
            syn::table_full(ObjKind::Uctx).status,
            syn::table_full(ObjKind::Uctx).syndrome
        )
    );
    drop(a);
    let c = dev.open_sim().unwrap();
    assert_ne!(b.uid(), c.uid());
    let mut out = vec![0u8; 16];
    c.general(&hdr(Opcode::Nop.raw(), 0, 16), &mut out).unwrap();
}
