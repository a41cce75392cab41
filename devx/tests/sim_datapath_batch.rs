//! Several WQEs per doorbell to a QP on another device: they travel as one
//! batch, and an error or RNR wait in the middle must leave exactly what
//! one-at-a-time execution would (completions, order, memory, flushes).

#[path = "sim_datapath_support.rs"]
mod dp;

use dp::*;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_batch {
    use super::*;

    const ERR: u8 = 6;
    const REQ_ERR: u8 = 0xd;

    #[test]
    fn a_nak_mid_batch_stops_delivery_and_flushes_the_rest() {
        let (na, nb) = (Node::new(1160), Node::new(1161));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let src = na.mr(256, ALL);
        let dst = nb.mr(1024, ALL);
        src.mem.write(0, &[0xab; 64]);
        let mut idx = Vec::new();
        let mut head = 0;
        for i in 0..6u64 {
            // The third WRITE has a bad rkey.
            let rkey = if i == 2 { dst.key ^ 0x1 } else { dst.key };
            let (w, h) = p.a.write_wqe(
                WRITE,
                SIGNALED,
                [0; 4],
                &[
                    &raddr_seg(dst.addr() + i * 64, rkey),
                    &data_seg(64, src.key, src.addr()),
                ],
            );
            idx.push(w);
            head = h;
        }
        p.a.ring(head);
        let c: Vec<_> = p
            .cq_a
            .poll_all()
            .iter()
            .map(|c| (c.opcode, c.syndrome, c.wqe_counter))
            .collect();
        assert_eq!(
            c,
            vec![
                (0, 0, idx[0]),
                (0, 0, idx[1]),
                (REQ_ERR, 0x13, idx[2]),
                (REQ_ERR, 0x05, idx[3]),
                (REQ_ERR, 0x05, idx[4]),
                (REQ_ERR, 0x05, idx[5]),
            ]
        );
        assert_eq!(dst.mem.read(0, 128), vec![0xab; 128]);
        assert_eq!(dst.mem.read(128, 384), vec![0; 384]);
        assert_eq!(na.qp_state(&p.a), ERR);
        assert_eq!(nb.qp_state(&p.b), ERR);
    }

    /// The same with WRITEs of two data segments each (a run gathered
    /// into one buffer rather than copied segment by segment), the halves
    /// of each from different places.
    #[test]
    fn a_nak_mid_batch_of_gathered_writes_stops_delivery_and_flushes_the_rest() {
        let (na, nb) = (Node::new(1162), Node::new(1163));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let src = na.mr(256, ALL);
        let dst = nb.mr(1024, ALL);
        src.mem.write(0, &[0xab; 32]);
        src.mem.write(128, &[0xcd; 32]);
        let mut idx = Vec::new();
        let mut head = 0;
        for i in 0..6u64 {
            // The fourth WRITE has a bad rkey.
            let rkey = if i == 3 { dst.key ^ 0x1 } else { dst.key };
            let (w, h) = p.a.write_wqe(
                WRITE,
                SIGNALED,
                [0; 4],
                &[
                    &raddr_seg(dst.addr() + i * 64, rkey),
                    &data_seg(32, src.key, src.addr()),
                    &data_seg(32, src.key, src.addr() + 128),
                ],
            );
            idx.push(w);
            head = h;
        }
        p.a.ring(head);
        let c: Vec<_> = p
            .cq_a
            .poll_all()
            .iter()
            .map(|c| (c.opcode, c.syndrome, c.wqe_counter))
            .collect();
        assert_eq!(
            c,
            vec![
                (0, 0, idx[0]),
                (0, 0, idx[1]),
                (0, 0, idx[2]),
                (REQ_ERR, 0x13, idx[3]),
                (REQ_ERR, 0x05, idx[4]),
                (REQ_ERR, 0x05, idx[5]),
            ]
        );
        let mut one = vec![0xab; 32];
        one.extend_from_slice(&[0xcd; 32]);
        assert_eq!(dst.mem.read(0, 192), one.repeat(3));
        assert_eq!(dst.mem.read(192, 320), vec![0; 320]);
        assert_eq!(na.qp_state(&p.a), ERR);
        assert_eq!(nb.qp_state(&p.b), ERR);
    }

    #[test]
    fn an_rnr_wait_mid_batch_resumes_in_order() {
        let (na, nb) = (Node::new(1162), Node::new(1163));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let src = na.mr(256, ALL);
        let dst = nb.mr(1024, ALL);
        for i in 0..4u8 {
            src.mem.write(usize::from(i) * 16, &[i + 1; 16]);
        }
        for i in 0..2u64 {
            p.b.post_recv(&[(dst.key, dst.addr() + i * 16, 16)]);
        }
        let mut head = 0;
        for i in 0..4u64 {
            let (_, h) = p.a.write_wqe(
                SEND,
                SIGNALED,
                [0; 4],
                &[&data_seg(16, src.key, src.addr() + i * 16)],
            );
            head = h;
        }
        p.a.ring(head);
        assert_eq!(p.cq_a.poll_all().len(), 2);
        assert_eq!(p.cq_b.poll_all().len(), 2);
        for i in 2..4u64 {
            p.b.post_recv(&[(dst.key, dst.addr() + i * 16, 16)]);
        }
        for _ in 0..2 {
            let c = p.cq_a.wait();
            assert_eq!((c.opcode, c.syndrome), (0, 0));
            assert_eq!(p.cq_b.wait().opcode, 2);
        }
        let want: Vec<u8> = (1..=4u8).flat_map(|b| [b; 16]).collect();
        assert_eq!(dst.mem.read(0, 64), want);
    }

    #[test]
    fn a_write_after_a_read_sends_what_the_read_placed() {
        let (na, nb) = (Node::new(1164), Node::new(1165));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let local = na.mr(256, ALL);
        let remote = nb.mr(256, ALL);
        local.mem.write(0, &[0x5a; 32]);
        let seg = |at: u64| data_seg(32, local.key, local.addr() + at);
        let rseg = |at: u64| raddr_seg(remote.addr() + at, remote.key);
        // WRITE local[0..32] -> remote[0..32]; READ remote[0..32] ->
        // local[64..96]; WRITE local[64..96] -> remote[128..160].
        p.a.write_wqe(WRITE, 0, [0; 4], &[&rseg(0), &seg(0)]);
        p.a.write_wqe(READ, 0, [0; 4], &[&rseg(0), &seg(64)]);
        let (_, h) =
            p.a.write_wqe(WRITE, SIGNALED, [0; 4], &[&rseg(128), &seg(64)]);
        p.a.ring(h);
        assert_eq!(p.cq_a.poll().map(|c| c.opcode), Some(0));
        assert_eq!(local.mem.read(64, 32), vec![0x5a; 32]);
        assert_eq!(remote.mem.read(128, 32), vec![0x5a; 32]);
    }
}
