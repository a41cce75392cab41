//! General objects (CREATE/MODIFY/QUERY/DESTROY_GENERAL_OBJECT, obj_type in
//! the op_mod position). A type works only when the profile advertises it in
//! `general_obj_types`; the one implemented is GENEVE_TLV_OPT.
//!
//! The context of that type is `geneve_tlv_option`.

use prm_layouts::{
    GeneralObjInCmdHdr, GeneralObjOutCmdHdr, GeneralObjType, GeneveTlvOption, Opcode,
};

use crate::sim::fw::cmd::{ensure, fail, out_view, put, Cmd, FwResult};
use crate::sim::fw::state::{Holder, State};
use crate::sim::syndrome;

/// MLX5_OBJ_TYPE_GENEVE_TLV_OPT.
pub(crate) const OBJ_TYPE_GENEVE_TLV_OPT: u16 = GeneralObjType::GeneveTlvOpt.raw();

/// Bytes of the general object header before the context.
const HDR: usize = GeneralObjInCmdHdr::SIZE_BYTES;

#[derive(Debug, Clone)]
pub(crate) struct GeneralObj {
    pub(crate) obj_type: u16,
    /// The object context as created (the inbox tail after the header).
    pub(crate) ctx: Vec<u8>,
}

impl Holder for GeneralObj {}

/// All four general-object commands.
pub(crate) fn command(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let obj_type = cmd.op_mod;
    // Only advertised types exist; a type past the 64-bit mask never does.
    let advertised = obj_type < 64 && st.profile.general_obj_types & (1u64 << obj_type) != 0;
    ensure(advertised, syndrome::GENERAL_OBJ_TYPE)?;
    let hdr: &GeneralObjInCmdHdr = cmd.view()?;
    // No implemented type supports ranges: log_obj_range and the reserved
    // bits around it (the header's last dword) are zero on every command.
    let mut rest = *hdr;
    rest.set_opcode(0);
    rest.set_uid(0);
    rest.set_vhca_tunnel_id(0);
    rest.set_obj_type(0);
    rest.set_obj_id(0);
    ensure(
        rest.as_bytes().iter().all(|b| *b == 0),
        syndrome::RESERVED_NONZERO,
    )?;
    let obj_id = hdr.obj_id();
    match Opcode::from_raw(cmd.opcode) {
        Some(Opcode::CreateGeneralObject) => create(st, cmd, obj_id, out),
        Some(Opcode::ModifyGeneralObject) => {
            lookup(st, cmd, obj_id)?;
            // The device offers no modify_field_select bits for this type.
            fail(syndrome::GENERAL_OBJ_NO_MODIFY)
        }
        Some(Opcode::QueryGeneralObject) => {
            let ctx = lookup(st, cmd, obj_id)?.to_vec();
            out_view::<GeneralObjOutCmdHdr>(out)?.set_obj_id(obj_id);
            put(out, HDR, &ctx)
        }
        _ => {
            lookup(st, cmd, obj_id)?;
            st.general_obj.remove(obj_id, cmd.uid).map(|_| ())
        }
    }
}

/// The context of object `obj_id`, which must be `uid`'s and of the
/// command's type (a number of another type names nothing).
fn lookup<'s>(st: &'s State, cmd: &Cmd, obj_id: u32) -> FwResult<&'s [u8]> {
    let e = st.general_obj.owned(obj_id, cmd.uid)?;
    if e.obj.obj_type != cmd.op_mod {
        return fail(syndrome::not_found(st.general_obj.kind()));
    }
    Ok(&e.obj.ctx)
}

fn create(st: &mut State, cmd: &Cmd, obj_id: u32, out: &mut [u8]) -> FwResult {
    // The device picks the number; a caller-chosen one is not honoured.
    ensure(obj_id == 0, syndrome::RESERVED_NONZERO)?;
    let ctx = cmd
        .inbox
        .get(HDR..)
        .and_then(GeneveTlvOption::from_slice)
        .ok_or(syndrome::INBOX_SHORT)?;
    check_geneve(st, ctx)?;
    let obj = GeneralObj {
        obj_type: cmd.op_mod,
        ctx: ctx.as_bytes().to_vec(),
    };
    let id = st.general_obj.insert(cmd.uid, obj)?;
    out_view::<GeneralObjOutCmdHdr>(out)?.set_obj_id(id);
    Ok(())
}

/// Create-time checks of a `geneve_tlv_option` context.
fn check_geneve(st: &State, ctx: &GeneveTlvOption) -> FwResult {
    // modify_field_select means nothing on create; the reserved bits and the
    // firmware-assigned fte index must be zero: only the option's class,
    // type and length may be set.
    let mut rest = *ctx;
    rest.set_option_class(0);
    rest.set_option_type(0);
    rest.set_option_data_length(0);
    ensure(
        rest.as_bytes().iter().all(|b| *b == 0),
        syndrome::RESERVED_NONZERO,
    )?;
    // Matching needs at least one data word; the flex parser samples at
    // most max_geneve_tlv_option_data_len words.
    let words = ctx.option_data_length();
    ensure(
        words >= 1 && words <= st.profile.max_geneve_tlv_option_data_len,
        syndrome::GENEVE_OPT_DATA_LEN,
    )?;
    // Each option takes a flex parser, device-wide, whichever uid asks.
    let live = st
        .general_obj
        .numbers_of_all()
        .into_iter()
        .filter(|n| {
            st.general_obj
                .peek(*n)
                .is_some_and(|e| e.obj.obj_type == OBJ_TYPE_GENEVE_TLV_OPT)
        })
        .count();
    ensure(
        live < usize::from(st.profile.max_geneve_tlv_options),
        syndrome::GENEVE_OPT_LIMIT,
    )
}
