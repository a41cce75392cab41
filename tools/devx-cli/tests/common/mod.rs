//! Running the built `devx-cli` the way a user does.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

pub fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_devx-cli"))
        .args(args)
        .output()
        .expect("devx-cli runs")
}

pub fn cli_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_devx-cli"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("devx-cli runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failed run prints exactly one error line and exits non-zero.
pub fn one_line_error(o: &Output, needle: &str) {
    assert!(
        !o.status.success(),
        "expected failure, got success: {}",
        stdout(o)
    );
    let err = stderr(o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("devx-cli: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(lines[0].contains(needle), "expected '{needle}' in: {err}");
    assert!(
        err.lines().all(|l| !l.starts_with("Usage")),
        "stderr: {err}"
    );
    assert!(!err.contains("panicked"), "stderr: {err}");
}
