//! RC between two processes over the network port: every operation with
//! its data checked, exactly-once in-order delivery across loss and
//! reordering, retry and RNR retry errors, all over loopback.

mod datapath_support;
mod wire_support;

use datapath_support::{access_all, caps, side, wait, Buf, Side};
use verbs::{
    AhAttr, Gid, InitAttr, Mtu, QpType, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus,
};
use wire_support::{addr, device_at, pattern, read_line, Peer, ROLE};

/// The RoCE v2 IPv4-mapped entry of the GID table.
const GID_V4: u8 = 3;
const BUF: usize = 64 * 1024;
const WRITE_AT: usize = 0;
const WRITE_IMM_AT: usize = 16 * 1024;
const READ_AT: usize = 32 * 1024;
const ATOMIC_AT: usize = 60 * 1024;

/// One end: an RC QP with a 64 KiB buffer every remote access may use.
struct End {
    s: Side,
    buf: Buf,
}

impl End {
    fn new() -> End {
        End::of(QpType::Rc)
    }

    /// The QP starts in INIT, so receives can be posted before the peer
    /// is known, as real programs do.
    fn of(t: QpType) -> End {
        let s = side(0, t, caps());
        let buf = Buf::all(&s.pd, BUF);
        let access = if t == QpType::Uc {
            verbs::AccessFlags::LOCAL_WRITE | verbs::AccessFlags::REMOTE_WRITE
        } else {
            access_all()
        };
        s.qp.to_init(&InitAttr::new(1).access(access)).unwrap();
        End { s, buf }
    }

    /// What the peer needs to connect and reach our buffer.
    fn describe(&self) -> String {
        let gid = self.s.ctx.query_gid(1, u16::from(GID_V4)).unwrap().gid;
        format!(
            "{} {} {} {} {}",
            self.s.qp.qpn(),
            hex::encode(gid.0),
            hex::encode(self.s.sim.identity().mac),
            self.buf.addr(),
            self.buf.mr.rkey()
        )
    }

    /// Connects to the peer `describe`d in `line`; returns its buffer's
    /// address and rkey.
    fn connect(&self, line: &str, timeout: u8, retry: u8, rnr_retry: u8) -> (u64, u32) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let qpn: u32 = w[0].parse().unwrap();
        let gid: [u8; 16] = hex::decode(w[1]).unwrap().try_into().unwrap();
        let mac: [u8; 6] = hex::decode(w[2]).unwrap().try_into().unwrap();
        let qp = &self.s.qp;
        let path = AhAttr::roce(1, Gid(gid), GID_V4, Some(mac));
        let mtu = std::env::var(MTU_VAR)
            .ok()
            .and_then(|m| m.parse().ok())
            .map_or(Mtu::Mtu1024, Mtu::at_most);
        if qp.qp_type() == QpType::Uc {
            qp.to_rtr(&RtrAttr::new(mtu, qpn, 0x10, path)).unwrap();
            qp.to_rts(&RtsAttr::new(0x10)).unwrap();
        } else {
            let rtr = RtrAttr::new(mtu, qpn, 0x10, path)
                .max_dest_rd_atomic(4)
                .min_rnr_timer(1);
            qp.to_rtr(&rtr).unwrap();
            let rts = RtsAttr::new(0x10)
                .timeout(timeout)
                .retry_cnt(retry)
                .rnr_retry(rnr_retry)
                .max_rd_atomic(4);
            qp.to_rts(&rts).unwrap();
        }
        (w[3].parse().unwrap(), w[4].parse().unwrap())
    }
}

/// The handshake every scenario starts with: the server describes itself,
/// the client connects and describes itself, the server connects.
fn handshake(
    test: &str,
    server_env: &[(String, String)],
    client_env: &[(String, String)],
) -> (Peer, Peer) {
    let mut srv = Peer::spawn(test, "server", server_env);
    let s = srv.expect("READY").join(" ");
    let mut cli = Peer::spawn(test, "client", client_env);
    cli.tell(&s);
    let c = cli.expect("READY").join(" ");
    srv.tell(&c);
    srv.expect("CONNECTED");
    cli.tell("go");
    (srv, cli)
}

const OPS: &str = "every_operation_between_two_processes";
/// The path MTU both ends use (bytes; 1024 when unset).
const MTU_VAR: &str = "DEVX_WIRE_TEST_MTU";

/// Every path MTU cuts and joins the same messages: the operations test
/// again at 256, 512, 2048 and 4096 bytes.
#[test]
fn every_path_mtu_segments_and_reassembles() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for (i, mtu) in [256u32, 512, 2048, 4096].into_iter().enumerate() {
        let env = |a| {
            let mut e = device_at(addr(a));
            e.push((MTU_VAR.to_string(), mtu.to_string()));
            e
        };
        let (mut srv, mut cli) = handshake(OPS, &env(61 + 2 * i as u8), &env(62 + 2 * i as u8));
        cli.expect("DONE");
        cli.finish();
        srv.tell("check");
        srv.expect("DONE");
        srv.finish();
    }
}

#[test]
fn every_operation_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return ops_server(),
        Ok("client") => return ops_client(),
        _ => {}
    }
    let pcap = std::env::temp_dir().join(format!("devx-wire-rc-{}.pcap", std::process::id()));
    let mut client_env = device_at(addr(2));
    client_env.push(("DEVX_SIM_PCAP_sim0".into(), pcap.display().to_string()));
    let (mut srv, mut cli) = handshake(OPS, &device_at(addr(1)), &client_env);
    cli.expect("DONE");
    cli.finish();
    srv.tell("check");
    srv.expect("DONE");
    srv.finish();
    let dissected = tshark_opcodes(&pcap);
    let _ = std::fs::remove_file(&pcap);
    let Some(ops) = dissected else {
        return;
    };
    // Both directions, every kind of packet the exchange needs.
    for want in [
        "RC RDMA Write First",
        "RC RDMA Write Last Immediate",
        "RC Send Last Immediate",
        "RC RDMA Read Request",
        "RC RDMA Read Response Last",
        "RC Fetch Add",
        "RC Compare Swap",
        "RC Atomic Acknowledge",
        "RC Acknowledge",
    ] {
        assert!(
            ops.iter().any(|o| o.contains(want)),
            "no '{want}' in {ops:?}"
        );
    }
}

/// tshark's one-line summary of every frame of a capture, after checking
/// that it dissects each as RoCE with no malformed packet; `None` (and a
/// message) when tshark is not installed.
fn tshark_opcodes(pcap: &std::path::Path) -> Option<Vec<String>> {
    // Protocols whose heuristics would claim our test payloads as theirs.
    let payload_protocols = [
        "smc",
        "smb_direct",
        "rpcordma",
        "nvme-rdma",
        "lnet",
        "iser",
        "infiniband_sdp",
    ];
    let run = std::process::Command::new("tshark")
        .arg("-n")
        .args(
            payload_protocols
                .iter()
                .flat_map(|p| ["--disable-protocol", p]),
        )
        .arg("-r")
        .arg(pcap)
        .args([
            "-T",
            "fields",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "_ws.col.Info",
        ])
        .args(["-e", "_ws.malformed", "-e", "_ws.expert.severity"])
        .output();
    let Ok(out) = run else {
        eprintln!("capture not dissected: tshark is not installed (apt-get install tshark)");
        return None;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(!lines.is_empty(), "empty capture");
    for l in &lines {
        let cols: Vec<&str> = l.split('\t').collect();
        assert_eq!(cols[0], "RRoCE", "not RoCE: {l}");
        assert!(cols[2..].iter().all(|c| c.is_empty()), "malformed: {l}");
    }
    Some(lines)
}

fn ops_server() {
    let mut e = End::new();
    // One receive for the WRITE_WITH_IMM, one for the SEND.
    let recv = Buf::all(&e.s.pd, 8192);
    for i in 0..2 {
        e.s.qp
            .post_recv(&RecvWr::new(i, &[recv.sge(0, 8192)]))
            .unwrap();
    }
    e.buf.write(READ_AT, &pattern(4, 6000));
    e.buf.write(ATOMIC_AT, &100u64.to_ne_bytes());
    println!("READY {}", e.describe());
    let peer = read_line();
    e.connect(&peer, 14, 7, 7);
    println!("CONNECTED");
    let mut cq = e.s.cq;
    let r = wait(&mut cq, 2);
    assert_eq!(
        (r[0].status, r[0].opcode, r[0].imm(), r[0].byte_len),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(77), 3000),
        "{r:?}"
    );
    assert_eq!(
        (r[1].status, r[1].opcode, r[1].imm(), r[1].byte_len),
        (WcStatus::Success, WcOpcode::Recv, Some(88), 5000),
        "{r:?}"
    );
    assert_eq!(recv.read(0, 5000), pattern(3, 5000));
    assert_eq!(read_line(), "check");
    assert_eq!(e.buf.read(WRITE_AT, 10_000), pattern(1, 10_000));
    assert_eq!(e.buf.read(WRITE_IMM_AT, 3000), pattern(2, 3000));
    assert_eq!(e.buf.read(ATOMIC_AT, 8), 0xdead_u64.to_ne_bytes());
    println!("DONE");
}

fn ops_client() {
    let mut e = End::new();
    let peer = read_line();
    let (raddr, rkey) = e.connect(&peer, 14, 7, 7);
    println!("READY {}", e.describe());
    assert_eq!(read_line(), "go");
    let local = Buf::all(&e.s.pd, BUF);
    local.write(0, &pattern(1, 10_000));
    local.write(16_384, &pattern(2, 3000));
    local.write(24_576, &pattern(3, 5000));
    let at = |off: usize| raddr + off as u64;
    let qp = &mut e.s.qp;
    qp.post_send(&SendWr::rdma_write(
        1,
        &[local.sge(0, 10_000)],
        at(WRITE_AT),
        rkey,
    ))
    .unwrap();
    qp.post_send(
        &SendWr::rdma_write(2, &[local.sge(16_384, 3000)], at(WRITE_IMM_AT), rkey).imm(77),
    )
    .unwrap();
    qp.post_send(&SendWr::send(3, &[local.sge(24_576, 5000)]).imm(88))
        .unwrap();
    qp.post_send(&SendWr::rdma_read(
        4,
        &[local.sge(32_768, 6000)],
        at(READ_AT),
        rkey,
    ))
    .unwrap();
    qp.post_send(&SendWr::fetch_add(
        5,
        &[local.sge(40_000, 8)],
        at(ATOMIC_AT),
        rkey,
        23,
    ))
    .unwrap();
    qp.post_send(&SendWr::comp_swap(
        6,
        &[local.sge(40_008, 8)],
        at(ATOMIC_AT),
        rkey,
        123,
        0xdead,
    ))
    .unwrap();
    let mut cq = e.s.cq;
    let s = wait(&mut cq, 6);
    let got: Vec<(u64, WcStatus)> = s.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, WcStatus)> = (1..=6).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(got, want);
    assert_eq!(s[3].byte_len, 6000);
    assert_eq!(local.read(32_768, 6000), pattern(4, 6000));
    assert_eq!(local.read(40_000, 8), 100u64.to_ne_bytes());
    assert_eq!(local.read(40_008, 8), 123u64.to_ne_bytes());
    println!("DONE");
}

const LOSSY: &str = "messages_arrive_once_in_order_across_loss_and_reordering";
const LOSSY_MESSAGES: u32 = 300;
const LOSSY_MAX: usize = 4000;
/// ACK timeout 4.096 µs × 2^10 ≈ 4 ms: losses recover quickly, and a
/// busy machine still gets 7 × 4 ms before a retry error.
const LOSSY_TIMEOUT: u8 = 10;

fn lossy_size(i: u32) -> usize {
    1 + (i as usize * 613) % LOSSY_MAX
}

fn faulty(a: std::net::Ipv4Addr, seed: u32) -> Vec<(String, String)> {
    let mut env = device_at(a);
    env.push((
        "DEVX_SIM_FAULT_sim0".into(),
        format!("drop=0.1,dup=0.05,reorder=0.1,seed={seed}"),
    ));
    env
}

/// 10% loss, 5% duplication and 10% reordering in both directions: every
/// SEND arrives exactly once, in order, and every WRITE lands.
#[test]
fn messages_arrive_once_in_order_across_loss_and_reordering() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return lossy_server(),
        Ok("client") => return lossy_client(),
        _ => {}
    }
    // DEVX_WIRE_TEST_SEED picks other fault sequences.
    let seed: u32 = std::env::var("DEVX_WIRE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let (mut srv, mut cli) = handshake(LOSSY, &faulty(addr(11), seed), &faulty(addr(12), seed + 1));
    cli.expect("DONE");
    cli.finish();
    srv.tell("check");
    let counters = srv.expect("DONE");
    srv.finish();
    // The faults did happen, and the transport saw them.
    let get = |name: &str| -> u64 {
        counters
            .iter()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {counters:?}"))
    };
    assert!(get("tx_fault_drops") > 0, "{counters:?}");
    assert!(
        get("rx_duplicates") + get("rx_sequence_errors") > 0,
        "{counters:?}"
    );
}

fn lossy_server() {
    let mut e = End::new();
    let slots = 32u32;
    let recv = Buf::all(&e.s.pd, slots as usize * LOSSY_MAX);
    let post = |qp: &mut verbs::Qp, i: u32| {
        let at = (i % slots) as usize * LOSSY_MAX;
        qp.post_recv(&RecvWr::new(
            u64::from(i),
            &[recv.sge(at, LOSSY_MAX as u32)],
        ))
        .unwrap();
    };
    for i in 0..slots {
        post(&mut e.s.qp, i);
    }
    println!("READY {}", e.describe());
    let peer = read_line();
    e.connect(&peer, LOSSY_TIMEOUT, 7, 7);
    println!("CONNECTED");
    for i in 0..LOSSY_MESSAGES {
        let wc = wait(&mut e.s.cq, 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc[0].wr_id, u64::from(i), "exactly once, in order");
        assert_eq!(wc[0].imm(), Some(i));
        assert_eq!(wc[0].byte_len as usize, lossy_size(i));
        let at = (i % slots) as usize * LOSSY_MAX;
        assert_eq!(recv.read(at, lossy_size(i)), pattern(i, lossy_size(i)));
        post(&mut e.s.qp, i + slots);
    }
    assert_eq!(read_line(), "check");
    assert_eq!(e.buf.read(WRITE_AT, 20_000), pattern(9, 20_000));
    assert_eq!(e.buf.read(ATOMIC_AT, 8), 1u64.to_ne_bytes());
    let c = e.s.sim.net_counters().unwrap();
    let line: Vec<String> = c.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("DONE {}", line.join(" "));
}

fn lossy_client() {
    let mut e = End::new();
    let peer = read_line();
    let (raddr, rkey) = e.connect(&peer, LOSSY_TIMEOUT, 7, 7);
    println!("READY {}", e.describe());
    assert_eq!(read_line(), "go");
    let local = Buf::all(&e.s.pd, 16 * LOSSY_MAX + 20_000);
    for i in 0..LOSSY_MESSAGES {
        let at = (i % 16) as usize * LOSSY_MAX;
        local.write(at, &pattern(i, lossy_size(i)));
        e.s.qp
            .post_send(&SendWr::send(u64::from(i), &[local.sge(at, lossy_size(i) as u32)]).imm(i))
            .unwrap();
        if i % 16 == 15 || i + 1 == LOSSY_MESSAGES {
            let n = i as usize % 16 + 1;
            let wc = wait(&mut e.s.cq, n);
            assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
        }
    }
    let at = 16 * LOSSY_MAX;
    local.write(at, &pattern(9, 20_000));
    e.s.qp
        .post_send(&SendWr::rdma_write(
            1000,
            &[local.sge(at, 20_000)],
            raddr + WRITE_AT as u64,
            rkey,
        ))
        .unwrap();
    let wc = wait(&mut e.s.cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    // And read back, also across the faults, with an atomic after it.
    let check = Buf::all(&e.s.pd, 20_008);
    e.s.qp
        .post_send(&SendWr::rdma_read(
            1001,
            &[check.sge(0, 20_000)],
            raddr + WRITE_AT as u64,
            rkey,
        ))
        .unwrap();
    e.s.qp
        .post_send(&SendWr::fetch_add(
            1002,
            &[check.sge(20_000, 8)],
            raddr + ATOMIC_AT as u64,
            rkey,
            1,
        ))
        .unwrap();
    let wc = wait(&mut e.s.cq, 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(check.read(0, 20_000), pattern(9, 20_000));
    // The target started at zero: the add ran once, however often it was sent.
    assert_eq!(check.read(20_000, 8), 0u64.to_ne_bytes());
    println!("DONE");
}

const KILLED: &str = "a_killed_peer_ends_in_retry_exceeded";

/// The peer process dies after connecting: the first of the WRITEs in
/// flight retries `retry_cnt` times, `timeout` apart, then completes with a
/// retry-exceeded error; the others are flushed.
#[test]
fn a_killed_peer_ends_in_retry_exceeded() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let e = End::new();
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 14, 7, 7);
            println!("CONNECTED");
            // Parked until killed.
            let _ = read_line();
            return;
        }
        Ok("client") => {
            let mut e = End::new();
            let peer = read_line();
            // 4.096 µs × 2^10 ≈ 4 ms per try, 3 retries.
            let (raddr, rkey) = e.connect(&peer, 10, 3, 7);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            assert_eq!(read_line(), "write");
            let local = Buf::all(&e.s.pd, 4096);
            // Three WRITEs in flight together.
            for id in 1..=3 {
                e.s.qp
                    .post_send(&SendWr::rdma_write(id, &[local.sge(0, 4096)], raddr, rkey))
                    .unwrap();
            }
            print_statuses(&mut e.s.cq, 3);
            return;
        }
        _ => {}
    }
    let (srv, mut cli) = handshake(KILLED, &device_at(addr(21)), &device_at(addr(22)));
    srv.kill();
    cli.tell("write");
    // The first fails, the rest are flushed, in order.
    assert_eq!(
        cli.expect("STATUS"),
        ["RetryExcErr", "WrFlushErr", "WrFlushErr", "1", "2", "3"]
    );
    cli.finish();
}

/// The client's side of the in-flight tests: waits for `n` completions
/// and prints their statuses, then their wr_ids, on a STATUS line.
fn print_statuses(cq: &mut verbs::Cq, n: usize) {
    let wc = wait(cq, n);
    let st: Vec<String> = wc.iter().map(|w| format!("{:?}", w.status)).collect();
    let ids: Vec<String> = wc.iter().map(|w| w.wr_id.to_string()).collect();
    println!("STATUS {} {}", st.join(" "), ids.join(" "));
}

/// Runs `test`'s server and client at `addrs` and checks the client's
/// STATUS line against `want`, then the server's memory.
fn expect_statuses(test: &str, addrs: (u8, u8), want: &[&str]) {
    let (mut srv, mut cli) = handshake(test, &device_at(addr(addrs.0)), &device_at(addr(addrs.1)));
    assert_eq!(cli.expect("STATUS"), want);
    cli.finish();
    srv.tell("check");
    srv.expect("DONE");
    srv.finish();
}

const NO_RECV: &str = "no_receive_posted_ends_in_rnr_retry_exceeded";

/// The peer posts no receive: a SEND is RNR-NAKed `rnr_retry` times, then
/// completes with an RNR-retry-exceeded error.
#[test]
fn no_receive_posted_ends_in_rnr_retry_exceeded() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let e = End::new();
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 14, 7, 7);
            println!("CONNECTED");
            assert_eq!(read_line(), "check");
            let c = e.s.sim.net_counters().unwrap();
            println!("DONE {}", c.get(devx::sim::wire::Counter::RxPackets));
            return;
        }
        Ok("client") => {
            let mut e = End::new();
            let peer = read_line();
            e.connect(&peer, 14, 7, 2);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            let local = Buf::all(&e.s.pd, 64);
            e.s.qp
                .post_send(&SendWr::send(1, &[local.sge(0, 64)]))
                .unwrap();
            let wc = wait(&mut e.s.cq, 1);
            println!("STATUS {:?}", wc[0].status);
            return;
        }
        _ => {}
    }
    let (mut srv, mut cli) = handshake(NO_RECV, &device_at(addr(31)), &device_at(addr(32)));
    assert_eq!(cli.expect("STATUS"), ["RnrRetryExcErr"]);
    cli.finish();
    srv.tell("check");
    // The first try and two retries reached the server.
    assert_eq!(srv.expect("DONE"), ["3"]);
    srv.finish();
}

const RNR_BEHIND: &str = "an_rnr_behind_messages_in_flight_fails_that_message_and_flushes_the_rest";

/// Three SENDs in flight to a peer with one receive posted: the first
/// lands, the second is RNR-NAKed until `rnr_retry` runs out, the third is
/// flushed, in order.
#[test]
fn an_rnr_behind_messages_in_flight_fails_that_message_and_flushes_the_rest() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let mut e = End::new();
            let recv = Buf::all(&e.s.pd, 64);
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 14, 7, 7);
            e.s.qp
                .post_recv(&RecvWr::new(7, &[recv.sge(0, 64)]))
                .unwrap();
            println!("CONNECTED");
            let wc = wait(&mut e.s.cq, 1);
            assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, 7));
            assert_eq!(recv.read(0, 64), pattern(1, 64));
            assert_eq!(read_line(), "check");
            println!("DONE");
            return;
        }
        Ok("client") => {
            let mut e = End::new();
            let peer = read_line();
            e.connect(&peer, 14, 7, 2);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            let local = Buf::all(&e.s.pd, 3 * 64);
            for id in 1..=3u32 {
                let at = (id as usize - 1) * 64;
                local.write(at, &pattern(id, 64));
                e.s.qp
                    .post_send(&SendWr::send(u64::from(id), &[local.sge(at, 64)]))
                    .unwrap();
            }
            print_statuses(&mut e.s.cq, 3);
            return;
        }
        _ => {}
    }
    expect_statuses(
        RNR_BEHIND,
        (81, 82),
        &["Success", "RnrRetryExcErr", "WrFlushErr", "1", "2", "3"],
    );
}

const NAK_BEHIND: &str = "a_nak_behind_messages_in_flight_fails_that_message_and_flushes_the_rest";

/// Three WRITEs in flight, the second with a wrong rkey: the first lands,
/// the second completes with a remote access error, the third is flushed
/// and never written.
#[test]
fn a_nak_behind_messages_in_flight_fails_that_message_and_flushes_the_rest() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let e = End::new();
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 14, 7, 7);
            println!("CONNECTED");
            assert_eq!(read_line(), "check");
            assert_eq!(e.buf.read(0, 64), pattern(1, 64));
            assert!(e.buf.read(4096, 64).iter().all(|b| *b == 0));
            assert!(e.buf.read(8192, 64).iter().all(|b| *b == 0));
            println!("DONE");
            return;
        }
        Ok("client") => {
            let mut e = End::new();
            let peer = read_line();
            let (raddr, rkey) = e.connect(&peer, 14, 7, 7);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            let local = Buf::all(&e.s.pd, 3 * 64);
            for id in 1..=3u32 {
                let at = (id as usize - 1) * 64;
                local.write(at, &pattern(id, 64));
                let key = if id == 2 { rkey ^ 0xff00 } else { rkey };
                let to = raddr + (id as u64 - 1) * 4096;
                e.s.qp
                    .post_send(&SendWr::rdma_write(
                        u64::from(id),
                        &[local.sge(at, 64)],
                        to,
                        key,
                    ))
                    .unwrap();
            }
            print_statuses(&mut e.s.cq, 3);
            return;
        }
        _ => {}
    }
    expect_statuses(
        NAK_BEHIND,
        (91, 92),
        &["Success", "RemAccessErr", "WrFlushErr", "1", "2", "3"],
    );
}

const FORGED: &str = "forged_packets_and_bad_keys_are_refused";

/// Packets from a third address (unknown QPN, PSN far ahead, bad ICRC,
/// truncated) and a WRITE with a wrong rkey from the connected peer: the
/// server's memory stays untouched, each refusal is counted, and the
/// requester sees a remote access error.
#[test]
fn forged_packets_and_bad_keys_are_refused() {
    use devx::sim::wire::{Bth, BthOpcode, Flow, Headers, Operation, Reth, Service};
    use std::net::{SocketAddr, UdpSocket};

    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let e = End::new();
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 14, 7, 7);
            println!("CONNECTED");
            assert_eq!(read_line(), "check");
            assert!(e.buf.read(0, BUF).iter().all(|b| *b == 0), "memory written");
            let c = e.s.sim.net_counters().unwrap();
            let line: Vec<String> = c.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("DONE {}", line.join(" "));
            return;
        }
        Ok("client") => {
            let mut e = End::new();
            let peer = read_line();
            let (raddr, rkey) = e.connect(&peer, 14, 7, 7);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            assert_eq!(read_line(), "write");
            let local = Buf::all(&e.s.pd, 4096);
            local.write(0, &[0xab; 4096]);
            e.s.qp
                .post_send(&SendWr::rdma_write(
                    1,
                    &[local.sge(0, 4096)],
                    raddr,
                    rkey ^ 0xff00,
                ))
                .unwrap();
            let wc = wait(&mut e.s.cq, 1);
            println!("STATUS {:?}", wc[0].status);
            return;
        }
        _ => {}
    }
    let mut srv = Peer::spawn(FORGED, "server", &device_at(addr(41)));
    let ready = srv.expect("READY");
    let mut cli = Peer::spawn(FORGED, "client", &device_at(addr(42)));
    cli.tell(&ready.join(" "));
    let c = cli.expect("READY").join(" ");
    srv.tell(&c);
    srv.expect("CONNECTED");
    cli.tell("go");

    let qpn: u32 = ready[0].parse().unwrap();
    let raddr: u64 = ready[3].parse().unwrap();
    let rkey: u32 = ready[4].parse().unwrap();
    let to = SocketAddr::new(addr(41).into(), 4791);
    let me = SocketAddr::new(addr(43).into(), 4791);
    let sock = UdpSocket::bind(me).unwrap();
    let flow = Flow::new(me, to);
    let write = |dest: u32, psn: u32| {
        let op = BthOpcode::new(Service::Rc, Operation::WriteOnly).unwrap();
        let mut h = Headers::new(Bth::new(op.raw(), dest, psn));
        h.reth = Some(Reth::new(raddr, rkey, 64));
        let mut out = vec![0u8; 256];
        let n = h.encode(&flow, &[0xee; 64], &mut out).unwrap();
        out.truncate(n);
        out
    };
    let mut bad_icrc = write(qpn, 0x10);
    bad_icrc[30] ^= 0x40;
    for d in [
        write(0xab_cdef, 0x10),
        write(qpn, 0x10 + 5000),
        bad_icrc,
        write(qpn, 0x10)[..20].to_vec(),
    ] {
        sock.send_to(&d, to).unwrap();
    }
    cli.tell("write");
    assert_eq!(cli.expect("STATUS"), ["RemAccessErr"]);
    cli.finish();
    srv.tell("check");
    let counters = srv.expect("DONE");
    srv.finish();
    for want in [
        "rx_bad_qpn=1",
        "rx_sequence_errors=1",
        "rx_icrc_errors=1",
        "rx_malformed=1",
    ] {
        assert!(counters.iter().any(|c| c == want), "{want}: {counters:?}");
    }
}

const UC: &str = "uc_sends_and_writes_between_two_processes";

/// UC: multi-packet SENDs and WRITEs (with immediates) land, in order.
#[test]
fn uc_sends_and_writes_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => {
            let mut e = End::of(QpType::Uc);
            let recv = Buf::all(&e.s.pd, 16 * 1024);
            for i in 0..2 {
                e.s.qp
                    .post_recv(&RecvWr::new(i, &[recv.sge(i as usize * 8192, 8192)]))
                    .unwrap();
            }
            println!("READY {}", e.describe());
            let peer = read_line();
            e.connect(&peer, 0, 0, 0);
            println!("CONNECTED");
            let r = wait(&mut e.s.cq, 2);
            assert_eq!(
                (r[0].status, r[0].opcode, r[0].imm(), r[0].byte_len),
                (WcStatus::Success, WcOpcode::Recv, Some(5), 5000),
                "{r:?}"
            );
            assert_eq!(
                (r[1].status, r[1].opcode, r[1].imm(), r[1].byte_len),
                (WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(6), 7000),
                "{r:?}"
            );
            assert_eq!(recv.read(0, 5000), pattern(5, 5000));
            assert_eq!(e.buf.read(WRITE_AT, 7000), pattern(6, 7000));
            println!("DONE");
            return;
        }
        Ok("client") => {
            let mut e = End::of(QpType::Uc);
            let peer = read_line();
            let (raddr, rkey) = e.connect(&peer, 0, 0, 0);
            println!("READY {}", e.describe());
            assert_eq!(read_line(), "go");
            let local = Buf::all(&e.s.pd, 16 * 1024);
            local.write(0, &pattern(5, 5000));
            local.write(8192, &pattern(6, 7000));
            let qp = &mut e.s.qp;
            qp.post_send(&SendWr::send(1, &[local.sge(0, 5000)]).imm(5))
                .unwrap();
            qp.post_send(
                &SendWr::rdma_write(2, &[local.sge(8192, 7000)], raddr + WRITE_AT as u64, rkey)
                    .imm(6),
            )
            .unwrap();
            let wc = wait(&mut e.s.cq, 2);
            assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
            println!("DONE");
            return;
        }
        _ => {}
    }
    let (mut srv, mut cli) = handshake(UC, &device_at(addr(51)), &device_at(addr(52)));
    cli.expect("DONE");
    cli.finish();
    srv.expect("DONE");
    srv.finish();
}

const EVENTS: &str = "a_program_that_stops_polling_to_wait_for_events_gets_every_message";
/// Messages the client sends, and how many of them the server polls for
/// before it waits on its completion channel instead.
const EVENT_MESSAGES: u32 = 24;
const POLLED_MESSAGES: u32 = 8;
const EVENT_LEN: usize = 1000;

/// The server's device receives on the polling thread while the program
/// polls; once it arms its CQ and blocks on the completion channel, the
/// device's own thread must take the messages again, and each raises its
/// event.
#[test]
fn a_program_that_stops_polling_to_wait_for_events_gets_every_message() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return events_server(),
        Ok("client") => return events_client(),
        _ => {}
    }
    let (mut srv, mut cli) = handshake(EVENTS, &device_at(addr(61)), &device_at(addr(62)));
    cli.expect("DONE");
    cli.finish();
    srv.expect("DONE");
    srv.finish();
}

fn events_server() {
    let (ctx, sim) = datapath_support::open(0);
    let ch = verbs::CompChannel::new(&ctx).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = verbs::Cq::create(&ctx, &verbs::CqInit::new(256).channel(&ch)).unwrap();
    let qp = pd
        .create_qp(&verbs::QpInit::new(QpType::Rc, &cq, &cq).cap(caps()))
        .unwrap();
    let buf = Buf::all(&pd, BUF);
    qp.to_init(&InitAttr::new(1).access(access_all())).unwrap();
    let mut e = End {
        s: Side {
            ctx,
            sim,
            pd,
            cq,
            qp,
        },
        buf,
    };
    for i in 0..EVENT_MESSAGES {
        let at = i as usize * EVENT_LEN;
        e.s.qp
            .post_recv(&RecvWr::new(
                u64::from(i),
                &[e.buf.sge(at, EVENT_LEN as u32)],
            ))
            .unwrap();
    }
    println!("READY {}", e.describe());
    let peer = read_line();
    e.connect(&peer, 14, 7, 7);
    println!("CONNECTED");
    let mut got = wait(&mut e.s.cq, POLLED_MESSAGES as usize);
    let mut wc = [verbs::Wc::default(); 4];
    while got.len() < EVENT_MESSAGES as usize {
        // ibv_get_cq_event's loop: arm, look once more, then block.
        e.s.cq.req_notify(false).unwrap();
        let k = e.s.cq.poll(&mut wc);
        if k > 0 {
            got.extend_from_slice(&wc[..k]);
            continue;
        }
        let mut p = libc::pollfd {
            fd: ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let step_ms = wire_support::STEP.as_millis() as i32;
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, step_ms) };
        assert_eq!(ready, 1, "no completion event, {} messages in", got.len());
        assert_eq!(ch.get_cq_event().unwrap(), e.s.cq.cqn());
        e.s.cq.ack_events(1);
        let k = e.s.cq.poll(&mut wc);
        got.extend_from_slice(&wc[..k]);
    }
    for (i, w) in got.iter().enumerate() {
        assert_eq!(
            (w.status, w.opcode, w.wr_id, w.byte_len),
            (
                WcStatus::Success,
                WcOpcode::Recv,
                i as u64,
                EVENT_LEN as u32
            ),
            "{got:?}"
        );
        let at = i * EVENT_LEN;
        assert_eq!(e.buf.read(at, EVENT_LEN), pattern(i as u32, EVENT_LEN));
    }
    println!("DONE");
}

fn events_client() {
    let mut e = End::new();
    let peer = read_line();
    e.connect(&peer, 14, 7, 7);
    println!("READY {}", e.describe());
    assert_eq!(read_line(), "go");
    for i in 0..EVENT_MESSAGES {
        let at = i as usize * EVENT_LEN;
        e.buf.write(at, &pattern(i, EVENT_LEN));
        e.s.qp
            .post_send(&SendWr::send(
                u64::from(i),
                &[e.buf.sge(at, EVENT_LEN as u32)],
            ))
            .unwrap();
        let wc = wait(&mut e.s.cq, 1);
        assert_eq!(
            (wc[0].status, wc[0].wr_id),
            (WcStatus::Success, u64::from(i))
        );
        // Past the polled messages, give the server time to block on its
        // channel before the next one arrives.
        if i + 1 >= POLLED_MESSAGES {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    println!("DONE");
}
