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
        let s = side(0, QpType::Rc, caps());
        let buf = Buf::all(&s.pd, BUF);
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
        qp.to_init(&InitAttr::new(1).access(access_all())).unwrap();
        let path = AhAttr::roce(1, Gid(gid), GID_V4, Some(mac));
        let rtr = RtrAttr::new(Mtu::Mtu1024, qpn, 0x10, path)
            .max_dest_rd_atomic(4)
            .min_rnr_timer(1);
        qp.to_rtr(&rtr).unwrap();
        let rts = RtsAttr::new(0x10)
            .timeout(timeout)
            .retry_cnt(retry)
            .rnr_retry(rnr_retry)
            .max_rd_atomic(4);
        qp.to_rts(&rts).unwrap();
        (w[3].parse().unwrap(), w[4].parse().unwrap())
    }
}

/// The handshake every scenario starts with: the server describes itself,
/// the client connects and describes itself, the server connects.
fn handshake(test: &str, server_env: &[(String, String)], client_env: &[(String, String)]) -> (Peer, Peer) {
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

#[test]
fn every_operation_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return ops_server(),
        Ok("client") => return ops_client(),
        _ => {}
    }
    let (mut srv, mut cli) = handshake(OPS, &device_at(addr(1)), &device_at(addr(2)));
    cli.expect("DONE");
    cli.finish();
    srv.tell("check");
    srv.expect("DONE");
    srv.finish();
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
    qp.post_send(&SendWr::rdma_write(1, &[local.sge(0, 10_000)], at(WRITE_AT), rkey))
        .unwrap();
    qp.post_send(
        &SendWr::rdma_write(2, &[local.sge(16_384, 3000)], at(WRITE_IMM_AT), rkey).imm(77),
    )
    .unwrap();
    qp.post_send(&SendWr::send(3, &[local.sge(24_576, 5000)]).imm(88))
        .unwrap();
    qp.post_send(&SendWr::rdma_read(4, &[local.sge(32_768, 6000)], at(READ_AT), rkey))
        .unwrap();
    qp.post_send(&SendWr::fetch_add(5, &[local.sge(40_000, 8)], at(ATOMIC_AT), rkey, 23))
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
