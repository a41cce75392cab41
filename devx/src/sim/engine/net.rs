//! The engine's side of the network port ([`crate::sim::wire::port`]):
//! which destination GIDs leave through it, what a WQE to such a GID
//! sends, and what a packet from it delivers.
//!
//! UD travels over the network: one packet per message (BTH, DETH,
//! optional ImmDt), delivered by the same [`responder`] code as the
//! in-memory link, so Q_Key check, GRH and CQEs are identical. RC and UC
//! to a device in another process are not carried: such a WQE completes
//! with a local QP operation error and nothing is sent.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use super::cqe::syn;
use super::msg::{Msg, Op};
use super::queue::QpView;
use super::{responder, Engine, Peer};
use crate::sim::fw::qp::{st, state};
use crate::sim::wire::{
    Bth, BthOpcode, Counter, Deth, Headers, ImmDt, NetPort, Operation, Packet, PacketSink, Service,
};

/// The IPv4 address an IPv4-mapped GID names (`::ffff:a.b.c.d`).
fn gid_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    std::net::Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// The GID of an IP address: IPv4-mapped for IPv4.
fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl Engine {
    /// Gives the device its network port and starts its receive thread.
    pub fn attach_port(&self, name: &str, port: Arc<NetPort>) -> std::io::Result<()> {
        let sink: std::sync::Weak<dyn PacketSink> = self.me.clone();
        port.start(name, sink)?;
        // Set once, at device creation.
        let _ = self.net.set(port);
        Ok(())
    }

    /// The device's network port, if it has one.
    pub fn port(&self) -> Option<&Arc<NetPort>> {
        self.net.get()
    }

    /// A GID no device of this process has: reachable through the network
    /// port when it names an IPv4 address.
    pub(super) fn net_peer(&self, gid: &[u8; 16]) -> Option<Peer> {
        self.net.get()?;
        gid_ipv4(gid).map(|ip| Peer::Net(IpAddr::V4(ip)))
    }
}

/// Sends `msg` (built from a WQE of QP `v`) to the device at `ip`; the
/// syndrome of the local error when it cannot go.
pub fn send(eng: &Engine, v: &QpView, msg: &Msg, ip: IpAddr) -> Result<(), u8> {
    let Some(port) = eng.port() else {
        return Err(syn::LOCAL_QP_OP);
    };
    if v.service != st::UD || msg.op != Op::Send {
        return Err(syn::LOCAL_QP_OP);
    }
    let op = if msg.imm.is_some() {
        Operation::SendOnlyImm
    } else {
        Operation::SendOnly
    };
    let opcode = BthOpcode::new(Service::Ud, op).map_err(|_| syn::LOCAL_QP_OP)?;
    // UD receivers do not look at the PSN; the port does not keep one.
    let mut bth = Bth::new(opcode.raw(), msg.dst_qpn, 0);
    bth.set_solicited(msg.solicited);
    let mut h = Headers::new(bth);
    h.deth = Some(Deth::new(msg.qkey, msg.src_qpn));
    h.imm = msg.imm.map(|imm| ImmDt { imm });
    port.send(ip, &h, &msg.data).map_err(|_| syn::LOCAL_LENGTH)
}

impl PacketSink for Engine {
    fn receive(&self, port: &NetPort, p: &Packet<'_>, from: SocketAddr) {
        let (Service::Ud, Some(deth)) = (p.opcode.service(), p.deth) else {
            port.count(Counter::RxUnsupported);
            return;
        };
        self.fw.with_mut(|st| {
            let mut inner = self.lock_inner();
            let Some(v) = inner.cache.qp_view(st, p.bth.dest_qp()) else {
                port.count(Counter::RxBadQpn);
                return;
            };
            if v.service != st::UD || !matches!(v.state, state::RTR | state::RTS) {
                port.count(Counter::RxBadQpn);
                return;
            }
            if deth.qkey.get() != v.q_key {
                port.count(Counter::RxBadQkey);
                return;
            }
            let mut data = inner.spare.pop().unwrap_or_default();
            data.clear();
            data.extend_from_slice(p.payload);
            let mut msg = Msg::new(Op::Send, data);
            msg.service = st::UD;
            msg.imm = p.imm.map(|i| i.imm);
            msg.solicited = p.bth.solicited();
            msg.src_qpn = deth.src_qp();
            msg.dst_qpn = p.bth.dest_qp();
            msg.qkey = deth.qkey.get();
            msg.src_gid = ip_gid(from.ip());
            msg.dst_gid = ip_gid(port.local_addr().ip());
            // UD: a receive queue with no WQE drops the datagram.
            let _ = responder::deliver(st, &mut inner, &mut msg);
            inner.spare.push(msg.data);
        });
    }
}
