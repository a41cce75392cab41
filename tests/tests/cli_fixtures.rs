//! `devx-cli replay` over the committed fixtures, as a user's CI would run it.
//!
//! The binary is the one `cargo test --workspace` builds next to this test
//! (`target/<profile>/devx-cli`); run alone, build it first with
//! `cargo build -p devx-cli`. Without it each test is reported as ignored
//! with that reason (a `harness = false` test on libtest-mimic), not passed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use libtest_mimic::{Arguments, Completion, Trial};

/// `target/<profile>/devx-cli`, found from this test's own path
/// (`target/<profile>/deps/cli_fixtures-…`).
fn devx_cli() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("devx-cli");
    bin.exists().then_some(bin)
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .expect("devx-cli runs")
}

type CliTest = fn(&Path);

const TESTS: [(&str, CliTest); 2] = [
    (
        "every_committed_fixture_replays_with_the_cli",
        every_committed_fixture_replays_with_the_cli,
    ),
    (
        "a_tampered_fixture_fails_with_the_field_and_both_values",
        a_tampered_fixture_fails_with_the_field_and_both_values,
    ),
];

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let trials = TESTS
        .into_iter()
        .map(|(name, test)| {
            Trial::ignorable_test(name, move || match devx_cli() {
                Some(bin) => {
                    test(&bin);
                    Ok(Completion::Completed)
                }
                None => Ok(Completion::ignored_with(
                    "devx-cli is not built; run `cargo build -p devx-cli`",
                )),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn every_committed_fixture_replays_with_the_cli(bin: &Path) {
    let mut seen = 0;
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|x| x.to_str()) != Some("fixture") {
            continue;
        }
        seen += 1;
        let o = run(bin, &["replay", "--json", path.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{}: {}{}",
            path.display(),
            out,
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("\"passed\": true"), "{out}");
        assert!(!out.contains("\"result\": \"mismatch\""), "{out}");
    }
    assert!(seen > 0);
}

fn a_tampered_fixture_fails_with_the_field_and_both_values(bin: &Path) {
    let text = std::fs::read_to_string(fixtures_dir().join("rc_qp_lifecycle.fixture")).unwrap();
    // The library derives DESTROY_QP from the create; a recorded one with
    // another op_mod no longer matches.
    let head = text.find(" DESTROY_QP\n").expect("a DESTROY_QP stanza");
    let row = head + text[head..].find("\n    0000  0501").unwrap() + 11;
    let mut tampered = text.clone();
    tampered.replace_range(row + 12..row + 17, "00002");
    let path =
        std::env::temp_dir().join(format!("devx-cli-fixture-{}.fixture", std::process::id()));
    std::fs::write(&path, tampered).unwrap();
    let o = run(bin, &["replay", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("devx-cli: error: replay failed: "), "{err}");
    assert!(
        err.contains("DESTROY_QP inbox differs at destroy_qp_in.op_mod: recorded 2, got 0"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("MISMATCH"));
    let _ = std::fs::remove_file(path);
}
