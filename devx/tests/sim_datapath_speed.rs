//! Throughput of the engine (run with `--release -- --ignored`): 64-byte
//! RDMA writes, one doorbell each, then batched while paused.

#[path = "sim_datapath_support.rs"]
mod dp;

use std::time::Instant;

use dp::*;

// Named so `cargo test -p devx sim_datapath` selects these tests.
mod sim_datapath_speed {
    use super::*;

    #[test]
    #[ignore]
    fn rdma_write_64b_rate() {
        let n = Node::new(1150);
        let cq = n.cq(12);
        let mut a = n.qp_with(RC, &cq, 12, 4, 2);
        let b = n.qp(RC, &cq);
        n.connect(&a, b.qpn, [0; 16], 7);
        n.connect(&b, a.qpn, [0; 16], 7);
        let mut cq = cq;
        let src = n.mr(64, ALL);
        let dst = n.mr(1 << 20, ALL);
        let iters = 1_000_000u64;
        let t = Instant::now();
        for i in 0..iters {
            let flags = if i % 64 == 63 { SIGNALED } else { 0 };
            a.post(
                WRITE,
                flags,
                [0; 4],
                &[
                    &raddr_seg(dst.addr() + (i % 16384) * 64, dst.key),
                    &data_seg(64, src.key, src.addr()),
                ],
            );
            while cq.poll().is_some() {}
        }
        let dt = t.elapsed();
        println!(
            "doorbell per WQE: {:.2} M writes/s",
            iters as f64 / dt.as_secs_f64() / 1e6
        );

        n.dev.pause_engine(true);
        let batch = 2048u64;
        let mut engine_time = std::time::Duration::ZERO;
        for _ in 0..iters / batch {
            for i in 0..batch {
                let flags = if i == batch - 1 { SIGNALED } else { 0 };
                a.post(
                    WRITE,
                    flags,
                    [0; 4],
                    &[
                        &raddr_seg(dst.addr() + (i % 16384) * 64, dst.key),
                        &data_seg(64, src.key, src.addr()),
                    ],
                );
            }
            let t = Instant::now();
            n.dev.run_engine();
            engine_time += t.elapsed();
            assert!(cq.poll().is_some());
        }
        println!(
            "engine only, batches of {batch}: {:.2} M writes/s",
            (iters / batch * batch) as f64 / engine_time.as_secs_f64() / 1e6
        );
    }
}
