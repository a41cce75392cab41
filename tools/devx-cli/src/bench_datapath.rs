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
    RtrAttr, RtsAttr, SendWr, Sge, Wc,
};

use prm_layouts::{CqeOpcode, SendOpcode};

use crate::bench::Metric;

/// Requests per doorbell, and one signaled per batch.
const BATCH: u64 = 16;
const SQ_WRS: u32 = 4096;
const POLL_CQ: u32 = 4095;
/// Requests per round of the posting-only points.
const ROUND_WRS: u32 = 1024;
const QKEY: u32 = 0x1111;
/// QPs sharing one CQ.
const SHARED_QPS: usize = 8;

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

fn path_to(peer: &Side) -> Result<AhAttr, String> {
    let gid = peer.ctx.query_gid(1, 1).map_err(e("query_gid"))?;
    Ok(AhAttr::roce(1, gid.gid, 1, Some(peer.sim.identity().mac)))
}

/// RST → RTS: RC towards `peer`'s QP, UD with [`QKEY`].
fn ready(qp: &Qp, peer: &Side) -> Result<(), String> {
    if qp.qp_type() == QpType::Ud {
        qp.to_init(&InitAttr::new(1).qkey(QKEY))
            .map_err(e("to_init"))?;
        qp.to_rtr(&RtrAttr::ud()).map_err(e("to_rtr"))?;
    } else {
        qp.to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE))
            .map_err(e("to_init"))?;
        let rtr = RtrAttr::new(Mtu::Mtu4096, peer.qp.qpn(), 0, path_to(peer)?);
        qp.to_rtr(&rtr).map_err(e("to_rtr"))?;
    }
    qp.to_rts(&RtsAttr::new(0)).map_err(e("to_rts"))
}

fn connect(s: &Side, peer: &Side) -> Result<(), String> {
    ready(&s.qp, peer)
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

/// One batch of 16 requests `$wr` (request `$i` = `$id` + 0..16, `$sig`
/// true for the last), one doorbell; a `Result<(), String>`. A macro rather
/// than a function taking a closure: the request is built inside the loop,
/// as an application's would be, so the compiler folds it into the stores.
macro_rules! post_batch {
    ($qp:expr, $id:expr, |$i:ident, $sig:ident| $wr:expr) => {{
        let mut b = $qp.send_batch();
        let mut res = Ok(());
        for k in 0..BATCH {
            let ($i, $sig) = ($id + k, k == BATCH - 1);
            if let Err(err) = b.post(&$wr) {
                res = Err(err);
                break;
            }
        }
        b.ring();
        // Reported after the doorbell: no formatting while the batch is open.
        res.map_err(e("post_send"))
    }};
}

/// One batch of 16 64-byte RDMA WRITEs, the last signaled.
#[inline(always)]
fn post_batch(qp: &mut Qp, sge: &[Sge; 1], raddr: u64, rkey: u32, id: u64) -> Result<(), String> {
    post_batch!(qp, id, |i, sig| SendWr::rdma_write(i, sge, raddr, rkey)
        .signaled(sig))
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
    let device = DeviceCq::new(&m);
    let qpn = a.qp.qpn();
    // The next `entries` CQEs from consumer counter `ci`, each with the owner
    // bit of its lap; the QP on the CQ is in RTS but idle.
    let fill = |ci: u64| {
        for c_idx in ci..ci + entries {
            device.put_whole(c_idx, qpn, (c_idx % entries) as u16);
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

/// ns per CQE polled lazily (`start_poll`), reading the wr_id, length and
/// QPN of each, from a full ring of hand-written requester CQEs.
fn poll_lazy_ns(a: &mut Side, n: u64) -> Result<(f64, u64), String> {
    let m = a.cq.memory();
    let entries = u64::from(m.entries);
    let device = DeviceCq::new(&m);
    let qpn = a.qp.qpn();
    let laps = n.div_ceil(entries).max(1);
    let (mut timed, mut sum) = (Duration::ZERO, 0u64);
    for _ in 0..laps {
        let ci = u64::from(a.cq.consumer_index());
        for c_idx in ci..ci + entries {
            device.put_whole(c_idx, qpn, (c_idx % entries) as u16);
        }
        let start = Instant::now();
        let got = lazy_lap(&mut a.cq, &mut sum);
        timed += start.elapsed();
        if got != entries {
            return Err(format!("bench datapath: lazy poll took {got} of {entries}"));
        }
    }
    Ok((timed.as_nanos() as f64 / (laps * entries) as f64, sum))
}

/// One lazy poll of everything the CQ holds, reading the wr_id, length
/// and QPN of each completion into `sum`; how many it took. Out of line,
/// so a profiler can tell the poll from the ring filling around it.
#[inline(never)]
fn lazy_lap(cq: &mut Cq, sum: &mut u64) -> u64 {
    let (mut got, mut s) = (0, *sum);
    for c in cq.start_poll() {
        s = s.wrapping_add(c.wr_id() + u64::from(c.byte_len() + c.qp_num()));
        got += 1;
    }
    *sum = s;
    got
}

/// 64-byte RDMA WRITEs per second, end to end, 4 batches in flight. Out
/// of line, so a profiler can tell it from the other points.
#[inline(never)]
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

/// A QP of `qp_type` on `s` with its own CQ, ready (towards `peer`), for
/// the points that post without executing.
fn extra_qp(s: &Side, peer: &Side, qp_type: QpType, cap: QpCap) -> Result<(Cq, Qp), String> {
    let cq = s.ctx.create_cq(POLL_CQ).map_err(e("create_cq"))?;
    let qp =
        s.pd.create_qp(&QpInit::new(qp_type, &cq, &cq).cap(cap))
            .map_err(e("create_qp"))?;
    ready(&qp, peer)?;
    Ok((cq, qp))
}

fn cap(max_send_sge: u32, max_inline_data: u32) -> QpCap {
    QpCap {
        max_send_wr: ROUND_WRS,
        max_recv_wr: 1,
        max_send_sge,
        max_recv_sge: 1,
        max_inline_data,
    }
}

/// ns per request posted by `batch` (16 requests from id `i`, one
/// doorbell), with the engine paused. Between rounds the QP is reset and
/// made ready again, so the device never executes what was posted.
fn post_only(
    a: &Side,
    b: &Side,
    qp: &mut Qp,
    n: u64,
    mut batch: impl FnMut(&mut Qp, u64) -> Result<(), String>,
) -> Result<f64, String> {
    let round = u64::from(ROUND_WRS);
    let (mut done, mut timed) = (0, Duration::ZERO);
    while done < n {
        let k = round.min(n - done).div_ceil(BATCH) * BATCH;
        a.sim.pause_engine(true);
        let start = Instant::now();
        for j in (0..k).step_by(BATCH as usize) {
            batch(qp, done + j)?;
        }
        timed += start.elapsed();
        qp.reset().map_err(e("reset"))?;
        ready(qp, b)?;
        a.sim.pause_engine(false);
        done += k;
    }
    Ok(timed.as_nanos() as f64 / done as f64)
}

/// SEND with 64 bytes inline.
fn inline64_ns(a: &Side, b: &Side, n: u64) -> Result<f64, String> {
    let (_cq, mut qp) = extra_qp(a, b, QpType::Rc, cap(1, 64))?;
    let payload = [0xab_u8; 64];
    post_only(a, b, &mut qp, n, |qp, id| {
        post_batch!(qp, id, |i, sig| SendWr::send(i, &[])
            .inline_data(&payload)
            .signaled(sig))
    })
}

/// RDMA WRITE gathering 4 SGEs of 16 bytes.
fn sge4_ns(a: &Side, b: &Side, n: u64) -> Result<f64, String> {
    let (_cq, mut qp) = extra_qp(a, b, QpType::Rc, cap(4, 0))?;
    let sgl: [Sge; 4] = std::array::from_fn(|j| Sge::from_mr(&a.mr, 16 * j, 16));
    let (raddr, rkey) = (b.mr.addr() as u64, b.mr.rkey());
    post_only(a, b, &mut qp, n, |qp, id| {
        post_batch!(qp, id, |i, sig| SendWr::rdma_write(i, &sgl, raddr, rkey)
            .signaled(sig))
    })
}

/// UD SEND of 64 bytes through an address handle.
fn ud_ns(a: &Side, b: &Side, n: u64) -> Result<f64, String> {
    let (_cq, mut qp) = extra_qp(a, b, QpType::Ud, cap(1, 0))?;
    let ah: Ah = a.pd.create_ah(&path_to(b)?).map_err(e("create_ah"))?;
    let sge = [Sge::from_mr(&a.mr, 0, 64)];
    let dqpn = b.qp.qpn();
    post_only(a, b, &mut qp, n, |qp, id| {
        post_batch!(qp, id, |i, sig| SendWr::send(i, &sge)
            .ud(&ah, dqpn, QKEY)
            .signaled(sig))
    })
}

/// A CQ's ring as the device writes it: requester CQEs of 64-byte RDMA
/// WRITEs, each found by masking its counter, as a device indexes.
struct DeviceCq {
    addr: usize,
    mask: u64,
    log_size: u32,
}

impl DeviceCq {
    fn new(m: &verbs::QueueMemory) -> DeviceCq {
        let entries = u64::from(m.entries);
        DeviceCq {
            addr: m.addr,
            mask: entries - 1,
            log_size: entries.trailing_zeros(),
        }
    }

    /// Where CQE `c_idx` (consumer counter, free running) goes, and its
    /// owner byte: opcode REQ and the owner bit of its lap.
    #[inline(always)]
    fn slot(&self, c_idx: u64) -> (*mut u8, u8) {
        use prm_layouts::fields::cqe64 as f;
        let slot = (self.addr + 64 * (c_idx & self.mask) as usize) as *mut u8;
        let op_own = f::OPCODE.put(CqeOpcode::Req.raw().into())
            | f::OWNER.put(((c_idx >> self.log_size) & 1) as u32);
        (slot, op_own as u8)
    }

    /// Requester CQE `c_idx` for WQE `wqe_counter` of QP `qpn`, the whole
    /// entry: whatever the ring held before is overwritten.
    fn put_whole(&self, c_idx: u64, qpn: u32, wqe_counter: u16) {
        let (slot, op_own) = self.slot(c_idx);
        let c = prm_layouts::Cqe64::new()
            .with_byte_cnt(64)
            .with_sop_drop_qpn((u32::from(SendOpcode::RdmaWrite.raw()) << 24) | qpn)
            .with_wqe_counter(wqe_counter);
        // SAFETY: a slot of the CQ's live ring. The device writes no CQE
        // meanwhile: its QPs are idle or their engine paused. The owner
        // byte, which hands the entry to the poller, is stored last, with
        // release.
        unsafe {
            std::ptr::copy_nonoverlapping(c.0.as_ptr(), slot, 63);
            std::sync::atomic::AtomicU8::from_ptr(slot.add(63))
                .store(op_own, std::sync::atomic::Ordering::Release);
        }
    }

    /// [`DeviceCq::put_whole`]'s CQE as `ping_ns` writes it into a fresh
    /// CQ: its fields, then its owner byte, where the C twin's device
    /// writes the same. The ring holds only such CQEs, so the fields left
    /// are the zeros the CQ was created with.
    #[inline(always)]
    fn put(&self, c_idx: u64, qpn: u32, wqe_counter: u16) {
        use prm_layouts::fields::cqe64 as f;
        let (slot, op_own) = self.slot(c_idx);
        let sop_drop_qpn =
            f::SOP_DROP_QPN.put((u32::from(SendOpcode::RdmaWrite.raw()) << 24) | qpn);
        // SAFETY: as in `put_whole`, each field inside the slot's 64 bytes.
        unsafe {
            slot.add(f::BYTE_CNT.byte)
                .cast::<[u8; 4]>()
                .write(f::BYTE_CNT.put(64).to_be_bytes());
            slot.add(f::SOP_DROP_QPN.byte)
                .cast::<[u8; 4]>()
                .write(sop_drop_qpn.to_be_bytes());
            slot.add(f::WQE_COUNTER.byte)
                .cast::<[u8; 2]>()
                .write(wqe_counter.to_be_bytes());
            // The dword's low byte, last in memory: opcode and owner.
            std::sync::atomic::AtomicU8::from_ptr(slot.add(f::OWNER.byte + 3))
                .store(op_own, std::sync::atomic::Ordering::Release);
        }
    }
}

/// ns per CQE polled from full rings of CQEs of 8 QPs taking turns.
fn poll_shared_ns(a: &Side, b: &Side, n: u64) -> Result<f64, String> {
    let mut cq = a.ctx.create_cq(POLL_CQ).map_err(e("create_cq"))?;
    let mut qpns = Vec::new();
    let mut qps = Vec::new();
    for _ in 0..SHARED_QPS {
        let qp =
            a.pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap(1, 0)))
                .map_err(e("create_qp"))?;
        ready(&qp, b)?;
        qpns.push(qp.qpn());
        qps.push(qp);
    }
    let m = cq.memory();
    let entries = u64::from(m.entries);
    let device = DeviceCq::new(&m);
    let laps = n.div_ceil(entries).max(1);
    let mut wc = [Wc::default(); 32];
    let mut timed = Duration::ZERO;
    for _ in 0..laps {
        let ci = u64::from(cq.consumer_index());
        for c in ci..ci + entries {
            let q = (c % SHARED_QPS as u64) as usize;
            device.put_whole(c, qpns[q], (c / SHARED_QPS as u64) as u16);
        }
        let start = Instant::now();
        let mut got = 0;
        while got < entries {
            let k = cq.poll(&mut wc);
            if k == 0 {
                return Err("bench datapath: the hand-filled shared CQ ran dry".into());
            }
            got += k as u64;
        }
        timed += start.elapsed();
    }
    drop(qps);
    Ok(timed.as_nanos() as f64 / (laps * entries) as f64)
}

/// ns per ping: one signaled RDMA WRITE posted and rung, its CQE written
/// as the device would (engine paused), then polled.
fn ping_ns(a: &Side, b: &Side, n: u64) -> Result<f64, String> {
    let (mut cq, mut qp) = extra_qp(a, b, QpType::Rc, cap(1, 0))?;
    let device = DeviceCq::new(&cq.memory());
    let sge = [Sge::from_mr(&a.mr, 0, 64)];
    let (raddr, rkey) = (b.mr.addr() as u64, b.mr.rkey());
    // The QPN the device writes into each CQE, as the C twin's device
    // has it at hand.
    let qpn = qp.qpn();
    a.sim.pause_engine(true);
    let start = Instant::now();
    let mut res = Ok(());
    for i in 0..n {
        let at = qp.send_queue().cur_post();
        if let Err(err) = qp.post_send(&SendWr::rdma_write(i, &sge, raddr, rkey)) {
            res = Err(format!("bench datapath: post_send: {err}"));
            break;
        }
        device.put(u64::from(cq.consumer_index()), qpn, at as u16);
        match cq.poll_one() {
            Some(c) if c.wr_id == i && c.is_ok() => {}
            Some(c) => {
                res = Err(format!("bench datapath: ping {i} polled {c}"));
                break;
            }
            None => {
                res = Err(format!("bench datapath: ping {i} polled nothing"));
                break;
            }
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    // What the device never ran is dropped with the QP's reset.
    let reset = qp.reset().map_err(e("reset"));
    a.sim.pause_engine(false);
    res.and(reset).map(|()| ns)
}

/// The C twins, beside this file in the source tree.
const C_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench-c/datapath.c");

pub fn datapath(iterations: u64) -> Result<Vec<Metric>, String> {
    let (mut a, b) = pair()?;
    // Warm up the caches and the path once.
    post_ns(&mut a, &b, 4096)?;
    let post = post_ns(&mut a, &b, iterations)?;
    let rate = e2e_rate(&mut a, &b, iterations.min(1 << 20))?;
    let poll = poll_ns(&mut a, iterations)?;
    let (poll_lazy, sum) = poll_lazy_ns(&mut a, iterations)?;
    std::hint::black_box(sum);
    let inline64 = inline64_ns(&a, &b, iterations)?;
    let sge4 = sge4_ns(&a, &b, iterations)?;
    let ud = ud_ns(&a, &b, iterations)?;
    let poll8 = poll_shared_ns(&a, &b, iterations)?;
    let ping = ping_ns(&a, &b, iterations)?;
    let _ = &a.pd;
    let m = |name: &str, value: f64, unit: &'static str| Metric {
        name: name.into(),
        value,
        unit,
    };
    Ok(vec![
        m(
            "post_send_ns_per_wqe",
            post,
            "ns per RDMA_WRITE WQE (1 SGE, 16 per doorbell, engine paused)",
        ),
        m("poll_ns_per_cqe", poll, "ns per CQE (full 4096-entry ring)"),
        m(
            "poll_lazy_ns_per_cqe",
            poll_lazy,
            "ns per CQE polled with start_poll, wr_id + length + QPN read",
        ),
        m(
            "send_inline64_ns_per_wqe",
            inline64,
            "ns per SEND WQE with 64 bytes inline (16 per doorbell)",
        ),
        m(
            "sge4_ns_per_wqe",
            sge4,
            "ns per RDMA_WRITE WQE with 4 SGEs (16 per doorbell)",
        ),
        m(
            "ud_send_ns_per_wqe",
            ud,
            "ns per UD SEND WQE with an address vector (16 per doorbell)",
        ),
        m(
            "poll_8qp_ns_per_cqe",
            poll8,
            "ns per CQE, 8 QPs taking turns on one CQ",
        ),
        m(
            "ping_ns",
            ping,
            "ns per post + doorbell + poll of one signaled WQE (CQE written by hand)",
        ),
        m(
            "rdma_write_64b_msgs_per_sec",
            rate,
            "64-byte RDMA WRITEs per second between two emulated devices",
        ),
        m(
            "iterations",
            iterations as f64,
            "WQEs / CQEs per measurement",
        ),
    ])
}

/// The `"name": number` pairs of a one-line JSON object.
fn numbers(line: &str) -> Vec<(String, f64)> {
    line.trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once(':')?;
            Some((
                k.trim().trim_matches('"').to_string(),
                v.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// Runs `cmd` and returns the numbers of its last output line.
fn run_json(cmd: &mut std::process::Command) -> Result<Vec<(String, f64)>, String> {
    let out = cmd
        .output()
        .map_err(|err| format!("bench datapath: running {cmd:?}: {err}"))?;
    if !out.status.success() {
        return Err(format!(
            "bench datapath: {cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    Ok(numbers(last))
}

/// Median and range of `v` (not empty).
fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[0], v[v.len() - 1])
}

/// `bench datapath --compare-c`: builds the C twins with `cc -O2`, runs
/// them and this benchmark (each in a fresh process) `runs` times
/// alternately, and prints per point the medians, ranges and the ratio of
/// the medians (Rust / C; below 1 is faster than C).
pub fn compare_c(iterations: u64, runs: u32, json: bool) -> crate::CliResult {
    let dir = std::env::temp_dir().join(format!("devx-bench-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|err| format!("bench datapath: {}: {err}", dir.display()))?;
    let exe = dir.join("datapath-c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(C_SOURCE)
        .status()
        .map_err(|err| format!("bench datapath: running {cc}: {err}"))?;
    if !built.success() {
        return Err(format!(
            "bench datapath: {cc} -O2 {C_SOURCE} failed ({built})"
        ));
    }
    let me = std::env::current_exe().map_err(|err| format!("bench datapath: {err}"))?;
    let mut rust: Vec<(String, Vec<f64>)> = Vec::new();
    let mut c: Vec<(String, Vec<f64>)> = Vec::new();
    let add = |into: &mut Vec<(String, Vec<f64>)>, got: Vec<(String, f64)>| {
        for (k, v) in got {
            match into.iter_mut().find(|(n, _)| *n == k) {
                Some((_, vs)) => vs.push(v),
                None => into.push((k, vec![v])),
            }
        }
    };
    for _ in 0..runs.max(1) {
        let r = run_json(
            std::process::Command::new(&me)
                .args(["bench", "datapath", "--json", "--iterations"])
                .arg(iterations.to_string()),
        )?;
        add(&mut rust, r);
        add(&mut c, run_json(&mut std::process::Command::new(&exe))?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut rows = Vec::new();
    for (name, rv) in &mut rust {
        if name == "iterations" {
            continue;
        }
        let r = stats(rv);
        let cv = c.iter_mut().find(|(n, _)| n == name).map(|(_, v)| stats(v));
        rows.push((name.clone(), r, cv));
    }
    if json {
        let body: Vec<String> = rows
            .iter()
            .map(|(n, r, cv)| {
                let c = cv.map_or("null".to_string(), |c| {
                    format!(
                        "{{\"median\": {:.2}, \"min\": {:.2}, \"max\": {:.2}}}",
                        c.0, c.1, c.2
                    )
                });
                let ratio = cv.map_or("null".to_string(), |c| format!("{:.2}", r.0 / c.0));
                format!(
                    "\"{n}\": {{\"rust\": {{\"median\": {:.2}, \"min\": {:.2}, \"max\": {:.2}}}, \"c\": {c}, \"ratio\": {ratio}}}",
                    r.0, r.1, r.2
                )
            })
            .collect();
        println!(
            "{{\"bench\": \"datapath-compare-c\", \"runs\": {runs}, {}}}",
            body.join(", ")
        );
        return Ok(());
    }
    println!("{runs} alternated runs; median [min - max]; ratio = Rust / C medians");
    println!("{:<30} {:>26} {:>26} {:>7}", "point", "rust", "c", "ratio");
    for (n, r, cv) in rows {
        let fmt = |s: (f64, f64, f64)| format!("{:.2} [{:.2} - {:.2}]", s.0, s.1, s.2);
        let (cs, ratio) = cv.map_or(("-".to_string(), "-".to_string()), |c| {
            (fmt(c), format!("{:.2}", r.0 / c.0))
        });
        println!("{n:<30} {:>26} {cs:>26} {ratio:>7}", fmt(r));
    }
    println!(
        "The C loops do less per unit: no request checks, no SQ room bookkeeping or \
         Wc array, a plain store for a doorbell (tools/bench-c/README.md lists it)."
    );
    Ok(())
}
