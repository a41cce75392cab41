//! `devx-cli layout | encode | decode` as a user runs them.
mod common;
use common::*;

#[test]
fn encode_then_decode_round_trips() {
    let o = cli(&[
        "encode",
        "create_cq_in",
        "opcode=0x400",
        "cq_context.log_cq_size=5",
        "cq_context.uar_page=0x123",
        "cq_context.c_eqn_or_apu_element=7",
        "cq_context.dbr_addr=0x1122334455667788",
    ]);
    assert!(o.status.success());
    let hex = stdout(&o).trim().to_string();
    assert_eq!(hex.len(), 272 * 2);
    // Byte 16+12 of create_cq_in holds log_cq_size << 24 | uar_page.
    assert_eq!(&hex[56..64], "05000123");
    let d = cli(&["decode", "create_cq_in", &hex]);
    assert!(d.status.success());
    let text = stdout(&d);
    assert!(text.contains("opcode"));
    assert!(text.contains("cq_context.log_cq_size"));
    assert!(text.contains("0x1122334455667788"));
    assert!(text.contains("cq_context.c_eqn_or_apu_element"));
    // Only non-zero fields unless --all.
    assert!(!text.contains("cq_context.cqe_sz"));
    let all = stdout(&cli(&["decode", "--all", "create_cq_in", &hex]));
    assert!(all.contains("cq_context.cqe_sz"));
}

#[test]
fn decode_reads_stdin() {
    let o = cli_stdin(
        &["decode", "alloc_pd_out", "-"],
        "00000000 00000000\n00001234 00000000\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("pd"));
    assert!(stdout(&o).contains("0x1234"));
}

#[test]
fn layout_json_has_the_stable_schema() {
    let o = cli(&["layout", "--json"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(text.contains(
        "{\"name\": \"cq_context.log_cq_size\", \"offset_bits\": 227, \"width_bits\": 5}"
    ));
    assert!(text.contains("\"create_qp_in\": {\"size_bits\": 2176, \"fields\": ["));
    let one = stdout(&cli(&["layout", "qpc"]));
    assert!(one.starts_with("qpc (232 bytes"));
}

#[test]
fn unknown_layout_suggests_names() {
    one_line_error(
        &cli(&["layout", "create_cq_inn"]),
        "did you mean create_cq_in",
    );
    one_line_error(&cli(&["encode", "creat_qp_in", "opcode=1"]), "did you mean");
}

#[test]
fn unknown_field_suggests_names() {
    let o = cli(&["encode", "create_cq_in", "cq_context.log_cq_sz=5"]);
    one_line_error(&o, "cq_context.log_cq_size");
}

#[test]
fn value_too_wide_is_refused() {
    let o = cli(&["encode", "create_cq_in", "cq_context.log_cq_size=32"]);
    one_line_error(&o, "does not fit in 5 bits");
}

#[test]
fn bad_values_are_refused() {
    one_line_error(
        &cli(&["encode", "alloc_pd_in", "opcode=banana"]),
        "not a number",
    );
    one_line_error(&cli(&["encode", "alloc_pd_in", "opcode"]), "field=value");
}

#[test]
fn bad_hex_is_refused() {
    one_line_error(&cli(&["decode", "alloc_pd_in", "0800000"]), "odd number");
    one_line_error(&cli(&["decode", "alloc_pd_in", "08zz"]), "not a hex digit");
}

#[test]
fn wrong_lengths_are_refused() {
    let short = "00".repeat(15);
    one_line_error(&cli(&["decode", "alloc_pd_in", &short]), "needs 16 bytes");
    let long = "00".repeat(17);
    one_line_error(
        &cli(&["decode", "alloc_pd_in", &long]),
        "longer than layout",
    );
}

#[test]
fn byte_fields_take_hex() {
    let gid = "fe800000000000000000000000000001";
    let o = cli(&[
        "encode",
        "attach_to_mcg_in",
        "opcode=0x806",
        &format!("multicast_gid={gid}"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).trim().ends_with(gid));
    let bad = cli(&["encode", "attach_to_mcg_in", "multicast_gid=fe80"]);
    one_line_error(&bad, "16 bytes");
}

#[test]
fn an_error_cqe_decodes_with_its_hardware_syndrome() {
    // REQ_ERR, REMOTE_ACCESS_ERR, vendor syndrome 0x88, hw syndrome 0x12 of type 1.
    let mut cqe = [0u8; 64];
    cqe[52] = 0x12;
    cqe[53] = 0x10;
    cqe[54] = 0x88;
    cqe[55] = 0x13;
    cqe[63] = 0xd0;
    let hex: String = cqe.iter().map(|b| format!("{b:02x}")).collect();
    let o = cli(&["decode", "err_cqe", &hex]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for line in [
        "hw_err_synd     = 0x12 (18)",
        "hw_synd_type    = 0x10 (16)",
        "vendor_err_synd = 0x88 (136)",
        "syndrome        = 0x13 (19) REMOTE_ACCESS_ERR",
        "opcode          = 0xd (13) REQ_ERR",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
    let j = stdout(&cli(&["decode", "--json", "err_cqe", &hex]));
    assert!(j.contains("\"hw_err_synd\": 18"), "{j}");
}
