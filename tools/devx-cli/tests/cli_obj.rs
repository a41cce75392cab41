//! `devx-cli obj | shell | script | --record | replay` as a user runs them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;
use common::*;

/// A unique file under the temp dir.
fn temp(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("devx-cli-{tag}-{}-{n}", std::process::id()))
}

/// Builds a CQ by hand: the lines the fixtures README shows.
const CQ_SCRIPT: &str = "\
# a CQ by hand
eq = obj eqn 0
u = obj uar
buf = obj umem 4096 --access 1
dbr = obj umem 4096 --access 1
obj pd=create alloc_pd_in
cq = obj create create_cq_in cq_context.log_cq_size=6 cq_context.uar_page=$u cq_context.c_eqn_or_apu_element=$eq cq_context.dbr_umem_valid=1 cq_context.dbr_umem_id=$dbr cq_umem_valid=1 cq_umem_id=$buf
obj query $cq
! obj destroy $buf
obj list
";

#[test]
fn a_one_shot_create_prints_the_object_and_says_it_dies() {
    let o = cli(&["--device", "sim0", "obj", "create", "ALLOC_PD"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("$1 = ALLOC_PD 0x"), "{out}");
    assert!(out.contains("  pd = 0x"), "{out}");
    assert!(
        stderr(&o).contains("objects die with the process"),
        "{}",
        stderr(&o)
    );

    let o = cli(&["--device", "sim0", "obj", "create", "alloc_pd", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("{\"ref\": \"$1\", \"id\": "), "{out}");
    assert!(out.contains("\"opcode\": \"ALLOC_PD\""), "{out}");
}

#[test]
fn bad_input_gives_one_line_errors() {
    let sim = ["--device", "sim0"];
    let run = |rest: &[&str]| cli(&[&sim[..], rest].concat());
    one_line_error(
        &run(&["obj", "create", "create_cqq_in"]),
        "unknown layout 'create_cqq_in'",
    );
    one_line_error(
        &run(&["obj", "create", "create_cq_in", "bogus=1"]),
        "layout create_cq_in has no field `bogus`",
    );
    one_line_error(
        &run(&[
            "obj",
            "create",
            "create_cq_in",
            "cq_context.log_cq_size=abc",
        ]),
        "field cq_context.log_cq_size: 'abc' is not a number",
    );
    one_line_error(
        &run(&["obj", "create", "create_cq_in", "cq_context.log_cq_size=99"]),
        "does not fit in 5 bits",
    );
    one_line_error(
        &run(&["obj", "create", "create_cq_in", "oops"]),
        "is not of the form field=value",
    );
    one_line_error(&run(&["obj", "query", "$7"]), "unknown object '$7'");
    one_line_error(&run(&["obj", "destroy", "$cq"]), "unknown object '$cq'");
    one_line_error(
        &run(&["obj", "create", "create_cq_in", "cq_umem_id=$nope"]),
        "field cq_umem_id: unknown object '$nope'",
    );
    one_line_error(
        &cli(&["--device", "nosuch", "obj", "create", "alloc_pd_in"]),
        "no device named 'nosuch'",
    );
    // The device refuses: its error, by name, on one line.
    one_line_error(&run(&["obj", "create", "create_cq_in"]), "CREATE_CQ: ");
    one_line_error(
        &cli(&["replay", "/nonexistent/x.fixture"]),
        "reading fixture /nonexistent/x.fixture",
    );
}

#[test]
fn a_script_keeps_its_objects_and_records_a_fixture() {
    let script = temp("cq.devx");
    let fixture = temp("cq.fixture");
    std::fs::write(&script, CQ_SCRIPT).unwrap();
    let o = cli(&[
        "--device",
        "sim0",
        "--record",
        fixture.to_str().unwrap(),
        "script",
        script.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    for needle in [
        "$1 (eq) = eqn 0x",
        "$2 (u) = uar page 0x",
        "$5 (pd) = ALLOC_PD 0x",
        "$6 (cq) = CREATE_CQ 0x",
        "$6: QUERY_CQ",
        "cq_context.log_cq_size          = 0x6",
        "expected error: destroying $3: DESTROY_UMEM: RES_BUSY",
        "$6 (cq) = CREATE_CQ",
    ] {
        assert!(out.contains(needle), "missing `{needle}` in:\n{out}");
    }
    let text = std::fs::read_to_string(&fixture).unwrap();
    assert!(text.starts_with("devx-fixture 1\n"), "{text}");
    assert!(text.contains("sym cq_umem_id @0x2c0/32 = $umem0"), "{text}");
    // Session objects are destroyed at the end, newest first, and recorded.
    let cq_destroy = text.find("DESTROY_CQ").unwrap();
    let pd_destroy = text.rfind("DEALLOC_PD").unwrap();
    assert!(cq_destroy < pd_destroy);
    assert!(text.trim_end().ends_with("end 14"), "{text}");

    let o = cli(&["replay", fixture.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("create       CREATE_CQ                ok"),
        "{out}"
    );
    assert!(
        out.contains("expected error: DESTROY_UMEM: RES_BUSY"),
        "{out}"
    );
    assert!(
        out.contains("14 of 14 commands replayed: 13 ok, 1 expected errors, 0 mismatches"),
        "{out}"
    );

    let o = cli(&["replay", "--json", fixture.to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.starts_with("{\"fixture\": "), "{out}");
    assert!(out.contains("\"passed\": true, \"error\": null"), "{out}");
    assert!(
        out.contains(
            "\"method\": \"create\", \"opcode\": 1024, \"name\": \"CREATE_CQ\", \"result\": \"ok\""
        ),
        "{out}"
    );

    // Tamper with the recorded destroy: the library derives another one.
    let head = text.find("DESTROY_CQ").unwrap();
    let row = head + text[head..].find("\n    0000  04010000").unwrap() + 11;
    let mut tampered = text.clone();
    tampered.replace_range(row..row + 8, "04010001");
    let bad = temp("tampered.fixture");
    std::fs::write(&bad, &tampered).unwrap();
    let o = cli(&["replay", bad.to_str().unwrap()]);
    one_line_error(
        &o,
        "DESTROY_CQ inbox differs at destroy_cq_in.uid: recorded 1, got 0",
    );
    assert!(stdout(&o).contains("MISMATCH"), "{}", stdout(&o));

    // Cut it short: the parser names the line.
    let cut: String = text.lines().take(40).map(|l| format!("{l}\n")).collect();
    std::fs::write(&bad, cut).unwrap();
    let o = cli(&["replay", bad.to_str().unwrap()]);
    one_line_error(&o, "truncated");
    assert!(stderr(&o).contains(": line 41: "), "{}", stderr(&o));

    for p in [script, fixture, bad] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_script_stops_at_its_first_error_with_file_and_line() {
    let script = temp("bad.devx");
    std::fs::write(
        &script,
        "obj create alloc_pd_in\n\nobj query $9\nobj list\n",
    )
    .unwrap();
    let o = cli(&["--device", "sim0", "script", script.to_str().unwrap()]);
    one_line_error(&o, &format!("{}:3: unknown object '$9'", script.display()));
    assert_eq!(
        stdout(&o).matches("= ALLOC_PD").count(),
        1,
        "obj list ran: {}",
        stdout(&o)
    );

    std::fs::write(&script, "! obj create alloc_pd_in\n").unwrap();
    let o = cli(&["--device", "sim0", "script", script.to_str().unwrap()]);
    one_line_error(&o, "expected to fail ('!'), but it succeeded");

    std::fs::write(&script, "shell\n").unwrap();
    let o = cli(&["--device", "sim0", "script", script.to_str().unwrap()]);
    one_line_error(&o, "cannot start another session");

    std::fs::write(&script, "x = layout nop_in\n").unwrap();
    let o = cli(&["--device", "sim0", "script", script.to_str().unwrap()]);
    one_line_error(
        &o,
        ":1: only `obj create`, `obj umem`, `obj uar` and `obj eqn` can be named",
    );
    let _ = std::fs::remove_file(script);
}

#[test]
fn a_piped_shell_runs_any_command_and_has_no_prompt() {
    let o = cli_stdin(
        &["--device", "sim0", "shell"],
        "layout nop_in\npd = obj create alloc_pd_in\nobj list\nexit\nobj create alloc_pd_in\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("devx> "), "{out}");
    assert!(out.contains("nop_in (16 bytes"), "{out}");
    assert_eq!(out.matches("$1 (pd) = ALLOC_PD").count(), 2, "{out}");
    // `exit` ended the session before the second create.
    assert!(!out.contains("$2"), "{out}");

    let o = cli_stdin(&["--device", "sim0", "shell"], "obj list\nobj query $2\n");
    one_line_error(&o, "<stdin>:2: unknown object '$2'");

    let o = cli_stdin(&["--device", "sim0", "shell"], "--device sim1 obj list\n");
    one_line_error(&o, "--device is chosen when the session starts");
}

#[test]
fn help_describes_sessions() {
    let o = cli(&["shell", "--help"]);
    let out = stdout(&o);
    assert!(out.contains("cq = obj create create_cq_in"), "{out}");
    let o = cli(&["obj", "--help"]);
    let out = stdout(&o);
    assert!(out.contains("$buf.addr"), "{out}");
    let o = cli(&["--help"]);
    assert!(stdout(&o).contains("--record <FILE>"), "{}", stdout(&o));
}
