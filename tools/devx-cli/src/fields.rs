//! How decoded field values are shown: hex with the decimal value and, for
//! fields that hold a PRM enumeration, its name in text (`0x3 (3) RTS`, the
//! way mlx5ctl prints); plain numbers in JSON.

use prm_layouts::enums::{
    CmdStatus, CqeOpcode, CqeSyndrome, GeneralObjType, Opcode, QpServiceType, QpState,
};
use prm_layouts::FieldValue;

/// Names of a small PRM enumeration that has no type in `prm_layouts::enums`.
type Table = &'static [(u64, &'static str)];

/// SQ, RQ and RMP `state`.
const WQ_STATE: Table = &[(0, "RST"), (1, "RDY"), (3, "ERR")];
/// `cq_context.status`.
const CQ_STATUS: Table = &[(0, "OK"), (9, "CQ_OVERFLOW"), (10, "CQ_WRITE_FAIL")];
/// HCA vport `port_state` (the IB port states `ibv_devinfo` prints).
const PORT_STATE: Table = &[(1, "DOWN"), (2, "INIT"), (3, "ARMED"), (4, "ACTIVE")];
/// QUERY_VPORT_STATE `state` and `admin_state`.
const VPORT_STATE: Table = &[(0, "DOWN"), (1, "UP"), (2, "FOLLOW")];
/// `cmd_hca_cap.port_type`.
const PORT_TYPE: Table = &[(0, "IB"), (1, "ETHERNET")];

/// How one field's values are named.
#[derive(Clone, Copy)]
enum Names {
    Status,
    Opcode,
    QpState,
    QpType,
    GeneralObj,
    CqeOpcode,
    CqeSyndrome,
    Table(Table),
}

/// Every field whose value is an enumeration, by field name: the one place
/// that ties layouts' fields to names. `layout` narrows names that mean
/// different things in different layouts (`state`, a CQE's `opcode`).
const ENUM_FIELDS: &[(Option<&str>, &str, Names)] = &[
    // Layout-specific entries first: the first match wins.
    (Some("err_cqe"), "syndrome", Names::CqeSyndrome),
    (Some("err_cqe"), "opcode", Names::CqeOpcode),
    (Some("cqe64"), "opcode", Names::CqeOpcode),
    (None, "status", Names::Status),
    (None, "opcode", Names::Opcode),
    (None, "qpc.state", Names::QpState),
    (None, "qpc.st", Names::QpType),
    (None, "obj_type", Names::GeneralObj),
    (None, "cq_context.status", Names::Table(CQ_STATUS)),
    (None, "sq_context.state", Names::Table(WQ_STATE)),
    (None, "rq_context.state", Names::Table(WQ_STATE)),
    (None, "rmp_context.state", Names::Table(WQ_STATE)),
    (None, "ctx.state", Names::Table(WQ_STATE)),
    (None, "sq_state", Names::Table(WQ_STATE)),
    (None, "rq_state", Names::Table(WQ_STATE)),
    (None, "rmp_state", Names::Table(WQ_STATE)),
    (
        None,
        "hca_vport_context.port_state",
        Names::Table(PORT_STATE),
    ),
    (
        None,
        "hca_vport_context.vport_state",
        Names::Table(PORT_STATE),
    ),
    (
        Some("query_vport_state_out"),
        "state",
        Names::Table(VPORT_STATE),
    ),
    (
        Some("query_vport_state_out"),
        "admin_state",
        Names::Table(VPORT_STATE),
    ),
    (None, "port_type", Names::Table(PORT_TYPE)),
    (None, "cmd_hca_cap.port_type", Names::Table(PORT_TYPE)),
    (
        None,
        "capability.cmd_hca_cap.port_type",
        Names::Table(PORT_TYPE),
    ),
];

/// The name of `value` in field `field` of layout `layout`, if it is an
/// enumeration and the value is known.
pub fn enum_name(layout: &str, field: &str, value: u64) -> Option<&'static str> {
    let (_, _, names) = ENUM_FIELDS
        .iter()
        .find(|(l, f, _)| *f == field && l.is_none_or(|l| l == layout))?;
    match names {
        Names::Status => u8::try_from(value)
            .ok()
            .and_then(CmdStatus::from_raw)
            .map(CmdStatus::name),
        Names::Opcode => u16::try_from(value)
            .ok()
            .and_then(Opcode::from_raw)
            .map(Opcode::name),
        Names::QpState => u8::try_from(value)
            .ok()
            .and_then(QpState::from_raw)
            .map(QpState::name),
        Names::QpType => u8::try_from(value)
            .ok()
            .and_then(QpServiceType::from_raw)
            .map(QpServiceType::name),
        Names::GeneralObj => u16::try_from(value)
            .ok()
            .and_then(GeneralObjType::from_raw)
            .map(GeneralObjType::name),
        Names::CqeOpcode => u8::try_from(value)
            .ok()
            .and_then(CqeOpcode::from_raw)
            .map(CqeOpcode::name),
        Names::CqeSyndrome => u8::try_from(value)
            .ok()
            .and_then(CqeSyndrome::from_raw)
            .map(CqeSyndrome::name),
        Names::Table(t) => t.iter().find(|(v, _)| *v == value).map(|(_, n)| *n),
    }
}

/// A command status as users read it: `BAD_RES (0x5)`.
pub fn status_text(status: u8) -> String {
    match CmdStatus::from_raw(status) {
        Some(s) => format!("{} ({status:#x})", s.name()),
        None => format!("{status:#x} (not a PRM status)"),
    }
}

/// Text form: `0x11 (17)`, `0x3 (3) RTS`, `BAD_RES (0x5)` for statuses;
/// byte strings in hex.
pub fn text(layout: &str, field: &str, value: &FieldValue) -> String {
    let FieldValue::Scalar(v) = value else {
        return value.to_string();
    };
    if field == "status" {
        if let Ok(s) = u8::try_from(*v) {
            return status_text(s);
        }
    }
    let name = enum_name(layout, field, *v)
        .map(|n| format!(" {n}"))
        .unwrap_or_default();
    format!("{v:#x} ({v}){name}")
}

/// JSON form: scalars as numbers (every field fits 64 bits), byte strings as
/// hex strings.
pub fn json(value: &FieldValue) -> String {
    match value {
        FieldValue::Scalar(v) => v.to_string(),
        FieldValue::Bytes(_) => json_str(&value.to_string()),
    }
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_and_statuses_print_by_name() {
        assert_eq!(
            text("query_qp_out", "qpc.state", &FieldValue::Scalar(3)),
            "0x3 (3) RTS"
        );
        assert_eq!(
            text("alloc_pd_out", "status", &FieldValue::Scalar(5)),
            "BAD_RES (0x5)"
        );
        assert_eq!(
            text("x", "log_max_qp", &FieldValue::Scalar(17)),
            "0x11 (17)"
        );
        assert_eq!(json(&FieldValue::Scalar(17)), "17");
        assert_eq!(json(&FieldValue::Bytes(vec![0xfe, 0x80])), "\"fe80\"");
        assert_eq!(enum_name("other_out", "state", 1), None);
        assert_eq!(enum_name("query_vport_state_out", "state", 1), Some("UP"));
    }
}
