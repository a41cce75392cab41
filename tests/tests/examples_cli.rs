//! The verbs and devx examples as a user runs them: bad options are refused
//! with the reason, a failed completion ends `rc_pingpong` instead of
//! spinning, a closed pipe ends the output quietly, and the network
//! pingpongs run as server and client in two processes.
//!
//! The examples are the ones `cargo test --workspace` builds next to this
//! test (`target/<profile>/examples/`); run alone, build them first with
//! `cargo build -p verbs -p devx --examples`.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/examples/NAME`, when built.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("examples").join(name);
    bin.exists().then_some(bin)
}

macro_rules! need {
    ($name:expr) => {
        match example($name) {
            Some(b) => b,
            None => {
                eprintln!(
                    "example {} is not built; run `cargo build -p verbs -p devx --examples` to include this test",
                    $name
                );
                return;
            }
        }
    };
}

struct Run {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to completion or kills it after `limit` (then the test fails:
/// the program hung).
fn run(mut cmd: Command, limit: Duration) -> Run {
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        signal: status.signal(),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

#[test]
fn rc_pingpong_refuses_out_of_range_options_and_says_why() {
    let bin = need!("rc_pingpong");
    for (args, why) in [
        (
            &["-s", "0"][..],
            "-s 0: the message size must be at least 1 byte",
        ),
        (&["-n", "0"][..], "-n 0: at least one iteration"),
        (&["-r", "0"][..], "-r 0: the receive queue depth"),
        (
            &["-m", "100"][..],
            "-m 100: the MTU must be 256, 512, 1024, 2048 or 4096",
        ),
        (&["-s", "x"][..], "-s x: not a number"),
        (&["-q", "1"][..], "unknown option '-q'"),
    ] {
        let mut c = Command::new(&bin);
        c.args(args);
        let r = run(c, Duration::from_secs(60));
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("usage: rc_pingpong"), "{}", r.stderr);
    }
}

#[test]
fn rc_pingpong_runs_a_few_iterations() {
    let bin = need!("rc_pingpong");
    let mut c = Command::new(&bin);
    c.args(["-s", "100", "-n", "5", "-r", "4", "-m", "2048"]);
    let r = run(c, Duration::from_secs(120));
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("5 iters in"), "{}", r.stdout);
}

#[test]
fn rc_pingpong_ends_on_the_senders_error_completion() {
    let bin = need!("rc_pingpong");
    // One byte over the port's max_msg_sz (1 GiB): the SEND completes in
    // error on the sender while the receiver's CQ stays empty.
    let mut c = Command::new(&bin);
    c.args(["-s", "1073741825", "-n", "1"]);
    let r = run(c, Duration::from_secs(300));
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("sim1: wr_id 2 SEND: LOC_LEN_ERR (local length error), vendor syndrome"),
        "{}",
        r.stderr
    );
}

/// The write end of a pipe whose read end is already closed: every write
/// to it fails with EPIPE, as when `| head` has gone.
fn broken_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2");
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

#[test]
fn examples_end_quietly_when_the_reader_goes_away() {
    use std::os::unix::process::ExitStatusExt;
    for name in ["devinfo", "quickstart", "rc_pingpong"] {
        let bin = need!(name);
        let mut c = Command::new(&bin);
        if name == "rc_pingpong" {
            c.args(["-n", "1", "-s", "64", "-r", "1"]);
        }
        let out = c
            .stdout(broken_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{name}: {:?} {err}",
            out.status
        );
    }
}

#[test]
fn devinfo_prints_its_report() {
    let bin = need!("devinfo");
    let r = run(Command::new(&bin), Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.starts_with("hca_id:"), "{}", r.stdout);
    assert_eq!(r.signal, None);

    let mut c = Command::new(&bin);
    c.args(["-v", "-d", "sim0", "-i", "1"]);
    let r = run(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("board_id:"), "{}", r.stdout);
    assert!(
        r.stdout.contains("phys_state:\t\tLINK_UP (5)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("GID[  2]:\t\t::ffff:10.200.0.1, RoCE v1"),
        "{}",
        r.stdout
    );

    let mut c = Command::new(&bin);
    c.arg("-l");
    let r = run(c, Duration::from_secs(60));
    assert!(r.stdout.contains("HCAs found:\n\tsim0"), "{}", r.stdout);

    let mut c = Command::new(&bin);
    c.args(["-d", "sim0", "-i", "9"]);
    let r = run(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("sim0 has no port 9"), "{}", r.stderr);
}

/// Runs `name`'s server and client as two processes with their emulated
/// devices at `server` and `client` (loopback addresses), `args` on both;
/// both must end well and print ibv_*_pingpong's closing lines.
fn pingpong_between_two_processes(name: &str, server: &str, client: &str, args: &[&str]) {
    let bin = need!(name);
    // A free TCP port for the address exchange.
    let port = std::net::TcpListener::bind((server, 0))
        .and_then(|l| l.local_addr())
        .expect("a free TCP port")
        .port()
        .to_string();
    let side = |addr: &str, peer: Option<&str>| {
        let mut c = Command::new(&bin);
        c.args(["-p", &port, "-a", addr]).args(args).args(peer);
        c
    };
    let limit = Duration::from_secs(120);
    let s = side(server, None);
    let server_run = std::thread::spawn(move || run(s, limit));
    let c = run(side(client, Some(server)), limit);
    let s = server_run.join().expect("the server's runner");
    for (who, r) in [("server", &s), ("client", &c)] {
        assert_eq!(r.code, Some(0), "{who}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("remote address: QPN"),
            "{who}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("20 iters in"), "{who}: {}", r.stdout);
    }
    assert!(
        s.stdout.contains(&format!("GID ::ffff:{client}")),
        "the server saw the client's GID: {}",
        s.stdout
    );
}

#[test]
fn rc_pingpong_net_runs_as_server_and_client() {
    pingpong_between_two_processes(
        "rc_pingpong_net",
        "127.0.41.2",
        "127.0.41.3",
        &["-n", "20", "-s", "3000", "-m", "1024"],
    );
}

#[test]
fn ud_pingpong_net_runs_as_server_and_client() {
    pingpong_between_two_processes(
        "ud_pingpong_net",
        "127.0.41.4",
        "127.0.41.5",
        &["-n", "20", "-s", "512"],
    );
}

#[test]
fn ud_pingpong_net_refuses_a_message_larger_than_the_mtu() {
    let bin = need!("ud_pingpong_net");
    let mut c = Command::new(&bin);
    c.args(["-s", "2000", "-a", "127.0.41.6"]);
    let r = run(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("a UD message is one packet; the path MTU is 1024"),
        "{}",
        r.stderr
    );
    let mut c = Command::new(&bin);
    c.args(["-m", "1000"]);
    let r = run(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("-m 1000: the MTU is"), "{}", r.stderr);
}

/// Runs `script` in a network namespace of its own (`unshare -n`), whose
/// loopback has the IPv6 addresses fd00::2 and fd00::3; `None` (with the
/// reason printed) when this machine cannot make one.
fn in_ipv6_namespace(script: &str) -> Option<Run> {
    let setup =
        "ip link set lo up && ip addr add fd00::2/128 dev lo nodad && ip addr add fd00::3/128 dev lo nodad";
    let probe = Command::new("unshare")
        .args(["-n", "sh", "-c", setup])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "skipped: cannot make a network namespace with IPv6 addresses (needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            eprintln!("skipped: unshare is not available: {e}");
            return None;
        }
    }
    let mut c = Command::new("unshare");
    c.args(["-n", "sh", "-c", &format!("{setup} && {{ {script}\n}}")]);
    Some(run(c, Duration::from_secs(120)))
}

#[test]
fn pingpongs_run_over_ipv6_gids_between_two_processes() {
    for name in ["rc_pingpong_net", "ud_pingpong_net"] {
        let bin = need!(name);
        let bin = bin.display();
        // The server's output goes to stderr, the client's to stdout.
        let script = format!(
            "timeout 60 {bin} -p 18515 -a fd00::2 -n 20 -s 512 1>&2 & \
             timeout 60 {bin} -p 18515 -a fd00::3 -n 20 -s 512 fd00::2; c=$?; wait $!; s=$?; \
             [ $c = 0 ] && [ $s = 0 ]"
        );
        let Some(r) = in_ipv6_namespace(&script) else {
            return;
        };
        assert_eq!(r.code, Some(0), "{name}:\n{}\n{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("GID fd00::3, UDP [fd00::3]:4791"),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("remote address: QPN"), "{}", r.stdout);
        assert!(r.stdout.contains("GID fd00::2"), "{}", r.stdout);
        assert!(r.stderr.contains("GID fd00::3"), "{}", r.stderr);
        assert!(r.stdout.contains("20 iters in"), "{}", r.stdout);
        assert!(r.stderr.contains("20 iters in"), "{}", r.stderr);
    }
}
