//! Sessions: the device, context and objects every command of one run
//! shares — a single command, or all the lines of `devx-cli shell` and
//! `devx-cli script FILE` — and the `--record FILE` fixture they go to.
//!
//! Objects die with the process, so a session is what lets `obj query $1`
//! find the CQ that `obj create` made three lines earlier.

use std::cell::RefCell;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use devx::{Context, Device, Obj, Uar, Umem};

use crate::CliResult;

/// Something a session holds and lines can name (`$3`, `$cq`).
pub enum Resource {
    Obj(Obj),
    Umem(Umem<Vec<u8>>),
    Uar(Uar),
    /// An EQ number and the vector it serves.
    Eqn(u32, u32),
}

/// A numbered, optionally named resource.
pub struct Slot {
    pub name: Option<String>,
    pub res: Resource,
}

#[derive(Default)]
struct Session {
    configured: bool,
    device_name: Option<String>,
    record: Option<PathBuf>,
    device: Option<Device>,
    ctx: Option<Context>,
    /// `$N` is `slots[N - 1]`; destroyed ones leave a hole so numbers stay put.
    slots: Vec<Option<Slot>>,
    /// True inside `shell` and `script`.
    interactive: bool,
    /// True while the session reads its lines from stdin (`shell`, `script -`).
    stdin_is_session: bool,
}

/// How lines of `shell` and `script` read (their `--help`).
pub const HELP: &str = "\
Each line is a devx-cli command without the program name:
    obj umem 8192 --name buf
    cq = obj create create_cq_in cq_context.log_cq_size=5 cq_umem_id=$buf …
    obj query $cq
    ! obj destroy $buf          # `!`: this command must fail (the CQ uses it)
Objects are $1, $2… in order, or named with `NAME = obj create …` or
`obj NAME=create …`. `#` starts a comment; `exit` ends a shell. Everything
still alive is destroyed at the end, newest first. With --record FILE the
whole session is written to one fixture. See fixtures/README.md.
Example:
  $ printf 'pd = obj create alloc_pd\\nobj list\\n' | devx-cli shell";

thread_local! {
    static SESSION: RefCell<Session> = RefCell::new(Session::default());
}

/// Sets the device and recording for this run (the first call wins).
pub fn configure(device: Option<&str>, record: Option<&Path>) {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        if !s.configured {
            s.configured = true;
            s.device_name = device.map(String::from);
            s.record = record.map(Path::to_path_buf);
        }
    });
}

/// The device name given with `--device`, if any.
pub fn device_name() -> Option<String> {
    SESSION.with(|s| s.borrow().device_name.clone())
}

/// True inside `shell` or `script`.
pub fn interactive() -> bool {
    SESSION.with(|s| s.borrow().interactive)
}

/// The session's device: `--device NAME`, else the first real mlx5 device,
/// else sim0 (saying so on stderr); wrapped in a recorder with `--record FILE`.
pub fn device() -> CliResult<Device> {
    if let Some(d) = SESSION.with(|s| s.borrow().device.clone()) {
        return Ok(d);
    }
    let (name, record) = SESSION.with(|s| {
        let s = s.borrow();
        (s.device_name.clone(), s.record.clone())
    });
    let mut dev = crate::device_cmd::choose_device(name.as_deref())?;
    if let Some(path) = &record {
        dev = devx::fixture::record(&dev, path)
            .map_err(|e| format!("recording to {}: {e}", path.display()))?;
    }
    SESSION.with(|s| s.borrow_mut().device = Some(dev.clone()));
    Ok(dev)
}

/// The session's context on its device (opened once).
pub fn context() -> CliResult<Context> {
    if let Some(c) = SESSION.with(|s| s.borrow().ctx.clone()) {
        return Ok(c);
    }
    let dev = device()?;
    let ctx = dev
        .open()
        .map_err(|e| format!("opening {}: {e}", dev.name()))?;
    SESSION.with(|s| s.borrow_mut().ctx = Some(ctx.clone()));
    Ok(ctx)
}

/// A devx error as users read it; on an emulated device a firmware
/// syndrome is followed by its name (`syndrome 0x30000001 (CQ_TOO_LARGE)`).
pub fn dev_err(e: devx::Error) -> String {
    let emulated = SESSION.with(|s| s.borrow().device.as_ref().map(Device::is_emulated));
    match (e.syndrome().and_then(devx::syndrome_name), emulated) {
        (Some(name), Some(true)) => format!("{e} ({name})"),
        _ => e.to_string(),
    }
}

/// Adds a resource; returns its number.
pub fn add(name: Option<String>, res: Resource) -> CliResult<usize> {
    if let Some(n) = &name {
        check_name(n)?;
    }
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(n) = &name {
            // A name is rebound to the newest resource, like a shell variable.
            for slot in s.slots.iter_mut().flatten() {
                if slot.name.as_deref() == Some(n) {
                    slot.name = None;
                }
            }
        }
        s.slots.push(Some(Slot { name, res }));
        Ok(s.slots.len())
    })
}

fn check_name(n: &str) -> CliResult {
    let ok = n
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{n}' is not a valid name (letters, digits and _, not starting with a digit)"
        ))
    }
}

/// Finds `$3` or `$cq` (the `$` optional); returns its number.
pub fn lookup(reference: &str) -> CliResult<usize> {
    let r = reference.strip_prefix('$').unwrap_or(reference);
    SESSION.with(|s| {
        let s = s.borrow();
        let found = match r.parse::<usize>() {
            Ok(n) => s
                .slots
                .get(n.wrapping_sub(1))
                .and_then(Option::as_ref)
                .map(|_| n),
            Err(_) => s
                .slots
                .iter()
                .position(|x| x.as_ref().and_then(|x| x.name.as_deref()) == Some(r))
                .map(|i| i + 1),
        };
        found.ok_or_else(|| {
            let hint = if s.interactive {
                "`obj list` shows what this session holds"
            } else {
                "objects live only within one `devx-cli shell` or `devx-cli script` run"
            };
            format!("unknown object '{reference}' ({hint})")
        })
    })
}

/// Runs `f` on resource `n`.
pub fn with_slot<R>(n: usize, f: impl FnOnce(&mut Slot) -> R) -> CliResult<R> {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        match s.slots.get_mut(n.wrapping_sub(1)).and_then(Option::as_mut) {
            Some(slot) => Ok(f(slot)),
            None => Err(format!("unknown object '${n}'")),
        }
    })
}

/// Takes resource `n` out of the session (to destroy it).
pub fn take(n: usize) -> CliResult<Slot> {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        s.slots
            .get_mut(n.wrapping_sub(1))
            .and_then(Option::take)
            .ok_or_else(|| format!("unknown object '${n}'"))
    })
}

/// Puts a resource back at its number (a destroy the device refused).
pub fn put_back(n: usize, slot: Slot) {
    SESSION.with(|s| {
        if let Some(place) = s.borrow_mut().slots.get_mut(n.wrapping_sub(1)) {
            *place = Some(slot);
        }
    });
}

/// Runs `f` over every live resource with its number.
pub fn each(mut f: impl FnMut(usize, &Slot)) {
    SESSION.with(|s| {
        for (i, slot) in s.borrow().slots.iter().enumerate() {
            if let Some(slot) = slot {
                f(i + 1, slot);
            }
        }
    });
}

/// Ends the run: destroys what the session holds (newest first, so objects
/// go before what they reference), closes the context, and completes the
/// recording. Returns `result`, or the recording's failure.
pub fn close(result: CliResult) -> CliResult {
    let (slots, ctx, device, record) = SESSION.with(|s| {
        let mut s = s.borrow_mut();
        (
            std::mem::take(&mut s.slots),
            s.ctx.take(),
            s.device.take(),
            s.record.clone(),
        )
    });
    for slot in slots.into_iter().rev().flatten() {
        drop(slot);
    }
    drop(ctx);
    if let (Some(dev), Some(path)) = (device, record) {
        let finished = devx::fixture::finish(&dev);
        drop(dev);
        if let Err(e) = finished {
            return result.and(Err(format!("recording to {}: {e}", path.display())));
        }
    }
    result
}

/// Splits a line into words: whitespace separates, '…' and "…" quote,
/// `#` at the start of a word begins a comment.
pub fn split_words(line: &str) -> CliResult<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => return Ok(out),
            _ => {}
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '\'' | '"' => loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(x) => word.push(x),
                        None => return Err(format!("unterminated {c}quote{c}")),
                    }
                },
                c => word.push(c),
            }
        }
        out.push(word);
    }
}

/// What a line asks for beyond running a command.
enum Line {
    Run {
        words: Vec<String>,
        expect_fail: bool,
    },
    Empty,
    Exit,
}

/// Rewrites the session forms into plain arguments: `! cmd` (must fail),
/// `NAME = obj create …` and `obj NAME=create …` (name the result).
fn preprocess(line: &str) -> CliResult<Line> {
    let mut words = split_words(line)?;
    if words.is_empty() {
        return Ok(Line::Empty);
    }
    if matches!(words[0].as_str(), "exit" | "quit") && words.len() == 1 {
        return Ok(Line::Exit);
    }
    let mut expect_fail = false;
    if words[0] == "!" {
        expect_fail = true;
        words.remove(0);
    } else if let Some(rest) = words[0].strip_prefix('!') {
        expect_fail = true;
        words[0] = rest.to_string();
    }
    let mut name = None;
    if words.len() >= 3 && words[1] == "=" {
        name = Some(words[0].clone());
        words.drain(0..2);
    } else if words.len() >= 2 && words[0] == "obj" {
        if let Some((n, verb)) = words[1].split_once('=') {
            if !n.is_empty() && !verb.is_empty() {
                name = Some(n.to_string());
                words[1] = verb.to_string();
            }
        }
    }
    if let Some(n) = name {
        let nameable = words.first().map(String::as_str) == Some("obj")
            && matches!(
                words.get(1).map(String::as_str),
                Some("create" | "umem" | "uar" | "eqn")
            );
        if !nameable {
            return Err(format!(
                "only `obj create`, `obj umem`, `obj uar` and `obj eqn` can be named ('{n} = …')"
            ));
        }
        words.insert(2, "--name".into());
        words.insert(3, n);
    }
    if words.is_empty() {
        return Err("'!' needs a command after it".into());
    }
    Ok(Line::Run { words, expect_fail })
}

/// Runs one session line. `Ok(false)` means the session should end.
fn run_line(line: &str) -> CliResult<bool> {
    let (words, expect_fail) = match preprocess(line)? {
        Line::Empty => return Ok(true),
        Line::Exit => return Ok(false),
        Line::Run { words, expect_fail } => (words, expect_fail),
    };
    let args = std::iter::once("devx-cli".to_string()).chain(words);
    let cli = match crate::Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{e}");
                return Ok(true);
            }
            return Err(clap_message(&e));
        }
    };
    if cli.device.is_some() && cli.device != device_name() {
        return Err(
            "--device is chosen when the session starts (devx-cli --device NAME shell)".into(),
        );
    }
    if cli.record.is_some() {
        return Err(
            "--record is chosen when the session starts (devx-cli --record FILE shell)".into(),
        );
    }
    let result = crate::dispatch(cli.command);
    match (result, expect_fail) {
        (Ok(()), false) => Ok(true),
        (Err(e), false) => Err(e),
        (Err(e), true) => {
            println!("expected error: {e}");
            Ok(true)
        }
        (Ok(()), true) => Err("the command was expected to fail ('!'), but it succeeded".into()),
    }
}

/// A clap error as clap words it (the problem, a hint, the usage line),
/// without its `error: ` prefix.
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let text = text.trim_end();
    text.strip_prefix("error: ").unwrap_or(text).to_string()
}

/// Marks the session started; fails inside a session, before anything
/// touches stdin (the outer session holds its lock).
fn begin(reads_stdin: bool) -> CliResult {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        if s.interactive {
            return Err("a shell or script cannot start another session".into());
        }
        s.interactive = true;
        s.stdin_is_session = reads_stdin;
        Ok(())
    })
}

/// Fails when stdin carries the session's own lines (`shell`, `script -`),
/// so `decode LAYOUT -` there cannot wait on it.
pub fn stdin_available() -> CliResult {
    if SESSION.with(|s| s.borrow().stdin_is_session) {
        return Err(
            "stdin carries this session's commands; give the hex on the line instead of `-`".into(),
        );
    }
    Ok(())
}

/// Runs lines from `input`. `source` names it in errors; with `keep_going`
/// an error is printed and the next line runs (an interactive shell),
/// otherwise the first error ends the run.
fn run_lines(input: impl BufRead, source: &str, prompt: bool, keep_going: bool) -> CliResult {
    let mut lines = input.lines();
    let mut n = 0;
    loop {
        if prompt {
            print!("devx> ");
            let _ = std::io::stdout().flush();
        }
        let Some(line) = lines.next() else { break };
        n += 1;
        let line = line.map_err(|e| format!("{source}:{n}: reading: {e}"))?;
        match run_line(&line) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if keep_going => eprintln!("devx-cli: error: {e}"),
            Err(e) => return Err(format!("{source}:{n}: {e}")),
        }
        let _ = std::io::stdout().flush();
    }
    if prompt {
        println!();
    }
    Ok(())
}

/// `devx-cli shell`: lines from stdin; a prompt and keep-going on a terminal,
/// stop-at-first-error otherwise (so `shell < FILE` acts like `script FILE`).
pub fn shell() -> CliResult {
    begin(true)?;
    let tty = std::io::stdin().is_terminal();
    run_lines(std::io::stdin().lock(), "<stdin>", tty, tty)
}

/// `devx-cli script FILE` (`-` for stdin): the same lines, stopping at the first error.
pub fn script(file: &str) -> CliResult {
    begin(file == "-")?;
    if file == "-" {
        return run_lines(std::io::stdin().lock(), "<stdin>", false, false);
    }
    let f = std::fs::File::open(file).map_err(|e| format!("opening script {file}: {e}"))?;
    run_lines(std::io::BufReader::new(f), file, false, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_quotes_and_comments() {
        assert_eq!(
            split_words("obj create  x a=1 # note").unwrap(),
            ["obj", "create", "x", "a=1"]
        );
        assert_eq!(split_words("a 'b c' \"d\"").unwrap(), ["a", "b c", "d"]);
        assert!(split_words("a 'b").is_err());
    }

    #[test]
    fn naming_forms_become_name_flags() {
        let Line::Run { words, expect_fail } = preprocess("cq = obj create create_cq_in").unwrap()
        else {
            panic!()
        };
        assert_eq!(words, ["obj", "create", "--name", "cq", "create_cq_in"]);
        assert!(!expect_fail);
        let Line::Run { words, .. } = preprocess("obj pd=create alloc_pd_in").unwrap() else {
            panic!()
        };
        assert_eq!(words, ["obj", "create", "--name", "pd", "alloc_pd_in"]);
        let Line::Run { words, expect_fail } = preprocess("! obj destroy $1").unwrap() else {
            panic!()
        };
        assert_eq!(words, ["obj", "destroy", "$1"]);
        assert!(expect_fail);
        assert!(preprocess("x = caps").is_err());
        assert!(matches!(
            preprocess("  # only a comment").unwrap(),
            Line::Empty
        ));
    }
}
