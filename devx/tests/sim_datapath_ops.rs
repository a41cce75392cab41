//! Every send opcode end to end on one emulated device and across two:
//! data byte for byte, immediates, gather/scatter, inline, CQE fields.

#[path = "sim_datapath_support.rs"]
mod dp;

use dp::*;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_ops {
    use super::*;

    const IMM: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
            .collect()
    }

    fn send_family(p: &mut Pair, na: &Node, nb: &Node) {
        let src = na.mr(4096, ALL);
        let dst = nb.mr(4096, ALL);
        let data = pattern(300, 3);
        src.mem.write(0, &data);

        // SEND with two SGEs into a receive with two SGEs.
        p.b.post_recv(&[
            (dst.key, dst.addr(), 100),
            (dst.key, dst.addr() + 1000, 1000),
        ]);
        let idx = p.a.post(
            SEND,
            SIGNALED,
            [0; 4],
            &[
                &data_seg(200, src.key, src.addr()),
                &data_seg(100, src.key, src.addr() + 200),
            ],
        );
        let c = p.cq_a.poll().expect("requester CQE");
        assert_eq!(
            (c.opcode, c.qpn, c.send_opcode, c.wqe_counter),
            (0, p.a.qpn, SEND, idx)
        );
        assert_eq!(c.uidx, 0x777);
        let r = p.cq_b.poll().expect("responder CQE");
        assert_eq!(
            (r.opcode, r.qpn, r.byte_cnt, r.wqe_counter),
            (2, p.b.qpn, 300, 0)
        );
        assert_eq!(r.rqpn, p.a.qpn);
        assert_eq!(dst.mem.read(0, 100), data[..100]);
        assert_eq!(dst.mem.read(1000, 200), data[100..]);
        assert_eq!(dst.mem.read(1200, 8), [0; 8]);

        // SEND_IMM, solicited, unsignaled: no requester CQE.
        p.b.post_recv(&[(dst.key, dst.addr() + 2048, 64)]);
        p.a.post(SEND_IMM, 0x02, IMM, &[&data_seg(64, src.key, src.addr())]);
        assert_eq!(p.cq_a.poll(), None);
        let r = p.cq_b.poll().unwrap();
        assert_eq!(
            (r.opcode, r.byte_cnt, r.imm, r.se, r.wqe_counter),
            (3, 64, IMM, true, 1)
        );
        assert_eq!(dst.mem.read(2048, 64), data[..64]);

        // Inline SEND of 37 bytes.
        let inl = pattern(37, 99);
        p.b.post_recv(&[(dst.key, dst.addr() + 3000, 64)]);
        p.a.post(SEND, SIGNALED, [0; 4], &[&inline_seg(&inl)]);
        assert_eq!(p.cq_a.poll().unwrap().opcode, 0);
        assert_eq!(p.cq_b.poll().unwrap().byte_cnt, 37);
        assert_eq!(dst.mem.read(3000, 37), inl);
        assert_eq!(dst.mem.read(3037, 1), [0]);
    }

    fn rdma_family(p: &mut Pair, na: &Node, nb: &Node) {
        let local = na.mr(4096, ALL);
        let remote = nb.mr(4096, ALL);
        let data = pattern(64, 11);
        local.mem.write(0, &data);

        // RDMA_WRITE: no responder CQE.
        p.a.post(
            WRITE,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr() + 128, remote.key),
                &data_seg(64, local.key, local.addr()),
            ],
        );
        assert_eq!(p.cq_a.poll().unwrap().send_opcode, WRITE);
        assert_eq!(p.cq_b.poll(), None);
        assert_eq!(remote.mem.read(128, 64), data);

        // RDMA_WRITE_IMM consumes a receive, data goes to raddr.
        p.b.post_recv(&[(remote.key, remote.addr() + 3000, 16)]);
        p.a.post(
            WRITE_IMM,
            SIGNALED,
            IMM,
            &[
                &raddr_seg(remote.addr() + 512, remote.key),
                &data_seg(32, local.key, local.addr() + 32),
            ],
        );
        assert_eq!(p.cq_a.poll().unwrap().opcode, 0);
        let r = p.cq_b.poll().unwrap();
        assert_eq!((r.opcode, r.byte_cnt, r.imm), (1, 32, IMM));
        assert_eq!(remote.mem.read(512, 32), data[32..]);
        assert_eq!(remote.mem.read(3000, 16), [0; 16]);

        // RDMA_READ into two local SGEs.
        let rdata = pattern(96, 50);
        remote.mem.write(1024, &rdata);
        p.a.post(
            READ,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr() + 1024, remote.key),
                &data_seg(40, local.key, local.addr() + 2000),
                &data_seg(56, local.key, local.addr() + 2100),
            ],
        );
        let c = p.cq_a.poll().unwrap();
        assert_eq!((c.opcode, c.send_opcode, c.byte_cnt), (0, READ, 96));
        assert_eq!(local.mem.read(2000, 40), rdata[..40]);
        assert_eq!(local.mem.read(2100, 56), rdata[40..]);

        // Atomics on a host-order u64.
        remote.mem.write(256, &100u64.to_ne_bytes());
        p.a.post(
            FAA,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr() + 256, remote.key),
                &atomic_seg(23, 0),
                &data_seg(8, local.key, local.addr() + 4000),
            ],
        );
        assert_eq!(p.cq_a.poll().unwrap().send_opcode, FAA);
        assert_eq!(remote.mem.read(256, 8), 123u64.to_ne_bytes());
        assert_eq!(local.mem.read(4000, 8), 100u64.to_ne_bytes());
        // CAS that misses, then one that hits.
        for (cmp, expect) in [(7u64, 123u64), (123, 9)] {
            p.a.post(
                CAS,
                SIGNALED,
                [0; 4],
                &[
                    &raddr_seg(remote.addr() + 256, remote.key),
                    &atomic_seg(9, cmp),
                    &data_seg(8, local.key, local.addr() + 4008),
                ],
            );
            assert_eq!(p.cq_a.poll().unwrap().opcode, 0);
            assert_eq!(remote.mem.read(256, 8), expect.to_ne_bytes());
            assert_eq!(local.mem.read(4008, 8), 123u64.to_ne_bytes());
        }
    }

    #[test]
    fn rc_on_one_device() {
        let n = Node::new(1101);
        let mut p = rc_pair_on(&n, None, RC, 7);
        send_family(&mut p, &n, &n);
        rdma_family(&mut p, &n, &n);
    }

    #[test]
    fn rc_across_two_devices() {
        let (na, nb) = (Node::new(1102), Node::new(1103));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        send_family(&mut p, &na, &nb);
        rdma_family(&mut p, &na, &nb);
    }

    #[test]
    fn uc_sends_and_writes() {
        let (na, nb) = (Node::new(1104), Node::new(1105));
        let mut p = rc_pair_on(&na, Some(&nb), UC, 7);
        send_family(&mut p, &na, &nb);
        let local = na.mr(256, ALL);
        let remote = nb.mr(256, ALL);
        local.mem.write(0, &pattern(16, 1));
        p.a.post(
            WRITE,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr(), remote.key),
                &data_seg(16, local.key, local.addr()),
            ],
        );
        assert_eq!(p.cq_a.poll().unwrap().opcode, 0);
        assert_eq!(remote.mem.read(0, 16), pattern(16, 1));
        // READ is not a UC operation.
        p.a.post(
            READ,
            SIGNALED,
            [0; 4],
            &[
                &raddr_seg(remote.addr(), remote.key),
                &data_seg(16, local.key, local.addr()),
            ],
        );
        let c = p.cq_a.poll().unwrap();
        assert_eq!((c.opcode, c.syndrome), (0xd, 0x02));
    }

    #[test]
    fn ud_datagrams_carry_a_grh_and_check_the_qkey() {
        for (ia, ib) in [(1106, 1106), (1107, 1108)] {
            let na = Node::new(ia);
            let nb = Node::new(ib);
            let (cqa, mut cqb) = (na.cq(5), nb.cq(5));
            let mut a = na.qp(UD, &cqa);
            let mut b = nb.qp(UD, &cqb);
            let mut cqa = cqa;
            na.connect_ud(&a);
            nb.connect_ud(&b);
            let src = na.mr(256, ALL);
            let dst = nb.mr(512, ALL);
            let data = pattern(100, 5);
            src.mem.write(0, &data);
            let rgid = if ia == ib { [0; 16] } else { nb.gid() };
            b.post_recv(&[(dst.key, dst.addr(), 512)]);
            // Wrong q_key: dropped silently, the sender still completes.
            a.post(
                SEND,
                SIGNALED,
                [0; 4],
                &[
                    &ud_seg(0x1234, b.qpn, rgid),
                    &data_seg(100, src.key, src.addr()),
                ],
            );
            assert_eq!(cqa.poll().unwrap().opcode, 0);
            assert_eq!(cqb.poll(), None);
            a.post(
                SEND_IMM,
                SIGNALED,
                IMM,
                &[
                    &ud_seg(0x1111_2222, b.qpn, rgid),
                    &data_seg(100, src.key, src.addr()),
                ],
            );
            assert_eq!(cqa.poll().unwrap().opcode, 0);
            let r = cqb.poll().unwrap();
            assert_eq!(
                (r.opcode, r.byte_cnt, r.rqpn, r.grh, r.imm),
                (3, 140, a.qpn, true, IMM)
            );
            let grh = dst.mem.read(0, 40);
            assert_eq!(grh[0] >> 4, 6);
            assert_eq!(&grh[8..24], &na.gid());
            assert_eq!(dst.mem.read(40, 100), data);
        }
    }

    #[test]
    fn nop_and_sq_wrap_around() {
        let n = Node::new(1109);
        let cq = n.cq(8);
        let mut a = n.qp_with(RC, &cq, 3, 4, 2);
        let mut b = n.qp_with(RC, &cq, 3, 4, 2);
        n.connect(&a, b.qpn, [0; 16], 7);
        n.connect(&b, a.qpn, [0; 16], 7);
        let mut cq = cq;
        let src = n.mr(4096, ALL);
        let dst = n.mr(4096, ALL);
        // 3-BB WQEs (inline 100 bytes) on an 8-BB ring wrap mid-WQE.
        for i in 0..20u8 {
            let data = pattern(100, i);
            let idx = a.post(
                WRITE,
                SIGNALED,
                [0; 4],
                &[
                    &raddr_seg(dst.addr() + u64::from(i) * 100, dst.key),
                    &inline_seg(&data),
                ],
            );
            let c = cq.poll().unwrap();
            assert_eq!((c.opcode, c.wqe_counter), (0, idx), "WQE {i}");
            assert_eq!(dst.mem.read(usize::from(i) * 100, 100), data);
        }
        a.post(NOP, SIGNALED, [0; 4], &[]);
        assert_eq!(cq.poll().unwrap().send_opcode, NOP);
        let _ = (&mut b, &src);
    }

    #[test]
    fn several_wqes_per_doorbell_and_cq_owner_wraps() {
        let n = Node::new(1110);
        let cq = n.cq(2);
        let mut a = n.qp(RC, &cq);
        let b = n.qp(RC, &cq);
        n.connect(&a, b.qpn, [0; 16], 7);
        n.connect(&b, a.qpn, [0; 16], 7);
        let mut cq = cq;
        let src = n.mr(64, ALL);
        let dst = n.mr(4096, ALL);
        // 4-entry CQ, 3 WQEs per doorbell, 10 rounds: the owner bit flips.
        let mut seen = 0u32;
        for round in 0..10u64 {
            let mut head = 0;
            for k in 0..3u64 {
                src.mem.write(0, &(round * 3 + k).to_ne_bytes());
                let (_, h) = a.write_wqe(
                    WRITE,
                    SIGNALED,
                    [0; 4],
                    &[
                        &raddr_seg(dst.addr() + (round * 3 + k) * 8, dst.key),
                        &inline_seg(&(round * 3 + k).to_ne_bytes()),
                    ],
                );
                head = h;
            }
            a.ring(head);
            for _ in 0..3 {
                let c = cq.poll().expect("CQE");
                assert_eq!(c.opcode, 0);
                seen += 1;
            }
        }
        assert_eq!(seen, 30);
        for i in 0..30u64 {
            assert_eq!(dst.mem.read(i as usize * 8, 8), i.to_ne_bytes());
        }
    }
}
