//! Whole RoCEv2 packets (the UDP payload): zero-copy parse, and encode into
//! a caller's buffer without allocating.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::error::WireError;
use super::flow::Flow;
use super::headers::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ImmDt, Reth};
use super::icrc::{icrc_after, IcrcCache, ICRC_LEN};
use super::opcode::{BthOpcode, Extensions};

/// Payload is padded to a multiple of this many bytes.
const ALIGN: usize = 4;

/// A packet parsed in place: every header borrows the received bytes.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    pub opcode: BthOpcode,
    pub bth: &'a Bth,
    pub deth: Option<&'a Deth>,
    pub reth: Option<&'a Reth>,
    pub atomic_eth: Option<&'a AtomicEth>,
    pub aeth: Option<&'a Aeth>,
    pub atomic_ack_eth: Option<&'a AtomicAckEth>,
    pub imm: Option<&'a ImmDt>,
    /// The payload without its pad bytes.
    pub payload: &'a [u8],
    pub icrc: [u8; ICRC_LEN],
}

/// Takes a `T` off the front of `rest` when `present`.
fn take<'a, T>(
    rest: &mut &'a [u8],
    present: bool,
    what: &'static str,
) -> Result<Option<&'a T>, WireError>
where
    T: FromBytes + KnownLayout + Immutable,
{
    if !present {
        return Ok(None);
    }
    match T::ref_from_prefix(rest) {
        Ok((h, tail)) => {
            *rest = tail;
            Ok(Some(h))
        }
        Err(_) => Err(WireError::Truncated {
            what,
            need: std::mem::size_of::<T>(),
            have: rest.len(),
        }),
    }
}

impl<'a> Packet<'a> {
    /// Parses a RoCEv2 UDP payload (BTH to ICRC), checking its structure;
    /// the ICRC is not checked (see [`Packet::parse_checked`]).
    pub fn parse(roce: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let mut rest = roce;
        let bth: &Bth = take(&mut rest, true, "BTH")?.ok_or(WireError::Truncated {
            what: "BTH",
            need: std::mem::size_of::<Bth>(),
            have: roce.len(),
        })?;
        let opcode = BthOpcode::from_raw(bth.opcode())?;
        if bth.transport_version() != 0 {
            return Err(WireError::BadTransportVersion(bth.transport_version()));
        }
        let x = opcode.extensions();
        let deth = take(&mut rest, x.deth, "DETH")?;
        let reth = take(&mut rest, x.reth, "RETH")?;
        let atomic_eth = take(&mut rest, x.atomic_eth, "AtomicETH")?;
        let aeth: Option<&Aeth> = take(&mut rest, x.aeth, "AETH")?;
        if let Some(a) = aeth {
            a.syndrome()?;
        }
        let atomic_ack_eth = take(&mut rest, x.atomic_ack_eth, "AtomicAckETH")?;
        let imm = take(&mut rest, x.imm, "ImmDt")?;
        let Some(padded_len) = rest.len().checked_sub(ICRC_LEN) else {
            return Err(WireError::Truncated {
                what: "ICRC",
                need: ICRC_LEN,
                have: rest.len(),
            });
        };
        if !roce.len().is_multiple_of(ALIGN) {
            return Err(WireError::Unaligned(roce.len()));
        }
        if !x.payload && padded_len != 0 {
            return Err(WireError::UnexpectedPayload {
                opcode,
                len: padded_len,
            });
        }
        let pad = bth.pad_count();
        let Some(len) = padded_len.checked_sub(usize::from(pad)) else {
            return Err(WireError::BadPad {
                pad,
                len: padded_len,
            });
        };
        let (payload, tail) = rest.split_at(len);
        let mut crc = [0u8; ICRC_LEN];
        crc.copy_from_slice(&tail[usize::from(pad)..]);
        Ok(Packet {
            opcode,
            bth,
            deth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            imm,
            payload,
            icrc: crc,
        })
    }

    /// Parses a packet received on `flow` and checks its ICRC against the
    /// IP and UDP headers that flow's datagrams carry.
    pub fn parse_checked(flow: &Flow, roce: &'a [u8]) -> Result<Packet<'a>, WireError> {
        Packet::parse_cached(&mut IcrcCache::default(), flow, roce)
    }

    /// [`Packet::parse_checked`], reusing the ICRC prefix `cache` keeps.
    pub(crate) fn parse_cached(
        cache: &mut IcrcCache,
        flow: &Flow,
        roce: &'a [u8],
    ) -> Result<Packet<'a>, WireError> {
        let p = Packet::parse(roce)?;
        let prefix = cache.prefix(flow, roce.len())?;
        let computed = icrc_after(prefix, &roce[..roce.len() - ICRC_LEN])?;
        if computed != p.icrc {
            return Err(WireError::IcrcMismatch {
                carried: u32::from_be_bytes(p.icrc),
                computed: u32::from_be_bytes(computed),
            });
        }
        Ok(p)
    }

    /// The headers, copied out.
    pub fn headers(&self) -> Headers {
        Headers {
            bth: *self.bth,
            deth: self.deth.copied(),
            reth: self.reth.copied(),
            atomic_eth: self.atomic_eth.copied(),
            aeth: self.aeth.copied(),
            atomic_ack_eth: self.atomic_ack_eth.copied(),
            imm: self.imm.copied(),
        }
    }
}

/// The headers of a packet to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    /// Its pad count is set by the encoder.
    pub bth: Bth,
    pub deth: Option<Deth>,
    pub reth: Option<Reth>,
    pub atomic_eth: Option<AtomicEth>,
    pub aeth: Option<Aeth>,
    pub atomic_ack_eth: Option<AtomicAckEth>,
    pub imm: Option<ImmDt>,
}

/// Appends `h` to `out` at `*at` when present.
fn put<T: IntoBytes + Immutable>(out: &mut [u8], at: &mut usize, h: &Option<T>) {
    if let Some(h) = h {
        let b = h.as_bytes();
        out[*at..*at + b.len()].copy_from_slice(b);
        *at += b.len();
    }
}

fn size_if<T>(h: &Option<T>) -> usize {
    h.as_ref().map_or(0, |_| std::mem::size_of::<T>())
}

impl Headers {
    /// Just a BTH; add the extension headers its opcode needs.
    pub fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm: None,
        }
    }

    /// Bytes of the BTH and the extension headers.
    pub fn len(&self) -> usize {
        std::mem::size_of::<Bth>()
            + size_if(&self.deth)
            + size_if(&self.reth)
            + size_if(&self.atomic_eth)
            + size_if(&self.aeth)
            + size_if(&self.atomic_ack_eth)
            + size_if(&self.imm)
    }

    /// Never: a BTH is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The opcode, checked against the extension headers present.
    pub fn check(&self) -> Result<(BthOpcode, Extensions), WireError> {
        let opcode = BthOpcode::from_raw(self.bth.opcode())?;
        let x = opcode.extensions();
        let have = [
            ("DETH", x.deth, self.deth.is_some()),
            ("RETH", x.reth, self.reth.is_some()),
            ("AtomicETH", x.atomic_eth, self.atomic_eth.is_some()),
            ("AETH", x.aeth, self.aeth.is_some()),
            (
                "AtomicAckETH",
                x.atomic_ack_eth,
                self.atomic_ack_eth.is_some(),
            ),
            ("ImmDt", x.imm, self.imm.is_some()),
        ];
        for (header, required, present) in have {
            if required != present {
                return Err(WireError::HeaderMismatch {
                    opcode,
                    header,
                    required,
                });
            }
        }
        if let Some(a) = &self.aeth {
            a.syndrome()?;
        }
        Ok((opcode, x))
    }

    /// The packet's length with `payload_len` payload bytes.
    pub fn packet_len(&self, payload_len: usize) -> usize {
        self.len() + payload_len.next_multiple_of(ALIGN) + ICRC_LEN
    }

    /// Writes the packet for `flow` with `payload_len` payload bytes into
    /// `out`: headers, then `fill` writes the payload into its slot (straight
    /// from where it lives, no copy in between), then pad and ICRC. Returns
    /// the packet's length.
    pub fn encode_with(
        &self,
        flow: &Flow,
        payload_len: usize,
        out: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, WireError> {
        self.encode_cached(&mut IcrcCache::default(), flow, payload_len, out, fill)
    }

    /// [`Headers::encode_with`], reusing the ICRC prefix `cache` keeps.
    pub(crate) fn encode_cached(
        &self,
        cache: &mut IcrcCache,
        flow: &Flow,
        payload_len: usize,
        out: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, WireError> {
        let (opcode, x) = self.check()?;
        if !x.payload && payload_len != 0 {
            return Err(WireError::UnexpectedPayload {
                opcode,
                len: payload_len,
            });
        }
        let total = self.packet_len(payload_len);
        let prefix = cache.prefix(flow, total)?;
        let have = out.len();
        let out = out
            .get_mut(..total)
            .ok_or(WireError::BufferTooSmall { need: total, have })?;
        let pad = total - ICRC_LEN - self.len() - payload_len;
        let mut bth = self.bth;
        bth.set_pad_count(pad as u8);
        let mut at = 0;
        put(out, &mut at, &Some(bth));
        put(out, &mut at, &self.deth);
        put(out, &mut at, &self.reth);
        put(out, &mut at, &self.atomic_eth);
        put(out, &mut at, &self.aeth);
        put(out, &mut at, &self.atomic_ack_eth);
        put(out, &mut at, &self.imm);
        fill(&mut out[at..at + payload_len]);
        at += payload_len;
        out[at..at + pad].fill(0);
        at += pad;
        let crc = icrc_after(prefix, &out[..at])?;
        out[at..].copy_from_slice(&crc);
        Ok(total)
    }

    /// [`Headers::encode_with`] copying `payload`.
    pub fn encode(&self, flow: &Flow, payload: &[u8], out: &mut [u8]) -> Result<usize, WireError> {
        self.encode_with(flow, payload.len(), out, |slot| {
            slot.copy_from_slice(payload)
        })
    }
}
