//! What one end of a connected QP tells the other: an [`Endpoint`] value,
//! sent over any out-of-band channel as text or as 40 bytes, and handed to
//! [`Qp::connect`](crate::Qp::connect) on the other side.
//!
//! # Text format
//!
//! One line of space-separated `key=value` fields after the version tag
//! `verbs-ep/1`, keys in any order, each exactly once:
//!
//! ```text
//! verbs-ep/1 qpn=0x000012 psn=0x4b2c01 port=1 lid=0x0000 mtu=1024 rd_atomic=16
//!     gid=0000:0000:0000:0000:0000:ffff:0ac8:0001 gid_index=3 gid_type=roce-v2 mac=0c:42:a1:00:00:00
//! ```
//!
//! (one line; wrapped here). `qpn`, `psn` and `lid` are hexadecimal with
//! `0x` (decimal is accepted too), `mtu` is 256…4096 bytes, `gid` any IPv6
//! spelling, `gid_type` one of `ib`, `roce-v1`, `roce-v2`, and `mac` six
//! hex pairs or `none`.
//!
//! # Byte format
//!
//! 40 bytes, multi-byte fields big-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, 1 |
//! | 1 | 1 | flags: bit 0 set when `mac` is present |
//! | 2 | 1 | port |
//! | 3 | 1 | mtu (`ibv_mtu`: 1 = 256 … 5 = 4096) |
//! | 4 | 4 | qpn (24 bits) |
//! | 8 | 4 | psn (24 bits) |
//! | 12 | 2 | lid |
//! | 14 | 1 | gid_index |
//! | 15 | 1 | gid_type: 0 IB, 1 RoCE v1, 2 RoCE v2 |
//! | 16 | 16 | gid |
//! | 32 | 6 | mac (zero when absent) |
//! | 38 | 1 | rd_atomic |
//! | 39 | 1 | reserved, 0 |

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use crate::port::{Gid, GidType, Mtu};

/// The version tag that starts the text form.
const TEXT_TAG: &str = "verbs-ep/1";
const BYTES_VERSION: u8 = 1;
const FLAG_MAC: u8 = 1;
const MAX_24: u32 = 0xff_ffff;

/// One end of an RC or UC connection: everything the peer's QP needs to
/// reach this QP. Made by [`Qp::endpoint`](crate::Qp::endpoint); the fields
/// are public so a program can also build one from its own exchange.
///
/// ```
/// use verbs::Endpoint;
///
/// let text = "verbs-ep/1 qpn=0x000012 psn=0x4b2c01 port=1 lid=0x0000 mtu=1024 \
///             rd_atomic=16 gid=::ffff:10.200.0.1 gid_index=3 gid_type=roce-v2 \
///             mac=0c:42:a1:00:00:00";
/// let ep: Endpoint = text.parse().expect("an endpoint");
/// assert_eq!((ep.qpn, ep.mtu.bytes()), (0x12, 1024));
/// assert_eq!(Endpoint::from_bytes(&ep.to_bytes()), Ok(ep));
/// let err = "verbs-ep/1 qpn=0x12".parse::<Endpoint>().unwrap_err();
/// assert_eq!(err.to_string(), "endpoint: field 'psn' missing");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number this end sends (24 bits).
    pub psn: u32,
    /// The port the QP uses (numbered from 1).
    pub port: u8,
    /// The port's LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// The port's active MTU; the path MTU is the smaller of both ends'.
    pub mtu: Mtu,
    /// RDMA reads and atomics this end answers at once; the peer issues at
    /// most this many.
    pub rd_atomic: u8,
    /// The source GID this end sends from.
    pub gid: Gid,
    /// Its index in this end's GID table (informational for the peer).
    pub gid_index: u8,
    /// Its type; both ends must use the same.
    pub gid_type: GidType,
    /// The MAC that goes with the GID (RoCE): the peer's destination MAC
    /// when both ends share a link.
    pub mac: Option<[u8; 6]>,
}

/// Why text or bytes are no endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("endpoint: {0}")]
pub struct ParseEndpointError(String);

impl ParseEndpointError {
    fn new(msg: impl Into<String>) -> ParseEndpointError {
        ParseEndpointError(msg.into())
    }
}

fn gid_type_code(t: GidType) -> u8 {
    match t {
        GidType::Ib => 0,
        GidType::RoceV1 => 1,
        GidType::RoceV2 => 2,
    }
}

fn gid_type_text(t: GidType) -> &'static str {
    match t {
        GidType::Ib => "ib",
        GidType::RoceV1 => "roce-v1",
        GidType::RoceV2 => "roce-v2",
    }
}

impl Endpoint {
    /// Size of [`Endpoint::to_bytes`].
    pub const BYTES: usize = 40;

    /// The 40-byte form (see the module docs).
    pub fn to_bytes(&self) -> [u8; Endpoint::BYTES] {
        let mut b = [0u8; Endpoint::BYTES];
        b[0] = BYTES_VERSION;
        b[1] = if self.mac.is_some() { FLAG_MAC } else { 0 };
        b[2] = self.port;
        b[3] = self.mtu as u8;
        b[4..8].copy_from_slice(&self.qpn.to_be_bytes());
        b[8..12].copy_from_slice(&self.psn.to_be_bytes());
        b[12..14].copy_from_slice(&self.lid.to_be_bytes());
        b[14] = self.gid_index;
        b[15] = gid_type_code(self.gid_type);
        b[16..32].copy_from_slice(&self.gid.0);
        b[32..38].copy_from_slice(&self.mac.unwrap_or_default());
        b[38] = self.rd_atomic;
        b
    }

    /// Reads the 40-byte form; every field is checked.
    pub fn from_bytes(b: &[u8]) -> Result<Endpoint, ParseEndpointError> {
        if b.len() != Endpoint::BYTES {
            return Err(ParseEndpointError::new(format!(
                "{} bytes, expected {}",
                b.len(),
                Endpoint::BYTES
            )));
        }
        if b[0] != BYTES_VERSION {
            return Err(ParseEndpointError::new(format!(
                "version {}, expected {BYTES_VERSION}",
                b[0]
            )));
        }
        if b[1] & !FLAG_MAC != 0 || b[39] != 0 {
            return Err(ParseEndpointError::new("reserved bits are set"));
        }
        let be32 = |at: usize| prm_layouts::bytes::be32(b, at);
        let mac = (b[1] & FLAG_MAC != 0).then(|| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[32..38]);
            m
        });
        if mac.is_none() && b[32..38] != [0; 6] {
            return Err(ParseEndpointError::new("a MAC is set without its flag"));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[16..32]);
        let ep = Endpoint {
            qpn: check_24("qpn", be32(4))?,
            psn: check_24("psn", be32(8))?,
            port: check_port(b[2])?,
            lid: prm_layouts::bytes::be16(b, 12),
            mtu: Mtu::from_raw(b[3]).ok_or_else(|| {
                ParseEndpointError::new(format!("mtu code {} is not 1..=5", b[3]))
            })?,
            rd_atomic: b[38],
            gid: Gid(gid),
            gid_index: b[14],
            gid_type: match b[15] {
                0 => GidType::Ib,
                1 => GidType::RoceV1,
                2 => GidType::RoceV2,
                t => {
                    return Err(ParseEndpointError::new(format!(
                        "gid_type code {t} is not 0 (IB), 1 (RoCE v1) or 2 (RoCE v2)"
                    )))
                }
            },
            mac,
        };
        Ok(ep)
    }
}

fn check_24(what: &str, v: u32) -> Result<u32, ParseEndpointError> {
    if v > MAX_24 {
        return Err(ParseEndpointError::new(format!(
            "{what} {v:#x} exceeds 24 bits"
        )));
    }
    Ok(v)
}

fn check_port(p: u8) -> Result<u8, ParseEndpointError> {
    if p == 0 {
        return Err(ParseEndpointError::new(
            "port 0 (ports are numbered from 1)",
        ));
    }
    Ok(p)
}

fn write_mac(f: &mut fmt::Formatter<'_>, m: &[u8; 6]) -> fmt::Result {
    write!(
        f,
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The one-line text form (see the module docs).
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TEXT_TAG} qpn={:#08x} psn={:#08x} port={} lid={:#06x} mtu={} rd_atomic={} gid={} gid_index={} gid_type={} mac=",
            self.qpn,
            self.psn,
            self.port,
            self.lid,
            self.mtu.bytes(),
            self.rd_atomic,
            self.gid,
            self.gid_index,
            gid_type_text(self.gid_type),
        )?;
        match &self.mac {
            Some(m) => write_mac(f, m),
            None => f.write_str("none"),
        }
    }
}

fn parse_num(key: &str, v: &str, max: u32) -> Result<u32, ParseEndpointError> {
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => v.parse::<u32>(),
    }
    .map_err(|_| ParseEndpointError::new(format!("{key}: '{v}' is not a number")))?;
    if n > max {
        return Err(ParseEndpointError::new(format!(
            "{key}: {v} exceeds {max:#x}"
        )));
    }
    Ok(n)
}

fn parse_mac(v: &str) -> Result<Option<[u8; 6]>, ParseEndpointError> {
    if v == "none" {
        return Ok(None);
    }
    let bad = || ParseEndpointError::new(format!("mac: '{v}' is not six hex pairs or 'none'"));
    let mut m = [0u8; 6];
    let mut parts = v.split(':');
    for b in &mut m {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(Some(m))
}

const KEYS: [&str; 10] = [
    "qpn",
    "psn",
    "port",
    "lid",
    "mtu",
    "rd_atomic",
    "gid",
    "gid_index",
    "gid_type",
    "mac",
];

impl FromStr for Endpoint {
    type Err = ParseEndpointError;

    fn from_str(s: &str) -> Result<Endpoint, ParseEndpointError> {
        let mut words = s.split_whitespace();
        match words.next() {
            Some(TEXT_TAG) => {}
            Some(other) => {
                return Err(ParseEndpointError::new(format!(
                    "starts with '{other}', expected '{TEXT_TAG}'"
                )))
            }
            None => return Err(ParseEndpointError::new("empty text")),
        }
        let mut vals: [Option<&str>; KEYS.len()] = [None; KEYS.len()];
        for w in words {
            let (k, v) = w.split_once('=').ok_or_else(|| {
                ParseEndpointError::new(format!("'{w}' is not a key=value field"))
            })?;
            let i = KEYS.iter().position(|&x| x == k).ok_or_else(|| {
                ParseEndpointError::new(format!(
                    "unknown field '{k}' (fields: {})",
                    KEYS.join(", ")
                ))
            })?;
            if vals[i].replace(v).is_some() {
                return Err(ParseEndpointError::new(format!("field '{k}' given twice")));
            }
        }
        if let Some(i) = vals.iter().position(Option::is_none) {
            return Err(ParseEndpointError::new(format!(
                "field '{}' missing",
                KEYS[i]
            )));
        }
        let get = |i: usize| vals[i].ok_or_else(|| ParseEndpointError::new("field missing"));
        let mtu_text = get(4)?;
        let mtu = match mtu_text.parse::<u32>() {
            Ok(n) if Mtu::at_most(n).bytes() == n => Mtu::at_most(n),
            _ => {
                return Err(ParseEndpointError::new(format!(
                    "mtu: '{mtu_text}' is not one of 256, 512, 1024, 2048, 4096"
                )))
            }
        };
        let gid_text = get(6)?;
        let gid = Ipv6Addr::from_str(gid_text).map_err(|_| {
            ParseEndpointError::new(format!("gid: '{gid_text}' is not an IPv6-style GID"))
        })?;
        let gid_type = match get(8)? {
            "ib" => GidType::Ib,
            "roce-v1" => GidType::RoceV1,
            "roce-v2" => GidType::RoceV2,
            other => {
                return Err(ParseEndpointError::new(format!(
                    "gid_type: '{other}' is not ib, roce-v1 or roce-v2"
                )))
            }
        };
        Ok(Endpoint {
            qpn: parse_num("qpn", get(0)?, MAX_24)?,
            psn: parse_num("psn", get(1)?, MAX_24)?,
            port: check_port(parse_num("port", get(2)?, u8::MAX.into())? as u8)?,
            lid: parse_num("lid", get(3)?, u16::MAX.into())? as u16,
            mtu,
            rd_atomic: parse_num("rd_atomic", get(5)?, u8::MAX.into())? as u8,
            gid: Gid(gid.octets()),
            gid_index: parse_num("gid_index", get(7)?, u8::MAX.into())? as u8,
            gid_type,
            mac: parse_mac(get(9)?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Endpoint {
        Endpoint {
            qpn: 0x12,
            psn: 0x4b2c01,
            port: 1,
            lid: 0,
            mtu: Mtu::Mtu1024,
            rd_atomic: 16,
            gid: Gid::from_ipv4("10.200.0.1".parse().unwrap()),
            gid_index: 3,
            gid_type: GidType::RoceV2,
            mac: Some([0x0c, 0x42, 0xa1, 0, 0, 0]),
        }
    }

    #[test]
    fn text_is_stable() {
        assert_eq!(
            sample().to_string(),
            "verbs-ep/1 qpn=0x000012 psn=0x4b2c01 port=1 lid=0x0000 mtu=1024 rd_atomic=16 \
             gid=0000:0000:0000:0000:0000:ffff:0ac8:0001 gid_index=3 gid_type=roce-v2 \
             mac=0c:42:a1:00:00:00"
        );
    }

    #[test]
    fn text_errors_name_the_field() {
        let good = sample().to_string();
        for (text, want) in [
            ("", "empty text"),
            ("verbs-ep/2 qpn=1", "expected 'verbs-ep/1'"),
            (&good.replace("mtu=1024", "mtu=1000"), "mtu: '1000'"),
            (
                &good.replace("qpn=0x000012", "qpn=0x1000000"),
                "qpn: 0x1000000 exceeds",
            ),
            (&good.replace("port=1", "port=0"), "port 0"),
            (&good.replace(" lid=0x0000", ""), "field 'lid' missing"),
            (&format!("{good} lid=1"), "field 'lid' given twice"),
            (&format!("{good} colour=red"), "unknown field 'colour'"),
            (
                &good.replace("gid_type=roce-v2", "gid_type=v3"),
                "gid_type: 'v3'",
            ),
            (
                &good.replace("mac=0c:42:a1:00:00:00", "mac=0c:42"),
                "mac: '0c:42'",
            ),
            (&good.replace("gid=0000:", "gid=zz:"), "gid: 'zz:"),
            (
                &good.replace("psn=0x4b2c01", "psn"),
                "'psn' is not a key=value",
            ),
        ] {
            let e = text.parse::<Endpoint>().unwrap_err().to_string();
            assert!(
                e.starts_with("endpoint: ") && e.contains(want),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn byte_errors() {
        let good = sample().to_bytes();
        let e = |b: &[u8]| Endpoint::from_bytes(b).unwrap_err().to_string();
        assert!(e(&good[..39]).contains("39 bytes, expected 40"));
        let mut b = good;
        b[0] = 2;
        assert!(e(&b).contains("version 2"));
        let mut b = good;
        b[3] = 6;
        assert!(e(&b).contains("mtu code 6"));
        let mut b = good;
        b[15] = 3;
        assert!(e(&b).contains("gid_type code 3"));
        let mut b = good;
        b[4] = 1;
        assert!(e(&b).contains("qpn"));
        let mut b = good;
        b[1] = 0;
        assert!(e(&b).contains("MAC is set without its flag"));
        let mut b = good;
        b[39] = 1;
        assert!(e(&b).contains("reserved"));
    }

    fn any_endpoint() -> impl Strategy<Value = Endpoint> {
        (
            (0..=MAX_24, 0..=MAX_24, 1u8..=255, any::<u16>(), 1u8..=5),
            (any::<u8>(), any::<[u8; 16]>(), any::<u8>(), 0u8..3),
            proptest::option::of(any::<[u8; 6]>()),
        )
            .prop_map(
                |((qpn, psn, port, lid, mtu), (rd, gid, idx, t), mac)| Endpoint {
                    qpn,
                    psn,
                    port,
                    lid,
                    mtu: Mtu::from_raw(mtu).unwrap(),
                    rd_atomic: rd,
                    gid: Gid(gid),
                    gid_index: idx,
                    gid_type: [GidType::Ib, GidType::RoceV1, GidType::RoceV2][usize::from(t)],
                    mac,
                },
            )
    }

    proptest! {
        #[test]
        fn text_round_trips(ep in any_endpoint()) {
            prop_assert_eq!(ep.to_string().parse::<Endpoint>().unwrap(), ep);
        }

        #[test]
        fn bytes_round_trip(ep in any_endpoint()) {
            prop_assert_eq!(Endpoint::from_bytes(&ep.to_bytes()).unwrap(), ep);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..48), s in ".{0,200}") {
            let _ = Endpoint::from_bytes(&b);
            let _ = s.parse::<Endpoint>();
        }
    }
}
