//! RoCEv2 on the wire: the packets an emulated ConnectX exchanges with
//! peers in other processes and hosts, over UDP port 4791.
//!
//! Public here is the packet codec: [`Bth`] and the extension headers
//! ([`Reth`], [`Aeth`], [`AtomicEth`], [`AtomicAckEth`], [`ImmDt`], [`Deth`])
//! as byte-exact big-endian structs; [`BthOpcode`], [`Operation`] and
//! [`Service`], which say which opcodes exist per transport service and
//! which headers each carries; [`Packet`] and [`Headers`], zero-copy parse
//! and allocation-free encode of a whole packet, BTH to ICRC; [`icrc`] over
//! the IP and UDP headers of a [`Flow`], which are the ones the kernel
//! builds for a datagram sent through a UDP socket; [`PcapWriter`], a
//! capture writer whose files Wireshark dissects as RoCE; and the port
//! counters ([`NetCounters`], [`Counter`]). The device's UDP socket and
//! receive thread stay inside; the environment configures them:
//!
//! * `DEVX_SIM_CONFIG=path`: a file with one device per line,
//!   `sim1 127.0.0.2` or `sim1 127.0.0.2:4792` (`#` starts a comment); the
//!   entries for devices of other processes say which UDP port to send to
//!   for their address (4791 otherwise);
//! * `DEVX_SIM_ADDR_<dev>=address[:port]`: one device's address, winning
//!   over the file;
//! * `DEVX_SIM_PCAP_<dev>=path`: capture what the device sends and receives;
//! * `DEVX_SIM_FAULT_<dev>=drop=0.1,dup=0.05,reorder=0.1,hold_us=500,seed=7,to=127.0.0.3`:
//!   seeded faults on what the port sends (every key optional; `to` limits
//!   them to the link towards one address).
//!
//! A device with no address has no network port; it still reaches the
//! devices of its own process over the in-memory link.

pub(crate) mod config;
pub(crate) mod crc32;
pub(crate) mod error;
pub(crate) mod fault;
pub(crate) mod flow;
pub(crate) mod headers;
pub(crate) mod icrc;
pub(crate) mod mmsg;
pub(crate) mod opcode;
pub(crate) mod packet;
pub(crate) mod pcap;
pub(crate) mod port;

pub use error::WireError;
pub use flow::{Flow, ROCE_V2_PORT};
pub use headers::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ImmDt, NakCode, Reth, Syndrome, NO_CREDIT_LIMIT,
};
pub use icrc::{icrc, ICRC_LEN};
pub use opcode::{BthOpcode, Extensions, Operation, Service};
pub use packet::{Headers, Packet};
pub use pcap::PcapWriter;
pub(crate) use port::{Arrivals, NetPort, PacketSink};
pub use port::{Counter, NetCounters};
