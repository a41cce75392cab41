//! Mailbox sizes against the PRM opcode table, and metadata sanity.

use prm_layouts::*;

#[test]
fn opcode_table_sizes() {
    // (opcode, in bytes, out bytes) for the fixed parts.
    let table: &[(Opcode, usize, usize)] = &[
        (Opcode::QueryHcaCap, 16, 4112),
        (Opcode::QueryAdapter, 16, 272),
        (Opcode::InitHca, 32, 16),
        (Opcode::TeardownHca, 16, 16),
        (Opcode::EnableHca, 16, 12),
        (Opcode::DisableHca, 16, 12),
        (Opcode::SetHcaCap, 4112, 16),
        (Opcode::QueryIssi, 16, 112),
        (Opcode::SetIssi, 16, 16),
        (Opcode::CreateMkey, 272, 16),
        (Opcode::QueryMkey, 16, 304),
        (Opcode::DestroyMkey, 16, 16),
        (Opcode::CreateEq, 272, 16),
        (Opcode::DestroyEq, 16, 16),
        (Opcode::QueryEq, 16, 272),
        (Opcode::CreateCq, 272, 16),
        (Opcode::DestroyCq, 16, 16),
        (Opcode::QueryCq, 16, 272),
        (Opcode::ModifyCq, 272, 16),
        (Opcode::CreateQp, 272, 16),
        (Opcode::DestroyQp, 16, 16),
        (Opcode::Rst2initQp, 272, 16),
        (Opcode::Init2rtrQp, 272, 16),
        (Opcode::Rtr2rtsQp, 272, 16),
        (Opcode::Rts2rtsQp, 272, 16),
        (Opcode::Sqerr2rtsQp, 272, 16),
        (Opcode::Qp2Err, 16, 16),
        (Opcode::Qp2Rst, 16, 16),
        (Opcode::QueryQp, 16, 272),
        (Opcode::SqdRtsQp, 272, 16),
        (Opcode::Init2initQp, 272, 16),
        (Opcode::MadIfc, 272, 272),
        (Opcode::CreateSrq, 272, 16),
        (Opcode::DestroySrq, 16, 16),
        (Opcode::QuerySrq, 16, 272),
        (Opcode::CreateXrcSrq, 272, 16),
        (Opcode::DestroyXrcSrq, 16, 16),
        (Opcode::CreateDct, 128, 16),
        (Opcode::QueryVportState, 16, 16),
        (Opcode::QueryNicVportContext, 16, 272),
        (Opcode::QueryRoceAddress, 16, 48),
        (Opcode::QueryHcaVportContext, 16, 528),
        (Opcode::QueryHcaVportGid, 16, 16),
        (Opcode::AllocQCounter, 16, 16),
        (Opcode::DeallocQCounter, 16, 16),
        (Opcode::QueryQCounter, 32, 256),
        (Opcode::AllocPd, 16, 16),
        (Opcode::DeallocPd, 16, 16),
        (Opcode::AllocUar, 16, 16),
        (Opcode::DeallocUar, 16, 16),
        (Opcode::AttachToMcg, 32, 16),
        (Opcode::DetachFromMcg, 32, 16),
        (Opcode::Nop, 16, 16),
        (Opcode::AllocXrcd, 16, 16),
        (Opcode::DeallocXrcd, 16, 16),
        (Opcode::AllocTransportDomain, 16, 16),
        (Opcode::DeallocTransportDomain, 16, 16),
        (Opcode::CreateTir, 272, 16),
        (Opcode::ModifyTir, 272, 16),
        (Opcode::DestroyTir, 16, 16),
        (Opcode::CreateSq, 272, 16),
        (Opcode::ModifySq, 272, 16),
        (Opcode::CreateRmp, 272, 16),
        (Opcode::CreateTis, 192, 16),
        (Opcode::CreateRqt, 272, 16),
        (Opcode::CreateFlowTable, 64, 16),
        (Opcode::DestroyFlowTable, 64, 16),
        (Opcode::CreateFlowGroup, 1024, 16),
        (Opcode::SetFlowTableEntry, 832, 16),
        (Opcode::AllocFlowCounter, 16, 16),
        (Opcode::DeallocFlowCounter, 16, 16),
        (Opcode::QueryFlowCounter, 32, 16),
        (Opcode::CreateGeneralObject, 16, 16),
        (Opcode::QueryGeneralObject, 16, 16),
        (Opcode::DestroyGeneralObject, 16, 16),
        (Opcode::CreateUmem, 48, 16),
        (Opcode::DestroyUmem, 16, 16),
    ];
    for &(op, inb, outb) in table {
        let (i, o) = mailbox_layouts(op.raw()).unwrap_or_else(|| panic!("{op} has no layouts"));
        assert_eq!(
            (i.size_bytes(), o.size_bytes()),
            (inb, outb),
            "{op}: {} / {}",
            i.name,
            o.name
        );
    }
}

#[test]
fn tails() {
    let tail = |n: &str| find(n).unwrap().tail.map(|t| (t.name, t.elem_bits));
    assert_eq!(tail("create_cq_in"), Some(("pas", 64)));
    assert_eq!(tail("create_qp_in"), Some(("pas", 64)));
    assert_eq!(tail("create_mkey_in"), Some(("klm_pas_mtt", 32)));
    assert_eq!(tail("create_sq_in"), Some(("ctx.wq.pas", 64)));
    assert_eq!(tail("query_hca_vport_gid_out"), Some(("gid", 128)));
    assert_eq!(
        tail("query_flow_counter_out"),
        Some(("flow_statistics", 128))
    );
    assert_eq!(tail("create_umem_in"), Some(("umem.mtt", 64)));
    assert_eq!(tail("create_general_object_in"), Some(("obj_context", 32)));
    assert_eq!(tail("cqc"), None);
    assert_eq!(tail("query_hca_cap_out"), None);
}

#[test]
fn metadata_is_consistent() {
    let reg = registry();
    assert!(reg.len() > 250);
    assert!(
        reg.windows(2).all(|w| w[0].name < w[1].name),
        "registry sorted"
    );
    for m in reg {
        assert_eq!(m.size_bits % 8, 0, "{}", m.name);
        assert_eq!(find(m.name).map(|x| x.name), Some(m.name));
        let mut names = std::collections::HashSet::new();
        for f in m.fields {
            assert!(names.insert(f.name), "{}: duplicate {}", m.name, f.name);
            assert!(f.width_bits > 0);
            assert!(
                f.offset_bits + f.width_bits <= m.size_bits,
                "{}.{}",
                m.name,
                f.name
            );
            match f.kind {
                FieldKind::Scalar => assert!(f.width_bits <= 64),
                FieldKind::Bytes => {
                    assert_eq!(f.offset_bits % 8, 0);
                    assert_eq!(f.width_bits % 8, 0);
                }
            }
        }
    }
    assert!(find("no_such_layout").is_none());
    assert_eq!(nearest_layouts("create_cq", 1), vec!["create_cq_in"]);
    assert_eq!(Cqc::META.nearest_names("log_cq_sz", 1), vec!["log_cq_size"]);
    assert_eq!(
        CreateCqIn::META.nearest_names("log_cq_size", 1),
        vec!["cq_context.log_cq_size"]
    );
}

#[test]
fn every_mailbox_opcode_maps_to_in_and_out() {
    for op in MAILBOX_OPCODES {
        let (i, o) = mailbox_layouts(op.raw()).unwrap();
        assert!(i.name.ends_with("_in") && o.name.ends_with("_out"), "{op}");
        let f = i.field("opcode").unwrap();
        assert_eq!((f.offset_bits, f.width_bits), (0, 16));
        let s = o.field("status").unwrap();
        assert_eq!((s.offset_bits, s.width_bits), (0, 8));
    }
    assert!(mailbox_layouts(0x123).is_none());
}

#[test]
fn enums() {
    assert_eq!(Opcode::from_u16(0x400), Some(Opcode::CreateCq));
    assert_eq!(Opcode::CreateCq.name(), "CREATE_CQ");
    assert_eq!(opcode_name(0x507), "2ERR_QP");
    assert_eq!(opcode_name(0x123), "UNKNOWN(0x123)");
    assert_eq!(
        CmdStatus::from_raw(0x03).map(CmdStatus::name),
        Some("BAD_PARAM")
    );
    assert_eq!(CmdStatus::from_raw(0x07), None);
    assert_eq!(CmdStatus::NoRes.errno(), errno::EAGAIN);
    assert_eq!(CmdStatus::BadInpLen.errno(), errno::EIO);
    assert_eq!(status_name(0x0b), "UNKNOWN(0xb)");
    assert_eq!(
        CqeSyndrome::from_raw(0x22).unwrap().to_string(),
        "REMOTE_ABORTED_ERR"
    );
    assert_eq!(QpState::from_raw(6), Some(QpState::Err));
    assert_eq!(QpServiceType::RegUmr.raw(), 0xc);
    assert_eq!(HcaCapType::Roce.op_mod(true), 0x09);
    assert_eq!(HcaCapType::General.op_mod(true), 0x01);
    assert_eq!(SendOpcode::from_raw(0x25), Some(SendOpcode::Umr));
    assert_eq!(CqeOpcode::from_raw(0xf), Some(CqeOpcode::Invalid));
    for v in 0..=u16::MAX {
        let _ = opcode_name(v);
        let _ = HcaCapType::from_raw(v);
        let _ = GeneralObjType::from_raw(v);
    }
    for v in 0..=u8::MAX {
        let _ = CmdStatus::from_raw(v);
        let _ = CqeOpcode::from_raw(v);
        let _ = CqeSyndrome::from_raw(v);
        let _ = SendOpcode::from_raw(v);
        let _ = QpState::from_raw(v);
        let _ = QpServiceType::from_raw(v);
    }
}

#[test]
fn by_name_errors() {
    let mut buf = vec![0u8; 64];
    let m = Cqc::META;
    match m.set(&mut buf, "log_cq_sz", 1) {
        Err(LayoutError::UnknownField { suggestions, .. }) => {
            assert_eq!(suggestions[0], "log_cq_size")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        m.set(&mut buf, "log_cq_size", 32),
        Err(LayoutError::ValueTooWide {
            width: 5,
            value: 32,
            ..
        })
    ));
    assert!(matches!(
        m.get(&buf[..10], "status"),
        Err(LayoutError::TooShort {
            need: 64,
            got: 10,
            ..
        })
    ));
    assert!(matches!(
        m.decode(&[0u8; 65], false),
        Err(LayoutError::TooLong { .. })
    ));
    assert!(m.decode(&buf, false).unwrap().is_empty());
    assert_eq!(m.decode(&buf, true).unwrap().len(), m.fields.len());
    // A tail layout accepts whole extra elements only.
    let cq = CreateCqIn::META;
    assert!(cq.decode(&[0u8; 272 + 16], false).is_ok());
    assert!(cq.decode(&[0u8; 272 + 4], false).is_err());
    let mut g = vec![0u8; 64];
    let ads = Ads::META;
    assert!(matches!(
        ads.set(&mut g, "rgid_rip", 1),
        Err(LayoutError::WrongKind { .. })
    ));
    assert!(matches!(
        ads.set_value(&mut g, "rgid_rip", &FieldValue::Bytes(vec![1; 4])),
        Err(LayoutError::BytesLength {
            need: 16,
            got: 4,
            ..
        })
    ));
    ads.set_value(&mut g, "rgid_rip", &FieldValue::Bytes(vec![7; 16]))
        .unwrap();
    assert_eq!(Ads::from_slice(&g).unwrap().rgid_rip(), &[7; 16]);
    let e = m.set(&mut buf, "log_cq_sz", 1).unwrap_err().to_string();
    assert!(e.contains("did you mean log_cq_size"), "{e}");
    let mut c = Cqc::new();
    let err = c.try_set_log_cq_size(32).unwrap_err();
    assert_eq!(
        (err.layout, err.field, err.width, err.value),
        ("cqc", "log_cq_size", 5, 32)
    );
    c.set_log_cq_size(0xff); // masked like DEVX_SET
    assert_eq!(c.log_cq_size(), 0x1f);
    assert_eq!(c.uar_page(), 0);
    let dbg = format!("{c:?}");
    assert_eq!(dbg, "Cqc { log_cq_size: 0x1f }");
}

#[test]
#[should_panic(expected = "index out of range")]
fn array_index_panics() {
    let t = Tirc::new();
    let _ = t.rx_hash_toeplitz_key(Tirc::RX_HASH_TOEPLITZ_KEY_LEN);
}
