//! `bench wire`: RC between two processes over loopback, through the
//! emulated devices' network ports. This process is the requester; it
//! starts itself again as the responder (`DEVX_BENCH_WIRE_ROLE`), and the
//! two swap QPN, GID, MAC and buffer over the child's stdin and stdout.
//! Measured: 64-byte RDMA WRITEs per second, 1 MiB WRITEs in Gbit/s at
//! MTU 4096 (`--depth` of them in flight), and the round trip of a 64-byte
//! SEND ping-pong. Each process runs on one core of its own (the first two
//! this process may use, when it may use two): its application thread and
//! its device's receive thread share that core, and neither process takes
//! the other's.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, AhAttr, Context, Cq, Gid, InitAttr, Mr, Mtu, Qp, QpCap, QpInit, QpType, RecvWr,
    RtrAttr, RtsAttr, SendWr, Sge, Wc,
};

use devx::sim::wire::Counter;

use crate::bench::Metric;

const ROLE: &str = "DEVX_BENCH_WIRE_ROLE";
/// The core the responder runs on.
const CORE: &str = "DEVX_BENCH_WIRE_CORE";
/// A device no other command of this process opens.
const DEV: &str = "sim77";
/// GID table index of the RoCE v2 IPv4-mapped entry.
const GID_INDEX: u8 = 3;
const BIG: usize = 1 << 20;
const MTU: Mtu = Mtu::Mtu4096;
const SMALL: usize = 64;
const WRS: u32 = 256;
/// SEND immediate telling the responder to stop.
const STOP: u32 = u32::MAX;
const WAIT: Duration = Duration::from_secs(30);

/// The first two cores this process may run on, if it may run on two.
fn two_cores() -> Option<[usize; 2]> {
    // SAFETY: cpu_set_t is a plain bit array, valid all-zero.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET only reads the set, for indices inside it.
    let mut cores =
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some([cores.next()?, cores.next()?])
}

/// Runs this process (every thread it starts from now on) on `core`
/// alone; a refusal leaves it where it was.
fn pin(core: usize) {
    // SAFETY: as in two_cores.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` comes from the allowed set, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let _ = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("bench wire: {what}: {err}")
}

struct End {
    sim: std::sync::Arc<devx::sim::SimDevice>,
    _ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr<Vec<u8>>,
    line: String,
}

/// A device at `addr` with one RC QP and a buffer open to remote writes.
fn end(addr: Ipv4Addr) -> Result<End, String> {
    // The device reads its address when first opened, which is here.
    std::env::set_var(format!("DEVX_SIM_ADDR_{DEV}"), addr.to_string());
    let sim = devx::sim::sim_device(DEV).map_err(e("device"))?;
    if let Some(err) = sim.net_error() {
        return Err(format!("bench wire: {err}"));
    }
    let dev = devx::Device::emulated(DEV).map_err(e("device"))?;
    let ctx = Context::open(&dev).map_err(e("open"))?;
    let pd = ctx.alloc_pd().map_err(e("alloc_pd"))?;
    let cq = ctx.create_cq(2 * WRS).map_err(e("create_cq"))?;
    let cap = QpCap {
        max_send_wr: WRS,
        max_recv_wr: WRS,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))
        .map_err(e("create_qp"))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = pd.reg_mr(vec![0u8; 2 * BIG], access).map_err(e("reg_mr"))?;
    let gid = ctx
        .query_gid(1, u16::from(GID_INDEX))
        .map_err(e("query_gid"))?;
    let line = format!(
        "{} {} {} {} {}",
        qp.qpn(),
        hex::encode(gid.gid.0),
        hex::encode(sim.identity().mac),
        mr.addr(),
        mr.rkey()
    );
    Ok(End {
        sim,
        _ctx: ctx,
        cq,
        qp,
        mr,
        line,
    })
}

/// Connects to the peer described by `line`; its buffer's address and rkey.
fn connect(me: &End, line: &str) -> Result<(u64, u32), String> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let bad = || format!("bench wire: bad peer line '{line}'");
    let [qpn, gid, mac, addr, rkey] = w[..] else {
        return Err(bad());
    };
    let gid: [u8; 16] = hex::decode(gid)
        .ok()
        .and_then(|g| g.try_into().ok())
        .ok_or_else(bad)?;
    let mac: [u8; 6] = hex::decode(mac)
        .ok()
        .and_then(|m| m.try_into().ok())
        .ok_or_else(bad)?;
    let qpn: u32 = qpn.parse().map_err(|_| bad())?;
    let path = AhAttr::roce(1, Gid(gid), GID_INDEX, Some(mac));
    me.qp
        .to_init(&InitAttr::new(1).access(AccessFlags::REMOTE_WRITE))
        .map_err(e("to_init"))?;
    me.qp
        .to_rtr(&RtrAttr::new(MTU, qpn, 0, path).min_rnr_timer(1))
        .map_err(e("to_rtr"))?;
    me.qp
        .to_rts(&RtsAttr::new(0).timeout(14).retry_cnt(7).rnr_retry(7))
        .map_err(e("to_rts"))?;
    Ok((
        addr.parse().map_err(|_| bad())?,
        rkey.parse().map_err(|_| bad())?,
    ))
}

/// Waits for `n` completions, all successful; returns them counted by
/// whether they were receives.
fn drain(cq: &mut Cq, n: usize, wcs: &mut Vec<Wc>) -> Result<(), String> {
    // Polled straight into `wcs`: only the `n` entries asked for are
    // cleared (a message at a time, one).
    wcs.clear();
    wcs.resize(n, Wc::default());
    let mut got = 0;
    // Read the clock only while waiting.
    let mut deadline = None;
    while got < n {
        let k = cq.poll(&mut wcs[got..n.min(got + 32)]);
        if k == 0 {
            let now = Instant::now();
            if now > *deadline.get_or_insert(now + WAIT) {
                return Err(format!("bench wire: {got} of {n} completions"));
            }
            // Two busy processes and their receive threads share the cores.
            std::thread::yield_now();
            continue;
        }
        for w in &wcs[got..got + k] {
            if !w.is_ok() {
                return Err(format!("bench wire: {w}"));
            }
        }
        got += k;
    }
    Ok(())
}

/// The responder: echoes every SEND until the one carrying [`STOP`].
pub fn responder() -> Result<(), String> {
    let peer_addr: Ipv4Addr = std::env::var(ROLE)
        .ok()
        .and_then(|r| r.strip_prefix("responder:").map(str::to_string))
        .and_then(|a| a.parse().ok())
        .ok_or("bench wire: bad responder role")?;
    if let Some(core) = std::env::var(CORE).ok().and_then(|c| c.parse().ok()) {
        pin(core);
    }
    let mut me = end(peer_addr)?;
    println!("{}", me.line);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(e("stdin"))?;
    connect(&me, &line)?;
    // A QP takes receives from INIT on; the requester's first SEND comes
    // after "connected".
    let recv = [Sge::from_mr(&me.mr, BIG, SMALL as u32)];
    for _ in 0..WRS {
        me.qp
            .post_recv(&RecvWr::new(0, &recv))
            .map_err(e("post_recv"))?;
    }
    println!("connected");
    let send = [Sge::from_mr(&me.mr, 0, SMALL as u32)];
    let mut wcs = Vec::new();
    loop {
        drain(&mut me.cq, 1, &mut wcs)?;
        if wcs[0].wr_id == 1 {
            continue; // our echo's completion
        }
        me.qp
            .post_recv(&RecvWr::new(0, &recv))
            .map_err(e("post_recv"))?;
        if wcs[0].imm() == Some(STOP) {
            return Ok(());
        }
        me.qp
            .post_send(&SendWr::send(1, &send))
            .map_err(e("post_send"))?;
    }
}

fn spawn(addr: Ipv4Addr, core: Option<usize>) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(e("own path"))?;
    let mut cmd = Command::new(exe);
    if let Some(c) = core {
        cmd.env(CORE, c.to_string());
    }
    cmd.args(["bench", "wire"])
        .env(ROLE, format!("responder:{addr}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(e("start the responder"))
}

/// The requester's side: every measurement.
pub fn wire(iterations: u64, depth: Option<u32>) -> Result<Vec<Metric>, String> {
    let pid = std::process::id();
    let net = |n| {
        Ipv4Addr::new(
            127,
            77,
            ((pid >> 8) & 0xff) as u8,
            (pid & 0x7f) as u8 * 2 + n,
        )
    };
    let cores = two_cores();
    let mut child = spawn(net(1), cores.map(|c| c[1]))?;
    if let Some([mine, _]) = cores {
        pin(mine);
    }
    let result = measure(&mut child, net(0), iterations, depth);
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

fn measure(
    child: &mut Child,
    addr: Ipv4Addr,
    iterations: u64,
    depth: Option<u32>,
) -> Result<Vec<Metric>, String> {
    let mut out = BufReader::new(
        child
            .stdout
            .take()
            .ok_or("bench wire: no responder stdout")?,
    );
    let mut stdin = child.stdin.take().ok_or("bench wire: no responder stdin")?;
    let mut peer = String::new();
    out.read_line(&mut peer).map_err(e("responder"))?;
    let mut me = end(addr)?;
    let (raddr, rkey) = connect(&me, &peer)?;
    writeln!(stdin, "{}", me.line).map_err(e("responder"))?;
    let mut ack = String::new();
    out.read_line(&mut ack).map_err(e("responder"))?;
    if ack.trim() != "connected" {
        return Err(format!("bench wire: responder said '{}'", ack.trim()));
    }
    let recv = [Sge::from_mr(&me.mr, BIG, SMALL as u32)];
    for _ in 0..WRS {
        me.qp
            .post_recv(&RecvWr::new(0, &recv))
            .map_err(e("post_recv"))?;
    }
    let mut wcs = Vec::new();

    // 64-byte WRITEs, a window of WRS outstanding.
    let small = [Sge::from_mr(&me.mr, 0, SMALL as u32)];
    let n = iterations.max(1);
    let start = Instant::now();
    let mut posted = 0u64;
    let mut done = 0u64;
    while done < n {
        while posted < n && posted - done < u64::from(WRS) {
            me.qp
                .post_send(&SendWr::rdma_write(2, &small, raddr, rkey))
                .map_err(e("post_send"))?;
            posted += 1;
        }
        drain(&mut me.cq, 1, &mut wcs)?;
        done += 1;
    }
    let write64 = n as f64 / start.elapsed().as_secs_f64();

    // 1 MiB WRITEs at MTU 4096, `depth` in flight (default: all at once).
    let big = [Sge::from_mr(&me.mr, 0, BIG as u32)];
    let m = (n / 1000).clamp(4, 64);
    let depth = depth.map_or(m, u64::from).min(u64::from(WRS));
    let m = m.max(depth);
    // Packets sent beyond one per MTU of each message (retransmissions),
    // and time this process was ready but another ran: why a run is slow.
    let sent0 = me.sim.net_counters().map(|c| c.get(Counter::TxPackets));
    let waited0 = runqueue_wait();
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < m {
        while posted < m && posted - done < depth {
            me.qp
                .post_send(&SendWr::rdma_write(3, &big, raddr, rkey))
                .map_err(e("post_send"))?;
            posted += 1;
        }
        drain(&mut me.cq, 1, &mut wcs)?;
        done += 1;
    }
    let took = start.elapsed();
    let gbit = (m as f64 * BIG as f64 * 8.0) / took.as_secs_f64() / 1e9;
    let waited = runqueue_wait()
        .zip(waited0)
        .map(|(b, a)| b.saturating_sub(a));
    let sent = me.sim.net_counters().map(|c| c.get(Counter::TxPackets));
    let resent = sent.zip(sent0).map(|(b, a)| {
        b.saturating_sub(a)
            .saturating_sub(m * BIG.div_ceil(MTU.bytes() as usize) as u64)
    });

    // SEND ping-pong: a round trip per iteration.
    let rounds = (n / 10).clamp(10, 10_000);
    let start = Instant::now();
    for _ in 0..rounds {
        me.qp
            .post_send(&SendWr::send(4, &small))
            .map_err(e("post_send"))?;
        drain(&mut me.cq, 2, &mut wcs)?;
        me.qp
            .post_recv(&RecvWr::new(0, &recv))
            .map_err(e("post_recv"))?;
    }
    let rtt_us = start.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    me.qp
        .post_send(&SendWr::send(5, &small).imm(STOP))
        .map_err(e("post_send"))?;
    drain(&mut me.cq, 1, &mut wcs)?;
    let mut metrics = vec![
        Metric {
            name: "wire_rc_write_64b_msgs_per_s".into(),
            value: write64,
            unit: "msg/s",
        },
        Metric {
            name: "wire_rc_write_1mib_mtu4096_gbit_per_s".into(),
            value: gbit,
            unit: "Gbit/s",
        },
        Metric {
            name: "wire_rc_pingpong_64b_round_trip_us".into(),
            value: rtt_us,
            unit: "us",
        },
    ];
    if let Some(r) = resent {
        metrics.push(Metric {
            name: "wire_rc_write_1mib_resent_packets".into(),
            value: r as f64,
            unit: "packets",
        });
    }
    if let Some(w) = waited {
        metrics.push(Metric {
            name: "wire_rc_write_1mib_runqueue_wait_pct".into(),
            value: w.as_secs_f64() * 100.0 / took.as_secs_f64(),
            unit: "%",
        });
    }
    Ok(metrics)
}

/// How long this process's threads waited, runnable, for a core (Linux
/// schedstat); `None` where the kernel does not say.
fn runqueue_wait() -> Option<Duration> {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue;
        };
        // On the CPU, waiting, time slices: nanoseconds, nanoseconds, count.
        ns += s.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

/// Whether this process is the responder of a `bench wire` run.
pub fn is_responder() -> bool {
    std::env::var_os(ROLE).is_some()
}
