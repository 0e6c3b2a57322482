//! Every reproducer of a divergence from torch 2.15 found so far (issue #10 and the standing
//! differential test), replayed through cachalot and compared with the oracle's recorded
//! answer: exit-status class, statistics, counts, OOM and fatal-error text, and the device
//! calls row for row.
//!
//! The cases are `tests/fixtures/reproducers/index.json` (trace `NAME.csv`; the oracle's JSON
//! and `--segments` log in `NAME.oracle.json` and `NAME.segments.csv`, written by
//! `scripts/fixtures/record_reproducers.py`). Where the oracle is set up, the recorded answers are
//! checked against a fresh oracle run too, so a stale fixture cannot hide a difference.

mod common;

use std::path::PathBuf;

use cachalot_testkit::read_json;
use common::{Case, Outcome, differences, oracle, run_oracle, run_ours};
use serde_json::Value;

fn dir() -> PathBuf {
    cachalot_testkit::fixture("reproducers")
}

fn cases() -> Vec<(String, Case)> {
    let index = read_json(&dir().join("index.json"));
    let text = |v: &Value| v.as_str().map(str::to_string);
    index
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, c)| {
            let case = Case {
                capacity: c["capacity"].as_u64().unwrap(),
                conf: c["conf"].as_str().unwrap().to_string(),
                no_cuda_caching: text(&c["PYTORCH_NO_CUDA_MEMORY_CACHING"]),
                no_hip_caching: text(&c["PYTORCH_NO_HIP_MEMORY_CACHING"]),
                ignore_streams: c["ignore_streams"].as_bool().unwrap_or(false),
            };
            (name.clone(), case)
        })
        .collect()
}

fn recorded(name: &str) -> Outcome {
    let json = read_json(&dir().join(format!("{name}.oracle.json")));
    Outcome {
        status: json["exit_status"].as_i64().unwrap() as i32,
        segments: std::fs::read_to_string(dir().join(format!("{name}.segments.csv"))).unwrap(),
        json,
    }
}

#[test]
fn every_reproducer_matches_the_oracle() {
    let mut failures = Vec::new();
    let all = cases();
    for (name, case) in &all {
        let diffs = differences(
            &run_ours(&dir().join(format!("{name}.csv")), case),
            &recorded(name),
        );
        if !diffs.is_empty() {
            failures.push(format!("{name}:\n    {}", diffs.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} reproducers differ from the oracle:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    eprintln!("{} reproducers identical to the oracle", all.len());
}

#[test]
fn recorded_answers_are_the_live_oracles() {
    let oracle = match oracle() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let scratch = cachalot_testkit::scratch();
    let scratch = scratch.path();
    for (name, case) in cases() {
        let live = run_oracle(&oracle, &dir().join(format!("{name}.csv")), &case, scratch);
        let diffs = differences(&recorded(&name), &live);
        assert!(
            diffs.is_empty(),
            "{name}: the recorded answer is stale (rerun scripts/fixtures/record_reproducers.py):\n    {}",
            diffs.join("\n    ")
        );
    }
}
