//! Shared by the advisor's replay-equivalence tests: the traces of the advisor fixtures.

use std::path::PathBuf;

use cachalot_replay::LoadedTrace;
use cachalot_testkit::fixtures;
use serde_json::Value;

/// Trace files larger than this add time, not cases.
const MAX_TRACE_BYTES: u64 = 200_000;

/// Each advisor fixture (`tests/fixtures/advisor/*.json`, in name order) whose trace is at
/// most [`MAX_TRACE_BYTES`]: its trace's name, the trace, and the fixture's tight capacity.
pub fn fixture_traces() -> Vec<(String, LoadedTrace, u64)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures().join("advisor"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let fx: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let name = fx["trace"].as_str().unwrap().to_string();
            let path = fixtures().join("traces").join(&name);
            if std::fs::metadata(&path).unwrap().len() > MAX_TRACE_BYTES {
                return None;
            }
            let trace = cachalot_replay::load_path(&path).unwrap();
            Some((name, trace, fx["capacity"].as_u64().unwrap()))
        })
        .collect()
}
