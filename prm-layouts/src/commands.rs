//! The command registry: for every command DEVX knows, the method class
//! it goes through, the object it creates, destroys, queries or modifies,
//! and the mailbox field that carries that object's number.
//!
//! This is the table the kernel's `devx.c` spreads over its
//! `devx_is_obj_create_cmd`, `devx_is_obj_modify_cmd`,
//! `devx_is_obj_query_cmd`, `devx_is_general_cmd`, `devx_obj_build_destroy_cmd`
//! and `devx_get_obj_id` switches, written once with opcode names and
//! typed-layout fields:
//!
//! ```
//! use prm_layouts::commands::{self, CmdClass};
//! use prm_layouts::{DestroyCqIn, Opcode};
//!
//! let c = commands::command(Opcode::QueryCq, 0).unwrap();
//! assert_eq!(c.class, CmdClass::Query);
//! let cq = c.object.unwrap();
//! assert_eq!(cq.create, Opcode::CreateCq);
//! assert_eq!(cq.destroy, Opcode::DestroyCq);
//! assert_eq!(cq.destroy_in.name, DestroyCqIn::META.name);
//! assert_eq!(cq.number.name, "cqn");
//! ```

use crate::layouts::*;
use crate::{FieldMeta, LayoutMeta, Opcode};

/// The DEVX method class of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmdClass {
    /// Makes an object (`MLX5_IB_METHOD_DEVX_OBJ_CREATE`).
    Create,
    /// Changes an object (`MLX5_IB_METHOD_DEVX_OBJ_MODIFY`).
    Modify,
    /// Reads an object (`MLX5_IB_METHOD_DEVX_OBJ_QUERY`).
    Query,
    /// Names no object (`MLX5_IB_METHOD_DEVX_OTHER`).
    General,
    /// Undoes a create. Only the kernel sends these, from the command it
    /// built at create time; DEVX refuses them on every method.
    Destroy,
}

impl CmdClass {
    /// Lower-case name, as error messages show it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            CmdClass::Create => "create",
            CmdClass::Modify => "modify",
            CmdClass::Query => "query",
            CmdClass::General => "general",
            CmdClass::Destroy => "destroy",
        }
    }
}

/// Which mailbox of a create carries the new object's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mailbox {
    /// The firmware answers the number (most objects).
    Out,
    /// The caller picks the number (a flow table entry's index, the QP
    /// attached to a multicast group).
    In,
}

/// A kind of firmware object DEVX tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectType {
    /// The command that makes it.
    pub create: Opcode,
    /// The command that undoes it.
    pub destroy: Opcode,
    /// The command that reads it back, if any.
    pub query: Option<Opcode>,
    /// The create mailbox holding the new number, and the field in it.
    pub created: (Mailbox, &'static FieldMeta),
    /// The destroy command's inbox.
    pub destroy_in: &'static LayoutMeta,
    /// The field of `destroy_in` that names the object.
    pub number: &'static FieldMeta,
    /// Fields of the create inbox that the destroy inbox repeats, because
    /// the number alone does not name the object (a flow object's table,
    /// a general object's type, a multicast group's GID).
    pub scope: &'static [(&'static FieldMeta, &'static FieldMeta)],
    /// True for general objects: the object type (the create's `op_mod`)
    /// is part of the identity, as numbers are per type.
    pub typed: bool,
}

/// One entry of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Command {
    /// The opcode.
    pub opcode: Opcode,
    /// The `op_mod` this entry is for; `None` for every `op_mod`.
    pub op_mod: Option<u16>,
    /// How DEVX admits it.
    pub class: CmdClass,
    /// The object it creates, destroys or names.
    pub object: Option<&'static ObjectType>,
    /// For queries, modifies and destroys: the inbox field that names the
    /// object. For creates: where the new number is (see [`ObjectType::created`]).
    pub names: Option<&'static FieldMeta>,
}

impl Command {
    /// The command's input and output mailbox layouts, where known.
    #[must_use]
    pub fn mailboxes(&self) -> Option<(&'static LayoutMeta, &'static LayoutMeta)> {
        crate::mailbox_layouts(self.opcode.raw())
    }
}

/// The header every inbox starts with.
pub mod header {
    use crate::{FieldMeta, MboxIn, MboxOut};

    /// `opcode`: bytes 0..2 of every inbox.
    pub const OPCODE: &FieldMeta = MboxIn::META.named("opcode");
    /// `uid`: the user context the kernel stamps into the inbox.
    pub const UID: &FieldMeta = MboxIn::META.named("uid");
    /// `op_mod` (the object type of general-object commands).
    pub const OP_MOD: &FieldMeta = MboxIn::META.named("op_mod");
    /// Bytes 4..6 of the inbox: reserved, except in general-object
    /// commands where they are `vhca_tunnel_id`.
    pub const VHCA_TUNNEL_ID: &FieldMeta = crate::GeneralObjInCmdHdr::META.named("vhca_tunnel_id");
    /// `status` of every outbox.
    pub const STATUS: &FieldMeta = MboxOut::META.named("status");
    /// `syndrome` of every outbox.
    pub const SYNDROME: &FieldMeta = MboxOut::META.named("syndrome");
}

// `object!(CREATE, DESTROY, query, In|Out CreateLayout."number", DestroyLayout."number"
//          [, scope [CreateLayout."field" => "destroy field", ...]] [, typed true])`:
// where the create's mailbox holds the new number, where the destroy takes it,
// and which create fields the destroy repeats.
macro_rules! object {
    ($create:ident, $destroy:ident, $query:expr,
     $mbox:ident $created:ident . $cf:literal,
     $din:ident . $df:literal $(, scope [$($from:ident . $ff:literal => $to:literal),*])?
     $(, typed $typed:literal)?) => {
        ObjectType {
            create: Opcode::$create,
            destroy: Opcode::$destroy,
            query: $query,
            created: (Mailbox::$mbox, $created::META.named($cf)),
            destroy_in: $din::META,
            number: $din::META.named($df),
            scope: &[$($(($from::META.named($ff), $din::META.named($to))),*)?],
            typed: false $(|| $typed)?,
        }
    };
}

/// Every object type DEVX tracks.
pub const OBJECTS: &[ObjectType] = &[
    object!(CreateMkey, DestroyMkey, Some(Opcode::QueryMkey), Out CreateMkeyOut."mkey_index", DestroyMkeyIn."mkey_index"),
    object!(CreateEq, DestroyEq, None, Out CreateEqOut."eq_number", DestroyEqIn."eq_number"),
    object!(CreateCq, DestroyCq, Some(Opcode::QueryCq), Out CreateCqOut."cqn", DestroyCqIn."cqn"),
    object!(CreateQp, DestroyQp, Some(Opcode::QueryQp), Out CreateQpOut."qpn", DestroyQpIn."qpn"),
    object!(CreateSrq, DestroySrq, Some(Opcode::QuerySrq), Out CreateSrqOut."srqn", DestroySrqIn."srqn"),
    object!(CreateXrcSrq, DestroyXrcSrq, Some(Opcode::QueryXrcSrq), Out CreateXrcSrqOut."xrc_srqn", DestroyXrcSrqIn."xrc_srqn"),
    object!(CreateDct, DestroyDct, Some(Opcode::QueryDct), Out CreateDctOut."dctn", DestroyDctIn."dctn"),
    object!(CreateXrq, DestroyXrq, Some(Opcode::QueryXrq), Out CreateXrqOut."xrqn", DestroyXrqIn."xrqn"),
    object!(AllocQCounter, DeallocQCounter, Some(Opcode::QueryQCounter), Out AllocQCounterOut."counter_set_id", DeallocQCounterIn."counter_set_id"),
    object!(AllocPd, DeallocPd, None, Out AllocPdOut."pd", DeallocPdIn."pd"),
    object!(AttachToMcg, DetachFromMcg, None, In AttachToMcgIn."qpn", DetachFromMcgIn."qpn",
        scope [AttachToMcgIn."multicast_gid" => "multicast_gid"]),
    object!(AllocXrcd, DeallocXrcd, None, Out AllocXrcdOut."xrcd", DeallocXrcdIn."xrcd"),
    object!(AllocTransportDomain, DeallocTransportDomain, None, Out AllocTransportDomainOut."transport_domain", DeallocTransportDomainIn."transport_domain"),
    object!(CreateTir, DestroyTir, Some(Opcode::QueryTir), Out CreateTirOut."tirn", DestroyTirIn."tirn"),
    object!(CreateSq, DestroySq, Some(Opcode::QuerySq), Out CreateSqOut."sqn", DestroySqIn."sqn"),
    object!(CreateRq, DestroyRq, Some(Opcode::QueryRq), Out CreateRqOut."rqn", DestroyRqIn."rqn"),
    object!(CreateRmp, DestroyRmp, Some(Opcode::QueryRmp), Out CreateRmpOut."rmpn", DestroyRmpIn."rmpn"),
    object!(CreateTis, DestroyTis, Some(Opcode::QueryTis), Out CreateTisOut."tisn", DestroyTisIn."tisn"),
    object!(CreateRqt, DestroyRqt, Some(Opcode::QueryRqt), Out CreateRqtOut."rqtn", DestroyRqtIn."rqtn"),
    object!(CreateFlowTable, DestroyFlowTable, Some(Opcode::QueryFlowTable), Out CreateFlowTableOut."table_id", DestroyFlowTableIn."table_id",
        scope [CreateFlowTableIn."other_vport" => "other_vport",
               CreateFlowTableIn."vport_number" => "vport_number",
               CreateFlowTableIn."table_type" => "table_type"]),
    object!(CreateFlowGroup, DestroyFlowGroup, Some(Opcode::QueryFlowGroup), Out CreateFlowGroupOut."group_id", DestroyFlowGroupIn."group_id",
        scope [CreateFlowGroupIn."other_vport" => "other_vport",
               CreateFlowGroupIn."vport_number" => "vport_number",
               CreateFlowGroupIn."table_type" => "table_type",
               CreateFlowGroupIn."table_id" => "table_id"]),
    object!(SetFlowTableEntry, DeleteFlowTableEntry, Some(Opcode::QueryFlowTableEntry), In SetFteIn."flow_index", DeleteFteIn."flow_index",
        scope [SetFteIn."other_vport" => "other_vport",
               SetFteIn."vport_number" => "vport_number",
               SetFteIn."table_type" => "table_type",
               SetFteIn."table_id" => "table_id"]),
    object!(AllocFlowCounter, DeallocFlowCounter, Some(Opcode::QueryFlowCounter), Out AllocFlowCounterOut."flow_counter_id", DeallocFlowCounterIn."flow_counter_id"),
    object!(AllocPacketReformatContext, DeallocPacketReformatContext, None, Out AllocPacketReformatContextOut."packet_reformat_id", DeallocPacketReformatContextIn."packet_reformat_id"),
    object!(AllocModifyHeaderContext, DeallocModifyHeaderContext, None, Out AllocModifyHeaderContextOut."modify_header_id", DeallocModifyHeaderContextIn."modify_header_id"),
    object!(CreateGeneralObject, DestroyGeneralObject, Some(Opcode::QueryGeneralObject), Out CreateGeneralObjectOut."obj_id", DestroyGeneralObjectIn."obj_id",
        scope [CreateGeneralObjectIn."obj_type" => "obj_type"], typed true),
];

/// The object type made by `create`.
#[must_use]
pub fn object(create: Opcode) -> Option<&'static ObjectType> {
    OBJECTS.iter().find(|o| o.create == create)
}

/// The object type made by `create`, for the constant table below.
const fn obj(create: Opcode) -> &'static ObjectType {
    let mut i = 0;
    while i < OBJECTS.len() {
        if OBJECTS[i].create as u16 == create as u16 {
            return &OBJECTS[i];
        }
        i += 1;
    }
    panic!("no object type for that create opcode");
}

// Optional macro arguments, as `Option`s in a constant.
const fn first_u16(v: &[u16]) -> Option<u16> {
    if v.is_empty() {
        None
    } else {
        Some(v[0])
    }
}

const fn first_obj(v: &[Opcode]) -> Option<&'static ObjectType> {
    if v.is_empty() {
        None
    } else {
        Some(obj(v[0]))
    }
}

const fn first_field(v: &[&'static FieldMeta]) -> Option<&'static FieldMeta> {
    if v.is_empty() {
        None
    } else {
        Some(v[0])
    }
}

// `CLASS OPCODE [op_mod N] [=> CREATE_OF_THE_OBJECT[.InLayout."number field"]];`
macro_rules! commands {
    ($($class:ident $op:ident $(op_mod $m:literal)? $(=> $obj:ident $(. $layout:ident . $field:literal)?)?;)*) => {
        &[$(Command {
            opcode: Opcode::$op,
            op_mod: first_u16(&[$($m)?]),
            class: CmdClass::$class,
            object: first_obj(&[$(Opcode::$obj)?]),
            names: first_field(&[$($($layout::META.named($field))?)?]),
        }),*]
    };
}

/// Every command DEVX admits or builds, by class: the lists of the
/// kernel's `devx.c`.
pub static COMMANDS: &[Command] = commands! {
    // Creates: the number is read from the create (see `ObjectType::created`).
    Create CreateMkey => CreateMkey;
    Create CreateCq => CreateCq;
    Create CreateQp => CreateQp;
    Create CreatePsv;
    Create CreateSrq => CreateSrq;
    Create CreateXrcSrq => CreateXrcSrq;
    Create CreateDct => CreateDct;
    Create CreateXrq => CreateXrq;
    Create AllocQCounter => AllocQCounter;
    Create CreateSchedulingElement;
    Create AllocPd => AllocPd;
    Create AttachToMcg => AttachToMcg;
    Create AllocXrcd => AllocXrcd;
    Create AllocTransportDomain => AllocTransportDomain;
    Create AddVxlanUdpDport;
    Create SetL2TableEntry;
    Create CreateTir => CreateTir;
    Create CreateSq => CreateSq;
    Create CreateRq => CreateRq;
    Create CreateRmp => CreateRmp;
    Create CreateTis => CreateTis;
    Create CreateRqt => CreateRqt;
    Create CreateFlowTable => CreateFlowTable;
    Create CreateFlowGroup => CreateFlowGroup;
    // SET_FLOW_TABLE_ENTRY creates with op_mod 0 and modifies with op_mod 1.
    Create SetFlowTableEntry op_mod 0 => SetFlowTableEntry.SetFteIn."flow_index";
    Create AllocFlowCounter => AllocFlowCounter;
    Create AllocPacketReformatContext => AllocPacketReformatContext;
    Create AllocModifyHeaderContext => AllocModifyHeaderContext;
    Create CreateGeneralObject => CreateGeneralObject;

    Modify ModifyCq => CreateCq.ModifyCqIn."cqn";
    Modify Rst2initQp => CreateQp.Rst2initQpIn."qpn";
    Modify Init2rtrQp => CreateQp.Init2rtrQpIn."qpn";
    Modify Rtr2rtsQp => CreateQp.Rtr2rtsQpIn."qpn";
    Modify Rts2rtsQp => CreateQp.Rts2rtsQpIn."qpn";
    Modify Sqerr2rtsQp => CreateQp.Sqerr2rtsQpIn."qpn";
    Modify Qp2Err => CreateQp.Qp2errIn."qpn";
    Modify Qp2Rst => CreateQp.Qp2rstIn."qpn";
    Modify Init2initQp => CreateQp.Init2initQpIn."qpn";
    Modify ArmRq => CreateSrq.ArmRqIn."srq_number";
    Modify ArmXrcSrq => CreateXrcSrq.ArmXrcSrqIn."xrc_srqn";
    Modify ArmDctForKeyViolation => CreateDct.ArmDctForKeyViolationIn."dctn";
    Modify ArmXrq => CreateXrq.XrqCmdIn."xrqn";
    Modify SetXrqDcParamsEntry => CreateXrq.XrqCmdIn."xrqn";
    Modify ReleaseXrqError => CreateXrq.XrqCmdIn."xrqn";
    Modify ModifyXrq => CreateXrq.XrqCmdIn."xrqn";
    Modify ModifySchedulingElement;
    // Also creates (see above): the method the caller picks decides.
    Modify AddVxlanUdpDport;
    Modify SetL2TableEntry;
    Modify ModifyTir => CreateTir.ModifyTirIn."tirn";
    Modify ModifySq => CreateSq.ModifySqIn."sqn";
    Modify ModifyRq => CreateRq.ModifyRqIn."rqn";
    Modify ModifyRmp => CreateRmp.ModifyRmpIn."rmpn";
    Modify ModifyTis => CreateTis.ModifyTisIn."tisn";
    Modify ModifyRqt => CreateRqt.ModifyRqtIn."rqtn";
    Modify ModifyFlowTable => CreateFlowTable.ModifyFlowTableIn."table_id";
    Modify SetFlowTableEntry op_mod 1 => SetFlowTableEntry.SetFteIn."flow_index";
    Modify ModifyGeneralObject => CreateGeneralObject.ModifyGeneralObjectIn."obj_id";

    Query QueryMkey => CreateMkey.QueryMkeyIn."mkey_index";
    Query QueryCq => CreateCq.QueryCqIn."cqn";
    Query QueryQp => CreateQp.QueryQpIn."qpn";
    Query QuerySrq => CreateSrq.QuerySrqIn."srqn";
    Query QueryXrcSrq => CreateXrcSrq.QueryXrcSrqIn."xrc_srqn";
    Query QueryDct => CreateDct.QueryDctIn."dctn";
    Query QueryXrq => CreateXrq.XrqCmdIn."xrqn";
    Query QueryXrqDcParamsEntry => CreateXrq.XrqCmdIn."xrqn";
    Query QueryXrqErrorParams => CreateXrq.XrqCmdIn."xrqn";
    Query QueryQCounter => AllocQCounter.QueryQCounterIn."counter_set_id";
    Query QuerySchedulingElement;
    Query QueryL2TableEntry;
    Query QueryTir => CreateTir.QueryTirIn."tirn";
    Query QuerySq => CreateSq.QuerySqIn."sqn";
    Query QueryRq => CreateRq.QueryRqIn."rqn";
    Query QueryRmp => CreateRmp.QueryRmpIn."rmpn";
    Query QueryTis => CreateTis.QueryTisIn."tisn";
    Query QueryRqt => CreateRqt.QueryRqtIn."rqtn";
    Query QueryFlowTable => CreateFlowTable.QueryFlowTableIn."table_id";
    Query QueryFlowGroup => CreateFlowGroup.QueryFlowGroupIn."group_id";
    Query QueryFlowTableEntry => SetFlowTableEntry.QueryFteIn."flow_index";
    Query QueryFlowCounter => AllocFlowCounter.QueryFlowCounterIn."flow_counter_id";
    Query QueryPacketReformatContext;
    Query QueryModifyHeaderContext;
    Query QueryGeneralObject => CreateGeneralObject.QueryGeneralObjectIn."obj_id";

    // Commands that name no object. Opcodes in the firmware's general
    // range are general too (see `Opcode::in_general_range`).
    General QueryHcaCap;
    General QueryAdapter;
    General QueryIssi;
    General QueryEswFunctions;
    General QueryVportState;
    General QueryEswVportContext;
    General QueryNicVportContext;
    General QueryRoceAddress;
    General QueryHcaVportContext;
    // QUERY_HCA_VPORT_GID is not among Linux's general commands: GIDs come
    // from the kernel's GID table.
    General QueryVnicEnv;
    General QueryVportCounter;
    General GetDroppedPacketLog;
    General Nop;
    General QueryCongStatus;
    General QueryCongParams;
    General QueryCongStatistics;
    General QueryLag;

    Destroy DestroyMkey => CreateMkey.DestroyMkeyIn."mkey_index";
    Destroy DestroyEq => CreateEq.DestroyEqIn."eq_number";
    Destroy DestroyCq => CreateCq.DestroyCqIn."cqn";
    Destroy DestroyQp => CreateQp.DestroyQpIn."qpn";
    Destroy DestroySrq => CreateSrq.DestroySrqIn."srqn";
    Destroy DestroyXrcSrq => CreateXrcSrq.DestroyXrcSrqIn."xrc_srqn";
    Destroy DestroyDct => CreateDct.DestroyDctIn."dctn";
    Destroy DestroyXrq => CreateXrq.DestroyXrqIn."xrqn";
    Destroy DeallocQCounter => AllocQCounter.DeallocQCounterIn."counter_set_id";
    Destroy DeallocPd => AllocPd.DeallocPdIn."pd";
    Destroy DetachFromMcg => AttachToMcg.DetachFromMcgIn."qpn";
    Destroy DeallocXrcd => AllocXrcd.DeallocXrcdIn."xrcd";
    Destroy DeallocTransportDomain => AllocTransportDomain.DeallocTransportDomainIn."transport_domain";
    Destroy DestroyTir => CreateTir.DestroyTirIn."tirn";
    Destroy DestroySq => CreateSq.DestroySqIn."sqn";
    Destroy DestroyRq => CreateRq.DestroyRqIn."rqn";
    Destroy DestroyRmp => CreateRmp.DestroyRmpIn."rmpn";
    Destroy DestroyTis => CreateTis.DestroyTisIn."tisn";
    Destroy DestroyRqt => CreateRqt.DestroyRqtIn."rqtn";
    Destroy DestroyFlowTable => CreateFlowTable.DestroyFlowTableIn."table_id";
    Destroy DestroyFlowGroup => CreateFlowGroup.DestroyFlowGroupIn."group_id";
    Destroy DeleteFlowTableEntry => SetFlowTableEntry.DeleteFteIn."flow_index";
    Destroy DeallocFlowCounter => AllocFlowCounter.DeallocFlowCounterIn."flow_counter_id";
    Destroy DeallocPacketReformatContext => AllocPacketReformatContext.DeallocPacketReformatContextIn."packet_reformat_id";
    Destroy DeallocModifyHeaderContext => AllocModifyHeaderContext.DeallocModifyHeaderContextIn."modify_header_id";
    Destroy DestroyGeneralObject => CreateGeneralObject.DestroyGeneralObjectIn."obj_id";
};

/// The registry entry for `opcode` with `op_mod` (only SET_FLOW_TABLE_ENTRY
/// has entries per `op_mod`).
#[must_use]
pub fn command(opcode: Opcode, op_mod: u16) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.opcode == opcode && c.op_mod.map_or(true, |m| m == op_mod))
}

/// The registry entry for a raw opcode, whatever its `op_mod`: the first
/// entry (for SET_FLOW_TABLE_ENTRY, the create).
#[must_use]
pub fn command_any(opcode: u16) -> Option<&'static Command> {
    let op = Opcode::from_raw(opcode)?;
    COMMANDS.iter().find(|c| c.opcode == op)
}

/// Whether the DEVX method of `class` admits a raw command.
#[must_use]
pub fn admits(opcode: u16, op_mod: u16, class: CmdClass) -> bool {
    if Opcode::in_general_range(opcode) {
        return class == CmdClass::General;
    }
    class != CmdClass::Destroy
        && Opcode::from_raw(opcode).is_some_and(|op| {
            COMMANDS.iter().any(|c| {
                c.opcode == op && c.class == class && c.op_mod.map_or(true, |m| m == op_mod)
            })
        })
}

/// The DEVX class of a raw command, or `None` when DEVX refuses it outright
/// (commands only the driver sends, destroys, unknown opcodes).
#[must_use]
pub fn devx_class(opcode: u16, op_mod: u16) -> Option<CmdClass> {
    if Opcode::in_general_range(opcode) {
        return Some(CmdClass::General);
    }
    let c = command(Opcode::from_raw(opcode)?, op_mod)?;
    (c.class != CmdClass::Destroy).then_some(c.class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_has_its_create_and_destroy_registered() {
        for o in OBJECTS {
            let created = COMMANDS.iter().find(|c| c.opcode == o.create);
            // CREATE_EQ is the driver's own; DEVX never admits it.
            if o.create != Opcode::CreateEq {
                assert_eq!(
                    created.map(|c| c.class),
                    Some(CmdClass::Create),
                    "{}",
                    o.create
                );
            }
            let d = command(o.destroy, 0).expect("destroy registered");
            assert_eq!(d.class, CmdClass::Destroy);
            assert_eq!(d.names, Some(o.number), "{}", o.destroy);
            assert_eq!(
                o.destroy_in.name,
                crate::mailbox_layouts(o.destroy.raw()).map_or(o.destroy_in.name, |(i, _)| i.name)
            );
        }
    }

    #[test]
    fn every_named_object_command_points_at_its_object() {
        for c in COMMANDS {
            if let Some(o) = c.object {
                assert!(
                    c.names.is_some() || c.class == CmdClass::Create,
                    "{}",
                    c.opcode
                );
                if let Some(q) = o.query {
                    assert_eq!(command(q, 0).and_then(|q| q.object), Some(o));
                }
            }
        }
    }

    #[test]
    fn named_fields_are_fields_of_the_command_mailboxes() {
        for c in COMMANDS {
            let (Some(f), Some((inbox, _))) = (c.names, c.mailboxes()) else {
                continue;
            };
            assert_eq!(inbox.field(f.name), Some(f), "{}", c.opcode);
        }
        for o in OBJECTS {
            let Some((inbox, outbox)) = crate::mailbox_layouts(o.create.raw()) else {
                continue;
            };
            let (mailbox, f) = o.created;
            let layout = if mailbox == Mailbox::In {
                inbox
            } else {
                outbox
            };
            assert_eq!(layout.field(f.name), Some(f), "{}", o.create);
        }
    }

    #[test]
    fn classes_follow_the_kernel_lists() {
        assert_eq!(
            devx_class(Opcode::CreateCq.raw(), 0),
            Some(CmdClass::Create)
        );
        assert_eq!(
            devx_class(Opcode::SetFlowTableEntry.raw(), 1),
            Some(CmdClass::Modify)
        );
        assert_eq!(devx_class(Opcode::SetFlowTableEntry.raw(), 2), None);
        assert_eq!(devx_class(Opcode::DestroyCq.raw(), 0), None);
        assert_eq!(devx_class(Opcode::SetHcaCap.raw(), 0), None);
        assert_eq!(devx_class(0xb42, 0), Some(CmdClass::General));
        let vxlan = Opcode::AddVxlanUdpDport.raw();
        assert!(admits(vxlan, 0, CmdClass::Create) && admits(vxlan, 0, CmdClass::Modify));
        assert!(!admits(Opcode::DestroyCq.raw(), 0, CmdClass::Destroy));
    }
}
