//! Extreme values through every public library entry point (issue #28 item 7): traces and
//! snapshots with sizes and addresses near 2^64 and many huge requests go through loading,
//! replay, tune, compare, the capacity search, explain and convert, and each gives a result
//! or an error, never a panic (the test profile keeps overflow checks on, so a wrapping sum
//! is a panic here). Where a result comes back, it must be coherent: a minimum capacity
//! fits and holds the peak of live requests; a replay never reserves more than the device.

use cachalot_advisor::{
    CompareOptions, CostModel, TuneOptions, capacity, compare, fits, min_capacity, min_capacity_of,
    tune,
};
use cachalot_core::AllocConf;
use cachalot_replay::diagnose::explain_snapshot;
use cachalot_replay::input::{load_all_devices, read_snapshot_path};
use cachalot_replay::{LoadOptions, LoadedTrace, ReplayOptions, load_bytes, load_input, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{Snapshot, read_snapshot, to_pickle_bytes, write_rmm_csv};
use proptest::prelude::*;

/// The CSV of issue #28: two live allocations of 2^63 bytes, whose sum is 2^64.
const TWO_HALVES: &str = "Thread,Time,Action,Pointer,Size,Stream\n\
    0,1,allocate,0x1000,9223372036854775808,0\n\
    0,2,allocate,0x8000000000002000,9223372036854775808,0\n";

fn one_thread(capacity: u64) -> TuneOptions<'static> {
    TuneOptions {
        threads: Some(1),
        top: 3,
        ..TuneOptions::at(capacity)
    }
}

#[test]
fn two_allocations_of_half_the_address_space_are_a_result_not_a_panic() {
    let t = load_bytes(TWO_HALVES.as_bytes()).unwrap();
    // The peak of live requests is 2^64, past u64: it reads as "more than any device".
    assert_eq!(capacity::peak_live_requested(&t), u64::MAX);
    let conf = AllocConf::default();
    assert_eq!(min_capacity_of(&t, &conf).unwrap(), None);
    let r = tune(&t, &one_thread(80 << 30)).unwrap();
    assert_ne!(r.fit, cachalot_advisor::Fit::Fits, "{:?}", r.fit);
    // (Under `expandable_segments:True` reserving 2^63 bytes of address space fails: a
    // device error, as torch's; not what this test is about.)
    let c = compare(
        &t,
        &["max_split_size_mb:128".to_string()],
        &CompareOptions {
            capacity: 80 << 30,
            cost: CostModel::default(),
            threads: Some(1),
            min_capacity: true,
            progress: None,
            own: None,
            release: cachalot_core::config::TorchVersion::NEWEST,
        },
    )
    .unwrap();
    assert!(c.rows.iter().all(|r| r.min_capacity.is_none()));
    // The search replays `expandable_segments:True` too, whose 2^63-byte address
    // reservation is a device error: an error that names the row, or no capacity.
    match min_capacity(&t, &one_thread(0)) {
        Ok(m) => assert_eq!(m.capacity, None),
        Err(e) => assert!(e.to_string().contains("trace line 2"), "{e}"),
    }
}

/// Sizes: small, ordinary, near 2^63 and near 2^64.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..(4 << 20),
        1 => 0u64..(1 << 40),
        2 => (0u64..(64 << 20)).prop_map(|d| (1u64 << 63).wrapping_add(d).wrapping_sub(32 << 20)),
        3 => (0u64..(64 << 20)).prop_map(|d| u64::MAX - d),
        1 => any::<u64>(),
    ]
}

/// Pointers: a few small ids (so frees match), and values near 2^63 and 2^64.
fn ptr() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..6,
        1 => (0u64..4).prop_map(|d| u64::MAX - d),
        1 => (0u64..4).prop_map(|d| (1u64 << 63) + d),
        1 => any::<u64>(),
    ]
}

fn row() -> impl Strategy<Value = String> {
    let action = prop_oneof![
        5 => Just("allocate"),
        3 => Just("free"),
        1 => Just("record_stream"),
        1 => Just("empty_cache"),
    ];
    let stream = prop_oneof![3 => Just(0u64), 1 => 1u64..3, 1 => any::<u64>()];
    (action, ptr(), size(), stream).prop_map(|(a, p, s, st)| {
        if a == "empty_cache" {
            "1,0,empty_cache,,,".to_string()
        } else {
            format!("1,0,{a},{p:#x},{s},{st:#x}")
        }
    })
}

fn csv() -> impl Strategy<Value = String> {
    prop::collection::vec(row(), 1..10).prop_map(|rows| {
        let mut s = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
        for r in rows {
            s.push_str(&r);
            s.push('\n');
        }
        s
    })
}

fn capacity_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(80u64 << 30),
        Just(u64::MAX),
        (0u64..(64 << 20)).prop_map(|d| u64::MAX - d),
        any::<u64>().prop_map(|c| c.max(1)),
    ]
}

/// Every library entry over one loaded trace; panics only where a result is incoherent.
fn every_entry(t: &LoadedTrace, cap: u64, search: bool) {
    let conf = AllocConf::default();
    let r = replay(
        t,
        &ReplayOptions {
            conf: conf.clone(),
            sim: SimConfig::with_capacity(cap),
            ..ReplayOptions::default()
        },
    );
    if let Ok(r) = &r {
        let reserved = r.stats.reserved_bytes.all().peak.max(0) as u64;
        assert!(reserved <= cap, "reserved {reserved} on a device of {cap}");
    }
    let peak = capacity::peak_live_requested(t);
    let _ = capacity::proven_too_small(t);
    let _ = capacity::large_device(t);
    let _ = tune(t, &one_thread(cap));
    let _ = compare(
        t,
        &["roundup_power2_divisions:4".to_string()],
        &CompareOptions {
            capacity: cap,
            cost: CostModel::default(),
            threads: Some(1),
            min_capacity: search,
            progress: None,
            own: None,
            release: cachalot_core::config::TorchVersion::NEWEST,
        },
    );
    if search {
        if let Ok(Some(c)) = min_capacity_of(t, &conf) {
            assert!(
                c >= peak,
                "minimum capacity {c} below the peak request {peak}"
            );
            assert!(
                fits(t, &conf, c).unwrap(),
                "minimum capacity {c} does not fit"
            );
        }
        let _ = min_capacity(t, &one_thread(cap));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn extreme_csv_traces_never_panic(text in csv(), cap in capacity_value(), search in any::<bool>()) {
        if let Ok(t) = load_bytes(text.as_bytes()) {
            every_entry(&t, cap, search);
        }
    }
}

/// A small snapshot with history and an out-of-memory (one of torch's, cut down).
fn small_snapshot() -> Snapshot {
    static CACHE: std::sync::OnceLock<Snapshot> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(|| {
            let p = cachalot_testkit::fixture("pickle/resnet50-train.oom-5G.pickle.gz");
            let mut s = read_snapshot_path(&p).unwrap();
            s.segments.truncate(4);
            let entries = &mut s.device_traces[0].entries;
            let oom = entries
                .iter()
                .rposition(|e| e.action == cachalot_core::TraceAction::Oom)
                .unwrap();
            let keep: Vec<_> = entries[..60.min(entries.len())]
                .iter()
                .chain(std::iter::once(&entries[oom]))
                .copied()
                .collect();
            *entries = keep;
            s
        })
        .clone()
}

/// Which number of a snapshot to overwrite.
#[derive(Clone, Copy, Debug)]
enum Field {
    SegmentAddress,
    SegmentSize,
    SegmentRequested,
    BlockAddress,
    BlockSize,
    EntryAddress,
    EntrySize,
}

fn edit() -> impl Strategy<Value = (Field, usize, u64)> {
    let field = prop_oneof![
        Just(Field::SegmentAddress),
        Just(Field::SegmentSize),
        Just(Field::SegmentRequested),
        Just(Field::BlockAddress),
        Just(Field::BlockSize),
        Just(Field::EntryAddress),
        Just(Field::EntrySize),
    ];
    (field, any::<usize>(), prop_oneof![size(), ptr()])
}

fn apply(s: &mut Snapshot, (field, i, v): (Field, usize, u64)) {
    let nseg = s.segments.len();
    let entries = &mut s.device_traces[0].entries;
    let nent = entries.len();
    match field {
        Field::SegmentAddress => s.segments[i % nseg].address = v,
        Field::SegmentSize => s.segments[i % nseg].total_size = v,
        Field::SegmentRequested => s.segments[i % nseg].requested_size = v,
        Field::BlockAddress | Field::BlockSize => {
            let seg = &mut s.segments[i % nseg];
            let n = seg.blocks.len();
            if n > 0 {
                let b = &mut seg.blocks[(i / nseg) % n];
                if matches!(field, Field::BlockAddress) {
                    b.address = v;
                } else {
                    b.size = v;
                }
            }
        }
        Field::EntryAddress => entries[i % nent].addr = v,
        Field::EntrySize => entries[i % nent].size = v,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn extreme_snapshots_never_panic(edits in prop::collection::vec(edit(), 1..6), cap in capacity_value()) {
        let mut s = small_snapshot();
        for e in edits {
            apply(&mut s, e);
        }
        // A snapshot made in memory is not checked as a file read is: explain takes it too.
        let _ = explain_snapshot(&s, 0, None, true);
        let _ = explain_snapshot(&s, 0, Some(cap), false);
        // The reader reads back what was written; explain takes it as it is.
        let bytes = to_pickle_bytes(&s);
        let back = read_snapshot(&bytes).unwrap();
        let _ = explain_snapshot(&back, 0, None, false);
        let dir = cachalot_testkit::scratch();
        let path = dir.path().join("snapshot.pickle");
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = read_snapshot_path(&path) {
            // Refused as a workload: the error names the field.
            let e = e.to_string();
            prop_assert!(e.contains("snapshot field segments["), "{}", e);
            prop_assert!(e.contains("64-bit address space") || e.contains("add up past"), "{}", e);
            prop_assert!(load_input(&path, &LoadOptions::default()).is_err());
            return Ok(());
        }
        let _ = load_all_devices(&path);
        for opts in [LoadOptions::default(), LoadOptions::workload(None)] {
            if let Ok(input) = load_input(&path, &opts) {
                if let Some(events) = input.snapshot_events() {
                    let mut csv = Vec::new();
                    write_rmm_csv(&mut csv, &events.events).unwrap();
                    // The CSV we write reads back.
                    load_bytes(&csv).unwrap();
                }
                every_entry(&input.trace, cap, false);
            }
        }
    }
}
