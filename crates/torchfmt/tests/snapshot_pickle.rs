//! Snapshots written by cachalot have the shape torch 2.15 writes: replaying the traces that
//! torch replayed for `shared/traces/pickle` (same configuration, same simulated device)
//! gives the same segments, blocks, history and settings; only `time_us` differs (a virtual
//! clock here). The output stays within MemoryViz.js's opcodes.

mod common;

use std::collections::BTreeSet;

use cachalot_torchfmt::pickle::OPCODES_USED;
use cachalot_torchfmt::unpickle::opcodes_used;
use cachalot_torchfmt::{Snapshot, read_snapshot, to_pickle_bytes};

/// (reference pickle, trace, configuration, capacity).
const REFERENCES: &[(&str, &str, &str, u64)] = &[
    ("resnet50-train.default", "resnet50-train", "", 80 << 30),
    (
        "gpt2-train.expandable",
        "gpt2-train",
        "expandable_segments:True",
        80 << 30,
    ),
    ("resnet50-train.oom-5G", "resnet50-train", "", 5 << 30),
];

/// MemoryViz.js's unpickler's opcodes (spec §12.3).
const MEMORYVIZ: &[u8] = b"\x80\x95.(}dsu]lae)t\x85\x86\x87N\x88\x89JKM\x8aG\x8cX\x94qrhj";

fn ours(trace: &str, conf: &str, capacity: u64) -> Vec<u8> {
    let t = common::load_trace(trace);
    let report = common::replay_scenario(&t, conf, capacity, |o| {
        o.history_entries = Some(usize::MAX);
        o.snapshot_at_end = true;
    });
    let snap = report.snapshot.expect("snapshot asked for");
    let (conf, _) = cachalot_core::config::parse_pytorch(conf).unwrap();
    to_pickle_bytes(&Snapshot::from_allocator(
        &snap.segments,
        &snap.trace,
        &conf,
        0,
    ))
}

fn without_time(mut s: Snapshot) -> Snapshot {
    for t in &mut s.device_traces {
        for e in &mut t.entries {
            e.time_us = None;
        }
    }
    s
}

/// serde-pickle's reading, `time_us` removed: an independent reader's view.
fn serde_view(data: &[u8]) -> serde_pickle::Value {
    use serde_pickle::{HashableValue, Value};
    let v = serde_pickle::value_from_slice(data, serde_pickle::DeOptions::new()).unwrap();
    let Value::Dict(mut top) = v else {
        panic!("not a dict")
    };
    let key = HashableValue::String("device_traces".into());
    if let Some(Value::List(devices)) = top.get_mut(&key) {
        for d in devices {
            if let Value::List(entries) = d {
                for e in entries {
                    if let Value::Dict(m) = e {
                        m.remove(&HashableValue::String("time_us".into()));
                    }
                }
            }
        }
    }
    Value::Dict(top)
}

#[test]
fn written_snapshots_equal_torchs_except_time() {
    for &(reference, trace, conf, capacity) in REFERENCES {
        let theirs =
            common::read(&common::fixtures().join(format!("pickle/{reference}.pickle.gz")));
        let mine = ours(trace, conf, capacity);
        let a = without_time(read_snapshot(&mine).unwrap());
        let b = without_time(read_snapshot(&theirs).unwrap());
        assert_eq!(a.segments.len(), b.segments.len(), "{reference}");
        assert_eq!(a.segments, b.segments, "{reference}: segments");
        assert_eq!(a.device_traces.len(), b.device_traces.len(), "{reference}");
        for (x, y) in a.device_traces[0]
            .entries
            .iter()
            .zip(&b.device_traces[0].entries)
        {
            assert_eq!(x, y, "{reference}: first differing history entry");
        }
        assert_eq!(a.device_traces, b.device_traces, "{reference}: history");
        assert_eq!(
            a.allocator_settings, b.allocator_settings,
            "{reference}: settings"
        );
        // The same through an independent reader, every key included.
        assert!(
            serde_view(&mine) == serde_view(&theirs),
            "{reference}: serde-pickle sees a difference"
        );
    }
}

#[test]
fn torch_keeps_time_us_increasing_and_so_do_we() {
    let mine = read_snapshot(&ours("resnet50-train", "", 80 << 30)).unwrap();
    let times: Vec<i64> = mine.device_traces[0]
        .entries
        .iter()
        .map(|e| e.time_us.unwrap())
        .collect();
    assert_eq!(times.first(), Some(&0));
    assert!(times.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn written_pickles_use_only_memoryviz_opcodes() {
    let allowed: BTreeSet<u8> = MEMORYVIZ.iter().copied().collect();
    for &(_, op) in OPCODES_USED {
        assert!(allowed.contains(&op), "writer may emit {op:#x}");
    }
    for &(reference, trace, conf, capacity) in REFERENCES {
        let used = opcodes_used(&ours(trace, conf, capacity)).unwrap();
        let outside: Vec<u8> = used.difference(&allowed).copied().collect();
        assert!(outside.is_empty(), "{reference}: opcodes {outside:x?}");
        // torch's own pickles stay within the set too.
        let theirs =
            common::read(&common::fixtures().join(format!("pickle/{reference}.pickle.gz")));
        assert!(opcodes_used(&theirs).unwrap().is_subset(&allowed));
    }
}

#[test]
fn pythons_pickle_reads_ours_as_torchs_when_python_is_here() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_snapshot_pickle.py");
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    for &(reference, trace, conf, capacity) in REFERENCES {
        let path = dir.join(format!("{reference}.pickle"));
        std::fs::write(&path, ours(trace, conf, capacity)).unwrap();
        let theirs = common::fixtures().join(format!("pickle/{reference}.pickle.gz"));
        let out = match std::process::Command::new("python3")
            .arg(&script)
            .arg(&path)
            .arg(&theirs)
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("skipped: python3 not runnable ({e})");
                return;
            }
        };
        assert!(
            out.status.success() && out.stdout.starts_with(b"ok"),
            "{reference}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_history_ring_keeps_the_newest_entries() {
    let t = common::load_trace("resnet50-train");
    let full = common::replay_scenario(&t, "", 80 << 30, |o| {
        o.history_entries = Some(usize::MAX);
        o.snapshot_at_end = true;
    });
    let ring = common::replay_scenario(&t, "", 80 << 30, |o| {
        o.history_entries = Some(1000);
        o.snapshot_at_end = true;
    });
    let full = full.snapshot.unwrap().trace;
    let ring = ring.snapshot.unwrap().trace;
    assert_eq!(full.len(), 15680);
    assert_eq!(ring.len(), 1000);
    assert_eq!(ring[..], full[full.len() - 1000..]);
    assert_eq!(ring[0].seq, 14680);
}
