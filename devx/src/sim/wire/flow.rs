//! The IP and UDP headers around a RoCEv2 packet.
//!
//! The emulated device sends through an ordinary UDP socket, so the kernel,
//! not the device, writes the IP and UDP headers; yet the ICRC covers them
//! (masked). [`Flow::ip_udp`] builds exactly the headers Linux emits for a
//! datagram from an *unconnected* socket with `IP_MTU_DISCOVER` set to
//! `IP_PMTUDISC_DO`: IPv4 with no options, DF set and identification 0
//! (Linux uses 0 for DF datagrams of unconnected sockets), IPv6 with no
//! extension headers. Every other field the kernel may choose (TOS/traffic
//! class, flow label, TTL/hop limit, checksums) is masked out of the ICRC.

use std::net::{IpAddr, SocketAddr};

use super::error::WireError;

pub(crate) const IPV4_HEADER: usize = 20;
pub(crate) const IPV6_HEADER: usize = 40;
pub(crate) const UDP_HEADER: usize = 8;
/// The longest IP + UDP header pair.
pub(crate) const MAX_IP_UDP: usize = IPV6_HEADER + UDP_HEADER;
/// The RoCEv2 UDP destination port (IANA).
pub const ROCE_V2_PORT: u16 = 4791;
/// Linux's default TTL / hop limit.
pub(crate) const DEFAULT_TTL: u8 = 64;

const IPV4_VERSION_IHL: u8 = 4 << 4 | (IPV4_HEADER / 4) as u8;
const IPV6_VERSION: u8 = 6 << 4;
const IPV4_DONT_FRAGMENT: u16 = 1 << 14;
const IPPROTO_UDP: u8 = 17;

/// Offsets of the IP and UDP fields the headers are built from.
pub(crate) mod field {
    pub(crate) const V4_TOS: usize = 1;
    pub(crate) const V4_TOTAL_LEN: usize = 2;
    pub(crate) const V4_FLAGS: usize = 6;
    pub(crate) const V4_TTL: usize = 8;
    pub(crate) const V4_PROTOCOL: usize = 9;
    pub(crate) const V4_CHECKSUM: usize = 10;
    pub(crate) const V4_SRC: usize = 12;
    pub(crate) const V4_DST: usize = 16;
    pub(crate) const V6_TRAFFIC_FLOW: std::ops::Range<usize> = 0..4;
    pub(crate) const V6_PAYLOAD_LEN: usize = 4;
    pub(crate) const V6_NEXT_HEADER: usize = 6;
    pub(crate) const V6_HOP_LIMIT: usize = 7;
    pub(crate) const V6_SRC: usize = 8;
    pub(crate) const V6_DST: usize = 24;
    pub(crate) const UDP_SRC_PORT: usize = 0;
    pub(crate) const UDP_DST_PORT: usize = 2;
    pub(crate) const UDP_LEN: usize = 4;
    pub(crate) const UDP_CHECKSUM: usize = 6;
}

/// The UDP endpoints of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// An IP header followed by a UDP header, in a fixed buffer.
#[derive(Clone, Copy)]
pub(crate) struct IpUdp {
    bytes: [u8; MAX_IP_UDP],
    len: usize,
}

impl IpUdp {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Length of the IP header (the UDP header follows it).
    pub(crate) fn ip_len(&self) -> usize {
        self.len - UDP_HEADER
    }

    /// Fills in the UDP checksum over `payload` (the kernel does this on
    /// send; a capture wants it right).
    pub(crate) fn set_udp_checksum(&mut self, payload: &[u8]) {
        let ip = self.ip_len();
        let udp_len = UDP_HEADER + payload.len();
        let mut sum = Checksum::default();
        let (src, dst) = if ip == IPV4_HEADER {
            (
                field::V4_SRC..field::V4_SRC + 4,
                field::V4_DST..field::V4_DST + 4,
            )
        } else {
            (
                field::V6_SRC..field::V6_SRC + 16,
                field::V6_DST..field::V6_DST + 16,
            )
        };
        sum.add(&self.bytes[src]);
        sum.add(&self.bytes[dst]);
        sum.add(&[0, IPPROTO_UDP]);
        sum.add(&(udp_len as u32).to_be_bytes());
        let at = ip + field::UDP_CHECKSUM;
        self.bytes[at..at + 2].fill(0);
        sum.add(&self.bytes[ip..self.len]);
        sum.add(payload);
        let mut c = sum.finish();
        if c == 0 {
            // 0 means "no checksum" in UDP over IPv4 and is invalid in IPv6.
            c = u16::MAX;
        }
        self.bytes[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// The Internet checksum (RFC 1071), fed in pieces of even length except
/// the last.
#[derive(Default)]
struct Checksum(u64);

impl Checksum {
    fn add(&mut self, data: &[u8]) {
        let mut words = data.chunks_exact(2);
        for w in &mut words {
            self.0 += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [b] = words.remainder() {
            self.0 += u64::from(u16::from_be_bytes([*b, 0]));
        }
    }

    fn finish(self) -> u16 {
        let mut s = self.0;
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }
}

impl Flow {
    pub fn new(src: SocketAddr, dst: SocketAddr) -> Flow {
        Flow { src, dst }
    }

    /// The flow in the other direction.
    pub fn reversed(&self) -> Flow {
        Flow {
            src: self.dst,
            dst: self.src,
        }
    }

    /// The IP and UDP headers Linux puts before a `roce_len`-byte UDP
    /// payload of this flow (see the module doc), with an IPv4 header
    /// checksum and no UDP checksum. IPv4-mapped IPv6 addresses (as a
    /// dual-stack socket reports them) travel as IPv4.
    pub(crate) fn ip_udp(&self, roce_len: usize) -> Result<IpUdp, WireError> {
        let mut h = IpUdp {
            bytes: [0; MAX_IP_UDP],
            len: 0,
        };
        let udp_len = UDP_HEADER + roce_len;
        let b = &mut h.bytes;
        let ip = match (canonical(self.src.ip()), canonical(self.dst.ip())) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = IPV4_HEADER + udp_len;
                let total = u16::try_from(total).map_err(|_| WireError::TooLong(roce_len))?;
                b[0] = IPV4_VERSION_IHL;
                b[field::V4_TOTAL_LEN..][..2].copy_from_slice(&total.to_be_bytes());
                b[field::V4_FLAGS..][..2].copy_from_slice(&IPV4_DONT_FRAGMENT.to_be_bytes());
                b[field::V4_TTL] = DEFAULT_TTL;
                b[field::V4_PROTOCOL] = IPPROTO_UDP;
                b[field::V4_SRC..][..4].copy_from_slice(&s.octets());
                b[field::V4_DST..][..4].copy_from_slice(&d.octets());
                let mut sum = Checksum::default();
                sum.add(&b[..IPV4_HEADER]);
                let c = sum.finish();
                b[field::V4_CHECKSUM..][..2].copy_from_slice(&c.to_be_bytes());
                IPV4_HEADER
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let payload = u16::try_from(udp_len).map_err(|_| WireError::TooLong(roce_len))?;
                b[0] = IPV6_VERSION;
                b[field::V6_PAYLOAD_LEN..][..2].copy_from_slice(&payload.to_be_bytes());
                b[field::V6_NEXT_HEADER] = IPPROTO_UDP;
                b[field::V6_HOP_LIMIT] = DEFAULT_TTL;
                b[field::V6_SRC..][..16].copy_from_slice(&s.octets());
                b[field::V6_DST..][..16].copy_from_slice(&d.octets());
                IPV6_HEADER
            }
            _ => return Err(WireError::MixedFamilies),
        };
        // The IPv4 total length bounds the UDP length too.
        let udp_len = udp_len as u16;
        let u = &mut b[ip..ip + UDP_HEADER];
        u[field::UDP_SRC_PORT..][..2].copy_from_slice(&self.src.port().to_be_bytes());
        u[field::UDP_DST_PORT..][..2].copy_from_slice(&self.dst.port().to_be_bytes());
        u[field::UDP_LEN..][..2].copy_from_slice(&udp_len.to_be_bytes());
        h.len = ip + UDP_HEADER;
        Ok(h)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps.
pub(crate) fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}
