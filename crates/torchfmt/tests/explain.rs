//! The explained out-of-memory: the numbers add up to torch's message, a snapshot taken at
//! the failure gives the same reading as the replay that failed, and the candidate options
//! are verified by replaying them.

mod common;

use cachalot_core::TraceAction;
use cachalot_replay::diagnose::{best, diagnose};
use cachalot_replay::{ReplayOptions, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{OomRequest, Snapshot, explain_oom, read_snapshot, to_pickle_bytes};

const MIB: u64 = 1 << 20;

fn opts(conf: &str, capacity: u64) -> ReplayOptions {
    ReplayOptions {
        conf: cachalot_core::config::parse_pytorch(conf).unwrap().0,
        sim: SimConfig::with_capacity(capacity),
        ..ReplayOptions::default()
    }
}

#[test]
fn the_reading_adds_up_to_torchs_message() {
    let trace = common::load_trace("resnet50-train");
    let d = diagnose(&trace, &opts("", 5 << 30))
        .unwrap()
        .expect("an OOM at 5 GiB");
    let x = &d.explanation;
    assert_eq!(d.line, 498);
    assert_eq!(x.request.rounded, 49 * MIB);
    assert_eq!(x.alloc_size, 50 * MIB);
    assert_eq!(x.request.device_free, 18 * MIB);
    // torch: "67.91 MiB is reserved by PyTorch but unallocated".
    assert!(
        d.message
            .contains("and 67.91 MiB is reserved by PyTorch but unallocated")
    );
    assert_eq!(
        cachalot_core::format_size(x.reserved_unallocated()),
        "67.91 MiB"
    );
    assert_eq!(x.reserved_unallocated(), x.free_cached + x.pending_free);
    assert_eq!(
        x.free_cached,
        x.other_pool + x.other_stream + x.too_small + x.refused_oversize + x.would_fit
    );
    assert_eq!((x.would_fit, x.refused_oversize, x.other_stream), (0, 0, 0));
    assert_eq!(x.other_pool, 483 * 1024);
    let large = x.free_by_stream.iter().find(|f| !f.is_small).unwrap();
    assert_eq!((large.largest, large.blocks), (8_585_216, 34));
    assert!(x.verdict().starts_with("fragmentation: 85.91 MiB was free"));
    // Each candidate replays the whole trace: at 5 GiB none avoids the failure.
    assert_eq!(d.candidates.len(), 6);
    assert!(best(&d.candidates).is_none());
    let exp = &d.candidates[0];
    assert_eq!(exp.option, "expandable_segments:True");
    assert_eq!(exp.first_oom_line, Some(506));
}

#[test]
fn a_snapshot_taken_at_the_oom_gives_the_same_reading() {
    let trace = common::load_trace("resnet50-train");
    let base = opts("", 5 << 30);
    let d = diagnose(&trace, &base).unwrap().unwrap();
    // What `cachalot replay --stop-at-oom --snapshot` writes, read back.
    let r = replay(
        &trace,
        &ReplayOptions {
            stop_at_first_oom: true,
            history_entries: Some(usize::MAX),
            snapshot_at_end: true,
            ..base.clone()
        },
    )
    .unwrap();
    let s = r.snapshot.unwrap();
    let bytes = to_pickle_bytes(&Snapshot::from_allocator(
        &s.segments,
        &s.trace,
        &base.conf,
        0,
    ));
    let snap = read_snapshot(&bytes).unwrap();
    let oom = snap.device_traces[0].entries.last().unwrap();
    assert_eq!(oom.action, TraceAction::Oom);
    let request = OomRequest {
        device: 0,
        rounded: oom.size,
        stream: oom.stream,
        device_free: oom.addr,
        // The entry's pool, as the replay's reading knows it from the core's report.
        pool: oom.pool,
    };
    assert_eq!(
        explain_oom(snap.device_segments(0), request, &base.conf),
        d.explanation
    );
}

#[test]
fn an_option_that_avoids_the_oom_is_found_and_verified() {
    // resnet50 on its tight capacity with max_split_size_mb:128 fails (golden: 6 OOMs); the
    // golden tight-expandable scenario shows expandable segments fit on that device.
    let trace = common::load_trace("resnet50-train");
    let (conf, capacity) = common::scenario("resnet50-train", "tight-max-split-128");
    let d = diagnose(&trace, &opts(&conf, capacity)).unwrap().unwrap();
    assert_eq!(d.line, 4069);
    let b = best(&d.candidates).unwrap();
    assert_eq!(b.option, "expandable_segments:True");
    let check = replay(
        &trace,
        &opts("max_split_size_mb:128,expandable_segments:True", capacity),
    )
    .unwrap();
    assert_eq!(check.ooms.count, 0);
    assert_eq!(
        check.stats.reserved_bytes.all().peak as u64,
        b.peak_reserved
    );
    let refused: Vec<&str> = d
        .candidates
        .iter()
        .filter(|c| !c.avoids_oom())
        .map(|c| c.option.as_str())
        .collect();
    assert_eq!(
        refused,
        ["max_split_size_mb:64", "roundup_power2_divisions:4"]
    );
}

#[test]
fn an_oversize_refusal_is_counted() {
    // One free 300 MiB block; max_split_size_mb:100; a 50 MiB request may not take it.
    let snap = read_snapshot(
        br#"{"segments": [{"device": 0, "address": 1048576, "total_size": 314572800, "stream": 0,
             "segment_type": "large", "blocks": [{"size": 314572800, "state": "inactive"}]}]}"#,
    )
    .unwrap();
    let (conf, _) = cachalot_core::config::parse_pytorch("max_split_size_mb:100").unwrap();
    let request = OomRequest {
        device: 0,
        rounded: 50 * MIB,
        stream: 0,
        device_free: 0,
        pool: None,
    };
    let x = explain_oom(&snap.segments, request, &conf);
    assert_eq!(x.refused_oversize, 300 * MIB);
    assert_eq!(x.releasable, 300 * MIB);
    assert!(
        x.verdict()
            .starts_with("max_split_size_mb refused 300.00 MiB")
    );
    // A 290 MiB request may (300 < 290 + 20), a 150 MiB one may not (300 >= 150 + 20).
    let fits = explain_oom(
        &snap.segments,
        OomRequest {
            rounded: 290 * MIB,
            ..request
        },
        &conf,
    );
    assert_eq!(fits.would_fit, 300 * MIB);
    let refused = explain_oom(
        &snap.segments,
        OomRequest {
            rounded: 150 * MIB,
            ..request
        },
        &conf,
    );
    assert_eq!(refused.refused_oversize, 300 * MIB);
}
