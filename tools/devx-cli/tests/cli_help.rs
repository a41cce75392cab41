//! Every example a `--help` text shows (lines `  $ devx-cli …`) runs as
//! typed and succeeds.

use std::process::Command;

mod common;
use common::*;

/// The subcommands listed under `Commands:` in a help text.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect()
}

/// Every help text: the top level, each subcommand, and theirs.
fn all_help() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut queue = vec![Vec::<String>::new()];
    while let Some(path) = queue.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let o = cli(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let help = stdout(&o);
        for sub in subcommands(&help) {
            let mut p = path.clone();
            p.push(sub);
            queue.push(p);
        }
        out.push((path.join(" "), help));
    }
    out
}

#[test]
fn every_help_example_runs() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_devx-cli"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut ran = 0;
    for (cmd, help) in all_help() {
        for line in help.lines() {
            let Some(example) = line.trim_start().strip_prefix("$ ") else {
                continue;
            };
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("set -e; {example}"))
                .env("PATH", &path)
                .current_dir(root);
            let o = run_bounded(sh, "");
            assert!(
                o.status.success(),
                "`devx-cli {cmd} --help` example failed: {example}\n{}{}",
                stdout(&o),
                stderr(&o)
            );
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} examples found");
}
