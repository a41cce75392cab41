//! Opening a device, `query_device`, `query_port`, the GID table, the
//! devinfo report, and mixing verbs objects with raw DEVX ones.

mod common;

use prm_layouts::enums::{Opcode, RoceVersion};
use verbs::{AtomicCap, Context, DeviceReport, GidType, LinkLayer, Mtu, PortModify, PortState};

#[test]
fn query_device_follows_the_general_caps() {
    let (ctx, sim) = common::open(1);
    let p = sim.profile().clone();
    let a = ctx.query_device().unwrap();
    let info = ctx.device().info();
    assert_eq!(a.fw_ver, info.fw_version);
    assert_eq!(a.vendor_id, 0x02c9);
    assert_eq!(a.vendor_part_id, 4125);
    assert_eq!(a.node_guid, sim.identity().node_guid);
    assert_eq!(a.max_qp, 1 << p.log_max_qp);
    assert_eq!(a.max_qp_wr, 1 << p.log_max_qp_sz);
    assert_eq!(a.max_cq, 1 << p.log_max_cq);
    assert_eq!(a.max_cqe, (1 << p.log_max_cq_sz) - 1);
    assert_eq!(a.max_mr, 1 << p.log_max_mkey);
    assert_eq!(a.max_pd, 1 << p.log_max_pd);
    assert_eq!(a.max_srq, 1 << p.log_max_srq);
    assert_eq!(a.max_srq_wr, (1 << p.log_max_srq_sz) - 1);
    assert_eq!(a.max_recv_sge, u32::from(p.max_wqe_sz_rq) / 16);
    assert_eq!(a.max_srq_sge, u32::from(p.max_wqe_sz_rq) / 16 - 1);
    assert_eq!(
        a.max_send_sge,
        (u32::from(p.max_wqe_sz_sq).min(512) - 32) / 16
    );
    assert_eq!(a.max_qp_rd_atom, 1 << p.log_max_ra_req_qp);
    assert_eq!(a.max_qp_init_rd_atom, 1 << p.log_max_ra_res_qp);
    assert_eq!(a.max_mcast_grp, 1 << p.log_max_mcg);
    assert_eq!(a.max_mcast_qp_attach, p.max_qp_mcg);
    assert_eq!(a.local_ca_ack_delay, p.local_ca_ack_delay);
    assert_eq!(a.page_size_cap, !((1u64 << p.log_pg_sz) - 1));
    assert_eq!(a.hca_core_clock_khz, u64::from(p.device_frequency_khz));
    assert_eq!(a.phys_port_cnt, p.num_ports);
    assert_eq!(a.max_pkeys, p.pkey_entries);
    // RD is not an mlx5 transport.
    assert_eq!((a.max_ee, a.max_rdd, a.max_ee_rd_atom), (0, 0, 0));
    // The kernel's rule: standard 8-byte atomics and a host-endian responder.
    let ac = p.atomic_caps();
    let hca = ac.atomic_operations() & 3 == 3
        && ac.atomic_size_qp() & 8 != 0
        && ac.atomic_req_8B_endianness_mode() != 0;
    assert_eq!(
        a.atomic_cap,
        if hca { AtomicCap::Hca } else { AtomicCap::None }
    );
    assert!(a.cap_flags.rc && a.cap_flags.uc && a.cap_flags.ud);
    assert!(a.cap_flags.resize_cq && a.cap_flags.cq_moderation);
    assert_eq!(a.link_layer, LinkLayer::Ethernet);
}

#[test]
fn query_port_reads_the_vport() {
    let (ctx, sim) = common::open(1);
    let p = sim.profile().clone();
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.phys_state, 5);
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    // 1522-byte vport MTU: a 1500-byte IP MTU carries 1024-byte RoCE payloads.
    assert_eq!(p.nic_vport_mtu, 1522);
    assert_eq!(port.active_mtu, Mtu::Mtu1024);
    assert_eq!(port.gid_tbl_len, u32::from(p.roce_address_table_size));
    assert_eq!(port.max_msg_sz, 1u64 << p.log_max_msg);
    assert_eq!(port.mac, Some(sim.identity().mac));
    assert_eq!((port.lid, port.sm_lid, port.pkey_tbl_len), (0, 0, 1));
}

#[test]
fn bad_ports_are_refused_before_any_command() {
    let (ctx, sim) = common::open(1);
    let before = sim.commands_executed();
    for port in [0u8, 2, 255] {
        let e = ctx.query_port(port).unwrap_err();
        assert!(e.is_argument(), "{e}");
        assert_eq!(e.verb(), "query_port");
        assert!(ctx.query_gid(port, 0).unwrap_err().is_argument());
    }
    assert_eq!(sim.commands_executed(), before);
}

/// Firmware keeps only the four IPv4 bytes of an IPv4 RoCE entry; the GID
/// read back is still the IPv4-mapped `::ffff:a.b.c.d`.
#[test]
fn ipv4_roce_gids_read_back_ipv4_mapped() {
    let (ctx, sim) = common::open(1);
    let mut want = [0u8; 16];
    want[10..12].copy_from_slice(&[0xff, 0xff]);
    want[12..].copy_from_slice(&sim.identity().ipv4);
    let v4: Vec<_> = ctx
        .gid_table(1)
        .unwrap()
        .into_iter()
        .filter(|e| e.gid.0 == want)
        .map(|e| e.gid_type)
        .collect();
    assert_eq!(v4, [GidType::RoceV1, GidType::RoceV2]);
}

#[test]
fn gid_table_matches_the_device() {
    let (ctx, sim) = common::open(1);
    let gids = ctx.gid_table(1).unwrap();
    let want = sim.identity().gid_table();
    assert_eq!(gids.len(), want.len());
    for (g, w) in gids.iter().zip(want.iter()) {
        assert_eq!(g.gid.0, w.gid);
        let t = if w.version == RoceVersion::V2 {
            GidType::RoceV2
        } else {
            GidType::RoceV1
        };
        assert_eq!(g.gid_type, t);
        assert_eq!(g.mac, Some(sim.identity().mac));
    }
    // An unused entry reads as a zero GID; one past the table is the device's error.
    assert!(ctx.query_gid(1, 100).unwrap().gid.is_zero());
    let e = ctx.query_gid(1, 255).unwrap_err();
    assert!(e.is_firmware(), "{e}");
    assert!(
        e.to_string().starts_with("query_gid: QUERY_ROCE_ADDRESS: "),
        "{e}"
    );
}

#[test]
fn modify_port_is_unsupported_with_a_reason() {
    let (ctx, sim) = common::open(1);
    let before = sim.commands_executed();
    let e = ctx.modify_port(
        1,
        &PortModify {
            reset_qkey_counter: true,
            ..Default::default()
        },
    );
    let e = e.unwrap_err();
    assert!(e.is_unsupported());
    assert!(e.to_string().contains("not DEVX commands"), "{e}");
    assert!(ctx
        .modify_port(3, &PortModify::default())
        .unwrap_err()
        .is_argument());
    assert_eq!(sim.commands_executed(), before);
}

#[test]
fn report_prints_like_ibv_devinfo() {
    let (ctx, sim) = common::open(1);
    let r = DeviceReport::collect(&ctx).unwrap();
    let text = r.to_string();
    assert!(
        text.starts_with(&format!("hca_id:\t{} (emulated)\n", ctx.device().name())),
        "{text}"
    );
    assert!(text.contains("fw_ver:\t\t\t\t22.36.1010"), "{text}");
    assert!(text.contains("vendor_id:\t\t\t0x02c9"), "{text}");
    assert!(text.contains("state:\t\t\tPORT_ACTIVE (4)"), "{text}");
    assert!(text.contains("active_mtu:\t\t1024 (3)"), "{text}");
    assert!(text.contains("link_layer:\t\tEthernet"), "{text}");
    assert_eq!(
        text.matches("GID[").count(),
        sim.identity().gid_table().len()
    );
    assert!(text.contains("GID[  1]:\t\tfe80::"), "{text}");
    let json = r.to_json();
    assert!(json.starts_with('{') && json.ends_with('}'));
    assert!(json.contains("\"fw_ver\": \"22.36.1010\""), "{json}");
    assert!(json.contains("\"max_qp\": 131072"), "{json}");
    assert!(json.contains("\"type\": \"RoCE v2\""), "{json}");
    assert_eq!(json.matches('{').count(), json.matches('}').count());
}

#[test]
fn verbs_objects_mix_with_raw_devx_objects() {
    let (name, sim) = common::fresh_sim(1);
    let dev = devx::Device::by_name(&name).unwrap();
    let raw = dev.open().unwrap();
    let ctx = Context::from_devx(raw.clone()).unwrap();
    assert!(ctx.devx().same_as(&raw));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();

    // A raw DEVX QP that completes into the verbs CQ and lives in the verbs PD.
    let qp_buf = devx::Umem::register(&raw, vec![0u8; 4096], devx::access::LOCAL_WRITE).unwrap();
    let dbr = devx::Umem::register(&raw, vec![0u8; 64], devx::access::LOCAL_WRITE).unwrap();
    let mut inbox = prm_layouts::CreateQpIn::new();
    inbox.set_opcode(Opcode::CreateQp.raw());
    let q = inbox.qpc_mut();
    q.set_st(0);
    q.set_pm_state(3);
    q.set_pd(pd.pdn());
    q.set_uar_page(cq.uar().page_id());
    q.set_log_sq_size(4);
    q.set_log_rq_size(4);
    q.set_log_rq_stride(0);
    q.set_cqn_snd(cq.cqn());
    q.set_cqn_rcv(cq.cqn());
    q.set_dbr_umem_valid(1);
    q.set_dbr_umem_id(dbr.id());
    inbox.set_wq_umem_id(qp_buf.id());
    inbox.set_wq_umem_valid(1);
    let raw_qp = raw
        .create(inbox.as_bytes(), prm_layouts::CreateQpOut::SIZE_BYTES)
        .unwrap();
    assert!(raw_qp.id() >= 0x100);

    // The device holds the CQ for the raw QP: destroying it is refused and
    // the CQ comes back intact.
    let back = cq.destroy().unwrap_err();
    assert!(back.error.is_firmware(), "{}", back.error);
    assert!(
        back.error.to_string().starts_with("destroy_cq: DESTROY_CQ"),
        "{}",
        back.error
    );
    let cq = back.object;
    assert!(cq.query().is_ok());
    drop(raw_qp);
    cq.destroy().unwrap();
    drop((qp_buf, dbr, pd));
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn closing_is_dropping_the_last_handle() {
    let (name, sim) = common::fresh_sim(1);
    let dev = devx::Device::by_name(&name).unwrap();
    let ctx = Context::open(&dev).unwrap();
    assert_eq!(sim.open_contexts(), 1);
    let pd = ctx.alloc_pd().unwrap();
    drop(ctx);
    // The PD keeps its context open.
    assert_eq!(sim.open_contexts(), 1);
    assert!(pd.context().query_port(1).is_ok());
    drop(pd);
    assert_eq!(sim.open_contexts(), 0);
    assert_eq!(sim.live_objects(), 0);
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<verbs::Context>();
    send_sync::<verbs::Pd>();
    send_sync::<verbs::Td>();
    send_sync::<verbs::Cq>();
    send_sync::<verbs::CompChannel>();
    send_sync::<verbs::Qp>();
    send_sync::<verbs::QpInit>();
    send_sync::<verbs::Mr<Vec<u8>>>();
    send_sync::<verbs::Mw>();
    send_sync::<verbs::Srq>();
    send_sync::<verbs::Ah>();
    send_sync::<verbs::McastAttachment>();
    send_sync::<verbs::Error>();

    let (ctx, sim) = common::open(1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let qps: Vec<verbs::Qp> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| pd.create_qp(&verbs::QpInit::new(verbs::QpType::Ud, &cq, &cq))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    assert_eq!(sim.count(devx::sim::ObjKind::Qp), 4);
    drop((qps, cq, pd));
    assert_eq!(sim.live_objects(), 0);
}

/// On an InfiniBand port the GIDs come from the kernel's GID table: DEVX
/// refuses QUERY_HCA_VPORT_GID on the general method, as Linux does.
#[test]
fn infiniband_gids_come_from_the_kernel_table() {
    let mut profile = devx::sim::Profile::connectx6_dx();
    profile.port_type = 0;
    let sim = devx::sim::SimDevice::new(profile);
    let ctx = Context::open(&sim.device()).unwrap();
    assert_eq!(ctx.link_layer(), LinkLayer::InfiniBand);
    let mut want = [0u8; 16];
    want[..2].copy_from_slice(&[0xfe, 0x80]);
    want[8..].copy_from_slice(&sim.identity().node_guid.to_be_bytes());
    let g = ctx.query_gid(1, 0).unwrap();
    assert_eq!((g.gid.0, g.gid_type, g.mac), (want, GidType::Ib, None));
    assert_eq!(ctx.gid_table(1).unwrap(), vec![g]);
    assert!(ctx.query_gid(1, 1).unwrap().gid.is_zero());
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    let e = ctx.query_gid(1, len as u16).unwrap_err();
    assert!(e.is_argument(), "{e}");
}
