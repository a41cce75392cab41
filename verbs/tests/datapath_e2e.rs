//! End to end between two emulated devices: every opcode with the data
//! checked byte for byte, immediates, several SGEs, inline, UD, selective
//! signaling.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use crate::datapath_support::{caps, connect_qp, path_to, rc_pair, side, wait, Buf};
    use verbs::{Ah, InitAttr, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus};

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// A QP sent back to RST forgets what was posted before: the doorbell
    /// record's counters restart with the queue's, so a doorbell the device
    /// handles after the QP is ready again runs no stale WQE.
    #[test]
    fn reset_discards_posted_requests() {
        let (mut a, b) = rc_pair(600);
        let src = Buf::all(&a.pd, 64);
        let dst = Buf::all(&b.pd, 64);
        src.write(0, &[7; 64]);
        a.sim.pause_engine(true);
        let sgl = [src.sge(0, 64)];
        let w = SendWr::rdma_write(1, &sgl, dst.addr(), dst.mr.rkey());
        a.qp.post_send(&w).unwrap();
        a.qp.reset().unwrap();
        connect_qp(&a.qp, b.qp.qpn(), path_to(&b), 7);
        // The held doorbell runs now, against the QP as it is after reset.
        a.sim.pause_engine(false);
        let mut wc = [verbs::Wc::default(); 4];
        assert_eq!(a.cq.poll(&mut wc), 0, "{wc:?}");
        assert_eq!(dst.read(0, 64), vec![0; 64]);
        // And the queue works from its start again.
        a.qp.post_send(&w).unwrap();
        assert_eq!(wait(&mut a.cq, 1)[0].status, WcStatus::Success);
        assert_eq!(dst.read(0, 64), vec![7; 64]);
    }

    #[test]
    fn send_with_imm_scatters_over_two_sges() {
        let (mut a, mut b) = rc_pair(600);
        let src = Buf::all(&a.pd, 4096);
        let dst = Buf::all(&b.pd, 4096);
        let data = pattern(1000, 7);
        src.write(0, &data[..600]);
        src.write(2000, &data[600..]);
        b.qp.post_recv(&RecvWr::new(55, &[dst.sge(100, 300), dst.sge(1000, 3000)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(11, &[src.sge(0, 600), src.sge(2000, 400)]).imm(0xcafe))
            .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(
            (s[0].wr_id, s[0].status, s[0].opcode),
            (11, WcStatus::Success, WcOpcode::Send)
        );
        let r = wait(&mut b.cq, 1);
        assert_eq!(r[0].wr_id, 55);
        assert_eq!(r[0].status, WcStatus::Success, "{:?}", r[0]);
        assert_eq!(r[0].opcode, WcOpcode::Recv);
        assert_eq!(r[0].byte_len, 1000);
        assert_eq!(r[0].imm(), Some(0xcafe));
        assert_eq!(r[0].qp_num, b.qp.qpn());
        assert_eq!(dst.read(100, 300), data[..300]);
        assert_eq!(dst.read(1000, 700), data[300..]);
        assert_eq!(dst.read(400, 600), vec![0; 600]);
    }

    #[test]
    fn rdma_write_write_imm_and_read() {
        let (mut a, mut b) = rc_pair(600);
        let la = Buf::all(&a.pd, 16384);
        let rb = Buf::all(&b.pd, 8192);
        let data = pattern(5000, 3);
        la.write(0, &data);
        let rkey = rb.mr.rkey();
        a.qp.post_send(&SendWr::rdma_write(
            1,
            &[la.sge(0, 5000)],
            rb.addr() + 10,
            rkey,
        ))
        .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(
            (s[0].status, s[0].opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        assert_eq!(rb.read(10, 5000), data);

        b.qp.post_recv(&RecvWr::new(9, &[])).unwrap();
        a.qp.post_send(
            &SendWr::rdma_write(2, &[la.sge(0, 64)], rb.addr() + 6000, rkey).imm(0x1234_5678),
        )
        .unwrap();
        wait(&mut a.cq, 1);
        let r = wait(&mut b.cq, 1);
        assert_eq!(r[0].wr_id, 9);
        assert_eq!(
            (r[0].status, r[0].opcode),
            (WcStatus::Success, WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!(r[0].imm(), Some(0x1234_5678));
        assert_eq!(rb.read(6000, 64), data[..64]);

        let remote = pattern(3000, 99);
        rb.write(100, &remote);
        a.qp.post_send(&SendWr::rdma_read(
            3,
            &[la.sge(5000, 1000), la.sge(7000, 2000)],
            rb.addr() + 100,
            rkey,
        ))
        .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(
            (s[0].wr_id, s[0].status, s[0].opcode),
            (3, WcStatus::Success, WcOpcode::RdmaRead)
        );
        assert_eq!(s[0].byte_len, 3000);
        assert_eq!(la.read(5000, 1000), remote[..1000]);
        assert_eq!(la.read(7000, 2000), remote[1000..]);
    }

    #[test]
    fn atomics_use_host_order_u64() {
        let (mut a, b) = rc_pair(600);
        let la = Buf::all(&a.pd, 64);
        let rb = Buf::all(&b.pd, 64);
        rb.write(8, &100u64.to_ne_bytes());
        let rkey = rb.mr.rkey();
        a.qp.post_send(&SendWr::fetch_add(
            1,
            &[la.sge(0, 8)],
            rb.addr() + 8,
            rkey,
            23,
        ))
        .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(
            (s[0].status, s[0].opcode, s[0].byte_len),
            (WcStatus::Success, WcOpcode::FetchAdd, 8)
        );
        assert_eq!(la.read(0, 8), 100u64.to_ne_bytes());
        assert_eq!(rb.read(8, 8), 123u64.to_ne_bytes());
        // A compare that fails leaves the target alone; one that matches swaps.
        a.qp.post_send(&SendWr::comp_swap(
            2,
            &[la.sge(16, 8)],
            rb.addr() + 8,
            rkey,
            5,
            7,
        ))
        .unwrap();
        a.qp.post_send(&SendWr::comp_swap(
            3,
            &[la.sge(24, 8)],
            rb.addr() + 8,
            rkey,
            123,
            0xdead_beef_0000_0001,
        ))
        .unwrap();
        let s = wait(&mut a.cq, 2);
        assert!(s
            .iter()
            .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::CompSwap));
        assert_eq!(la.read(16, 8), 123u64.to_ne_bytes());
        assert_eq!(la.read(24, 8), 123u64.to_ne_bytes());
        assert_eq!(rb.read(8, 8), 0xdead_beef_0000_0001u64.to_ne_bytes());
    }

    #[test]
    fn inline_send_and_inline_write() {
        let (mut a, mut b) = rc_pair(600);
        let dst = Buf::all(&b.pd, 1024);
        let max = a.qp.cap().max_inline_data as usize;
        let data = pattern(max, 5);
        b.qp.post_recv(&RecvWr::new(1, &[dst.sge(0, 1024)]))
            .unwrap();
        a.qp.post_send(&SendWr::send(1, &[]).inline_data(&data))
            .unwrap();
        wait(&mut a.cq, 1);
        let r = wait(&mut b.cq, 1);
        assert_eq!(
            (r[0].status, r[0].byte_len as usize),
            (WcStatus::Success, max)
        );
        assert_eq!(dst.read(0, max), data);
        a.qp.post_send(
            &SendWr::rdma_write(2, &[], dst.addr() + 512, dst.mr.rkey()).inline_data(&data[..33]),
        )
        .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(s[0].status, WcStatus::Success);
        assert_eq!(dst.read(512, 33), data[..33]);
    }

    #[test]
    fn selective_signaling_and_batches() {
        let (mut a, b) = rc_pair(600);
        let la = Buf::all(&a.pd, 64 * 64);
        let rb = Buf::all(&b.pd, 64 * 64);
        let data = pattern(64 * 64, 1);
        la.write(0, &data);
        for round in 0..8u64 {
            let mut batch = a.qp.send_batch();
            for i in 0..16u64 {
                let sge = [la.sge(64 * i as usize, 64)];
                let wr = SendWr::rdma_write(round * 16 + i, &sge, rb.addr() + 64 * i, rb.mr.rkey())
                    .signaled(i == 15);
                batch.post(&wr).unwrap();
            }
            batch.ring();
            let s = wait(&mut a.cq, 1);
            assert_eq!(s[0].wr_id, round * 16 + 15);
            assert_eq!(a.qp.send_queue().in_use(), 0);
        }
        crate::datapath_support::quiet(&mut a.cq);
        assert_eq!(rb.read(0, 1024), data[..1024]);
    }

    #[test]
    fn ud_send_reaches_the_peer() {
        let mut a = side(700, verbs::QpType::Ud, caps());
        let mut b = side(800, verbs::QpType::Ud, caps());
        for s in [&a, &b] {
            s.qp.to_init(&InitAttr::new(1).qkey(0x1111)).unwrap();
            s.qp.to_rtr(&RtrAttr::ud()).unwrap();
            s.qp.to_rts(&RtsAttr::new(0)).unwrap();
        }
        let ah = Ah::create(&a.pd, &path_to(&b)).unwrap();
        let src = Buf::all(&a.pd, 256);
        let dst = Buf::all(&b.pd, 1024);
        let data = pattern(200, 9);
        src.write(0, &data);
        b.qp.post_recv(&RecvWr::new(4, &[dst.sge(0, 1024)]))
            .unwrap();
        a.qp.post_send(
            &SendWr::send(3, &[src.sge(0, 200)])
                .imm(5)
                .ud(&ah, b.qp.qpn(), 0x1111),
        )
        .unwrap();
        let s = wait(&mut a.cq, 1);
        assert_eq!(s[0].status, WcStatus::Success);
        let r = wait(&mut b.cq, 1);
        assert_eq!(r[0].status, WcStatus::Success, "{:?}", r[0]);
        assert_eq!(r[0].src_qp, a.qp.qpn());
        assert_eq!(r[0].imm(), Some(5));
        // UD receives start with the 40-byte GRH.
        assert_eq!(r[0].byte_len, 240);
        assert!(r[0].grh);
        assert_eq!(dst.read(40, 200), data);
    }
}
