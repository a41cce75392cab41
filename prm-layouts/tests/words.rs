//! Building and reading layouts as dwords agrees with the typed accessors.

use prm_layouts::fields::{cqe64, wqe_ctrl_seg, wqe_data_seg, wqe_datagram_seg};
use prm_layouts::words::Words;
use prm_layouts::{Cqe64, WqeCtrlSeg, WqeDataSeg, WqeDatagramSeg};

fn dword(b: &[u8], byte: usize) -> u32 {
    u32::from_be_bytes(b[byte..byte + 4].try_into().unwrap())
}

#[test]
fn built_segments_read_back_through_the_typed_layouts() {
    let c = WqeCtrlSeg(
        Words::<4>::new()
            .with(wqe_ctrl_seg::WQE_INDEX, 0x1_abcd) // wider than 16 bits: masked
            .with(wqe_ctrl_seg::OPCODE, 0x0a)
            .with(wqe_ctrl_seg::QPN, 0xfe_dcba)
            .with(wqe_ctrl_seg::DS, 0x43) // wider than 6 bits: masked
            .with(wqe_ctrl_seg::FM_CE_SE, 0x88)
            .with(wqe_ctrl_seg::IMM, 0xdead_beef)
            .to_be_bytes(),
    );
    assert_eq!(
        (
            c.wqe_index(),
            c.opcode(),
            c.qpn(),
            c.ds(),
            c.fm_ce_se(),
            c.imm()
        ),
        (0xabcd, 0x0a, 0xfe_dcba, 0x3, 0x88, 0xdead_beef)
    );
    assert_eq!((c.opmod(), c.signature()), (0, 0));

    let d = WqeDataSeg(
        Words::<4>::new()
            .with(wqe_data_seg::BYTE_COUNT, 64)
            .with(wqe_data_seg::LKEY, 0x400)
            .with64(wqe_data_seg::ADDR, 0x1122_3344_5566_7788)
            .to_be_bytes(),
    );
    assert_eq!(
        (d.byte_count(), d.lkey(), d.addr()),
        (64, 0x400, 0x1122_3344_5566_7788)
    );

    // Twelve dwords, and a field replaced rather than or-ed in.
    let av = WqeDatagramSeg(
        Words::<12>::new()
            .with(wqe_datagram_seg::DQP_DCT, 0xff_ffff)
            .with(wqe_datagram_seg::EXT, 1)
            .with(wqe_datagram_seg::DQP_DCT, 0x12)
            .to_be_bytes(),
    );
    assert_eq!((av.ext(), av.dqp_dct()), (1, 0x12));
}

#[test]
fn odd_dword_counts_keep_the_last_dword() {
    let b: [u8; 12] = Words([1, 2, 3]).to_be_bytes();
    assert_eq!(b, [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
}

#[test]
fn fields_read_from_raw_dwords_match_the_typed_getters() {
    let c = Cqe64::new()
        .with_byte_cnt(0x1234_5678)
        .with_sop_drop_qpn(0x0800_0123)
        .with_wqe_counter(0xbeef)
        .with_opcode(0xd)
        .with_owner(1);
    let b = c.as_bytes();
    let get = |f: prm_layouts::words::Field32| f.get(dword(b, f.byte));
    assert_eq!(get(cqe64::BYTE_CNT), c.byte_cnt());
    assert_eq!(get(cqe64::SOP_DROP_QPN), c.sop_drop_qpn());
    assert_eq!(get(cqe64::WQE_COUNTER), u32::from(c.wqe_counter()));
    assert_eq!(get(cqe64::OPCODE), 0xd);
    assert_eq!(get(cqe64::OWNER), 1);
    assert_eq!(get(cqe64::FORMAT), 0);
}
