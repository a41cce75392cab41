//! rdma-core's own Python tests (pyverbs), unmodified, on the emulated
//! device through the preload library: `test_mlx5_devx` brings two DEVX RC
//! QPs up from raw PRM commands (UMEMs, UARs, CQ, QP, RST→INIT→RTR→RTS),
//! writes SEND_IMM WQEs into the SQ, rings the UAR and polls CQEs by owner
//! bit, 1000 messages. Skips, saying so, when python3-pyverbs (and scapy,
//! without which rdma-core skips its DEVX tests) is not installed.

mod common;

use common::preload_lib;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SKIP: &str =
    "python3-pyverbs or python3-scapy not installed; apt-get install python3-pyverbs python3-scapy";
/// Where Debian's python3-pyverbs installs rdma-core's tests (some gzipped).
const TESTS: &str = "/usr/share/doc/rdma-core/tests";
/// The whole run is bounded: a lost doorbell must fail the test, not hang it.
const RUN_WAIT: Duration = Duration::from_secs(300);

/// The Python that has pyverbs and scapy: the system's (pyverbs is built
/// for it), not one a version manager put first in PATH.
fn python() -> Option<PathBuf> {
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|py| {
            Command::new(py)
                .args(["-c", "import pyverbs.device, scapy"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Copies rdma-core's test package into `dir/tests`, decompressing the
/// gzipped modules Debian ships (Python imports only `.py`).
const UNPACK: &str = r#"
import gzip, os, shutil, sys
src, dst = sys.argv[1], os.path.join(sys.argv[2], "tests")
os.makedirs(dst)
for name in os.listdir(src):
    path = os.path.join(src, name)
    if name.endswith(".py.gz"):
        with gzip.open(path) as f, open(os.path.join(dst, name[:-3]), "wb") as o:
            o.write(f.read())
    elif name.endswith(".py"):
        shutil.copy(path, dst)
"#;

/// Runs `py args` in `dir` with the library preloaded, killed after
/// [`RUN_WAIT`]; returns (success, stdout + stderr).
fn run_bounded(py: &Path, dir: &Path, args: &[&str]) -> (bool, String) {
    let mut child = Command::new(py)
        .args(args)
        .current_dir(dir)
        .env("LD_PRELOAD", preload_lib())
        .env("DEVX_PRELOAD_DEVICES", "sim0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + RUN_WAIT;
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut text = reader.join().unwrap_or_default();
    let _ = err.read_to_string(&mut text);
    match status {
        Some(st) => (st.success(), text),
        None => (false, format!("killed after {RUN_WAIT:?}\n{text}")),
    }
}

#[test]
fn rdma_core_test_mlx5_devx_passes_on_the_emulated_device() {
    let (Some(py), true) = (python(), Path::new(TESTS).join("run_tests.py").is_file()) else {
        eprintln!("skipped: {SKIP}");
        return;
    };
    let dir = std::env::temp_dir().join(format!("devx-preload-pyverbs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test directory");
    let dir_s = dir.to_string_lossy().into_owned();
    let (ok, text) = run_bounded(&py, &dir, &["-c", UNPACK, TESTS, &dir_s]);
    assert!(ok, "unpacking {TESTS} failed:\n{text}");
    let (ok, text) = run_bounded(
        &py,
        &dir,
        &[
            "tests/run_tests.py",
            "--dev",
            "sim0",
            "-v",
            "test_mlx5_devx",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "test_mlx5_devx failed:\n{text}");
    // Ran and passed, not skipped (rdma-core skips when it finds no mlx5
    // DEVX device: that would print `OK (skipped=1)`).
    assert!(text.contains("Ran 1 test"), "{text}");
    assert!(
        text.lines().any(|l| l.trim() == "OK"),
        "the test did not pass:\n{text}"
    );
}
