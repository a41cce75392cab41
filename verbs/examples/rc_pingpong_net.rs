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

#[path = "common/net_pingpong.rs"]
mod net_pingpong;

use std::time::Instant;

use net_pingpong::{Opts, Side, GID_INDEX, PEER_MAC, RECV_WRID, SEND_WRID};
use verbs::{AhAttr, Gid, InitAttr, QpType, RecvWr, RtrAttr, RtsAttr, SendWr, Sge};

fn run(o: Opts) -> Result<(), String> {
    let err = |e: verbs::Error| e.to_string();
    // The send half first, the receive half after it.
    let Side {
        ctx: _ctx,
        pd: _pd,
        mut cq,
        mut qp,
        mr,
        me,
    } = net_pingpong::side(&o, QpType::Rc, 2 * o.size)?;
    // Receives are posted before the peer is known, so the QP goes to INIT
    // first, as ibv_rc_pingpong does.
    qp.to_init(&InitAttr::new(1)).map_err(err)?;
    let recv = [Sge::from_mr(&mr, o.size, o.size as u32)];
    for _ in 0..o.rx_depth {
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
    }
    let peer = net_pingpong::exchange(&o, &me, |peer| {
        let path = AhAttr::roce(1, Gid(peer.gid), GID_INDEX, Some(PEER_MAC));
        qp.to_rtr(&RtrAttr::new(o.mtu, peer.qpn, peer.psn, path).min_rnr_timer(12))
            .map_err(err)?;
        qp.to_rts(&RtsAttr::new(me.psn).timeout(14).retry_cnt(7).rnr_retry(7))
            .map_err(err)
    })?;
    net_pingpong::print_remote(&peer);
    let send = [Sge::from_mr(&mr, 0, o.size as u32)];
    let mut peer_is_ibv = false;
    let start = Instant::now();
    for iter in 0..o.iters {
        if o.client() {
            net_pingpong::fill(&mr, 0, o.size, iter)?;
            qp.post_send(&SendWr::send(SEND_WRID, &send)).map_err(err)?;
            net_pingpong::wait_one(&mut cq, SEND_WRID)?;
        }
        net_pingpong::wait_one(&mut cq, RECV_WRID)?;
        if iter == 0 && net_pingpong::is_ibv_payload(&mr, o.size, o.size) {
            peer_is_ibv = true;
            println!("  peer sends ibv_rc_pingpong's payload: not checked");
        }
        if !peer_is_ibv {
            net_pingpong::check(&mr, o.size, o.size, iter)?;
        }
        qp.post_recv(&RecvWr::new(RECV_WRID, &recv)).map_err(err)?;
        if !o.client() {
            net_pingpong::fill(&mr, 0, o.size, iter)?;
            qp.post_send(&SendWr::send(SEND_WRID, &send)).map_err(err)?;
            net_pingpong::wait_one(&mut cq, SEND_WRID)?;
        }
    }
    net_pingpong::report(o.size as u64 * o.iters * 2, o.iters, start);
    Ok(())
}

fn main() {
    let o = Opts::parse("rc_pingpong_net", 4096).unwrap_or_else(|e| {
        eprintln!("rc_pingpong_net: {e}");
        std::process::exit(2)
    });
    if let Err(e) = run(o) {
        eprintln!("rc_pingpong_net: {e}");
        std::process::exit(1);
    }
}
