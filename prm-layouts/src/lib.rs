//! Typed mlx5 PRM layouts.
//!
//! Every command mailbox, object context, capability page and data-path
//! segment is a `#[repr(C)]` byte array newtype (`CreateCqIn(pub [u8; 272])`)
//! with zero-copy accessors generated from the declarative files in `spec/`.
//! Field positions follow the PRM convention: bits are numbered MSB-first
//! inside big-endian dwords.
//!
//! * Typed access: `cqc.log_cq_size()`, `cqc.set_log_cq_size(5)` (masks to the
//!   field width like `DEVX_SET`), `try_set_log_cq_size` (rejects wide values),
//!   nested layouts by reference (`create_cq_in.cq_context_mut()`).
//! * By-name access through [`LayoutMeta`] for tools and fixtures.
//! * [`registry`], [`find`] and [`mailbox_layouts`] to look layouts up at run time.
//! * [`commands`]: per opcode, the DEVX method class, the object made or
//!   named and the field carrying its number, and how its destroy is built.
//! * [`bytes`]: big-endian reads at byte offsets, for bytes no layout covers.
//!
//! ```
//! use prm_layouts::{find, mailbox_layouts, CreateCqIn, Opcode};
//!
//! let mut m = CreateCqIn::new();
//! m.set_opcode(Opcode::CreateCq.raw());
//! m.cq_context_mut().set_log_cq_size(6);
//! assert_eq!(m.cq_context().log_cq_size(), 6);
//! assert!(m.cq_context_mut().try_set_log_cq_size(64).is_err(), "5 bits wide");
//!
//! // The same field by name, as tools and fixtures reach it.
//! let meta = find("create_cq_in").expect("a known layout");
//! let v = meta.get(m.as_bytes(), "cq_context.log_cq_size").unwrap();
//! assert_eq!(v.as_u64(), Some(6));
//! let f = meta.field("cq_context.log_cq_size").unwrap();
//! println!("{}: {} bits at bit {}", f.name, f.width_bits, f.offset_bits);
//! let (inbox, _outbox) = mailbox_layouts(Opcode::CreateCq.raw()).unwrap();
//! assert_eq!(inbox.name, "create_cq_in");
//! ```

#![forbid(unsafe_code)]

pub mod bits;
pub mod bytes;
pub mod commands;
pub mod enums;
mod meta;
mod rt;
pub mod words;

pub use enums::*;
pub use meta::{
    FieldKind, FieldMeta, FieldOverflow, FieldValue, LayoutError, LayoutMeta, TailMeta,
};

/// Generated layout types (also re-exported at the crate root).
// Field names follow the PRM (some are mixed case, `len` is a field, not a
// length), and `Default` is written out because arrays over 32 bytes lack it.
#[allow(
    missing_docs,
    non_snake_case,
    clippy::derivable_impls,
    clippy::len_without_is_empty
)]
pub mod layouts {
    use crate::meta::{FieldKind, FieldMeta, LayoutMeta, TailMeta};
    use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

    include!(concat!(env!("OUT_DIR"), "/layouts.rs"));
}

pub use layouts::*;

/// Every layout's metadata, sorted by name.
#[must_use]
pub fn registry() -> &'static [&'static LayoutMeta] {
    &layouts::REGISTRY
}

/// Layout metadata by spec name (`create_cq_in`).
#[must_use]
pub fn find(name: &str) -> Option<&'static LayoutMeta> {
    let r = registry();
    r.binary_search_by(|m| m.name.cmp(name)).ok().map(|i| r[i])
}

/// Up to `n` layout names closest to `name`, best first.
#[must_use]
pub fn nearest_layouts(name: &str, n: usize) -> Vec<&'static str> {
    meta::nearest(registry().iter().map(|m| m.name), name, n)
}

macro_rules! mailboxes {
    ($($op:ident => $inp:ident, $outp:ident;)*) => {
        /// Input and output mailbox layouts of a command opcode.
        ///
        /// For general-object commands the object context is the tail of the
        /// returned layouts.
        #[must_use]
        pub fn mailbox_layouts(opcode: u16) -> Option<(&'static LayoutMeta, &'static LayoutMeta)> {
            $(
                if opcode == Opcode::$op as u16 {
                    return Some(($inp::META, $outp::META));
                }
            )*
            None
        }

        /// Every opcode that [`mailbox_layouts`] knows.
        pub const MAILBOX_OPCODES: &[Opcode] = &[$(Opcode::$op),*];
    };
}

mailboxes! {
    QueryHcaCap => QueryHcaCapIn, QueryHcaCapOut;
    QueryAdapter => QueryAdapterIn, QueryAdapterOut;
    InitHca => InitHcaIn, InitHcaOut;
    TeardownHca => TeardownHcaIn, TeardownHcaOut;
    EnableHca => EnableHcaIn, EnableHcaOut;
    DisableHca => DisableHcaIn, DisableHcaOut;
    QueryPages => QueryPagesIn, QueryPagesOut;
    ManagePages => ManagePagesIn, ManagePagesOut;
    SetHcaCap => SetHcaCapIn, SetHcaCapOut;
    QueryIssi => QueryIssiIn, QueryIssiOut;
    SetIssi => SetIssiIn, SetIssiOut;
    CreateMkey => CreateMkeyIn, CreateMkeyOut;
    QueryMkey => QueryMkeyIn, QueryMkeyOut;
    DestroyMkey => DestroyMkeyIn, DestroyMkeyOut;
    CreateEq => CreateEqIn, CreateEqOut;
    DestroyEq => DestroyEqIn, DestroyEqOut;
    QueryEq => QueryEqIn, QueryEqOut;
    CreateCq => CreateCqIn, CreateCqOut;
    DestroyCq => DestroyCqIn, DestroyCqOut;
    QueryCq => QueryCqIn, QueryCqOut;
    ModifyCq => ModifyCqIn, ModifyCqOut;
    CreateQp => CreateQpIn, CreateQpOut;
    DestroyQp => DestroyQpIn, DestroyQpOut;
    Rst2initQp => Rst2initQpIn, Rst2initQpOut;
    Init2rtrQp => Init2rtrQpIn, Init2rtrQpOut;
    Rtr2rtsQp => Rtr2rtsQpIn, Rtr2rtsQpOut;
    Rts2rtsQp => Rts2rtsQpIn, Rts2rtsQpOut;
    Sqerr2rtsQp => Sqerr2rtsQpIn, Sqerr2rtsQpOut;
    Qp2Err => Qp2errIn, Qp2errOut;
    Qp2Rst => Qp2rstIn, Qp2rstOut;
    QueryQp => QueryQpIn, QueryQpOut;
    SqdRtsQp => SqdRtsQpIn, SqdRtsQpOut;
    MadIfc => MadIfcIn, MadIfcOut;
    Init2initQp => Init2initQpIn, Init2initQpOut;
    CreateSrq => CreateSrqIn, CreateSrqOut;
    DestroySrq => DestroySrqIn, DestroySrqOut;
    QuerySrq => QuerySrqIn, QuerySrqOut;
    ArmRq => ArmRqIn, ArmRqOut;
    CreateXrcSrq => CreateXrcSrqIn, CreateXrcSrqOut;
    DestroyXrcSrq => DestroyXrcSrqIn, DestroyXrcSrqOut;
    QueryXrcSrq => QueryXrcSrqIn, QueryXrcSrqOut;
    ArmXrcSrq => ArmXrcSrqIn, ArmXrcSrqOut;
    CreateDct => CreateDctIn, CreateDctOut;
    DestroyDct => DestroyDctIn, DestroyDctOut;
    QueryDct => QueryDctIn, QueryDctOut;
    QueryVportState => QueryVportStateIn, QueryVportStateOut;
    QueryNicVportContext => QueryNicVportContextIn, QueryNicVportContextOut;
    ModifyNicVportContext => ModifyNicVportContextIn, ModifyNicVportContextOut;
    QueryRoceAddress => QueryRoceAddressIn, QueryRoceAddressOut;
    QueryHcaVportContext => QueryHcaVportContextIn, QueryHcaVportContextOut;
    QueryHcaVportGid => QueryHcaVportGidIn, QueryHcaVportGidOut;
    AllocQCounter => AllocQCounterIn, AllocQCounterOut;
    DeallocQCounter => DeallocQCounterIn, DeallocQCounterOut;
    QueryQCounter => QueryQCounterIn, QueryQCounterOut;
    AllocPd => AllocPdIn, AllocPdOut;
    DeallocPd => DeallocPdIn, DeallocPdOut;
    AllocUar => AllocUarIn, AllocUarOut;
    DeallocUar => DeallocUarIn, DeallocUarOut;
    AccessReg => AccessRegisterIn, AccessRegisterOut;
    AttachToMcg => AttachToMcgIn, AttachToMcgOut;
    DetachFromMcg => DetachFromMcgIn, DetachFromMcgOut;
    Nop => NopIn, NopOut;
    AllocXrcd => AllocXrcdIn, AllocXrcdOut;
    DeallocXrcd => DeallocXrcdIn, DeallocXrcdOut;
    AllocTransportDomain => AllocTransportDomainIn, AllocTransportDomainOut;
    DeallocTransportDomain => DeallocTransportDomainIn, DeallocTransportDomainOut;
    CreateTir => CreateTirIn, CreateTirOut;
    ModifyTir => ModifyTirIn, ModifyTirOut;
    DestroyTir => DestroyTirIn, DestroyTirOut;
    QueryTir => QueryTirIn, QueryTirOut;
    CreateSq => CreateSqIn, CreateSqOut;
    ModifySq => ModifySqIn, ModifySqOut;
    DestroySq => DestroySqIn, DestroySqOut;
    QuerySq => QuerySqIn, QuerySqOut;
    CreateRq => CreateRqIn, CreateRqOut;
    ModifyRq => ModifyRqIn, ModifyRqOut;
    DestroyRq => DestroyRqIn, DestroyRqOut;
    QueryRq => QueryRqIn, QueryRqOut;
    CreateRmp => CreateRmpIn, CreateRmpOut;
    ModifyRmp => ModifyRmpIn, ModifyRmpOut;
    DestroyRmp => DestroyRmpIn, DestroyRmpOut;
    QueryRmp => QueryRmpIn, QueryRmpOut;
    CreateTis => CreateTisIn, CreateTisOut;
    ModifyTis => ModifyTisIn, ModifyTisOut;
    DestroyTis => DestroyTisIn, DestroyTisOut;
    QueryTis => QueryTisIn, QueryTisOut;
    CreateRqt => CreateRqtIn, CreateRqtOut;
    ModifyRqt => ModifyRqtIn, ModifyRqtOut;
    DestroyRqt => DestroyRqtIn, DestroyRqtOut;
    QueryRqt => QueryRqtIn, QueryRqtOut;
    CreateFlowTable => CreateFlowTableIn, CreateFlowTableOut;
    DestroyFlowTable => DestroyFlowTableIn, DestroyFlowTableOut;
    QueryFlowTable => QueryFlowTableIn, QueryFlowTableOut;
    CreateFlowGroup => CreateFlowGroupIn, CreateFlowGroupOut;
    DestroyFlowGroup => DestroyFlowGroupIn, DestroyFlowGroupOut;
    QueryFlowGroup => QueryFlowGroupIn, QueryFlowGroupOut;
    SetFlowTableEntry => SetFteIn, SetFteOut;
    QueryFlowTableEntry => QueryFteIn, QueryFteOut;
    DeleteFlowTableEntry => DeleteFteIn, DeleteFteOut;
    AllocFlowCounter => AllocFlowCounterIn, AllocFlowCounterOut;
    DeallocFlowCounter => DeallocFlowCounterIn, DeallocFlowCounterOut;
    QueryFlowCounter => QueryFlowCounterIn, QueryFlowCounterOut;
    CreateGeneralObject => CreateGeneralObjectIn, CreateGeneralObjectOut;
    ModifyGeneralObject => ModifyGeneralObjectIn, ModifyGeneralObjectOut;
    QueryGeneralObject => QueryGeneralObjectIn, QueryGeneralObjectOut;
    DestroyGeneralObject => DestroyGeneralObjectIn, DestroyGeneralObjectOut;
    CreateUmem => CreateUmemIn, CreateUmemOut;
    DestroyUmem => DestroyUmemIn, DestroyUmemOut;
}
