//! Queue pairs on the emulated device: creation checks and the full state
//! machine, with QUERY_QP reading back every field each transition set.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::sim::ObjKind;
use prm_layouts::*;
use support::*;

const RST2INIT: u16 = 0x502;
const INIT2RTR: u16 = 0x503;
const RTR2RTS: u16 = 0x504;
const RTS2RTS: u16 = 0x505;
const SQERR2RTS: u16 = 0x506;
const TO_ERR: u16 = 0x507;
const TO_RST: u16 = 0x50a;
const SQD_RTS: u16 = 0x50c;
const INIT2INIT: u16 = 0x50e;

fn rst2init_ctx() -> Qpc {
    let mut q = Qpc::new();
    q.primary_address_path_mut().set_vhca_port_num(1);
    q.primary_address_path_mut().set_pkey_index(0);
    q.set_rre(1);
    q.set_rwe(1);
    q.set_rae(1);
    q.set_atomic_mode(3);
    q.set_pm_state(3);
    q
}

fn init2rtr_ctx() -> Qpc {
    let mut q = Qpc::new();
    q.set_mtu(3);
    q.set_log_msg_max(20);
    q.set_remote_qpn(0x1234);
    q.set_next_rcv_psn(0x100);
    q.set_min_rnr_nak(12);
    q.set_log_rra_max(2);
    let p = q.primary_address_path_mut();
    p.set_vhca_port_num(1);
    p.set_src_addr_index(1);
    p.set_hop_limit(64);
    p.set_udp_sport(0xdcba);
    p.set_rmac_47_32(0x0c42);
    p.set_rmac_31_0(0xa100_0007);
    p.set_rgid_rip(&[
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x0e, 0x42, 0xa1, 0xff, 0xfe, 0, 0, 7,
    ]);
    q
}

fn rtr2rts_ctx() -> Qpc {
    let mut q = Qpc::new();
    q.set_next_send_psn(0x200);
    q.set_retry_count(7);
    q.set_rnr_retry(7);
    q.set_log_sra_max(2);
    q.set_log_ack_req_freq(0);
    q.primary_address_path_mut().set_ack_timeout(14);
    q
}

#[test]
fn rc_qp_walks_the_state_machine() {
    let mut env = Env::new(201);
    let (_, pd) = env.pd();
    let (cq_h, cqn) = env.cq(6);
    let inbox = env.qp_inbox(0, pd, cqn);
    let created = *CreateQpIn::from_slice(&inbox).unwrap().qpc();
    let (h, out) = env.create(&inbox, 16).unwrap();
    let qpn = be32(&out, 8) & 0xff_ffff;
    assert!(qpn >= 0x100);

    let q = query_qp(&env, h, qpn);
    assert_eq!(q.state(), 0);
    assert_eq!((q.pd(), q.cqn_snd(), q.cqn_rcv()), (pd, cqn, cqn));
    assert_eq!(
        (q.log_rq_size(), q.log_rq_stride(), q.log_sq_size()),
        (4, 2, 4)
    );
    assert_eq!(q.uar_page(), created.uar_page());
    assert_eq!(q.dbr_umem_valid(), 1, "the kernel forces the doorbell UMEM");

    // SQD_RTS is a firmware command the kernel does not admit through DEVX.
    assert_eq!(
        errno(
            &env.modify(h, &transition(SQD_RTS, qpn, 0, &Qpc::new()))
                .unwrap_err()
        ),
        libc::EINVAL
    );
    // Illegal from RST.
    for op in [INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, INIT2INIT] {
        check(
            &env.modify(h, &transition(op, qpn, 0, &Qpc::new()))
                .unwrap_err(),
            syn::QP_BAD_TRANSITION,
        );
    }
    check(
        &env.modify(h, &transition(RST2INIT, qpn, 0x2, &rst2init_ctx()))
            .unwrap_err(),
        syn::QP_OPT_PARAM,
    );

    env.modify(h, &transition(RST2INIT, qpn, 0, &rst2init_ctx()))
        .unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!(q.state(), 1);
    assert_eq!(
        (q.rre(), q.rwe(), q.rae(), q.atomic_mode(), q.pm_state()),
        (1, 1, 1, 3, 3)
    );
    assert_eq!(q.primary_address_path().vhca_port_num(), 1);

    // INIT2INIT changes only what opt_param_mask names: RWE (0x8) yes, RRE no.
    let mut c = Qpc::new();
    c.set_rwe(0);
    c.set_rre(0);
    env.modify(h, &transition(INIT2INIT, qpn, 0x8, &c)).unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!((q.state(), q.rwe(), q.rre()), (1, 0, 1));

    env.modify(h, &transition(INIT2RTR, qpn, 0, &init2rtr_ctx()))
        .unwrap();
    let q = query_qp(&env, h, qpn);
    let want = init2rtr_ctx();
    assert_eq!(q.state(), 2);
    assert_eq!((q.mtu(), q.log_msg_max(), q.remote_qpn()), (3, 20, 0x1234));
    assert_eq!(
        (q.next_rcv_psn(), q.min_rnr_nak(), q.log_rra_max()),
        (0x100, 12, 2)
    );
    assert_eq!(q.primary_address_path(), want.primary_address_path());

    env.modify(h, &transition(RTR2RTS, qpn, 0, &rtr2rts_ctx()))
        .unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!(q.state(), 3);
    assert_eq!(
        (
            q.next_send_psn(),
            q.retry_count(),
            q.rnr_retry(),
            q.log_sra_max()
        ),
        (0x200, 7, 7, 2)
    );
    assert_eq!(q.primary_address_path().ack_timeout(), 14);
    // The path set at INIT2RTR survives (RTR2RTS took only ack_timeout).
    assert_eq!(q.primary_address_path().udp_sport(), 0xdcba);

    // RTS2RTS: RNR_TIMEOUT (0x40) allowed on RC, Q_KEY (0x20) is not.
    let mut c = Qpc::new();
    c.set_min_rnr_nak(5);
    env.modify(h, &transition(RTS2RTS, qpn, 0x40, &c)).unwrap();
    assert_eq!(query_qp(&env, h, qpn).min_rnr_nak(), 5);
    check(
        &env.modify(h, &transition(RTS2RTS, qpn, 0x20, &c))
            .unwrap_err(),
        syn::QP_OPT_PARAM,
    );
    for op in [RST2INIT, INIT2RTR, RTR2RTS, SQERR2RTS, INIT2INIT] {
        check(
            &env.modify(h, &transition(op, qpn, 0, &Qpc::new()))
                .unwrap_err(),
            syn::QP_BAD_TRANSITION,
        );
    }

    // The QP holds its CQ.
    check(&env.destroy(cq_h).unwrap_err(), syn::busy(ObjKind::Cq));

    // 2ERR from anywhere; then only 2RST / 2ERR.
    env.modify(h, &with_num(hdr(TO_ERR, 0, 16), qpn)).unwrap();
    assert_eq!(query_qp(&env, h, qpn).state(), 6);
    check(
        &env.modify(h, &transition(RTS2RTS, qpn, 0, &Qpc::new()))
            .unwrap_err(),
        syn::QP_BAD_TRANSITION,
    );
    env.modify(h, &with_num(hdr(TO_ERR, 0, 16), qpn)).unwrap();

    // 2RST: back to what was created.
    env.modify(h, &with_num(hdr(TO_RST, 0, 16), qpn)).unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!(q.state(), 0);
    assert_eq!((q.mtu(), q.remote_qpn(), q.next_send_psn()), (0, 0, 0));
    assert_eq!(q.pd(), pd);
    env.modify(h, &transition(RST2INIT, qpn, 0, &rst2init_ctx()))
        .unwrap();

    env.destroy(h).unwrap();
    env.destroy(cq_h).unwrap();
}

#[test]
fn transition_values_are_checked() {
    let mut env = Env::new(202);
    let (h, qpn) = env.qp(0);
    let mut c = rst2init_ctx();
    c.primary_address_path_mut().set_vhca_port_num(2);
    check(
        &env.modify(h, &transition(RST2INIT, qpn, 0, &c))
            .unwrap_err(),
        syn::BAD_PORT,
    );
    let mut c = rst2init_ctx();
    c.primary_address_path_mut().set_pkey_index(128);
    check(
        &env.modify(h, &transition(RST2INIT, qpn, 0, &c))
            .unwrap_err(),
        syn::QP_BAD_PKEY,
    );
    env.modify(h, &transition(RST2INIT, qpn, 0, &rst2init_ctx()))
        .unwrap();
    let mut c = init2rtr_ctx();
    c.set_mtu(6);
    check(
        &env.modify(h, &transition(INIT2RTR, qpn, 0, &c))
            .unwrap_err(),
        syn::QP_BAD_MTU,
    );
    let mut c = init2rtr_ctx();
    c.set_log_msg_max(31);
    check(
        &env.modify(h, &transition(INIT2RTR, qpn, 0, &c))
            .unwrap_err(),
        syn::MSG_TOO_LARGE,
    );
    let mut c = init2rtr_ctx();
    c.set_log_rra_max(5);
    check(
        &env.modify(h, &transition(INIT2RTR, qpn, 0, &c))
            .unwrap_err(),
        syn::RA_TOO_LARGE,
    );
    let mut c = init2rtr_ctx();
    c.primary_address_path_mut().set_src_addr_index(255);
    check(
        &env.modify(h, &transition(INIT2RTR, qpn, 0, &c))
            .unwrap_err(),
        syn::BAD_GID_INDEX,
    );
    // A refused transition leaves the QP where it was.
    assert_eq!(query_qp(&env, h, qpn).state(), 1);
    // A transition mailbox shorter than its layout.
    check(
        &env.modify(h, &transition(INIT2RTR, qpn, 0, &init2rtr_ctx())[..200])
            .unwrap_err(),
        syn::INBOX_SHORT,
    );
}

#[test]
fn ud_qp_moves_its_receive_cq() {
    let mut env = Env::new(203);
    let (_, pd) = env.pd();
    let (cq1_h, cq1) = env.cq(6);
    let (cq2_h, cq2) = env.cq(6);
    let inbox = env.qp_inbox(2, pd, cq1);
    let (h, out) = env.create(&inbox, 16).unwrap();
    let qpn = be32(&out, 8) & 0xff_ffff;
    let mut c = Qpc::new();
    c.primary_address_path_mut().set_vhca_port_num(1);
    c.set_q_key(0x1111_1111);
    env.modify(h, &transition(RST2INIT, qpn, 0, &c)).unwrap();
    env.modify(h, &transition(INIT2RTR, qpn, 0, &Qpc::new()))
        .unwrap();
    let mut c = Qpc::new();
    c.set_next_send_psn(5);
    env.modify(h, &transition(RTR2RTS, qpn, 0, &c)).unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!(
        (q.state(), q.q_key(), q.next_send_psn()),
        (3, 0x1111_1111, 5)
    );

    // RTS2RTS with CQN_RCV (0x80000) moves the receive CQ reference.
    let mut c = Qpc::new();
    c.set_cqn_rcv(cq2);
    c.set_q_key(0x2222);
    env.modify(h, &transition(RTS2RTS, qpn, 0x80000 | 0x20, &c))
        .unwrap();
    let q = query_qp(&env, h, qpn);
    assert_eq!((q.cqn_rcv(), q.q_key()), (cq2, 0x2222));
    check(&env.destroy(cq2_h).unwrap_err(), syn::busy(ObjKind::Cq));
    // cq1 is still the send CQ.
    check(&env.destroy(cq1_h).unwrap_err(), syn::busy(ObjKind::Cq));
    c.set_cqn_rcv(0x7777);
    check(
        &env.modify(h, &transition(RTS2RTS, qpn, 0x80000, &c))
            .unwrap_err(),
        syn::not_found(ObjKind::Cq),
    );
    env.destroy(h).unwrap();
    env.destroy(cq2_h).unwrap();
    env.destroy(cq1_h).unwrap();
}

#[test]
fn qp_creation_refusals() {
    let mut env = Env::new(204);
    let (_, pd) = env.pd();
    let (_, cqn) = env.cq(6);
    let base = env.qp_inbox(0, pd, cqn);
    let edit = |f: &dyn Fn(&mut CreateQpIn)| {
        let mut b = base.clone();
        f(CreateQpIn::from_slice_mut(&mut b).unwrap());
        b
    };
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_st(5)), 16)
            .unwrap_err(),
        syn::QP_BAD_TYPE,
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_log_rq_stride(6)), 16)
            .unwrap_err(),
        syn::RQ_STRIDE_TOO_LARGE,
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_log_sq_size(8)), 16)
            .unwrap_err(),
        syn::UMEM_TOO_SMALL,
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_pd(0x5555)), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Pd),
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_cqn_snd(0x5555)), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Cq),
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_cqn_rcv(0x5555)), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Cq),
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_uar_page(0x5555)), 16)
            .unwrap_err(),
        syn::not_found(ObjKind::Uar),
    );
    check(
        &env.create(&edit(&|m| m.set_input_qpn(9)), 16).unwrap_err(),
        syn::QP_INPUT_QPN,
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_rq_type(2)), 16)
            .unwrap_err(),
        syn::QP_BAD_RQ_TYPE,
    );
    let srq = edit(&|m| {
        m.qpc_mut().set_rq_type(1);
        m.qpc_mut().set_srqn_rmpn_xrqn(0x33);
    });
    check(
        &env.create(&srq, 16).unwrap_err(),
        syn::not_found(ObjKind::Srq),
    );
    check(
        &env.create(
            &edit(&|m| {
                m.qpc_mut().set_no_sq(1);
                m.qpc_mut().set_rq_type(3);
            }),
            16,
        )
        .unwrap_err(),
        syn::QP_NO_QUEUES,
    );
    check(
        &env.create(&edit(&|m| m.qpc_mut().set_dbr_addr(64)), 16)
            .unwrap_err(),
        syn::DBR_OUT_OF_UMEM,
    );
    assert_eq!(env.dev.count(ObjKind::Qp), 0);
    env.create(&base, 16).unwrap();
    assert_eq!(env.dev.count(ObjKind::Qp), 1);
}

#[test]
fn query_is_bound_to_the_handle() {
    let mut env = Env::new(205);
    let (h1, q1) = env.qp(0);
    let (_, q2) = env.qp(1);
    assert_ne!(q1, q2);
    let e = env
        .query(
            h1,
            &with_num(hdr(Opcode::QueryQp.raw(), 0, 16), q2),
            QueryQpOut::SIZE_BYTES,
        )
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    let e = env
        .modify(h1, &with_num(hdr(TO_ERR, 0, 16), q2))
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    // A modify command through the query method is not admitted.
    let e = env
        .query(h1, &with_num(hdr(TO_ERR, 0, 16), q1), 16)
        .unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    let q = query_qp(&env, h1, q1);
    assert_eq!(q.st(), 0);
}
