//! The tiny firmware behind the fake: DEVX opcode classes, canned or failing
//! outboxes, fresh object ids, and the kernel's status-to-errno mapping.

use super::state::State;
use super::FakeKernel;
use crate::kernel::abi;

/// Opcode classes of the DEVX methods (Linux 6.1 `devx_is_*_cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Create,
    Modify,
    Query,
    General,
}

pub(super) fn classify(inbox: &[u8]) -> Option<Class> {
    let op = abi::be16(inbox, 0);
    let op_mod = abi::be16(inbox, 6);
    match op {
        0x936 if op_mod == 0 => Some(Class::Create),
        0x936 if op_mod == 1 => Some(Class::Modify),
        0x827 | 0x829 => Some(Class::Create), // also modify; the method decides
        0xa00 | 0x200 | 0x400 | 0x500 | 0x600 | 0x700 | 0x705 | 0x710 | 0x717 | 0x771 | 0x782
        | 0x800 | 0x806 | 0x80e | 0x816 | 0x900 | 0x904 | 0x908 | 0x90c | 0x912 | 0x916 | 0x930
        | 0x933 | 0x939 | 0x93d | 0x940 => Some(Class::Create),
        0x403
        | 0x502..=0x507
        | 0x50a
        | 0x50e
        | 0x703
        | 0x708
        | 0x714
        | 0x71a
        | 0x726
        | 0x729
        | 0x72a
        | 0x785
        | 0x901
        | 0x905
        | 0x909
        | 0x90d
        | 0x913
        | 0x917
        | 0x93c
        | 0xa01 => Some(Class::Modify),
        0x201 | 0x402 | 0x50b | 0x702 | 0x707 | 0x713 | 0x719 | 0x725 | 0x727 | 0x773 | 0x784
        | 0x82a | 0x903 | 0x907 | 0x90b | 0x90f | 0x915 | 0x919 | 0x932 | 0x935 | 0x937 | 0x93b
        | 0x93f | 0x942 | 0xa02 => Some(Class::Query),
        0xb00..=0xcff
        | 0x100
        | 0x101
        | 0x10a
        | 0x740
        | 0x750
        | 0x752
        | 0x754
        | 0x760
        | 0x762
        | 0x76f
        | 0x770
        | 0x80a
        | 0x80d
        | 0x822
        | 0x824
        | 0x826
        | 0x842 => Some(Class::General),
        _ => None,
    }
}

pub(super) fn class_admits(class: Class, inbox: &[u8]) -> bool {
    let op = abi::be16(inbox, 0);
    match (class, op) {
        (Class::Modify, 0x827 | 0x829) => true,
        _ => classify(inbox) == Some(class),
    }
}

impl FakeKernel {
    /// Firmware: the outbox for `inbox`, and whether it failed.
    pub(super) fn firmware(
        s: &mut State,
        inbox: &[u8],
        outlen: usize,
        class: Class,
    ) -> (Vec<u8>, bool) {
        let opcode = abi::be16(inbox, 0);
        let mut out = vec![0u8; outlen];
        if let Some(&(status, syndrome)) = s.fw_fail.get(&opcode) {
            out[0] = status;
            if outlen >= 8 {
                out[4..8].copy_from_slice(&syndrome.to_be_bytes());
            }
            return (out, status != 0);
        }
        if let Some(reply) = s.fw_reply.get(&opcode) {
            let n = reply.len().min(outlen);
            out[..n].copy_from_slice(&reply[..n]);
            out[0] = 0;
        }
        if class == Class::Create && outlen >= 12 {
            let id = s.next_obj_id;
            s.next_obj_id += 1;
            let id = if opcode == 0xa00 {
                id
            } else {
                id & 0x00ff_ffff
            };
            out[8..12].copy_from_slice(&id.to_be_bytes());
        }
        (out, false)
    }
}

/// The destroy opcode the kernel pairs with a create opcode (common cases).
pub(super) fn destroy_opcode(create: u16) -> u16 {
    match create {
        0xa00 => 0xa03,
        0x800 => 0x801,
        0x80e => 0x80f,
        0x816 => 0x817,
        0x939 => 0x93a,
        0x771 => 0x772,
        op => op + 1,
    }
}

/// The kernel's `cmd_status_to_err`.
pub(super) fn status_to_errno(status: u8) -> i32 {
    match status {
        0x6 => libc::EBUSY,
        0x8 => libc::ENOMEM,
        0xf => libc::EAGAIN,
        0x2 | 0x3 | 0x5 | 0x9 | 0xa | 0x10 | 0x30 | 0x40 => libc::EINVAL,
        _ => libc::EIO,
    }
}
