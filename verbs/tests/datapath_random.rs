//! Randomized traffic, seeded: several RC QPs across two emulated devices,
//! random WRITE / READ / SEND with random sizes and offsets, checked against
//! a model of both memories.

mod datapath_support;

/// Named so that `cargo test -p verbs datapath` selects these tests.
mod datapath {
    use std::sync::Arc;

    use crate::datapath_support::{connect_qp, open, wait, Buf};
    use devx::sim::SimDevice;
    use verbs::{AhAttr, Context, Cq, Pd, Qp, QpInit, QpType, RecvWr, SendWr, WcStatus};

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const QPS: usize = 3;
    const MEM: usize = 16 * 1024;

    struct Dev {
        ctx: Context,
        sim: Arc<SimDevice>,
        _pd: Pd,
        cq: Cq,
        qps: Vec<Qp>,
        buf: Buf,
        model: Vec<u8>,
    }

    fn dev(base: u32) -> Dev {
        let (ctx, sim) = open(base);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let qps = (0..QPS)
            .map(|_| {
                pd.create_qp(
                    &QpInit::new(QpType::Rc, &cq, &cq).cap(crate::datapath_support::caps()),
                )
                .unwrap()
            })
            .collect();
        let buf = Buf::all(&pd, MEM);
        let model: Vec<u8> = (0..MEM).map(|i| (i * 7 + base as usize) as u8).collect();
        buf.write(0, &model);
        Dev {
            ctx,
            sim,
            _pd: pd,
            cq,
            qps,
            buf,
            model,
        }
    }

    fn path(d: &Dev) -> AhAttr {
        let g = d.ctx.query_gid(1, 1).unwrap();
        AhAttr::roce(1, g.gid, 1, Some(d.sim.identity().mac))
    }

    /// One random operation from `x` over QP `q` to `y`, completed and modelled.
    fn step(rng: &mut Rng, x: &mut Dev, y: &mut Dev, q: usize, id: u64) {
        let len = 1 + rng.below(2048) as usize;
        let lo = rng.below((MEM - len) as u64) as usize;
        let ro = rng.below((MEM - len) as u64) as usize;
        let (laddr, raddr, rkey) = (
            x.buf.sge(lo, len as u32),
            y.buf.addr() + ro as u64,
            y.buf.mr.rkey(),
        );
        match rng.below(3) {
            0 => {
                x.qps[q]
                    .post_send(&SendWr::rdma_write(id, &[laddr], raddr, rkey))
                    .unwrap();
                let src = x.model[lo..lo + len].to_vec();
                y.model[ro..ro + len].copy_from_slice(&src);
            }
            1 => {
                x.qps[q]
                    .post_send(&SendWr::rdma_read(id, &[laddr], raddr, rkey))
                    .unwrap();
                let src = y.model[ro..ro + len].to_vec();
                x.model[lo..lo + len].copy_from_slice(&src);
            }
            _ => {
                y.qps[q]
                    .post_recv(&RecvWr::new(id, &[y.buf.sge(ro, len as u32)]))
                    .unwrap();
                x.qps[q].post_send(&SendWr::send(id, &[laddr])).unwrap();
                let r = wait(&mut y.cq, 1);
                assert_eq!(
                    (r[0].wr_id, r[0].status, r[0].byte_len as usize),
                    (id, WcStatus::Success, len)
                );
                assert_eq!(r[0].qp_num, y.qps[q].qpn());
                let src = x.model[lo..lo + len].to_vec();
                y.model[ro..ro + len].copy_from_slice(&src);
            }
        }
        let w = wait(&mut x.cq, 1);
        assert_eq!((w[0].wr_id, w[0].status), (id, WcStatus::Success), "{w:?}");
        assert_eq!(w[0].qp_num, x.qps[q].qpn());
    }

    fn run(seed: u64, steps: u64) {
        let mut rng = Rng(seed | 1);
        let mut a = dev(1000);
        let mut b = dev(1100);
        for q in 0..QPS {
            connect_qp(&a.qps[q], b.qps[q].qpn(), path(&b), 7);
            connect_qp(&b.qps[q], a.qps[q].qpn(), path(&a), 7);
        }
        for id in 0..steps {
            let q = rng.below(QPS as u64) as usize;
            if rng.below(2) == 0 {
                step(&mut rng, &mut a, &mut b, q, id);
            } else {
                step(&mut rng, &mut b, &mut a, q, id);
            }
        }
        assert!(
            a.buf.read(0, MEM) == a.model,
            "seed {seed}: memory A differs from the model"
        );
        assert!(
            b.buf.read(0, MEM) == b.model,
            "seed {seed}: memory B differs from the model"
        );
    }

    #[test]
    fn random_traffic_matches_the_model() {
        for seed in [1, 0x5eed, 0xdead_beef] {
            run(seed, 300);
        }
    }
}
