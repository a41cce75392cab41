//! The invariant CRC of a RoCEv2 packet (IBA annex A17, "RoCEv2", A17.4.3.2).
//!
//! CRC-32 over, in order: eight bytes of ones standing for the masked LRH
//! of native InfiniBand; the IP header and the UDP header with their
//! variant fields set to all ones (IPv4: TOS, TTL, header checksum; IPv6:
//! traffic class, flow label, hop limit; UDP: checksum); the BTH with its
//! variant byte (`resv8a`: FECN, BECN) set to ones; then the rest of the
//! packet up to the ICRC. The CRC's four bytes go on the wire least
//! significant byte first, as Linux's rxe and ConnectX write them.

use super::crc32::Crc32;
use super::error::WireError;
use super::flow::{field, Flow, IPV4_HEADER, IPV6_HEADER, MAX_IP_UDP, UDP_HEADER};
use super::headers::Bth;

/// Bytes of the ICRC at the end of every packet.
pub const ICRC_LEN: usize = 4;

/// The pseudo-LRH standing in front of the IP header.
const MASKED_LRH: [u8; 8] = [u8::MAX; 8];
/// The BTH's variant byte (`resv8a`).
const BTH_VARIANT: usize = 4;
const MASKED: u8 = u8::MAX;
/// The traffic class's low nibble shares IPv6's first byte with the version.
const V6_TRAFFIC_CLASS_HIGH: u8 = 0x0f;
/// IPv4's header length field, in 32-bit words.
const V4_IHL: u8 = 0x0f;

/// The ICRC of the packet whose IP + UDP headers are `ip_udp` (IPv4
/// without options, or IPv6 without extension headers) and whose UDP
/// payload up to the ICRC is `roce` (BTH first); the bytes as they go on
/// the wire.
pub fn icrc(ip_udp: &[u8], roce: &[u8]) -> Result<[u8; ICRC_LEN], WireError> {
    icrc_after(icrc_prefix(ip_udp)?, roce)
}

/// The ICRC's running CRC over the pseudo-LRH and the masked IP and UDP
/// headers `ip_udp`: what every packet of one flow and length shares.
pub(crate) fn icrc_prefix(ip_udp: &[u8]) -> Result<Crc32, WireError> {
    let mut front = [0u8; MASKED_LRH.len() + MAX_IP_UDP];
    front[..MASKED_LRH.len()].copy_from_slice(&MASKED_LRH);
    let (_, rest) = front.split_at_mut(MASKED_LRH.len());
    let h = rest
        .get_mut(..ip_udp.len())
        .ok_or(WireError::BadIpHeader("longer than IPv6 + UDP"))?;
    h.copy_from_slice(ip_udp);
    let ip = match h.first().map(|b| b >> 4) {
        Some(4) if h.len() == IPV4_HEADER + UDP_HEADER => {
            if usize::from(h[0] & V4_IHL) * 4 != IPV4_HEADER {
                return Err(WireError::BadIpHeader("IPv4 header with options"));
            }
            h[field::V4_TOS] = MASKED;
            h[field::V4_TTL] = MASKED;
            h[field::V4_CHECKSUM..][..2].fill(MASKED);
            IPV4_HEADER
        }
        Some(6) if h.len() == IPV6_HEADER + UDP_HEADER => {
            h[0] |= V6_TRAFFIC_CLASS_HIGH;
            h[field::V6_TRAFFIC_FLOW][1..].fill(MASKED);
            h[field::V6_HOP_LIMIT] = MASKED;
            IPV6_HEADER
        }
        _ => {
            return Err(WireError::BadIpHeader(
                "not IPv4 (20 bytes) or IPv6 (40) + UDP",
            ))
        }
    };
    h[ip + field::UDP_CHECKSUM..][..2].fill(MASKED);
    let mut c = Crc32::new();
    c.update(&front[..MASKED_LRH.len() + ip_udp.len()]);
    Ok(c)
}

/// The ICRC of `roce` (BTH first, up to the ICRC) after the headers'
/// running CRC `prefix` ([`icrc_prefix`]).
pub(crate) fn icrc_after(prefix: Crc32, roce: &[u8]) -> Result<[u8; ICRC_LEN], WireError> {
    let bth_len = std::mem::size_of::<Bth>();
    let bth = roce.get(..bth_len).ok_or(WireError::Truncated {
        what: "BTH",
        need: bth_len,
        have: roce.len(),
    })?;
    let mut masked_bth = [0u8; std::mem::size_of::<Bth>()];
    masked_bth.copy_from_slice(bth);
    masked_bth[BTH_VARIANT] = MASKED;
    let mut c = prefix;
    c.update(&masked_bth);
    c.update(&roce[bth_len..]);
    Ok(c.finish().to_le_bytes())
}

/// The ICRC prefix of the last flow and packet length seen: a run of
/// equal packets to or from one peer computes it once.
#[derive(Default)]
pub(crate) struct IcrcCache {
    last: Option<(Flow, usize, Crc32)>,
}

impl IcrcCache {
    /// The ICRC prefix ([`icrc_prefix`]) of a `total`-byte packet (ICRC
    /// included) of `flow`.
    pub(crate) fn prefix(&mut self, flow: &Flow, total: usize) -> Result<Crc32, WireError> {
        if let Some((f, t, c)) = self.last {
            if f == *flow && t == total {
                return Ok(c);
            }
        }
        let c = icrc_prefix(flow.ip_udp(total)?.as_bytes())?;
        self.last = Some((*flow, total, c));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn a_cached_prefix_gives_the_icrc_of_each_flow_and_length() {
        let a: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let b: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        let v6: SocketAddr = "[::1]:4791".parse().unwrap();
        let roce: Vec<u8> = (0..200u8).collect();
        let mut cache = IcrcCache::default();
        // Repeats, then a change of length, of peer and of family.
        for (flow, len) in [
            (Flow::new(a, b), 60),
            (Flow::new(a, b), 60),
            (Flow::new(a, b), 124),
            (Flow::new(b, a), 124),
            (Flow::new(v6, v6), 124),
            (Flow::new(a, b), 60),
        ] {
            let total = len + ICRC_LEN;
            let direct = icrc(flow.ip_udp(total).unwrap().as_bytes(), &roce[..len]).unwrap();
            let prefix = cache.prefix(&flow, total).unwrap();
            assert_eq!(icrc_after(prefix, &roce[..len]).unwrap(), direct);
        }
    }
}
