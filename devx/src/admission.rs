//! What a DEVX stack admits before a command reaches firmware: which method
//! may carry which opcode, which object a query or modify names, and the
//! destroy command that undoes a create. Pure functions over mailbox bytes,
//! shared by the emulated device and the library's own checks.

use crate::error::{be16, be32, Error, Result};

/// The DEVX method class an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdClass {
    Create,
    Modify,
    Query,
    General,
}

impl CmdClass {
    pub fn name(self) -> &'static str {
        match self {
            CmdClass::Create => "create",
            CmdClass::Modify => "modify",
            CmdClass::Query => "query",
            CmdClass::General => "general",
        }
    }
}

/// Opcode at bytes 0..2 of an inbox.
pub fn opcode_of(inbox: &[u8]) -> u16 {
    be16(inbox, 0)
}

/// op_mod (or obj_type for general objects) at bytes 6..8 of an inbox.
pub fn op_mod_of(inbox: &[u8]) -> u16 {
    be16(inbox, 6)
}

/// Reads `width` (≤ 32) bits at bit `off`, MSB-first within big-endian dwords.
pub(crate) fn bits(buf: &[u8], off: usize, width: usize) -> u32 {
    let dw = be32(buf, (off / 32) * 4);
    let shift = 32 - width - (off % 32);
    let mask = if width == 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    (dw >> shift) & mask
}

/// Writes `width` (≤ 32) bits at bit `off`; the buffer must hold the dword.
pub(crate) fn set_bits(buf: &mut [u8], off: usize, width: usize, v: u32) {
    let at = (off / 32) * 4;
    let Some(word) = buf.get_mut(at..at + 4) else {
        return;
    };
    let cur = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
    let shift = 32 - width - (off % 32);
    let mask = if width == 32 {
        u32::MAX
    } else {
        ((1u32 << width) - 1) << shift
    };
    let new = (cur & !mask) | ((v << shift) & mask);
    word.copy_from_slice(&new.to_be_bytes());
}

/// Which method class admits this command, or `None` if DEVX refuses it outright.
pub fn classify(inbox: &[u8]) -> Option<CmdClass> {
    let opcode = opcode_of(inbox);
    let op_mod = op_mod_of(inbox);
    match opcode {
        // SET_FLOW_TABLE_ENTRY creates with op_mod 0 and modifies with op_mod 1.
        0x936 => match op_mod {
            0 => Some(CmdClass::Create),
            1 => Some(CmdClass::Modify),
            _ => None,
        },
        0xa00 | 0x200 | 0x400 | 0x500 | 0x600 | 0x700 | 0x705 | 0x710 | 0x717 | 0x771 | 0x782
        | 0x800 | 0x806 | 0x80e | 0x816 | 0x827 | 0x829 | 0x900 | 0x904 | 0x908 | 0x90c | 0x912
        | 0x916 | 0x930 | 0x933 | 0x939 | 0x93d | 0x940 => Some(CmdClass::Create),
        0x403 | 0x502 | 0x503 | 0x504 | 0x505 | 0x506 | 0x507 | 0x50a | 0x50e | 0x703 | 0x708
        | 0x714 | 0x71a | 0x726 | 0x729 | 0x72a | 0x785 | 0x901 | 0x905 | 0x909 | 0x90d | 0x913
        | 0x917 | 0x93c | 0xa01 => Some(CmdClass::Modify),
        0x201 | 0x402 | 0x50b | 0x702 | 0x707 | 0x713 | 0x719 | 0x725 | 0x727 | 0x773 | 0x784
        | 0x82a | 0x903 | 0x907 | 0x90b | 0x90f | 0x915 | 0x919 | 0x932 | 0x935 | 0x937 | 0x93b
        | 0x93f | 0x942 | 0xa02 => Some(CmdClass::Query),
        // Linux's devx_is_general_cmd; QUERY_HCA_VPORT_GID (0x764) is not
        // among them, so GIDs come from the kernel's GID table.
        0x100 | 0x101 | 0x10a | 0x740 | 0x750 | 0x752 | 0x754 | 0x760 | 0x762 | 0x76f | 0x770
        | 0x80a | 0x80d | 0x822 | 0x824 | 0x826 | 0x842 => Some(CmdClass::General),
        0xb00..=0xcff => Some(CmdClass::General),
        _ => None,
    }
}

/// Admits `inbox` for a method of class `want`, as the kernel does before firmware.
pub fn admit(inbox: &[u8], want: CmdClass) -> Result<()> {
    if inbox.len() < 16 {
        return Err(Error::argument(format!(
            "inbox is {} bytes; every command needs at least the 16-byte header",
            inbox.len()
        )));
    }
    if want != CmdClass::General && be16(inbox, 4) != 0 {
        return Err(Error::os(
            format!(
                "{} {}: vhca_tunnel_id must be zero",
                want.name(),
                opname(inbox)
            ),
            libc::EINVAL,
        ));
    }
    match classify(inbox) {
        Some(class) if class == want => Ok(()),
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

fn key(creator: u16, number: u32) -> ObjKey {
    ObjKey {
        creator: creator as u32,
        number,
    }
}

/// Where the created object's number sits in the create outbox.
fn created_number(create_opcode: u16, inbox: &[u8], outbox: &[u8]) -> Option<u32> {
    Some(match create_opcode {
        0xa00 | 0x939 => be32(outbox, 8),
        0x771 => bits(outbox, 0x58, 8),
        0x301 => bits(outbox, 0x58, 8),
        // FTE and MCG are named by their inbox.
        0x936 => be32(inbox, 0x20),
        0x806 => bits(inbox, 0x48, 24),
        0x200 | 0x400 | 0x500 | 0x700 | 0x705 | 0x710 | 0x717 | 0x800 | 0x80e | 0x816 | 0x900
        | 0x904 | 0x908 | 0x90c | 0x912 | 0x916 | 0x930 | 0x933 | 0x93d | 0x940 => {
            bits(outbox, 0x48, 24)
        }
        _ => return None,
    })
}

/// The identity of the object a create makes, read from its inbox and outbox.
pub fn created_key(inbox: &[u8], outbox: &[u8]) -> Option<ObjKey> {
    let opcode = opcode_of(inbox);
    let number = created_number(opcode, inbox, outbox)?;
    if opcode == 0xa00 {
        return Some(ObjKey {
            creator: 0xa00 | (op_mod_of(inbox) as u32) << 16,
            number,
        });
    }
    Some(key(opcode, number))
}

/// The identity of the object a query or modify names, from its inbox.
pub fn named_key(inbox: &[u8]) -> Option<ObjKey> {
    let opcode = opcode_of(inbox);
    let n24 = bits(inbox, 0x48, 24);
    Some(match opcode {
        0xa01 | 0xa02 => ObjKey {
            creator: 0xa00 | (op_mod_of(inbox) as u32) << 16,
            number: be32(inbox, 8),
        },
        0x201 => key(0x200, n24),
        0x402 | 0x403 => key(0x400, n24),
        0x502..=0x50b | 0x50e => key(0x500, n24),
        0x702 | 0x703 => key(0x700, n24),
        0x707 | 0x708 => key(0x705, n24),
        0x713 | 0x714 => key(0x710, n24),
        0x719 | 0x71a | 0x725..=0x72a => key(0x717, n24),
        0x773 => key(0x771, bits(inbox, 0xf8, 8)),
        0x901 | 0x903 => key(0x900, n24),
        0x905 | 0x907 => key(0x904, n24),
        0x909 | 0x90b => key(0x908, n24),
        0x90d | 0x90f => key(0x90c, n24),
        0x913 | 0x915 => key(0x912, n24),
        0x917 | 0x919 => key(0x916, n24),
        0x932 | 0x93c => key(0x930, bits(inbox, 0xa8, 24)),
        0x935 => key(0x933, be32(inbox, 0x18)),
        0x936 | 0x937 => key(0x936, be32(inbox, 0x20)),
        0x93b => key(0x939, be32(inbox, 0x1c)),
        _ => return None,
    })
}

/// Builds the command that destroys what `create_in` made (its outbox is
/// `create_out`), the way the kernel pre-builds it at create time.
pub fn destroy_command(create_in: &[u8], create_out: &[u8]) -> Result<Vec<u8>> {
    let opcode = opcode_of(create_in);
    let uid = be16(create_in, 2);
    let number = created_number(opcode, create_in, create_out).ok_or_else(|| {
        Error::argument(format!(
            "{} does not create an object DEVX can destroy",
            opname(create_in)
        ))
    })?;
    let (destroy_op, len) = match opcode {
        0x200 => (0x202, 16),
        0x301 => (0x302, 16),
        0x400 => (0x401, 16),
        0x500 => (0x501, 16),
        0x700 => (0x701, 16),
        0x705 => (0x706, 16),
        0x710 => (0x711, 16),
        0x717 => (0x718, 16),
        0x771 => (0x772, 16),
        0x800 => (0x801, 16),
        0x806 => (0x807, 32),
        0x80e => (0x80f, 16),
        0x816 => (0x817, 16),
        0x900 => (0x902, 16),
        0x904 => (0x906, 16),
        0x908 => (0x90a, 16),
        0x90c => (0x90e, 16),
        0x912 => (0x914, 16),
        0x916 => (0x918, 16),
        0x930 => (0x931, 64),
        0x933 => (0x934, 64),
        0x936 => (0x938, 64),
        0x939 => (0x93a, 16),
        0x93d => (0x93e, 16),
        0x940 => (0x941, 16),
        0xa00 => (0xa03, 16),
        _ => {
            return Err(Error::argument(format!(
                "{} does not create an object DEVX can destroy",
                opname(create_in)
            )))
        }
    };
    let mut out = vec![0u8; len];
    out[0..2].copy_from_slice(&(destroy_op as u16).to_be_bytes());
    out[2..4].copy_from_slice(&uid.to_be_bytes());
    match opcode {
        0xa00 => {
            out[6..8].copy_from_slice(&op_mod_of(create_in).to_be_bytes());
            out[8..12].copy_from_slice(&number.to_be_bytes());
        }
        0x939 => out[8..12].copy_from_slice(&number.to_be_bytes()),
        0x771 | 0x301 => set_bits(&mut out, 0x58, 8, number),
        0x806 => {
            set_bits(&mut out, 0x48, 24, number);
            let gid = create_in.get(16..32).ok_or_else(|| {
                Error::argument("ATTACH_TO_MCG inbox is shorter than its multicast GID")
            })?;
            out[16..32].copy_from_slice(gid);
        }
        0x930 | 0x933 | 0x936 => {
            // Flow steering objects are named within their table: copy vport,
            // table type and table id from the create inbox.
            if create_in.len() < 24 {
                return Err(Error::argument(format!(
                    "{} inbox is shorter than its table fields",
                    opname(create_in)
                )));
            }
            out[8..12].copy_from_slice(&create_in[8..12]);
            out[16] = create_in[16];
            match opcode {
                0x930 => set_bits(&mut out, 0xa8, 24, number),
                0x933 => {
                    out[20..24].copy_from_slice(&create_in[20..24]);
                    out[24..28].copy_from_slice(&number.to_be_bytes());
                }
                _ => {
                    out[20..24].copy_from_slice(&create_in[20..24]);
                    out[32..36].copy_from_slice(&number.to_be_bytes());
                }
            }
        }
        _ => set_bits(&mut out, 0x48, 24, number),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox(opcode: u16, op_mod: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[0..2].copy_from_slice(&opcode.to_be_bytes());
        b[6..8].copy_from_slice(&op_mod.to_be_bytes());
        b
    }

    #[test]
    fn classes_follow_the_kernel_lists() {
        assert_eq!(classify(&inbox(0x400, 0)), Some(CmdClass::Create));
        assert_eq!(classify(&inbox(0x402, 0)), Some(CmdClass::Query));
        assert_eq!(classify(&inbox(0x502, 0)), Some(CmdClass::Modify));
        assert_eq!(classify(&inbox(0x100, 1)), Some(CmdClass::General));
        assert_eq!(classify(&inbox(0x936, 0)), Some(CmdClass::Create));
        assert_eq!(classify(&inbox(0x936, 1)), Some(CmdClass::Modify));
        assert_eq!(classify(&inbox(0x936, 2)), None);
        // Driver-only bring-up commands never pass.
        assert_eq!(classify(&inbox(0x109, 0)), None);
        assert!(admit(&inbox(0x401, 0), CmdClass::General)
            .unwrap_err()
            .is_os());
    }

    #[test]
    fn destroy_of_a_cq_names_its_cqn() {
        let mut create = inbox(0x400, 0);
        create[2..4].copy_from_slice(&7u16.to_be_bytes());
        let mut out = vec![0u8; 16];
        set_bits(&mut out, 0x48, 24, 0x00abcd);
        let d = destroy_command(&create, &out).unwrap();
        assert_eq!(hex::encode(&d), "04010007000000000000abcd00000000");
        assert_eq!(
            created_key(&create, &out),
            Some(ObjKey {
                creator: 0x400,
                number: 0xabcd
            })
        );
        let mut q = inbox(0x402, 0);
        set_bits(&mut q, 0x48, 24, 0xabcd);
        assert_eq!(named_key(&q), created_key(&create, &out));
    }

    #[test]
    fn destroy_of_a_flow_group_keeps_its_table() {
        let mut create = inbox(0x933, 0);
        create[16] = 0; // NIC RX
        set_bits(&mut create, 0xa8, 24, 0x12);
        let mut out = vec![0u8; 16];
        set_bits(&mut out, 0x48, 24, 3);
        let d = destroy_command(&create, &out).unwrap();
        assert_eq!(d.len(), 64);
        assert_eq!(be16(&d, 0), 0x934);
        assert_eq!(bits(&d, 0xa8, 24), 0x12);
        assert_eq!(be32(&d, 0x18), 3);
    }

    #[test]
    fn general_objects_are_keyed_by_type() {
        let mut create = inbox(0xa00, 0x0d);
        create[2..4].copy_from_slice(&1u16.to_be_bytes());
        let mut out = vec![0u8; 16];
        out[8..12].copy_from_slice(&99u32.to_be_bytes());
        let d = destroy_command(&create, &out).unwrap();
        assert_eq!(hex::encode(&d), "0a0300010000000d0000006300000000");
        let mut q = inbox(0xa02, 0x0d);
        q[8..12].copy_from_slice(&99u32.to_be_bytes());
        assert_eq!(named_key(&q), created_key(&create, &out));
    }
}
