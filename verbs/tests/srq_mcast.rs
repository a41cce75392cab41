//! Shared receive queues (RMP objects) and multicast attachment.

mod common;

use devx::sim::ObjKind;
use verbs::{Gid, InitAttr, QpInit, QpState, QpType, SrqInit};

#[test]
fn srq_create_query_modify_destroy() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd
        .create_srq(&SrqInit {
            max_wr: 100,
            max_sge: 3,
            srq_limit: 10,
            events: None,
        })
        .unwrap();
    // Ring UMEM, doorbell UMEM, RMP; no UAR (receives have no MMIO doorbell).
    assert_eq!(sim.count(ObjKind::Umem), 2);
    assert_eq!(sim.count(ObjKind::Uar), 0);
    assert!(srq.max_wr() >= 100 && srq.max_sge() >= 3);
    let m = srq.memory();
    assert_eq!(m.entries, 128);
    assert_eq!(m.stride, 64);
    let a = srq.query().unwrap();
    assert_eq!((a.max_wr, a.max_sge, a.srq_limit, a.state), (127, 3, 10, 1));
    srq.modify_limit(50).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 50);
    assert!(srq.modify_limit(1000).unwrap_err().is_argument());
    assert!(srq.resize(200).unwrap_err().is_unsupported());

    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).srq(&srq))
        .unwrap();
    assert_eq!(qp.srqn(), Some(srq.srqn()));
    assert_eq!(qp.recv_queue_memory().len, 0);
    assert_eq!(qp.query().unwrap().srqn, Some(srq.srqn()));
    let srq = srq.destroy().unwrap_err().object;
    drop(qp);
    srq.destroy().unwrap();
    drop((cq, pd));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn srq_attributes_are_checked_before_any_command() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let dev = ctx.query_device().unwrap();
    let before = sim.commands_executed();
    for init in [
        SrqInit::new(0, 1),
        SrqInit::new(dev.max_srq_wr + 1, 1),
        SrqInit::new(16, dev.max_srq_sge + 1),
        SrqInit {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 17,
            events: None,
        },
    ] {
        let e = pd.create_srq(&init).unwrap_err();
        assert!(e.is_argument() && e.verb() == "create_srq", "{init:?}: {e}");
    }
    assert_eq!(sim.commands_executed(), before);
}

fn mgid() -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x0e;
    g[15] = 0x42;
    Gid(g)
}

#[test]
fn multicast_attach_and_detach() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let ud = pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq)).unwrap();
    ud.to_init(&InitAttr::new(1).qkey(0x11)).unwrap();
    let before = sim.live_objects();
    let att = ud.attach_mcast(&mgid(), 0).unwrap();
    assert_eq!(sim.live_objects(), before + 1);
    assert_eq!((att.qpn(), att.gid()), (ud.qpn(), mgid()));
    assert_eq!(sim.count(ObjKind::McgAttach), 1);
    // The attachment keeps the QP: an explicit destroy is refused meanwhile.
    let ud = ud.destroy().unwrap_err().object;
    att.detach().unwrap();
    assert_eq!(sim.count(ObjKind::McgAttach), 0);
    let again = ud.attach_mcast(&mgid(), 0).unwrap();
    drop(ud);
    // Dropping the QP first: detach, then destroy, when the attachment goes.
    assert_eq!(sim.count(ObjKind::Qp), 1);
    drop(again);
    assert_eq!(sim.count(ObjKind::Qp) + sim.count(ObjKind::McgAttach), 0);
}

#[test]
fn only_ud_qps_join_multicast_groups() {
    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let rc = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let ud = pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq)).unwrap();
    assert_eq!(ud.state(), QpState::Rst);
    let before = sim.commands_executed();
    assert!(rc.attach_mcast(&mgid(), 0).unwrap_err().is_argument());
    let unicast = ctx.query_gid(1, 0).unwrap().gid;
    let before2 = sim.commands_executed();
    let e = ud.attach_mcast(&unicast, 0).unwrap_err();
    assert!(
        e.is_argument() && e.to_string().contains("not a multicast GID"),
        "{e}"
    );
    assert_eq!(sim.commands_executed(), before2);
    assert_eq!(before2, before + 1);
}
