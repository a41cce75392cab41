//! Send and receive WQE encoding against hand-worked bytes, doorbell record
//! and BlueFlame doorbell values, ring wrap, and requests refused before
//! anything is written. Doorbells are recorded, not executed.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use crate::datapath_support::{be32_at, bytes, cqe, put_cqe, recorded, rts};
    use verbs::{Ah, Cq, Error, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Sge, SrqInit, Wc};

    fn qp(pd: &Pd, cq: &Cq, t: QpType, cap: QpCap) -> Qp {
        let qp = pd.create_qp(&QpInit::new(t, cq, cq).cap(cap)).unwrap();
        rts(&qp);
        qp
    }

    fn cap(send: u32, sge: u32, inline: u32) -> QpCap {
        QpCap {
            max_send_wr: send,
            max_recv_wr: 4,
            max_send_sge: sge,
            max_recv_sge: 2,
            max_inline_data: inline,
        }
    }

    fn hex(b: &[u8]) -> String {
        hex::encode(b)
    }

    #[test]
    fn rdma_write_with_two_sges_matches_hand_worked_bytes() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 2, 0));
        let qpn = qp.qpn();
        let sgl = [
            Sge::new(0x1122_3344_5566_7788, 0x100, 0xaabb_ccdd),
            Sge::new(0x99, 0x20, 0x1234),
        ];
        qp.post_send(&SendWr::rdma_write(
            7,
            &sgl,
            0x0102_0304_0506_0708,
            0xfeed_f00d,
        ))
        .unwrap();
        let sq = qp.send_queue_memory();
        let got = bytes(sq.addr, 64);
        let q = qpn.to_be_bytes();
        let want = format!(
            "00000008{:02x}{:02x}{:02x}04000000080000000001020304050607 08feedf00d00000000\
             00000100aabbccdd1122334455667788000000200000123400000000 00000099",
            q[1], q[2], q[3]
        )
        .replace(' ', "");
        assert_eq!(hex(&got), want);
        // SND counter = 1 WQEBB; the doorbell is the ctrl's first 8 bytes.
        assert_eq!(be32_at(sq.doorbell_record + 4), 1);
        let dbs = rec.0.lock().unwrap().clone();
        assert_eq!(dbs.len(), 1);
        assert_eq!(dbs[0].0, qp.uar().page_id());
        assert_eq!(dbs[0].1, 0x800);
        assert_eq!(dbs[0].2.to_ne_bytes().to_vec(), got[..8].to_vec());
    }

    #[test]
    fn opcodes_flags_and_bf_toggle() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(8, 1, 0));
        let qpn = qp.qpn();
        let s = [Sge::new(0x1000, 8, 0x55)];
        let wrs = [
            SendWr::send(1, &s).imm(0xdead_beef).solicited(),
            SendWr::rdma_read(2, &s, 0x2000, 0x66).fence().unsignaled(),
            SendWr::comp_swap(3, &s, 0x3000, 0x77, 0x0a0b, 0x0c0d),
            SendWr::fetch_add(4, &s, 0x4000, 0x88, 5),
            SendWr::rdma_write(5, &s, 0x5000, 0x99).imm(0x42),
        ];
        for w in &wrs {
            qp.post_send(w).unwrap();
        }
        let sq = qp.send_queue_memory();
        let bb = |i: usize| bytes(sq.addr + 64 * i, 64);
        let ctrl = |i: u32, op: u8, ds: u8, flags: u8, imm: u32| {
            let mut c = Vec::new();
            c.extend_from_slice(&((i << 8) | u32::from(op)).to_be_bytes());
            c.extend_from_slice(&((qpn << 8) | u32::from(ds)).to_be_bytes());
            c.extend_from_slice(&[0, 0, 0, flags]);
            c.extend_from_slice(&imm.to_be_bytes());
            c
        };
        // SEND_IMM: ctrl + data; signaled | solicited; the immediate big-endian.
        assert_eq!(bb(0)[..16], ctrl(0, 0x0b, 2, 0x0a, 0xdead_beef)[..]);
        assert_eq!(
            hex(&bb(0)[16..32]),
            "000000080000005500000000 00001000".replace(' ', "")
        );
        // READ: fenced, unsignaled.
        assert_eq!(bb(1)[..16], ctrl(1, 0x10, 3, 0x80, 0)[..]);
        assert_eq!(hex(&bb(1)[16..32]), "00000000000020000000006600000000");
        // CAS: raddr, then swap and compare, then one 8-byte data segment.
        assert_eq!(bb(2)[..16], ctrl(2, 0x11, 4, 0x08, 0)[..]);
        assert_eq!(hex(&bb(2)[16..32]), "00000000000030000000007700000000");
        assert_eq!(hex(&bb(2)[32..48]), "0000000000000c0d0000000000000a0b");
        assert_eq!(hex(&bb(2)[48..64]), "00000008000000550000000000001000");
        // FA: the add value in swap_add.
        assert_eq!(bb(3)[..16], ctrl(3, 0x12, 4, 0x08, 0)[..]);
        assert_eq!(hex(&bb(3)[32..48]), "00000000000000050000000000000000");
        assert_eq!(bb(4)[..16], ctrl(4, 0x09, 3, 0x08, 0x42)[..]);
        let offsets: Vec<usize> = rec.0.lock().unwrap().iter().map(|d| d.1).collect();
        assert_eq!(offsets, [0x800, 0x900, 0x800, 0x900, 0x800]);
        assert_eq!(be32_at(sq.doorbell_record + 4), 5);
    }

    #[test]
    fn sq_sig_all_signals_everything() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = pd
            .create_qp(
                &QpInit::new(QpType::Rc, &cq, &cq)
                    .cap(cap(4, 1, 0))
                    .sq_sig_all(true),
            )
            .unwrap();
        rts(&qp);
        qp.post_send(&SendWr::send(1, &[]).unsignaled()).unwrap();
        let sq = qp.send_queue_memory();
        assert_eq!(bytes(sq.addr + 11, 1), [0x08]);
        // An empty gather list: ctrl only.
        assert_eq!(bytes(sq.addr + 7, 1), [1]);
    }

    #[test]
    fn batch_rings_once_with_the_last_ctrl() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(16, 1, 0));
        let s = [Sge::new(0x1000, 64, 1)];
        let mut b = qp.send_batch();
        for i in 0..10 {
            b.rdma_write(i, &s, 0x2000, 2).unwrap();
        }
        assert_eq!(b.len(), 10);
        b.ring();
        let sq = qp.send_queue_memory();
        let dbs = rec.0.lock().unwrap().clone();
        assert_eq!(dbs.len(), 1);
        assert_eq!(dbs[0].2.to_ne_bytes().to_vec(), bytes(sq.addr + 9 * 64, 8));
        assert_eq!(be32_at(sq.doorbell_record + 4), 10);
        // An empty batch rings nothing; a dropped one rings what it wrote.
        qp.send_batch().ring();
        {
            let mut b = qp.send_batch();
            b.send(11, &s).unwrap();
        }
        assert_eq!(rec.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_batch_fills_the_sq_then_finds_room_a_completion_frees() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 1, 0));
        let n = qp.send_queue_memory().entries;
        let s = [Sge::new(0x1000, 8, 1)];
        let mut b = qp.send_batch();
        for i in 0..n {
            b.send(u64::from(i), &s).unwrap();
        }
        let err = b.send(99, &s).unwrap_err();
        assert!(matches!(err, Error::QueueFull { .. }), "{err}");
        assert_eq!(b.len(), n as usize);
        b.ring();
        assert_eq!(qp.send_queue().cur_post(), n);
        // Still full in a new batch, until a completion retires WQE 0.
        let mut b = qp.send_batch();
        assert!(matches!(b.send(99, &s), Err(Error::QueueFull { .. })));
        b.ring();
        put_cqe(&cq, 0, cqe(0x0, 0, qp.qpn(), 0));
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 0);
        let mut b = qp.send_batch();
        b.send(100, &s).unwrap();
        assert!(matches!(b.send(101, &s), Err(Error::QueueFull { .. })));
        b.ring();
        assert_eq!(qp.send_queue().cur_post(), n + 1);
        assert_eq!(qp.send_queue().in_use(), n);
        // Two batches rang: the empty one in between rang nothing.
        assert_eq!(rec.0.lock().unwrap().len(), 2);
    }

    #[test]
    fn inline_and_ud_segments() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut rc = qp(&pd, &cq, QpType::Rc, cap(4, 1, 40));
        let data: Vec<u8> = (1..=20).collect();
        rc.post_send(&SendWr::send(1, &[]).inline_data(&data))
            .unwrap();
        let sq = rc.send_queue_memory();
        let w = bytes(sq.addr, 64);
        // ds = 1 + ceil((4 + 20) / 16) = 3.
        assert_eq!(w[7], 3);
        assert_eq!(hex(&w[16..20]), "80000014");
        assert_eq!(w[20..40], data[..]);

        let mut ud = qp(&pd, &cq, QpType::Ud, cap(4, 1, 0));
        let attr = crate::datapath_support::path_to_self(&ctx);
        let ah = Ah::create(&pd, &attr).unwrap();
        let s = [Sge::new(0x1000, 16, 3)];
        ud.post_send(&SendWr::send(9, &s).ud(&ah, 0xabcdef, 0x1111_2222))
            .unwrap();
        let sq = ud.send_queue_memory();
        let w = bytes(sq.addr, 128);
        assert_eq!(w[7], 5);
        let mut av = ah.av().as_bytes()[..48].to_vec();
        av[0..4].copy_from_slice(&0x1111_2222u32.to_be_bytes());
        av[8..12].copy_from_slice(&0x00ab_cdefu32.to_be_bytes());
        assert_eq!(w[16..64], av[..]);
        assert_eq!(hex(&w[64..80]), "00000010000000030000000000001000");
    }

    #[test]
    fn empty_gather_entries_are_skipped() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 3, 0));
        // One empty entry: ctrl + raddr only.
        qp.post_send(&SendWr::rdma_write(1, &[Sge::new(0x1000, 0, 1)], 0x2000, 2))
            .unwrap();
        // An empty entry between two: the others close up.
        let sgl = [
            Sge::new(0x10, 0x11, 0x12),
            Sge::new(0x20, 0, 0x22),
            Sge::new(0x30, 0x31, 0x32),
        ];
        qp.post_send(&SendWr::send(2, &sgl)).unwrap();
        let sq = qp.send_queue_memory();
        let w = bytes(sq.addr, 128);
        assert_eq!(w[7], 2);
        assert_eq!(w[71], 3);
        assert_eq!(hex(&w[80..96]), "00000011000000120000000000000010");
        assert_eq!(hex(&w[96..112]), "00000031000000320000000000000030");
    }

    #[test]
    fn ud_inline_data_starts_the_second_block() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut ud = qp(&pd, &cq, QpType::Ud, cap(4, 1, 32));
        let attr = crate::datapath_support::path_to_self(&ctx);
        let ah = Ah::create(&pd, &attr).unwrap();
        let data: Vec<u8> = (1..=24).collect();
        ud.post_send(
            &SendWr::send(3, &[])
                .inline_data(&data)
                .ud(&ah, 0x12, 0x3456),
        )
        .unwrap();
        let sq = ud.send_queue_memory();
        let w = bytes(sq.addr, 128);
        // ds = 1 + 3 + ceil((4 + 24) / 16) = 6.
        assert_eq!(w[7], 6);
        assert_eq!(hex(&w[16..20]), "00003456");
        assert_eq!(hex(&w[64..68]), "80000018");
        assert_eq!(w[68..92], data[..]);
    }

    #[test]
    fn a_wqe_wraps_to_the_ring_start() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(2, 1, 100));
        let sq = qp.send_queue_memory();
        let n = sq.entries;
        assert!(n >= 4);
        let s = [Sge::new(0x1000, 8, 1)];
        for i in 0..n - 1 {
            qp.post_send(&SendWr::send(u64::from(i), &s).unsignaled())
                .unwrap();
        }
        // 2 more blocks do not fit until a completion retires the earlier ones.
        let data = [0x5au8; 100];
        let wr = SendWr::send(99, &[]).inline_data(&data);
        let err = qp.post_send(&wr).unwrap_err();
        assert!(matches!(err, Error::QueueFull { .. }), "{err}");
        assert_eq!(qp.send_queue().cur_post(), n - 1);
        put_cqe(&cq, 0, cqe(0x0, 0, qp.qpn(), (n - 2) as u16));
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, u64::from(n - 2));
        assert_eq!(qp.send_queue().in_use(), 0);
        qp.post_send(&wr).unwrap();
        // ds = 1 + ceil(104 / 16) = 8: BB n−1 holds ctrl, header and 44 bytes;
        // BB 0 the remaining 56.
        let last = bytes(sq.addr + 64 * (n as usize - 1), 64);
        assert_eq!(last[..4], (((n - 1) << 8) | 0x0a).to_be_bytes());
        assert_eq!(last[7], 8);
        assert_eq!(hex(&last[16..20]), "80000064");
        assert_eq!(last[20..64], [0x5a; 44]);
        assert_eq!(bytes(sq.addr, 56), [0x5a; 56]);
        assert_eq!(be32_at(sq.doorbell_record + 4), n + 1);
    }

    /// A completion frees exactly the blocks up to the end of its WQE, as
    /// sized by that WQE; a completion polled before, whose blocks new WQEs
    /// have since reused, frees nothing more.
    #[test]
    fn room_comes_back_exactly_as_far_as_the_completed_wqe_reaches() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 1, 100));
        let n = qp.send_queue_memory().entries;
        assert!(n >= 4);
        let s = [Sge::new(0x1000, 8, 1)];
        let one = |id: u32| SendWr::send(u64::from(id), &s);
        // Inline data that reads as a large DS wherever a control segment
        // would be: 0x5a & 0x3f = 26 units.
        let data = [0x5au8; 100];
        let two = |id: u64| SendWr::send(id, &[]).inline_data(&data);
        let full = |qp: &mut Qp| {
            let err = qp.post_send(&one(999)).unwrap_err();
            assert!(matches!(err, Error::QueueFull { .. }), "{err}");
        };
        let mut wc = [Wc::default(); 2];
        let mut poll = |cq: &mut Cq, ci: u32, qpn: u32, wqe_counter: u32| {
            put_cqe(cq, ci, cqe(0x0, 0, qpn, wqe_counter as u16));
            assert_eq!(cq.poll(&mut wc), 1);
            wc[0].wr_id
        };
        let mut cq = cq;
        for i in 0..n {
            qp.post_send(&one(i)).unwrap();
        }
        full(&mut qp);
        // WQEs 0 and 1 retired: exactly two blocks free, taken by one
        // two-block WQE, which lands where WQE 0's control segment was and
        // puts inline data where WQE 1's was.
        assert_eq!(poll(&mut cq, 0, qp.qpn(), 1), 1);
        assert_eq!(qp.send_queue().in_use(), n - 2);
        qp.post_send(&two(500)).unwrap();
        assert_eq!(qp.send_queue().cur_post(), n + 2);
        assert_eq!(qp.send_queue().in_use(), n);
        // The last completion still names WQE 1, whose block now holds
        // inline data: it was counted, and frees nothing more.
        full(&mut qp);
        // WQE 2 retired: one block.
        assert_eq!(poll(&mut cq, 1, qp.qpn(), 2), 2);
        assert_eq!(qp.send_queue().in_use(), n - 1);
        qp.post_send(&one(600)).unwrap();
        full(&mut qp);
        // The two-block WQE retired, with everything before it: the blocks
        // after it stay in use, the one-block WQE behind it only.
        assert_eq!(poll(&mut cq, 2, qp.qpn(), n), 500);
        assert_eq!(qp.send_queue().in_use(), 1);
        assert_eq!(poll(&mut cq, 3, qp.qpn(), n + 2), 600);
        assert_eq!(qp.send_queue().in_use(), 0);
    }

    /// A completion still in the CQ when its QP is reset is dropped when
    /// polled: it names a block that now lies inside another WQE, and
    /// frees nothing of it.
    #[test]
    fn a_completion_from_before_a_reset_is_dropped() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 1, 100));
        let s = [Sge::new(0x1000, 8, 1)];
        for i in 0..2 {
            qp.post_send(&SendWr::send(i, &s)).unwrap();
        }
        // WQE 1's completion sits in the CQ while the QP goes through RST.
        put_cqe(&cq, 0, cqe(0x0, 0, qp.qpn(), 1));
        qp.reset().unwrap();
        rts(&qp);
        // A two-block WQE whose inline data lies where WQE 1's control
        // segment was.
        let data = [0x5au8; 100];
        qp.post_send(&SendWr::send(7, &[]).inline_data(&data))
            .unwrap();
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.poll(&mut wc), 0, "{wc:?}");
        assert_eq!(cq.consumer_index(), 1);
        assert_eq!(qp.send_queue().in_use(), 2);
        // The QP's own completion after it is reported.
        put_cqe(&cq, 1, cqe(0x0, 0, qp.qpn(), 0));
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 7);
        assert_eq!(qp.send_queue().in_use(), 0);
    }

    /// The SQ's WQEBB `i` on, `len` bytes, continuing at the ring start.
    fn sq_bytes(qp: &Qp, i: u32, len: usize) -> Vec<u8> {
        let sq = qp.send_queue_memory();
        let ring = bytes(sq.addr, 64 * sq.entries as usize);
        let at = 64 * (i % sq.entries) as usize;
        ring.iter().cycle().skip(at).take(len).copied().collect()
    }

    /// Retires every WQE posted on `qp` with one hand-written completion
    /// for the last, which starts at WQEBB `last`; `ci` counts the CQEs
    /// written to `cq` so far.
    fn retire_all(qp: &mut Qp, cq: &mut Cq, ci: &mut u32, last: u32) {
        if qp.send_queue().in_use() == 0 {
            return;
        }
        let entries = cq.memory().entries;
        let owner = ((*ci / entries) & 1) as u8;
        put_cqe(cq, *ci, cqe(0x0, owner, qp.qpn(), last as u16));
        *ci += 1;
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(qp.send_queue().in_use(), 0);
    }

    /// Posts `filler`s until the SQ counter is at WQEBB `start` of the ring,
    /// retiring them as the queue fills (`last`: the last one's counter),
    /// then retires them all.
    fn fill_to(
        qp: &mut Qp,
        cq: &mut Cq,
        ci: &mut u32,
        last: &mut u32,
        start: u32,
        filler: &SendWr,
    ) {
        let n = qp.send_queue_memory().entries;
        while qp.send_queue().cur_post() % n != start {
            if qp.send_queue().in_use() == n - 1 {
                retire_all(qp, cq, ci, *last);
            }
            *last = qp.send_queue().cur_post();
            qp.post_send(filler).unwrap();
        }
        retire_all(qp, cq, ci, *last);
    }

    /// Posts `wr` alone, or as a batch of one.
    fn post_one(qp: &mut Qp, wr: &SendWr, batch: bool) {
        if batch {
            let mut b = qp.send_batch();
            b.post(wr).unwrap();
            b.ring();
        } else {
            qp.post_send(wr).unwrap();
        }
    }

    #[test]
    fn inline_data_of_each_boundary_length_lands_whole_and_wraps_at_the_ring_end() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(8, 1, 128));
        let max = qp.cap().max_inline_data as usize;
        assert!(max >= 109, "max_inline_data {max}");
        let n = qp.send_queue_memory().entries;
        let (mut ci, mut last) = (0, 0);
        // Around each size step (the header and data fill 16-byte units; the
        // first block holds 44 data bytes, the second 64 more), and the limit.
        let lens = [0, 1, 12, 13, 43, 44, 45, 60, 61, 63, 64, 65, 108, 109, max];
        let mut case = 0u8;
        for len in lens {
            // Where the WQE fits before the ring end, and one and two blocks
            // before it (a WQE of 2 or 3 blocks wraps there).
            for start in [1, n - 2, n - 1] {
                for batch in [false, true] {
                    case = case.wrapping_add(1);
                    let data: Vec<u8> = (0..len).map(|i| (i as u8 ^ case) | 1).collect();
                    retire_all(&mut qp, &mut cq, &mut ci, last);
                    let filler = SendWr::send(0, &[]).unsignaled();
                    fill_to(&mut qp, &mut cq, &mut ci, &mut last, start, &filler);
                    let at = qp.send_queue().cur_post();
                    last = at;
                    let wr = SendWr::send(u64::from(len as u32), &[]).inline_data(&data);
                    post_one(&mut qp, &wr, batch);
                    let what = format!("{len} bytes at WQEBB {start}, batch {batch}");
                    // ds = ctrl + ceil((4 + len) / 16), no inline segment for 0.
                    let ds = if len == 0 {
                        1
                    } else {
                        1 + (4 + len).div_ceil(16)
                    };
                    let posted = qp.send_queue().cur_post() - at;
                    assert_eq!(posted as usize, (16 * ds).div_ceil(64), "{what}");
                    let w = sq_bytes(&qp, at, 20 + len);
                    assert_eq!(w[..4], ((at << 8) | 0x0a).to_be_bytes(), "{what}");
                    assert_eq!(w[7] as usize, ds, "{what}");
                    if len > 0 {
                        let hdr = 0x8000_0000 | len as u32;
                        assert_eq!(w[16..20], hdr.to_be_bytes(), "{what}");
                        assert_eq!(w[20..], data[..], "{what}");
                    }
                }
            }
        }
        // One byte more than the limit is refused.
        let big = vec![0u8; max + 1];
        let e = qp
            .post_send(&SendWr::send(1, &[]).inline_data(&big))
            .unwrap_err();
        assert!(e.is_argument(), "{e}");
    }

    #[test]
    fn segments_past_the_first_block_land_in_the_next_wrapping_at_the_ring_end() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(16).unwrap();
        let mut rc = qp(&pd, &cq, QpType::Rc, cap(4, 4, 0));
        let mut ud = qp(&pd, &cq, QpType::Ud, cap(4, 1, 0));
        let ah = Ah::create(&pd, &crate::datapath_support::path_to_self(&ctx)).unwrap();
        let sgl: [Sge; 4] = std::array::from_fn(|i| {
            let i = i as u32;
            Sge::new(0x1000 * u64::from(i + 1), 0x10 + i, 0x100 + i)
        });
        let data = |s: &Sge| {
            let mut d = s.length.to_be_bytes().to_vec();
            d.extend(s.lkey.to_be_bytes());
            d.extend(s.addr.to_be_bytes());
            d
        };
        let mut ci = 0;
        for (batch, end) in [(false, false), (true, false), (false, true), (true, true)] {
            for (qp, is_ud) in [(&mut rc, false), (&mut ud, true)] {
                // One-block fillers up to the last block, or the last of the
                // ring's first half.
                let n = qp.send_queue_memory().entries;
                let start = if end { n - 1 } else { n / 2 - 1 };
                let filler = SendWr::send(0, &[]).unsignaled();
                let filler = if is_ud { filler.ud(&ah, 1, 1) } else { filler };
                fill_to(qp, &mut cq, &mut ci, &mut 0, start, &filler);
                let at = qp.send_queue().cur_post();
                let wr = if is_ud {
                    SendWr::send(1, &sgl[..1]).ud(&ah, 0x12, 0x3456)
                } else {
                    SendWr::rdma_write(1, &sgl, 0x0102_0304_0506_0708, 0xfeed)
                };
                post_one(qp, &wr, batch);
                let what = format!("UD {is_ud}, batch {batch}, at WQEBB {start}");
                assert_eq!(qp.send_queue().cur_post(), at + 2, "{what}");
                let w = sq_bytes(qp, at, 128);
                if is_ud {
                    // ctrl, the 48-byte address vector, then the data segment
                    // first in block 0.
                    assert_eq!(w[7], 5, "{what}");
                    assert_eq!(hex(&w[16..20]), "00003456", "{what}");
                    assert_eq!(w[64..80], data(&sgl[0])[..], "{what}");
                } else {
                    // ctrl, raddr, two data segments; two more in block 0.
                    assert_eq!(w[7], 6, "{what}");
                    assert_eq!(hex(&w[16..28]), "01020304050607080000feed", "{what}");
                    for (i, s) in sgl.iter().enumerate() {
                        assert_eq!(w[32 + 16 * i..48 + 16 * i], data(s)[..], "{what} SGE {i}");
                    }
                }
                retire_all(qp, &mut cq, &mut ci, at);
            }
        }
    }

    #[test]
    fn bad_requests_are_refused_before_writing() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 2, 16));
        let before = bytes(qp.send_queue_memory().addr, 64);
        let c = qp.cap();
        let s = vec![Sge::new(0x1000, 8, 1); c.max_send_sge as usize + 1];
        let big = vec![0u8; c.max_inline_data as usize + 1];
        let attr = crate::datapath_support::path_to_self(&ctx);
        let ah = Ah::create(&pd, &attr).unwrap();
        let bad = [
            SendWr::send(1, &s),
            SendWr::send(1, &[]).inline_data(&big),
            SendWr::comp_swap(1, &s[..2], 0, 0, 0, 0),
            SendWr::send(1, &s[..1]).ud(&ah, 1, 1),
        ];
        for w in &bad {
            let e = qp.post_send(w).unwrap_err();
            assert!(e.is_argument(), "{e}");
        }
        assert_eq!(qp.send_queue().cur_post(), 0);
        assert_eq!(bytes(qp.send_queue_memory().addr, 64), before);
        assert!(rec.0.lock().unwrap().is_empty());
        let e = qp
            .post_recv(&RecvWr::new(1, &s[..c.max_recv_sge as usize + 1]))
            .unwrap_err();
        assert!(e.is_argument());
    }

    #[test]
    fn each_refusal_names_its_rule_and_requests_at_the_limits_pass() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let ah = Ah::create(&pd, &crate::datapath_support::path_to_self(&ctx)).unwrap();
        let mut qps = [QpType::Rc, QpType::Uc, QpType::Ud].map(|t| qp(&pd, &cq, t, cap(16, 2, 16)));
        let (rc, uc, ud) = (0, 1, 2);
        // Each QP's own limits (the device rounds them up per type).
        let caps = qps.each_ref().map(|q| q.cap());
        let s = vec![Sge::new(0x1000, 8, 1); 64];
        let data = vec![0u8; 1024];
        let most = |i: usize| &s[..caps[i].max_send_sge as usize];
        let over = |i: usize| &s[..caps[i].max_send_sge as usize + 1];
        let fits = |i: usize| &data[..caps[i].max_inline_data as usize];
        let big = |i: usize| &data[..caps[i].max_inline_data as usize + 1];
        for (i, wr) in [
            (rc, SendWr::send(1, most(rc))),
            (rc, SendWr::send(1, &[]).inline_data(fits(rc))),
            (rc, SendWr::comp_swap(1, &s[..1], 0, 0, 0, 0)),
            (uc, SendWr::rdma_write(1, most(uc), 0, 0)),
            (ud, SendWr::send(1, most(ud)).ud(&ah, 1, 1)),
            (ud, SendWr::send(1, &[]).inline_data(fits(ud)).ud(&ah, 1, 1)),
        ] {
            qps[i].post_send(&wr).unwrap();
        }
        let refused = [
            (rc, SendWr::send(1, over(rc)), "SGEs exceed"),
            (
                rc,
                SendWr::send(1, &[]).inline_data(big(rc)),
                "inline bytes exceed",
            ),
            (
                rc,
                SendWr::comp_swap(1, &s[..2], 0, 0, 0, 0),
                "exactly one SGE",
            ),
            (
                rc,
                SendWr::rdma_read(1, &[], 0, 0).inline_data(fits(rc)),
                "cannot be inline",
            ),
            (
                rc,
                SendWr::send(1, most(rc)).ud(&ah, 1, 1),
                "UD destination on a connected",
            ),
            (uc, SendWr::rdma_read(1, most(uc), 0, 0), "UC QPs have no"),
            (
                uc,
                SendWr::comp_swap(1, &s[..1], 0, 0, 0, 0),
                "UC QPs have no",
            ),
            (ud, SendWr::send(1, most(ud)), "needs a destination"),
            (
                ud,
                SendWr::rdma_write(1, most(ud), 0, 0).ud(&ah, 1, 1),
                "only send",
            ),
            (ud, SendWr::send(1, over(ud)).ud(&ah, 1, 1), "SGEs exceed"),
        ];
        for (i, wr, why) in refused {
            let before = qps[i].send_queue().cur_post();
            let e = qps[i].post_send(&wr).unwrap_err();
            assert!(
                e.is_argument() && e.to_string().contains(why),
                "{e} ({why})"
            );
            assert_eq!(qps[i].send_queue().cur_post(), before);
        }
    }

    #[test]
    fn receive_wqes_and_terminator() {
        let (ctx, _sim, rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let mut qp = qp(&pd, &cq, QpType::Rc, cap(4, 1, 0));
        let rq = qp.recv_queue_memory();
        assert_eq!(rq.stride, 32);
        let one = [Sge::new(0xabc, 100, 7)];
        let two = [Sge::new(0x10, 1, 8), Sge::new(0x20, 2, 9)];
        qp.post_recv(&RecvWr::new(1, &one)).unwrap();
        qp.post_recv_list(&[RecvWr::new(2, &two), RecvWr::new(3, &one)])
            .unwrap();
        assert_eq!(
            hex(&bytes(rq.addr, 32)),
            "00000064000000070000000000000abc00000000000001000000000000000000"
        );
        assert_eq!(
            hex(&bytes(rq.addr + 32, 32)),
            "0000000100000008000000000000001000000002000000090000000000000020"
        );
        assert_eq!(be32_at(rq.doorbell_record), 3);
        // No MMIO for receives.
        assert!(rec.0.lock().unwrap().is_empty());
        // Full: all or nothing.
        let four = [RecvWr::new(4, &one), RecvWr::new(5, &one)];
        let e = qp.post_recv_list(&four).unwrap_err();
        assert!(matches!(e, Error::QueueFull { .. }));
        assert_eq!(be32_at(rq.doorbell_record), 3);
    }

    #[test]
    fn srq_wqes_follow_the_next_segment() {
        let (ctx, _sim, _rec) = recorded(400);
        let pd = ctx.alloc_pd().unwrap();
        let mut srq = pd.create_srq(&SrqInit::new(3, 2)).unwrap();
        let m = srq.memory();
        let one = [Sge::new(0xabc, 100, 7)];
        srq.post_recv(&RecvWr::new(1, &one)).unwrap();
        srq.post_recv(&RecvWr::new(2, &one)).unwrap();
        let w = bytes(m.addr, m.stride as usize);
        // The next segment (index 1) is left as the SRQ set it up.
        assert_eq!(hex(&w[..4]), "00000001");
        assert_eq!(hex(&w[16..32]), "00000064000000070000000000000abc");
        assert_eq!(hex(&w[32..40]), "0000000000000100");
        assert_eq!(be32_at(m.doorbell_record), 2);
        srq.post_recv(&RecvWr::new(3, &one)).unwrap();
        let e = srq.post_recv(&RecvWr::new(4, &one)).unwrap_err();
        assert!(matches!(e, Error::QueueFull { .. }), "{e}");
    }
}
