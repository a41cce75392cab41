//! Error completions exactly as hardware reports them, the QP's move to
//! ERR with WR_FLUSH_ERR for everything still posted, RNR handling, the
//! UAR check on doorbells, and that memory outside registered ranges is
//! never touched.

#[path = "sim_datapath_support.rs"]
mod dp;

use devx::ProviderContext;
use devx::UarKind;
use dp::*;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_errors {
    use super::*;
    use prm_layouts::enums::Opcode;

    const ERR: u8 = 6;
    const REQ_ERR: u8 = 0xd;
    const RESP_ERR: u8 = 0xe;

    fn send_segs(mr: &Mr, len: u32) -> Vec<u8> {
        data_seg(len, mr.key, mr.addr())
    }

    #[test]
    fn bad_lkey_then_everything_flushes() {
        let n = Node::new(1120);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let src = n.mr(256, ALL);
        let dst = n.mr(256, ALL);
        // Receives on the requester's own RQ get flushed too.
        p.a.post_recv(&[(dst.key, dst.addr(), 64)]);
        p.a.post_recv(&[(dst.key, dst.addr(), 64)]);
        let (i0, _) =
            p.a.write_wqe(SEND, 0, [0; 4], &[&data_seg(16, src.key ^ 0x1, src.addr())]);
        let (i1, _) = p.a.write_wqe(SEND, 0, [0; 4], &[&send_segs(&src, 16)]);
        let (i2, h) =
            p.a.write_wqe(SEND, SIGNALED, [0; 4], &[&send_segs(&src, 16)]);
        p.a.ring(h);
        let c = p.cq_a.poll_all();
        let sq: Vec<_> = c
            .iter()
            .filter(|c| c.opcode == REQ_ERR)
            .map(|c| (c.syndrome, c.wqe_counter))
            .collect();
        assert_eq!(sq, vec![(0x04, i0), (0x05, i1), (0x05, i2)]);
        let rq: Vec<_> = c
            .iter()
            .filter(|c| c.opcode == RESP_ERR)
            .map(|c| c.syndrome)
            .collect();
        assert_eq!(rq, vec![0x05, 0x05]);
        assert_eq!(n.qp_state(&p.a), ERR);
        // Later posts flush as well.
        let i3 = p.a.post(
            WRITE,
            0,
            [0; 4],
            &[&raddr_seg(dst.addr(), dst.key), &send_segs(&src, 8)],
        );
        let c = p.cq_a.poll().unwrap();
        assert_eq!((c.opcode, c.syndrome, c.wqe_counter), (REQ_ERR, 0x05, i3));
        assert_eq!(p.cq_b.poll(), None);
    }

    #[test]
    fn pd_mismatch_and_missing_local_write_are_protection_errors() {
        let n = Node::new(1121);
        let other_pd = {
            let mut out = vec![0u8; 16];
            n.ctx
                .create(&hdr(Opcode::AllocPd.raw(), 0, 16), &mut out)
                .unwrap();
            be32(&out, 8) & 0xff_ffff
        };
        let mut p = rc_pair_on(&n, None, RC, 7);
        let foreign = n.mr_pd(64, ALL, other_pd);
        p.a.post(SEND, SIGNALED, [0; 4], &[&send_segs(&foreign, 16)]);
        assert_eq!(p.cq_a.poll().map(|c| c.syndrome), Some(0x04));

        // READ into a buffer without local write.
        let mut p = rc_pair_on(&n, None, RC, 7);
        let ro = n.mr(
            64,
            Acc {
                lw: false,
                rr: false,
                rw: false,
                a: false,
            },
        );
        let remote = n.mr(64, ALL);
        p.a.post(
            READ,
            SIGNALED,
            [0; 4],
            &[&raddr_seg(remote.addr(), remote.key), &send_segs(&ro, 16)],
        );
        assert_eq!(
            p.cq_a.poll().map(|c| (c.opcode, c.syndrome)),
            Some((REQ_ERR, 0x04))
        );

        // A receive buffer without local write: the responder reports
        // LOCAL_PROT_ERR, the requester REMOTE_OP_ERR.
        let mut p = rc_pair_on(&n, None, RC, 7);
        let src = n.mr(64, ALL);
        p.b.post_recv(&[(ro.key, ro.addr(), 64)]);
        p.a.post(SEND, SIGNALED, [0; 4], &[&send_segs(&src, 16)]);
        assert_eq!(
            p.cq_b.poll().map(|c| (c.opcode, c.syndrome)),
            Some((RESP_ERR, 0x04))
        );
        assert_eq!(
            p.cq_a.poll().map(|c| (c.opcode, c.syndrome)),
            Some((REQ_ERR, 0x14))
        );
        assert_eq!(n.qp_state(&p.b), ERR);
    }

    #[test]
    fn memory_outside_registered_ranges_is_never_touched() {
        let n = Node::new(1122);
        // An MKEY longer than its UMEM cannot exist.
        let (addr, umem) = n.umem(4096);
        assert!(n.mkey(umem, 0, addr as u64, 4097, ALL, n.pd).is_err());
        assert!(n.mkey(umem, 1, addr as u64, 4096, ALL, n.pd).is_err());

        let mut p = rc_pair_on(&n, None, RC, 7);
        let local = n.mr(4096, ALL);
        let remote = n.mr(4096, ALL);
        local.mem.fill(0x11);
        remote.mem.fill(0x22);
        let slack_before = local.mem.read_slack(4096, 64);
        // READ scattering 16 bytes starting 8 bytes before the end.
        p.a.post(
            READ,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr(), remote.key),
                &data_seg(16, local.key, local.addr() + 4088),
            ],
        );
        assert_eq!(p.cq_a.poll().map(|c| c.syndrome), Some(0x04));
        assert_eq!(local.mem.read(4080, 16), vec![0x11; 16]);
        assert_eq!(local.mem.read_slack(4096, 64), slack_before);

        // A WRITE reaching past the remote key's end: REMOTE_ACCESS_ERR.
        let mut p = rc_pair_on(&n, None, RC, 7);
        let remote_slack = remote.mem.read_slack(4096, 64);
        p.a.post(
            WRITE,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr() + 4090, remote.key),
                &data_seg(16, local.key, local.addr()),
            ],
        );
        assert_eq!(p.cq_a.poll().map(|c| c.syndrome), Some(0x13));
        assert_eq!(remote.mem.read(4080, 16), vec![0x22; 16]);
        assert_eq!(remote.mem.read_slack(4096, 64), remote_slack);
        // The responder of an RC access error goes to ERR too.
        assert_eq!(n.qp_state(&p.b), ERR);
    }

    #[test]
    fn remote_access_errors() {
        let (na, nb) = (Node::new(1123), Node::new(1124));
        let local = na.mr(64, ALL);
        let no_rw = nb.mr(
            64,
            Acc {
                lw: true,
                rr: true,
                rw: false,
                a: false,
            },
        );
        for (op, seg2, key) in [
            (WRITE, None, no_rw.key),
            (WRITE, None, no_rw.key ^ 0xff),
            (FAA, Some(atomic_seg(1, 0)), no_rw.key),
        ] {
            let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
            let ds = data_seg(8, local.key, local.addr());
            let ra = raddr_seg(no_rw.addr(), key);
            let segs: Vec<&[u8]> = match &seg2 {
                Some(a) => vec![&ra, a, &ds],
                None => vec![&ra, &ds],
            };
            p.a.post(op, SIGNALED, [0; 4], &segs);
            assert_eq!(
                p.cq_a.poll().map(|c| (c.opcode, c.syndrome)),
                Some((REQ_ERR, 0x13))
            );
            assert_eq!(na.qp_state(&p.a), ERR);
            assert_eq!(nb.qp_state(&p.b), ERR);
        }
    }

    #[test]
    fn length_errors() {
        let n = Node::new(1125);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let src = n.mr(4096, ALL);
        let dst = n.mr(4096, ALL);
        p.b.post_recv(&[(dst.key, dst.addr(), 100)]);
        p.b.post_recv(&[(dst.key, dst.addr(), 100)]);
        p.a.post(SEND, 0, [0; 4], &[&send_segs(&src, 200)]);
        assert_eq!(
            p.cq_a.poll().map(|c| (c.opcode, c.syndrome)),
            Some((REQ_ERR, 0x12))
        );
        let r = p.cq_b.poll_all();
        assert_eq!(
            r.iter().map(|c| (c.opcode, c.syndrome)).collect::<Vec<_>>(),
            vec![(RESP_ERR, 0x01), (RESP_ERR, 0x05)]
        );
        assert_eq!(n.qp_state(&p.b), ERR);
    }

    #[test]
    fn rnr_retry_exceeded_and_infinite_rnr() {
        let n = Node::new(1126);
        let src = n.mr(64, ALL);
        let dst = n.mr(64, ALL);
        for retry in [0u8, 3] {
            let mut p = rc_pair_on(&n, None, RC, retry);
            p.a.post(SEND, SIGNALED, [0; 4], &[&send_segs(&src, 8)]);
            let c = p.cq_a.wait();
            assert_eq!((c.opcode, c.syndrome), (REQ_ERR, 0x16), "rnr_retry {retry}");
            assert_eq!(n.qp_state(&p.a), ERR);
        }
        // rnr_retry 7: the send waits until a receive is posted (no doorbell
        // needed: the device's RNR timer retries).
        let mut p = rc_pair_on(&n, None, RC, 7);
        src.mem.write(0, b"rnr-wait");
        p.a.post(SEND, SIGNALED, [0; 4], &[&send_segs(&src, 8)]);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(p.cq_a.poll(), None);
        p.b.post_recv(&[(dst.key, dst.addr(), 64)]);
        assert_eq!(p.cq_a.wait().opcode, 0);
        assert_eq!(p.cq_b.wait().byte_cnt, 8);
        assert_eq!(dst.mem.read(0, 8), b"rnr-wait");
    }

    #[test]
    fn doorbells_on_a_foreign_uar_and_unready_qps_do_nothing() {
        let n = Node::new(1127);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let src = n.mr(64, ALL);
        let dst = n.mr(64, ALL);
        src.mem.write(0, &[7; 8]);
        let other = n.ctx.uar_alloc(UarKind::BlueFlame).unwrap();
        let (_, head) = p.a.write_wqe(
            WRITE,
            SIGNALED,
            [0; 4],
            &[&raddr_seg(dst.addr(), dst.key), &send_segs(&src, 8)],
        );
        let real = std::sync::Arc::clone(&p.a.page);
        p.a.page = other.page;
        p.a.ring(head);
        assert_eq!(p.cq_a.poll(), None);
        assert_eq!(dst.mem.read(0, 8), [0; 8]);
        p.a.page = real;
        p.a.ring(head);
        assert_eq!(p.cq_a.poll().map(|c| c.opcode), Some(0));
        assert_eq!(dst.mem.read(0, 8), [7; 8]);

        // A QP in INIT keeps its WQEs; once in RTS the next doorbell runs them.
        let cq = n.cq(4);
        let mut q = n.qp(RC, &cq);
        let mut cq = cq;
        let mut qpc = prm_layouts::Qpc::new();
        qpc.primary_address_path_mut().set_vhca_port_num(1);
        qpc.set_rwe(1);
        qpc.set_pm_state(3);
        n.modify(&q, 0x502, 0, &qpc).unwrap();
        q.post(NOP, SIGNALED, [0; 4], &[]);
        assert_eq!(cq.poll(), None);
        let mut rtr = prm_layouts::Qpc::new();
        rtr.set_mtu(3);
        rtr.set_log_msg_max(16);
        rtr.set_remote_qpn(p.b.qpn);
        rtr.primary_address_path_mut().set_vhca_port_num(1);
        n.modify(&q, 0x503, 0, &rtr).unwrap();
        n.modify(&q, 0x504, 0, &prm_layouts::Qpc::new()).unwrap();
        q.post(NOP, SIGNALED, [0; 4], &[]);
        assert_eq!(cq.poll_all().len(), 2);
    }

    #[test]
    fn garbage_wqes_give_error_cqes_not_panics() {
        let n = Node::new(1128);
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..50 {
            let mut p = rc_pair_on(&n, None, RC, 0);
            for _ in 0..4 {
                let mut segs = Vec::new();
                for _ in 0..(rnd() % 6) {
                    segs.extend_from_slice(&rnd().to_be_bytes());
                    segs.extend_from_slice(&rnd().to_be_bytes());
                }
                let opcode = [SEND, WRITE, READ, CAS, FAA, 0x77, SEND_IMM][(rnd() % 7) as usize];
                let (_, h) = p.a.write_wqe(opcode, SIGNALED, [1, 2, 3, 4], &[&segs]);
                p.a.ring(h);
            }
            let cqes = p.cq_a.poll_all();
            assert!(!cqes.is_empty(), "round {round}");
        }
    }

    #[test]
    fn paused_engine_holds_doorbells_until_run() {
        let n = Node::new(1129);
        let mut p = rc_pair_on(&n, None, RC, 7);
        let dst = n.mr(1024, ALL);
        n.dev.pause_engine(true);
        for i in 0..10u8 {
            p.a.post(
                WRITE,
                SIGNALED,
                [0; 4],
                &[
                    &raddr_seg(dst.addr() + u64::from(i) * 8, dst.key),
                    &inline_seg(&[i; 8]),
                ],
            );
        }
        assert_eq!(p.cq_a.poll(), None);
        assert!(n.dev.engine_held() >= 1);
        n.dev.run_engine();
        assert_eq!(p.cq_a.poll_all().len(), 10);
        for i in 0..10u8 {
            assert_eq!(dst.mem.read(usize::from(i) * 8, 8), [i; 8]);
        }
        n.dev.pause_engine(false);
        p.a.post(NOP, SIGNALED, [0; 4], &[]);
        assert_eq!(p.cq_a.poll().map(|c| c.send_opcode), Some(NOP));
    }

    #[test]
    fn cq_overrun_drops_completions_and_marks_the_cq() {
        let n = Node::new(1130);
        let cq = n.cq(2);
        let mut a = n.qp(RC, &cq);
        let b = n.qp(RC, &cq);
        n.connect(&a, b.qpn, [0; 16], 7);
        n.connect(&b, a.qpn, [0; 16], 7);
        let mut cq = cq;
        for _ in 0..6 {
            a.post(NOP, SIGNALED, [0; 4], &[]);
        }
        assert_eq!(cq.poll_all().len(), 4);
        a.post(NOP, SIGNALED, [0; 4], &[]);
        assert_eq!(cq.poll(), None);
    }
}
