//! The committed fixtures in `fixtures/`: each replays through the devx API,
//! and each scenario still sends exactly what its fixture recorded.
//!
//! After a deliberate change to what the library or the emulator sends,
//! regenerate them:
//! `cargo test -p integration-tests --test fixtures_replay -- --ignored regenerate_fixtures`

mod verbs_scenarios;

use std::path::{Path, PathBuf};

use devx::fixture::drive;
use devx::fixture::scenarios::{self, Scenario};
use devx::Device;

/// The raw-DEVX scenarios, then the verbs ones: every fixture's source.
fn all_scenarios() -> impl Iterator<Item = &'static Scenario> {
    scenarios::ALL.iter().chain(verbs_scenarios::ALL)
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn fixture_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fixture"))
        .collect();
    v.sort();
    v
}

const REGENERATE: &str =
    "cargo test -p integration-tests --test fixtures_replay -- --ignored regenerate_fixtures";

#[test]
fn every_fixture_replays_through_the_api() {
    let files = fixture_files();
    assert!(
        !files.is_empty(),
        "no fixtures in {}",
        fixtures_dir().display()
    );
    let mut failures = Vec::new();
    for f in &files {
        match drive::replay_file(f) {
            Ok(r) if r.passed() => assert_eq!(r.steps.len(), r.stanzas, "{}", f.display()),
            Ok(r) => failures.push(r.error.unwrap_or_default()),
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn scenarios_send_what_their_fixtures_recorded() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for s in all_scenarios() {
        let path = fixtures_dir().join(format!("{}.fixture", s.name));
        if !path.exists() {
            continue;
        }
        replayed += 1;
        if let Err(e) = scenarios::replay(s, &path) {
            failures.push(format!("{}: {e}", s.name));
        }
    }
    assert!(replayed > 0, "no scenario has a fixture");
    assert!(
        failures.is_empty(),
        "{}\n(if the change is intended, regenerate: {REGENERATE})",
        failures.join("\n")
    );
}

/// Fixtures recorded from unmodified rdma-core programs run under the
/// preload library (`DEVX_PRELOAD_RECORD`): they have no scenario here, the
/// program is their source; each replays through the API.
#[test]
fn rdma_core_program_fixtures_replay_through_the_api() {
    let dir = fixtures_dir().join("rdma-core");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/rdma-core exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fixture"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    for f in &files {
        let r = drive::replay_file(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(r.passed(), "{}: {:?}", f.display(), r.error);
        assert_eq!(r.steps.len(), r.stanzas, "{}", f.display());
    }
}

#[test]
fn every_fixture_belongs_to_a_scenario() {
    for f in fixture_files() {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            all_scenarios().any(|s| s.name == stem),
            "{} has no scenario in devx::fixture::scenarios or verbs_scenarios",
            f.display()
        );
    }
}

/// Records every scenario on a fresh emulated device into `fixtures/`.
/// Scenarios the emulator cannot run yet are reported and left out.
#[test]
#[ignore = "writes fixtures/; run on purpose after a deliberate change"]
fn regenerate_fixtures() {
    let mut skipped = Vec::new();
    for (i, s) in all_scenarios().enumerate() {
        // One device per scenario: the emulator's devices are process-wide,
        // and a fresh one numbers its objects from the start every time.
        let dev = Device::emulated(&format!("sim{}", 100 + i)).unwrap();
        let path = fixtures_dir().join(format!("{}.fixture", s.name));
        let tmp = path.with_extension("fixture.new");
        match scenarios::record(s, &dev, &tmp) {
            Ok(()) => std::fs::rename(&tmp, &path).unwrap(),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                skipped.push(format!("{}: {e}", s.name));
            }
        }
    }
    for s in &skipped {
        eprintln!("not recorded: {s}");
    }
}
