//! Reading torch's snapshots: every file of `shared/traces/pickle` and `shared/traces/real`
//! (copies in tests/fixtures/pickle and tests/fixtures/snapshots, gzip-compressed) gives the
//! same event counts and byte totals as Python's `pickle`/`json` (computed once by
//! `scripts/snapshot_counts.py` into `expected_counts.json`), and converting the real ones
//! gives exactly the reference RMM CSVs shipped with them.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use cachalot_replay::{LoadOptions, ReplayOptions, load_input, load_rmm, replay};
use cachalot_torchfmt::{Snapshot, read_snapshot, replay_events, write_rmm_csv};
use serde_json::{Value, json};

fn snapshot_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["pickle", "snapshots"] {
        for f in std::fs::read_dir(common::fixtures().join(dir)).unwrap() {
            let p = f.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap();
            if name.ends_with(".pickle.gz") || name.ends_with(".json.gz") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The numbers `scripts/snapshot_counts.py` computes, computed from our reading.
fn counts(s: &Snapshot) -> Value {
    let sum = |f: fn(&cachalot_torchfmt::Segment) -> u64| -> u64 { s.segments.iter().map(f).sum() };
    let mut devices = Vec::new();
    for (d, t) in s.device_traces.iter().enumerate() {
        let mut actions: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for e in &t.entries {
            let a = actions.entry(e.action.name()).or_default();
            a.0 += 1;
            a.1 += e.size;
        }
        let ev = replay_events(s, d as u32).unwrap();
        let allocs: Vec<_> = ev
            .events
            .iter()
            .filter(|e| e.kind == cachalot_torchfmt::EventKind::Allocate)
            .collect();
        devices.push(json!({
            "device": d,
            "entries": t.entries.len(),
            "actions": actions.iter().map(|(k, (c, b))| (k.to_string(), json!({"count": c, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
            "replay": {
                "allocs": allocs.len(),
                "frees": ev.events.len() - allocs.len(),
                "dropped_frees": ev.dropped_frees,
                "streams": ev.streams.len(),
                "alloc_bytes": allocs.iter().map(|e| e.size).sum::<u64>(),
            },
        }));
    }
    json!({
        "segments": s.segments.len(),
        "blocks": s.segments.iter().map(|x| x.blocks.len()).sum::<usize>(),
        "total_size": sum(|x| x.total_size),
        "allocated_size": sum(|x| x.allocated_size),
        "active_size": sum(|x| x.active_size),
        "requested_size": sum(|x| x.requested_size),
        "devices": devices,
    })
}

#[test]
fn counts_and_bytes_equal_pythons_for_every_snapshot() {
    let expected: Value = serde_json::from_slice(&common::read(
        &common::fixtures().join("snapshots/expected_counts.json"),
    ))
    .unwrap();
    let files = snapshot_files();
    assert_eq!(
        files.len(),
        13,
        "3 pickles and 10 JSON snapshots: {files:?}"
    );
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let snap = read_snapshot(&common::read(&path)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(counts(&snap), expected[name], "{name}");
    }
}

#[test]
fn converting_real_snapshots_gives_the_reference_csv() {
    let mut checked = 0;
    for path in snapshot_files() {
        let name = path.file_name().unwrap().to_str().unwrap();
        let Some(stem) = name.strip_suffix(".json.gz") else {
            continue;
        };
        let snap = read_snapshot(&common::read(&path)).unwrap();
        let devices = snap.devices_with_history();
        for d in &devices {
            let csv_name = if devices.len() > 1 {
                format!("{stem}.dev{d}.csv.gz")
            } else {
                format!("{stem}.csv.gz")
            };
            let mut ours = Vec::new();
            write_rmm_csv(&mut ours, &replay_events(&snap, *d).unwrap().events).unwrap();
            let reference = common::read(&common::fixtures().join("traces").join(&csv_name));
            assert!(ours == reference, "{csv_name}: conversion differs");
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn replaying_a_snapshot_is_replaying_its_conversion() {
    let snap_path = common::fixtures().join("snapshots/select_n_multistream.json.gz");
    let input = load_input(&snap_path, &LoadOptions::default()).unwrap();
    let csv = load_rmm(&common::fixtures().join("traces/select_n_multistream.csv.gz")).unwrap();
    assert_eq!(input.trace.ops, csv.ops);
    assert_eq!(input.trace.stats, csv.stats);
    let a = replay(&input.trace, &ReplayOptions::default()).unwrap();
    let b = replay(&csv, &ReplayOptions::default()).unwrap();
    assert_eq!(a.stats, b.stats);
    let note = input.note().unwrap();
    assert!(note.contains("6111 events replayed"), "{note}");
}

#[test]
fn mid_run_windows_say_what_they_dropped() {
    // cs336_bcrafton's ring buffer starts mid-run: Python counts its dropped frees too.
    let path = common::fixtures().join("snapshots/cs336_bcrafton.json.gz");
    let input = load_input(&path, &LoadOptions::default()).unwrap();
    let cachalot_replay::input::InputKind::Snapshot { events, .. } = &input.kind else {
        panic!("read as CSV")
    };
    assert_eq!(events.dropped_frees, 222);
    assert!(events.starts_mid_run());
    let note = input.note().unwrap();
    assert!(
        note.contains("222 frees of blocks allocated before it were dropped"),
        "{note}"
    );
    // Snapshots recorded from the start have nothing live before their history.
    let full = read_snapshot(&common::read(
        &common::fixtures().join("pickle/resnet50-train.default.pickle.gz"),
    ))
    .unwrap();
    let ev = replay_events(&full, 0).unwrap();
    assert_eq!((ev.dropped_frees, ev.live_before_window), (0, 0));
}

#[test]
fn multi_device_snapshots_replay_per_device() {
    let path = common::fixtures().join("snapshots/code_location_expandable_3gpu_oom.json.gz");
    let err = load_input(&path, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("history for devices 0, 1, 2; choose one (--device N)"),
        "{err}"
    );
    for d in 0..3u32 {
        let input = load_input(
            &path,
            &LoadOptions {
                device: Some(d),
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let csv = load_rmm(&common::fixtures().join(format!(
            "traces/code_location_expandable_3gpu_oom.dev{d}.csv.gz"
        )))
        .unwrap();
        assert_eq!(input.trace.ops, csv.ops, "device {d}");
    }
    let err = load_input(
        &path,
        &LoadOptions {
            device: Some(7),
            ..LoadOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no history for device 7; devices with history: 0, 1, 2"),
        "{err}"
    );
}

#[test]
fn rmm_csv_still_loads_through_load_path() {
    let p = common::fixtures().join("traces/resnet50-train.csv.gz");
    let t = cachalot_replay::load_path(&p).unwrap();
    assert_eq!(t.ops.len(), 10525);
}
