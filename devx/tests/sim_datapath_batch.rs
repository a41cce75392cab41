//! Several WQEs per doorbell to a QP on another device: they travel as one
//! batch, and an error or RNR wait in the middle must leave exactly what
//! one-at-a-time execution would (completions, order, memory, flushes).

#[path = "sim_datapath_support.rs"]
mod dp;

use dp::*;
use prm_layouts::CqeSyndrome;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_batch {
    use super::*;

    const ERR: u8 = 6;
    const REQ_ERR: u8 = 0xd;

    /// A completion as these tests compare it: opcode, syndrome, WQE counter.
    type Seen = (u8, u8, u16);

    /// Rings `p.a`'s doorbell for the WQEs up to `head` and gives the
    /// completions that come of it.
    fn ring_and_poll(p: &mut Pair, head: u64) -> Vec<Seen> {
        p.a.ring(head);
        p.cq_a
            .poll_all()
            .iter()
            .map(|c| (c.opcode, c.syndrome, c.wqe_counter))
            .collect()
    }

    /// Six signaled 64-byte WRITEs in one doorbell from `na`'s QP to
    /// `nb`'s, the `bad`-th with a wrong rkey, each gathered from the
    /// source pieces `(offset, length)`. Checks both QPs end in error and
    /// gives the completions `(opcode, syndrome, wqe_counter)`, the WQE
    /// counters posted and the first 512 bytes of the target.
    fn nak_mid_batch(
        ids: (u32, u32),
        bad: u64,
        fill: &[(usize, &[u8])],
        pieces: &[(u64, u32)],
    ) -> (Vec<Seen>, Vec<u16>, Vec<u8>) {
        let (na, nb) = (Node::new(ids.0), Node::new(ids.1));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let src = na.mr(256, ALL);
        let dst = nb.mr(1024, ALL);
        for (off, data) in fill {
            src.mem.write(*off, data);
        }
        let mut idx = Vec::new();
        let mut head = 0;
        for i in 0..6u64 {
            let rkey = if i == bad { dst.key ^ 0x1 } else { dst.key };
            let mut segs = vec![raddr_seg(dst.addr() + i * 64, rkey)];
            segs.extend(
                pieces
                    .iter()
                    .map(|&(off, len)| data_seg(len, src.key, src.addr() + off)),
            );
            let segs: Vec<&[u8]> = segs.iter().map(|s| &s[..]).collect();
            let (w, h) = p.a.write_wqe(WRITE, SIGNALED, [0; 4], &segs);
            idx.push(w);
            head = h;
        }
        let c = ring_and_poll(&mut p, head);
        assert_eq!(na.qp_state(&p.a), ERR);
        assert_eq!(nb.qp_state(&p.b), ERR);
        (c, idx, dst.mem.read(0, 512))
    }

    #[test]
    fn a_nak_mid_batch_stops_delivery_and_flushes_the_rest() {
        let (c, idx, dst) = nak_mid_batch((1160, 1161), 2, &[(0, &[0xab; 64])], &[(0, 64)]);
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
        assert_eq!(dst[..128], [0xab; 128]);
        assert_eq!(dst[128..], [0; 384]);
    }

    /// The same with WRITEs of two data segments each (a run gathered
    /// into one buffer rather than copied segment by segment), the halves
    /// of each from different places.
    #[test]
    fn a_nak_mid_batch_of_gathered_writes_stops_delivery_and_flushes_the_rest() {
        let (c, idx, dst) = nak_mid_batch(
            (1162, 1163),
            3,
            &[(0, &[0xab; 32]), (128, &[0xcd; 32])],
            &[(0, 32), (128, 32)],
        );
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
        assert_eq!(dst[..192], one.repeat(3)[..]);
        assert_eq!(dst[192..], [0; 320]);
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

    /// One WRITE of a run: 64 bytes from `src_off` under local key `lkey`
    /// to `dst_off` under `rkey` (offsets from the regions' starts).
    struct W {
        lkey: u32,
        src: u64,
        rkey: u32,
        dst: u64,
    }

    /// Rings the WRITEs `ws` (all signaled) with one doorbell from `p.a`
    /// and gives the completions `(opcode, syndrome, wqe_counter)` and the
    /// WQE counters posted.
    fn run_writes(p: &mut Pair, ws: &[W]) -> (Vec<Seen>, Vec<u16>) {
        let mut idx = Vec::new();
        let mut head = 0;
        for w in ws {
            let segs = [raddr_seg(w.dst, w.rkey), data_seg(64, w.lkey, w.src)];
            let (i, h) =
                p.a.write_wqe(WRITE, SIGNALED, [0; 4], &[&segs[0], &segs[1]]);
            idx.push(i);
            head = h;
        }
        let c = ring_and_poll(p, head);
        (c, idx)
    }

    /// A run whose WRITEs change local and remote keys as they go: each
    /// lands where its own keys say.
    #[test]
    fn a_run_of_writes_switching_keys_lands_each_under_its_own_keys() {
        let (na, nb) = (Node::new(1166), Node::new(1167));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let srcs = [na.mr(64, ALL), na.mr(64, ALL)];
        let dsts = [nb.mr(512, ALL), nb.mr(512, ALL)];
        srcs[0].mem.fill(0x11);
        srcs[1].mem.fill(0x22);
        // Source: 0 0 1 1 0 1; destination: 0 1 1 0 0 1.
        let pick = [(0, 0), (0, 1), (1, 1), (1, 0), (0, 0), (1, 1)];
        let ws: Vec<W> = pick
            .iter()
            .enumerate()
            .map(|(i, &(s, d))| W {
                lkey: srcs[s].key,
                src: srcs[s].addr(),
                rkey: dsts[d].key,
                dst: dsts[d].addr() + i as u64 * 64,
            })
            .collect();
        let (c, idx) = run_writes(&mut p, &ws);
        let ok: Vec<Seen> = idx.iter().map(|&i| (0, 0, i)).collect();
        assert_eq!(c, ok);
        for (i, &(s, d)) in pick.iter().enumerate() {
            let want = if s == 0 { 0x11 } else { 0x22 };
            assert_eq!(dsts[d].mem.read(i * 64, 64), vec![want; 64], "WRITE {i}");
            assert_eq!(dsts[1 - d].mem.read(i * 64, 64), vec![0; 64], "WRITE {i}");
        }
    }

    /// Six 64-byte WRITEs in one doorbell under one lkey and one rkey,
    /// from a source region of `src_len` bytes filled with `fill` to a
    /// 512-byte target, WRITE `i` from source offset `src_at(i)` to target
    /// offset `dst_at(i)`; the third is out of its key's range. It
    /// completes with `syndrome`, the three after it are flushed, only the
    /// first two land. Gives the QPs' states (requester, responder).
    fn third_write_out_of_range(
        ids: (u32, u32),
        src_len: usize,
        fill: u8,
        src_at: impl Fn(u64) -> u64,
        dst_at: impl Fn(u64) -> u64,
        syndrome: CqeSyndrome,
    ) -> (u8, u8) {
        let (na, nb) = (Node::new(ids.0), Node::new(ids.1));
        let mut p = rc_pair_on(&na, Some(&nb), RC, 7);
        let src = na.mr(src_len, ALL);
        let dst = nb.mr(512, ALL);
        src.mem.fill(fill);
        let ws: Vec<W> = (0..6)
            .map(|i| W {
                lkey: src.key,
                src: src.addr() + src_at(i),
                rkey: dst.key,
                dst: dst.addr() + dst_at(i),
            })
            .collect();
        let (c, idx) = run_writes(&mut p, &ws);
        let flush = CqeSyndrome::WrFlushErr.raw();
        assert_eq!(
            c,
            vec![
                (0, 0, idx[0]),
                (0, 0, idx[1]),
                (REQ_ERR, syndrome.raw(), idx[2]),
                (REQ_ERR, flush, idx[3]),
                (REQ_ERR, flush, idx[4]),
                (REQ_ERR, flush, idx[5]),
            ]
        );
        assert_eq!(dst.mem.read(0, 128), vec![fill; 128]);
        assert_eq!(dst.mem.read(128, 384), vec![0; 384]);
        (na.qp_state(&p.a), nb.qp_state(&p.b))
    }

    /// The third WRITE of a run reaches past its rkey's range, under the
    /// same key as the two before it: it completes in error by name, the
    /// rest are flushed, nothing lands from it on, both QPs end in error.
    #[test]
    fn a_write_past_its_rkeys_range_mid_run_fails_with_a_remote_access_error() {
        let dst_at = |i| if i == 2 { 512 - 32 } else { i * 64 };
        let (a, b) = third_write_out_of_range(
            (1168, 1169),
            64,
            0xab,
            |_| 0,
            dst_at,
            CqeSyndrome::RemoteAccessErr,
        );
        assert_eq!((a, b), (ERR, ERR));
    }

    /// The same with the third WRITE's source past its lkey's range: a
    /// local protection error, and the peer's QP unharmed.
    #[test]
    fn a_write_past_its_lkeys_range_mid_run_fails_with_a_local_protection_error() {
        let src_at = |i| if i == 2 { 96 } else { 0 };
        let (a, b) = third_write_out_of_range(
            (1170, 1171),
            128,
            0xcd,
            src_at,
            |i| i * 64,
            CqeSyndrome::LocalProtErr,
        );
        assert_eq!(a, ERR);
        assert_ne!(b, ERR);
    }
}
