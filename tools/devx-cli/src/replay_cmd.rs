//! `replay FILE`: re-issues every command of a fixture through the devx API
//! against the replay provider and reports each one.

use devx::fixture::{drive, live, StepOutcome, StepReport};

use crate::fields::json_str;
use crate::CliResult;

pub const HELP: &str = "\
With --device D: send the fixture's commands to that live device (emulated
or a card), substituting the recorded object numbers, UMEM ids, UAR pages and
addresses with the ones this run gets, and report every outbox field that
differs from the recording; every command runs, the exit status is non-zero
if any differed.
Without --device: parse the fixture and check it against itself (each
recorded command is re-issued through the devx API to a provider that
answers from the recording), which catches an edited or inconsistent file
but says nothing about any device.
Examples:
  $ devx-cli replay fixtures/rc_qp_lifecycle.fixture
  $ devx-cli --device sim0 replay fixtures/rc_qp_lifecycle.fixture";

pub fn run(file: &str, device: Option<String>, json: bool) -> CliResult {
    let live = device.is_some();
    let (report, what) = match device {
        Some(name) => {
            let dev = crate::device_cmd::choose_device(Some(&name))?;
            let report = live::replay_file_on(file, &dev).map_err(|e| e.to_string())?;
            (report, format!("replayed on {name}"))
        }
        None => (
            drive::replay_file(file).map_err(|e| e.to_string())?,
            "replayed".to_string(),
        ),
    };
    if json {
        println!("{}", to_json(file, &report));
        crate::JSON_REPORTED_ERROR
            .store(report.error.is_some(), std::sync::atomic::Ordering::Relaxed);
    } else {
        for s in &report.steps {
            println!("{}", step_line(s));
        }
        let (ok, expected, mismatched) = report.counts();
        // The self-check stops at its first mismatch; a live replay runs everything.
        let ran = if live {
            report.steps.len()
        } else {
            report.steps.len() - mismatched
        };
        println!(
            "{file}: {ran} of {} commands {what}: {ok} ok, {expected} expected errors, {mismatched} mismatches",
            report.stanzas
        );
    }
    match report.error {
        None => Ok(()),
        Some(e) => Err(format!("replay failed: {e}")),
    }
}

fn step_line(s: &StepReport) -> String {
    let what = match &s.outcome {
        StepOutcome::Ok => "ok".to_string(),
        StepOutcome::Implicit => "ok (issued by the library)".to_string(),
        StepOutcome::ExpectedError(e) => format!("expected error: {e}"),
        StepOutcome::Mismatch(m) => format!("MISMATCH: {m}"),
    };
    format!(
        "{:>5}  line {:<6} {:<12} {:<24} {what}",
        s.position, s.line, s.method, s.name
    )
}

fn to_json(file: &str, r: &drive::ReplayReport) -> String {
    let steps: Vec<String> = r
        .steps
        .iter()
        .map(|s| {
            let (result, detail) = match &s.outcome {
                StepOutcome::Ok => ("ok", None),
                StepOutcome::Implicit => ("implicit", None),
                StepOutcome::ExpectedError(e) => ("expected_error", Some(e)),
                StepOutcome::Mismatch(m) => ("mismatch", Some(m)),
            };
            format!(
                "{{\"position\": {}, \"line\": {}, \"method\": {}, \"opcode\": {}, \"name\": {}, \"result\": {}, \"detail\": {}}}",
                s.position,
                s.line,
                json_str(s.method),
                s.opcode.map(|o| o.to_string()).unwrap_or_else(|| "null".into()),
                json_str(&s.name),
                json_str(result),
                detail.map(|d| json_str(d)).unwrap_or_else(|| "null".into())
            )
        })
        .collect();
    format!(
        "{{\"fixture\": {}, \"stanzas\": {}, \"passed\": {}, \"error\": {}, \"steps\": [{}]}}",
        json_str(file),
        r.stanzas,
        r.passed(),
        r.error
            .as_deref()
            .map(json_str)
            .unwrap_or_else(|| "null".into()),
        steps.join(", ")
    )
}
