//! The `first_program` example, run as a test: open the default device,
//! connect two RC QPs, RDMA-write 4 KiB and check it. README.md shows the
//! same code; the second test keeps it so.

#[path = "../examples/first_program.rs"]
mod first_program;

#[test]
fn first_program_writes_and_checks_4_kib() {
    first_program::run().unwrap();
}

/// The lines between the example's `first program: begin/end` markers.
fn example_body() -> String {
    let src = include_str!("../examples/first_program.rs");
    let begin = src.find("// first program: begin\n").expect("begin marker") + 24;
    let end = src.find("// first program: end").expect("end marker");
    src[begin..end].to_string()
}

#[test]
fn readme_shows_the_first_program_as_it_runs() {
    let readme = include_str!("../../README.md");
    let body = example_body();
    assert!(
        readme.contains(&body),
        "README.md's first program differs from verbs/examples/first_program.rs; paste:\n{body}"
    );
    let lines = body.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(lines <= 25, "the first program grew to {lines} lines");
}
