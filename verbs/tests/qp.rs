//! Queue pairs: creation geometry, every state transition with its
//! attributes, illegal transitions answered by the device, query, destroy.

mod common;

use devx::sim::ObjKind;
use verbs::{
    AccessFlags, AhAttr, Context, Cq, Gid, InitAttr, Mtu, Pd, Qp, QpCap, QpInit, QpState, QpType,
    RtrAttr, RtsAttr, RtsModify,
};

fn setup() -> (Context, std::sync::Arc<devx::sim::SimDevice>, Pd, Cq) {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    (ctx, sim, pd, cq)
}

/// The path to a peer on this port: its RoCE v2 GID at index 1.
fn peer(ctx: &Context) -> AhAttr {
    let g = ctx.query_gid(1, 1).unwrap();
    AhAttr::roce(1, g.gid, 1, None)
}

fn connect(ctx: &Context, qp: &Qp, remote: u32) {
    qp.to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ))
        .unwrap();
    let rtr = RtrAttr::new(Mtu::Mtu1024, remote, 0x123, peer(ctx)).max_dest_rd_atomic(4);
    qp.to_rtr(&rtr).unwrap();
    qp.to_rts(
        &RtsAttr::new(0x456)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(6)
            .max_rd_atomic(2),
    )
    .unwrap();
}

#[test]
fn rc_qp_goes_to_rts_and_query_reads_it_back() {
    let (ctx, sim, pd, cq) = setup();
    let a = pd
        .create_qp(
            &QpInit::new(QpType::Rc, &cq, &cq)
                .max_send_wr(32)
                .max_recv_wr(16),
        )
        .unwrap();
    let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    assert_eq!(a.state(), QpState::Rst);
    assert_eq!(a.query().unwrap().state, QpState::Rst);
    connect(&ctx, &a, b.qpn());
    assert_eq!(a.state(), QpState::Rts);
    let q = a.query().unwrap();
    assert_eq!(q.state, QpState::Rts);
    assert_eq!(q.qp_type, Some(QpType::Rc));
    assert_eq!(q.path_mtu, Some(Mtu::Mtu1024));
    assert_eq!((q.dest_qp_num, q.rq_psn, q.sq_psn), (b.qpn(), 0x123, 0x456));
    assert_eq!(
        q.access,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
    );
    assert_eq!((q.port_num, q.pkey_index), (1, 0));
    assert_eq!((q.max_dest_rd_atomic, q.max_rd_atomic), (4, 2));
    assert_eq!(
        (q.timeout, q.retry_cnt, q.rnr_retry, q.min_rnr_timer),
        (14, 7, 6, 12)
    );
    assert_eq!(
        (q.pd, q.send_cqn, q.recv_cqn, q.srqn),
        (pd.pdn(), cq.cqn(), cq.cqn(), None)
    );
    let g1 = ctx.query_gid(1, 1).unwrap();
    let ah = q.ah_attr;
    assert_eq!(ah.grh.unwrap().dgid, g1.gid);
    assert_eq!(ah.grh.unwrap().sgid_index, 1);
    assert_eq!(ah.grh.unwrap().hop_limit, 64);
    // A link-local destination needs no neighbour lookup: its MAC is in the GID.
    assert_eq!(ah.dmac, Some(sim.identity().mac));
    // RoCE v2 paths carry a UDP source port in the RoCE range.
    assert!(ah.udp_sport.unwrap() >= 0xC000);
    assert_eq!(q.cap, a.cap());
    assert!(a.cap().max_send_wr >= 32 && a.cap().max_recv_wr >= 16);
}

#[test]
fn rts_to_rts_changes_access_and_rnr_timer() {
    let (ctx, _sim, pd, cq) = setup();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    connect(&ctx, &qp, 0x100);
    qp.modify_rts(&RtsModify {
        access: Some(AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ),
        min_rnr_timer: Some(20),
        qkey: None,
    })
    .unwrap();
    let q = qp.query().unwrap();
    assert_eq!(
        q.access,
        AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ
    );
    assert_eq!(q.min_rnr_timer, 20);
    assert!(qp
        .modify_rts(&RtsModify {
            qkey: Some(1),
            ..Default::default()
        })
        .unwrap_err()
        .is_argument());
}

#[test]
fn uc_and_ud_qps() {
    let (ctx, _sim, pd, cq) = setup();
    let uc = pd.create_qp(&QpInit::new(QpType::Uc, &cq, &cq)).unwrap();
    let e = uc
        .to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_READ))
        .unwrap_err();
    assert!(e.is_argument(), "{e}");
    uc.to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE))
        .unwrap();
    uc.to_rtr(&RtrAttr::new(Mtu::Mtu4096, 0x101, 7, peer(&ctx)))
        .unwrap();
    uc.to_rts(&RtsAttr::new(9)).unwrap();
    let q = uc.query().unwrap();
    assert_eq!(
        (q.state, q.qp_type, q.path_mtu),
        (QpState::Rts, Some(QpType::Uc), Some(Mtu::Mtu4096))
    );
    assert_eq!(
        (q.rq_psn, q.sq_psn, q.access),
        (7, 9, AccessFlags::REMOTE_WRITE)
    );

    let ud = pd
        .create_qp(&QpInit::new(QpType::Ud, &cq, &cq).max_inline_data(64))
        .unwrap();
    assert!(ud.cap().max_inline_data >= 64);
    assert!(ud
        .to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE))
        .unwrap_err()
        .is_argument());
    ud.to_init(&InitAttr::new(1).qkey(0x1111_1111)).unwrap();
    ud.to_rtr(&RtrAttr::ud()).unwrap();
    ud.to_rts(&RtsAttr::new(0)).unwrap();
    ud.modify_rts(&RtsModify {
        qkey: Some(0x2222),
        ..Default::default()
    })
    .unwrap();
    let q = ud.query().unwrap();
    assert_eq!(
        (q.state, q.qp_type, q.qkey),
        (QpState::Rts, Some(QpType::Ud), 0x2222)
    );
}

#[test]
fn illegal_transitions_are_the_devices_answer_by_name() {
    let (ctx, sim, pd, cq) = setup();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let before = sim.commands_executed();
    // RST → RTS skips INIT and RTR: the library sends it anyway.
    let e = qp.to_rts(&RtsAttr::new(0)).unwrap_err();
    assert_eq!(sim.commands_executed(), before + 1);
    assert!(e.is_firmware(), "{e}");
    assert!(
        e.to_string().starts_with("modify_qp(RTS): RTR2RTS_QP: "),
        "{e}"
    );
    assert_eq!(e.status_name(), Some("BAD_QP_STATE"), "{e}");
    assert_eq!(qp.state(), QpState::Rst);
    assert!(qp
        .to_rtr(&RtrAttr::new(Mtu::Mtu1024, 1, 0, peer(&ctx)))
        .is_err());
    qp.to_init(&InitAttr::new(1)).unwrap();
    assert!(qp.to_init(&InitAttr::new(1)).unwrap_err().is_firmware());
    assert_eq!(qp.query().unwrap().state, QpState::Init);
}

#[test]
fn error_and_reset_from_any_state() {
    let (ctx, _sim, pd, cq) = setup();
    let mut qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    connect(&ctx, &qp, 0x100);
    qp.to_err().unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Err);
    qp.reset().unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Rst);
    // A reset QP can be brought up again.
    connect(&ctx, &qp, 0x101);
    assert_eq!(qp.query().unwrap().dest_qp_num, 0x101);
}

#[test]
fn attributes_are_checked_before_any_command() {
    let (ctx, sim, pd, cq) = setup();
    let dev = ctx.query_device().unwrap();
    let before = sim.commands_executed();
    let bad = [
        QpInit::new(QpType::Rc, &cq, &cq).max_send_wr(0),
        QpInit::new(QpType::Rc, &cq, &cq).max_send_wr(dev.max_qp_wr + 1),
        QpInit::new(QpType::Rc, &cq, &cq).max_recv_wr(dev.max_qp_wr + 1),
        QpInit::new(QpType::Rc, &cq, &cq).max_send_sge(dev.max_send_sge + 1),
        QpInit::new(QpType::Rc, &cq, &cq).max_recv_sge(dev.max_recv_sge + 1),
        QpInit::new(QpType::Rc, &cq, &cq).max_inline_data(4096),
        // Sizes near u32::MAX must not overflow the WQE size arithmetic.
        QpInit::new(QpType::Rc, &cq, &cq).max_inline_data(u32::MAX),
        QpInit::new(QpType::Rc, &cq, &cq).max_inline_data(u32::MAX - 40),
        QpInit::new(QpType::Ud, &cq, &cq).max_inline_data(u32::MAX - 100),
        QpInit::new(QpType::Ud, &cq, &cq)
            .max_send_wr(dev.max_qp_wr)
            .max_send_sge(8),
    ];
    for init in &bad {
        let e = pd.create_qp(init).unwrap_err();
        assert!(e.is_argument() && e.verb() == "create_qp", "{init:?}: {e}");
    }
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let ah = peer(&ctx);
    let before2 = sim.commands_executed();
    assert!(qp.to_init(&InitAttr::new(2)).unwrap_err().is_argument());
    assert!(qp
        .to_init(&InitAttr::new(1).pkey_index(1))
        .unwrap_err()
        .is_argument());
    qp.to_init(&InitAttr::new(1)).unwrap();
    let checks = [
        RtrAttr::new(Mtu::Mtu1024, 1 << 24, 0, ah),
        RtrAttr::new(Mtu::Mtu1024, 1, 1 << 24, ah),
        RtrAttr::new(Mtu::Mtu1024, 1, 0, ah).min_rnr_timer(32),
        RtrAttr::new(Mtu::Mtu1024, 1, 0, ah).max_dest_rd_atomic(200),
        RtrAttr::new(Mtu::Mtu1024, 1, 0, AhAttr { grh: None, ..ah }),
        RtrAttr::new(Mtu::Mtu1024, 1, 0, AhAttr { sl: 16, ..ah }),
    ];
    let before3 = sim.commands_executed();
    assert_eq!(before3, before2 + 1, "only the INIT transition ran");
    for rtr in &checks {
        assert!(qp.to_rtr(rtr).unwrap_err().is_argument(), "{rtr:?}");
    }
    assert_eq!(sim.commands_executed(), before3);
    let _ = before;
    assert_eq!(qp.state(), QpState::Init);
}

#[test]
fn the_source_gid_must_be_in_the_table() {
    let (ctx, _sim, pd, cq) = setup();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    qp.to_init(&InitAttr::new(1)).unwrap();
    let g = ctx.query_gid(1, 1).unwrap().gid;
    let e = qp
        .to_rtr(&RtrAttr::new(
            Mtu::Mtu1024,
            1,
            0,
            AhAttr::roce(1, g, 50, None),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("sgid index 50 is not in use"), "{e}");
    let e = qp
        .to_rtr(&RtrAttr::new(
            Mtu::Mtu1024,
            1,
            0,
            AhAttr::roce(1, Gid::from_ipv4([10, 1, 1, 1].into()), 3, None),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("needs dmac"), "{e}");
    qp.to_rtr(&RtrAttr::new(
        Mtu::Mtu1024,
        1,
        0,
        AhAttr::roce(
            1,
            Gid::from_ipv4([10, 1, 1, 1].into()),
            3,
            Some([2, 0, 0, 0, 0, 1]),
        ),
    ))
    .unwrap();
    assert_eq!(qp.query().unwrap().ah_attr.dmac, Some([2, 0, 0, 0, 0, 1]));
}

#[test]
fn geometry_rq_then_sq_in_one_buffer() {
    let (_ctx, sim, pd, cq) = setup();
    let cap = QpCap {
        max_send_wr: 100,
        max_recv_wr: 50,
        max_send_sge: 3,
        max_recv_sge: 3,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))
        .unwrap();
    let rq = qp.recv_queue_memory();
    let sq = qp.send_queue_memory();
    assert_eq!((rq.entries, rq.stride), (64, 64));
    assert_eq!(sq.addr, rq.addr + rq.len);
    assert_eq!(sq.stride, 64);
    assert!(sq.entries.is_power_of_two());
    assert_eq!(rq.doorbell_record, sq.doorbell_record);
    assert_eq!(rq.addr % 4096, 0);
    assert!(qp.cap().max_send_wr >= 100 && qp.cap().max_send_sge >= 3);
    // Buffer UMEM and doorbell UMEM next to the CQ's two.
    assert_eq!(sim.count(ObjKind::Umem), 4);
}

#[test]
fn a_send_only_qp_has_a_zero_length_rq() {
    let (_ctx, _sim, pd, cq) = setup();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).max_recv_wr(0))
        .unwrap();
    assert_eq!(qp.recv_queue_memory().len, 0);
    assert_eq!(qp.cap().max_recv_wr, 0);
    assert_eq!(qp.send_queue_memory().addr, qp.recv_queue_memory().addr);
}

#[test]
fn objects_of_another_context_are_refused() {
    let (_ctx, _sim, pd, _cq) = setup();
    let (other, _sim2) = common::open(1);
    let foreign = other.create_cq(4).unwrap();
    let e = pd
        .create_qp(&QpInit::new(QpType::Rc, &foreign, &foreign))
        .unwrap_err();
    assert!(
        e.is_argument() && e.to_string().contains("another context"),
        "{e}"
    );
}

#[test]
fn dropping_releases_in_dependency_order() {
    let (_ctx, sim, pd, cq) = setup();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    drop(cq);
    drop(pd);
    assert_eq!(sim.count(ObjKind::Pd), 1);
    assert_eq!(sim.count(ObjKind::Cq), 1);
    qp.destroy().unwrap();
    assert_eq!(sim.live_objects(), 0);
}
