//! ibv_rc_pingpong between two emulated ConnectX devices in one process:
//! an RC pair over RoCE, SENDs bounced back and forth, every byte checked.
//!
//! cargo run --release -p verbs --example rc_pingpong -- -s 4096 -n 1000 -r 500 -m 1024

use std::time::Instant;

use verbs::{
    AccessFlags, AhAttr, Context, Cq, InitAttr, Mr, Mtu, Pd, Qp, QpCap, QpInit, QpType, RecvWr,
    RtrAttr, RtsAttr, SendWr, Sge, Wc,
};

struct Opts {
    size: usize,
    iters: u64,
    rx_depth: u32,
    mtu: Mtu,
}

const USAGE: &str = "usage: rc_pingpong [-s size] [-n iters] [-r rx_depth] [-m mtu]";

/// Most receives one end keeps posted (its CQ holds `rx_depth + 1` entries).
const MAX_RX_DEPTH: u64 = 8192;

/// What was wrong with the command line, then the usage line; exit 2.
fn usage(problem: &str) -> ! {
    eprintln!("rc_pingpong: {problem}\n{USAGE}");
    std::process::exit(2)
}

/// Reads the options as ibv_rc_pingpong does, refusing values it refuses
/// rather than clamping them.
fn parse() -> Opts {
    let mut o = Opts {
        size: 4096,
        iters: 1000,
        rx_depth: 500,
        mtu: Mtu::Mtu1024,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if !matches!(
            flag.as_str(),
            "-s" | "--size" | "-n" | "--iters" | "-r" | "--rx-depth" | "-m" | "--mtu"
        ) {
            usage(&format!("unknown option '{flag}'"));
        }
        let Some(v) = args.next() else {
            usage(&format!("{flag} needs a value"))
        };
        let n: u64 = v
            .parse()
            .unwrap_or_else(|_| usage(&format!("{flag} {v}: not a number")));
        match flag.as_str() {
            "-s" | "--size" => {
                if n == 0 {
                    usage("-s 0: the message size must be at least 1 byte");
                }
                o.size = usize::try_from(n)
                    .unwrap_or_else(|_| usage(&format!("-s {n}: too large for this machine")));
            }
            "-n" | "--iters" => {
                if n == 0 {
                    usage("-n 0: at least one iteration");
                }
                o.iters = n;
            }
            "-r" | "--rx-depth" => {
                if n == 0 || n > MAX_RX_DEPTH {
                    usage(&format!(
                        "-r {n}: the receive queue depth must be 1..={MAX_RX_DEPTH}"
                    ));
                }
                o.rx_depth = n as u32;
            }
            _ => {
                o.mtu = [
                    Mtu::Mtu256,
                    Mtu::Mtu512,
                    Mtu::Mtu1024,
                    Mtu::Mtu2048,
                    Mtu::Mtu4096,
                ]
                .into_iter()
                .find(|m| u64::from(m.bytes()) == n)
                .unwrap_or_else(|| {
                    usage(&format!(
                        "-m {n}: the MTU must be 256, 512, 1024, 2048 or 4096"
                    ))
                });
            }
        }
    }
    o
}

/// One end: device, PD, CQ, QP, and a buffer registered for both directions.
struct End {
    name: &'static str,
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr<Vec<u8>>,
    mac: [u8; 6],
}

fn end(name: &'static str, o: &Opts) -> verbs::Result<End> {
    let dev = devx::Device::emulated(name).map_err(|source| verbs::Error::Device {
        verb: "open_device",
        source,
    })?;
    let ctx = Context::open(&dev)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(o.rx_depth + 1)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))?;
    // Send buffer first, receive buffer after it.
    let mr = pd.reg_mr(vec![0u8; 2 * o.size], AccessFlags::LOCAL_WRITE)?;
    let mac = devx::sim::sim_device(name)
        .map(|s| s.identity().mac)
        .unwrap_or_default();
    Ok(End {
        name,
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
        mac,
    })
}

fn connect(me: &End, peer: &End, o: &Opts, my_psn: u32, peer_psn: u32) -> verbs::Result<()> {
    let gid = peer.ctx.query_gid(1, 1)?;
    let path = AhAttr::roce(1, gid.gid, 1, Some(peer.mac));
    me.qp.to_init(&InitAttr::new(1))?;
    me.qp
        .to_rtr(&RtrAttr::new(o.mtu, peer.qp.qpn(), peer_psn, path).min_rnr_timer(12))?;
    me.qp
        .to_rts(&RtsAttr::new(my_psn).timeout(14).retry_cnt(7).rnr_retry(7))
}

fn recv_sge(e: &End, o: &Opts) -> Sge {
    Sge::from_mr(&e.mr, o.size, o.size as u32)
}

fn fill(e: &End, o: &Opts, iter: u64) -> Result<(), String> {
    // The payload changes every iteration so a stale buffer cannot pass.
    let payload: Vec<u8> = (0..o.size)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(iter) as u8)
        .collect();
    // The send half of the registered buffer; no send is in flight from it.
    e.mr.write_at(0, &payload).map_err(|e| e.to_string())
}

fn check(e: &End, o: &Opts, iter: u64) -> Result<(), String> {
    // The receive half, complete once its CQE was polled.
    let got = e.mr.read_vec(o.size, o.size).map_err(|e| e.to_string())?;
    for (i, &got) in got.iter().enumerate() {
        let want = (i as u64).wrapping_mul(131).wrapping_add(iter) as u8;
        if got != want {
            return Err(format!(
                "{}: iteration {iter}, byte {i}: {got:#x}, expected {want:#x}",
                e.name
            ));
        }
    }
    Ok(())
}

/// Waits for `wr_id` on `me`'s CQ. The peer's CQ is drained meanwhile: a
/// failed SEND completes on the sender while the receiver waits for a
/// message that never comes, so an error on either side ends the run.
/// A good completion seen on the peer's CQ is counted in `peer_done`.
fn wait_one(me: &mut End, peer: &mut End, wr_id: u64, peer_done: &mut u32) -> Result<(), String> {
    let mut wc = [Wc::default(); 1];
    loop {
        if me.cq.poll(&mut wc) == 1 {
            return expect(me, &wc[0], wr_id);
        }
        if peer.cq.poll(&mut wc) == 1 {
            let w = wc[0];
            if !w.is_ok() {
                return Err(failed(peer, &w));
            }
            *peer_done += 1;
        }
        std::hint::spin_loop();
    }
}

fn failed(e: &End, w: &Wc) -> String {
    format!("{}: {w}", e.name)
}

/// A completion that must be the good one for `wr_id`.
fn expect(e: &End, w: &Wc, wr_id: u64) -> Result<(), String> {
    if !w.is_ok() {
        return Err(failed(e, w));
    }
    if w.wr_id != wr_id {
        return Err(format!("{}: wr_id {}, expected {wr_id}", e.name, w.wr_id));
    }
    Ok(())
}

/// One SEND from `tx` to `rx`, checked, with `rx`'s receive replenished.
fn one_way(tx: &mut End, rx: &mut End, o: &Opts, iter: u64) -> Result<(), String> {
    let err = |e: verbs::Error| e.to_string();
    fill(tx, o, iter)?;
    let sge = [Sge::from_mr(&tx.mr, 0, o.size as u32)];
    tx.qp
        .post_send(&SendWr::send(SEND_WRID, &sge))
        .map_err(err)?;
    // The SEND's own completion may arrive while waiting for the receive.
    let mut sends_done = 0;
    wait_one(rx, tx, RECV_WRID, &mut sends_done)?;
    check(rx, o, iter)?;
    let rsge = [recv_sge(rx, o)];
    rx.qp
        .post_recv(&RecvWr::new(RECV_WRID, &rsge))
        .map_err(err)?;
    if sends_done == 0 {
        let mut stray = 0;
        wait_one(tx, rx, SEND_WRID, &mut stray)?;
        if stray > 0 {
            return Err(format!("{}: a completion nobody asked for", rx.name));
        }
    }
    Ok(())
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

fn run() -> Result<(), String> {
    let o = parse();
    let err = |e: verbs::Error| e.to_string();
    let mut a = end("sim1", &o).map_err(err)?;
    let mut b = end("sim2", &o).map_err(err)?;
    connect(&a, &b, &o, 0x1111, 0x2222).map_err(err)?;
    connect(&b, &a, &o, 0x2222, 0x1111).map_err(err)?;
    for e in [&a, &b] {
        let g = e.ctx.query_gid(1, 1).map_err(err)?;
        println!(
            "  local address ({}):  QPN {:#08x}, PSN {:#08x}, GID {}",
            e.name,
            e.qp.qpn(),
            if e.name == "sim1" { 0x1111 } else { 0x2222 },
            g.gid.to_ipv6()
        );
    }
    for e in [&mut a, &mut b] {
        let sge = [recv_sge(e, &o)];
        for _ in 0..o.rx_depth {
            e.qp.post_recv(&RecvWr::new(RECV_WRID, &sge)).map_err(err)?;
        }
    }
    let start = Instant::now();
    for iter in 0..o.iters {
        // Ping a → b, then pong b → a.
        one_way(&mut a, &mut b, &o, iter)?;
        one_way(&mut b, &mut a, &o, iter)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        o.iters,
        secs * 1e6 / o.iters as f64
    );
    Ok(())
}

fn main() {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if let Err(e) = run() {
        eprintln!("rc_pingpong: {e}");
        std::process::exit(1);
    }
}
