//! End to end between two emulated devices: every opcode with the data
//! checked byte for byte, immediates, several SGEs, inline, UD, selective
//! signaling.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use std::time::{Duration, Instant};

    use crate::datapath_support::{
        bytes, caps, connect_qp, open, path_to, quiet, rc_pair, side, wait, Buf, Side,
    };
    use verbs::datapath::RawCqe;
    use verbs::{
        Ah, Cq, InitAttr, QpInit, QpType, RecvWr, RtrAttr, RtsAttr, SendWr, SrqInit, Wc, WcOpcode,
        WcStatus,
    };

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

    /// A paused device takes a QP's doorbells as stores alone once it holds
    /// one for the QP, and runs everything posted when it resumes: each
    /// request's data lands and each completes, in order.
    #[test]
    fn a_paused_device_holds_one_doorbell_per_qp_and_runs_all_posts() {
        let (mut a, b) = rc_pair(610);
        let src = Buf::all(&a.pd, 3 * 64);
        let dst = Buf::all(&b.pd, 3 * 64);
        for k in 0..3 {
            src.write(64 * k, &[k as u8 + 1; 64]);
        }
        a.sim.pause_engine(true);
        for k in 0..3u64 {
            let sgl = [src.sge(64 * k as usize, 64)];
            let remote = dst.addr() + 64 * k;
            a.qp.post_send(&SendWr::rdma_write(k, &sgl, remote, dst.mr.rkey()).signaled(true))
                .unwrap();
        }
        assert_eq!(a.sim.engine_held(), 1, "one held doorbell for the QP");
        assert_eq!(dst.read(0, 3 * 64), vec![0; 3 * 64], "nothing ran yet");
        a.sim.pause_engine(false);
        let got = wait(&mut a.cq, 3);
        assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(got.iter().all(|w| w.is_ok()), "{got:?}");
        for k in 0..3 {
            assert_eq!(dst.read(64 * k, 64), vec![k as u8 + 1; 64]);
        }
    }

    /// Waits until `cq`'s ring holds `n` completions from its consumer
    /// index on, none of them polled.
    fn wait_unpolled(cq: &Cq, n: u32) {
        let m = cq.memory();
        let log = m.entries.trailing_zeros();
        let deadline = Instant::now() + Duration::from_secs(10);
        let ci = cq.consumer_index();
        while !(ci..ci + n).all(|c| {
            let at = m.addr + 64 * (c % m.entries) as usize + 63;
            RawCqe::is_sw_owned(bytes(at, 1)[0], c, log)
        }) {
            assert!(Instant::now() < deadline, "{n} completions never came");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Resets both QPs of a pair and connects them again.
    fn reset_pair(a: &mut Side, b: &mut Side) {
        a.qp.reset().unwrap();
        b.qp.reset().unwrap();
        connect_qp(&a.qp, b.qp.qpn(), path_to(b), 7);
        connect_qp(&b.qp, a.qp.qpn(), path_to(a), 7);
    }

    /// Takes the `n` completions `cq` holds, with the array poll (`way`
    /// 0), `poll_one` (1) or the lazy poll (2).
    fn take(way: usize, cq: &mut Cq, n: u32) -> Vec<Wc> {
        match way {
            0 => wait(cq, n as usize),
            1 => {
                wait_unpolled(cq, n);
                std::iter::from_fn(|| cq.poll_one()).collect()
            }
            _ => {
                wait_unpolled(cq, n);
                cq.start_poll().map(|c| c.wc()).collect()
            }
        }
    }

    /// Completions still in the CQ when their QP goes back to RST are
    /// dropped, as mlx5's CQ clean does: the WRITEs posted after the reset
    /// complete with their own wr_ids, and the SQ's room is exactly theirs.
    /// Polled each of the three ways, each with the QP already the one its
    /// fast path takes.
    #[test]
    fn completions_left_in_the_cq_at_a_reset_are_dropped() {
        for way in 0..3 {
            let (mut a, mut b) = rc_pair(600);
            let src = Buf::all(&a.pd, 64);
            let dst = Buf::all(&b.pd, 64);
            let sgl = [src.sge(0, 64)];
            let write = |id| SendWr::rdma_write(id, &sgl, dst.addr(), dst.mr.rkey());
            a.qp.post_send(&write(0)).unwrap();
            assert_eq!(take(way, &mut a.cq, 1)[0].wr_id, 0, "way {way}");
            assert!(take(way, &mut a.cq, 0).is_empty());
            for id in 1..=3 {
                a.qp.post_send(&write(id)).unwrap();
            }
            wait_unpolled(&a.cq, 3);
            reset_pair(&mut a, &mut b);
            for id in [10, 11] {
                a.qp.post_send(&write(id)).unwrap();
            }
            wait_unpolled(&a.cq, 3 + 2);
            let got = take(way, &mut a.cq, 2);
            let ids: Vec<_> = got.iter().map(|w| (w.wr_id, w.status)).collect();
            assert_eq!(
                ids,
                [(10, WcStatus::Success), (11, WcStatus::Success)],
                "way {way}"
            );
            assert_eq!(a.qp.send_queue().in_use(), 0, "way {way}");
            assert_eq!(a.cq.consumer_index(), 1 + 3 + 2, "way {way}");
            // And on, past where the old completions ended.
            a.qp.post_send(&write(12)).unwrap();
            assert_eq!(take(way, &mut a.cq, 1)[0].wr_id, 12, "way {way}");
            quiet(&mut a.cq);
        }
    }

    /// Receives an SRQ gave a QP, completed but not polled when the QP went
    /// back to RST, give their SRQ WQEs back when a poll drops them: the SRQ
    /// takes as many receives again, and only the new ones complete.
    #[test]
    fn a_reset_gives_back_the_srq_wqes_of_its_dropped_receives() {
        let mut a = side(600, QpType::Rc, caps());
        let (ctx, sim) = open(700);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let mut srq = pd.create_srq(&SrqInit::new(8, 1)).unwrap();
        let qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(caps()).srq(&srq))
            .unwrap();
        let mut b = Side {
            ctx,
            sim,
            pd,
            cq,
            qp,
        };
        connect_qp(&a.qp, b.qp.qpn(), path_to(&b), 7);
        connect_qp(&b.qp, a.qp.qpn(), path_to(&a), 7);
        let src = Buf::all(&a.pd, 64);
        let dst = Buf::all(&b.pd, 64 * 16);
        // As many receives as the SRQ takes.
        let mut n = 0u32;
        while srq
            .post_recv(&RecvWr::new(u64::from(n), &[dst.sge(64 * n as usize, 64)]))
            .is_ok()
        {
            n += 1;
        }
        assert!(n >= 8);
        for id in 0..u64::from(n) {
            a.qp.post_send(&SendWr::send(id, &[src.sge(0, 64)]))
                .unwrap();
        }
        wait_unpolled(&b.cq, n);
        reset_pair(&mut a, &mut b);
        // The poll that drops them reports nothing.
        quiet(&mut b.cq);
        assert_eq!(b.cq.consumer_index(), n);
        for k in 0..n {
            let sge = [dst.sge(64 * k as usize, 64)];
            srq.post_recv(&RecvWr::new(100 + u64::from(k), &sge))
                .unwrap();
        }
        a.qp.post_send(&SendWr::send(50, &[src.sge(0, 64)]))
            .unwrap();
        let r = wait(&mut b.cq, 1);
        assert_eq!((r[0].wr_id, r[0].status), (100, WcStatus::Success));
        quiet(&mut b.cq);
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
