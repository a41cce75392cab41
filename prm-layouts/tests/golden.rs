//! Hand-worked mailbox bytes, derived from the PRM bit offsets.

use prm_layouts::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Asserts `bytes[..expected.len()]` equals the hex text (whitespace ignored) and the rest is zero.
fn assert_bytes(bytes: &[u8], expected: &str) {
    let want: String = expected.split_whitespace().collect();
    let n = want.len() / 2;
    assert_eq!(hex(&bytes[..n]), want);
    assert!(
        bytes[n..].iter().all(|&b| b == 0),
        "tail not zero: {}",
        hex(&bytes[n..])
    );
}

#[test]
fn create_cq_in() {
    let mut m = CreateCqIn::new();
    m.set_opcode(Opcode::CreateCq.raw());
    {
        let c = m.cq_context_mut();
        c.set_dbr_umem_valid(1);
        c.set_dbr_umem_id(0xaabb_ccdd);
        c.set_log_cq_size(5);
        c.set_uar_page(0x123);
        c.set_c_eqn_or_apu_element(7);
        c.set_dbr_addr(0x1122_3344_5566_7788);
    }
    m.set_cq_umem_offset(0x1000);
    m.set_cq_umem_id(0x42);
    m.set_cq_umem_valid(1);
    assert_eq!(CreateCqIn::SIZE_BYTES, 272);
    assert_bytes(
        m.as_bytes(),
        "04000000 00000000 00000000 00000000
         02000000 aabbccdd 00000000 05000123
         00000000 00000007 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 11223344 55667788
         00000000 00001000 00000042 80000000",
    );
    // The same values through the metadata path.
    let meta = CreateCqIn::META;
    assert_eq!(
        meta.get(m.as_bytes(), "cq_context.log_cq_size").unwrap(),
        FieldValue::Scalar(5)
    );
    assert_eq!(
        meta.field("cq_context.log_cq_size").unwrap().offset_bits,
        0x80 + 0x63
    );
    assert_eq!(
        meta.field("cq_context.c_eqn_or_apu_element")
            .unwrap()
            .offset_bits,
        0x80 + 0xa0
    );
    assert_eq!(meta.field("cq_umem_id").unwrap().offset_bits, 0x2c0);
    assert_eq!(meta.tail.unwrap().name, "pas");
    let mut buf = m.as_bytes().to_vec();
    buf.extend_from_slice(&0xdead_beef_0000_1000u64.to_be_bytes());
    assert_eq!(CreateCqIn::pas_in(&buf, 0), Some(0xdead_beef_0000_1000));
    assert_eq!(CreateCqIn::pas_in(&buf, 1), None);
    assert_eq!(
        meta.get(&buf, "pas[0]").unwrap(),
        FieldValue::Scalar(0xdead_beef_0000_1000)
    );
    assert_eq!(meta.tail_values(&buf).unwrap().len(), 1);
}

/// `c_eqn_or_apu_element` is the whole dword at cqc 0xa0 (Linux 6.1): an EQ
/// number past 255 keeps every bit.
#[test]
fn cqc_eqn_is_32_bits() {
    let mut c = Cqc::new();
    c.set_c_eqn_or_apu_element(0x0102_0304);
    assert_eq!(&c.as_bytes()[0x14..0x18], &[1, 2, 3, 4]);
    assert_eq!(c.c_eqn_or_apu_element(), 0x0102_0304);
    assert!(Cqc::META.field("c_eqn").is_none());
}

#[test]
fn create_qp_in() {
    let mut m = CreateQpIn::new();
    m.set_opcode(Opcode::CreateQp.raw());
    {
        let q = m.qpc_mut();
        q.set_st(QpServiceType::Ud.raw());
        q.set_pm_state(3);
        q.set_pd(0x10);
        q.set_log_rq_size(4);
        q.set_log_rq_stride(2);
        q.set_log_sq_size(6);
        q.set_ts_format(1);
        q.set_uar_page(0x77);
        q.set_cqn_snd(0xabc);
        q.set_cqn_rcv(0xabc);
        q.set_dbr_umem_valid(1);
        q.set_dbr_umem_id(9);
    }
    m.set_wq_umem_offset(0x40);
    m.set_wq_umem_id(0xb);
    m.set_wq_umem_valid(1);
    assert_eq!(CreateQpIn::SIZE_BYTES, 272);
    let mut want = vec![0u8; 272];
    want[0] = 0x05;
    want[25] = 0x02; // st
    want[26] = 0x18; // pm_state at qpc 0x13/2
    want[31] = 0x10; // pd
    want[33] = 0x22; // log_rq_size 0x49/4, log_rq_stride 0x4d/3
    want[34] = 0x30; // log_sq_size 0x51/4
    want[35] = 0x40; // ts_format 0x58/2
    want[39] = 0x77; // uar_page
    want[150..152].copy_from_slice(&[0x0a, 0xbc]); // cqn_snd at qpc 0x3e8
    want[182..184].copy_from_slice(&[0x0a, 0xbc]); // cqn_rcv at qpc 0x4e8
    want[232] = 0x10; // dbr_umem_valid at qpc 0x683
    want[255] = 0x09; // dbr_umem_id at qpc 0x720
    want[263] = 0x40; // wq_umem_offset at 0x800
    want[267] = 0x0b; // wq_umem_id at 0x840
    want[268] = 0x80; // wq_umem_valid at 0x860
    assert_eq!(hex(m.as_bytes()), hex(&want));
    assert_eq!(
        CreateQpIn::META.field("qpc.st").unwrap().offset_bits,
        0xc0 + 0x08
    );
}

#[test]
fn rst2init_qp_in() {
    let mut m = Rst2initQpIn::new();
    m.set_opcode(Opcode::Rst2initQp.raw());
    m.set_qpn(0x12_3456);
    {
        let q = m.qpc_mut();
        q.set_pm_state(3);
        q.set_counter_set_id(0x21);
        q.set_rre(1);
        q.set_rwe(1);
        q.set_rae(1);
        q.set_atomic_mode(3);
        let p = q.primary_address_path_mut();
        p.set_pkey_index(5);
        p.set_vhca_port_num(1);
    }
    assert_bytes(
        m.as_bytes(),
        "05020000 00000000 00123456 00000000
         00000000 00000000 00001800 00000000
         00000000 21000000 00000000 00000000
         00000005 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00010000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 0003e0",
    );
}

#[test]
fn create_mkey_in() {
    let mut m = CreateMkeyIn::new();
    m.set_opcode(Opcode::CreateMkey.raw());
    m.set_mkey_umem_valid(1);
    {
        let c = m.memory_key_mkey_entry_mut();
        c.set_access_mode_1_0(1);
        c.set_rw(1);
        c.set_rr(1);
        c.set_lw(1);
        c.set_lr(1);
        c.set_qpn(0xff_ffff);
        c.set_mkey_7_0(0x42);
        c.set_pd(0x10);
        c.set_start_addr(0x7f00_0000_1000);
        c.set_len(0x2000);
        c.set_translations_octword_size(1);
        c.set_log_page_size(12);
    }
    m.set_mkey_umem_id(0x33);
    m.set_mkey_umem_offset(0x80);
    assert_eq!(CreateMkeyIn::SIZE_BYTES, 272);
    assert_bytes(
        m.as_bytes(),
        "02000000 00000000 00000000 40000000
         00003d00 ffffff42 00000000 00000010
         00007f00 00001000 00000000 00002000
         00000000 00000000 00000000 00000000
         00000000 00000001 0000000c 00000000
         00000000 00000000 00000000 00000000
         00000000 00000033 00000000 00000080",
    );
}

#[test]
fn cqe64_and_ctrl_seg() {
    let mut c = Cqe64::new();
    c.set_opcode(CqeOpcode::Invalid.raw());
    c.set_owner(1);
    c.set_wqe_counter(0x1234);
    c.set_byte_cnt(64);
    c.set_sop_drop_qpn(0x0a00_0011);
    assert_eq!(c.0[63], 0xf1);
    assert_eq!(&c.0[60..62], &[0x12, 0x34]);
    assert_eq!(&c.0[44..48], &[0, 0, 0, 64]);
    assert_eq!(&c.0[56..60], &[0x0a, 0, 0, 0x11]);

    let mut e = ErrCqe::new();
    e.set_syndrome(CqeSyndrome::WrFlushErr.raw());
    e.set_vendor_err_synd(0x93);
    // rdma-core's mlx5_err_cqe: hw_err_synd and hw_synd_type at bytes 52, 53.
    e.set_hw_err_synd(0x2a);
    e.set_hw_synd_type(0x30);
    e.set_s_wqe_opcode(SendOpcode::Send.raw());
    e.set_qpn(0x55);
    e.set_opcode(CqeOpcode::ReqErr.raw());
    assert_eq!(&e.0[52..60], &[0x2a, 0x30, 0x93, 0x05, 0x0a, 0, 0, 0x55]);
    assert_eq!(e.0[63], 0xd0);

    let mut w = WqeCtrlSeg::new();
    w.set_opmod(0);
    w.set_wqe_index(0x0102);
    w.set_opcode(SendOpcode::RdmaWrite.raw());
    w.set_qpn(0xabcdef);
    w.set_ds(3);
    w.set_fm_ce_se(0x08);
    w.set_imm(0xdead_beef);
    assert_eq!(hex(w.as_bytes()), "00010208abcdef0300000008deadbeef");

    let mut d = WqeDataSeg::new();
    d.set_byte_count(0x100);
    d.set_lkey(0x1234);
    d.set_addr(0x1122_3344_5566_7788);
    assert_eq!(hex(d.as_bytes()), "00000100000012341122334455667788");

    let mut av = WqeDatagramSeg::new();
    av.key_mut().qkey_mut().set_qkey(0x1111_1111);
    av.set_ext(1);
    av.set_dqp_dct(0x22);
    av.set_rmac(&[1, 2, 3, 4, 5, 6]);
    av.set_rgid(&[0xfe; 16]);
    assert_eq!(WqeDatagramSeg::SIZE_BYTES, 48);
    assert_eq!(
        &av.0[0..12],
        &[0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0, 0x80, 0, 0, 0x22]
    );
    assert_eq!(&av.0[20..26], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(av.key().dc_key(), 0x1111_1111_0000_0000);
    assert!(av.0[32..48].iter().all(|&b| b == 0xfe));
    assert_eq!(WqeEthSeg::SIZE_BYTES, 32);
}

#[test]
fn guide_offsets() {
    let check = |layout: &str, field: &str, off: u32, width: u32| {
        let m = find(layout).unwrap_or_else(|| panic!("no layout {layout}"));
        let f = m
            .field(field)
            .unwrap_or_else(|| panic!("no field {layout}.{field}"));
        assert_eq!(
            (f.offset_bits, f.width_bits),
            (off, width),
            "{layout}.{field}"
        );
    };
    check("general_obj_in_cmd_hdr", "obj_type", 0x30, 16);
    check("general_obj_in_cmd_hdr", "log_obj_range", 0x63, 5);
    check("general_obj_out_cmd_hdr", "obj_id", 0x40, 32);
    check("cqc", "status", 0x00, 4);
    check("cqc", "dbr_umem_valid", 0x06, 1);
    check("cqc", "cqe_sz", 0x08, 3);
    check("cqc", "st", 0x14, 4);
    check("cqc", "dbr_umem_id", 0x20, 32);
    check("cqc", "page_offset", 0x54, 6);
    check("cqc", "log_cq_size", 0x63, 5);
    check("cqc", "uar_page", 0x68, 24);
    check("cqc", "cq_period", 0x84, 12);
    check("cqc", "cq_max_count", 0x90, 16);
    check("cqc", "c_eqn_or_apu_element", 0xa0, 32);
    check("cqc", "log_page_size", 0xc3, 5);
    check("cqc", "consumer_counter", 0x148, 24);
    check("cqc", "producer_counter", 0x168, 24);
    check("cqc", "dbr_addr", 0x1c0, 64);
    check("create_cq_in", "cq_umem_valid", 0x2e0, 1);
    check("qpc", "state", 0x00, 4);
    check("qpc", "pm_state", 0x13, 2);
    check("qpc", "pd", 0x28, 24);
    check("qpc", "mtu", 0x40, 3);
    check("qpc", "log_msg_max", 0x43, 5);
    check("qpc", "counter_set_id", 0x60, 8);
    check("qpc", "user_index", 0x88, 24);
    check("qpc", "log_page_size", 0xa3, 5);
    check("qpc", "remote_qpn", 0xa8, 24);
    check("qpc", "primary_address_path.rgid_rip", 0xc0 + 0x80, 128);
    check("qpc", "secondary_address_path.fl", 0x220, 1);
    check("qpc", "log_ack_req_freq", 0x380, 4);
    check("qpc", "log_sra_max", 0x388, 3);
    check("qpc", "retry_count", 0x38d, 3);
    check("qpc", "rnr_retry", 0x390, 3);
    check("qpc", "next_send_psn", 0x3c8, 24);
    check("qpc", "deth_sqpn", 0x408, 24);
    check("qpc", "log_rra_max", 0x488, 3);
    check("qpc", "page_offset", 0x494, 6);
    check("qpc", "min_rnr_nak", 0x4a3, 5);
    check("qpc", "next_rcv_psn", 0x4a8, 24);
    check("qpc", "xrcd", 0x4c8, 24);
    check("qpc", "dbr_addr", 0x500, 64);
    check("qpc", "q_key", 0x540, 32);
    check("qpc", "rq_type", 0x565, 3);
    check("qpc", "srqn_rmpn_xrqn", 0x568, 24);
    check("qpc", "hw_sq_wqebb_counter", 0x5a0, 16);
    check("qpc", "sw_rq_counter", 0x5e0, 32);
    check("qpc", "cs_req", 0x630, 8);
    check("qpc", "cs_res", 0x638, 8);
    check("ads", "grh", 0x28, 1);
    check("ads", "mlid", 0x29, 7);
    check("ads", "rlid", 0x30, 16);
    check("ads", "ack_timeout", 0x40, 5);
    check("ads", "src_addr_index", 0x48, 8);
    check("ads", "stat_rate", 0x54, 4);
    check("ads", "hop_limit", 0x58, 8);
    check("ads", "tclass", 0x64, 8);
    check("ads", "flow_label", 0x6c, 20);
    check("ads", "ecn", 0x108, 2);
    check("ads", "dscp", 0x10a, 6);
    check("ads", "udp_sport", 0x110, 16);
    check("ads", "eth_prio", 0x121, 3);
    check("ads", "sl", 0x124, 4);
    check("ads", "rmac_47_32", 0x130, 16);
    check("ads", "rmac_31_0", 0x140, 32);
    check("mkc", "free", 0x01, 1);
    check("mkc", "access_mode_4_2", 0x03, 3);
    check("mkc", "umr_en", 0x10, 1);
    check("mkc", "length64", 0x60, 1);
    check("mkc", "bsf_octword_size", 0x100, 32);
    check("mkc", "translations_octword_size", 0x1a0, 32);
    check("mkc", "log_page_size", 0x1db, 5);
    check("create_mkey_in", "pg_access", 0x60, 1);
    check(
        "create_mkey_in",
        "translations_octword_actual_size",
        0x300,
        32,
    );
    check("wq", "wq_type", 0x00, 4);
    check("wq", "pd", 0x48, 24);
    check("wq", "dbr_addr", 0x80, 64);
    check("wq", "log_wq_stride", 0x10c, 4);
    check("wq", "log_wq_pg_sz", 0x113, 5);
    check("wq", "log_wq_sz", 0x11b, 5);
    check("wq", "wq_umem_valid", 0x121, 1);
    check("wq", "dbr_umem_id", 0x140, 32);
    check("wq", "wq_umem_id", 0x160, 32);
    check("wq", "wq_umem_offset", 0x180, 64);
    check("sqc", "cqn", 0x48, 24);
    check("sqc", "tis_num_0", 0x168, 24);
    check("sqc", "wq.pd", 0x180 + 0x48, 24);
    check("rqc", "mem_rq_type", 0x04, 4);
    check("rqc", "rmpn", 0x88, 24);
    check("srqc", "log_srq_size", 0x04, 4);
    check("srqc", "log_rq_stride", 0x25, 3);
    check("srqc", "log_page_size", 0x82, 6);
    check("srqc", "lwm", 0xe0, 16);
    check("srqc", "dbr_addr", 0x140, 64);
    check("xrc_srqc", "dbr_umem_valid", 0x47, 1);
    check("xrc_srqc", "user_index", 0x88, 24);
    check("create_xrc_srq_in", "xrc_srq_umem_valid", 0x2e0, 1);
    check("cmd_hca_cap", "log_max_qp", 0x9b, 5);
    check("cmd_hca_cap", "log_max_qp_sz", 0x88, 8);
    check("cmd_hca_cap", "log_max_cq", 0xdb, 5);
    check("cmd_hca_cap", "log_max_cq_sz", 0xc8, 8);
    check("cmd_hca_cap", "log_max_mkey", 0xea, 6);
    check("cmd_hca_cap", "log_max_pd", 0x32b, 5);
    check("cmd_hca_cap", "log_max_srq", 0xab, 5);
    check("cmd_hca_cap", "max_qp_mcg", 0x2e7, 25);
    check("cmd_hca_cap", "port_type", 0x1b6, 2);
    check("cmd_hca_cap", "num_ports", 0x1b8, 8);
    check("cmd_hca_cap", "cqe_version", 0x1fc, 4);
    check("cmd_hca_cap", "log_bf_reg_size", 0x26b, 5);
    check("cmd_hca_cap", "device_frequency_khz", 0x4e0, 32);
    check("cmd_hca_cap", "cqe_compression", 0x5bf, 1);
    check("cmd_hca_cap", "umem_uid_0", 0x252, 1);
    check("roce_cap", "roce_version", 0x98, 8);
    check("roce_cap", "r_roce_dest_udp_port", 0xb0, 16);
    check("roce_cap", "roce_address_table_size", 0xf0, 16);
    check("query_hca_cap_in", "other_function", 0x40, 1);
    check("query_hca_cap_in", "function_id", 0x50, 16);
    check(
        "query_hca_cap_out",
        "capability.cmd_hca_cap.log_max_qp",
        0x80 + 0x9b,
        5,
    );
    check("query_issi_out", "current_issi", 0x50, 16);
    check("query_vport_state_out", "admin_state", 0x78, 4);
    check("query_vport_state_out", "state", 0x7c, 4);
    check("nic_vport_context", "roce_en", 0x1f, 1);
    check("nic_vport_context", "mtu", 0x130, 16);
    check("query_roce_address_in", "roce_address_index", 0x40, 16);
    check("query_roce_address_in", "vhca_port_num", 0x5c, 4);
    check("query_hca_vport_context_in", "port_num", 0x4c, 4);
    check("hca_vport_context", "lid", 0x300, 16);
    check("hca_vport_context", "port_state", 0x118, 4);
    check("query_hca_vport_gid_in", "gid_index", 0x70, 16);
    check("query_hca_vport_gid_out", "gids_num", 0x60, 16);
    check("create_flow_table_in", "table_type", 0x80, 8);
    check("create_flow_group_in", "start_flow_index", 0xe0, 32);
    check("create_flow_group_in", "end_flow_index", 0x120, 32);
    check("set_fte_in", "flow_index", 0x100, 32);
    check("create_cq_out", "cqn", 0x48, 24);
    check("alloc_flow_counter_out", "flow_counter_id", 0x40, 32);
    check("alloc_q_counter_out", "counter_set_id", 0x58, 8);
    check("create_eq_out", "eq_number", 0x58, 8);
    check("create_umem_out", "umem_id", 0x48, 24);
    check("modify_sq_in", "sq_state", 0x40, 4);
    check("modify_sq_in", "modify_bitmask", 0x80, 64);
    check(
        "query_adapter_out",
        "query_adapter_struct.ieee_vendor_id",
        0x80 + 0xc8,
        24,
    );
    check(
        "query_adapter_out",
        "query_adapter_struct.vsd_vendor_id",
        0x80 + 0xf0,
        16,
    );
    check("roce_addr_layout", "source_l3_address", 0x0, 128);
    check(
        "query_roce_address_out",
        "roce_address.source_mac_47_32",
        0x80 + 0x90,
        16,
    );
    check(
        "query_roce_address_out",
        "roce_address.roce_version",
        0x80 + 0xd8,
        8,
    );
}

#[test]
fn nested_positions() {
    // Byte offsets of the contexts inside their mailboxes (opcode table).
    let at =
        |layout: &str, field: &str| find(layout).unwrap().field(field).unwrap().offset_bits / 8;
    assert_eq!(at("create_cq_in", "cq_context.status"), 16);
    assert_eq!(at("create_qp_in", "qpc.state"), 24);
    assert_eq!(at("create_mkey_in", "memory_key_mkey_entry.free"), 16);
    // tirc starts at byte 32; disp_type is bit 0x20 inside it.
    assert_eq!(at("create_tir_in", "ctx.disp_type"), 36);
    let bit = |layout: &str, field: &str| find(layout).unwrap().field(field).unwrap().offset_bits;
    assert_eq!(bit("create_sq_in", "ctx.cqn"), 0x100 + 0x48);
    assert_eq!(bit("create_rq_in", "ctx.cqn"), 0x100 + 0x48);
    assert_eq!(bit("create_sq_in", "ctx.wq.pd"), 0x100 + 0x180 + 0x48);
    assert_eq!(bit("create_rmp_in", "ctx.state"), 0x100 + 0x08);
    assert_eq!(bit("create_flow_group_in", "match_criteria_enable"), 0x1f8);
    assert_eq!(
        at(
            "create_flow_group_in",
            "match_criteria.outer_headers.smac_47_16"
        ),
        64
    );
    assert_eq!(bit("set_fte_in", "flow_context.group_id"), 0x200 + 0x20);
    assert_eq!(
        bit("query_nic_vport_context_out", "nic_vport_context.roce_en"),
        0x80 + 0x1f
    );
    assert_eq!(at("attach_to_mcg_in", "multicast_gid"), 16);
    assert_eq!(at("sqc", "wq.wq_type"), 48);
}

#[test]
fn huge_tail_index_is_an_error_not_an_overflow() {
    let meta = CreateCqIn::META;
    let mut buf = CreateCqIn::new().as_bytes().to_vec();
    for name in ["pas[4294967295]", "pas[536870911]", "pas[1000000]"] {
        assert!(matches!(
            meta.get(&buf, name),
            Err(LayoutError::TooShort { .. })
        ));
        assert!(matches!(
            meta.set(&mut buf, name, 1),
            Err(LayoutError::TooShort { .. })
        ));
    }
}
