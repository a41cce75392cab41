//! What a DEVX stack admits before a command reaches firmware: which method
//! may carry which opcode, which object a query or modify names, and the
//! destroy command that undoes a create. Pure functions over mailbox bytes,
//! shared by the emulated device and the library's own checks; the facts
//! come from the command registry ([`prm_layouts::commands`]).

use prm_layouts::commands::{self, header, Mailbox, ObjectType};
use prm_layouts::Opcode;

use crate::error::{Error, Result};

pub use prm_layouts::commands::CmdClass;

/// Opcode at the head of an inbox (0 when the inbox is shorter).
pub fn opcode_of(inbox: &[u8]) -> u16 {
    header::OPCODE.get_or_zero(inbox) as u16
}

/// op_mod (or obj_type for general objects) of an inbox.
pub fn op_mod_of(inbox: &[u8]) -> u16 {
    header::OP_MOD.get_or_zero(inbox) as u16
}

/// Which method class admits this command, or `None` if DEVX refuses it outright.
pub fn classify(inbox: &[u8]) -> Option<CmdClass> {
    commands::devx_class(opcode_of(inbox), op_mod_of(inbox))
}

/// Whether the method of class `want` admits `inbox`'s command.
pub fn admits(inbox: &[u8], want: CmdClass) -> bool {
    commands::admits(opcode_of(inbox), op_mod_of(inbox), want)
}

/// Admits `inbox` for a method of class `want`, as the kernel does before firmware.
pub fn admit(inbox: &[u8], want: CmdClass) -> Result<()> {
    if inbox.len() < prm_layouts::MboxIn::SIZE_BYTES {
        return Err(Error::argument(format!(
            "inbox is {} bytes; every command needs at least the {}-byte header",
            inbox.len(),
            prm_layouts::MboxIn::SIZE_BYTES
        )));
    }
    if want != CmdClass::General && header::VHCA_TUNNEL_ID.get_or_zero(inbox) != 0 {
        return Err(Error::os(
            format!(
                "{} {}: vhca_tunnel_id must be zero",
                want.name(),
                opname(inbox)
            ),
            libc::EINVAL,
        ));
    }
    if admits(inbox, want) {
        return Ok(());
    }
    match classify(inbox) {
        Some(class) => Err(Error::os(
            format!(
                "{} is a {} command and cannot go through the {} method",
                opname(inbox),
                class.name(),
                want.name()
            ),
            libc::EINVAL,
        )),
        None => Err(Error::os(
            format!("{} is not a command DEVX allows", opname(inbox)),
            libc::EINVAL,
        )),
    }
}

fn opname(inbox: &[u8]) -> String {
    prm_layouts::enums::opcode_name(opcode_of(inbox))
}

/// Identity of a firmware object as the kernel tracks it: the creating opcode
/// (with the general-object type above it) and the object number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjKey {
    pub creator: u32,
    pub number: u32,
}

impl ObjKey {
    /// The key of object `number` of `kind`; `obj_type` is the general
    /// object type (ignored for other kinds).
    fn of(kind: &ObjectType, obj_type: u16, number: u32) -> ObjKey {
        let typed = if kind.typed {
            u32::from(obj_type) << 16
        } else {
            0
        };
        ObjKey {
            creator: u32::from(kind.create.raw()) | typed,
            number,
        }
    }
}

/// The object type a create makes, from its inbox.
fn created_kind(inbox: &[u8]) -> Option<&'static ObjectType> {
    commands::object(Opcode::from_raw(opcode_of(inbox))?)
}

/// The new object's number, from the create's inbox or outbox.
fn created_number(kind: &ObjectType, inbox: &[u8], outbox: &[u8]) -> u32 {
    let (mailbox, field) = kind.created;
    let from = match mailbox {
        Mailbox::In => inbox,
        Mailbox::Out => outbox,
    };
    field.get_or_zero(from) as u32
}

/// The identity of the object a create makes, read from its inbox and outbox.
pub fn created_key(inbox: &[u8], outbox: &[u8]) -> Option<ObjKey> {
    let kind = created_kind(inbox)?;
    let number = created_number(kind, inbox, outbox);
    Some(ObjKey::of(kind, op_mod_of(inbox), number))
}

/// The identity of the object a query or modify names, from its inbox.
pub fn named_key(inbox: &[u8]) -> Option<ObjKey> {
    let c = commands::command_any(opcode_of(inbox)).filter(|c| c.class != CmdClass::Destroy)?;
    let (kind, field) = (c.object?, c.names?);
    Some(ObjKey::of(
        kind,
        op_mod_of(inbox),
        field.get_or_zero(inbox) as u32,
    ))
}

/// Builds the command that destroys what `create_in` made (its outbox is
/// `create_out`), the way the kernel pre-builds it at create time.
pub fn destroy_command(create_in: &[u8], create_out: &[u8]) -> Result<Vec<u8>> {
    let kind = created_kind(create_in).ok_or_else(|| {
        Error::argument(format!(
            "{} does not create an object DEVX can destroy",
            opname(create_in)
        ))
    })?;
    let number = created_number(kind, create_in, create_out);
    let mut out = vec![0u8; kind.destroy_in.size_bytes()];
    let fill = |out: &mut [u8], field: &prm_layouts::FieldMeta, v: u64| {
        field
            .set(out, v)
            .map_err(|e| Error::argument(format!("{}.{}: {e}", kind.destroy_in.name, field.name)))
    };
    fill(&mut out, header::OPCODE, u64::from(kind.destroy.raw()))?;
    fill(&mut out, header::UID, header::UID.get_or_zero(create_in))?;
    fill(&mut out, kind.number, u64::from(number))?;
    for (from, to) in kind.scope {
        from.copy_to(create_in, to, &mut out).ok_or_else(|| {
            Error::argument(format!(
                "{} inbox is shorter than its {} field",
                opname(create_in),
                from.name
            ))
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prm_layouts::{
        CreateCqOut, CreateFlowGroupIn, CreateFlowGroupOut, CreateGeneralObjectOut,
        DestroyFlowGroupIn, QueryCqIn, QueryGeneralObjectIn,
    };

    fn inbox(opcode: Opcode, op_mod: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        header::OPCODE.set(&mut b, opcode.raw().into()).unwrap();
        header::OP_MOD.set(&mut b, op_mod.into()).unwrap();
        b
    }

    #[test]
    fn classes_follow_the_kernel_lists() {
        assert_eq!(
            classify(&inbox(Opcode::CreateCq, 0)),
            Some(CmdClass::Create)
        );
        assert_eq!(classify(&inbox(Opcode::QueryCq, 0)), Some(CmdClass::Query));
        assert_eq!(
            classify(&inbox(Opcode::Rst2initQp, 0)),
            Some(CmdClass::Modify)
        );
        assert_eq!(
            classify(&inbox(Opcode::QueryHcaCap, 1)),
            Some(CmdClass::General)
        );
        let fte = Opcode::SetFlowTableEntry;
        assert_eq!(classify(&inbox(fte, 0)), Some(CmdClass::Create));
        assert_eq!(classify(&inbox(fte, 1)), Some(CmdClass::Modify));
        assert_eq!(classify(&inbox(fte, 2)), None);
        // Driver-only bring-up commands never pass.
        assert_eq!(classify(&inbox(Opcode::SetHcaCap, 0)), None);
        assert!(admit(&inbox(Opcode::DestroyCq, 0), CmdClass::General)
            .unwrap_err()
            .is_os());
    }

    #[test]
    fn destroy_of_a_cq_names_its_cqn() {
        let mut create = inbox(Opcode::CreateCq, 0);
        header::UID.set(&mut create, 7).unwrap();
        let mut out = CreateCqOut::new();
        out.set_cqn(0xabcd);
        let d = destroy_command(&create, out.as_bytes()).unwrap();
        assert_eq!(hex::encode(&d), "04010007000000000000abcd00000000");
        assert_eq!(
            created_key(&create, out.as_bytes()),
            Some(ObjKey {
                creator: Opcode::CreateCq.raw().into(),
                number: 0xabcd
            })
        );
        let mut q = QueryCqIn::new();
        q.set_opcode(Opcode::QueryCq.raw());
        q.set_cqn(0xabcd);
        assert_eq!(
            named_key(q.as_bytes()),
            created_key(&create, out.as_bytes())
        );
    }

    #[test]
    fn destroy_of_a_flow_group_keeps_its_table() {
        let mut create = CreateFlowGroupIn::new();
        create.set_opcode(Opcode::CreateFlowGroup.raw());
        create.set_table_type(0); // NIC RX
        create.set_table_id(0x12);
        let mut out = CreateFlowGroupOut::new();
        out.set_group_id(3);
        let d = destroy_command(create.as_bytes(), out.as_bytes()).unwrap();
        let d = DestroyFlowGroupIn::from_slice(&d).unwrap();
        assert_eq!(d.as_bytes().len(), DestroyFlowGroupIn::SIZE_BYTES);
        assert_eq!(d.opcode(), Opcode::DestroyFlowGroup.raw());
        assert_eq!(d.table_id(), 0x12);
        assert_eq!(d.group_id(), 3);
    }

    #[test]
    fn destroy_of_a_multicast_attach_needs_its_gid() {
        let create = inbox(Opcode::AttachToMcg, 0);
        let e = destroy_command(&create[..24], &[0u8; 16]).unwrap_err();
        assert!(e.to_string().contains("multicast_gid"), "{e}");
    }

    #[test]
    fn general_objects_are_keyed_by_type() {
        let mut create = inbox(Opcode::CreateGeneralObject, 0x0d);
        header::UID.set(&mut create, 1).unwrap();
        let mut out = CreateGeneralObjectOut::new();
        out.set_obj_id(99);
        let d = destroy_command(&create, out.as_bytes()).unwrap();
        assert_eq!(hex::encode(&d), "0a0300010000000d0000006300000000");
        let mut q = QueryGeneralObjectIn::new();
        q.set_opcode(Opcode::QueryGeneralObject.raw());
        q.set_obj_type(0x0d);
        q.set_obj_id(99);
        assert_eq!(
            named_key(q.as_bytes()),
            created_key(&create, out.as_bytes())
        );
        q.set_obj_type(0x0e);
        assert_ne!(
            named_key(q.as_bytes()),
            created_key(&create, out.as_bytes())
        );
    }
}
