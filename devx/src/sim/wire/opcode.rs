//! BTH opcodes: the transport service in the top three bits, the operation
//! in the low five (IBA 9.2, table 38), and the extension headers each one
//! carries (IBA 9.2, table 39).

use std::fmt;

use super::error::WireError;

/// Transport service of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Rc,
    Uc,
    Ud,
}

impl Service {
    /// The service's opcode prefix (opcode bits 7..5).
    const fn prefix(self) -> u8 {
        match self {
            Service::Rc => 0,
            Service::Uc => 1,
            Service::Ud => 3,
        }
    }

    fn from_prefix(p: u8) -> Option<Service> {
        [Service::Rc, Service::Uc, Service::Ud]
            .into_iter()
            .find(|s| s.prefix() == p)
    }
}

/// Bits of the opcode below the service prefix.
const OP_BITS: u32 = 5;
const OP_MASK: u8 = (1 << OP_BITS) - 1;

/// The operation part of an opcode; the discriminant is its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Operation {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendLastImm = 0x03,
    SendOnly = 0x04,
    SendOnlyImm = 0x05,
    WriteFirst = 0x06,
    WriteMiddle = 0x07,
    WriteLast = 0x08,
    WriteLastImm = 0x09,
    WriteOnly = 0x0a,
    WriteOnlyImm = 0x0b,
    ReadRequest = 0x0c,
    ReadResponseFirst = 0x0d,
    ReadResponseMiddle = 0x0e,
    ReadResponseLast = 0x0f,
    ReadResponseOnly = 0x10,
    Acknowledge = 0x11,
    AtomicAcknowledge = 0x12,
    CompareSwap = 0x13,
    FetchAdd = 0x14,
}

impl Operation {
    pub const ALL: [Operation; 21] = {
        use Operation::*;
        [
            SendFirst,
            SendMiddle,
            SendLast,
            SendLastImm,
            SendOnly,
            SendOnlyImm,
            WriteFirst,
            WriteMiddle,
            WriteLast,
            WriteLastImm,
            WriteOnly,
            WriteOnlyImm,
            ReadRequest,
            ReadResponseFirst,
            ReadResponseMiddle,
            ReadResponseLast,
            ReadResponseOnly,
            Acknowledge,
            AtomicAcknowledge,
            CompareSwap,
            FetchAdd,
        ]
    };

    fn from_code(code: u8) -> Option<Operation> {
        Operation::ALL.get(usize::from(code)).copied()
    }

    /// Whether service `s` may use this operation.
    fn allowed_on(self, s: Service) -> bool {
        use Operation::*;
        match s {
            Service::Rc => true,
            Service::Uc => (self as u8) <= (WriteOnlyImm as u8),
            Service::Ud => matches!(self, SendOnly | SendOnlyImm),
        }
    }
}

/// Which extension headers follow the BTH, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extensions {
    pub deth: bool,
    pub reth: bool,
    pub atomic_eth: bool,
    pub aeth: bool,
    pub atomic_ack_eth: bool,
    pub imm: bool,
    /// Whether a payload may follow the headers.
    pub payload: bool,
}

/// A valid BTH opcode: a service and an operation that service allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthOpcode {
    service: Service,
    op: Operation,
}

impl BthOpcode {
    /// The opcode for `op` on `service`, if that service allows it.
    pub fn new(service: Service, op: Operation) -> Result<BthOpcode, WireError> {
        let o = BthOpcode { service, op };
        if op.allowed_on(service) {
            Ok(o)
        } else {
            Err(WireError::UnsupportedOpcode(o.raw()))
        }
    }

    pub fn from_raw(raw: u8) -> Result<BthOpcode, WireError> {
        let service = Service::from_prefix(raw >> OP_BITS);
        let op = Operation::from_code(raw & OP_MASK);
        match (service, op) {
            (Some(s), Some(o)) if o.allowed_on(s) => Ok(BthOpcode { service: s, op: o }),
            _ => Err(WireError::UnsupportedOpcode(raw)),
        }
    }

    pub const fn raw(self) -> u8 {
        self.service.prefix() << OP_BITS | self.op as u8
    }

    pub fn service(self) -> Service {
        self.service
    }

    pub fn operation(self) -> Operation {
        self.op
    }

    /// The headers and payload this opcode carries.
    pub fn extensions(self) -> Extensions {
        use Operation::*;
        let op = self.op;
        Extensions {
            deth: self.service == Service::Ud,
            reth: matches!(op, WriteFirst | WriteOnly | WriteOnlyImm | ReadRequest),
            atomic_eth: matches!(op, CompareSwap | FetchAdd),
            aeth: matches!(
                op,
                ReadResponseFirst
                    | ReadResponseLast
                    | ReadResponseOnly
                    | Acknowledge
                    | AtomicAcknowledge
            ),
            atomic_ack_eth: op == AtomicAcknowledge,
            imm: matches!(op, SendLastImm | SendOnlyImm | WriteLastImm | WriteOnlyImm),
            payload: !matches!(
                op,
                ReadRequest | Acknowledge | AtomicAcknowledge | CompareSwap | FetchAdd
            ),
        }
    }
}

impl fmt::Display for BthOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {:?} ({:#04x})", self.service, self.op, self.raw())
    }
}
