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

fn usage() -> ! {
    eprintln!("usage: rc_pingpong [-s size] [-n iters] [-r rx_depth] [-m mtu]");
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut o = Opts {
        size: 4096,
        iters: 1000,
        rx_depth: 500,
        mtu: Mtu::Mtu1024,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(v) = args.next() else { usage() };
        let n: u64 = v.parse().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "-s" | "--size" => o.size = n.max(1) as usize,
            "-n" | "--iters" => o.iters = n.max(1),
            "-r" | "--rx-depth" => o.rx_depth = n.clamp(1, 8192) as u32,
            "-m" | "--mtu" => o.mtu = Mtu::at_most(n as u32),
            _ => usage(),
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

fn wait_one(e: &mut End, wr_id: u64) -> Result<(), String> {
    let mut wc = [Wc::default(); 1];
    loop {
        if e.cq.poll(&mut wc) == 1 {
            let w = wc[0];
            if !w.is_ok() {
                return Err(format!(
                    "{}: wr_id {} failed: {} (vendor {:#x})",
                    e.name, w.wr_id, w.status, w.vendor_err
                ));
            }
            if w.wr_id != wr_id {
                return Err(format!("{}: wr_id {}, expected {wr_id}", e.name, w.wr_id));
            }
            return Ok(());
        }
        std::hint::spin_loop();
    }
}

/// One SEND from `tx` to `rx`, checked, with `rx`'s receive replenished.
fn one_way(tx: &mut End, rx: &mut End, o: &Opts, iter: u64) -> Result<(), String> {
    let err = |e: verbs::Error| e.to_string();
    fill(tx, o, iter)?;
    let sge = [Sge::from_mr(&tx.mr, 0, o.size as u32)];
    tx.qp
        .post_send(&SendWr::send(SEND_WRID, &sge))
        .map_err(err)?;
    wait_one(rx, RECV_WRID)?;
    check(rx, o, iter)?;
    let rsge = [recv_sge(rx, o)];
    rx.qp
        .post_recv(&RecvWr::new(RECV_WRID, &rsge))
        .map_err(err)?;
    wait_one(tx, SEND_WRID)
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
    if let Err(e) = run() {
        eprintln!("rc_pingpong: {e}");
        std::process::exit(1);
    }
}
