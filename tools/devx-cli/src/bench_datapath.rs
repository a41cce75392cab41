//! `bench datapath`: the direct data path on emulated devices. Posting is
//! timed with the device's engine paused (doorbells held, executed between
//! timed rounds, or discarded by a reset of the QP); polling over CQ rings
//! filled by hand; and 64-byte RDMA WRITEs end to end between two emulated
//! devices. Each point but the last has a twin of the same name in
//! `tools/bench-c/datapath.c`; `--compare-c` runs both (see [`compare_c`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use devx::sim::SimDevice;
use verbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, InitAttr, Mr, Mtu, Pd, Qp, QpCap, QpInit, QpType,
    RtrAttr, RtsAttr, SendBatch, SendWr, Sge, Wc,
};

use crate::bench::Metric;

/// Requests per doorbell, and one signaled per batch.
const BATCH: u64 = 16;
const SQ_WRS: u32 = 4096;
const POLL_CQ: u32 = 4095;

fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("bench datapath: {what}: {err}")
}

struct Side {
    ctx: Context,
    sim: Arc<SimDevice>,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr<Vec<u8>>,
}

fn side(name: &str) -> Result<Side, String> {
    let sim = devx::sim::sim_device(name).map_err(e("device"))?;
    let dev = devx::Device::emulated(name).map_err(e("device"))?;
    let ctx = Context::open(&dev).map_err(e("open"))?;
    let pd = ctx.alloc_pd().map_err(e("alloc_pd"))?;
    let cq = ctx.create_cq(POLL_CQ).map_err(e("create_cq"))?;
    let cap = QpCap {
        max_send_wr: SQ_WRS,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))
        .map_err(e("create_qp"))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = pd.reg_mr(vec![0u8; 1 << 16], access).map_err(e("reg_mr"))?;
    Ok(Side {
        ctx,
        sim,
        pd,
        cq,
        qp,
        mr,
    })
}

fn connect(s: &Side, peer: &Side) -> Result<(), String> {
    let gid = peer.ctx.query_gid(1, 1).map_err(e("query_gid"))?;
    let path = AhAttr::roce(1, gid.gid, 1, Some(peer.sim.identity().mac));
    s.qp.to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE))
        .map_err(e("to_init"))?;
    s.qp.to_rtr(&RtrAttr::new(Mtu::Mtu4096, peer.qp.qpn(), 0, path))
        .map_err(e("to_rtr"))?;
    s.qp.to_rts(&RtsAttr::new(0)).map_err(e("to_rts"))
}

fn pair() -> Result<(Side, Side), String> {
    let a = side("sim90")?;
    let b = side("sim91")?;
    connect(&a, &b)?;
    connect(&b, &a)?;
    Ok((a, b))
}

/// Polls exactly `n` successful completions.
fn drain(cq: &mut Cq, n: u64) -> Result<(), String> {
    let mut wc = [Wc::default(); 64];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < n {
        let k = cq.poll(&mut wc);
        if let Some(bad) = wc[..k].iter().find(|w| !w.is_ok()) {
            return Err(format!("bench datapath: completion {bad:?}"));
        }
        got += k as u64;
        if k == 0 && Instant::now() > deadline {
            return Err(format!("bench datapath: {got} of {n} completions"));
        }
    }
    Ok(())
}

/// One batch of 16 64-byte RDMA WRITEs, the last signaled.
#[inline(always)]
fn post_batch(qp: &mut Qp, sge: &[Sge; 1], raddr: u64, rkey: u32, id: u64) -> Result<(), String> {
    let mut b = qp.send_batch();
    let mut res = Ok(());
    for i in 0..BATCH {
        let wr = SendWr::rdma_write(id + i, sge, raddr, rkey).signaled(i == BATCH - 1);
        if let Err(err) = b.post(&wr) {
            res = Err(err);
            break;
        }
    }
    b.ring();
    // Reported after the doorbell: no formatting while the batch is open.
    res.map_err(e("post_send"))
}

/// ns per WQE posted, with the engine paused during the timed part.
fn post_ns(a: &mut Side, b: &Side, n: u64) -> Result<f64, String> {
    let sge = [Sge::from_mr(&a.mr, 0, 64)];
    let (raddr, rkey) = (b.mr.addr() as u64, b.mr.rkey());
    // Rounds that fit the SQ (every WQE one block) and the CQ.
    let round = (u64::from(a.qp.cap().max_send_wr) / BATCH).min(u64::from(POLL_CQ) / 2) * BATCH;
    let mut done = 0;
    let mut timed = Duration::ZERO;
    while done < n {
        let k = round.min(n - done).div_ceil(BATCH) * BATCH;
        a.sim.pause_engine(true);
        let start = Instant::now();
        for j in (0..k).step_by(BATCH as usize) {
            post_batch(&mut a.qp, &sge, raddr, rkey, done + j)?;
        }
        timed += start.elapsed();
        a.sim.pause_engine(false);
        drain(&mut a.cq, k / BATCH)?;
        done += k;
    }
    Ok(timed.as_nanos() as f64 / done as f64)
}

/// ns per CQE polled from a full ring of hand-written requester CQEs.
fn poll_ns(a: &mut Side, n: u64) -> Result<f64, String> {
    let m = a.cq.memory();
    let entries = u64::from(m.entries);
    let qpn = a.qp.qpn();
    let log = entries.trailing_zeros();
    // The next `entries` CQEs from consumer counter `ci`, each with the owner
    // bit of its lap.
    let fill = |ci: u64| {
        for c_idx in ci..ci + entries {
            let i = (c_idx % entries) as usize;
            let owner = ((c_idx >> log) & 1) as u8;
            let mut c = [0u8; 64];
            c[56..60].copy_from_slice(&(0x0800_0000 | qpn).to_be_bytes());
            c[60..62].copy_from_slice(&(i as u16).to_be_bytes());
            c[63] = owner;
            // SAFETY: slot `i` of the CQ's live ring; the QP on it is in RTS
            // but idle, so the device writes no CQE meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(c.as_ptr(), (m.addr + 64 * i) as *mut u8, 64);
            }
        }
    };
    let laps = n.div_ceil(entries).max(1);
    let mut wc = [Wc::default(); 32];
    let mut timed = Duration::ZERO;
    for _ in 0..laps {
        fill(u64::from(a.cq.consumer_index()));
        let start = Instant::now();
        let mut got = 0;
        while got < entries {
            let k = a.cq.poll(&mut wc);
            if k == 0 {
                return Err("bench datapath: the hand-filled CQ ran dry".into());
            }
            got += k as u64;
        }
        timed += start.elapsed();
    }
    Ok(timed.as_nanos() as f64 / (laps * entries) as f64)
}

/// 64-byte RDMA WRITEs per second, end to end, 4 batches in flight.
fn e2e_rate(a: &mut Side, b: &Side, n: u64) -> Result<f64, String> {
    let sge = [Sge::from_mr(&a.mr, 0, 64)];
    let (raddr, rkey) = (b.mr.addr() as u64, b.mr.rkey());
    let batches = n.div_ceil(BATCH);
    let mut wc = [Wc::default(); 16];
    let (mut posted, mut completed) = (0u64, 0u64);
    let start = Instant::now();
    while completed < batches {
        while posted < batches && posted - completed < 4 {
            post_batch(&mut a.qp, &sge, raddr, rkey, posted * BATCH)?;
            posted += 1;
        }
        let k = a.cq.poll(&mut wc);
        if let Some(bad) = wc[..k].iter().find(|w| !w.is_ok()) {
            return Err(format!("bench datapath: completion {bad:?}"));
        }
        completed += k as u64;
    }
    Ok((batches * BATCH) as f64 / start.elapsed().as_secs_f64())
}

pub fn datapath(iterations: u64) -> Result<Vec<Metric>, String> {
    let (mut a, b) = pair()?;
    // Warm up the caches and the path once.
    post_ns(&mut a, &b, 4096)?;
    let post = post_ns(&mut a, &b, iterations)?;
    let rate = e2e_rate(&mut a, &b, iterations.min(1 << 20))?;
    let poll = poll_ns(&mut a, iterations)?;
    let _ = &a.pd;
    Ok(vec![
        Metric {
            name: "post_send_ns_per_wqe".into(),
            value: post,
            unit: "ns per RDMA_WRITE WQE (1 SGE, 16 per doorbell, engine paused)",
        },
        Metric {
            name: "poll_ns_per_cqe".into(),
            value: poll,
            unit: "ns per CQE (full 4096-entry ring)",
        },
        Metric {
            name: "rdma_write_64b_msgs_per_sec".into(),
            value: rate,
            unit: "64-byte RDMA WRITEs per second between two emulated devices",
        },
        Metric {
            name: "iterations".into(),
            value: iterations as f64,
            unit: "WQEs / CQEs per measurement",
        },
    ])
}
