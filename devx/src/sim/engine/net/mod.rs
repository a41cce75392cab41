//! The engine's side of the network port ([`crate::sim::wire::port`]):
//! which destination GIDs leave through it, what a WQE to such a GID
//! sends, and what a packet from it delivers.
//!
//! Every message is finally delivered by the same [`responder`] code as on
//! the in-memory link, so key, access, length, Q_Key checks, GRH and CQEs
//! are identical. UD: one packet per message. RC and UC: the IBA
//! transport in [`requester`] and [`responder`](self::responder), packets
//! built in [`segment`].

pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod segment;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use super::msg::{Msg, Op, Reply};
use super::queue::QpView;
use super::requester::Entry;
use super::{responder as deliver, Engine, Inner, Peer};
use crate::sim::fw::qp::{st, state};
use crate::sim::fw::state::State;
use crate::sim::wire::{
    Bth, BthOpcode, Counter, Deth, Headers, ImmDt, NetPort, Operation, Packet, PacketSink, Service,
};
use prm_layouts::CqeSyndrome;
use segment::Dest;

pub(crate) use requester::{Known, Status};

/// A map keyed by this device's QPNs.
pub(crate) type QpnMap<V> = crate::num_hash::NumMap<u32, V>;

/// The transport state of every QP talking over the network.
#[derive(Default)]
pub(crate) struct NetState {
    pub(crate) req: requester::Requesters,
    pub(crate) resp: responder::Responders,
}

/// The IP address a RoCE v2 GID names: IPv4 for `::ffff:a.b.c.d`, else
/// IPv6; `None` for the unspecified and link-local GIDs, which name no
/// routable address.
fn gid_ip(gid: &[u8; 16]) -> Option<IpAddr> {
    let v6 = Ipv6Addr::from(*gid);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(IpAddr::V4(v4));
    }
    let link_local = v6.segments()[0] & 0xffc0 == 0xfe80;
    (!v6.is_unspecified() && !link_local).then_some(IpAddr::V6(v6))
}

/// The GID of an IP address: IPv4-mapped for IPv4.
fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn service(s: u8) -> Option<Service> {
    match s {
        st::RC => Some(Service::Rc),
        st::UC => Some(Service::Uc),
        st::UD => Some(Service::Ud),
        _ => None,
    }
}

impl Engine {
    /// Gives the device its network port and starts its receive thread.
    pub(crate) fn attach_port(&self, name: &str, port: Arc<NetPort>) -> std::io::Result<()> {
        let sink: std::sync::Weak<dyn PacketSink> = self.me.clone();
        port.start(name, sink)?;
        // Set once, at device creation.
        let _ = self.net.set(port);
        Ok(())
    }

    /// The device's network port, if it has one.
    pub(crate) fn port(&self) -> Option<&Arc<NetPort>> {
        self.net.get()
    }

    /// A GID no device of this process has: reachable through the network
    /// port when it names a routable IPv4 or IPv6 address.
    pub(super) fn net_peer(&self, gid: &[u8; 16]) -> Option<Peer> {
        self.net.get()?;
        gid_ip(gid).map(Peer::Net)
    }

    /// Runs the send queue of a QP whose messages were answered.
    fn kick(&self, qpn: u32) {
        self.run_qp(
            qpn,
            Entry {
                page: None,
                by_timer: false,
            },
        );
    }
}

/// Sends the message `msg` of QP `v`'s WQE at send queue position `pos.0`
/// (`pos.1` basic blocks) to the device at `ip` (RC: queues it for
/// [`pump`]), or reports how it ended; the syndrome of a local error when
/// it cannot go.
#[allow(clippy::too_many_arguments)]
pub(crate) fn request(
    eng: &Engine,
    st: &State,
    inner: &mut Inner,
    v: &QpView,
    pos: (u16, u16),
    msg: &mut Msg,
    ip: IpAddr,
) -> Result<Status, CqeSyndrome> {
    let port = eng.port().ok_or(CqeSyndrome::LocalQpOpErr)?;
    let svc = service(v.service).ok_or(CqeSyndrome::LocalQpOpErr)?;
    if svc == Service::Ud {
        send_datagram(port, msg, ip)?;
        return Ok(Status::Done(Reply::Ack));
    }
    let q = &st.qp.peek(v.qpn).ok_or(CqeSyndrome::LocalQpOpErr)?.obj.qpc;
    let attrs = requester::Attrs {
        sq_psn: q.next_send_psn(),
        retry_count: q.retry_count(),
        ack_timeout: q.primary_address_path().ack_timeout(),
    };
    let dest = Dest {
        ip,
        qpn: msg.dst_qpn,
        service: svc,
        mtu: v.mtu_bytes() as usize,
    };
    Ok(requester::request(
        &mut inner.net.req,
        port,
        v,
        attrs,
        pos,
        msg,
        dest,
    ))
}

/// Sends what QP `qpn`'s RC window allows of the messages it queued.
pub(crate) fn pump(eng: &Engine, inner: &mut Inner, qpn: u32) {
    if let Some(port) = eng.port() {
        inner.net.req.pump(qpn, port);
    }
}

/// A UD message: one packet.
fn send_datagram(port: &NetPort, msg: &Msg, ip: IpAddr) -> Result<(), CqeSyndrome> {
    if msg.op != Op::Send {
        return Err(CqeSyndrome::LocalQpOpErr);
    }
    let op = if msg.imm.is_some() {
        Operation::SendOnlyImm
    } else {
        Operation::SendOnly
    };
    let opcode = BthOpcode::new(Service::Ud, op).map_err(|_| CqeSyndrome::LocalQpOpErr)?;
    // UD receivers do not look at the PSN; the port does not keep one.
    let mut bth = Bth::new(opcode.raw(), msg.dst_qpn, 0);
    bth.set_solicited(msg.solicited);
    let mut h = Headers::new(bth);
    h.deth = Some(Deth::new(msg.qkey, msg.src_qpn));
    h.imm = msg.imm.map(|imm| ImmDt { imm });
    port.send(ip, &h, &msg.data)
        .map_err(|_| CqeSyndrome::LocalLengthErr)
}

/// Whether an operation answers a request (it goes to the requester).
fn is_response(op: Operation) -> bool {
    use Operation::*;
    matches!(
        op,
        Acknowledge
            | AtomicAcknowledge
            | ReadResponseFirst
            | ReadResponseMiddle
            | ReadResponseLast
            | ReadResponseOnly
    )
}

impl Engine {
    fn receive_datagram(&self, port: &NetPort, p: &Packet<'_>, from: SocketAddr) {
        let Some(deth) = p.deth else {
            port.count(Counter::RxMalformed);
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
            let _ = deliver::deliver(st, &mut inner, &mut msg);
            inner.spare.push(msg.data);
        });
    }

    /// An RC or UC packet: a request for our responder or an answer for
    /// our requester.
    fn receive_connected(&self, port: &NetPort, p: &Packet<'_>, from: SocketAddr, svc: Service) {
        let response = is_response(p.opcode.operation());
        let kick = self.fw.with_mut(|st| {
            let mut inner = self.lock_inner();
            let qpn = p.bth.dest_qp();
            let Some(v) = inner.cache.qp_view(st, qpn) else {
                port.count(Counter::RxBadQpn);
                return None;
            };
            let ready = if response {
                v.state == state::RTS
            } else {
                matches!(v.state, state::RTR | state::RTS)
            };
            if service(v.service) != Some(svc) || !ready {
                port.count(Counter::RxBadQpn);
                return None;
            }
            if response {
                let run = requester::response(&mut inner.net.req, port, qpn, p);
                return run.then_some(qpn);
            }
            let back = Dest {
                ip: from.ip(),
                qpn: v.remote_qpn,
                service: svc,
                mtu: v.mtu_bytes() as usize,
            };
            let rq_psn = st.qp.peek(qpn).map_or(0, |e| e.obj.qpc.next_rcv_psn());
            let action = responder::request(&mut inner.net.resp, port, &v, rq_psn, p, &back);
            let responder::Action::Deliver(mut msg, first, dup) = action else {
                return None;
            };
            msg.src_qpn = v.remote_qpn;
            msg.dst_qpn = qpn;
            msg.src_gid = ip_gid(from.ip());
            msg.dst_gid = ip_gid(port.local_addr().ip());
            let reply = deliver::deliver(st, &mut inner, &mut msg);
            responder::delivered(
                &mut inner.net.resp,
                port,
                &v,
                &msg,
                (first, dup, p.bth.ack_req()),
                reply,
                &back,
            );
            inner.net.resp.recycle(msg.data);
            None
        });
        if let Some(q) = kick {
            self.kick(q);
        }
    }
}

impl PacketSink for Engine {
    fn receive(&self, port: &NetPort, p: &Packet<'_>, from: SocketAddr) {
        match p.opcode.service() {
            Service::Ud => self.receive_datagram(port, p, from),
            svc => self.receive_connected(port, p, from, svc),
        }
        self.arrived();
    }

    fn tick(&self, port: &NetPort) -> Option<Duration> {
        let mut kick = Vec::new();
        let next = self.fw.with_mut(|st| {
            let mut guard = self.lock_inner();
            let inner = &mut *guard;
            // QPs that left RTS (error, reset, destroyed) lose their
            // transport state; flushing is the engine's business.
            let cache = &mut inner.cache;
            let mut live = |qpn| {
                cache
                    .qp_view(st, qpn)
                    .is_some_and(|v| matches!(v.state, state::RTR | state::RTS))
            };
            inner.net.req.retain(&mut live);
            inner.net.resp.retain(&mut live);
            requester::tick(&mut inner.net.req, port, &mut kick)
        });
        for q in kick {
            self.kick(q);
        }
        next
    }
}
