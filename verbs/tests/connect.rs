//! `Qp::endpoint` + `Qp::connect`: endpoints exchanged as text and bytes
//! between two emulated devices, the defaults they pick (GID, MTU, MAC,
//! read/atomic depths), every option, and the refusals that leave the QP
//! untouched.

mod datapath_support;

use datapath_support::{open, wait};
use verbs::{
    AccessFlags, ConnectOpts, Context, Cq, Endpoint, GidType, Mtu, Pd, Qp, QpInit, QpState, QpType,
    SendWr, Sge, WcStatus,
};

struct Side {
    _ctx: Context,
    sim: std::sync::Arc<devx::sim::SimDevice>,
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn side(base: u32, t: QpType) -> Side {
    let (ctx, sim) = open(base);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let qp = pd.create_qp(&QpInit::new(t, &cq, &cq)).unwrap();
    Side {
        _ctx: ctx,
        sim,
        pd,
        cq,
        qp,
    }
}

fn is_v4_mapped(g: &verbs::Gid) -> bool {
    g.0[..10] == [0; 10] && g.0[10..12] == [0xff, 0xff]
}

#[test]
fn default_gid_is_roce_v2_ipv4_mapped() {
    let (ctx, sim) = open(1300);
    let g = ctx.default_gid(1).unwrap();
    assert_eq!(g.gid_type, GidType::RoceV2);
    assert!(is_v4_mapped(&g.gid), "{}", g.gid);
    assert_eq!(g.mac, Some(sim.identity().mac));
    // The choice comes from the table, not from a fixed index.
    let table = ctx.gid_table(1).unwrap();
    assert!(table.contains(&g));
    assert!(ctx.default_gid(2).is_err());
}

#[test]
fn endpoints_over_text_and_bytes_connect_two_devices() {
    let mut a = side(1310, QpType::Rc);
    let b = side(1320, QpType::Rc);
    let (ea, eb) = (a.qp.endpoint().unwrap(), b.qp.endpoint().unwrap());
    assert_eq!(ea.qpn, a.qp.qpn());
    assert_eq!(ea.gid_type, GidType::RoceV2);
    assert_eq!(ea.mac, Some(a.sim.identity().mac));
    assert_eq!(ea, a.qp.endpoint().unwrap(), "the same PSN every time");
    // Across a text channel one way, a byte channel the other.
    let eb_remote: Endpoint = eb.to_string().parse().unwrap();
    let ea_remote = Endpoint::from_bytes(&ea.to_bytes()).unwrap();
    a.qp.connect(&eb_remote).unwrap();
    b.qp.connect(&ea_remote).unwrap();
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));

    let q = a.qp.query().unwrap();
    assert_eq!(q.state, QpState::Rts);
    assert_eq!(q.dest_qp_num, eb.qpn);
    assert_eq!(q.rq_psn, eb.psn);
    assert_eq!(q.sq_psn, ea.psn);
    assert_eq!(q.path_mtu, Some(ea.mtu.min(eb.mtu)));
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (14, 7, 7));
    assert_eq!(q.min_rnr_timer, 12);
    let grh = q.ah_attr.grh.unwrap();
    assert_eq!(grh.dgid, eb.gid);
    assert_eq!(grh.sgid_index, ea.gid_index);
    assert_eq!(q.ah_attr.dmac, Some(b.sim.identity().mac));
    assert!(q.access.contains(AccessFlags::REMOTE_WRITE));
    assert!(q.access.contains(AccessFlags::REMOTE_READ));
    assert!(q.max_rd_atomic >= 1 && q.max_dest_rd_atomic >= 1);

    // Data moves: an RDMA write of 4 KiB, completed.
    let src = a.pd.reg_mr(vec![0x5au8; 4096], AccessFlags::NONE).unwrap();
    let dst =
        b.pd.reg_mr(
            vec![0u8; 4096],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let sge = [Sge::from_mr(&src, 0, 4096)];
    a.qp.post_send(&SendWr::rdma_write(1, &sge, dst.addr() as u64, dst.rkey()))
        .unwrap();
    let wc = wait(&mut a.cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
}

#[test]
fn every_option_reaches_the_qp() {
    let a = side(1330, QpType::Rc);
    let b = side(1340, QpType::Rc);
    let opts = ConnectOpts::default()
        .gid_index(1)
        .psn(0x123456)
        .path_mtu(Mtu::Mtu512)
        .access(AccessFlags::REMOTE_WRITE)
        .timeout(18)
        .retry_cnt(3)
        .rnr_retry(2)
        .min_rnr_timer(5)
        .max_rd_atomic(2)
        .max_dest_rd_atomic(4)
        .sl(3)
        .traffic_class(0x20)
        .hop_limit(9)
        .flow_label(0x1234)
        .dmac([2, 0, 0, 0, 0, 9])
        .udp_sport(0xd000);
    let ea = a.qp.endpoint_with(&opts).unwrap();
    assert_eq!((ea.gid_index, ea.psn, ea.rd_atomic), (1, 0x123456, 4));
    let eb =
        b.qp.endpoint_with(&ConnectOpts::default().gid_index(1))
            .unwrap();
    a.qp.connect_with(&eb, &opts).unwrap();
    let q = a.qp.query().unwrap();
    assert_eq!(q.sq_psn, 0x123456);
    assert_eq!(q.path_mtu, Some(Mtu::Mtu512));
    assert_eq!(q.access, AccessFlags::REMOTE_WRITE);
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (18, 3, 2));
    assert_eq!(q.min_rnr_timer, 5);
    assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (2, 4));
    let ah = q.ah_attr;
    assert_eq!(ah.sl, 3);
    assert_eq!(ah.dmac, Some([2, 0, 0, 0, 0, 9]));
    assert_eq!(ah.udp_sport, Some(0xd000));
    let grh = ah.grh.unwrap();
    assert_eq!((grh.sgid_index, grh.hop_limit), (1, 9));
    assert_eq!((grh.traffic_class, grh.flow_label), (0x20, 0x1234));
}

#[test]
fn the_smaller_mtu_wins() {
    let a = side(1350, QpType::Uc);
    let b = side(1360, QpType::Uc);
    let mut eb = b.qp.endpoint().unwrap();
    eb.mtu = Mtu::Mtu256;
    a.qp.connect(&eb).unwrap();
    assert_eq!(a.qp.query().unwrap().path_mtu, Some(Mtu::Mtu256));
    assert_eq!(a.qp.query().unwrap().access, AccessFlags::REMOTE_WRITE);
}

#[test]
fn refusals_name_the_problem_and_leave_the_qp_in_reset() {
    let a = side(1370, QpType::Rc);
    let b = side(1380, QpType::Rc);
    let eb = b.qp.endpoint().unwrap();
    let err = |r: verbs::Result<()>| r.unwrap_err().to_string();

    let mut v1 = eb;
    v1.gid_type = GidType::RoceV1;
    assert!(err(a.qp.connect(&v1)).contains("both ends need the same type"));
    let bad = ConnectOpts::default().min_rnr_timer(40);
    assert!(err(a.qp.connect_with(&eb, &bad)).contains("min_rnr_timer 40 exceeds 31"));
    let bad = ConnectOpts::default().gid_index(200);
    assert!(err(a.qp.connect_with(&eb, &bad)).contains("gid_index 200 is not in use"));
    let bad = ConnectOpts::default().port(3);
    assert!(err(a.qp.connect_with(&eb, &bad)).contains("port 3 does not exist"));
    let bad = ConnectOpts::default().psn(1 << 24);
    assert!(err(a.qp.connect_with(&eb, &bad)).contains("psn 0x1000000 exceeds 24 bits"));
    assert_eq!(a.qp.state(), QpState::Rst);
    assert_eq!(a.qp.query().unwrap().state, QpState::Rst);

    a.qp.connect(&eb).unwrap();
    assert!(err(a.qp.connect(&eb)).contains("is in RTS; connect starts from RESET or INIT"));

    let ud = side(1390, QpType::Ud);
    assert!(ud
        .qp
        .endpoint()
        .unwrap_err()
        .to_string()
        .contains("UD QPs have no peer"));
}

#[test]
fn connect_continues_from_init() {
    let a = side(1400, QpType::Rc);
    let b = side(1410, QpType::Rc);
    a.qp.to_init(&verbs::InitAttr::new(1)).unwrap();
    a.qp.connect(&b.qp.endpoint().unwrap()).unwrap();
    assert_eq!(a.qp.state(), QpState::Rts);
}
