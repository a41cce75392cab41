//! UD between two processes over the network port: every datagram arrives
//! with its data, immediate, source QPN and GRH; forged and misaddressed
//! datagrams are refused and counted.

mod datapath_support;
mod wire_support;

use std::net::{SocketAddr, UdpSocket};

use datapath_support::{caps, side, wait, Buf};
use devx::sim::wire::{Bth, BthOpcode, Deth, Flow, Headers, Operation, Service};
use verbs::{Ah, AhAttr, Gid, InitAttr, RecvWr, RtrAttr, RtsAttr, SendWr, WcStatus};
use wire_support::{addr, device_at, pattern, read_line, Peer, ROLE};

const TEST: &str = "ud_datagrams_between_two_processes";
const MESSAGES: u32 = 32;
const QKEY: u32 = 0x1111_2222;
/// The RoCE v2 IPv4-mapped entry of the GID table.
const GID_V4: u16 = 3;
const GRH: usize = 40;

fn size(i: u32) -> usize {
    1 + (i as usize * 37) % 900
}

fn ud_side() -> datapath_support::Side {
    let s = side(0, verbs::QpType::Ud, caps());
    s.qp.to_init(&InitAttr::new(1).qkey(QKEY)).unwrap();
    s.qp.to_rtr(&RtrAttr::ud()).unwrap();
    s.qp.to_rts(&RtsAttr::new(0)).unwrap();
    s
}

/// Receives `MESSAGES` datagrams and checks every one.
fn receiver() {
    let mut s = ud_side();
    let bufs: Vec<Buf> = (0..MESSAGES).map(|_| Buf::all(&s.pd, 1024)).collect();
    for (i, b) in bufs.iter().enumerate() {
        s.qp.post_recv(&RecvWr::new(i as u64, &[b.sge(0, 1024)]))
            .unwrap();
    }
    let gid = s.ctx.query_gid(1, GID_V4).unwrap().gid;
    let mac = s.sim.identity().mac;
    println!(
        "READY {} {} {}",
        s.qp.qpn(),
        hex::encode(gid.0),
        hex::encode(mac)
    );
    let sender_qpn: u32 = read_line().parse().unwrap();
    let wcs = wait(&mut s.cq, MESSAGES as usize);
    for (i, wc) in wcs.iter().enumerate() {
        let i = i as u32;
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.wr_id, u64::from(i), "in order");
        assert_eq!(wc.imm(), Some(i));
        assert_eq!(wc.src_qp, sender_qpn);
        assert!(wc.grh);
        assert_eq!(wc.byte_len as usize, GRH + size(i));
        assert_eq!(bufs[i as usize].read(GRH, size(i)), pattern(i, size(i)));
    }
    let c = s.sim.net_counters().expect("device has a network port");
    let line: Vec<String> = c.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("COUNTERS {}", line.join(" "));
}

/// Sends `MESSAGES` datagrams to the receiver named on stdin.
fn sender() {
    let mut s = ud_side();
    let words = read_line();
    let mut w = words.split_whitespace();
    let qpn: u32 = w.next().unwrap().parse().unwrap();
    let gid: [u8; 16] = hex::decode(w.next().unwrap()).unwrap().try_into().unwrap();
    let mac: [u8; 6] = hex::decode(w.next().unwrap()).unwrap().try_into().unwrap();
    let path = AhAttr::roce(1, Gid(gid), GID_V4 as u8, Some(mac));
    let ah = Ah::create(&s.pd, &path).unwrap();
    let src = Buf::all(&s.pd, 1024);
    println!("QPN {}", s.qp.qpn());
    // The receiver learns our QPN before the first datagram leaves.
    assert_eq!(read_line(), "go");
    for i in 0..MESSAGES {
        src.write(0, &pattern(i, size(i)));
        s.qp.post_send(
            &SendWr::send(u64::from(i), &[src.sge(0, size(i) as u32)])
                .imm(i)
                .ud(&ah, qpn, QKEY),
        )
        .unwrap();
        let wc = wait(&mut s.cq, 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    }
    let c = s.sim.net_counters().expect("device has a network port");
    assert_eq!(
        c.get(devx::sim::wire::Counter::TxPackets),
        u64::from(MESSAGES)
    );
    println!("SENT");
}

/// Datagrams that must not reach the receiver's QP: each names the counter
/// that should count it.
fn forge(to: SocketAddr, qpn: u32) -> Vec<(&'static str, Vec<u8>)> {
    let sock_addr = SocketAddr::new(addr(3).into(), 4791);
    let flow = Flow::new(sock_addr, to);
    let ud = BthOpcode::new(Service::Ud, Operation::SendOnly).unwrap();
    let build = |opcode: BthOpcode, dest: u32, qkey: u32| {
        let mut h = Headers::new(Bth::new(opcode.raw(), dest, 0));
        if opcode.service() == Service::Ud {
            h.deth = Some(Deth::new(qkey, 7));
        }
        let mut out = vec![0u8; 128];
        let n = h.encode(&flow, b"forged!", &mut out).unwrap();
        out.truncate(n);
        out
    };
    let mut bad_icrc = build(ud, qpn, QKEY);
    bad_icrc[21] ^= 1;
    vec![
        ("rx_bad_qpn", build(ud, 0xab_cdef, QKEY)),
        ("rx_bad_qkey", build(ud, qpn, QKEY + 1)),
        ("rx_icrc_errors", bad_icrc),
        ("rx_malformed", build(ud, qpn, QKEY)[..9].to_vec()),
        // An RC packet to a UD QP: the QP is not of that transport.
        (
            "rx_bad_qpn",
            build(
                BthOpcode::new(Service::Rc, Operation::SendOnly).unwrap(),
                qpn,
                0,
            ),
        ),
    ]
}

#[test]
fn ud_datagrams_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("receiver") => return receiver(),
        Ok("sender") => return sender(),
        _ => {}
    }
    let mut rx = Peer::spawn(TEST, "receiver", &device_at(addr(1)));
    let ready = rx.expect("READY");
    let mut tx = Peer::spawn(TEST, "sender", &device_at(addr(2)));
    tx.tell(&ready.join(" "));
    let sender_qpn = tx.expect("QPN");
    rx.tell(&sender_qpn[0]);

    // Forged datagrams first, from a third loopback address: none may
    // take one of the receives posted for the real ones.
    let qpn: u32 = ready[0].parse().unwrap();
    let to = SocketAddr::new(addr(1).into(), 4791);
    let sock = UdpSocket::bind(SocketAddr::new(addr(3).into(), 4791)).unwrap();
    let forged = forge(to, qpn);
    for (_, d) in &forged {
        sock.send_to(d, to).unwrap();
    }

    tx.tell("go");
    tx.expect("SENT");
    tx.finish();
    let counters = rx.expect("COUNTERS");
    rx.finish();
    let get = |name: &str| -> u64 {
        counters
            .iter()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no counter {name} in {counters:?}"))
            .parse()
            .unwrap()
    };
    for (counter, _) in &forged {
        let want = forged.iter().filter(|(c, _)| c == counter).count() as u64;
        assert_eq!(get(counter), want, "{counter}: {counters:?}");
    }
    // Those that parsed and passed the ICRC check.
    assert_eq!(get("rx_packets"), u64::from(MESSAGES) + 3, "{counters:?}");
}
