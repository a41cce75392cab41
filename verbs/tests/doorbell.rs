//! Send doorbells of QPs sharing one UAR: they take turns on its BlueFlame
//! register, alternate its halves together, and every doorbell executes.

mod datapath_support;

use std::sync::Arc;

use datapath_support::{connect_qp, open, recorded, rts, wait, Buf};
use devx::Uar;
use verbs::datapath::{BF_HALF, BF_OFFSET};
use verbs::{AccessFlags, AhAttr, Context, Cq, Pd, Qp, QpInit, QpType, SendWr, WcStatus};

fn qp_on(pd: &Pd, cq: &Cq, uar: Option<&Arc<Uar>>) -> verbs::Result<Qp> {
    let mut init = QpInit::new(QpType::Rc, cq, cq).max_send_wr(16);
    if let Some(u) = uar {
        init = init.uar(u.clone());
    }
    pd.create_qp(&init)
}

#[test]
fn qps_sharing_a_uar_alternate_its_halves_together() {
    let (ctx, _sim, rec) = recorded(7600);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let uar = Arc::new(Uar::alloc(ctx.devx()).unwrap());
    let mut a = qp_on(&pd, &cq, Some(&uar)).unwrap();
    let mut b = qp_on(&pd, &cq, Some(&uar)).unwrap();
    assert!(a.send_queue().doorbell().is_shared());
    assert_eq!(a.uar().page_id(), b.uar().page_id());
    rts(&a);
    rts(&b);
    let s = [verbs::Sge::new(0x1000, 8, 0x55)];
    for i in 0..3 {
        a.post_send(&SendWr::send(i, &s)).unwrap();
        b.post_send(&SendWr::send(i, &s)).unwrap();
    }
    let dbs = rec.0.lock().unwrap().clone();
    let offsets: Vec<usize> = dbs.iter().map(|d| d.1).collect();
    let (lo, hi) = (BF_OFFSET, BF_OFFSET ^ BF_HALF);
    assert_eq!(offsets, [lo, hi, lo, hi, lo, hi]);
    assert!(dbs.iter().all(|d| d.0 == uar.page_id()));
    // Both see the one register's next half.
    assert_eq!(a.send_queue().doorbell().bf_offset(), lo);
    assert_eq!(b.send_queue().doorbell().bf_offset(), lo);
}

#[test]
fn a_qps_own_uar_is_not_shared_with_another_qp() {
    let (ctx, sim) = open(7650);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mut own = qp_on(&pd, &cq, None).unwrap();
    assert!(!own.send_queue().doorbell().is_shared());
    let before = sim.live_objects();
    let e = qp_on(&pd, &cq, Some(own.uar())).unwrap_err();
    assert!(
        e.is_argument() && e.to_string().contains("dedicated"),
        "{e}"
    );
    assert_eq!(sim.live_objects(), before, "nothing half-created");
    // Once its QP is gone, the UAR may be shared.
    let uar = own.uar().clone();
    drop(own);
    let mut shared = qp_on(&pd, &cq, Some(&uar)).unwrap();
    assert!(shared.send_queue().doorbell().is_shared());
}

/// One QP of a connected pair, with its own CQ and a buffer to write from.
struct Lane {
    qp: Qp,
    cq: Cq,
    src: Buf,
}

fn path(ctx: &Context, sim: &devx::sim::SimDevice) -> AhAttr {
    let g = ctx.query_gid(1, 1).unwrap();
    AhAttr::roce(1, g.gid, 1, Some(sim.identity().mac))
}

#[test]
fn two_threads_ringing_one_shared_uar_get_every_doorbell_executed() {
    const POSTS: u64 = 300;
    let (ctx_a, sim_a) = open(7700);
    let (ctx_b, sim_b) = open(7800);
    let pd_a = ctx_a.alloc_pd().unwrap();
    let pd_b = ctx_b.alloc_pd().unwrap();
    let uar = Arc::new(Uar::alloc(ctx_a.devx()).unwrap());
    let dst = Buf::all(&pd_b, 4096);
    let cq_b = ctx_b.create_cq(8).unwrap();
    let mut lanes = Vec::new();
    let mut peers = Vec::new();
    for _ in 0..2 {
        let cq = ctx_a.create_cq(32).unwrap();
        let qp = qp_on(&pd_a, &cq, Some(&uar)).unwrap();
        let peer = qp_on(&pd_b, &cq_b, None).unwrap();
        connect_qp(&qp, peer.qpn(), path(&ctx_b, &sim_b), 7);
        connect_qp(&peer, qp.qpn(), path(&ctx_a, &sim_a), 7);
        let src = Buf::new(&pd_a, 64, AccessFlags::LOCAL_WRITE);
        lanes.push(Lane { qp, cq, src });
        peers.push(peer);
    }
    let remote = (dst.addr(), dst.mr.rkey());
    let threads: Vec<_> = lanes
        .into_iter()
        .enumerate()
        .map(|(k, mut lane)| {
            std::thread::spawn(move || {
                let mut done = 0;
                for i in 0..POSTS {
                    lane.src.write(0, &i.to_le_bytes());
                    let sge = [lane.src.sge(0, 8)];
                    let at = remote.0 + 8 * k as u64;
                    lane.qp
                        .post_send(&SendWr::rdma_write(i, &sge, at, remote.1))
                        .unwrap();
                    let wc = wait(&mut lane.cq, 1);
                    assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, i));
                    done += 1;
                }
                done
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), POSTS);
    }
    // Each lane's last write landed.
    for k in 0..2 {
        assert_eq!(dst.read(8 * k, 8), (POSTS - 1).to_le_bytes());
    }
    drop(peers);
}
