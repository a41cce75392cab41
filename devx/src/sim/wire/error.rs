//! Why a RoCEv2 packet could not be parsed or built.

use super::opcode::BthOpcode;

/// A malformed, truncated or unbuildable packet. Parsing never panics: every
/// byte string either parses or yields one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("packet truncated: {what} needs {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("BTH opcode {0:#04x} is not a supported RoCEv2 opcode")]
    UnsupportedOpcode(u8),
    #[error("BTH transport header version {0} is not 0")]
    BadTransportVersion(u8),
    #[error("RoCE packet length {0} (headers, payload, pad and ICRC) is not a multiple of 4")]
    Unaligned(usize),
    #[error("{opcode} carries no payload, but {len} bytes follow its headers")]
    UnexpectedPayload { opcode: BthOpcode, len: usize },
    #[error("BTH pad count {pad} exceeds the {len} payload bytes")]
    BadPad { pad: u8, len: usize },
    #[error("AETH syndrome {0:#04x} is reserved")]
    BadAethSyndrome(u8),
    #[error("ICRC mismatch: packet carries {carried:08x}, computed {computed:08x}")]
    IcrcMismatch { carried: u32, computed: u32 },
    #[error("{opcode} {} a {header}", if *.required { "requires" } else { "does not carry" })]
    HeaderMismatch {
        opcode: BthOpcode,
        header: &'static str,
        required: bool,
    },
    #[error("output buffer of {have} bytes is too small for a {need}-byte packet")]
    BufferTooSmall { need: usize, have: usize },
    #[error("a {0}-byte RoCE packet does not fit in one UDP datagram")]
    TooLong(usize),
    #[error("source and destination addresses are of different IP families")]
    MixedFamilies,
    #[error("IP header: {0}")]
    BadIpHeader(&'static str),
}
