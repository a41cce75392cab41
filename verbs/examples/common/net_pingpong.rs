//! What `rc_pingpong_net` and `ud_pingpong_net` share, as ibv_rc_pingpong
//! and ibv_ud_pingpong share rdma-core's pingpong.c: options, the address
//! line swapped over TCP, the buffer pattern, waiting for one completion,
//! opening an emulated device with a network address, the result lines.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use verbs::{AccessFlags, Context, Cq, Gid, Mr, Mtu, Pd, Qp, QpCap, QpInit, QpType, Wc};

/// GID table index of the RoCE v2 IPv4-mapped entry.
pub const GID_INDEX: u8 = 3;
pub const RECV_WRID: u64 = 1;
pub const SEND_WRID: u64 = 2;
/// How long one completion, or the client's wait for the server, may take.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct Opts {
    pub port: u16,
    pub dev: String,
    pub size: usize,
    pub iters: u64,
    pub rx_depth: u32,
    pub mtu: Mtu,
    pub addr: Option<String>,
    pub pcap: Option<String>,
    pub server: Option<String>,
}

impl Opts {
    /// The command line, as ibv_*_pingpong reads it; out-of-range values
    /// are refused with the reason.
    pub fn parse(program: &str, default_size: usize) -> Result<Opts, String> {
        let usage = format!(
            "usage: {program} [-p tcp_port] [-d dev] [-s size] [-n iters] [-r rx_depth] \
             [-m mtu] [-a device_address] [-w capture.pcap] [server_host]"
        );
        let mut o = Opts {
            port: 18515,
            dev: "sim0".into(),
            size: default_size,
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
            let Some(v) = args.next() else {
                return Err(format!("{flag} needs a value\n{usage}"));
            };
            let n = |lo: u64, hi: u64| -> Result<u64, String> {
                match v.parse::<u64>() {
                    Ok(x) if (lo..=hi).contains(&x) => Ok(x),
                    _ => Err(format!("{flag} {v}: expected a number in {lo}..={hi}")),
                }
            };
            match flag.as_str() {
                "-p" | "--port" => o.port = n(1, 65535)? as u16,
                "-d" | "--ib-dev" => o.dev = v.clone(),
                "-s" | "--size" => o.size = n(1, 1 << 30)? as usize,
                "-n" | "--iters" => o.iters = n(1, u64::from(u32::MAX))?,
                "-r" | "--rx-depth" => o.rx_depth = n(1, 8192)? as u32,
                "-m" | "--mtu" => {
                    let bytes = n(256, 4096)? as u32;
                    o.mtu = Mtu::at_most(bytes);
                    if o.mtu.bytes() != bytes {
                        return Err(format!("-m {v}: the MTU is 256, 512, 1024, 2048 or 4096"));
                    }
                }
                "-a" | "--addr" => o.addr = Some(v),
                "-w" | "--pcap" => o.pcap = Some(v),
                _ => return Err(format!("unknown option {flag}\n{usage}")),
            }
        }
        Ok(o)
    }

    pub fn client(&self) -> bool {
        self.server.is_some()
    }
}

/// What one side tells the other: ibv_*_pingpong's `LID:QPN:PSN:GID`
/// message (LID 0 on RoCE), so either side may be rdma-core's own program
/// (run on the preload library's emulated device).
pub struct Dest {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
}

/// The message's size: `sizeof "0000:000000:000000:" + 32 hex digits`,
/// its NUL included.
const MSG_LEN: usize = 52;
/// The client's last word, NUL included.
const DONE: &[u8; 5] = b"done\0";
/// What ibv_*_pingpong sends: its buffer, set to this byte.
const IBV_PAYLOAD: u8 = 0x7b;
/// The message carries no MAC. The emulated link routes by GID; the
/// loopback neighbour's all-zero MAC is what the kernel resolves for 127/8.
pub const PEER_MAC: [u8; 6] = [0; 6];

impl Dest {
    fn message(&self) -> [u8; MSG_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            0,
            self.qpn,
            self.psn,
            hex::encode(self.gid)
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
            gid: hex::decode(gid)
                .ok()
                .and_then(|g| g.try_into().ok())
                .ok_or_else(bad)?,
        })
    }
}

/// Swaps addresses with the peer over TCP as ibv_*_pingpong does: the
/// client connects (retrying while the server starts), writes, reads,
/// connects its QP and says "done"; the server accepts, reads, connects
/// its QP (so the client's first message finds it ready), writes and
/// waits for "done".
pub fn exchange(
    o: &Opts,
    me: &Dest,
    connect_qp: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let io = |e: std::io::Error| format!("TCP exchange: {e}");
    let mut stream = match &o.server {
        Some(host) => {
            let deadline = Instant::now() + WAIT;
            loop {
                match TcpStream::connect((host.as_str(), o.port)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() > deadline => return Err(io(e)),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        None => {
            let host = o.addr.as_deref().unwrap_or("127.0.0.1");
            let l = TcpListener::bind((host, o.port)).map_err(io)?;
            l.accept().map_err(io)?.0
        }
    };
    stream.set_read_timeout(Some(WAIT)).map_err(io)?;
    let mut msg = [0u8; MSG_LEN];
    if o.client() {
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

/// Whether the `size` bytes at `at` hold what ibv_*_pingpong sends (its
/// buffer's first byte of each page may be zero).
pub fn is_ibv_payload(mr: &Mr<Vec<u8>>, at: usize, size: usize) -> bool {
    mr.read_vec(at, size).is_ok_and(|got| {
        got.iter()
            .enumerate()
            .all(|(i, &b)| b == IBV_PAYLOAD || (b == 0 && i % 4096 == 0))
    })
}

fn pattern(size: usize, iter: u64) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(iter) as u8)
        .collect()
}

/// Fills the send half (`at`, `size` bytes) with iteration `iter`'s bytes.
pub fn fill(mr: &Mr<Vec<u8>>, at: usize, size: usize, iter: u64) -> Result<(), String> {
    mr.write_at(at, &pattern(size, iter))
        .map_err(|e| e.to_string())
}

/// Checks the `size` bytes at `at` against iteration `iter`'s.
pub fn check(mr: &Mr<Vec<u8>>, at: usize, size: usize, iter: u64) -> Result<(), String> {
    let got = mr.read_vec(at, size).map_err(|e| e.to_string())?;
    let want = pattern(size, iter);
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "iteration {iter}, byte {i}: {:#x}, expected {:#x}",
            got[i], want[i]
        )),
    }
}

/// Waits for the completion of `wr_id`; any error completion ends the run
/// with its status by name.
pub fn wait_one(cq: &mut Cq, wr_id: u64) -> Result<Wc, String> {
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
            return Ok(w);
        }
        if Instant::now() > deadline {
            return Err(format!("no completion for wr_id {wr_id} within {WAIT:?}"));
        }
        std::hint::spin_loop();
    }
}

/// The emulated device `o.dev` with its network address (from `-a` or the
/// environment), opened, with its address.
fn open(o: &Opts) -> Result<(Context, String), String> {
    // Before the device is first opened: it reads its address then.
    if let Some(a) = &o.addr {
        std::env::set_var(format!("DEVX_SIM_ADDR_{}", o.dev), a);
    }
    if let Some(p) = &o.pcap {
        std::env::set_var(format!("DEVX_SIM_PCAP_{}", o.dev), p);
    }
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
    let ctx = Context::open(&dev).map_err(|e| e.to_string())?;
    Ok((ctx, local.to_string()))
}

/// One side's objects: ibv_*_pingpong's context, PD, CQ, QP and buffer,
/// and the address line it tells the peer.
pub struct Side {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr<Vec<u8>>,
    pub me: Dest,
}

/// Opens the device and makes a `qp_type` QP (one send, `rx_depth`
/// receives) and a `buf_len`-byte buffer; prints the local address.
pub fn side(o: &Opts, qp_type: QpType, buf_len: usize) -> Result<Side, String> {
    let err = |e: verbs::Error| e.to_string();
    let (ctx, local) = open(o)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let cq = ctx.create_cq(o.rx_depth + 1).map_err(err)?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit::new(qp_type, &cq, &cq).cap(cap))
        .map_err(err)?;
    let mr = pd
        .reg_mr(vec![0u8; buf_len], AccessFlags::LOCAL_WRITE)
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
    Ok(Side {
        ctx,
        pd,
        cq,
        qp,
        mr,
        me,
    })
}

/// Prints the peer's address line.
pub fn print_remote(peer: &Dest) {
    println!(
        "  remote address: QPN {:#08x}, PSN {:#08x}, GID {}",
        peer.qpn,
        peer.psn,
        Gid(peer.gid).to_ipv6()
    );
}

/// ibv_*_pingpong's closing lines.
pub fn report(bytes: u64, iters: u64, start: Instant) {
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{iters} iters in {secs:.2} seconds = {:.2} usec/iter",
        secs * 1e6 / iters as f64
    );
}
