//! `ibv_rc_pingpong`, unmodified, server and client in two processes, each
//! with its own emulated device (`sim0` of its process) bound to its own
//! loopback address: RC traffic between the two emulated devices over
//! RoCE v2 on UDP, the QPs and doorbells served by the preload library.
//! Then the Rust verbs example `rc_pingpong_net` against it, either side
//! as server. Skips, saying so, when ibverbs-utils (or the example) is
//! not there.

mod common;

use common::{preload_lib, tool, SKIP};
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The RoCE v2 IPv4-mapped entry of the emulated device's GID table.
const GID_INDEX: &str = "3";
/// How long the server may take to listen, and the whole exchange to end.
const LISTEN_WAIT: Duration = Duration::from_secs(20);
const RUN_WAIT: Duration = Duration::from_secs(120);
const ITERS: &str = "100";

/// Loopback address of side `n` (127.x.y.n, x.y from the test's pid so
/// concurrent runs do not meet).
fn addr(n: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        100 + (pid % 100) as u8,
        ((pid / 100) % 250) as u8 + 1,
        n,
    )
}

/// A TCP port that was free a moment ago, for the pingpong handshake.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback TCP port")
}

/// Whether something listens on TCP `port` (IPv4 or IPv6), from
/// /proc/net/tcp*: probing with a connection would be taken for the client.
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                // local_address is field 1, st (0A = LISTEN) field 3.
                w.len() > 3 && format!("{} ", w[1]).ends_with(&needle) && w[3] == "0A"
            })
        })
    })
}

/// One side of a ping-pong: ibv_rc_pingpong on the preload library, or
/// the Rust verbs example.
#[derive(Clone, Copy)]
enum Prog<'a> {
    /// An ibverbs-utils program and extra options.
    Ibv(&'a Path, &'a [&'a str]),
    Rust(&'a Path),
}

/// Starts `prog` as side `side` (its device at `addr(side)`), a client of
/// `server` when given.
fn spawn(prog: Prog<'_>, side: u8, port: u16, size: u32, server: Option<String>) -> Child {
    let mut cmd = match prog {
        Prog::Ibv(exe, extra) => {
            let mut c = Command::new(exe);
            c.args(extra)
                .args(["-d", "sim0", "-g", GID_INDEX])
                .env("LD_PRELOAD", preload_lib())
                .env("DEVX_PRELOAD_DEVICES", "sim0")
                .env("DEVX_PRELOAD_LOG", "1")
                .env("DEVX_SIM_ADDR_sim0", addr(side).to_string());
            c
        }
        Prog::Rust(exe) => {
            let mut c = Command::new(exe);
            c.arg("-a").arg(addr(side).to_string());
            c
        }
    };
    cmd.args(["-n", ITERS, "-s"])
        .arg(size.to_string())
        .arg("-p")
        .arg(port.to_string());
    if let Some(s) = server {
        cmd.arg(s);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a ping-pong program")
}

/// Output of a finished (or killed) child.
fn output(c: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut s);
    }
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Waits for both children until `deadline`; kills both on timeout.
/// Returns (server ok, client ok, server output, client output).
fn wait_both(mut srv: Child, mut cli: Child, deadline: Instant) -> (bool, bool, String, String) {
    let mut done = [None, None];
    while done.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, c) in [&mut srv, &mut cli].into_iter().enumerate() {
            if done[i].is_none() {
                done[i] = c.try_wait().ok().flatten();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in [&mut srv, &mut cli] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let ok = |s: &Option<std::process::ExitStatus>| s.is_some_and(|s| s.success());
    (
        ok(&done[0]),
        ok(&done[1]),
        output(&mut srv),
        output(&mut cli),
    )
}

/// The `usec/iter` and `Mbit/sec` of ibv_rc_pingpong's report lines.
fn numbers(out: &str) -> (f64, f64) {
    let after = |line: &str, unit: &str| -> Option<f64> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let i = w.iter().position(|x| *x == unit)?;
        w.get(i.checked_sub(1)?)?.parse().ok()
    };
    let mbit = out
        .lines()
        .find(|l| l.contains("bytes in"))
        .and_then(|l| after(l, "Mbit/sec"))
        .unwrap_or(f64::NAN);
    let usec = out
        .lines()
        .find(|l| l.contains("iters in"))
        .and_then(|l| after(l, "usec/iter"))
        .unwrap_or(f64::NAN);
    (usec, mbit)
}

/// Runs `server` and then `client` against it, as sides `base + 1` and
/// `base + 2` (tests running at once use different bases); both must exit
/// 0 and print their report lines. Returns both outputs.
fn ping_pong(base: u8, size: u32, server: Prog<'_>, client: Prog<'_>) -> (String, String) {
    let (s_side, c_side) = (base + 1, base + 2);
    let port = free_port();
    let mut srv = spawn(server, s_side, port, size, None);
    let listen_by = Instant::now() + LISTEN_WAIT;
    while !listening(port) && Instant::now() < listen_by {
        if let Ok(Some(st)) = srv.try_wait() {
            panic!(
                "server exited ({st}) before listening:\n{}",
                output(&mut srv)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !listening(port) {
        let _ = srv.kill();
        let _ = srv.wait();
        panic!(
            "server not listening on {port} after {LISTEN_WAIT:?}:\n{}",
            output(&mut srv)
        );
    }
    // ibv_rc_pingpong listens on every address, the Rust example on its own.
    let host = match server {
        Prog::Ibv(..) => "127.0.0.1".to_string(),
        Prog::Rust(_) => addr(s_side).to_string(),
    };
    let cli = spawn(client, c_side, port, size, Some(host));
    let (srv_ok, cli_ok, srv_out, cli_out) = wait_both(srv, cli, Instant::now() + RUN_WAIT);
    let both = format!("--- server\n{srv_out}\n--- client\n{cli_out}");
    assert!(srv_ok && cli_ok, "ping-pong failed:\n{both}");
    for out in [&srv_out, &cli_out] {
        // Both directions count: two messages per iteration.
        let bytes = 2 * size * ITERS.parse::<u32>().unwrap_or_default();
        assert!(out.contains(&format!("{bytes} bytes in ")), "{both}");
        assert!(out.contains(&format!("{ITERS} iters in ")), "{both}");
        // Each side reached the other's device by its RoCE v2 GID.
        assert!(
            out.contains(&format!("GID ::ffff:{}", addr(s_side))),
            "{both}"
        );
        assert!(
            out.contains(&format!("GID ::ffff:{}", addr(c_side))),
            "{both}"
        );
    }
    for (who, out) in [("server", &srv_out), ("client", &cli_out)] {
        let (usec, mbit) = numbers(out);
        let watch = out
            .lines()
            .find(|l| l.contains("doorbell watch: "))
            .unwrap_or_default();
        eprintln!("{who}: {usec} usec/iter, {mbit} Mbit/sec; {watch}");
    }
    (srv_out, cli_out)
}

/// The Rust verbs example, when cargo built it (`cargo test --workspace`
/// or `cargo build -p verbs --examples`).
/// The verbs example `name` (`rc_pingpong_net`, `ud_pingpong_net`), when built.
fn rust_pingpong(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile = exe.parent()?.parent()?;
    let p = profile.join("examples").join(name);
    p.is_file().then_some(p)
}

const SKIP_RUST: &str =
    "the verbs pingpong examples are not built; cargo build -p verbs --examples";

#[test]
fn ibv_rc_pingpong_between_two_processes_and_two_emulated_devices() {
    let Some(exe) = tool("ibv_rc_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let (srv, cli) = ping_pong(10, 4096, Prog::Ibv(&exe, &[]), Prog::Ibv(&exe, &[]));
    for out in [srv, cli] {
        assert!(out.contains("doorbell watch: "), "{out}");
    }
}

#[test]
fn ibv_uc_pingpong_between_two_processes_and_two_emulated_devices() {
    let Some(exe) = tool("ibv_uc_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    ping_pong(40, 4096, Prog::Ibv(&exe, &[]), Prog::Ibv(&exe, &[]));
}

/// `-e`: the programs sleep on a completion channel and arm their CQ
/// after each event instead of polling.
#[test]
fn ibv_rc_pingpong_with_completion_events() {
    let Some(exe) = tool("ibv_rc_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    ping_pong(60, 4096, Prog::Ibv(&exe, &["-e"]), Prog::Ibv(&exe, &["-e"]));
}

/// Sixteen RC QPs receiving from one shared receive queue.
#[test]
fn ibv_srq_pingpong_between_two_processes_and_two_emulated_devices() {
    let Some(exe) = tool("ibv_srq_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    ping_pong(70, 4096, Prog::Ibv(&exe, &[]), Prog::Ibv(&exe, &[]));
}

/// UD: each send names an address handle (CREATE_AH for the peer's GID).
#[test]
fn ibv_ud_pingpong_between_two_processes_and_two_emulated_devices() {
    let Some(exe) = tool("ibv_ud_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    ping_pong(50, 1024, Prog::Ibv(&exe, &[]), Prog::Ibv(&exe, &[]));
}

#[test]
fn the_rust_rc_pingpong_interoperates_with_ibv_rc_pingpong_either_side_serving() {
    let Some(ibv) = tool("ibv_rc_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let Some(rust) = rust_pingpong("rc_pingpong_net") else {
        eprintln!("skipped: {SKIP_RUST}");
        return;
    };
    for (base, server, client) in [
        (20, Prog::Rust(&rust), Prog::Ibv(&ibv, &[])),
        (30, Prog::Ibv(&ibv, &[]), Prog::Rust(&rust)),
    ] {
        let (srv, cli) = ping_pong(base, 4096, server, client);
        // ibv_rc_pingpong sends and receives in one buffer: as server it
        // echoes the Rust client's bytes, which the client checks; as
        // client it starts with its own payload, which the Rust server
        // recognises and leaves unchecked.
        if matches!(server, Prog::Rust(_)) {
            assert!(
                srv.contains("peer sends ibv_rc_pingpong's payload"),
                "{srv}"
            );
        } else {
            assert!(!cli.contains("not checked"), "{cli}");
        }
    }
}

#[test]
fn the_rust_ud_pingpong_interoperates_with_ibv_ud_pingpong_either_side_serving() {
    let Some(ibv) = tool("ibv_ud_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let Some(rust) = rust_pingpong("ud_pingpong_net") else {
        eprintln!("skipped: {SKIP_RUST}");
        return;
    };
    for (base, server, client) in [
        (120, Prog::Rust(&rust), Prog::Ibv(&ibv, &[])),
        (130, Prog::Ibv(&ibv, &[]), Prog::Rust(&rust)),
    ] {
        let (srv, cli) = ping_pong(base, 512, server, client);
        let rust_side = if matches!(server, Prog::Rust(_)) {
            srv
        } else {
            cli
        };
        assert!(rust_side.contains("remote address: QPN"), "{rust_side}");
    }
}
