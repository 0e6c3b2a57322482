//! A snapshot replayed as the program's whole workload: ring-buffer windows completed with
//! what was live at their start (checked against the snapshot's own end state), and failed
//! requests served. On snapshots recorded by real PyTorch on the fake GPU
//! (tests/fixtures/snapshots/own, `scripts/gen_snapshot_fixtures.py`), on ring buffers made
//! here by cutting a complete history, and on the shipped real snapshots.

use std::path::PathBuf;

use cachalot_replay::diagnose::snapshot_conf;
use cachalot_replay::input::{WindowCheck, check_window, read_snapshot_path, snapshot_input};
use cachalot_replay::{ReplayOptions, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{EventOptions, FailedRequest, Format, Snapshot};

fn fixtures() -> PathBuf {
    cachalot_testkit::fixtures()
}

fn read(rel: &str) -> Snapshot {
    read_snapshot_path(&fixtures().join(rel)).unwrap()
}

fn check(snap: &Snapshot, device: u32) -> WindowCheck {
    let input = snapshot_input(snap, device, Format::Pickle, &EventOptions::WORKLOAD).unwrap();
    let (conf, _) = snapshot_conf(snap);
    check_window(&input, &conf).unwrap().unwrap()
}

/// The snapshot with only the last `keep` entries of device 0's history, as a ring buffer of
/// `keep` entries would have it.
fn ring(snap: &Snapshot, keep: usize) -> Snapshot {
    let mut s = snap.clone();
    let e = &mut s.device_traces[0].entries;
    let cut = e.len().saturating_sub(keep);
    e.drain(..cut);
    s
}

#[test]
fn cut_histories_are_completed_exactly() {
    // (file, allocated bytes exact): the allocated bytes also count remainders too small
    // to split, which depend on where the blocks live before the window were placed (within 2.5 %).
    for (file, exact) in [
        ("snapshots/own/mlp-full.pickle.gz", true),
        ("pickle/resnet50-train.default.pickle.gz", false),
    ] {
        let full = read(file);
        let n = full.device_traces[0].entries.len();
        let whole = check(&full, 0);
        for keep in [n / 10, n / 3, n / 2, n - 1] {
            let cut = ring(&full, keep);
            let events =
                cachalot_torchfmt::replay_events_with(&cut, 0, &EventOptions::WORKLOAD).unwrap();
            if keep <= n / 2 {
                assert!(events.reconstructed > 0, "{file} keep {keep}");
            }
            assert_eq!(events.dropped_frees, 0, "{file} keep {keep}");
            let c = check(&cut, 0);
            assert!(c.requested_matches(), "{file} keep {keep}: {c}");
            let (r, s) = c.allocated;
            if exact {
                assert!(c.allocated_matches(), "{file} keep {keep}: {c}");
            } else {
                assert!(r.abs_diff(s) * 40 <= s, "{file} keep {keep}: {c}");
            }
            assert!(c.peak_allocated >= s, "{file} keep {keep}: {c}");
            // The window's own peak is part of the whole run's: what was live before the
            // window is counted, not more (up to unsplit remainders, 1 %).
            assert!(
                c.peak_allocated <= whole.peak_allocated + whole.peak_allocated / 100,
                "{file} keep {keep}: {c}"
            );
        }
    }
}

#[test]
fn torchs_own_ring_buffer_is_completed_exactly() {
    let snap = read("snapshots/own/mlp-ring.pickle.gz");
    let c = check(&snap, 0);
    assert!(c.requested_matches() && c.allocated_matches(), "{c}");
    assert!(c.peak_allocated >= c.allocated.1, "{c}");
    // The window alone (what was live before it dropped) peaks far lower.
    let events = cachalot_torchfmt::replay_events(&snap, 0).unwrap();
    assert!(events.dropped_frees > 0);
}

#[test]
fn shipped_ring_buffers_end_with_the_snapshots_requested_bytes() {
    for name in [
        "cs336_bcrafton",
        "cs336_kkaitlyn_ctx128_fullstep",
        "cs336_magma",
        "cs336_nothanmin_snapshot",
        "cs336_wedsonlin_medium_ctx1024_inference",
        "cs336_wedsonlin_medium_ctx1024_train",
        "cs336_wedsonlin_medium_ctx128_train",
        "ftcourse_cranberrii",
        "select_n_multistream",
    ] {
        let snap = read(&format!("snapshots/{name}.json.gz"));
        let c = check(&snap, 0);
        assert!(c.requested_matches(), "{name}: {c}");
        assert!(c.peak_allocated >= c.allocated.1, "{name}: {c}");
        // Allocated bytes also count remainders too small to split, which depend on where
        // blocks were placed before the window: within 0.1 %.
        let (r, s) = c.allocated;
        assert!(r.abs_diff(s) * 1000 <= s, "{name}: {c}");
    }
    // kkaitlyn: the snapshot's 51.1 GiB allocated, where the window alone peaked at 38.6.
    let c = check(&read("snapshots/cs336_kkaitlyn_ctx128_fullstep.json.gz"), 0);
    assert!(c.allocated_matches(), "{c}");
    assert_eq!(c.allocated.1, 54_873_829_888);
}

/// Replays a snapshot's workload under its own configuration at its recorded capacity.
fn replay_recorded(snap: &Snapshot, device: u32) -> cachalot_replay::ReplayReport {
    let input = snapshot_input(snap, device, Format::Pickle, &EventOptions::WORKLOAD).unwrap();
    let rec = input.recorded().unwrap();
    let (conf, _) = snapshot_conf(snap);
    replay(
        &input.trace,
        &ReplayOptions {
            conf,
            sim: SimConfig::with_capacity(rec.capacity.unwrap()),
            max_oom_reports: 0,
            ..ReplayOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn failed_requests_fail_again_at_the_recorded_capacity() {
    for (file, device, conf) in [
        ("snapshots/own/mlp-oom.pickle.gz", 0, ""),
        (
            "snapshots/own/mlp-oom-expandable.pickle.gz",
            0,
            "expandable_segments:True",
        ),
        (
            "snapshots/code_location_expandable_3gpu_oom.json.gz",
            1,
            "expandable_segments:True",
        ),
    ] {
        let snap = read(file);
        let input = snapshot_input(&snap, device, Format::Pickle, &EventOptions::WORKLOAD).unwrap();
        let rec = input.recorded().unwrap();
        assert_eq!(rec.alloc_conf.as_deref(), Some(conf), "{file}");
        assert_eq!(rec.ooms, 1, "{file}");
        let events = input.snapshot_events().unwrap();
        assert_eq!(events.failed_requests, 1, "{file}");
        assert!(
            events
                .events
                .iter()
                .any(|e| FailedRequest::from_addr(e.addr) == Some(FailedRequest::nth(1))),
            "{file}"
        );
        let r = replay_recorded(&snap, device);
        assert!(
            r.ooms.count >= 1,
            "{file}: the recorded config fits where it failed"
        );
    }
    // The reference conversion (failed requests dropped) serves a smaller workload: at the
    // same capacity it does not fail on the small MLP.
    let snap = read("snapshots/own/mlp-oom.pickle.gz");
    let dropped = snapshot_input(&snap, 0, Format::Pickle, &EventOptions::default()).unwrap();
    let r = replay(
        &dropped.trace,
        &ReplayOptions {
            sim: SimConfig::with_capacity(160 << 20),
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    assert_eq!(r.ooms.count, 0);
}

#[test]
fn torchs_646_ooms_at_5_gib_are_replayed() {
    let snap = read("pickle/resnet50-train.oom-5G.pickle.gz");
    let r = replay_recorded(&snap, 0);
    assert_eq!(r.ooms.count, 646);
}

#[test]
fn failed_request_ids_round_trip_and_never_name_real_blocks() {
    for n in [1u64, 2, 646, 1 << 20] {
        let id = FailedRequest::nth(n);
        assert_eq!(FailedRequest::from_addr(id.addr()), Some(id));
        assert_eq!(id.number(), n);
    }
    assert_eq!(FailedRequest::from_addr(0x7f00_0000_0000), None);
    assert_eq!(FailedRequest::from_addr(u64::MAX), None);
}
