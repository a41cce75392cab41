//! Every check the emulated firmware makes, with the PRM status it answers
//! and a stable syndrome.
//!
//! Real firmware syndromes are opaque 32-bit values; ours are structured so a
//! failure can be read at a glance:
//!
//! | range          | family                                                   |
//! |----------------|----------------------------------------------------------|
//! | `0x1000_00xx`  | mailbox and header checks                                |
//! | `0x2001_00KK`  | object of kind `KK` does not exist (BAD_RES)             |
//! | `0x2002_00KK`  | object of kind `KK` belongs to another uid (BAD_RES)     |
//! | `0x2003_00KK`  | object of kind `KK` is still referenced (RES_BUSY)       |
//! | `0x3001_00KK`  | table of kind `KK` is full, `2^log_max_*` reached (LIM)  |
//! | `0x3000_00xx`  | a size beyond a capability                               |
//! | `0x4000_00xx`  | queue memory (UMEM) checks                               |
//! | `0x5000_00xx`  | QP state machine                                         |
//! | `0x6000_00xx`  | per-object parameter checks                              |
//!
//! `KK` is [`ObjKind::code`](super::ObjKind::code). A uid mismatch answers
//! BAD_RES like a missing object: firmware resolves numbers within the
//! caller's uid, so another uid's object is "not a resource of yours"; the
//! distinct syndrome only helps debugging.

use super::ObjKind;

/// One firmware check: the status it answers and its syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub status: u8,
    pub syndrome: u32,
    pub name: &'static str,
    pub what: &'static str,
}

macro_rules! checks {
    ($($name:ident = $status:ident, $syn:literal, $what:literal;)*) => {
        $(
            #[doc = $what]
            pub const $name: Check = Check {
                status: status::$status,
                syndrome: $syn,
                name: stringify!($name),
                what: $what,
            };
        )*
        /// Every fixed check, for documentation and tests.
        pub const ALL: &[Check] = &[$($name),*];
    };
}

/// PRM command status values (`MLX5_CMD_STAT_*`).
pub mod status {
    pub const OK: u8 = 0x00;
    pub const INT_ERR: u8 = 0x01;
    pub const BAD_OP: u8 = 0x02;
    pub const BAD_PARAM: u8 = 0x03;
    pub const BAD_SYS_STATE: u8 = 0x04;
    pub const BAD_RES: u8 = 0x05;
    pub const RES_BUSY: u8 = 0x06;
    pub const LIM: u8 = 0x08;
    pub const BAD_RES_STATE: u8 = 0x09;
    pub const IX: u8 = 0x0a;
    pub const NO_RES: u8 = 0x0f;
    pub const BAD_QP_STATE: u8 = 0x10;
    pub const BAD_SIZE_OUTS_CQES: u8 = 0x40;
    pub const BAD_INP_LEN: u8 = 0x50;
    pub const BAD_OUTP_LEN: u8 = 0x51;
}

checks! {
    // Mailbox and header.
    INBOX_SHORT = BAD_INP_LEN, 0x1000_0001, "inbox shorter than the command's *_in layout (or its tail)";
    OUTBOX_SHORT = BAD_OUTP_LEN, 0x1000_0002, "outbox shorter than the command's *_out header and fields (or its tail)";
    UNKNOWN_OPCODE = BAD_OP, 0x1000_0003, "opcode not implemented by this firmware";
    BAD_OP_MOD = BAD_PARAM, 0x1000_0004, "op_mod not valid for this opcode";
    HEADER_RESERVED = BAD_PARAM, 0x1000_0005, "reserved header bits 0x20..0x30 are not zero";
    BAD_UID = BAD_PARAM, 0x1000_0006, "uid names no live user context";
    RESERVED_NONZERO = BAD_PARAM, 0x1000_0007, "a reserved field the PRM requires zero is set";
    OTHER_FUNCTION = BAD_PARAM, 0x1000_0008, "other_function / other_vport needs a vport group manager";
    UNKNOWN_CAP_TYPE = BAD_PARAM, 0x1000_0009, "QUERY_HCA_CAP for a capability type this device lacks";
    BAD_PORT = BAD_PARAM, 0x1000_000a, "port number is not a port of this device";
    BAD_GID_INDEX = BAD_PARAM, 0x1000_000b, "GID index beyond the RoCE address table";
    UCTX_HAS_OBJECTS = RES_BUSY, 0x1000_000d, "user context still owns objects";

    // Sizes beyond capabilities.
    CQ_TOO_LARGE = BAD_PARAM, 0x3000_0001, "log_cq_size above log_max_cq_sz";
    SQ_TOO_LARGE = BAD_PARAM, 0x3000_0002, "log_sq_size above log_max_qp_sz";
    RQ_TOO_LARGE = BAD_PARAM, 0x3000_0003, "log_rq_size above log_max_qp_sz";
    RQ_STRIDE_TOO_LARGE = BAD_PARAM, 0x3000_0004, "receive WQE stride above max_wqe_sz_rq";
    MSG_TOO_LARGE = BAD_PARAM, 0x3000_0005, "log_msg_max above log_max_msg";
    RA_TOO_LARGE = BAD_PARAM, 0x3000_0006, "log_sra_max / log_rra_max above log_max_ra_req_qp / log_max_ra_res_qp";
    SRQ_TOO_LARGE = BAD_PARAM, 0x3000_0007, "SRQ/RMP size above log_max_srq_sz";
    WQ_TOO_LARGE = BAD_PARAM, 0x3000_0008, "SQ/RQ log_wq_sz above log_max_wq_sz";
    RQT_TOO_LARGE = BAD_PARAM, 0x3000_0009, "RQT size above 2^log_max_rqt_size";
    FT_TOO_LARGE = BAD_PARAM, 0x3000_000a, "flow table size above log_max_ft_size";
    BULK_TOO_LARGE = BAD_PARAM, 0x3000_000b, "flow counter bulk above log_max_flow_counter_bulk";
    MCG_FULL = LIM, 0x3000_000c, "multicast group already has max_qp_mcg QPs";
    GENEVE_OPT_LIMIT = LIM, 0x3000_000d, "max_geneve_tlv_options GENEVE TLV option objects already exist";
    GENEVE_OPT_DATA_LEN = BAD_PARAM, 0x3000_000e, "GENEVE option_data_length is 0 or above max_geneve_tlv_option_data_len";

    // Queue memory.
    NO_UMEM = BAD_PARAM, 0x4000_0001, "queue buffer must be given as a UMEM (umem_valid clear)";
    UMEM_TOO_SMALL = BAD_PARAM, 0x4000_0002, "umem offset + queue bytes run past the end of the UMEM";
    DBR_OUT_OF_UMEM = BAD_PARAM, 0x4000_0003, "doorbell record (8 bytes at dbr_addr) runs past the end of its UMEM";
    DBR_MISALIGNED = BAD_PARAM, 0x4000_0004, "doorbell record is not 8-byte aligned";
    UMEM_READ_ONLY = BAD_PARAM, 0x4000_0005, "object needs device writes but the UMEM was registered without LOCAL_WRITE";
    MKEY_OUT_OF_UMEM = BAD_PARAM, 0x4000_0006, "mkey_umem_offset + len run past the end of the UMEM";
    UMEM_EMPTY = BAD_PARAM, 0x4000_0007, "UMEM of zero bytes";

    // QP state machine.
    QP_BAD_TRANSITION = BAD_QP_STATE, 0x5000_0001, "the QP's current state is not the source state of this transition";
    QP_OPT_PARAM = BAD_PARAM, 0x5000_0002, "opt_param_mask has a bit this transition does not allow for this QP type";
    QP_BAD_TYPE = BAD_PARAM, 0x5000_0003, "QP service type not supported";
    QP_BAD_MTU = BAD_PARAM, 0x5000_0004, "path MTU is not 256..4096 (or raw Ethernet for RAW QPs)";
    QP_BAD_PKEY = BAD_PARAM, 0x5000_0005, "pkey_index beyond the P_Key table";
    QP_BAD_RQ_TYPE = BAD_PARAM, 0x5000_0006, "rq_type not supported for this QP";
    QP_NO_QUEUES = BAD_PARAM, 0x5000_0007, "QP has neither send nor receive queue";
    QP_INPUT_QPN = BAD_PARAM, 0x5000_0008, "input_qpn requires a capability this device lacks";
    QP_BAD_PM_STATE = BAD_PARAM, 0x5000_0009, "pm_state is the reserved value 2";

    // Object parameters.
    CQE_SIZE = BAD_PARAM, 0x6000_0001, "cqe_sz is neither 64 nor 128 bytes";
    CQE_COMPRESSION = BAD_PARAM, 0x6000_0002, "CQE compression requested but not advertised";
    CQ_MODIFY_FIELDS = BAD_PARAM, 0x6000_0003, "modify_field_select / resize_field_select names unknown fields";
    CQ_RESIZE_TOO_SMALL = BAD_SIZE_OUTS_CQES, 0x6000_0004, "resized CQ cannot hold the outstanding CQEs";
    MKEY_ACCESS_MODE = BAD_PARAM, 0x6000_0005, "mkey access mode not supported through DEVX (PA, SW_ICM, MEMIC…)";
    MKEY_ACCESS_RIGHTS = BAD_PARAM, 0x6000_0006, "remote write or atomic without local write";
    MKEY_LENGTH64 = BAD_PARAM, 0x6000_0007, "length64 (whole address space) on a UMEM-backed mkey";
    MKEY_KLM = BAD_PARAM, 0x6000_0008, "indirect mkey entries are malformed or name unusable mkeys";
    WQ_TYPE = BAD_PARAM, 0x6000_0009, "work queue type not supported";
    WQ_STATE = BAD_RES_STATE, 0x6000_000a, "SQ/RQ/RMP state does not allow this modify";
    WQ_BAD_STATE_VALUE = BAD_PARAM, 0x6000_000b, "target state is not a valid SQ/RQ/RMP state";
    TIR_TYPE = BAD_PARAM, 0x6000_000c, "TIR dispatch type not supported";
    RQT_EMPTY = BAD_PARAM, 0x6000_000d, "RQT with zero actual size";
    FT_TYPE = BAD_PARAM, 0x6000_000e, "flow table type not supported for this function";
    FG_RANGE = BAD_PARAM, 0x6000_000f, "flow group index range is empty or outside the table";
    FG_OVERLAP = BAD_PARAM, 0x6000_0010, "flow group overlaps an existing group";
    FTE_NO_GROUP = BAD_PARAM, 0x6000_0011, "flow index is in no flow group of the table";
    FTE_EXISTS = BAD_PARAM, 0x6000_0012, "a flow entry already occupies this index (use modify)";
    FTE_MISSING = BAD_RES, 0x6000_0013, "no flow entry at this index";
    FTE_DEST = BAD_PARAM, 0x6000_0014, "flow entry destination list is malformed";
    GENERAL_OBJ_TYPE = BAD_PARAM, 0x6000_0015, "general object type not supported";
    MCG_NOT_ATTACHED = BAD_PARAM, 0x6000_0016, "QP is not attached to this multicast group";
    MCG_ALREADY = BAD_PARAM, 0x6000_0017, "QP is already attached to this multicast group";
    MCG_BAD_GID = BAD_PARAM, 0x6000_0018, "multicast GID is not a multicast address";
    MCG_QP_TYPE = BAD_PARAM, 0x6000_0019, "only UD and RAW QPs can join multicast groups";
    SRQ_NO_UMEM = BAD_PARAM, 0x6000_001a, "legacy SRQ needs physical pages; use RMP or XRC_SRQ through DEVX";
    XRCD_REQUIRED = BAD_PARAM, 0x6000_001b, "XRC object without a valid XRC domain";
    EQ_NOT_COMPLETION = BAD_PARAM, 0x6000_001c, "c_eqn_or_apu_element is not a completion EQ";
    GENERAL_OBJ_NO_MODIFY = BAD_PARAM, 0x6000_001d, "general object type does not support MODIFY_GENERAL_OBJECT";
}

/// The check for "no object of `kind` with this number".
pub fn not_found(kind: ObjKind) -> Check {
    Check {
        status: status::BAD_RES,
        syndrome: 0x2001_0000 | kind.code(),
        name: "NOT_FOUND",
        what: "object number does not exist",
    }
}

/// The check for "the object belongs to another uid".
pub fn foreign(kind: ObjKind) -> Check {
    Check {
        status: status::BAD_RES,
        syndrome: 0x2002_0000 | kind.code(),
        name: "FOREIGN_UID",
        what: "object belongs to another uid",
    }
}

/// The check for "the object is still referenced by another object".
pub fn busy(kind: ObjKind) -> Check {
    Check {
        status: status::RES_BUSY,
        syndrome: 0x2003_0000 | kind.code(),
        name: "IN_USE",
        what: "object is still referenced by another object",
    }
}

/// The check for "the table of `kind` is full".
pub fn table_full(kind: ObjKind) -> Check {
    Check {
        status: status::LIM,
        syndrome: 0x3001_0000 | kind.code(),
        name: "TABLE_FULL",
        what: "2^log_max_* objects of this kind already exist",
    }
}

/// The name of a syndrome the emulated device answers (`CQ_TOO_LARGE`,
/// `NOT_FOUND(cq)`), `None` for one it never gives. Real firmware syndromes
/// are opaque; only the emulator's can be named.
pub fn name(syndrome: u32) -> Option<String> {
    if let Some(c) = ALL.iter().find(|c| c.syndrome == syndrome) {
        return Some(c.name.to_string());
    }
    let kind = ObjKind::ALL
        .iter()
        .find(|k| k.code() == syndrome & 0xffff)?;
    let family = [not_found, foreign, busy, table_full]
        .into_iter()
        .map(|f| f(*kind))
        .find(|c| c.syndrome == syndrome)?;
    Some(format!("{}({kind})", family.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn syndromes_are_unique_and_statuses_are_prm_values() {
        let mut seen = HashSet::new();
        for c in ALL {
            assert!(
                seen.insert(c.syndrome),
                "{} reuses {:#x}",
                c.name,
                c.syndrome
            );
            assert!(
                prm_layouts::enums::CmdStatus::from_raw(c.status).is_some(),
                "{}",
                c.name
            );
            assert_ne!(c.status, status::OK);
        }
    }

    #[test]
    fn syndromes_have_names() {
        assert_eq!(name(CQ_TOO_LARGE.syndrome).as_deref(), Some("CQ_TOO_LARGE"));
        assert_eq!(
            name(not_found(ObjKind::Cq).syndrome).as_deref(),
            Some("NOT_FOUND(cq)")
        );
        assert_eq!(
            name(busy(ObjKind::Umem).syndrome).as_deref(),
            Some("IN_USE(umem)")
        );
        assert_eq!(name(0), None);
        assert_eq!(name(0x2001_00ff), None);
    }
}
