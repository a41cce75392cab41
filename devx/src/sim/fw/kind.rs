//! The kinds of firmware objects the emulator tracks.

use std::fmt;

/// A kind of firmware object. The code appears in the low byte of the
/// per-kind syndromes (see `sim::syndrome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjKind {
    Uctx,
    Pd,
    TransportDomain,
    Uar,
    Umem,
    Eq,
    Cq,
    Qp,
    Mkey,
    Srq,
    XrcSrq,
    Rmp,
    Xrcd,
    Sq,
    Rq,
    Tir,
    Tis,
    Rqt,
    FlowTable,
    FlowGroup,
    FlowEntry,
    FlowCounter,
    QCounter,
    GeneralObj,
    McgAttach,
}

impl ObjKind {
    /// Every kind, in code order.
    pub const ALL: &'static [ObjKind] = &[
        ObjKind::Uctx,
        ObjKind::Pd,
        ObjKind::TransportDomain,
        ObjKind::Uar,
        ObjKind::Umem,
        ObjKind::Eq,
        ObjKind::Cq,
        ObjKind::Qp,
        ObjKind::Mkey,
        ObjKind::Srq,
        ObjKind::XrcSrq,
        ObjKind::Rmp,
        ObjKind::Xrcd,
        ObjKind::Sq,
        ObjKind::Rq,
        ObjKind::Tir,
        ObjKind::Tis,
        ObjKind::Rqt,
        ObjKind::FlowTable,
        ObjKind::FlowGroup,
        ObjKind::FlowEntry,
        ObjKind::FlowCounter,
        ObjKind::QCounter,
        ObjKind::GeneralObj,
        ObjKind::McgAttach,
    ];

    /// Stable code used in syndromes.
    pub fn code(self) -> u32 {
        match self {
            ObjKind::Uctx => 0x00,
            ObjKind::Pd => 0x01,
            ObjKind::TransportDomain => 0x02,
            ObjKind::Uar => 0x03,
            ObjKind::Umem => 0x04,
            ObjKind::Eq => 0x05,
            ObjKind::Cq => 0x06,
            ObjKind::Qp => 0x07,
            ObjKind::Mkey => 0x08,
            ObjKind::Srq => 0x09,
            ObjKind::XrcSrq => 0x0a,
            ObjKind::Rmp => 0x0b,
            ObjKind::Xrcd => 0x0c,
            ObjKind::Sq => 0x0d,
            ObjKind::Rq => 0x0e,
            ObjKind::Tir => 0x0f,
            ObjKind::Tis => 0x10,
            ObjKind::Rqt => 0x11,
            ObjKind::FlowTable => 0x12,
            ObjKind::FlowGroup => 0x13,
            ObjKind::FlowEntry => 0x14,
            ObjKind::FlowCounter => 0x15,
            ObjKind::QCounter => 0x16,
            ObjKind::GeneralObj => 0x17,
            ObjKind::McgAttach => 0x18,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Uctx => "uctx",
            ObjKind::Pd => "pd",
            ObjKind::TransportDomain => "transport_domain",
            ObjKind::Uar => "uar",
            ObjKind::Umem => "umem",
            ObjKind::Eq => "eq",
            ObjKind::Cq => "cq",
            ObjKind::Qp => "qp",
            ObjKind::Mkey => "mkey",
            ObjKind::Srq => "srq",
            ObjKind::XrcSrq => "xrc_srq",
            ObjKind::Rmp => "rmp",
            ObjKind::Xrcd => "xrcd",
            ObjKind::Sq => "sq",
            ObjKind::Rq => "rq",
            ObjKind::Tir => "tir",
            ObjKind::Tis => "tis",
            ObjKind::Rqt => "rqt",
            ObjKind::FlowTable => "flow_table",
            ObjKind::FlowGroup => "flow_group",
            ObjKind::FlowEntry => "flow_entry",
            ObjKind::FlowCounter => "flow_counter",
            ObjKind::QCounter => "q_counter",
            ObjKind::GeneralObj => "general_object",
            ObjKind::McgAttach => "mcg_attach",
        }
    }

    /// Objects a DEVX user creates (counted by `live_objects`); user contexts
    /// and the device's own completion EQs are not among them.
    pub fn is_user_object(self) -> bool {
        !matches!(self, ObjKind::Uctx | ObjKind::Eq)
    }
}

impl fmt::Display for ObjKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
