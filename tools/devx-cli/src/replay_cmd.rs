//! `replay FILE`: re-issues every command of a fixture through the devx API
//! against the replay provider and reports each one.

use devx::fixture::{drive, StepOutcome, StepReport};

use crate::fields::json_str;
use crate::CliResult;

pub const HELP: &str = "\
Without --device: parse the fixture and check it against itself (every
recorded command is re-issued through the devx API to a provider that
answers from the recording), which catches a malformed or inconsistent file.
Example:
  $ devx-cli replay fixtures/rc_qp_lifecycle.fixture";

pub fn run(file: &str, device: Option<String>, json: bool) -> CliResult {
    if device.is_some() {
        return Err(
            "replaying against a live device (--device) is not implemented; \
             without --device, replay checks the fixture against itself"
                .into(),
        );
    }
    let report = drive::replay_file(file).map_err(|e| e.to_string())?;
    if json {
        println!("{}", to_json(file, &report));
    } else {
        for s in &report.steps {
            println!("{}", step_line(s));
        }
        let (ok, expected, mismatched) = report.counts();
        println!(
            "{file}: {} of {} commands replayed: {ok} ok, {expected} expected errors, {mismatched} mismatches",
            report.steps.len() - mismatched,
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
