//! `memory_summary` and `memory_stats` equal torch 2.15's own output, for every golden
//! `<trace>/<scenario>.summary.txt` and `.memory_stats.json` (written by torch at the end of
//! the trace, in shared/golden; copies in tests/fixtures/golden).

mod common;

use std::collections::BTreeMap;

use cachalot_torchfmt::{memory_stats, memory_summary};

/// Every (trace, scenario) with a golden summary.
fn golden_summaries() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(common::fixtures().join("golden")).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let name = f.unwrap().file_name().into_string().unwrap();
            if let Some(sc) = name.strip_suffix(".summary.txt") {
                let trace = dir.file_name().unwrap().to_str().unwrap().to_string();
                out.push((trace, sc.to_string()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn summary_and_stats_equal_torchs_for_every_golden_file() {
    let cases = golden_summaries();
    assert_eq!(
        cases.len(),
        12,
        "expected 3 traces x 4 scenarios: {cases:?}"
    );
    let mut failures = Vec::new();
    for (trace_name, sc) in &cases {
        let trace = common::load_trace(trace_name);
        let (conf, capacity) = common::scenario(trace_name, sc);
        let report = common::replay_scenario(&trace, &conf, capacity, |_| {});
        let dir = common::fixtures().join("golden").join(trace_name);

        let golden_text =
            String::from_utf8(common::read(&dir.join(format!("{sc}.summary.txt")))).unwrap();
        let ours = memory_summary(&report.stats, 0, false);
        if ours != golden_text {
            let (i, (a, b)) = ours
                .lines()
                .zip(golden_text.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .unwrap_or((0, ("<length>", "<length>")));
            failures.push(format!(
                "{trace_name}/{sc} summary line {i}:\n  ours  {a}\n  torch {b}"
            ));
        }

        let golden_stats: BTreeMap<String, i64> =
            serde_json::from_slice(&common::read(&dir.join(format!("{sc}.memory_stats.json"))))
                .unwrap();
        let stats = memory_stats(&report.stats);
        if stats != golden_stats {
            let keys: Vec<&String> = golden_stats
                .keys()
                .chain(stats.keys())
                .filter(|k| stats.get(*k) != golden_stats.get(*k))
                .take(5)
                .collect();
            failures.push(format!("{trace_name}/{sc} memory_stats differ at {keys:?}"));
        }
        // torch's OrderedDict is sorted by key: so is ours, and so is the golden file.
        let golden_order: Vec<String> = serde_json::from_slice::<serde_json::Map<_, _>>(
            &common::read(&dir.join(format!("{sc}.memory_stats.json"))),
        )
        .unwrap()
        .keys()
        .cloned()
        .collect();
        assert_eq!(stats.keys().cloned().collect::<Vec<_>>(), golden_order);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn abbreviated_summary_keeps_only_the_all_rows() {
    let trace = common::load_trace("resnet50-train");
    let (conf, capacity) = common::scenario("resnet50-train", "oom");
    let report = common::replay_scenario(&trace, &conf, capacity, |_| {});
    let full = memory_summary(&report.stats, 0, false);
    let short = memory_summary(&report.stats, 0, true);
    let expected: Vec<&str> = full
        .lines()
        .filter(|l| !l.contains("from large pool") && !l.contains("from small pool"))
        .collect();
    assert_eq!(short.lines().collect::<Vec<_>>(), expected);
    assert!(
        short.contains(
            "|            CUDA OOMs: 800          |        cudaMalloc retries: 814       |"
        )
    );
}
