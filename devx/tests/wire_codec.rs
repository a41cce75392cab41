//! The RoCEv2 packet codec: known-good packets from the wire, encode/parse
//! round trips, random and corrupted input, and a capture tshark dissects.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use devx::sim::wire::PcapWriter;
use devx::sim::wire::{
    icrc, Aeth, AtomicAckEth, AtomicEth, Bth, BthOpcode, Deth, Flow, Headers, ImmDt, NakCode,
    Operation, Packet, Reth, Service, Syndrome, WireError, ROCE_V2_PORT,
};
use proptest::prelude::*;

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    hex::decode(s).expect("test vector is hex")
}

/// A CNP captured from a ConnectX-4 Lx (published with scapy's RoCE layer
/// tests): Ethernet, IPv4 (TOS 0xc2, DF, TTL 64, UDP checksum 0), BTH with
/// BECN set in the variant byte, 16 reserved bytes, ICRC 82 fd 00 2a.
const CX4_CNP: &str = "e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
    003c 718c 4000 4011 9161 0a00 1101 0a00
    1201 0000 12b7 0028 0000 8100 ffff 4000
    0118 0000 0000 0000 0000 0000 0000 0000
    0000 0000 0000 82fd 002a";
const ETHERNET: usize = 14;
const IPV4_UDP: usize = 28;

#[test]
fn icrc_matches_a_connectx_capture() {
    let frame = unhex(CX4_CNP);
    let ip_udp = &frame[ETHERNET..ETHERNET + IPV4_UDP];
    let roce = &frame[ETHERNET + IPV4_UDP..];
    let (body, carried) = roce.split_at(roce.len() - 4);
    assert_eq!(icrc(ip_udp, body).unwrap(), carried);
}

/// A UC SEND_ONLY from scapy's RoCE tests (TOS 1, IP id 1144, pad 2): the
/// ICRC covers the identification and lengths but not TOS or checksums.
#[test]
fn icrc_and_parse_of_a_uc_send_only() {
    let ip_udp = unhex(
        "4501 0040 0478 4000 4011 b4d5 c0a8 0007 c0a8 0007
         c000 12b7 002c aca2",
    );
    let roce = unhex(
        "2460 ffff 0000 00d3 00cf 1710
         4630 818b e289 35d9 0e9a 9550 5401 be88 5e50 0000
         78f3 53f3",
    );
    let (body, carried) = roce.split_at(roce.len() - 4);
    assert_eq!(icrc(&ip_udp, body).unwrap(), carried);

    let p = Packet::parse(&roce).unwrap();
    assert_eq!(
        p.opcode,
        BthOpcode::new(Service::Uc, Operation::SendOnly).unwrap()
    );
    assert_eq!(p.bth.dest_qp(), 211);
    assert_eq!(p.bth.psn(), 13_571_856);
    assert!(p.bth.mig_req());
    assert_eq!(p.payload.len(), 18);
    assert_eq!(&p.payload[..2], b"F0");

    // The variant fields may change in flight without breaking the ICRC.
    let mut v = ip_udp.clone();
    v[1] = 0xb8; // TOS
    v[8] = 1; // TTL
    v[26] = 0; // UDP checksum
    let mut b = body.to_vec();
    b[4] = 0xc0; // FECN, BECN
    assert_eq!(icrc(&v, &b).unwrap(), carried);
    // An invariant one may not.
    v[4] = 0; // identification
    assert_ne!(icrc(&v, &b).unwrap(), carried);
}

fn v4(a: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port)
}

fn loopback_flow(v6: bool) -> Flow {
    if v6 {
        Flow::new(
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 49152),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), ROCE_V2_PORT),
        )
    } else {
        Flow::new(v4([127, 0, 0, 2], 49152), v4([127, 0, 0, 3], ROCE_V2_PORT))
    }
}

/// Every (service, operation) pair the codec accepts.
fn all_opcodes() -> Vec<BthOpcode> {
    [Service::Rc, Service::Uc, Service::Ud]
        .into_iter()
        .flat_map(|s| {
            Operation::ALL
                .into_iter()
                .filter_map(move |o| BthOpcode::new(s, o).ok())
        })
        .collect()
}

/// Field values a packet's headers are filled from.
#[derive(Debug, Clone)]
struct Fields {
    qpn: u32,
    psn: u32,
    se: bool,
    ack_req: bool,
    pkey: u16,
    va: u64,
    rkey: u32,
    len: u32,
    swap: u64,
    compare: u64,
    qkey: u32,
    src_qp: u32,
    imm: [u8; 4],
    syndrome: Syndrome,
    msn: u32,
}

/// The headers `opcode` needs, filled from `f`.
fn headers(opcode: BthOpcode, f: &Fields) -> Headers {
    let mut bth = Bth::new(opcode.raw(), f.qpn, f.psn);
    bth.set_solicited(f.se);
    bth.set_ack_req(f.ack_req);
    bth.set_pkey(f.pkey);
    let x = opcode.extensions();
    let mut h = Headers::new(bth);
    h.deth = x.deth.then(|| Deth::new(f.qkey, f.src_qp));
    h.reth = x.reth.then(|| Reth::new(f.va, f.rkey, f.len));
    h.atomic_eth = x
        .atomic_eth
        .then(|| AtomicEth::new(f.va, f.rkey, f.swap, f.compare));
    h.aeth = x.aeth.then(|| Aeth::new(f.syndrome, f.msn));
    h.atomic_ack_eth = x.atomic_ack_eth.then(|| AtomicAckEth {
        orig: f.swap.into(),
    });
    h.imm = x.imm.then_some(ImmDt { imm: f.imm });
    h
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        prop::sample::select(vec![
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ])
        .prop_map(Syndrome::Nak),
    ]
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (
            0u32..1 << 24,
            0u32..1 << 24,
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u32>(),
            0u32..1 << 24,
            any::<[u8; 4]>(),
            syndrome(),
            0u32..1 << 24,
        ),
    )
        .prop_map(
            |(
                (qpn, psn, se, ack_req, pkey),
                (va, rkey, len, swap, compare),
                (qkey, src_qp, imm, syndrome, msn),
            )| Fields {
                qpn,
                psn,
                se,
                ack_req,
                pkey,
                va,
                rkey,
                len,
                swap,
                compare,
                qkey,
                src_qp,
                imm,
                syndrome,
                msn,
            },
        )
}

fn flow() -> impl Strategy<Value = Flow> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u16>(),
            any::<u16>()
        )
            .prop_map(|(s, d, sp, dp)| Flow::new(v4(s, sp), v4(d, dp))),
        (any::<[u8; 16]>(), any::<[u8; 16]>(), any::<u16>()).prop_map(|(s, d, sp)| {
            // IPv4-mapped addresses travel as IPv4; keep these plain IPv6.
            let (mut s, mut d) = (s, d);
            s[0] = 0xfe;
            d[0] = 0xfd;
            Flow::new(
                SocketAddr::new(IpAddr::V6(Ipv6Addr::from(s)), sp),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::from(d)), ROCE_V2_PORT),
            )
        }),
    ]
}

/// An opcode, its fields, a payload (empty where the opcode takes none),
/// and a flow.
fn packet() -> impl Strategy<Value = (BthOpcode, Fields, Vec<u8>, Flow)> {
    (
        prop::sample::select(all_opcodes()),
        fields(),
        prop::collection::vec(any::<u8>(), 0..300),
        flow(),
    )
        .prop_map(|(o, f, mut payload, flow)| {
            if !o.extensions().payload {
                payload.clear();
            }
            (o, f, payload, flow)
        })
}

fn encode(o: BthOpcode, f: &Fields, payload: &[u8], flow: &Flow) -> (Headers, Vec<u8>) {
    let h = headers(o, f);
    let mut out = vec![0u8; h.packet_len(payload.len())];
    let n = h.encode(flow, payload, &mut out).unwrap();
    assert_eq!(n, out.len());
    (h, out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_then_parse_gives_back_every_field((o, f, payload, flow) in packet()) {
        let (h, out) = encode(o, &f, &payload, &flow);
        prop_assert_eq!(out.len() % 4, 0);
        let p = Packet::parse_checked(&flow, &out).unwrap();
        prop_assert_eq!(p.opcode, o);
        prop_assert_eq!(p.payload, &payload[..]);
        let mut want = h;
        want.bth.set_pad_count(((4 - payload.len() % 4) % 4) as u8);
        prop_assert_eq!(p.headers(), want);
        prop_assert_eq!(p.bth.dest_qp(), f.qpn);
        prop_assert_eq!(p.bth.psn(), f.psn);
        if let Some(a) = p.aeth {
            prop_assert_eq!(a.syndrome().unwrap(), f.syndrome);
            prop_assert_eq!(a.msn(), f.msn);
        }
        if let Some(d) = p.deth {
            prop_assert_eq!(d.src_qp(), f.src_qp);
            prop_assert_eq!(d.qkey.get(), f.qkey);
        }
    }

    /// Any single bit flipped outside the BTH's variant byte is caught.
    #[test]
    fn a_flipped_bit_fails_the_check((o, f, payload, flow) in packet(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (_, mut out) = encode(o, &f, &payload, &flow);
        let i = at.index(out.len());
        prop_assume!(i != 4);
        out[i] ^= 1 << bit;
        prop_assert!(Packet::parse_checked(&flow, &out).is_err());
    }

    /// The same packet read as coming from another address fails.
    #[test]
    fn the_icrc_covers_the_addresses((o, f, payload, flow) in packet(), other in flow()) {
        prop_assume!(flow.src.ip() != other.src.ip() || flow.dst.ip() != other.dst.ip());
        let (_, out) = encode(o, &f, &payload, &flow);
        prop_assert!(Packet::parse_checked(&other, &out).is_err());
    }

    #[test]
    fn every_truncation_is_an_error((o, f, payload, flow) in packet()) {
        let (_, out) = encode(o, &f, &payload, &flow);
        for n in 0..out.len() {
            prop_assert!(Packet::parse_checked(&flow, &out[..n]).is_err(), "prefix {n}");
        }
    }

    /// Random bytes never panic the parser; what parses is self-consistent.
    #[test]
    fn random_bytes_parse_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..200), flow in flow()) {
        if let Ok(p) = Packet::parse(&bytes) {
            let h = p.headers();
            prop_assert!(h.check().is_ok());
            prop_assert_eq!(h.len() + p.payload.len() + usize::from(p.bth.pad_count()) + 4, bytes.len());
        }
        let _ = Packet::parse_checked(&flow, &bytes);
    }

    /// Random bytes behind a valid opcode and version reach the deeper checks.
    #[test]
    fn random_bodies_parse_or_fail_cleanly(o in prop::sample::select(all_opcodes()), flags in 0u8..0x40, body in prop::collection::vec(any::<u8>(), 0..80)) {
        let mut bytes = vec![o.raw(), flags & 0xf0];
        bytes.extend_from_slice(&body);
        if let Ok(p) = Packet::parse(&bytes) {
            prop_assert_eq!(p.opcode, o);
            prop_assert!(p.headers().check().is_ok());
        }
    }
}

fn sample_fields() -> Fields {
    Fields {
        qpn: 0x12,
        psn: 0xff_fffe,
        se: true,
        ack_req: true,
        pkey: u16::MAX,
        va: 0x7f00_1234_5000,
        rkey: 0x1_0203,
        len: 4096,
        swap: 7,
        compare: 3,
        qkey: 0x1111_1111,
        src_qp: 0x44,
        imm: *b"imm!",
        syndrome: Syndrome::Ack { credits: 31 },
        msn: 9,
    }
}

#[test]
fn errors_name_what_was_wrong() {
    let flow = loopback_flow(false);
    let send = BthOpcode::new(Service::Rc, Operation::SendOnly).unwrap();
    let (_, good) = encode(send, &sample_fields(), b"hello", &flow);

    let e = Packet::parse(&good[..5]).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::Truncated {
                what: "BTH",
                need: 12,
                have: 5
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("BTH"));

    let mut bad = good.clone();
    bad[0] = 0x15; // RC opcode 0x15 is reserved
    assert_eq!(
        Packet::parse(&bad).unwrap_err(),
        WireError::UnsupportedOpcode(0x15)
    );

    let mut bad = good.clone();
    bad[1] |= 1; // transport version 1
    assert_eq!(
        Packet::parse(&bad).unwrap_err(),
        WireError::BadTransportVersion(1)
    );

    let mut bad = good.clone();
    bad[13] ^= 1;
    assert!(matches!(
        Packet::parse_checked(&flow, &bad),
        Err(WireError::IcrcMismatch { .. })
    ));

    let ack = BthOpcode::new(Service::Rc, Operation::Acknowledge).unwrap();
    let (_, mut ack_pkt) = encode(ack, &sample_fields(), &[], &flow);
    ack_pkt[12] = 0b0100_0000; // syndrome kind 0b10 is reserved
    assert_eq!(
        Packet::parse(&ack_pkt).unwrap_err(),
        WireError::BadAethSyndrome(0x40)
    );

    // An ACK with bytes after its AETH.
    let (_, ack_pkt) = encode(ack, &sample_fields(), &[], &flow);
    let mut long = ack_pkt[..16].to_vec();
    long.extend_from_slice(&[0; 8]);
    assert!(matches!(
        Packet::parse(&long),
        Err(WireError::UnexpectedPayload { len: 4, .. })
    ));

    // Encoding checks the headers against the opcode.
    let mut h = headers(send, &sample_fields());
    h.reth = Some(Reth::new(0, 0, 0));
    let mut out = [0u8; 64];
    let e = h.encode(&flow, b"x", &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::HeaderMismatch {
                header: "RETH",
                required: false,
                ..
            }
        ),
        "{e}"
    );
    let h = headers(send, &sample_fields());
    assert!(matches!(
        h.encode(&flow, &[0; 100], &mut out),
        Err(WireError::BufferTooSmall {
            need: 116,
            have: 64
        })
    ));
    let mixed = Flow::new(v4([127, 0, 0, 1], 1), loopback_flow(true).dst);
    assert_eq!(
        h.encode(&mixed, b"x", &mut out),
        Err(WireError::MixedFamilies)
    );
    assert!(BthOpcode::new(Service::Ud, Operation::WriteOnly).is_err());
}

#[test]
fn ipv4_mapped_addresses_travel_as_ipv4() {
    let plain = loopback_flow(false);
    let mapped = Flow::new(
        SocketAddr::new(
            IpAddr::V6(Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped()),
            49152,
        ),
        SocketAddr::new(
            IpAddr::V6(Ipv4Addr::new(127, 0, 0, 3).to_ipv6_mapped()),
            ROCE_V2_PORT,
        ),
    );
    let o = BthOpcode::new(Service::Rc, Operation::WriteOnly).unwrap();
    let (_, out) = encode(o, &sample_fields(), b"data", &mapped);
    assert!(Packet::parse_checked(&plain, &out).is_ok());
}

/// Protocols whose heuristics tshark 4 tries on an InfiniBand payload.
const PAYLOAD_PROTOCOLS: [&str; 7] = [
    "smc",
    "smb_direct",
    "rpcordma",
    "nvme-rdma",
    "lnet",
    "iser",
    "infiniband_sdp",
];

/// One packet of every opcode, IPv4 and IPv6, written as a capture and
/// dissected by tshark: every frame is RoCE, none is malformed, and tshark
/// reads the fields and ICRC we wrote.
#[test]
fn tshark_dissects_a_capture_as_roce() {
    if std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: tshark is not installed (apt-get install tshark to run this check)");
        return;
    }
    let path = std::env::temp_dir().join(format!("devx-wire-{}.pcap", std::process::id()));
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut want = Vec::new();
    for v6 in [false, true] {
        let flow = loopback_flow(v6);
        for o in all_opcodes() {
            let payload: &[u8] = if o.extensions().payload {
                b"seven b"
            } else {
                &[]
            };
            let (_, out) = encode(o, &sample_fields(), payload, &flow);
            w.write(&flow, &out, std::time::SystemTime::now()).unwrap();
            let crc = u32::from_be_bytes(out[out.len() - 4..].try_into().unwrap());
            want.push(format!("{},{:#010x}", o.raw(), crc));
        }
    }
    w.into_inner().unwrap();
    let out = std::process::Command::new("tshark")
        // Payload heuristics (RPC-over-RDMA, SMB Direct…) would read our
        // test payload as their own protocol.
        .args(["-n", "-o", "infiniband.try_heuristic_first:FALSE"])
        .args(
            PAYLOAD_PROTOCOLS
                .iter()
                .flat_map(|p| ["--disable-protocol", p]),
        )
        .arg("-r")
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.invariant.crc",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), want.len(), "{text}");
    for (g, w) in got.iter().zip(&want) {
        // opcode,icrc and then empty malformed and expert columns
        assert_eq!(*g, format!("{w},,"), "tshark saw: {g}");
    }
}
