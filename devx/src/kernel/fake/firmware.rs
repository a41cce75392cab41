//! The tiny firmware behind the fake: DEVX opcode classes, canned or failing
//! outboxes, fresh object ids, and the kernel's status-to-errno mapping.

use prm_layouts::commands::header;
use prm_layouts::{commands, CmdStatus, FieldMeta, GeneralObjOutCmdHdr, Opcode};

use super::state::State;
use super::FakeKernel;

/// Opcode classes of the DEVX methods (Linux 6.1 `devx_is_*_cmd`).
pub(super) use prm_layouts::commands::CmdClass as Class;

/// Whether the method of `class` admits `inbox` (the command registry's
/// lists; ADD_VXLAN_UDP_DPORT and SET_L2_TABLE_ENTRY pass as create and
/// as modify).
pub(super) fn class_admits(class: Class, inbox: &[u8]) -> bool {
    crate::admission::admits(inbox, class)
}

/// Where the fake answers a create's new object number: the third dword of
/// the outbox, as the general object header has it (other creates hold their
/// 24-bit number in its low bits).
pub(super) const CREATED_ID: &FieldMeta = GeneralObjOutCmdHdr::META.named("obj_id");

impl FakeKernel {
    /// Firmware: the outbox for `inbox`, and whether it failed.
    pub(super) fn firmware(
        s: &mut State,
        inbox: &[u8],
        outlen: usize,
        class: Class,
    ) -> (Vec<u8>, bool) {
        let opcode = crate::admission::opcode_of(inbox);
        let mut out = vec![0u8; outlen];
        if let Some(&(status, syndrome)) = s.fw_fail.get(&opcode) {
            // An outbox too short for the syndrome keeps the status alone.
            let _ = header::STATUS.set(&mut out, status.into());
            let _ = header::SYNDROME.set(&mut out, syndrome.into());
            return (out, status != 0);
        }
        if let Some(reply) = s.fw_reply.get(&opcode) {
            let n = reply.len().min(outlen);
            out[..n].copy_from_slice(&reply[..n]);
            let _ = header::STATUS.set(&mut out, 0);
        }
        if class == Class::Create && CREATED_ID.get(&out).is_some() {
            let id = s.next_obj_id;
            s.next_obj_id += 1;
            let id = if opcode == Opcode::CreateGeneralObject.raw() {
                id
            } else {
                id & 0x00ff_ffff
            };
            let _ = CREATED_ID.set(&mut out, id.into());
        }
        (out, false)
    }
}

/// The destroy opcode the kernel pairs with a create opcode: the registry's,
/// else the next opcode (where the PRM puts most destroys).
pub(super) fn destroy_opcode(create: u16) -> u16 {
    Opcode::from_raw(create)
        .and_then(commands::object)
        .map_or(create.wrapping_add(1), |o| o.destroy.raw())
}

/// The kernel's `cmd_status_to_err`.
pub(super) fn status_to_errno(status: u8) -> i32 {
    CmdStatus::from_raw(status)
        .map(CmdStatus::errno)
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}
