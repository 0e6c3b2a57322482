//! Any snapshot written as a pickle reads back as the same snapshot (the property the fuzz
//! target checks on fuzzed input), including numbers at the edges of each pickle integer
//! form and long strings.

use cachalot_core::{BlockState, MempoolId, TraceAction};
use cachalot_torchfmt::{
    AllocatorSettings, Block, DeviceTrace, Segment, Snapshot, TraceEvent, read_snapshot,
    to_pickle_bytes,
};
use proptest::prelude::*;

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(255),
        Just(256),
        Just(65535),
        Just(65536),
        Just(i32::MAX as u64),
        Just(1 << 31),
        Just(1 << 44),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn block() -> impl Strategy<Value = Block> {
    (edge_u64(), edge_u64(), edge_u64(), 0..3u8).prop_map(|(address, size, requested_size, s)| {
        Block {
            address,
            size,
            requested_size,
            state: [
                BlockState::ActiveAllocated,
                BlockState::ActivePendingFree,
                BlockState::Inactive,
            ][s as usize],
        }
    })
}

fn segment() -> impl Strategy<Value = Segment> {
    (
        (
            0u32..4,
            edge_u64(),
            edge_u64(),
            edge_u64(),
            edge_u64(),
            edge_u64(),
        ),
        (edge_u64(), any::<bool>(), any::<bool>(), pool()),
        proptest::collection::vec(block(), 0..4),
    )
        .prop_map(
            |(
                (device, address, total_size, a, b, c),
                (stream, is_small, is_expandable, pool),
                blocks,
            )| {
                Segment {
                    device,
                    address,
                    total_size,
                    allocated_size: a,
                    active_size: b,
                    requested_size: c,
                    stream,
                    is_small,
                    is_expandable,
                    pool,
                    blocks,
                }
            },
        )
}

/// A pool id torch makes: the default pools, a graph's `(n, 0)`, a MemPool's `(0, n)`.
fn pool() -> impl Strategy<Value = MempoolId> {
    (0..3u8, edge_u64().prop_filter("not 0", |&n| n != 0)).prop_map(|(kind, n)| match kind {
        0 => MempoolId::DEFAULT,
        1 => MempoolId::graph(n),
        _ => MempoolId::mempool(n),
    })
}

fn entry() -> impl Strategy<Value = TraceEvent> {
    (
        0..9u8,
        edge_u64(),
        edge_u64(),
        edge_u64(),
        proptest::option::of(any::<i64>()),
        proptest::option::of(pool()),
    )
        .prop_map(|(a, addr, size, stream, time_us, pool)| TraceEvent {
            action: [
                TraceAction::Alloc,
                TraceAction::FreeRequested,
                TraceAction::FreeCompleted,
                TraceAction::SegmentAlloc,
                TraceAction::SegmentFree,
                TraceAction::SegmentMap,
                TraceAction::SegmentUnmap,
                TraceAction::Snapshot,
                TraceAction::Oom,
            ][a as usize],
            addr,
            size,
            stream,
            time_us,
            pool,
        })
}

fn settings() -> impl Strategy<Value = AllocatorSettings> {
    (
        ".{0,300}",
        any::<i64>(),
        -1e9f64..1e9,
        any::<bool>(),
        any::<[u64; 16]>(),
    )
        .prop_map(
            |(alloc_conf, max_split_size, gc, expandable_segments, divisions)| AllocatorSettings {
                alloc_conf,
                max_split_size,
                garbage_collection_threshold: gc,
                expandable_segments,
                roundup_power2_divisions: divisions.map(|d| d >> 1),
                ..AllocatorSettings::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn written_snapshots_read_back_equal(
        segments in proptest::collection::vec(segment(), 0..6),
        traces in proptest::collection::vec(proptest::collection::vec(entry(), 0..30), 0..3),
        settings in proptest::option::of(settings()),
    ) {
        let snap = Snapshot {
            segments,
            device_traces: traces
                .into_iter()
                .map(|entries| DeviceTrace { entries, skipped: Vec::new() })
                .collect(),
            allocator_settings: settings,
        };
        let back = read_snapshot(&to_pickle_bytes(&snap)).unwrap();
        prop_assert_eq!(back, snap);
    }
}

#[test]
fn a_long_history_spans_many_frames() {
    // Many 64 KiB frames, and a settings string over 255 bytes (BINUNICODE).
    let snap = Snapshot {
        segments: Vec::new(),
        device_traces: vec![DeviceTrace {
            entries: (0..20_000u64)
                .map(|i| TraceEvent {
                    action: TraceAction::Alloc,
                    addr: i << 20,
                    size: i,
                    stream: 0,
                    time_us: Some(i as i64),
                    pool: None,
                })
                .collect(),
            skipped: Vec::new(),
        }],
        allocator_settings: Some(AllocatorSettings {
            alloc_conf: "x".repeat(1000),
            ..AllocatorSettings::default()
        }),
    };
    let bytes = to_pickle_bytes(&snap);
    assert!(bytes.len() > 400_000);
    assert_eq!(read_snapshot(&bytes).unwrap(), snap);
}
