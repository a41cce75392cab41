//! CQE parsing with hand-written entries: owner-bit wrap, requester retire
//! ranges, responder fields, error syndromes, garbage, and the consumer
//! index in the doorbell record. Doorbells are recorded, not executed.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use crate::datapath_support::{be32_at, cqe, put_cqe, recorded, rts};
    use verbs::datapath::RawCqe;
    use verbs::{
        Cq, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendWr, Sge, SrqInit, Wc, WcOpcode, WcStatus,
    };

    fn cap() -> QpCap {
        QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }

    /// `n` RC QPs ready to send, both of their queues on `cq`.
    fn rc_qps_on(pd: &Pd, cq: &Cq, n: usize) -> Vec<Qp> {
        (0..n)
            .map(|_| {
                let qp = pd
                    .create_qp(&QpInit::new(QpType::Rc, cq, cq).cap(cap()))
                    .unwrap();
                rts(&qp);
                qp
            })
            .collect()
    }

    /// A successful SEND completion of `qpn`'s WQE at `wqe_counter`, written
    /// `ahead` entries past the consumer index with the owner bit of that
    /// entry's lap.
    fn put_send_done(cq: &Cq, ahead: u32, qpn: u32, wqe_counter: u16) {
        let mut c = cqe(0x0, 0, qpn, wqe_counter);
        c[56] = 0x0a;
        put_ahead(cq, ahead, c);
    }

    /// Writes CQE `c` `ahead` entries past the consumer index, with the
    /// owner bit of that entry's lap.
    fn put_ahead(cq: &Cq, ahead: u32, mut c: [u8; 64]) {
        let slot = cq.consumer_index() + ahead;
        c[63] |= ((slot / cq.memory().entries) & 1) as u8;
        put_cqe(cq, slot % cq.memory().entries, c);
    }

    /// Polls `cq` `width` at a time (never more than are still to come)
    /// until `got` holds `n` completions; each poll must find one.
    fn poll_until(cq: &mut Cq, got: &mut Vec<Wc>, n: usize, width: usize) {
        let mut wc = [Wc::default(); 32];
        while got.len() < n {
            let k = cq.poll(&mut wc[..width.min(n - got.len())]);
            assert!(k > 0, "{} of {n}", got.len());
            got.extend_from_slice(&wc[..k]);
        }
    }

    /// Every QP's send queue room came back and the CQ's doorbell record
    /// follows its consumer index.
    fn assert_all_retired(qps: &mut [Qp], cq: &Cq) {
        for qp in qps {
            assert_eq!(qp.send_queue().in_use(), 0);
        }
        assert_eq!(cq.doorbell_ci(), cq.consumer_index());
    }

    /// Polls for one completion and for several, with QPs taking turns,
    /// find entries by the owner bit of their lap before and after a
    /// resize changes the ring's size.
    #[test]
    fn polls_follow_the_laps_of_a_resized_ring() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(3).unwrap();
        let mut qps = rc_qps_on(&pd, &cq, 2);
        let s = [Sge::new(0x1000, 8, 1)];
        let mut id = 0u64;
        for size in [3, 15, 3] {
            if size != cq.cqe() {
                cq.resize(size).unwrap();
            }
            let n = cq.memory().entries;
            // Three laps, one completion at a time.
            for _ in 0..3 * n {
                let qp = &mut qps[(id % 2) as usize];
                let at = qp.send_queue().cur_post() as u16;
                qp.post_send(&SendWr::send(id, &s)).unwrap();
                put_send_done(&cq, 0, qp.qpn(), at);
                let mut wc = [Wc::default()];
                assert_eq!(cq.poll(&mut wc), 1);
                assert_eq!((wc[0].wr_id, wc[0].status), (id, WcStatus::Success));
                id += 1;
            }
            // Three laps, the QPs taking turns within each poll.
            for _ in 0..3 * n / 2 {
                let first = id;
                for (ahead, qp) in qps.iter_mut().enumerate() {
                    let at = qp.send_queue().cur_post() as u16;
                    qp.post_send(&SendWr::send(id, &s)).unwrap();
                    put_send_done(&cq, ahead as u32, qp.qpn(), at);
                    id += 1;
                }
                let mut wc = [Wc::default(); 4];
                assert_eq!(cq.poll(&mut wc), 2);
                assert_eq!([wc[0].wr_id, wc[1].wr_id], [first, first + 1]);
                assert!(wc[..2].iter().all(|w| w.status == WcStatus::Success));
            }
            assert_eq!(cq.poll(&mut [Wc::default(); 4]), 0);
        }
    }

    /// Posts `k` SENDs, the QPs taking turns, with wr_ids from `*next`
    /// on, and writes their completions after the `unpolled` ones already
    /// in the ring.
    fn post_done(cq: &Cq, qps: &mut [Qp], next: &mut u64, unpolled: u64, k: u64) {
        let s = [Sge::new(0x1000, 8, 1)];
        for j in 0..k {
            let qp = &mut qps[(*next % 2) as usize];
            let at = qp.send_queue().cur_post() as u16;
            qp.post_send(&SendWr::send(*next, &s)).unwrap();
            put_send_done(cq, (unpolled + j) as u32, qp.qpn(), at);
            *next += 1;
        }
    }

    /// Polls for one completion, which test the entry the CQ keeps at hand
    /// for the next one, find each completion in order after lazy polls
    /// and array polls moved the consumer index, across ring wraps, and
    /// after resizes that carry an unpolled completion into a ring of
    /// another size; an empty ring reads as empty to each kind of poll.
    #[test]
    fn one_completion_polls_follow_lazy_and_array_polls_and_resizes() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        let mut qps = rc_qps_on(&pd, &cq, 2);
        let (mut next, mut want) = (0u64, 0u64);
        let one = |cq: &mut Cq, want: &mut u64| {
            let mut wc = [Wc::default()];
            assert_eq!(cq.poll(&mut wc), 1, "wr_id {want}");
            assert_eq!((wc[0].wr_id, wc[0].status), (*want, WcStatus::Success));
            *want += 1;
        };
        for size in [7, 15, 3, 31, 7] {
            if size != cq.cqe() {
                // One completion left in the ring for the resize to carry.
                post_done(&cq, &mut qps, &mut next, 0, 1);
                cq.resize(size).unwrap();
                one(&mut cq, &mut want);
            }
            let entries = u64::from(cq.memory().entries);
            // Some laps of the ring, every kind of poll in between.
            for step in 0..3 * entries {
                match step % 4 {
                    0 => {
                        post_done(&cq, &mut qps, &mut next, 0, 1);
                        one(&mut cq, &mut want);
                    }
                    1 => {
                        post_done(&cq, &mut qps, &mut next, 0, 3);
                        for c in cq.start_poll().take(2) {
                            assert_eq!((c.wr_id(), c.status()), (want, WcStatus::Success));
                            want += 1;
                        }
                        one(&mut cq, &mut want);
                    }
                    2 => {
                        post_done(&cq, &mut qps, &mut next, 0, 3);
                        let mut wc = [Wc::default(); 2];
                        assert_eq!(cq.poll(&mut wc), 2);
                        assert_eq!([wc[0].wr_id, wc[1].wr_id], [want, want + 1]);
                        want += 2;
                        one(&mut cq, &mut want);
                    }
                    _ => {
                        post_done(&cq, &mut qps, &mut next, 0, 2);
                        assert_eq!(cq.start_poll().take(1).count(), 1);
                        want += 1;
                        one(&mut cq, &mut want);
                    }
                }
                assert_eq!(want, next);
                assert_eq!(cq.doorbell_ci(), cq.consumer_index());
            }
            assert_eq!(cq.poll(&mut [Wc::default()]), 0);
            assert_eq!(cq.poll(&mut [Wc::default(); 4]), 0);
            assert_eq!(cq.start_poll().count(), 0);
            assert_all_retired(&mut qps, &cq);
        }
    }

    #[test]
    fn owner_bit_wraps_with_the_consumer_index() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(3).unwrap();
        let n = cq.memory().entries;
        assert_eq!(n, 4);
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        let mut wc = [Wc::default(); 8];
        // Nothing valid yet: op_own 0xF0 everywhere.
        assert_eq!(cq.poll(&mut wc), 0);
        for round in 0..3u32 {
            let owner = (round & 1) as u8;
            for i in 0..n {
                let id = u64::from(round * n + i);
                qp.post_send(&SendWr::send(id, &s)).unwrap();
                let idx = qp.send_queue().cur_post() - 1;
                let mut c = cqe(0x0, owner, qp.qpn(), idx as u16);
                c[56] = 0x0a;
                put_cqe(&cq, i, c);
            }
            // Entries of the previous lap (wrong owner) stop nothing here; the
            // next lap's parity is not yet written, so polling stops after n.
            assert_eq!(cq.poll(&mut wc), n as usize);
            for (i, w) in wc[..n as usize].iter().enumerate() {
                assert_eq!(w.wr_id, u64::from(round * n) + i as u64);
                assert_eq!(w.status, WcStatus::Success);
                assert_eq!(w.opcode, WcOpcode::Send);
                assert_eq!(w.qp_num, qp.qpn());
            }
            assert_eq!(cq.poll(&mut wc), 0);
            assert_eq!(cq.consumer_index(), (round + 1) * n);
            assert_eq!(be32_at(cq.memory().doorbell_record), (round + 1) * n);
            assert_eq!(cq.doorbell_ci(), (round + 1) * n);
        }
    }

    /// QPs taking turns on one CQ, polled many at a time and one at a time:
    /// every completion names its QP's request, each QP's send queue room
    /// comes back, and the doorbell record follows the consumer index.
    #[test]
    fn completions_of_qps_taking_turns() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(31).unwrap();
        let mut qps = rc_qps_on(&pd, &cq, 3);
        let s = [Sge::new(0x1000, 8, 1)];
        let mut wc = [Wc::default(); 32];
        for round in 0..4u32 {
            let width = if round % 2 == 0 { 32 } else { 1 };
            // Every QP's SQ full, completions interleaved: QP 0, 1, 2, 0, ...
            let per_qp = qps[0].cap().max_send_wr;
            for i in 0..per_qp {
                for (q, qp) in qps.iter_mut().enumerate() {
                    let id = u64::from(round * 1000 + i) * 10 + q as u64;
                    qp.post_send(&SendWr::send(id, &s)).unwrap();
                    let idx = qp.send_queue().cur_post() - 1;
                    put_send_done(&cq, i * 3 + q as u32, qp.qpn(), idx as u16);
                }
            }
            for qp in &mut qps {
                assert!(qp.post_send(&SendWr::send(0, &s)).is_err(), "full");
            }
            let n = (per_qp * 3) as usize;
            let mut got = 0;
            while got < n {
                let k = cq.poll(&mut wc[..(n - got).min(width)]);
                assert!(k > 0, "{got} of {n}");
                for (j, w) in wc[..k].iter().enumerate() {
                    let (i, q) = ((got + j) / 3, (got + j) % 3);
                    assert_eq!(w.status, WcStatus::Success);
                    assert_eq!(w.qp_num, qps[q].qpn());
                    assert_eq!(
                        w.wr_id,
                        (u64::from(round * 1000) + i as u64) * 10 + q as u64
                    );
                }
                got += k;
            }
            assert_all_retired(&mut qps, &cq);
        }
    }

    /// Lazy polls of QPs taking turns, each ended part way: every
    /// completion names its QP's request, in order, and each QP's send
    /// queue room comes back as far as its completions taken so far.
    #[test]
    fn lazy_polls_ended_part_way_free_what_they_took() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(31).unwrap();
        let mut qps = rc_qps_on(&pd, &cq, 3);
        let s = [Sge::new(0x1000, 8, 1)];
        for round in 0..3u32 {
            // Round 0: QPs 0, 1, 2 taking turns; later rounds: runs of one
            // QP's completions, so the hot QP and the others both get
            // polls that stop inside a run.
            let per_qp = qps[0].cap().max_send_wr;
            let order: Vec<(usize, u32)> = match round {
                0 => (0..per_qp)
                    .flat_map(|i| (0..3).map(move |q| (q, i)))
                    .collect(),
                _ => (0..3)
                    .flat_map(|q| (0..per_qp).map(move |i| (q, i)))
                    .collect(),
            };
            let mut posted = vec![Vec::new(); 3];
            for (q, qp) in qps.iter_mut().enumerate() {
                for i in 0..per_qp {
                    let id = u64::from(round * 1000 + i) * 10 + q as u64;
                    qp.post_send(&SendWr::send(id, &s)).unwrap();
                    posted[q].push((id, (qp.send_queue().cur_post() - 1) as u16));
                }
            }
            for (j, &(q, i)) in order.iter().enumerate() {
                let (_, idx) = posted[q][i as usize];
                put_send_done(&cq, j as u32, qps[q].qpn(), idx);
            }
            let mut got = 0;
            let mut taken = [0u32; 3];
            for stop in [1usize, 2, 5, 3, 7, 4].into_iter().cycle() {
                if got == order.len() {
                    break;
                }
                let ci = cq.consumer_index();
                let mut k = 0;
                for c in cq.start_poll().take(stop) {
                    let (q, i) = order[got + k];
                    assert!(c.is_ok(), "{:?}", c.wc());
                    assert_eq!(
                        (c.qp_num(), c.wr_id()),
                        (qps[q].qpn(), posted[q][i as usize].0)
                    );
                    taken[q] += 1;
                    k += 1;
                }
                assert_eq!(k, stop.min(order.len() - got));
                got += k;
                assert_eq!(cq.consumer_index(), ci + k as u32);
                assert_eq!(cq.doorbell_ci(), ci + k as u32);
                for (q, qp) in qps.iter_mut().enumerate() {
                    assert_eq!(qp.send_queue().in_use(), per_qp - taken[q], "QP {q}");
                }
            }
            assert_eq!(cq.start_poll().count(), 0);
        }
    }

    /// The lazy poll, and polls for one completion by value, yield what the
    /// array poll would: requester completions of two QPs, an error by name
    /// and a responder completion; each publishes the consumer index and
    /// the freed SQ room.
    #[test]
    fn lazy_poll_and_poll_one_read_what_the_array_poll_writes() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(15).unwrap();
        let mut qps = rc_qps_on(&pd, &cq, 2);
        let s = [Sge::new(0x1000, 8, 1)];
        let fill = |cq: &Cq, qps: &mut Vec<Qp>, lap: u32| {
            let mut slot = 0;
            let mut put = |cq: &Cq, mut c: [u8; 64]| {
                c[63] |= (lap & 1) as u8;
                put_cqe(cq, slot, c);
                slot += 1;
            };
            for i in 0..3u64 {
                for (q, qp) in qps.iter_mut().enumerate() {
                    let at = qp.send_queue().cur_post() as u16;
                    qp.post_send(&SendWr::rdma_read(i * 10 + q as u64, &s, 0, 0))
                        .unwrap();
                    let mut c = cqe(0x0, 0, qp.qpn(), at);
                    c[56] = 0x10;
                    c[44..48].copy_from_slice(&(100 + i as u32).to_be_bytes());
                    put(cq, c);
                }
            }
            let at = qps[1].send_queue().cur_post() as u16;
            qps[1].post_send(&SendWr::send(77, &s)).unwrap();
            let mut c = cqe(0xd, 0, qps[1].qpn(), at);
            c[56] = 0x0a;
            c[55] = 0x13;
            put(cq, c);
            qps[0].post_recv(&RecvWr::new(88, &s)).unwrap();
            let mut c = cqe(0x2, 0, qps[0].qpn(), 0);
            c[44..48].copy_from_slice(&5u32.to_be_bytes());
            put(cq, c);
        };
        fill(&cq, &mut qps, 0);
        let mut array = [Wc::default(); 16];
        let n = cq.poll(&mut array);
        assert_eq!(n, 8);
        let ci = cq.consumer_index();
        for qp in &mut qps {
            qp.reset().unwrap();
            rts(qp);
        }
        // The same entries again, one lap on (the CQ has 16 entries).
        for k in 0..8u32 {
            put_cqe(&cq, 8 + k, cqe(0x0, 0, 0xff_ffff, 0));
        }
        let mut wc = [Wc::default(); 16];
        assert_eq!(cq.poll(&mut wc), 8, "garbage entries 8..16");
        fill(&cq, &mut qps, 1);
        let lazy: Vec<Wc> = cq
            .start_poll()
            .map(|c| {
                assert_eq!(
                    (c.wr_id(), c.status(), c.opcode(), c.byte_len(), c.qp_num()),
                    (
                        c.wc().wr_id,
                        c.wc().status,
                        c.wc().opcode,
                        c.wc().byte_len,
                        c.wc().qp_num
                    )
                );
                c.wc()
            })
            .collect();
        assert_eq!(lazy, array[..n].to_vec());
        assert_eq!(lazy[6].status, WcStatus::RemAccessErr);
        assert_eq!(
            (lazy[7].opcode, lazy[7].wr_id, lazy[7].byte_len),
            (WcOpcode::Recv, 88, 5)
        );
        assert_eq!(cq.consumer_index(), ci + 16);
        assert_eq!(cq.doorbell_ci(), ci + 16);
        for qp in &mut qps {
            assert_eq!(qp.send_queue().in_use(), 0);
        }
        // Once more, a lap on, one completion at a time by value.
        for qp in &mut qps {
            qp.reset().unwrap();
            rts(qp);
        }
        for k in 0..8u32 {
            put_cqe(&cq, 8 + k, cqe(0x0, 1, 0xff_ffff, 0));
        }
        assert_eq!(cq.poll(&mut wc), 8, "garbage entries 8..16");
        fill(&cq, &mut qps, 2);
        let one: Vec<Wc> = std::iter::from_fn(|| cq.poll_one()).collect();
        assert_eq!(one, array[..n].to_vec());
        assert_eq!(cq.consumer_index(), ci + 32);
        assert_eq!(cq.doorbell_ci(), ci + 32);
        for qp in &mut qps {
            assert_eq!(qp.send_queue().in_use(), 0);
        }
    }

    /// A QP's requester completions with atomics and a responder
    /// completion among them, around the ring's end, taken by lazy polls
    /// (after the first, through the QP's fast path), by an array poll and
    /// by polls for one at a time:
    /// each names its request, an atomic's length is 8 whatever the CQE's
    /// byte count says, and the QP's SQ room all comes back.
    #[test]
    fn atomics_and_a_responder_cqe_amid_one_qps_requester_completions() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        let entries = cq.memory().entries;
        assert_eq!(entries, 8);
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum How {
            Array,
            Lazy,
            OneByOne,
        }
        for how in [How::Array, How::Lazy, How::Lazy, How::OneByOne] {
            qp.post_recv(&RecvWr::new(88, &s)).unwrap();
            let wrs = [
                SendWr::send(1, &s),
                SendWr::rdma_write(2, &s, 0x2000, 7),
                SendWr::fetch_add(3, &s, 0x2000, 7, 1),
                SendWr::rdma_read(4, &s, 0x2000, 7),
                SendWr::comp_swap(5, &s, 0x2000, 7, 0, 1),
                SendWr::send(6, &s),
            ];
            // The CQEs in order, the responder's fourth; every byte count
            // 100 + the request's wr_id, which an atomic's length ignores.
            let mut expect = Vec::new();
            let put = |cq: &Cq, ahead: usize, mut c: [u8; 64]| {
                let slot = cq.consumer_index() + ahead as u32;
                c[63] |= ((slot / entries) & 1) as u8;
                put_cqe(cq, slot, c);
            };
            for (k, wr) in wrs.iter().enumerate() {
                if k == 3 {
                    let mut c = cqe(0x2, 0, qp.qpn(), 0);
                    c[44..48].copy_from_slice(&5u32.to_be_bytes());
                    put(&cq, expect.len(), c);
                    expect.push((88, WcOpcode::Recv, 5));
                }
                let at = qp.send_queue().cur_post() as u16;
                qp.post_send(wr).unwrap();
                let mut c = cqe(0x0, 0, qp.qpn(), at);
                c[56] = wr.op.mlx5_opcode() as u8;
                c[44..48].copy_from_slice(&(100 + wr.wr_id as u32).to_be_bytes());
                put(&cq, expect.len(), c);
                let counted = 100 + wr.wr_id as u32;
                let (opcode, len) = match wr.wr_id {
                    1 | 6 => (WcOpcode::Send, counted),
                    2 => (WcOpcode::RdmaWrite, counted),
                    3 => (WcOpcode::FetchAdd, 8),
                    4 => (WcOpcode::RdmaRead, counted),
                    _ => (WcOpcode::CompSwap, 8),
                };
                expect.push((wr.wr_id, opcode, len));
            }
            let ci = cq.consumer_index();
            let mut got = Vec::new();
            match how {
                How::Lazy => {
                    // One completion first, so the QP is the hot one for the
                    // rest.
                    for stop in [1, usize::MAX] {
                        for c in cq.start_poll().take(stop) {
                            got.push(c.wc());
                        }
                    }
                }
                How::Array => {
                    let mut wc = [Wc::default(); 8];
                    let k = cq.poll(&mut wc);
                    got.extend_from_slice(&wc[..k]);
                }
                How::OneByOne => {
                    let mut wc = [Wc::default()];
                    while cq.poll(&mut wc) == 1 {
                        got.push(wc[0]);
                    }
                }
            }
            let seen: Vec<(u64, WcOpcode, u32)> = got
                .iter()
                .map(|w| (w.wr_id, w.opcode, w.byte_len))
                .collect();
            assert_eq!(seen, expect, "{how:?}");
            assert!(got.iter().all(|w| w.is_ok() && w.qp_num == qp.qpn()));
            assert_eq!(qp.send_queue().in_use(), 0);
            assert_eq!(cq.consumer_index(), ci + 7);
            assert_eq!(cq.doorbell_ci(), ci + 7);
        }
    }

    #[test]
    fn poll_respects_the_output_length() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        for i in 0..5 {
            qp.post_send(&SendWr::rdma_read(i, &s, 0, 0)).unwrap();
            let mut c = cqe(0x0, 0, qp.qpn(), i as u16);
            c[56] = 0x10;
            c[44..48].copy_from_slice(&8u32.to_be_bytes());
            put_cqe(&cq, i as u32, c);
        }
        let mut wc = [Wc::default(); 2];
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].opcode, wc[0].byte_len),
            (4, WcOpcode::RdmaRead, 8)
        );
        assert_eq!(cq.poll(&mut []), 0);
    }

    #[test]
    fn one_poll_runs_past_the_ring_end_and_around_a_responder_cqe() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        assert_eq!(cq.memory().entries, 8);
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        qp.post_recv(&RecvWr::new(100, &s)).unwrap();
        let send = |cq: &Cq, qp: &mut Qp, id: u64, slot: u32| {
            qp.post_send(&SendWr::send(id, &s)).unwrap();
            let idx = qp.send_queue().cur_post() - 1;
            let mut c = cqe(0x0, ((slot >> 3) & 1) as u8, qp.qpn(), idx as u16);
            c[56] = 0x0a;
            put_cqe(cq, slot, c);
        };
        for i in 0..4 {
            send(&cq, &mut qp, i, i as u32);
        }
        let mut wc = [Wc::default(); 8];
        assert_eq!(cq.poll(&mut wc[..4]), 4);
        send(&cq, &mut qp, 4, 4);
        send(&cq, &mut qp, 5, 5);
        put_cqe(&cq, 6, cqe(0x2, 0, qp.qpn(), 0));
        // The last three: slot 7 of lap 0, then slots 0 and 1 of lap 1.
        for (id, slot) in [(6, 7), (7, 8), (8, 9)] {
            send(&cq, &mut qp, id, slot);
        }
        assert_eq!(cq.poll(&mut wc), 6);
        let ids: Vec<u64> = wc[..6].iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [4, 5, 100, 6, 7, 8]);
        assert_eq!(wc[2].opcode, WcOpcode::Recv);
        assert!(wc[..6].iter().all(|w| w.is_ok() && w.qp_num == qp.qpn()));
        assert_eq!(qp.send_queue().in_use(), 0);
        assert_eq!(cq.consumer_index(), 10);
        assert_eq!(cq.doorbell_ci(), 10);
        assert_eq!(cq.poll(&mut wc), 0);
    }

    #[test]
    fn one_requester_cqe_retires_every_earlier_unsignaled_wqe() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        for i in 0..3 {
            qp.post_send(&SendWr::send(i, &s).unsignaled()).unwrap();
        }
        qp.post_send(&SendWr::send(3, &s)).unwrap();
        assert_eq!(qp.send_queue().in_use(), 4);
        let mut c = cqe(0x0, 0, qp.qpn(), 3);
        c[56] = 0x0a;
        put_cqe(&cq, 0, c);
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 3);
        assert_eq!(qp.send_queue().in_use(), 0);
    }

    #[test]
    fn responder_fields_and_imm() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(7).unwrap();
        let mut qp = pd
            .create_qp(&QpInit::new(QpType::Ud, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 64, 1)];
        for i in 0..3 {
            qp.post_recv(&RecvWr::new(100 + i, &s)).unwrap();
        }
        let mut a = cqe(0x3, 0, qp.qpn(), 0);
        a[36..40].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        a[44..48].copy_from_slice(&40u32.to_be_bytes());
        a[24..28].copy_from_slice(&(0x2000_0000u32 | 0xabcdef).to_be_bytes());
        a[63] |= 0x02;
        put_cqe(&cq, 0, a);
        let mut b = cqe(0x1, 0, qp.qpn(), 1);
        b[36..40].copy_from_slice(&7u32.to_be_bytes());
        put_cqe(&cq, 1, b);
        put_cqe(&cq, 2, cqe(0x2, 0, qp.qpn(), 2));
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 3);
        assert_eq!(
            wc[0],
            Wc {
                wr_id: 100,
                status: WcStatus::Success,
                vendor_err: 0,
                hw_err_synd: 0,
                hw_synd_type: 0,
                opcode: WcOpcode::Recv,
                byte_len: 40,
                imm_data: 0x1234_5678,
                has_imm: true,
                src_qp: 0xabcdef,
                qp_num: qp.qpn(),
                solicited: true,
                grh: true,
            }
        );
        assert_eq!(wc[0].to_string(), "wr_id 100 RECV: SUCCESS, 40 bytes");
        assert_eq!(
            (wc[1].wr_id, wc[1].opcode, wc[1].imm()),
            (101, WcOpcode::RecvRdmaWithImm, Some(7))
        );
        assert_eq!(
            (wc[2].wr_id, wc[2].opcode, wc[2].imm()),
            (102, WcOpcode::Recv, None)
        );
        assert_eq!(qp.recv_queue().in_use(), 0);
    }

    #[test]
    fn error_cqes_carry_status_and_vendor_syndrome() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(31).unwrap();
        let mut qp = pd
            .create_qp(
                &QpInit::new(QpType::Rc, &cq, &cq)
                    .cap(cap())
                    .max_send_wr(16)
                    .max_recv_wr(16),
            )
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        let table = [
            (0x01, WcStatus::LocLenErr, "LOC_LEN_ERR"),
            (0x02, WcStatus::LocQpOpErr, "LOC_QP_OP_ERR"),
            (0x04, WcStatus::LocProtErr, "LOC_PROT_ERR"),
            (0x05, WcStatus::WrFlushErr, "WR_FLUSH_ERR"),
            (0x06, WcStatus::MwBindErr, "MW_BIND_ERR"),
            (0x10, WcStatus::BadRespErr, "BAD_RESP_ERR"),
            (0x11, WcStatus::LocAccessErr, "LOC_ACCESS_ERR"),
            (0x12, WcStatus::RemInvReqErr, "REM_INV_REQ_ERR"),
            (0x13, WcStatus::RemAccessErr, "REM_ACCESS_ERR"),
            (0x14, WcStatus::RemOpErr, "REM_OP_ERR"),
            (0x15, WcStatus::RetryExcErr, "RETRY_EXC_ERR"),
            (0x16, WcStatus::RnrRetryExcErr, "RNR_RETRY_EXC_ERR"),
            (0x22, WcStatus::RemAbortErr, "REM_ABORT_ERR"),
            (0x99, WcStatus::GeneralErr, "GENERAL_ERR"),
        ];
        for (i, (synd, _, _)) in table.iter().enumerate() {
            qp.post_send(&SendWr::rdma_write(i as u64, &s, 0, 0))
                .unwrap();
            let mut c = cqe(0xd, 0, qp.qpn(), i as u16);
            c[56] = 0x08;
            c[55] = *synd;
            c[54] = 0x40 + i as u8;
            c[53] = 0x10;
            c[52] = 0x80 + i as u8;
            put_cqe(&cq, i as u32, c);
        }
        let mut wc = [Wc::default(); 32];
        assert_eq!(cq.poll(&mut wc), table.len());
        for (i, (_, st, name)) in table.iter().enumerate() {
            assert_eq!(wc[i].wr_id, i as u64);
            assert_eq!(wc[i].status, *st);
            assert_eq!(wc[i].status.name(), *name);
            assert_eq!(wc[i].vendor_err, 0x40 + i as u8);
            assert_eq!(
                (wc[i].hw_err_synd, wc[i].hw_synd_type),
                (0x80 + i as u8, 0x10)
            );
            assert_eq!(wc[i].opcode, WcOpcode::RdmaWrite);
        }
        assert_eq!(
            wc[8].to_string(),
            "wr_id 8 RDMA_WRITE: REM_ACCESS_ERR (remote access error), \
             vendor syndrome 0x48, hw syndrome 0x88 type 0x1"
        );
        // A responder error retires one receive.
        qp.post_recv(&RecvWr::new(77, &s)).unwrap();
        let mut c = cqe(0xe, 0, qp.qpn(), 0);
        c[55] = 0x05;
        put_cqe(&cq, table.len() as u32, c);
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (77, WcStatus::WrFlushErr, WcOpcode::Recv)
        );
    }

    /// Completions of QPs taking turns, then a long run of one QP's, then
    /// turns again, polled a few at a time: each names its request in
    /// order, and every QP's send queue room comes back.
    #[test]
    fn polls_follow_qps_from_turns_to_one_and_back() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(63).unwrap();
        let s = [Sge::new(0x1000, 8, 1)];
        let mut wc = [Wc::default(); 32];
        for width in [4, 32, 1, 3] {
            let mut qps = rc_qps_on(&pd, &cq, 3);
            let order: Vec<usize> = [0, 1, 2, 0, 1, 2]
                .into_iter()
                .chain([0; 6])
                .chain([1, 2].repeat(6))
                .collect();
            let mut expect = Vec::new();
            for (i, &q) in order.iter().enumerate() {
                let id = 100 * width as u64 + i as u64;
                qps[q].post_send(&SendWr::send(id, &s)).unwrap();
                let idx = qps[q].send_queue().cur_post() - 1;
                put_send_done(&cq, i as u32, qps[q].qpn(), idx as u16);
                expect.push((qps[q].qpn(), id));
            }
            let mut got = Vec::new();
            poll_until(&mut cq, &mut got, expect.len(), width);
            assert_eq!(cq.poll(&mut wc), 0);
            for (i, (w, &(qpn, id))) in got.iter().zip(&expect).enumerate() {
                assert_eq!(
                    (w.status, w.qp_num, w.wr_id),
                    (WcStatus::Success, qpn, id),
                    "width {width}, completion {i}"
                );
            }
            assert_all_retired(&mut qps, &cq);
        }
    }

    /// QPs taking turns, one of them destroyed after the poller has met it
    /// but with completions still in the ring, and a QPN no QP has among
    /// them: those are general errors naming their QPN, the live QPs'
    /// completions around them name their requests and free their room.
    #[test]
    fn completions_of_a_destroyed_qp_and_an_unknown_qpn_among_turns() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(63).unwrap();
        let s = [Sge::new(0x1000, 8, 1)];
        let mut wc = [Wc::default(); 32];
        for width in [32, 1] {
            let mut qps = rc_qps_on(&pd, &cq, 3);
            let qpns: Vec<u32> = qps.iter().map(|q| q.qpn()).collect();
            // Round 0 before the destroy, so the poller has every QP cached;
            // rounds 1..4 after, with an unknown QPN in round 2.
            let mut expect = Vec::new();
            let mut ahead = 0;
            for round in 0..4u32 {
                for (q, qp) in qps.iter_mut().enumerate() {
                    let id = u64::from(round) * 10 + q as u64;
                    qp.post_send(&SendWr::send(id, &s)).unwrap();
                    let idx = qp.send_queue().cur_post() - 1;
                    put_send_done(&cq, ahead, qpns[q], idx as u16);
                    ahead += 1;
                    let dead = round > 0 && q == 1;
                    expect.push((qpns[q], if dead { None } else { Some(id) }));
                    if round == 2 && q == 0 {
                        put_send_done(&cq, ahead, 0x77_7777, 0);
                        ahead += 1;
                        expect.push((0x77_7777, None));
                    }
                }
            }
            let mut got = Vec::new();
            poll_until(&mut cq, &mut got, 3, width);
            drop(qps.remove(1));
            poll_until(&mut cq, &mut got, expect.len(), width);
            assert_eq!(cq.poll(&mut wc), 0);
            for (i, (w, &(qpn, id))) in got.iter().zip(&expect).enumerate() {
                assert_eq!(w.qp_num, qpn, "completion {i}");
                match id {
                    Some(id) => {
                        assert_eq!((w.status, w.wr_id), (WcStatus::Success, id), "{i}")
                    }
                    None => assert_eq!(w.status, WcStatus::GeneralErr, "completion {i}"),
                }
            }
            assert_all_retired(&mut qps, &cq);
        }
    }

    /// QPs taking turns with atomics, RDMA READs and an error completion
    /// among their sends, over several laps of a small ring, polled a few
    /// at a time, one at a time and many at a time: every completion names
    /// its QP's request with its opcode and length (an atomic's 8), the
    /// error its status, and each QP's send queue room comes back.
    #[test]
    fn atomics_and_an_error_amid_qps_taking_turns() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(15).unwrap();
        let entries = cq.memory().entries;
        assert_eq!(entries, 16);
        let s = [Sge::new(0x1000, 8, 1)];
        let mut wc = [Wc::default(); 32];
        let mut qps = rc_qps_on(&pd, &cq, 3);
        for (round, width) in [4, 1, 32, 3, 4, 2].into_iter().enumerate() {
            let mut expect = Vec::new();
            let mut ahead = 0;
            for i in 0..4u64 {
                for (q, qp) in qps.iter_mut().enumerate() {
                    let id = round as u64 * 100 + i * 10 + q as u64;
                    let counted = 1000 + id as u32;
                    let (wr, opcode, len) = match (i + q as u64 + round as u64) % 4 {
                        0 => (
                            SendWr::fetch_add(id, &s, 0x2000, 7, 1),
                            WcOpcode::FetchAdd,
                            8,
                        ),
                        1 => (
                            SendWr::rdma_read(id, &s, 0x2000, 7),
                            WcOpcode::RdmaRead,
                            counted,
                        ),
                        2 if q == 1 => (
                            SendWr::comp_swap(id, &s, 0x2000, 7, 0, 1),
                            WcOpcode::CompSwap,
                            8,
                        ),
                        _ => (SendWr::send(id, &s), WcOpcode::Send, counted),
                    };
                    let at = qp.send_queue().cur_post() as u16;
                    qp.post_send(&wr).unwrap();
                    // One error completion a round, on the third QP.
                    let err = i == 2 && q == 2;
                    let mut c = cqe(if err { 0xd } else { 0x0 }, 0, qp.qpn(), at);
                    c[56] = wr.op.mlx5_opcode() as u8;
                    c[44..48].copy_from_slice(&counted.to_be_bytes());
                    if err {
                        c[55] = 0x13;
                    }
                    put_ahead(&cq, ahead, c);
                    ahead += 1;
                    if err {
                        expect.push((qp.qpn(), id, opcode, None, WcStatus::RemAccessErr));
                    } else {
                        expect.push((qp.qpn(), id, opcode, Some(len), WcStatus::Success));
                    }
                }
            }
            let mut got = Vec::new();
            poll_until(&mut cq, &mut got, expect.len(), width);
            assert_eq!(cq.poll(&mut wc), 0);
            for (i, (w, &(qpn, id, opcode, len, status))) in got.iter().zip(&expect).enumerate() {
                let what = format!("round {round}, completion {i}");
                assert_eq!((w.qp_num, w.wr_id, w.status), (qpn, id, status), "{what}");
                assert_eq!(w.opcode, opcode, "{what}");
                if let Some(len) = len {
                    assert_eq!(w.byte_len, len, "{what}");
                }
            }
            assert_all_retired(&mut qps, &cq);
        }
    }

    #[test]
    fn garbage_is_a_general_error_not_a_panic() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(15).unwrap();
        let qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()))
            .unwrap();
        rts(&qp);
        // Unknown opcode, unknown QPN, compressed format, requester opcode garbage.
        put_cqe(&cq, 0, cqe(0x7, 0, qp.qpn(), 0));
        put_cqe(&cq, 1, cqe(0x0, 0, 0x77_7777, 0));
        let mut c = cqe(0x2, 0, qp.qpn(), 0);
        c[63] |= 0x0c;
        put_cqe(&cq, 2, c);
        let mut c = cqe(0x0, 0, qp.qpn(), 0xffff);
        c[56] = 0xee;
        put_cqe(&cq, 3, c);
        // A resize marker completes nothing.
        put_cqe(&cq, 4, cqe(0x5, 0, 0, 0));
        let mut wc = [Wc::default(); 8];
        assert_eq!(cq.poll(&mut wc), 4);
        assert!(wc[..4].iter().all(|w| w.status == WcStatus::GeneralErr));
        assert_eq!(cq.consumer_index(), 5);
    }

    #[test]
    fn srq_completions_name_the_wqe() {
        let (ctx, _sim, _rec) = recorded(500);
        let pd = ctx.alloc_pd().unwrap();
        let mut cq = ctx.create_cq(15).unwrap();
        let mut srq = pd.create_srq(&SrqInit::new(3, 1)).unwrap();
        let qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap()).srq(&srq))
            .unwrap();
        rts(&qp);
        let s = [Sge::new(0x1000, 8, 1)];
        for i in 0..3 {
            srq.post_recv(&RecvWr::new(10 + i, &s)).unwrap();
        }
        assert!(srq.post_recv(&RecvWr::new(13, &s)).is_err());
        // Out of order: WQE 2 then 0.
        put_cqe(&cq, 0, cqe(0x2, 0, qp.qpn(), 2));
        put_cqe(&cq, 1, cqe(0x2, 0, qp.qpn(), 0));
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!((wc[0].wr_id, wc[1].wr_id), (12, 10));
        // Slot 3 is free, slot 0 (after it) too.
        srq.post_recv(&RecvWr::new(13, &s)).unwrap();
        srq.post_recv(&RecvWr::new(14, &s)).unwrap();
        assert!(srq.post_recv(&RecvWr::new(15, &s)).is_err());
    }

    #[test]
    fn raw_cqe_accessors() {
        let mut c = cqe(0xd, 1, 0x12_3456, 0xbeef);
        c[52] = 0x2a;
        c[53] = 0x30;
        c[54] = 0x93;
        c[55] = 0x13;
        let r = RawCqe(c);
        assert_eq!(
            (r.opcode(), r.owner(), r.qpn(), r.wqe_counter()),
            (0xd, 1, 0x12_3456, 0xbeef)
        );
        assert_eq!((r.syndrome(), r.vendor_err_synd()), (0x13, 0x93));
        assert_eq!((r.hw_err_synd(), r.hw_synd_type()), (0x2a, 0x30));
        assert!(RawCqe::is_sw_owned(0xd1, 8, 3));
        assert!(!RawCqe::is_sw_owned(0xd1, 0, 3));
        assert!(!RawCqe::is_sw_owned(0xf0, 0, 3));
    }
}
