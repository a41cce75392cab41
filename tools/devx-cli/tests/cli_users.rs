//! devx-cli as people used to ibv_devinfo, rdma and mlx5ctl run it: exit
//! codes, JSON a program can read, names instead of numbers, usage errors
//! that say what to type, and sessions that never hang.

mod common;
use common::*;

const SIM: [&str; 2] = ["--device", "sim0"];

fn sim(rest: &[&str]) -> std::process::Output {
    cli(&[&SIM[..], rest].concat())
}

#[test]
fn a_session_inside_a_session_is_refused_not_hung() {
    for (args, input, needle) in [
        (&["shell"][..], "shell\n", "cannot start another session"),
        (&["shell"][..], "script -\n", "cannot start another session"),
        (
            &["script", "-"][..],
            "shell\n",
            "cannot start another session",
        ),
        (
            &["shell"][..],
            "decode alloc_pd_out -\n",
            "stdin carries this session's commands",
        ),
        (
            &["script", "-"][..],
            "cmd -\n",
            "stdin carries this session's commands",
        ),
    ] {
        let o = cli_stdin(&[&SIM[..], args].concat(), input);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{args:?} {input:?}: {}",
            stderr(&o)
        );
        one_line_error(&o, needle);
    }
    // From a file, `decode -` still reads stdin.
    let script = std::env::temp_dir().join(format!("devx-cli-stdin-{}.devx", std::process::id()));
    std::fs::write(&script, "decode alloc_pd_out -\n").unwrap();
    let o = cli_stdin(
        &["script", script.to_str().unwrap()],
        "00000000000000000000123400000000",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("pd = 0x1234 (4660)"), "{}", stdout(&o));
    let _ = std::fs::remove_file(script);
}

#[test]
fn json_output_is_json_with_numbers() {
    let caps_in = "01000000000000010000000000000000";
    let o = sim(&["cmd", caps_in, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], 0);
    assert_eq!(v["fields"]["log_max_qp"], 17);

    let o = sim(&["caps", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(json(&o)["fields"]["log_max_qp"].is_u64());

    let o = cli(&[
        "decode",
        "alloc_pd_out",
        "00000000000000420000123400000000",
        "-j",
    ]);
    assert!(o.status.success());
    let v = json(&o);
    assert_eq!(v["fields"]["syndrome"], 0x42);
    assert_eq!(v["fields"]["pd"], 0x1234);

    let o = sim(&["obj", "create", "alloc_pd", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(json(&o)["outbox"]["pd"].is_u64());

    for args in [
        &["devices", "--json"][..],
        &["dev", "-j"],
        &["link", "-j"],
        &["res", "-j"],
        &["res", "qp", "-j"],
        &["devinfo", "--json"],
        &["devinfo", "-l", "--json"],
        &["layout", "--names", "--json"],
        &["replay", "--json", "../../fixtures/counters.fixture"],
    ] {
        let o = cli(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        json(&o);
    }
    let v = json(&cli(&["devices", "--json"]));
    assert!(v[0]["node_guid"].is_u64(), "{v}");
}

#[test]
fn errors_under_json_are_json_objects() {
    let o = cli(&["bench", "mailbox", "--iterations", "0", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v = json(&o);
    assert_eq!(v["kind"], "usage");
    assert!(v["error"].as_str().unwrap().contains("--iterations"), "{v}");

    let o = cli(&["decode", "alloc_pd_out", "zz", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert!(
        v["error"].as_str().unwrap().contains("not a hex digit"),
        "{v}"
    );

    let o = sim(&["caps", "--page", "nosuch", "-j"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(json(&o)["error"].as_str().unwrap().contains("roce"));
}

#[test]
fn statuses_syndromes_and_enums_print_by_name() {
    let o = cli(&["decode", "alloc_pd_out", "05000000000000420000000000000000"]);
    assert!(
        stdout(&o).contains("status   = BAD_RES (0x5)"),
        "{}",
        stdout(&o)
    );

    let qp = stdout(&cli(&["encode", "query_qp_out", "qpc.state=3", "qpc.st=2"]));
    let o = cli(&["decode", "query_qp_out", qp.trim()]);
    let out = stdout(&o);
    assert!(out.contains("= 0x3 (3) RTS"), "{out}");
    assert!(out.contains("= 0x2 (2) UD"), "{out}");

    // The emulated device's syndrome, by name.
    let o = cli_stdin(
        &["--device", "sim0", "shell"],
        "e = obj eqn 0\nu = obj uar\nb = obj umem 4096\nd = obj umem 64\n\
         obj create create_cq cq_context.log_cq_size=31 cq_context.c_eqn_or_apu_element=$e cq_context.uar_page=$u \
         cq_umem_valid=1 cq_umem_id=$b cq_context.dbr_umem_valid=1 cq_context.dbr_umem_id=$d\n",
    );
    one_line_error(
        &o,
        "CREATE_CQ: BAD_PARAM (0x3), syndrome 0x30000001 (CQ_TOO_LARGE)",
    );
}

#[test]
fn usage_errors_show_clap_whole_message() {
    let o = cli(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Usage: devx-cli"), "{}", stderr(&o));
    assert!(stderr(&o).contains("Commands:"), "{}", stderr(&o));

    let o = cli(&["cap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("a similar subcommand exists: 'caps'"),
        "{}",
        stderr(&o)
    );

    let o = cli(&["decode"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("<LAYOUT>") && err.contains("Usage:"), "{err}");
    assert!(err.lines().count() < 25, "{err}");
}

#[test]
fn device_and_record_are_refused_where_no_device_is_used() {
    let rec = std::env::temp_dir().join(format!("devx-cli-norec-{}", std::process::id()));
    for cmd in [
        &["layout", "nop_in"][..],
        &["encode", "nop_in"],
        &["decode", "nop_in", "00000000000000000000000000000000"],
        &["devices"],
        &["bench", "mailbox", "--iterations", "1"],
    ] {
        let o = cli(&[&SIM[..], cmd].concat());
        assert_eq!(o.status.code(), Some(1), "{cmd:?}");
        one_line_error(&o, "--device does not apply");
        let o = cli(&[&["--record", rec.to_str().unwrap()][..], cmd].concat());
        one_line_error(&o, "--record does not apply to");
        assert!(!rec.exists(), "{cmd:?} created {}", rec.display());
    }
    for cmd in [&["dev"][..], &["link"], &["res"], &["replay", "x.fixture"]] {
        let o = cli(&[&["--record", rec.to_str().unwrap()][..], cmd].concat());
        one_line_error(&o, "--record does not apply to");
        assert!(!rec.exists(), "{cmd:?} created {}", rec.display());
    }
}

#[test]
fn names_in_any_case_and_numbers_without_ambiguity() {
    let o = cli(&["layout", "CREATE_CQ_IN"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("create_cq_in ("));
    let o = cli(&["layout", "--names"]);
    let out = stdout(&o);
    assert!(out.lines().any(|l| l == "create_cq_in"), "{out}");
    assert!(out.lines().all(|l| !l.contains(' ')), "{out}");

    one_line_error(
        &cli(&["encode", "alloc_pd_in", "opcode=0800"]),
        "'0800' has a leading zero: write 0x800 for hex or 800 for decimal",
    );
    one_line_error(
        &cli(&["encode", "alloc_pd_in", "opcode=0x800", "opcode=0x801"]),
        "field opcode is given twice",
    );
    one_line_error(
        &sim(&["obj", "create", "alloc_pd", "uid=0", "uid=1"]),
        "field uid is given twice",
    );
}

#[test]
fn an_opcode_without_a_layout_is_sent_and_answered() {
    let o = sim(&["cmd", "07ff0000000000000000000000000000"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(!err.contains("--outlen"), "{err}");
    one_line_error(&o, "UNKNOWN(0x7ff)");
    // --outlen still overrides; the emulator names what the device refused.
    one_line_error(
        &sim(&["cmd", "010a0000000000000000000000000000", "--outlen", "16"]),
        "QUERY_ISSI: BAD_OUTP_LEN (0x51), syndrome 0x10000002 (OUTBOX_SHORT)",
    );
}

#[test]
fn rdma_style_dev_link_and_res() {
    let o = sim(&["dev"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).starts_with("0: sim0: node_type ca fw "),
        "{}",
        stdout(&o)
    );
    let o = sim(&["link"]);
    assert!(
        stdout(&o).contains("link sim0/1 state ACTIVE physical_state LINK_UP"),
        "{}",
        stdout(&o)
    );
    let o = cli_stdin(
        &["--device", "sim0", "shell"],
        "pd = obj create alloc_pd\nres pd\nres mr\nres -j\n! res bogus\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("dev sim0 pd 0x"), "{out}");
    assert!(out.contains("\"pd\": 1"), "{out}");
    assert!(
        out.contains("expected error: unknown object kind 'bogus'"),
        "{out}"
    );
}

#[test]
fn caps_pages_by_name_max_or_current() {
    let o = sim(&["caps", "--page", "roce", "--mode", "max"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("roce_address_table_size"),
        "{}",
        stdout(&o)
    );
    let o = sim(&["caps", "--page", "ETH"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sim(&["caps", "--page", "atomic", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    json(&o);
    // The emulator does not advertise general_2: the device says so.
    let o = sim(&["caps", "--page", "general_2"]);
    one_line_error(&o, "QUERY_HCA_CAP");
}

#[test]
fn devinfo_takes_ibv_devinfo_flags() {
    let o = cli(&["devinfo", "-v", "-d", "sim0", "-i", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("hca_id:\tsim0"), "{out}");
    assert!(out.contains("GID[  0]:\t\tfe80::"), "{out}");
    assert!(out.contains("::ffff:10.200.0.1"), "{out}");
    assert!(out.contains("board_id:\t\t\tSIM_CX6DX_0001"), "{out}");
    assert!(out.contains("phys_state:\t\tLINK_UP (5)"), "{out}");
    assert!(out.contains("port_cap_flags:\t\t0x00010000"), "{out}");
    let v = json(&cli(&["devinfo", "-d", "sim0", "--json"]));
    assert_eq!(v["ports"][0]["phys_state"], 5);
    assert!(v["board_id"].is_string(), "{v}");
    one_line_error(
        &cli(&["devinfo", "-d", "sim0", "-i", "2"]),
        "sim0 has no port 2",
    );
    let o = cli(&["devinfo", "-l"]);
    assert!(stdout(&o).contains("HCAs found:\n\tsim0"), "{}", stdout(&o));
}

#[test]
fn devices_says_any_sim_name_works() {
    let o = cli(&["devices"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("rc_pingpong uses sim1 and sim2"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn replay_on_a_device_reports_every_field_that_differs() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");
    let original = format!("{fixtures}/device_queries.fixture");
    // Recorded on sim100: replayed there, it matches.
    let o = cli(&["--device", "sim100", "replay", &original]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("14 of 14 commands replayed on sim100: 14 ok"),
        "{}",
        stdout(&o)
    );
    // On sim0 the GUIDs, MAC and GIDs differ, each named, and every command runs.
    let o = cli(&["--device", "sim0", "replay", &original]);
    one_line_error(&o, "4 commands differ from the recording");
    let err = stderr(&o);
    assert!(
        err.contains("query_nic_vport_context_out.nic_vport_context.node_guid: recorded 0xc42a1fffe000064, got 0xc42a1fffe000000"),
        "{err}"
    );
    assert!(err.contains("permanent_address.mac_addr_31_0"), "{err}");
    assert!(stdout(&o).contains("14 of 14"), "{}", stdout(&o));
    let o = cli(&["--device", "sim0", "replay", "--json", &original]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["passed"], false);
    assert_eq!(v["steps"].as_array().unwrap().len(), 14);

    // An edited outbox passes the self-check (it only checks the file) but
    // not a replay on the device.
    let text = std::fs::read_to_string(&original).unwrap();
    let edited = text.replacen("0020  0f0f0011", "0020  0f0f0012", 1);
    assert_ne!(text, edited);
    let path = std::env::temp_dir().join(format!("devx-cli-edited-{}.fixture", std::process::id()));
    std::fs::write(&path, edited).unwrap();
    let p = path.to_str().unwrap();
    let o = cli(&["replay", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cli(&["--device", "sim100", "replay", p]);
    one_line_error(
        &o,
        "query_hca_cap_out.capability.cmd_hca_cap.log_max_qp: recorded 0x12, got 0x11",
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn bench_async_reports_every_metric_as_json() {
    let o = cli(&["bench", "async", "--iterations", "200", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["bench"], "async");
    for key in [
        "nop_per_s_1_in_flight",
        "nop_per_s_32_in_flight",
        "nop_per_s_1000_in_flight",
        "nop_blocking_ns",
        "nop_awaited_ns",
        "nop_awaited_over_blocking",
        "pd_pair_blocking_ns",
        "pd_pair_awaited_ns",
        "events_per_s",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {v}");
    }
}
