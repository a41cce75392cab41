//! General objects (CREATE/MODIFY/QUERY/DESTROY_GENERAL_OBJECT, obj_type in
//! the op_mod position). A type works only when the profile advertises it in
//! `general_obj_types`; the one implemented is GENEVE_TLV_OPT (0x000b).
//!
//! prm-layouts has no `geneve_tlv_option` layout, so its 64-byte context is
//! read by offset below, following mlx5_ifc `geneve_tlv_option_bits`:
//!
//! | bits        | field                      |
//! |-------------|----------------------------|
//! | 0x00..0x40  | modify_field_select        |
//! | 0x40..0x58  | reserved                   |
//! | 0x58..0x60  | geneve_option_fte_index    |
//! | 0x60..0x70  | option_class               |
//! | 0x70..0x78  | option_type                |
//! | 0x78..0x7b  | reserved                   |
//! | 0x7b..0x80  | option_data_length (words) |
//! | 0x80..0x200 | reserved                   |

use crate::sim::fw::cmd::{ensure, fail, put, Cmd, FwResult};
use crate::sim::fw::state::{Holder, State};
use crate::sim::syndrome;

/// MLX5_OBJ_TYPE_GENEVE_TLV_OPT.
pub const OBJ_TYPE_GENEVE_TLV_OPT: u16 = 0x000b;

/// Bytes of the general object header before the context.
const HDR: usize = 16;
/// Bytes of `geneve_tlv_option`.
const GENEVE_CTX: usize = 64;

#[derive(Debug, Clone)]
pub struct GeneralObj {
    pub obj_type: u16,
    /// The object context as created (the inbox tail after the header).
    pub ctx: Vec<u8>,
}

impl Holder for GeneralObj {}

/// All four general-object commands.
pub fn command(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let obj_type = cmd.op_mod;
    // Only advertised types exist; a type past the 64-bit mask never does.
    let advertised = obj_type < 64 && st.profile.general_obj_types & (1u64 << obj_type) != 0;
    ensure(advertised, syndrome::GENERAL_OBJ_TYPE)?;
    // No implemented type supports ranges (log_obj_range), so bytes 12..16
    // are zero on every command.
    ensure(
        cmd.inbox[12..HDR].iter().all(|b| *b == 0),
        syndrome::RESERVED_NONZERO,
    )?;
    let obj_id = be32(cmd.inbox, 8);
    match cmd.opcode {
        0xa00 => create(st, cmd, obj_id, out),
        0xa01 => {
            lookup(st, cmd, obj_id)?;
            // The device offers no modify_field_select bits for this type.
            fail(syndrome::GENERAL_OBJ_NO_MODIFY)
        }
        0xa02 => {
            let ctx = lookup(st, cmd, obj_id)?.to_vec();
            put(out, 8, &obj_id.to_be_bytes())?;
            put(out, HDR, &ctx)
        }
        _ => {
            lookup(st, cmd, obj_id)?;
            st.general_obj.remove(obj_id, cmd.uid).map(|_| ())
        }
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
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
        .get(HDR..HDR + GENEVE_CTX)
        .ok_or(syndrome::INBOX_SHORT)?;
    check_geneve(st, ctx)?;
    let obj = GeneralObj {
        obj_type: cmd.op_mod,
        ctx: ctx.to_vec(),
    };
    let id = st.general_obj.insert(cmd.uid, obj)?;
    put(out, 8, &id.to_be_bytes())
}

/// Create-time checks of a `geneve_tlv_option` context.
fn check_geneve(st: &State, ctx: &[u8]) -> FwResult {
    // modify_field_select means nothing on create; the reserved bits and the
    // firmware-assigned fte index must be zero.
    let reserved_clear = ctx[0..12].iter().all(|b| *b == 0)
        && ctx[15] & 0xe0 == 0
        && ctx[16..].iter().all(|b| *b == 0);
    ensure(reserved_clear, syndrome::RESERVED_NONZERO)?;
    // Matching needs at least one data word; the flex parser samples at
    // most max_geneve_tlv_option_data_len words.
    let words = ctx[15] & 0x1f;
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
