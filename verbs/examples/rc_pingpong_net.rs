//! ibv_rc_pingpong between two processes: each opens an emulated ConnectX
//! with a network address, they swap LID, QPN, PSN and GID over TCP exactly
//! as ibv_rc_pingpong does (so either side may be ibv_rc_pingpong itself,
//! run on the preload library's emulated device), then bounce SENDs over
//! RoCEv2, every byte checked, unless the peer sends ibv_rc_pingpong's own
//! payload (as its client does; its server echoes what it receives).
//!
//! server: cargo run -p verbs --example rc_pingpong_net -- -a 127.0.0.2
//! client: cargo run -p verbs --example rc_pingpong_net -- -a 127.0.0.3 127.0.0.2
//!
//! `-a` gives the device its address (`DEVX_SIM_ADDR_<dev>`), `-w file`
//! captures what it sends and receives (`DEVX_SIM_PCAP_<dev>`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use verbs::{
    AccessFlags, AhAttr, Context, Cq, Gid, InitAttr, Mr, Mtu, Qp, QpCap, QpInit, QpType, RecvWr,
    RtrAttr, RtsAttr, SendWr, Sge, Wc,
};

/// GID table index of the RoCE v2 IPv4-mapped entry.
const GID_INDEX: u8 = 3;
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// How long one completion may take before the run gives up.
const WAIT: Duration = Duration::from_secs(10);

struct Opts {
    port: u16,
    dev: String,
    size: usize,
    iters: u64,
    rx_depth: u32,
    mtu: Mtu,
    addr: Option<String>,
    pcap: Option<String>,
    server: Option<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: rc_pingpong_net [-p tcp_port] [-d dev] [-s size] [-n iters] [-r rx_depth] \
         [-m mtu] [-a device_address] [-w capture.pcap] [server_host]"
    );
    std::process::exit(2)
}

fn parse() -> Opts {
    let mut o = Opts {
        port: 18515,
        dev: "sim0".into(),
        size: 4096,
        iters: 1000,
        rx_depth: 500,
        mtu: Mtu::Mtu1024,
        addr: None,
        pcap: None,
        server: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if !flag.starts_with('-') {
            o.server = Some(flag);
            continue;
        }
        let Some(v) = args.next() else { usage() };
        let n = || -> u64 { v.parse().unwrap_or_else(|_| usage()) };
        match flag.as_str() {
            "-p" | "--port" => o.port = u16::try_from(n()).unwrap_or_else(|_| usage()),
            "-d" | "--ib-dev" => o.dev = v.clone(),
            "-s" | "--size" => o.size = n().max(1) as usize,
            "-n" | "--iters" => o.iters = n().max(1),
            "-r" | "--rx-depth" => o.rx_depth = n().clamp(1, 8192) as u32,
            "-m" | "--mtu" => o.mtu = Mtu::at_most(n() as u32),
            "-a" | "--addr" => o.addr = Some(v),
            "-w" | "--pcap" => o.pcap = Some(v),
            _ => usage(),
        }
    }
    o
}

/// What one side tells the other: ibv_rc_pingpong's `LID:QPN:PSN:GID`
/// message (LID 0 on RoCE).
struct Dest {
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
}

/// ibv_rc_pingpong's message size: `sizeof "0000:000000:000000:" + 32 hex
/// digits`, its NUL included.
const MSG_LEN: usize = 52;
/// The client's last word, NUL included.
const DONE: &[u8; 5] = b"done\0";
/// What ibv_rc_pingpong sends: its buffer, set to this byte (page starts
/// zeroed with `-c`).
const IBV_PAYLOAD: u8 = 0x7b;

impl Dest {
    fn message(&self) -> [u8; MSG_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            0,
            self.qpn,
            self.psn,
            hex(&self.gid)
        );
        let mut m = [0u8; MSG_LEN];
        m[..text.len()].copy_from_slice(text.as_bytes());
        m
    }

    fn parse(m: &[u8]) -> Result<Dest, String> {
        let s = String::from_utf8_lossy(m);
        let s = s.trim_end_matches('\0');
        let bad = || format!("bad peer address message '{s}'");
        let f: Vec<&str> = s.split(':').collect();
        let [_, qpn, psn, gid] = f[..] else {
            return Err(bad());
        };
        let num = |x: &str| u32::from_str_radix(x, 16).map_err(|_| bad());
        Ok(Dest {
            qpn: num(qpn)?,
            psn: num(psn)?,
            gid: unhex(gid).ok_or_else(bad)?,
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    if s.len() != 2 * N {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Swaps addresses with the peer over TCP as ibv_rc_pingpong does: the
/// client connects, writes, reads, connects its QP and says "done"; the
/// server accepts, reads, connects its QP (so the client's first SEND finds
/// it ready), writes and waits for "done".
fn exchange(
    o: &Opts,
    me: &Dest,
    connect_qp: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let io = |e: std::io::Error| format!("TCP exchange: {e}");
    let mut stream = match &o.server {
        Some(host) => TcpStream::connect((host.as_str(), o.port)).map_err(io)?,
        None => {
            let host = o.addr.as_deref().unwrap_or("127.0.0.1");
            let l = TcpListener::bind((host, o.port)).map_err(io)?;
            l.accept().map_err(io)?.0
        }
    };
    stream.set_read_timeout(Some(WAIT)).map_err(io)?;
    let mut msg = [0u8; MSG_LEN];
    if o.server.is_some() {
        stream.write_all(&me.message()).map_err(io)?;
        stream.read_exact(&mut msg).map_err(io)?;
        let peer = Dest::parse(&msg)?;
        connect_qp(&peer)?;
        stream.write_all(DONE).map_err(io)?;
        Ok(peer)
    } else {
        stream.read_exact(&mut msg).map_err(io)?;
        let peer = Dest::parse(&msg)?;
        connect_qp(&peer)?;
        stream.write_all(&me.message()).map_err(io)?;
        let mut done = [0u8; DONE.len()];
        stream.read_exact(&mut done).map_err(io)?;
        Ok(peer)
    }
}

fn fill(mr: &Mr<Vec<u8>>, size: usize, iter: u64) {
    let base = mr.addr() as *mut u8;
    for i in 0..size {
        let b = (i as u64).wrapping_mul(131).wrapping_add(iter) as u8;
        // SAFETY: the send half of the registered buffer; no send is in
        // flight from it while it is refilled.
        unsafe { base.add(i).write(b) };
    }
}

fn check(mr: &Mr<Vec<u8>>, size: usize, iter: u64) -> Result<(), String> {
    let base = mr.addr() as *const u8;
    for i in 0..size {
        let want = (i as u64).wrapping_mul(131).wrapping_add(iter) as u8;
        // SAFETY: the receive half, completed (its CQE was polled).
        let got = unsafe { base.add(size + i).read_volatile() };
        if got != want {
            return Err(format!(
                "iteration {iter}, byte {i}: {got:#x}, expected {want:#x}"
            ));
        }
    }
    Ok(())
}

/// Whether the received half holds what ibv_rc_pingpong sends.
fn is_ibv_payload(mr: &Mr<Vec<u8>>, size: usize) -> bool {
    let base = mr.addr() as *const u8;
    (0..size).all(|i| {
        // SAFETY: the receive half, completed (its CQE was polled).
        let b = unsafe { base.add(size + i).read_volatile() };
        b == IBV_PAYLOAD || (b == 0 && i % 4096 == 0)
    })
}

fn wait_one(cq: &mut Cq, wr_id: u64) -> Result<(), String> {
    let mut wc = [Wc::default(); 1];
    let deadline = Instant::now() + WAIT;
    loop {
        if cq.poll(&mut wc) == 1 {
            let w = wc[0];
            if !w.is_ok() {
                return Err(format!("{w}"));
            }
            if w.wr_id != wr_id {
                return Err(format!("wr_id {}, expected {wr_id}", w.wr_id));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("no completion for wr_id {wr_id} within {WAIT:?}"));
        }
        std::hint::spin_loop();
    }
}

fn connect(qp: &Qp, o: &Opts, my_psn: u32, peer: &Dest) -> verbs::Result<()> {
    // The message carries no MAC. The emulated link routes by GID; the
    // loopback neighbour's all-zero MAC is what the kernel would resolve
    // for these 127/8 addresses.
    let path = AhAttr::roce(1, Gid(peer.gid), GID_INDEX, Some([0; 6]));
    qp.to_rtr(&RtrAttr::new(o.mtu, peer.qpn, peer.psn, path).min_rnr_timer(12))?;
    qp.to_rts(&RtsAttr::new(my_psn).timeout(14).retry_cnt(7).rnr_retry(7))
}

fn run() -> Result<(), String> {
    let o = parse();
    // Before the device is first opened: it reads its address then.
    if let Some(a) = &o.addr {
        std::env::set_var(format!("DEVX_SIM_ADDR_{}", o.dev), a);
    }
    if let Some(p) = &o.pcap {
        std::env::set_var(format!("DEVX_SIM_PCAP_{}", o.dev), p);
    }
    let err = |e: verbs::Error| e.to_string();
    let sim = devx::sim::sim_device(&o.dev).map_err(|e| e.to_string())?;
    if let Some(e) = sim.net_error() {
        return Err(e.to_string());
    }
    let Some(local) = sim.net_addr() else {
        return Err(format!(
            "{} has no network address: pass -a ADDRESS or set DEVX_SIM_ADDR_{}",
            o.dev, o.dev
        ));
    };
    let dev = devx::Device::emulated(&o.dev).map_err(|e| e.to_string())?;
    let ctx = Context::open(&dev).map_err(err)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let mut cq = ctx.create_cq(o.rx_depth + 1).map_err(err)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp = pd
        .create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))
        .map_err(err)?;
    let mr = pd
        .reg_mr(vec![0u8; 2 * o.size], AccessFlags::LOCAL_WRITE)
        .map_err(err)?;
    let gid = ctx.query_gid(1, u16::from(GID_INDEX)).map_err(err)?.gid;
    let me = Dest {
        qpn: qp.qpn(),
        psn: std::process::id() & 0xff_ffff,
        gid: gid.0,
    };
    println!(
        "  local address:  QPN {:#08x}, PSN {:#08x}, GID {}, UDP {local}",
        me.qpn,
        me.psn,
        gid.to_ipv6()
    );
    // Receives are posted before the peer is known, so the QP goes to INIT
    // first, as ibv_rc_pingpong does.
    qp.to_init(&InitAttr::new(1)).map_err(err)?;
    let recv = [Sge::from_mr(&mr, o.size, o.size as u32)];
    for _ in 0..o.rx_depth {
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
    }
    let peer = exchange(&o, &me, |peer| connect(&qp, &o, me.psn, peer).map_err(err))?;
    println!(
        "  remote address: QPN {:#08x}, PSN {:#08x}, GID {}",
        peer.qpn,
        peer.psn,
        Gid(peer.gid).to_ipv6()
    );
    let send = [Sge::from_mr(&mr, 0, o.size as u32)];
    let client = o.server.is_some();
    let mut peer_is_ibv = false;
    let start = Instant::now();
    for iter in 0..o.iters {
        if client {
            fill(&mr, o.size, iter);
            qp.post_send(&SendWr::send(SEND_WRID, &send)).map_err(err)?;
            wait_one(&mut cq, SEND_WRID)?;
        }
        wait_one(&mut cq, RECV_WRID)?;
        if iter == 0 && is_ibv_payload(&mr, o.size) {
            peer_is_ibv = true;
            println!("  peer sends ibv_rc_pingpong's payload: not checked");
        }
        if !peer_is_ibv {
            check(&mr, o.size, iter)?;
        }
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
        if !client {
            fill(&mr, o.size, iter);
            qp.post_send(&SendWr::send(SEND_WRID, &send)).map_err(err)?;
            wait_one(&mut cq, SEND_WRID)?;
        }
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
        eprintln!("rc_pingpong_net: {e}");
        std::process::exit(1);
    }
}
