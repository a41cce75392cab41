//! Commands that name no object (capabilities, vport, RoCE addresses) and
//! the firmware's mailbox checks, on the emulated device.

#[path = "sim_support.rs"]
mod support;

use devx::sim::syndrome as syn;
use devx::{DeviceInfo, ProviderContext};
use prm_layouts::*;
use support::*;

fn caps(env: &Env, op_mod: u16) -> Result<Vec<u8>, devx::Error> {
    env.general(
        &hdr(Opcode::QueryHcaCap.raw(), op_mod, 16),
        QueryHcaCapOut::SIZE_BYTES,
    )
}

#[test]
fn general_caps_come_from_the_profile() {
    let env = Env::new(301);
    let p = env.dev.profile().clone();
    let max = caps(&env, 0).unwrap();
    let cur = caps(&env, 1).unwrap();
    assert_eq!(max, cur, "nobody can SET_HCA_CAP, so MAX and CUR agree");
    let o = QueryHcaCapOut::from_slice(&cur).unwrap();
    let c = o.capability().cmd_hca_cap();
    assert_eq!(c.log_max_qp(), 17);
    assert_eq!(c.log_max_qp_sz(), 15);
    assert_eq!(c.log_max_cq(), 24);
    assert_eq!(c.log_max_cq_sz(), 22);
    assert_eq!(c.log_max_mkey(), 24);
    assert_eq!(c.log_max_pd(), 23);
    assert_eq!(c.log_max_srq(), 23);
    assert_eq!(c.log_max_srq_sz(), 15);
    assert_eq!(c.max_wqe_sz_rq(), 512);
    assert_eq!(c.max_wqe_sz_sq(), 1024);
    assert_eq!((c.port_type(), c.num_ports()), (1, 1));
    assert_eq!(
        (c.roce(), c.rc(), c.uc(), c.ud(), c.xrc(), c.atomic()),
        (1, 1, 1, 1, 1, 1)
    );
    assert_eq!(c.cqe_version(), 1);
    assert_eq!((c.uar_4k(), c.log_bf_reg_size(), c.bf()), (1, 9, 1));
    assert_eq!(
        (c.log_max_uctx(), c.log_max_umem(), c.umem_uid_0()),
        (14, 20, 1)
    );
    assert_eq!(c.log_max_msg(), p.log_max_msg);
}

/// rdma-core's DEVX test reads the general caps with a 2064-byte outbox
/// (header + the first half of the page); firmware answers with what fits.
#[test]
fn a_short_outbox_gets_the_first_bytes_of_the_answer() {
    let env = Env::new(306);
    let cur = HcaCapType::General.op_mod(true);
    let full = caps(&env, cur).unwrap();
    for len in [2064, 64, 16] {
        let short = env
            .general(&hdr(Opcode::QueryHcaCap as u16, cur, 16), len)
            .unwrap();
        assert_eq!(short, full[..len], "outbox of {len} bytes");
    }
    // The fields rdma-core reads sit in the part that fits.
    let mut padded = env
        .general(&hdr(Opcode::QueryHcaCap as u16, cur, 16), 2064)
        .unwrap();
    padded.resize(QueryHcaCapOut::SIZE_BYTES, 0);
    let c = *QueryHcaCapOut::from_slice(&padded)
        .unwrap()
        .capability()
        .cmd_hca_cap();
    assert_eq!((c.log_max_qp(), c.log_max_cq(), c.roce()), (17, 24, 1));
    // Other queries with a context after the header truncate the same way.
    let vport = env
        .general(
            &hdr(Opcode::QueryHcaVportContext as u16, 0, 16),
            QueryHcaVportContextOut::SIZE_BYTES,
        )
        .unwrap();
    let head = env
        .general(&hdr(Opcode::QueryHcaVportContext as u16, 0, 16), 48)
        .unwrap();
    assert_eq!(head, vport[..48]);
}

#[test]
fn other_cap_pages() {
    let env = Env::new(302);
    let roce = caps(&env, (4 << 1) | 1).unwrap();
    let r = QueryHcaCapOut::from_slice(&roce)
        .unwrap()
        .capability()
        .roce_cap();
    assert_eq!(r.roce_version() & 0x4, 0x4, "RoCE v2");
    assert_eq!(r.roce_address_table_size(), 255);
    assert_eq!(r.r_roce_dest_udp_port(), 4791);
    let eth = caps(&env, 1 << 1).unwrap();
    let e = QueryHcaCapOut::from_slice(&eth)
        .unwrap()
        .capability()
        .per_protocol_networking_offload_caps();
    assert_eq!((e.csum_cap(), e.vlan_cap()), (1, 1));
    let ft = caps(&env, 7 << 1).unwrap();
    let f = QueryHcaCapOut::from_slice(&ft)
        .unwrap()
        .capability()
        .flow_table_nic_cap();
    assert_eq!(f.flow_table_properties_nic_receive().ft_support(), 1);
    assert_eq!(f.flow_table_properties_nic_transmit().ft_support(), 1);
    let at = caps(&env, 3 << 1).unwrap();
    assert_eq!(
        QueryHcaCapOut::from_slice(&at)
            .unwrap()
            .capability()
            .atomic_caps()
            .atomic_operations(),
        0xf
    );
    // ODP: zero-filled but a valid answer.
    let odp = caps(&env, 2 << 1).unwrap();
    assert!(odp.iter().all(|&b| b == 0));
    // A cap type the device does not have.
    check(&caps(&env, 0x1f << 1).unwrap_err(), syn::UNKNOWN_CAP_TYPE);
    check(&caps(&env, 0x20 << 1).unwrap_err(), syn::UNKNOWN_CAP_TYPE);
    let mut other = hdr(Opcode::QueryHcaCap.raw(), 1, 16);
    other[8] = 0x80;
    check(
        &env.general(&other, QueryHcaCapOut::SIZE_BYTES).unwrap_err(),
        syn::OTHER_FUNCTION,
    );
}

#[test]
fn adapter_issi_vport() {
    let env = Env::new(303);
    let a = env
        .general(
            &hdr(Opcode::QueryAdapter.raw(), 0, 16),
            QueryAdapterOut::SIZE_BYTES,
        )
        .unwrap();
    let a = QueryAdapterOut::from_slice(&a).unwrap();
    assert_eq!(a.query_adapter_struct().ieee_vendor_id(), 0x02c9);
    let i = env
        .general(
            &hdr(Opcode::QueryIssi.raw(), 0, 16),
            QueryIssiOut::SIZE_BYTES,
        )
        .unwrap();
    let i = QueryIssiOut::from_slice(&i).unwrap();
    assert_eq!((i.current_issi(), i.supported_issi_dw0() & 3), (1, 3));
    let v = env
        .general(&hdr(Opcode::QueryVportState.raw(), 0, 16), 16)
        .unwrap();
    let v = QueryVportStateOut::from_slice(&v).unwrap();
    assert_eq!((v.state(), v.admin_state()), (1, 1));
    check(
        &env.general(&hdr(Opcode::QueryVportState.raw(), 1, 16), 16)
            .unwrap_err(),
        syn::BAD_OP_MOD,
    );
    let n = env
        .general(
            &hdr(Opcode::QueryNicVportContext.raw(), 0, 16),
            QueryNicVportContextOut::SIZE_BYTES,
        )
        .unwrap();
    let n = QueryNicVportContextOut::from_slice(&n).unwrap();
    let c = n.nic_vport_context();
    let ident = env.dev.identity();
    assert_eq!(c.roce_en(), 1);
    assert_eq!(c.mtu(), 1522);
    let (hi, lo) = ident.mac_halves();
    assert_eq!(
        (
            c.permanent_address().mac_addr_47_32(),
            c.permanent_address().mac_addr_31_0()
        ),
        (hi, lo)
    );
    assert_eq!(c.node_guid(), ident.node_guid);
    let h = env
        .general(
            &hdr(Opcode::QueryHcaVportContext.raw(), 0, 16),
            QueryHcaVportContextOut::SIZE_BYTES,
        )
        .unwrap();
    let h = QueryHcaVportContextOut::from_slice(&h).unwrap();
    assert_eq!(h.hca_vport_context().port_state(), 4);
    assert_eq!(h.hca_vport_context().port_guid(), ident.node_guid);
    assert!(env.general(&hdr(Opcode::Nop.raw(), 0, 16), 16).is_ok());
}

#[test]
fn gid_table_and_roce_addresses() {
    let env = Env::new(304);
    let ident = env.dev.identity();
    let table = ident.gid_table();
    for (i, g) in table.iter().enumerate() {
        let mut q = hdr(Opcode::QueryRoceAddress.raw(), 0, 16);
        q[8..10].copy_from_slice(&(i as u16).to_be_bytes());
        let o = env.general(&q, QueryRoceAddressOut::SIZE_BYTES).unwrap();
        let a = QueryRoceAddressOut::from_slice(&o).unwrap();
        let a = a.roce_address();
        // Firmware keeps only the IPv4 bytes of an IPv4 entry.
        let stored: [u8; 16] = match g.l3_type {
            RoceL3Type::Ipv4 => {
                let mut v4 = [0; 16];
                v4[12..].copy_from_slice(&ident.ipv4);
                v4
            }
            RoceL3Type::Ipv6 => g.gid,
        };
        assert_eq!(a.source_l3_address(), &stored, "entry {i}");
        assert_eq!(a.roce_l3_type(), g.l3_type.raw());
        assert_eq!(g.l3_type.gid(a.source_l3_address()), g.gid);
        assert_eq!(a.roce_version(), g.version.raw());
        assert_eq!(a.source_mac_31_0(), ident.mac_halves().1);
    }
    let mut q = hdr(Opcode::QueryRoceAddress.raw(), 0, 16);
    q[8..10].copy_from_slice(&255u16.to_be_bytes());
    check(
        &env.general(&q, QueryRoceAddressOut::SIZE_BYTES)
            .unwrap_err(),
        syn::BAD_GID_INDEX,
    );

    // The kernel's GID table holds the same entries, IPv4 ones mapped.
    let kernel = env.ctx.query_gid_table().unwrap();
    assert_eq!(kernel.len(), table.len());
    for (k, (i, g)) in kernel.iter().zip(table.iter().enumerate()) {
        assert_eq!((k.index, k.port, k.gid), (i as u32, 1, g.gid));
        let t = match g.version {
            RoceVersion::V1 => devx::GidType::RoceV1,
            RoceVersion::V2 => devx::GidType::RoceV2,
        };
        assert_eq!(k.gid_type, t);
    }
}

/// Linux's DEVX admits no QUERY_HCA_VPORT_GID on the general method
/// (devx_is_general_cmd): EINVAL before the firmware sees it.
#[test]
fn query_hca_vport_gid_is_not_a_general_command() {
    let env = Env::new(307);
    let before = env.dev.commands_executed();
    let mut g = hdr(Opcode::QueryHcaVportGid as u16, 0, 16);
    g[14..16].copy_from_slice(&1u16.to_be_bytes());
    let e = env.general(&g, 32).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert_eq!(env.dev.commands_executed(), before);
}

#[test]
fn mailbox_checks() {
    let env = Env::new(305);
    // Unknown opcode in the general range: admitted by the kernel, refused by firmware.
    check(
        &env.general(&hdr(0xb42, 0, 16), 16).unwrap_err(),
        syn::UNKNOWN_OPCODE,
    );
    // Outbox shorter than the layout's header and top-level fields.
    check(
        &env.general(&hdr(Opcode::QueryIssi as u16, 0, 16), 64)
            .unwrap_err(),
        syn::OUTBOX_SHORT,
    );
    // Reserved header bits, a bad op_mod, an inbox shorter than its layout.
    let mut short = hdr(Opcode::QueryAdapter.raw(), 0, 16);
    short[4] = 1;
    check(
        &env.general(&short, QueryAdapterOut::SIZE_BYTES)
            .unwrap_err(),
        syn::HEADER_RESERVED,
    );
    check(
        &env.general(
            &hdr(Opcode::QueryAdapter.raw(), 3, 16),
            QueryAdapterOut::SIZE_BYTES,
        )
        .unwrap_err(),
        syn::BAD_OP_MOD,
    );
    check(
        &env.create(&hdr(Opcode::CreateCq.raw(), 0, 64), 16)
            .unwrap_err(),
        syn::INBOX_SHORT,
    );
    // Driver-only and unknown commands never reach firmware: EINVAL.
    for op in [
        0x102u16, 0x104, 0x107, 0x108, 0x109, 0x10b, 0x802, 0xa08, 0x301, 0x123,
    ] {
        assert_eq!(
            errno(&env.general(&hdr(op, 0, 64), 64).unwrap_err()),
            libc::EINVAL,
            "{op:#x}"
        );
    }
    // A create through the general method, a query through create.
    assert_eq!(
        errno(
            &env.general(&hdr(Opcode::AllocPd.raw(), 0, 16), 16)
                .unwrap_err()
        ),
        libc::EINVAL
    );
    assert_eq!(
        errno(
            &env.create(&hdr(Opcode::QueryHcaCap.raw(), 0, 16), 4112)
                .unwrap_err()
        ),
        libc::EINVAL
    );
    // vhca_tunnel_id on a create.
    let mut t = hdr(Opcode::AllocPd.raw(), 0, 16);
    t[5] = 1;
    assert_eq!(errno(&env.create(&t, 16).unwrap_err()), libc::EINVAL);
    // Mailboxes below the 16-byte header.
    assert!(env.general(&[0x01, 0x00], 16).unwrap_err().is_argument());
    assert_eq!(
        errno(&env.general(&hdr(Opcode::Nop.raw(), 0, 16), 8).unwrap_err()),
        libc::EINVAL
    );
}

#[test]
fn uid_bytes_are_ignored() {
    let env = Env::new(306);
    let mut inbox = hdr(Opcode::AllocPd.raw(), 0, 16);
    inbox[2..4].copy_from_slice(&0x4321u16.to_be_bytes());
    let (h, _) = env.create(&inbox, 16).unwrap();
    assert_eq!(
        env.dev.objects_of_uid(env.ctx.uid()),
        1,
        "the PD belongs to the context's uid"
    );
    assert_eq!(env.dev.objects_of_uid(0x4321), 0);
    env.destroy(h).unwrap();
    assert_eq!(env.dev.objects_of_uid(env.ctx.uid()), 0);
}

#[test]
fn device_registry() {
    let d = devx::sim::device("sim0").unwrap();
    let info: DeviceInfo = d.info();
    assert!(info.emulated);
    assert_eq!(info.provider, "sim");
    assert_eq!((info.vendor_id, info.vendor_part_id), (0x02c9, 4125));
    assert_eq!(info.fw_version, "22.36.1010");
    let d7 = devx::sim::device("sim307").unwrap();
    assert_ne!(d7.info().node_guid, info.node_guid);
    let names: Vec<String> = devx::sim::devices().iter().map(|d| d.info().name).collect();
    assert_eq!(names[0], "sim0");
    assert!(names.contains(&"sim307".to_string()));
    let idx: Vec<u32> = names.iter().map(|n| n[3..].parse().unwrap()).collect();
    assert!(idx.windows(2).all(|w| w[0] < w[1]), "sorted by index");
    for bad in ["sim", "mlx5_0", "sim01", "simx"] {
        assert!(devx::sim::device(bad).err().unwrap().is_argument());
    }
    assert!(devx::sim::sim_device_with_profile("sim0", devx::sim::Profile::default()).is_err());
}
