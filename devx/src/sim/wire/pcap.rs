//! A capture of RoCEv2 packets as a classic pcap file of raw IP packets
//! (`LINKTYPE_RAW`), which Wireshark and tshark dissect as IP / UDP /
//! InfiniBand (RRoCE) by the UDP port.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use super::flow::Flow;

/// pcap file magic for microsecond timestamps.
const MAGIC_USEC: u32 = 0xa1b2_c3d4;
const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;
/// Frames are raw IPv4 or IPv6 packets (tcpdump.org link-layer types).
const LINKTYPE_RAW: u32 = 101;
/// Longest frame a record may hold: an IP packet.
const SNAPLEN: u32 = u16::MAX as u32;

/// Writes one record per packet; each record gets the IP and UDP headers
/// the kernel would have put in front of it for its [`Flow`](super::Flow),
/// with valid checksums.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Starts a capture: writes the file header.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_USEC.to_le_bytes());
        h.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
        h.extend_from_slice(&VERSION_MINOR.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // GMT offset
        h.extend_from_slice(&0u32.to_le_bytes()); // timestamp accuracy
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Records `roce` (a UDP payload) as sent on `flow` at `at`.
    pub fn write(&mut self, flow: &Flow, roce: &[u8], at: SystemTime) -> io::Result<()> {
        let mut ip_udp = flow
            .ip_udp(roce.len())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        ip_udp.set_udp_checksum(roce);
        let len = ip_udp.as_bytes().len() + roce.len();
        let len = u32::try_from(len).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let t = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = u32::try_from(t.as_secs()).unwrap_or(u32::MAX);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&t.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(ip_udp.as_bytes())?;
        self.out.write_all(roce)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The writer, flushed.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
