//! `ibv_rc_pingpong`, unmodified, server and client in two processes, each
//! with its own emulated device (`sim0` of its process) bound to its own
//! loopback address: RC traffic between the two emulated devices over
//! RoCE v2 on UDP, the QPs and doorbells served by the preload library.
//! Skips, saying so, when ibverbs-utils is not installed.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SKIP: &str = "ibverbs-utils not installed; apt-get install ibverbs-utils";
/// The RoCE v2 IPv4-mapped entry of the emulated device's GID table.
const GID_INDEX: &str = "3";
/// How long the server may take to listen, and the whole exchange to end.
const LISTEN_WAIT: Duration = Duration::from_secs(20);
const RUN_WAIT: Duration = Duration::from_secs(120);

fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let lib = "libdevx_preload.so";
    [
        deps.join(lib),
        deps.parent().expect("profile directory").join(lib),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("{lib} not built next to {}", deps.display()))
}

fn tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

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

fn spawn(exe: &Path, side: u8, port: u16, iters: &str, server: Option<&str>) -> Child {
    let mut cmd = Command::new(exe);
    cmd.args(["-d", "sim0", "-g", GID_INDEX, "-n", iters, "-p"])
        .arg(port.to_string());
    if let Some(s) = server {
        cmd.arg(s);
    }
    cmd.env("LD_PRELOAD", preload_lib())
        .env("DEVX_PRELOAD_DEVICES", "sim0")
        .env("DEVX_PRELOAD_LOG", "1")
        .env("DEVX_SIM_ADDR_sim0", addr(side).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ibv_rc_pingpong")
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

#[test]
fn ibv_rc_pingpong_between_two_processes_and_two_emulated_devices() {
    let Some(exe) = tool("ibv_rc_pingpong") else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let port = free_port();
    let mut srv = spawn(&exe, 1, port, "100", None);
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
    let cli = spawn(&exe, 2, port, "100", Some("127.0.0.1"));
    let (srv_ok, cli_ok, srv_out, cli_out) = wait_both(srv, cli, Instant::now() + RUN_WAIT);
    let both = format!("--- server\n{srv_out}\n--- client\n{cli_out}");
    assert!(srv_ok && cli_ok, "ibv_rc_pingpong failed:\n{both}");
    for out in [&srv_out, &cli_out] {
        // Both directions count: 2 × 4096-byte messages per iteration.
        assert!(out.contains("819200 bytes in "), "{both}");
        assert!(out.contains("100 iters in "), "{both}");
        // Each side reached the other's device by its RoCE v2 GID.
        for side in [1, 2] {
            assert!(
                out.contains(&format!("GID ::ffff:{}", addr(side))),
                "{both}"
            );
        }
        assert!(out.contains("doorbell watch: "), "{both}");
    }
    for (who, out) in [("server", &srv_out), ("client", &cli_out)] {
        let (usec, mbit) = numbers(out);
        let watch = out
            .lines()
            .find(|l| l.contains("doorbell watch: "))
            .unwrap_or_default();
        eprintln!("{who}: {usec} usec/iter, {mbit} Mbit/sec; {watch}");
    }
}
