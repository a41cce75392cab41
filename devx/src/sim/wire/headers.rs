//! The RoCEv2 transport headers as they lie on the wire (IBA 9.2–9.3):
//! byte-exact, unaligned, big-endian structs a parser borrows in place.

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::error::WireError;

/// Widest value of a 24-bit field (QPN, PSN, MSN).
pub(crate) const MASK24: u32 = (1 << 24) - 1;
/// The default partition key, full membership.
pub(crate) const DEFAULT_PKEY: u16 = u16::MAX;

fn be24(b: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn to_be24(v: u32) -> [u8; 3] {
    let b = (v & MASK24).to_be_bytes();
    [b[1], b[2], b[3]]
}

/// Base Transport Header (12 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Bth {
    opcode: u8,
    /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5..4), TVer (bits 3..0).
    flags: u8,
    pkey: U16,
    /// FECN/BECN and reserved bits; variant, so masked out of the ICRC.
    resv8a: u8,
    dest_qp: [u8; 3],
    /// AckReq (bit 31), reserved (bits 30..24), PSN (bits 23..0).
    ack_psn: U32,
}

const SE: u8 = 1 << 7;
const MIG_REQ: u8 = 1 << 6;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0b11;
const TVER_MASK: u8 = 0x0f;
const ACK_REQ: u32 = 1 << 31;

impl Bth {
    /// A BTH for `opcode` (raw) to `dest_qp` at `psn`, default P_Key, MigReq
    /// set as an APM-less port reports it.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32) -> Bth {
        let mut b = Bth::new_zeroed();
        b.opcode = opcode;
        b.flags = MIG_REQ;
        b.pkey.set(DEFAULT_PKEY);
        b.set_dest_qp(dest_qp);
        b.set_psn(psn);
        b
    }

    pub fn opcode(&self) -> u8 {
        self.opcode
    }
    pub fn set_opcode(&mut self, v: u8) {
        self.opcode = v;
    }
    pub fn solicited(&self) -> bool {
        self.flags & SE != 0
    }
    pub fn set_solicited(&mut self, v: bool) {
        self.flags = if v { self.flags | SE } else { self.flags & !SE };
    }
    pub fn mig_req(&self) -> bool {
        self.flags & MIG_REQ != 0
    }
    pub fn set_mig_req(&mut self, v: bool) {
        self.flags = if v {
            self.flags | MIG_REQ
        } else {
            self.flags & !MIG_REQ
        };
    }
    /// Bytes of padding after the payload (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.flags >> PAD_SHIFT) & PAD_MASK
    }
    pub fn set_pad_count(&mut self, v: u8) {
        self.flags = (self.flags & !(PAD_MASK << PAD_SHIFT)) | ((v & PAD_MASK) << PAD_SHIFT);
    }
    pub fn transport_version(&self) -> u8 {
        self.flags & TVER_MASK
    }
    pub fn pkey(&self) -> u16 {
        self.pkey.get()
    }
    pub fn set_pkey(&mut self, v: u16) {
        self.pkey.set(v);
    }
    /// The variant byte (FECN, BECN); ignored by the transport.
    pub fn resv8a(&self) -> u8 {
        self.resv8a
    }
    pub fn dest_qp(&self) -> u32 {
        be24(self.dest_qp)
    }
    pub fn set_dest_qp(&mut self, v: u32) {
        self.dest_qp = to_be24(v);
    }
    pub fn ack_req(&self) -> bool {
        self.ack_psn.get() & ACK_REQ != 0
    }
    pub fn set_ack_req(&mut self, v: bool) {
        let w = self.ack_psn.get();
        self.ack_psn.set(if v { w | ACK_REQ } else { w & !ACK_REQ });
    }
    pub fn psn(&self) -> u32 {
        self.ack_psn.get() & MASK24
    }
    pub fn set_psn(&mut self, v: u32) {
        let w = self.ack_psn.get();
        self.ack_psn.set((w & !MASK24) | (v & MASK24));
    }
}

impl std::fmt::Debug for Bth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bth")
            .field("opcode", &self.opcode)
            .field("se", &self.solicited())
            .field("mig_req", &self.mig_req())
            .field("pad", &self.pad_count())
            .field("tver", &self.transport_version())
            .field("pkey", &self.pkey())
            .field("dest_qp", &self.dest_qp())
            .field("ack_req", &self.ack_req())
            .field("psn", &self.psn())
            .finish()
    }
}

/// RDMA Extended Transport Header (16 bytes): WRITE and READ requests.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct Reth {
    pub va: U64,
    pub rkey: U32,
    pub dma_len: U32,
}

impl Reth {
    pub fn new(va: u64, rkey: u32, dma_len: u32) -> Reth {
        Reth {
            va: va.into(),
            rkey: rkey.into(),
            dma_len: dma_len.into(),
        }
    }
}

/// Atomic Extended Transport Header (28 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct AtomicEth {
    pub va: U64,
    pub rkey: U32,
    /// The value to swap in, or to add.
    pub swap_add: U64,
    pub compare: U64,
}

impl AtomicEth {
    pub fn new(va: u64, rkey: u32, swap_add: u64, compare: u64) -> AtomicEth {
        AtomicEth {
            va: va.into(),
            rkey: rkey.into(),
            swap_add: swap_add.into(),
            compare: compare.into(),
        }
    }
}

/// Atomic Acknowledge Extended Transport Header (8 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct AtomicAckEth {
    /// The target's value before the atomic.
    pub orig: U64,
}

/// Immediate data (4 bytes), opaque to the transport.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct ImmDt {
    pub imm: [u8; 4],
}

/// Datagram Extended Transport Header (8 bytes), UD only.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Deth {
    pub qkey: U32,
    resv: u8,
    src_qp: [u8; 3],
}

impl Deth {
    pub fn new(qkey: u32, src_qp: u32) -> Deth {
        Deth {
            qkey: qkey.into(),
            resv: 0,
            src_qp: to_be24(src_qp),
        }
    }
    pub fn src_qp(&self) -> u32 {
        be24(self.src_qp)
    }
}

impl std::fmt::Debug for Deth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deth")
            .field("qkey", &self.qkey.get())
            .field("src_qp", &self.src_qp())
            .finish()
    }
}

/// NAK codes (IBA 9.7.5.2.4, table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

impl NakCode {
    const ALL: [NakCode; 5] = [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
        NakCode::InvalidRdRequest,
    ];
}

/// The meaning of an AETH syndrome (IBA 9.7.5.2.4, table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement; `credits` is the 5-bit credit code
    /// ([`NO_CREDIT_LIMIT`] when the responder does not count credits).
    Ack {
        credits: u8,
    },
    /// Receiver not ready; `timer` is the 5-bit RNR timer code.
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
}

/// Credit code meaning "end-to-end flow control not in use".
pub const NO_CREDIT_LIMIT: u8 = 0b1_1111;
const SYN_VALUE: u8 = 0b1_1111;
const SYN_KIND_SHIFT: u8 = 5;
const SYN_ACK: u8 = 0b00;
const SYN_RNR: u8 = 0b01;
const SYN_NAK: u8 = 0b11;

impl Syndrome {
    pub fn raw(self) -> u8 {
        let (kind, value) = match self {
            Syndrome::Ack { credits } => (SYN_ACK, credits),
            Syndrome::RnrNak { timer } => (SYN_RNR, timer),
            Syndrome::Nak(c) => (SYN_NAK, c as u8),
        };
        kind << SYN_KIND_SHIFT | (value & SYN_VALUE)
    }

    pub fn from_raw(raw: u8) -> Result<Syndrome, WireError> {
        let value = raw & SYN_VALUE;
        match raw >> SYN_KIND_SHIFT {
            SYN_ACK => Ok(Syndrome::Ack { credits: value }),
            SYN_RNR => Ok(Syndrome::RnrNak { timer: value }),
            SYN_NAK => NakCode::ALL
                .get(usize::from(value))
                .map(|c| Syndrome::Nak(*c))
                .ok_or(WireError::BadAethSyndrome(raw)),
            _ => Err(WireError::BadAethSyndrome(raw)),
        }
    }
}

/// ACK Extended Transport Header (4 bytes).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Aeth {
    syndrome: u8,
    msn: [u8; 3],
}

impl Aeth {
    pub fn new(syndrome: Syndrome, msn: u32) -> Aeth {
        Aeth {
            syndrome: syndrome.raw(),
            msn: to_be24(msn),
        }
    }
    /// The syndrome; parsed packets always hold a valid one.
    pub fn syndrome(&self) -> Result<Syndrome, WireError> {
        Syndrome::from_raw(self.syndrome)
    }
    pub fn msn(&self) -> u32 {
        be24(self.msn)
    }
}

impl std::fmt::Debug for Aeth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aeth")
            .field("syndrome", &self.syndrome())
            .field("msn", &self.msn())
            .finish()
    }
}
