//! The commands on traces with private-pool, `empty_cache` and `record_stream` rows.

use cachalot_testkit::fixtures;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

/// `replay --json` of `trace` (also when it ran out of memory or stopped at a fatal error),
/// without what names the input (`trace`, line numbers of the
/// trace statistics, of OOM messages, of a fatal error and of the pool accounts, timing): what the allocator did.
fn replay_json(trace: &Path, conf: &str) -> Value {
    let out = cachalot(&[
        "replay",
        trace.to_str().unwrap(),
        "--capacity",
        "1G",
        "--conf",
        conf,
        "--json",
    ]);
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "replay {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = v.as_object_mut().unwrap();
    for key in ["trace", "timing"] {
        o.remove(key);
    }
    if let Some(ts) = o.get_mut("trace_stats").and_then(Value::as_object_mut) {
        // The conversion drops what the replay skips, as it does for unmatched frees.
        for key in [
            "lines",
            "other_rows",
            "unmatched_frees",
            "unmatched_record_streams",
        ] {
            ts.remove(key);
        }
    }

    if let Some(f) = v.get_mut("fatal_error").and_then(Value::as_object_mut) {
        f.remove("trace_line");
    }
    if let Some(p) = v.get_mut("pool_accounts").and_then(Value::as_object_mut) {
        for at in ["at_peak_reserved", "at_peak_allocated", "at_end"] {
            if let Some(a) = p.get_mut(at).and_then(Value::as_object_mut) {
                a.remove("trace_line");
            }
        }
    }
    if let Some(ms) = v
        .pointer_mut("/ooms/messages")
        .and_then(Value::as_array_mut)
    {
        for m in ms {
            m.as_object_mut().unwrap().remove("trace_line");
        }
    }
    v
}

/// `convert` keeps the pool rows: the converted trace replays exactly as the original, per
/// pool too, and has every pool, `empty_cache` and `record_stream` row the replay uses (a
/// `record_stream` of no live allocation is dropped, as an unmatched free is).
#[test]
fn convert_keeps_pool_rows() {
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    for name in [
        "example_mempool",
        "example_graph_capture",
        "example_record_stream",
        "pool_storage_takeover",
        "pool_nested",
    ] {
        let input = fixtures().join("pools").join(format!("{name}.csv"));
        let output = dir.join(format!("{name}.csv"));
        let out = cachalot(&["convert", input.to_str().unwrap(), output.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = |p: &Path| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| {
                    ["pool_", "graph_", "empty_cache", "record_stream"]
                        .iter()
                        .any(|a| l.contains(a))
                })
                .count()
        };
        for conf in ["", "expandable_segments:True"] {
            let (a, b) = (replay_json(&input, conf), replay_json(&output, conf));
            let ts = &a["trace_stats"];
            let replayed = ["pool_ops", "empty_cache_calls", "record_streams"]
                .map(|k| ts[k].as_u64().unwrap())
                .iter()
                .sum::<u64>();
            assert!(replayed > 0, "{name} has pool rows");
            assert_eq!(rows(&output) as u64, replayed, "{name}: pool rows kept");
            assert_eq!(
                a, b,
                "{name} under '{conf}': the conversion replays differently"
            );
        }
    }
}
