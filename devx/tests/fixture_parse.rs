//! Malformed, truncated and reordered fixtures: clear errors with line
//! numbers, and no input makes the parser (or a replay) panic.

#[path = "fixture_toy.rs"]
mod toy;

use devx::fixture::{self, drive, Replayer};
use proptest::prelude::*;

fn parse_err(text: &str) -> String {
    fixture::parse(text).unwrap_err().to_string()
}

/// The text with line `n` (1-based) replaced by `with`.
fn replace_line(text: &str, n: usize, with: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines[n - 1] = with;
    lines.join("\n") + "\n"
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect(needle) + 1
}

#[test]
fn the_sample_parses_and_writes_back_identically() {
    let text = toy::sample_fixture();
    let f = fixture::parse(&text).unwrap();
    assert_eq!(fixture::fixture_text(&f), text);
    let rep = Replayer::new(f, "sample");
    assert!(drive::run(&rep).passed());
}

#[test]
fn truncation_is_reported_at_the_end_of_the_file() {
    let text = toy::sample_fixture();
    let lines: Vec<&str> = text.lines().collect();
    // Cut just before `end`: every stanza is whole, the count line is missing.
    let cut = lines[..lines.len() - 1].join("\n") + "\n";
    let e = parse_err(&cut);
    assert!(e.contains("no `end N` line: truncated"), "{e}");
    assert!(e.starts_with(&format!("line {}:", lines.len())), "{e}");
    // Cut inside a hex dump.
    let row = line_of(&text, "0020..0100 zero");
    let cut = lines[..row - 1].join("\n") + "\n";
    let e = parse_err(&cut);
    assert!(
        e.contains("fixture ends inside stanza") && e.contains("truncated"),
        "{e}"
    );
    // Every possible cut is an error with a line number, never a panic.
    for n in 0..lines.len() {
        let cut = lines[..n].join("\n");
        let e = parse_err(&cut);
        assert!(e.starts_with("line "), "cut at {n}: {e}");
    }
}

#[test]
fn malformed_lines_name_their_line() {
    let text = toy::sample_fixture();
    let first_row = line_of(&text, "    0000  08000000");
    let e = parse_err(&replace_line(
        &text,
        first_row,
        "    0000  0800zz00 00000000 00000000 00000000",
    ));
    assert_eq!(e, format!("line {first_row}: '0800zz00' is not hex bytes"));

    let e = parse_err(&replace_line(
        &text,
        first_row,
        "    0010  08000000 00000000 00000000 00000000",
    ));
    assert!(
        e.contains(&format!(
            "line {first_row}: hex row starts at 0x0010, expected 0x0000"
        )),
        "{e}"
    );

    let e = parse_err(&replace_line(&text, 1, "devx-fixture 2"));
    assert_eq!(
        e,
        "line 1: fixture format version 2 is not supported (this library reads version 1)"
    );

    let e = parse_err("hello\n");
    assert!(e.contains("not a devx fixture"), "{e}");

    let pd = line_of(&text, "ALLOC_PD");
    let e = parse_err(&replace_line(&text, pd, "@5 frobnicate $ctx0"));
    assert_eq!(e, format!("line {pd}: unknown method 'frobnicate'"));

    let e = parse_err(&replace_line(
        &text,
        pd,
        "@5 create $ctx9 ALLOC_PD -> $obj0=0x13",
    ));
    assert_eq!(
        e,
        format!("line {pd}: $ctx9 is used before any stanza defines it")
    );

    let q = line_of(&text, "sym cqn");
    let e = parse_err(&replace_line(&text, q, "    sym cqn @0x48/24 = $obj7"));
    assert!(
        e.contains("uses $obj7, which no earlier stanza defines"),
        "{e}"
    );

    let end = text.lines().count();
    let e = parse_err(&replace_line(&text, end, "end 3"));
    assert!(e.contains("`end 3` but the fixture has"), "{e}");

    let ok = line_of(&text, "@1 open");
    let e = parse_err(&replace_line(&text, ok + 1, "  error os errno=nope"));
    assert_eq!(e, format!("line {}: errno: 'nope' is not a number", ok + 1));

    let e = parse_err(&replace_line(&text, ok, "@1 open -> $ctx0 extra"));
    assert!(e.contains("unexpected 'extra'"), "{e}");
}

#[test]
fn reordered_stanzas_in_the_file_are_caught() {
    let text = toy::sample_fixture();
    // Swap the PD and CQ stanzas (blocks between blank lines).
    let blocks: Vec<&str> = text.split("\n\n").collect();
    let pd = blocks.iter().position(|b| b.contains("ALLOC_PD")).unwrap();
    let mut swapped = blocks.clone();
    swapped.swap(pd, pd + 1);
    let e = parse_err(&swapped.join("\n\n"));
    assert!(e.contains("stanza numbered @6, expected @5"), "{e}");
}

#[test]
fn malformed_fixtures_fail_replay_with_the_file_name() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("devx-fixture-bad-{}.fixture", std::process::id()));
    std::fs::write(&path, "devx-fixture 1\ndevice \"x\"\n@1 open\n").unwrap();
    let e = fixture::replay(&path).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "{}: line 4: fixture ends inside stanza 1",
            path.display()
        )),
        "{e}"
    );
    let _ = std::fs::remove_file(&path);
    let e = fixture::replay(&path).unwrap_err().to_string();
    assert!(e.contains("reading fixture"), "{e}");
}

/// One random edit of a fixture.
#[derive(Debug, Clone)]
enum Mutation {
    FlipByte(usize, u8),
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Truncate(usize),
    InsertJunk(usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipByte(i, b)),
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), "[ -~]{0,40}").prop_map(|(i, s)| Mutation::InsertJunk(i, s)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let n = lines.len().max(1);
    match m {
        Mutation::FlipByte(i, b) => {
            let mut bytes = text.as_bytes().to_vec();
            let at = i % bytes.len().max(1);
            if let Some(x) = bytes.get_mut(at) {
                *x ^= b | 1;
            }
            return String::from_utf8_lossy(&bytes).into_owned();
        }
        Mutation::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Mutation::DuplicateLine(i) => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Mutation::SwapLines(a, b) => lines.swap(a % n, b % n),
        Mutation::Truncate(i) => lines.truncate(i % n),
        Mutation::InsertJunk(i, s) => lines.insert(i % n, s.clone()),
    }
    lines.join("\n") + "\n"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mutated_fixtures_never_panic(muts in proptest::collection::vec(mutation(), 1..4)) {
        let mut text = toy::sample_fixture();
        for m in &muts {
            text = apply(&text, m);
        }
        match fixture::parse(&text) {
            Err(e) => prop_assert!(e.line >= 1 && e.line <= text.lines().count() + 1, "{e}"),
            Ok(f) => {
                // A fixture that still parses must replay or fail cleanly.
                let rep = Replayer::new(f, "mutated");
                let _ = drive::run(&rep);
            }
        }
    }
}
