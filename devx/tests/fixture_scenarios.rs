//! Every scenario recorded on the emulated device replays against its own
//! recording, and a replay by the devx API alone agrees.

use devx::fixture::{drive, scenarios};
use devx::Device;

/// A device no other test touches (the emulator's devices are process-wide).
fn fresh_device(i: usize) -> Device {
    Device::emulated(&format!("sim{}", 300 + i)).unwrap()
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "devx-scenario-{name}-{}.fixture",
        std::process::id()
    ))
}

#[test]
fn every_scenario_records_and_replays() {
    let mut failures = Vec::new();
    for (i, s) in scenarios::ALL.iter().enumerate() {
        let path = temp(s.name);
        if let Err(e) = scenarios::record(s, &fresh_device(i), &path) {
            failures.push(format!("{} on the emulator: {e}", s.name));
            continue;
        }
        if let Err(e) = scenarios::replay(s, &path) {
            failures.push(format!("{} against its recording: {e}", s.name));
        }
        let report = drive::replay_file(&path).unwrap();
        if let Some(e) = report.error {
            failures.push(format!("{} through drive: {e}", s.name));
        }
        let _ = std::fs::remove_file(&path);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_same_scenario_on_fresh_devices_records_the_same_commands() {
    let s = scenarios::find("rc_qp_lifecycle").unwrap();
    let (a, b) = (temp("same-a"), temp("same-b"));
    scenarios::record(s, &fresh_device(50), &a).unwrap();
    scenarios::record(s, &fresh_device(51), &b).unwrap();
    let body = |p: &std::path::Path| {
        let t = std::fs::read_to_string(p).unwrap();
        // Past the header, which names the device and its GUID.
        t[t.find("\n@1 ").unwrap()..].to_string()
    };
    assert_eq!(body(&a), body(&b));
    let _ = std::fs::remove_file(a);
    let _ = std::fs::remove_file(b);
}
