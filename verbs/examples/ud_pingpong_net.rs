//! ibv_ud_pingpong between two processes: each opens an emulated ConnectX
//! with a network address, they swap LID, QPN, PSN and GID over TCP in
//! ibv_ud_pingpong's format, then
//! bounce UD datagrams over RoCEv2 through an address handle; every
//! datagram arrives behind its 40-byte GRH, from the peer's QPN, and every
//! byte is checked.
//!
//! server: cargo run -p verbs --example ud_pingpong_net -- -a 127.0.0.2
//! client: cargo run -p verbs --example ud_pingpong_net -- -a 127.0.0.3 127.0.0.2
//!
//! `-s` is bounded by the path MTU (`-m`, 1024 by default), as for
//! ibv_ud_pingpong: a UD message is one packet.

#[path = "common/net_pingpong.rs"]
mod net_pingpong;

use std::time::Instant;

use net_pingpong::{Opts, Side, GID_INDEX, PEER_MAC, RECV_WRID, SEND_WRID};
use verbs::{Ah, AhAttr, Gid, InitAttr, QpType, RecvWr, RtrAttr, RtsAttr, SendWr, Sge};

/// The global routing header in front of every received datagram.
const GRH: usize = 40;
/// ibv_ud_pingpong's Q_Key.
const QKEY: u32 = 0x1111_1111;

fn run(o: Opts) -> Result<(), String> {
    if o.size > o.mtu.bytes() as usize {
        return Err(format!(
            "-s {}: a UD message is one packet; the path MTU is {}",
            o.size,
            o.mtu.bytes()
        ));
    }
    let err = |e: verbs::Error| e.to_string();
    // The send half, then the receive half with room for the GRH.
    let Side {
        ctx: _ctx,
        pd,
        mut cq,
        mut qp,
        mr,
        me,
    } = net_pingpong::side(&o, QpType::Ud, 2 * o.size + GRH)?;
    qp.to_init(&InitAttr::new(1).qkey(QKEY)).map_err(err)?;
    qp.to_rtr(&RtrAttr::ud()).map_err(err)?;
    qp.to_rts(&RtsAttr::new(me.psn)).map_err(err)?;
    let recv = [Sge::from_mr(&mr, o.size, (o.size + GRH) as u32)];
    for _ in 0..o.rx_depth {
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
    }
    let mut ah = None;
    let peer = net_pingpong::exchange(&o, &me, |peer| {
        let path = AhAttr::roce(1, Gid(peer.gid), GID_INDEX, Some(PEER_MAC));
        ah = Some(Ah::create(&pd, &path).map_err(err)?);
        Ok(())
    })?;
    let ah = ah.ok_or("no address handle for the peer")?;
    net_pingpong::print_remote(&peer);
    let send = [Sge::from_mr(&mr, 0, o.size as u32)];
    let peer_is_ibv = std::cell::Cell::new(false);
    let received = |wc: verbs::Wc, iter: u64| -> Result<(), String> {
        if wc.src_qp != peer.qpn || wc.byte_len as usize != GRH + o.size {
            return Err(format!(
                "iteration {iter}: {} bytes from QPN {:#x}, expected {} from {:#x}",
                wc.byte_len,
                wc.src_qp,
                GRH + o.size,
                peer.qpn
            ));
        }
        if !peer_is_ibv.get() {
            if iter == 0 && net_pingpong::is_ibv_payload(&mr, o.size + GRH, o.size) {
                peer_is_ibv.set(true);
                println!("  peer sends ibv_ud_pingpong's payload: not checked");
                return Ok(());
            }
            net_pingpong::check(&mr, o.size + GRH, o.size, iter)?;
        }
        Ok(())
    };
    let start = Instant::now();
    for iter in 0..o.iters {
        if o.client() {
            net_pingpong::fill(&mr, 0, o.size, iter)?;
            qp.post_send(&SendWr::send(SEND_WRID, &send).ud(&ah, peer.qpn, QKEY))
                .map_err(err)?;
            net_pingpong::wait_one(&mut cq, SEND_WRID)?;
        }
        let wc = net_pingpong::wait_one(&mut cq, RECV_WRID)?;
        received(wc, iter)?;
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
        if !o.client() {
            net_pingpong::fill(&mr, 0, o.size, iter)?;
            qp.post_send(&SendWr::send(SEND_WRID, &send).ud(&ah, peer.qpn, QKEY))
                .map_err(err)?;
            net_pingpong::wait_one(&mut cq, SEND_WRID)?;
        }
    }
    net_pingpong::report(o.size as u64 * o.iters * 2, o.iters, start);
    Ok(())
}

fn main() {
    let o = Opts::parse("ud_pingpong_net", 1024).unwrap_or_else(|e| {
        eprintln!("ud_pingpong_net: {e}");
        std::process::exit(2)
    });
    if let Err(e) = run(o) {
        eprintln!("ud_pingpong_net: {e}");
        std::process::exit(1);
    }
}
