//! Contexts on the emulated device are isolated from each other, and closing
//! one destroys everything it still owned.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::sim::ObjKind;
use devx::ProviderContext;
use prm_layouts::*;
use support::*;

/// Builds a bit of everything: PD, UMEMs, UAR, CQ, QP (RTS), MKEY.
fn populate(env: &mut Env) {
    let (_, pd) = env.pd();
    let (_, cqn) = env.cq(6);
    let inbox = env.qp_inbox(0, pd, cqn);
    let (qp_h, out) = env.create(&inbox, 16).unwrap();
    let qpn = be32(&out, 8) & 0xff_ffff;
    let mut c = Qpc::new();
    c.primary_address_path_mut().set_vhca_port_num(1);
    env.modify(qp_h, &transition(0x502, qpn, 0, &c)).unwrap();
    let inbox = env.mkey_inbox(pd, 4096, LOCAL_WRITE);
    env.create(&inbox, 16).unwrap();
    env.create(&hdr(Opcode::AllocTransportDomain.raw(), 0, 16), 16)
        .unwrap();
}

#[test]
fn closing_a_context_destroys_what_it_owned() {
    let mut env = Env::new(401);
    let dev = env.dev.clone();
    populate(&mut env);
    let uid = env.ctx.uid();
    assert!(dev.live_objects() >= 10);
    assert_eq!(dev.objects_of_uid(uid), dev.live_objects());
    assert_eq!(dev.open_contexts(), 1);
    drop(env);
    assert_eq!(dev.live_objects(), 0);
    assert_eq!(dev.open_contexts(), 0);
    assert_eq!(dev.count(ObjKind::Uctx), 0);
    // The completion EQs are the device's and stay.
    assert_eq!(
        dev.count(ObjKind::Eq),
        dev.profile().num_comp_vectors as usize
    );
}

#[test]
fn contexts_cannot_see_each_other() {
    let mut a = Env::new(402);
    let b = a.sibling();
    assert_ne!(a.ctx.uid(), b.ctx.uid());
    let (pd_h, pd) = a.pd();
    let (cq_h, cqn) = a.cq(6);

    // Handles are per context: ENOENT elsewhere.
    let q = with_num(hdr(Opcode::QueryCq.raw(), 0, 16), cqn);
    assert_eq!(
        errno(&b.query(cq_h, &q, QueryCqOut::SIZE_BYTES).unwrap_err()),
        libc::ENOENT
    );
    assert_eq!(errno(&b.destroy(pd_h).unwrap_err()), libc::ENOENT);
    assert!(a.query(cq_h, &q, QueryCqOut::SIZE_BYTES).is_ok());

    // Object numbers of another uid are not resources of yours.
    let (b_pd_h, _) = b.pd();
    let mut b_env = b;
    let inbox = b_env.qp_inbox(0, pd, cqn);
    let e = b_env.create(&inbox, 16).unwrap_err();
    check(&e, syn::foreign(ObjKind::Pd));
    let mkey = b_env.mkey_inbox(pd, 4096, LOCAL_WRITE);
    check(
        &b_env.create(&mkey, 16).unwrap_err(),
        syn::foreign(ObjKind::Pd),
    );

    // Closing b leaves a's objects alone.
    let before = a.dev.objects_of_uid(a.ctx.uid());
    b_env.destroy(b_pd_h).unwrap();
    drop(b_env);
    assert_eq!(a.dev.objects_of_uid(a.ctx.uid()), before);
    a.destroy(cq_h).unwrap();
}

#[test]
fn destroy_runs_the_command_for_its_own_object_only() {
    let env = Env::new(403);
    let (h1, pd1) = env.pd();
    let (_, pd2) = env.pd();
    // The library's derived destroy for the right object is accepted…
    let own = with_num(hdr(Opcode::DeallocPd.raw(), 0, 16), pd1);
    // …one naming another object is refused before firmware.
    let other = with_num(hdr(Opcode::DeallocPd.raw(), 0, 16), pd2);
    assert_eq!(
        errno(&env.ctx.destroy(h1, &other).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(env.dev.count(ObjKind::Pd), 2);
    env.ctx.destroy(h1, &own).unwrap();
    assert_eq!(env.dev.count(ObjKind::Pd), 1);
}

#[test]
fn teardown_handles_objects_that_hold_each_other() {
    let mut env = Env::new(404);
    let dev = env.dev.clone();
    // Created in an order where newest-first is not dependency order: the
    // QP's receive CQ is created after the QP and attached by a modify.
    let (_, pd) = env.pd();
    let (_, cq1) = env.cq(6);
    let inbox = env.qp_inbox(2, pd, cq1);
    let (qp_h, out) = env.create(&inbox, 16).unwrap();
    let qpn = be32(&out, 8) & 0xff_ffff;
    let (_, cq2) = env.cq(6);
    let mut c = Qpc::new();
    c.primary_address_path_mut().set_vhca_port_num(1);
    env.modify(qp_h, &transition(0x502, qpn, 0, &c)).unwrap();
    env.modify(qp_h, &transition(0x503, qpn, 0, &Qpc::new()))
        .unwrap();
    env.modify(qp_h, &transition(0x504, qpn, 0, &Qpc::new()))
        .unwrap();
    c.set_cqn_rcv(cq2);
    env.modify(qp_h, &transition(0x505, qpn, 0x80000, &c))
        .unwrap();
    drop(env);
    assert_eq!(dev.live_objects(), 0);
}

#[test]
fn a_provider_context_is_usable_through_the_trait() {
    let dev = devx::sim::device("sim405").unwrap();
    let ctx = dev.open().unwrap();
    let mut out = vec![0u8; 16];
    let h = ctx
        .create(&hdr(Opcode::AllocPd.raw(), 0, 16), &mut out)
        .unwrap();
    assert_eq!(ctx.info().name, "sim405");
    ctx.destroy(h, &[]).unwrap();
    assert!(ctx.query_eqn(0).is_ok());
    assert_eq!(errno(&ctx.query_eqn(10_000).unwrap_err()), libc::ENOENT);
}
