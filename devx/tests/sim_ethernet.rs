//! The Ethernet objects of the emulated device: TIS, SQ, RQ, TIR, RQT, RMP,
//! XRC SRQ, flow tables, groups and entries, flow and Q counters, multicast.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::sim::ObjKind;
use devx::Handle;
use prm_layouts::*;
use support::*;

fn num(out: &[u8]) -> u32 {
    be32(out, 8) & 0xff_ffff
}

fn td(env: &Env) -> (Handle, u32) {
    let (h, out) = env
        .create(&hdr(Opcode::AllocTransportDomain.raw(), 0, 16), 16)
        .unwrap();
    (h, num(&out))
}

fn fill_wq(env: &mut Env, wq: &mut Wq, pd: u32, log_sz: u8, log_stride: u8, uar: bool) {
    let (_, umem) = env.umem((1usize << log_sz) << log_stride, LOCAL_WRITE);
    let (_, dbr) = env.umem(64, LOCAL_WRITE);
    wq.set_wq_type(1);
    wq.set_pd(pd);
    wq.set_log_wq_sz(log_sz);
    wq.set_log_wq_stride(log_stride);
    wq.set_wq_umem_id(umem);
    wq.set_dbr_umem_id(dbr);
    if uar {
        wq.set_uar_page(env.uar().1);
    }
}

fn rq(env: &mut Env, pd: u32, cqn: u32) -> (Handle, u32) {
    let mut m = CreateRqIn::new();
    m.set_opcode(0x908);
    m.ctx_mut().set_cqn(cqn);
    fill_wq(env, m.ctx_mut().wq_mut(), pd, 6, 6, false);
    let (h, out) = env.create(m.as_bytes(), 16).unwrap();
    (h, num(&out))
}

fn tir_direct(env: &Env, td: u32, rqn: u32) -> Result<(Handle, u32), devx::Error> {
    let mut m = CreateTirIn::new();
    m.set_opcode(0x900);
    m.ctx_mut().set_transport_domain(td);
    m.ctx_mut().set_inline_rqn(rqn);
    env.create(m.as_bytes(), 16).map(|(h, o)| (h, num(&o)))
}

#[test]
fn sq_with_tis_walks_its_states() {
    let mut env = Env::new(801);
    let (_, pd) = env.pd();
    let (_, td) = td(&env);
    let (_, cqn) = env.cq(6);
    let mut t = CreateTisIn::new();
    t.set_opcode(0x912);
    t.ctx_mut().set_transport_domain(td);
    t.ctx_mut().set_prio(3);
    let (tis_h, out) = env.create(t.as_bytes(), 16).unwrap();
    let tisn = num(&out);
    let q = env
        .query(
            tis_h,
            &with_num(hdr(Opcode::QueryTis.raw(), 0, 16), tisn),
            QueryTisOut::SIZE_BYTES,
        )
        .unwrap();
    assert_eq!(QueryTisOut::from_slice(&q).unwrap().tis_context().prio(), 3);
    let mut mt = ModifyTisIn::new();
    mt.set_opcode(0x913);
    mt.set_tisn(tisn);
    mt.bitmask_mut().set_prio(1);
    mt.ctx_mut().set_prio(5);
    env.modify(tis_h, mt.as_bytes()).unwrap();
    let q = env
        .query(
            tis_h,
            &with_num(hdr(Opcode::QueryTis.raw(), 0, 16), tisn),
            QueryTisOut::SIZE_BYTES,
        )
        .unwrap();
    assert_eq!(QueryTisOut::from_slice(&q).unwrap().tis_context().prio(), 5);

    let mut m = CreateSqIn::new();
    m.set_opcode(0x904);
    m.ctx_mut().set_cqn(cqn);
    m.ctx_mut().set_tis_lst_sz(1);
    m.ctx_mut().set_tis_num_0(tisn);
    fill_wq(&mut env, m.ctx_mut().wq_mut(), pd, 6, 6, true);
    let (sq_h, out) = env.create(m.as_bytes(), 16).unwrap();
    let sqn = num(&out);
    check(&env.destroy(tis_h).unwrap_err(), syn::busy(ObjKind::Tis));

    let modify = |from: u8, to: u8| {
        let mut mm = ModifySqIn::new();
        mm.set_opcode(0x905);
        mm.set_sqn(sqn);
        mm.set_sq_state(from);
        mm.ctx_mut().set_state(to);
        mm
    };
    check(
        &env.modify(sq_h, modify(0, 3).as_bytes()).unwrap_err(),
        syn::WQ_STATE,
    );
    check(
        &env.modify(sq_h, modify(1, 1).as_bytes()).unwrap_err(),
        syn::WQ_STATE,
    );
    env.modify(sq_h, modify(0, 1).as_bytes()).unwrap();
    let q = env
        .query(
            sq_h,
            &with_num(hdr(Opcode::QuerySq.raw(), 0, 16), sqn),
            QuerySqOut::SIZE_BYTES,
        )
        .unwrap();
    let c = QuerySqOut::from_slice(&q).unwrap();
    assert_eq!((c.sq_context().state(), c.sq_context().cqn()), (1, cqn));
    assert_eq!(c.sq_context().wq().log_wq_sz(), 6);
    env.modify(sq_h, modify(1, 3).as_bytes()).unwrap();
    env.modify(sq_h, modify(3, 0).as_bytes()).unwrap();
    check(
        &env.modify(sq_h, modify(0, 2).as_bytes()).unwrap_err(),
        syn::WQ_BAD_STATE_VALUE,
    );

    // SQ refusals: too large, UMEM too small, no TIS.
    let mut bad = m;
    bad.ctx_mut().wq_mut().set_log_wq_sz(18);
    check(
        &env.create(bad.as_bytes(), 16).unwrap_err(),
        syn::WQ_TOO_LARGE,
    );
    bad.ctx_mut().wq_mut().set_log_wq_sz(7);
    check(
        &env.create(bad.as_bytes(), 16).unwrap_err(),
        syn::UMEM_TOO_SMALL,
    );
    bad.ctx_mut().wq_mut().set_log_wq_sz(6);
    bad.ctx_mut().set_tis_num_0(0x999);
    check(
        &env.create(bad.as_bytes(), 16).unwrap_err(),
        syn::not_found(ObjKind::Tis),
    );
    env.destroy(sq_h).unwrap();
    env.destroy(tis_h).unwrap();
}

#[test]
fn rq_tir_rqt_and_steering() {
    let mut env = Env::new(802);
    let (_, pd) = env.pd();
    let (_, td) = td(&env);
    let (_, cqn) = env.cq(6);
    let (rq1_h, rq1) = rq(&mut env, pd, cqn);
    let (_, rq2) = rq(&mut env, pd, cqn);

    // Direct TIR on rq1; indirect TIR through an RQT of both.
    let (tir_h, tirn) = tir_direct(&env, td, rq1).unwrap();
    check(
        &tir_direct(&env, td, 0x4444).unwrap_err(),
        syn::not_found(ObjKind::Rq),
    );
    let mut r = CreateRqtIn::new();
    r.set_opcode(0x916);
    r.rqt_context_mut().set_rqt_max_size(4);
    r.rqt_context_mut().set_rqt_actual_size(2);
    let mut rqt_in = r.as_bytes().to_vec();
    rqt_in.extend(rq1.to_be_bytes());
    rqt_in.extend(rq2.to_be_bytes());
    let (rqt_h, out) = env.create(&rqt_in, 16).unwrap();
    let rqtn = num(&out);
    check(&env.create(r.as_bytes(), 16).unwrap_err(), syn::INBOX_SHORT);
    let q = env
        .query(
            rqt_h,
            &with_num(hdr(Opcode::QueryRqt.raw(), 0, 16), rqtn),
            QueryRqtOut::SIZE_BYTES + 8,
        )
        .unwrap();
    assert_eq!(
        QueryRqtOut::from_slice(&q)
            .unwrap()
            .rqt_context()
            .rqt_actual_size(),
        2
    );
    assert_eq!((be32(&q, 272), be32(&q, 276)), (rq1, rq2));
    check(&env.destroy(rq1_h).unwrap_err(), syn::busy(ObjKind::Rq));

    // Flow table → group → entry forwarding to the TIR and counting.
    let mut ft = CreateFlowTableIn::new();
    ft.set_opcode(0x930);
    ft.set_table_type(0);
    ft.flow_table_context_mut().set_log_size(4);
    let (ft_h, out) = env.create(ft.as_bytes(), 16).unwrap();
    let table = num(&out);
    let mut q = QueryFlowTableIn::new();
    q.set_opcode(0x932);
    q.set_table_id(table);
    let o = env
        .query(ft_h, q.as_bytes(), QueryFlowTableOut::SIZE_BYTES)
        .unwrap();
    assert_eq!(
        QueryFlowTableOut::from_slice(&o)
            .unwrap()
            .flow_table_context()
            .log_size(),
        4
    );
    let mut bad_ft = ft;
    bad_ft.set_table_type(4);
    check(
        &env.create(bad_ft.as_bytes(), 16).unwrap_err(),
        syn::FT_TYPE,
    );

    let mut fg = CreateFlowGroupIn::new();
    fg.set_opcode(0x933);
    fg.set_table_id(table);
    fg.set_start_flow_index(0);
    fg.set_end_flow_index(7);
    fg.set_match_criteria_enable(1);
    fg.match_criteria_mut().as_mut_bytes()[0] = 0xff;
    let (fg_h, out) = env.create(fg.as_bytes(), 16).unwrap();
    let group = be32(&out, 8) & 0xff_ffff;
    let mut overlap = fg;
    overlap.set_start_flow_index(7);
    overlap.set_end_flow_index(9);
    check(
        &env.create(overlap.as_bytes(), 16).unwrap_err(),
        syn::FG_OVERLAP,
    );
    overlap.set_start_flow_index(8);
    overlap.set_end_flow_index(16);
    check(
        &env.create(overlap.as_bytes(), 16).unwrap_err(),
        syn::FG_RANGE,
    );
    let mut qg = QueryFlowGroupIn::new();
    qg.set_opcode(0x935);
    qg.set_table_id(table);
    qg.set_group_id(group);
    let o = env
        .query(fg_h, qg.as_bytes(), QueryFlowGroupOut::SIZE_BYTES)
        .unwrap();
    let g = QueryFlowGroupOut::from_slice(&o).unwrap();
    assert_eq!((g.end_flow_index(), g.match_criteria_enable()), (7, 1));
    assert_eq!(g.match_criteria().as_bytes()[0], 0xff);

    let mut fc = AllocFlowCounterIn::new();
    fc.set_opcode(0x939);
    fc.set_flow_counter_bulk_log_size(2);
    let (fc_h, out) = env.create(fc.as_bytes(), 16).unwrap();
    let counter = be32(&out, 8);
    // Any id of the bulk may be queried through the bulk's handle.
    let mut qc = QueryFlowCounterIn::new();
    qc.set_opcode(0x93b);
    qc.set_flow_counter_id(counter + 3);
    env.query(fc_h, qc.as_bytes(), 32).unwrap();
    qc.set_flow_counter_id(counter + 4);
    assert_eq!(
        errno(&env.query(fc_h, qc.as_bytes(), 32).unwrap_err()),
        libc::EINVAL
    );

    let fte = |index: u32, dest: u32, cnt: u32| {
        let mut m = SetFteIn::new();
        m.set_opcode(0x936);
        m.set_table_id(table);
        m.set_flow_index(index);
        let c = m.flow_context_mut();
        c.set_group_id(group);
        c.set_action(0x4 | 0x8);
        c.set_destination_list_size(1);
        c.set_flow_counter_list_size(1);
        c.set_flow_tag(0x55);
        let mut b = m.as_bytes().to_vec();
        b.extend(((2u32 << 24) | dest).to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(cnt.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b
    };
    let (fte_h, _) = env.create(&fte(3, tirn, counter + 1), 16).unwrap();
    check(
        &env.create(&fte(3, tirn, counter), 16).unwrap_err(),
        syn::FTE_EXISTS,
    );
    check(
        &env.create(&fte(9, tirn, counter), 16).unwrap_err(),
        syn::FTE_NO_GROUP,
    );
    check(
        &env.create(&fte(4, 0x888, counter), 16).unwrap_err(),
        syn::not_found(ObjKind::Tir),
    );
    check(
        &env.create(&fte(4, tirn, 0x0100_0000), 16).unwrap_err(),
        syn::not_found(ObjKind::FlowCounter),
    );
    let mut qf = QueryFteIn::new();
    qf.set_opcode(0x937);
    qf.set_table_id(table);
    qf.set_flow_index(3);
    let o = env
        .query(fte_h, qf.as_bytes(), QueryFteOut::SIZE_BYTES + 16)
        .unwrap();
    let f = QueryFteOut::from_slice(&o).unwrap().flow_context();
    assert_eq!(
        (f.group_id(), f.flow_tag(), f.destination_list_size()),
        (group, 0x55, 1)
    );
    assert_eq!(be32(&o, 832) & 0xff_ffff, tirn);

    // Everything in use is held.
    check(&env.destroy(tir_h).unwrap_err(), syn::busy(ObjKind::Tir));
    check(
        &env.destroy(fg_h).unwrap_err(),
        syn::busy(ObjKind::FlowGroup),
    );
    check(
        &env.destroy(ft_h).unwrap_err(),
        syn::busy(ObjKind::FlowTable),
    );
    check(
        &env.destroy(fc_h).unwrap_err(),
        syn::busy(ObjKind::FlowCounter),
    );

    // Modify the entry (op_mod 1) to drop instead: the TIR is released.
    let mut m = SetFteIn::new();
    m.set_opcode(0x936);
    m.set_op_mod(1);
    m.set_table_id(table);
    m.set_flow_index(3);
    m.flow_context_mut().set_group_id(group);
    m.flow_context_mut().set_action(0x2);
    env.modify(fte_h, m.as_bytes()).unwrap();
    env.destroy(tir_h).unwrap();
    env.destroy(fc_h).unwrap();

    env.destroy(fte_h).unwrap();
    env.destroy(fg_h).unwrap();
    env.destroy(ft_h).unwrap();
    env.destroy(rqt_h).unwrap();
    env.destroy(rq1_h).unwrap();
}

#[test]
fn rmp_and_xrc_srq() {
    let mut env = Env::new(803);
    let (_, pd) = env.pd();
    let (_, cqn) = env.cq(6);
    let mut m = CreateRmpIn::new();
    m.set_opcode(0x90c);
    m.ctx_mut().set_state(1);
    fill_wq(&mut env, m.ctx_mut().wq_mut(), pd, 5, 6, false);
    m.ctx_mut().wq_mut().set_wq_type(0);
    let (rmp_h, out) = env.create(m.as_bytes(), 16).unwrap();
    let rmpn = num(&out);
    assert_eq!(env.dev.count(ObjKind::Rmp), 1);
    let mut bad = m;
    bad.ctx_mut().wq_mut().set_log_wq_sz(16);
    check(
        &env.create(bad.as_bytes(), 16).unwrap_err(),
        syn::SRQ_TOO_LARGE,
    );

    // An RC QP receiving through the RMP holds it.
    let mut inbox = env.qp_inbox(0, pd, cqn);
    {
        let q = CreateQpIn::from_slice_mut(&mut inbox).unwrap().qpc_mut();
        q.set_rq_type(1);
        q.set_srqn_rmpn_xrqn(rmpn);
    }
    let (qp_h, _) = env.create(&inbox, 16).unwrap();
    check(&env.destroy(rmp_h).unwrap_err(), syn::busy(ObjKind::Srq));
    env.destroy(qp_h).unwrap();

    let mut mr = ModifyRmpIn::new();
    mr.set_opcode(0x90d);
    mr.set_rmpn(rmpn);
    mr.set_rmp_state(1);
    mr.ctx_mut().set_state(1);
    mr.bitmask_mut().set_lwm(1);
    mr.ctx_mut().wq_mut().set_lwm(9);
    env.modify(rmp_h, mr.as_bytes()).unwrap();
    let o = env
        .query(
            rmp_h,
            &with_num(hdr(Opcode::QueryRmp.raw(), 0, 16), rmpn),
            QueryRmpOut::SIZE_BYTES,
        )
        .unwrap();
    assert_eq!(
        QueryRmpOut::from_slice(&o)
            .unwrap()
            .rmp_context()
            .wq()
            .lwm(),
        9
    );
    env.destroy(rmp_h).unwrap();

    // Legacy SRQ needs physical pages: refused.
    check(
        &env.create(&hdr(Opcode::CreateSrq.raw(), 0, 272), 16)
            .unwrap_err(),
        syn::SRQ_NO_UMEM,
    );

    let (_, out) = env
        .create(&hdr(Opcode::AllocXrcd.raw(), 0, 16), 16)
        .unwrap();
    let xrcd = num(&out);
    let mut x = CreateXrcSrqIn::new();
    x.set_opcode(0x705);
    let c = x.xrc_srq_context_entry_mut();
    c.set_log_xrc_srq_size(4);
    c.set_xrcd(xrcd);
    c.set_cqn(cqn);
    c.set_pd(pd);
    let (x_h, out) = env.create(x.as_bytes(), 16).unwrap();
    let xn = num(&out);
    let o = env
        .query(
            x_h,
            &with_num(hdr(Opcode::QueryXrcSrq.raw(), 0, 16), xn),
            QueryXrcSrqOut::SIZE_BYTES,
        )
        .unwrap();
    let got = QueryXrcSrqOut::from_slice(&o)
        .unwrap()
        .xrc_srq_context_entry();
    assert_eq!(
        (got.xrcd(), got.cqn(), got.log_xrc_srq_size()),
        (xrcd, cqn, 4)
    );
    let mut arm = hdr(Opcode::ArmXrcSrq.raw(), 1, 16);
    arm[8..12].copy_from_slice(&xn.to_be_bytes());
    arm[14..16].copy_from_slice(&3u16.to_be_bytes());
    env.modify(x_h, &arm).unwrap();
    x.xrc_srq_context_entry_mut().set_xrcd(0x777);
    check(
        &env.create(x.as_bytes(), 16).unwrap_err(),
        syn::XRCD_REQUIRED,
    );
}

#[test]
fn counters_and_multicast() {
    let mut env = Env::new(804);
    let (qc_h, out) = env
        .create(&hdr(Opcode::AllocQCounter.raw(), 0, 16), 16)
        .unwrap();
    let set = u32::from(out[11]);
    assert!(set > 0);
    let mut q = hdr(Opcode::QueryQCounter.raw(), 0, 32);
    q[31] = set as u8;
    env.query(qc_h, &q, QueryQCounterOut::SIZE_BYTES).unwrap();

    // A UD QP counting into the set.
    let (qp_h, qpn) = env.qp(2);
    let mut c = Qpc::new();
    c.primary_address_path_mut().set_vhca_port_num(1);
    c.set_counter_set_id(set as u8);
    env.modify(qp_h, &transition(0x502, qpn, 0, &c)).unwrap();
    check(
        &env.destroy(qc_h).unwrap_err(),
        syn::busy(ObjKind::QCounter),
    );

    let mut gid = [0u8; 16];
    gid[0] = 0xff;
    gid[1] = 0x0e;
    gid[15] = 1;
    let mut a = AttachToMcgIn::new();
    a.set_opcode(0x806);
    a.set_qpn(qpn);
    a.set_multicast_gid(&gid);
    let (mcg_h, _) = env.create(a.as_bytes(), 16).unwrap();
    check(&env.create(a.as_bytes(), 16).unwrap_err(), syn::MCG_ALREADY);
    check(&env.destroy(qp_h).unwrap_err(), syn::busy(ObjKind::Qp));
    let mut unicast = a;
    unicast.set_multicast_gid(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    check(
        &env.create(unicast.as_bytes(), 16).unwrap_err(),
        syn::MCG_BAD_GID,
    );
    let (_, rc) = env.qp(0);
    let mut rc_attach = a;
    rc_attach.set_qpn(rc);
    check(
        &env.create(rc_attach.as_bytes(), 16).unwrap_err(),
        syn::MCG_QP_TYPE,
    );
    assert_eq!(env.dev.count(ObjKind::McgAttach), 1);
    env.destroy(mcg_h).unwrap();
    env.destroy(qp_h).unwrap();
    env.destroy(qc_h).unwrap();
    // General objects: only advertised types (VIRTIO_NET_Q is not) are accepted.
    check(
        &env.create(&hdr(Opcode::CreateGeneralObject.raw(), 0x0d, 64), 16)
            .unwrap_err(),
        syn::GENERAL_OBJ_TYPE,
    );
}
