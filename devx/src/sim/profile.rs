//! The capability profile of the emulated device: one place, modelled on a
//! ConnectX-6 Dx (vendor_part_id 4125, FW 22.36.1010), from which QUERY_HCA_CAP
//! answers and every limit the firmware enforces is read.
//!
//! Basis tags: `DUMP` = the public `ibv_devinfo -vv` of a CX-6 Dx inverted
//! through the kernel's caps→verbs mapping (prm-guide §7); `EST` = an estimate
//! consistent with that dump; `SIM` = a choice of the emulator (a feature it
//! does not emulate is not advertised).

use prm_layouts::{
    AtomicCaps, CmdHcaCap, FlowTableNicCap, FlowTablePropLayout, PerProtocolNetworkingOffloadCaps,
    RoceCap,
};

/// `port_type` of an Ethernet (RoCE) port; 0 is InfiniBand.
pub(crate) const PORT_TYPE_ETHERNET: u8 = 1;

/// Limits and feature bits of an emulated device. Log values are log2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Marketing name, for `DeviceInfo::location`.
    pub model: &'static str,
    /// PCI device id as verbs reports it. DUMP: 4125.
    pub vendor_part_id: u32,
    /// DUMP: 0x02c9 (Mellanox).
    pub vendor_id: u32,
    /// DUMP: 22.36.1010.
    pub fw_version: &'static str,

    /// DUMP max_qp 131072.
    pub log_max_qp: u8,
    /// DUMP max_qp_wr 32768.
    pub log_max_qp_sz: u8,
    /// DUMP max_cq 16777216.
    pub log_max_cq: u8,
    /// DUMP max_cqe 4194303 = 2^22 - 1.
    pub log_max_cq_sz: u8,
    /// DUMP max_mr 16777216.
    pub log_max_mkey: u8,
    /// DUMP max_pd 8388608.
    pub log_max_pd: u8,
    /// DUMP max_srq 8388608.
    pub log_max_srq: u8,
    /// DUMP max_srq_wr 32767 = 2^15 - 1.
    pub log_max_srq_sz: u8,
    /// DUMP max_qp_rd_atom 16.
    pub log_max_ra_req_qp: u8,
    /// DUMP max_qp_init_rd_atom 16.
    pub log_max_ra_res_qp: u8,
    /// DUMP max_mcast_grp 2097152.
    pub log_max_mcg: u8,
    /// DUMP max_mcast_qp_attach 240.
    pub max_qp_mcg: u32,
    /// DUMP port max_msg_sz 0x40000000.
    pub log_max_msg: u8,
    /// DUMP max_srq_sge 31 → (31 + 1) * 16 bytes.
    pub max_wqe_sz_rq: u16,
    /// EST: ≥ 512 (max_sge 30); 1024 as on CX-6.
    pub max_wqe_sz_sq: u16,
    /// DUMP local_ca_ack_delay 16.
    pub local_ca_ack_delay: u8,
    /// DUMP page_size_cap 0xfffffffffffff000.
    pub log_pg_sz: u8,
    /// DUMP link_layer Ethernet: 1 (0 is InfiniBand).
    pub port_type: u8,
    /// DUMP phys_port_cnt 1.
    pub num_ports: u8,
    /// DUMP max_pkeys 128: encoded 0.
    pub pkey_table_size: u16,
    /// Entries the encoded pkey_table_size stands for.
    pub pkey_entries: u32,
    /// DUMP hca_core_clock 1000000 kHz.
    pub device_frequency_khz: u32,
    /// EST: DUMP gid_tbl_len 255.
    pub roce_address_table_size: u16,
    /// SIM: bitmask v1 (1) | v2 (4).
    pub roce_version: u8,
    /// IANA RoCE v2 port.
    pub r_roce_dest_udp_port: u16,
    /// EST via max_wq_type_rq 8388608.
    pub log_max_rq: u8,
    /// EST.
    pub log_max_sq: u8,
    /// EST via RSS caps 524288.
    pub log_max_rqt: u8,
    /// EST via max_rwq_indirection_table_size 2048.
    pub log_max_rqt_size: u8,
    /// EST.
    pub log_max_tir: u8,
    /// EST.
    pub log_max_tis: u8,
    /// EST.
    pub log_max_rmp: u8,
    /// EST: max WQ size of SQ/RQ objects (2^log_max_wq_sz WQEs).
    pub log_max_wq_sz: u8,
    /// EST.
    pub log_max_eq: u8,
    /// EST.
    pub max_num_eqs: u16,
    /// EST.
    pub log_max_eq_sz: u8,
    /// EST (DUMP has 63 vectors on a large host; the emulator keeps a few).
    pub num_comp_vectors: u32,
    /// SIM: EQ number of completion vector 0; vectors follow in order.
    pub first_comp_eqn: u32,
    /// EST: rdma-core prefers CQE version 1.
    pub cqe_version: u8,
    /// EST: 512-byte BlueFlame registers (256-byte halves).
    pub log_bf_reg_size: u8,
    /// EST.
    pub log_max_transport_domain: u8,
    /// EST.
    pub log_max_xrcd: u8,
    /// EST.
    pub log_max_uctx: u8,
    /// EST.
    pub log_max_umem: u8,
    /// EST: 1024 Q counters fit the 10-bit field minus one.
    pub max_qp_cnt: u16,
    /// EST.
    pub log_max_flow_counter_bulk: u8,
    /// EST: log2 of flow tables per type.
    pub log_max_ft_num: u8,
    /// EST: log2 of entries per flow table.
    pub log_max_ft_size: u8,
    /// EST.
    pub max_ft_level: u8,
    /// EST.
    pub log_max_flow_counter: u8,
    /// EST.
    pub log_max_destination: u8,
    /// EST.
    pub log_max_flow: u8,
    /// SIM: the emulator does not produce compressed CQEs.
    pub cqe_compression: bool,
    /// Path MTU the port runs (Ethernet 1500 → IB MTU 1024 = enum 3).
    pub active_mtu: u8,
    /// NIC vport hardware MTU: 1500 + Ethernet, VLAN and FCS headers.
    pub nic_vport_mtu: u16,
    /// General object types, bit `1 << obj_type`. SIM: GENEVE_TLV_OPT only.
    pub general_obj_types: u64,
    /// EST: one GENEVE TLV option parser (one class/type/length per device).
    pub max_geneve_tlv_options: u8,
    /// EST: option data in 4-byte words the parser can sample.
    pub max_geneve_tlv_option_data_len: u8,
    /// SIM: how long an asynchronous command of an opcode holds its command
    /// queue slot before its completion is posted (none listed: at once).
    /// Lets tests see completions finish out of submission order.
    pub cmd_latency: Vec<(u16, std::time::Duration)>,
}

impl Default for Profile {
    fn default() -> Self {
        Profile::connectx6_dx()
    }
}

impl Profile {
    /// The ConnectX-6 Dx profile every emulated device starts from.
    pub fn connectx6_dx() -> Profile {
        Profile {
            model: "ConnectX-6 Dx (emulated)",
            vendor_part_id: 4125,
            vendor_id: 0x02c9,
            fw_version: "22.36.1010",
            log_max_qp: 17,
            log_max_qp_sz: 15,
            log_max_cq: 24,
            log_max_cq_sz: 22,
            log_max_mkey: 24,
            log_max_pd: 23,
            log_max_srq: 23,
            log_max_srq_sz: 15,
            log_max_ra_req_qp: 4,
            log_max_ra_res_qp: 4,
            log_max_mcg: 21,
            max_qp_mcg: 240,
            log_max_msg: 30,
            max_wqe_sz_rq: 512,
            max_wqe_sz_sq: 1024,
            local_ca_ack_delay: 16,
            log_pg_sz: 12,
            port_type: PORT_TYPE_ETHERNET,
            num_ports: 1,
            pkey_table_size: 0,
            pkey_entries: 128,
            device_frequency_khz: 1_000_000,
            roce_address_table_size: 255,
            roce_version: 0x5,
            r_roce_dest_udp_port: 4791,
            log_max_rq: 23,
            log_max_sq: 23,
            log_max_rqt: 19,
            log_max_rqt_size: 11,
            log_max_tir: 24,
            log_max_tis: 16,
            log_max_rmp: 23,
            log_max_wq_sz: 17,
            log_max_eq: 7,
            max_num_eqs: 1024,
            log_max_eq_sz: 22,
            num_comp_vectors: 8,
            first_comp_eqn: 8,
            cqe_version: 1,
            log_bf_reg_size: 9,
            log_max_transport_domain: 20,
            log_max_xrcd: 24,
            log_max_uctx: 14,
            log_max_umem: 20,
            max_qp_cnt: 1023,
            log_max_flow_counter_bulk: 23,
            log_max_ft_num: 16,
            log_max_ft_size: 24,
            max_ft_level: 64,
            log_max_flow_counter: 24,
            log_max_destination: 16,
            log_max_flow: 24,
            cqe_compression: false,
            active_mtu: 3,
            nic_vport_mtu: 1522,
            general_obj_types: 1 << prm_layouts::GeneralObjType::GeneveTlvOpt.raw(),
            max_geneve_tlv_options: 1,
            cmd_latency: Vec::new(),
            max_geneve_tlv_option_data_len: 7,
        }
    }

    /// `2^log`, saturating at `usize::MAX` for nonsense logs.
    pub(crate) fn count(log: u8) -> usize {
        1usize.checked_shl(u32::from(log)).unwrap_or(usize::MAX)
    }

    /// The general device capabilities (cap type 0, `cmd_hca_cap`).
    pub(crate) fn general_caps(&self) -> CmdHcaCap {
        let mut c = CmdHcaCap::new();
        c.set_log_max_srq_sz(self.log_max_srq_sz);
        c.set_log_max_qp_sz(self.log_max_qp_sz);
        c.set_log_max_qp(self.log_max_qp);
        c.set_log_max_srq(self.log_max_srq);
        c.set_log_max_cq_sz(self.log_max_cq_sz);
        c.set_log_max_cq(self.log_max_cq);
        c.set_log_max_eq_sz(self.log_max_eq_sz);
        c.set_log_max_mkey(self.log_max_mkey);
        c.set_log_max_eq(self.log_max_eq);
        c.set_log_max_klm_list_size(16); // EST
        c.set_log_max_ra_req_qp(self.log_max_ra_req_qp);
        c.set_log_max_ra_res_qp(self.log_max_ra_res_qp);
        c.set_max_qp_cnt(self.max_qp_cnt);
        c.set_pkey_table_size(self.pkey_table_size);
        c.set_local_ca_ack_delay(self.local_ca_ack_delay);
        c.set_port_type(self.port_type);
        c.set_num_ports(self.num_ports);
        c.set_log_max_msg(self.log_max_msg);
        c.set_stat_rate_support(0xffff); // EST: every IB static rate
        c.set_cqe_version(self.cqe_version);
        c.set_wq_signature(1);
        c.set_dct(1);
        c.set_eth_net_offloads(1);
        c.set_roce(1);
        c.set_atomic(1);
        c.set_imaicl(1); // memory windows (type 1 and 2) are supported
        c.set_cq_oi(1);
        c.set_cq_resize(1);
        c.set_cq_moderation(1);
        c.set_cq_period_start_from_cqe(1);
        c.set_block_lb_mc(1);
        c.set_xrc(1);
        c.set_ud(1);
        c.set_uc(1);
        c.set_rc(1);
        c.set_uar_4k(1);
        c.set_uar_sz(0); // EST: one 4 KiB page per UAR
        c.set_umem_uid_0(1);
        c.set_log_pg_sz(self.log_pg_sz);
        c.set_bf(1);
        c.set_log_bf_reg_size(self.log_bf_reg_size);
        c.set_max_wqe_sz_sq(self.max_wqe_sz_sq);
        c.set_max_wqe_sz_rq(self.max_wqe_sz_rq);
        c.set_max_wqe_sz_sq_dc(self.max_wqe_sz_sq);
        c.set_max_qp_mcg(self.max_qp_mcg);
        c.set_log_max_mcg(self.log_max_mcg);
        c.set_log_max_transport_domain(self.log_max_transport_domain);
        c.set_log_max_pd(self.log_max_pd);
        c.set_log_max_xrcd(self.log_max_xrcd);
        c.set_nic_flow_table(1);
        c.set_log_max_flow_counter_bulk(self.log_max_flow_counter_bulk);
        c.set_flow_counter_bulk_alloc(0xff); // EST: bulks of 128..32768
        c.set_max_flow_counter_15_0(0xffff);
        c.set_max_flow_counter_31_16(0xff);
        c.set_log_max_rq(self.log_max_rq);
        c.set_log_max_sq(self.log_max_sq);
        c.set_log_max_tir(self.log_max_tir);
        c.set_log_max_tis(self.log_max_tis);
        c.set_basic_cyclic_rcv_wqe(1);
        c.set_log_max_rmp(self.log_max_rmp);
        c.set_log_max_rqt(self.log_max_rqt);
        c.set_log_max_rqt_size(self.log_max_rqt_size);
        c.set_log_max_tis_per_sq(0);
        c.set_log_max_wq_sz(self.log_max_wq_sz);
        c.set_log_max_current_mc_list(8); // EST
        c.set_log_max_current_uc_list(8); // EST
        c.set_sq_ts_format(1); // EST: free-running and real-time
        c.set_rq_ts_format(1);
        c.set_log_max_uctx(self.log_max_uctx);
        c.set_log_max_umem(self.log_max_umem);
        c.set_max_num_eqs(self.max_num_eqs);
        c.set_log_uar_page_sz(0); // 4 KiB
        c.set_device_frequency_mhz(self.device_frequency_khz / 1000);
        c.set_device_frequency_khz(self.device_frequency_khz);
        c.set_num_of_uars_per_page(1);
        c.set_cqe_compression(u8::from(self.cqe_compression));
        c.set_native_port_num(1);
        c.set_num_vhca_ports(self.num_ports);
        // SIM: only the types fw/ext/general_obj.rs implements.
        c.set_general_obj_types(self.general_obj_types);
        c.set_max_geneve_tlv_options(self.max_geneve_tlv_options);
        c.set_max_geneve_tlv_option_data_len(self.max_geneve_tlv_option_data_len);
        c
    }

    /// Ethernet offload capabilities (cap type 1).
    pub(crate) fn ethernet_caps(&self) -> PerProtocolNetworkingOffloadCaps {
        let mut c = PerProtocolNetworkingOffloadCaps::new();
        c.set_csum_cap(1);
        c.set_vlan_cap(1);
        c.set_lro_cap(1);
        c.set_wqe_vlan_insert(1);
        c.set_self_lb_en_modifiable(1);
        c.set_max_lso_cap(18); // EST: 256 KiB LSO
        c.set_multi_pkt_send_wqe(1);
        c.set_wqe_inline_mode(2); // min inline not required (CX-5 onwards)
        c.set_rss_ind_tbl_cap(self.log_max_rqt_size);
        c.set_scatter_fcs(1);
        c.set_enhanced_multi_pkt_send_wqe(1);
        c.set_tunnel_stateless_vxlan(1);
        c.set_tunnel_stateless_gre(1);
        c.set_swp(1);
        c.set_swp_csum(1);
        c.set_swp_lso(1);
        c.set_max_vxlan_udp_ports(4);
        c.set_lro_min_mss_size(1280);
        c
    }

    /// Atomic capabilities (cap type 3).
    pub fn atomic_caps(&self) -> AtomicCaps {
        let mut c = AtomicCaps::new();
        // CMP_SWAP | FETCH_ADD | MASKED_CMP_SWAP | MASKED_FETCH_ADD.
        c.set_atomic_operations(0x000f);
        // 8-byte operands on QPs and DC (bit 3 = 8 bytes).
        c.set_atomic_size_qp(0x0008);
        c.set_atomic_size_dc(0x0008);
        // Responders treat 8-byte operands in host byte order (what verbs
        // reports as IBV_ATOMIC_HCA, as on a real ConnectX-6 Dx).
        c.set_supported_atomic_req_8B_endianness_mode_1(1);
        c.set_atomic_req_8B_endianness_mode(1);
        c
    }

    /// RoCE capabilities (cap type 4).
    pub(crate) fn roce_caps(&self) -> RoceCap {
        let mut c = RoceCap::new();
        c.set_roce_version(self.roce_version);
        c.set_l3_type(0x3); // IPv4 and IPv6 GIDs
        c.set_r_roce_dest_udp_port(self.r_roce_dest_udp_port);
        c.set_r_roce_max_src_udp_port(0xffff);
        c.set_r_roce_min_src_udp_port(0xc000);
        c.set_roce_address_table_size(self.roce_address_table_size);
        c.set_qp_ts_format(1);
        c
    }

    /// NIC flow table capabilities (cap type 7).
    pub(crate) fn nic_flow_table_caps(&self) -> Box<FlowTableNicCap> {
        let mut c = Box::new(FlowTableNicCap::new());
        c.set_nic_rx_multi_path_tirs(1);
        *c.flow_table_properties_nic_receive_mut() = self.flow_table_props();
        *c.flow_table_properties_nic_receive_rdma_mut() = self.flow_table_props();
        *c.flow_table_properties_nic_transmit_mut() = self.flow_table_props();
        *c.flow_table_properties_nic_transmit_rdma_mut() = self.flow_table_props();
        c
    }

    fn flow_table_props(&self) -> FlowTablePropLayout {
        let mut p = FlowTablePropLayout::new();
        p.set_ft_support(1);
        p.set_flow_counter(1);
        p.set_flow_modify_en(1);
        p.set_modify_root(1);
        p.set_identified_miss_table_mode(1);
        p.set_flow_table_modify(1);
        p.set_log_max_ft_size(self.log_max_ft_size);
        p.set_max_ft_level(self.max_ft_level);
        p.set_log_max_ft_num(self.log_max_ft_num);
        p.set_log_max_flow_counter(self.log_max_flow_counter);
        p.set_log_max_destination(self.log_max_destination);
        p.set_log_max_flow(self.log_max_flow);
        p
    }
}
