//! Two-process tests over loopback: the test binary re-executes itself as
//! the processes of a scenario, each with its own emulated device bound to
//! its own 127/8 address, and talks to them through their stdin/stdout.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Environment variable naming the role a re-executed test binary plays.
pub const ROLE: &str = "DEVX_WIRE_TEST_ROLE";
/// How long any step of a scenario may take before the test fails.
pub const STEP: Duration = Duration::from_secs(20);

/// A loopback address for role `n` of this test process: 127.x.y.n with
/// x.y from the process id, so concurrent test runs do not meet.
pub fn addr(n: u8) -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        100 + (pid % 100) as u8,
        ((pid / 100) % 250) as u8 + 1,
        n,
    )
}

/// A child process playing one role, its output read line by line.
pub struct Peer {
    child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    name: String,
}

impl Peer {
    /// Re-executes this test binary running only `test`, as `role`, with
    /// `env` added.
    pub fn spawn(test: &str, role: &str, env: &[(String, String)]) -> Peer {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn test process");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Peer {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            name: role.to_string(),
        }
    }

    /// The words after `tag` in the first output line holding it.
    pub fn expect(&mut self, tag: &str) -> Vec<String> {
        let deadline = Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    // The harness may have started the line ("test x ... ").
                    let mut words = line.split_whitespace().skip_while(|w| *w != tag);
                    if words.next() == Some(tag) {
                        return words.map(str::to_string).collect();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("{}: no '{tag}' line within {STEP:?}", self.name);
                }
            }
        }
    }

    /// Sends a line to the child.
    pub fn tell(&mut self, line: &str) {
        let w = self.stdin.as_mut().expect("child stdin");
        writeln!(w, "{line}").expect("write to child");
        w.flush().expect("flush to child");
    }

    /// Waits for the child to exit successfully.
    pub fn finish(mut self) {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(s) = self.child.try_wait().expect("wait child") {
                assert!(s.success(), "{} exited with {s}", self.name);
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not exit within {STEP:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the child now.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // A failed test must not leave processes behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The next line the parent wrote to this child, trimmed.
pub fn read_line() -> String {
    let mut s = String::new();
    std::io::stdin().read_line(&mut s).expect("read stdin");
    s.trim().to_string()
}

/// `DEVX_SIM_ADDR_sim0=<a>`, the environment giving a child's device its
/// address.
pub fn device_at(a: Ipv4Addr) -> Vec<(String, String)> {
    vec![("DEVX_SIM_ADDR_sim0".into(), a.to_string())]
}

/// Message `i`'s bytes.
pub fn pattern(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k as u32 * 31 + i * 7) as u8).collect()
}
