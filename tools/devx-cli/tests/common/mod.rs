//! Running the built `devx-cli` the way a user does.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one run may take before it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);

pub fn cli(args: &[&str]) -> Output {
    cli_stdin(args, "")
}

/// Runs devx-cli with `input` on stdin (then closed); kills it and fails
/// the test if it has not ended within a minute.
pub fn cli_stdin(args: &[&str], input: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devx-cli"));
    cmd.args(args);
    run_bounded(cmd, input)
}

/// Runs `cmd` with `input` on stdin, bounded in time.
pub fn run_bounded(mut cmd: Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    // A writer thread, so a child that never reads cannot block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung (killed after {LIMIT:?})");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// The stdout of a `--json` run, parsed; fails the test if it is not one
/// JSON value.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr: {}",
            stdout(o),
            stderr(o)
        )
    })
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
