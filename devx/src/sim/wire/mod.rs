//! RoCEv2 on the wire: the packets an emulated ConnectX exchanges with
//! peers in other processes and hosts, over UDP port 4791.
//!
//! * [`headers`]: BTH and the extension headers (RETH, AETH, AtomicETH,
//!   AtomicAckETH, ImmDt, DETH) as byte-exact big-endian structs;
//! * [`opcode`]: which opcodes exist per transport service and which
//!   headers each carries;
//! * [`packet`]: zero-copy parse and allocation-free encode of a whole
//!   packet, BTH to ICRC;
//! * [`icrc`] over the IP and UDP headers of [`flow`], which are the ones
//!   the kernel builds for a datagram sent through a UDP socket;
//! * [`pcap`]: a capture writer whose files Wireshark dissects as RoCE;
//! * [`port`]: a device's UDP socket and receive thread, configured by
//!   [`config`], with test faults from [`fault`].

pub mod config;
pub mod crc32;
pub mod error;
pub mod fault;
pub mod flow;
pub mod headers;
pub mod icrc;
pub mod mmsg;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod port;

pub use error::WireError;
pub use flow::{Flow, ROCE_V2_PORT};
pub use headers::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ImmDt, NakCode, Reth, Syndrome, NO_CREDIT_LIMIT,
};
pub use icrc::{icrc, ICRC_LEN};
pub use opcode::{BthOpcode, Extensions, Operation, Service};
pub use packet::{Headers, Packet};
pub use port::{Counter, NetCounters, NetPort, PacketSink};
