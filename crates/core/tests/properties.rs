//! Property tests: random operation sequences on the simulated device, with the invariant
//! checker run after every operation and a shadow model of what users hold.

use cachalot_core::{AllocConf, AllocError, CachingAllocator, StreamId};
use cachalot_sim::{SimConfig, SimDevice};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Malloc {
        size: u64,
        stream: u64,
    },
    Free {
        pick: usize,
    },
    RecordStream {
        pick: usize,
        stream: u64,
    },
    EmptyCache,
    /// Switch expandable segments on or off at runtime (torch's `_set_allocator_settings`).
    SetExpandable(bool),
    SetFraction(f64),
    ResetPeak,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=MIB,               // small pool
        3 => MIB + 1..10 * MIB,        // 20 MiB segments
        2 => 10 * MIB..120 * MIB,      // rounded to 2 MiB
        1 => Just(0u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (size(), 0u64..3).prop_map(|(size, stream)| Op::Malloc { size, stream }),
        8 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (any::<usize>(), 0u64..3).prop_map(|(pick, stream)| Op::RecordStream { pick, stream }),
        1 => Just(Op::EmptyCache),
        1 => any::<bool>().prop_map(Op::SetExpandable),
        1 => prop_oneof![Just(1.0), Just(0.5), Just(0.9)].prop_map(Op::SetFraction),
        1 => Just(Op::ResetPeak),
    ]
}

fn conf() -> impl Strategy<Value = AllocConf> {
    (
        prop_oneof![Just(u64::MAX), Just(20 * MIB), Just(64 * MIB)],
        prop_oneof![Just([0u64; 16]), Just([4u64; 16])],
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.6)],
        any::<bool>(),
    )
        .prop_map(|(max_split, div, expandable, gc, exempt)| {
            let mut c = AllocConf {
                max_split_size: max_split,
                roundup_power2_divisions: div,
                expandable_segments: expandable,
                garbage_collection_threshold: gc,
                per_process_memory_fraction: if gc > 0.0 { 0.8 } else { 1.0 },
                ..AllocConf::default()
            };
            c.cachalot.expandable_oversize_exempt = exempt;
            c
        })
}

/// What the user holds: (address, requested size).
struct Shadow {
    live: Vec<(u64, u64)>,
}

impl Shadow {
    fn check_disjoint(&self) -> Result<(), String> {
        let mut v = self.live.clone();
        v.sort();
        for w in v.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("allocations overlap: {:x?} and {:x?}", w[0], w[1]));
            }
        }
        Ok(())
    }
}

fn run(
    conf: AllocConf,
    capacity: u64,
    event_delay: u32,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let sim = SimDevice::new(SimConfig {
        event_delay,
        ..SimConfig::with_capacity(capacity)
    });
    let alloc = CachingAllocator::new(conf.clone(), sim).unwrap();
    let mut shadow = Shadow { live: Vec::new() };
    for op in ops {
        match op {
            Op::Malloc { size, stream } => match alloc.malloc(size, StreamId(stream)) {
                Ok(0) => prop_assert_eq!(size, 0),
                Ok(p) => shadow.live.push((p, size)),
                Err(AllocError::OutOfMemory(r)) => {
                    prop_assert_eq!(r.requested, size);
                    prop_assert!(r.device_free <= r.device_total);
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            },
            Op::Free { pick } if !shadow.live.is_empty() => {
                let (p, _) = shadow.live.swap_remove(pick % shadow.live.len());
                alloc.free(p).unwrap();
                // A second free of the same address is refused and changes nothing.
                let before = alloc.stats();
                let second = matches!(alloc.free(p), Err(AllocError::InvalidPointer { .. }));
                prop_assert!(second, "double free must be refused");
                prop_assert_eq!(before, alloc.stats());
            }
            Op::RecordStream { pick, stream } if !shadow.live.is_empty() => {
                let (p, _) = shadow.live[pick % shadow.live.len()];
                alloc.record_stream(p, StreamId(stream)).unwrap();
            }
            Op::Free { .. } | Op::RecordStream { .. } => {}
            Op::EmptyCache => alloc.empty_cache().unwrap(),
            Op::SetExpandable(on) => {
                let mut c = alloc.config();
                c.expandable_segments = on;
                alloc.set_config(c);
            }
            Op::SetFraction(f) => alloc.set_memory_fraction(f).unwrap(),
            Op::ResetPeak => alloc.reset_peak_stats(),
        }
        alloc
            .check_invariants()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        shadow.check_disjoint().map_err(TestCaseError::fail)?;
        let s = alloc.stats();
        prop_assert_eq!(s.allocation.all().current as usize, shadow.live.len());
        let requested: u64 = shadow.live.iter().map(|&(_, n)| n).sum();
        prop_assert!(s.allocated_bytes.all().current as u64 >= requested);
        prop_assert!(s.reserved_bytes.all().current >= s.allocated_bytes.all().current);
        prop_assert!(s.reserved_bytes.all().peak >= s.reserved_bytes.all().current);
        let (reserved, limit) = alloc.reserved_and_limit();
        prop_assert_eq!(reserved as i64, s.reserved_bytes.all().current);
        let phys = alloc.with_device(|d| d.phys_used());
        prop_assert_eq!(phys, reserved, "device charge equals reserved bytes");
        if let Some(limit) = limit {
            // The limit is only checked when memory is obtained; lowering it later can leave
            // more reserved than allowed, but never more than the device holds.
            prop_assert!(limit <= capacity);
        }
    }
    // Give everything back: nothing may be lost.
    for (p, _) in shadow.live.drain(..) {
        alloc.free(p).unwrap();
    }
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    prop_assert_eq!(s.allocated_bytes.all().current, 0);
    prop_assert_eq!(s.active.all().current, 0);
    prop_assert_eq!(
        s.reserved_bytes.all().current,
        0,
        "empty_cache after freeing everything releases every byte"
    );
    prop_assert_eq!(alloc.with_device(|d| d.phys_used()), 0);
    alloc
        .check_invariants()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_every_invariant(
        conf in conf(),
        capacity in prop_oneof![Just(96 * MIB), Just(512 * MIB), Just(4096 * MIB)],
        event_delay in 0u32..3,
        ops in prop::collection::vec(op(), 1..250),
    ) {
        run(conf, capacity, event_delay, ops)?;
    }
}

#[test]
fn bad_inputs_get_errors_and_leave_the_allocator_consistent() {
    let alloc =
        CachingAllocator::new(AllocConf::default(), SimDevice::new(SimConfig::default())).unwrap();
    let p = alloc.malloc(1000, StreamId(0)).unwrap();
    assert_eq!(
        alloc.malloc(0, StreamId(0)).unwrap(),
        0,
        "zero bytes: no pointer"
    );
    assert!(matches!(
        alloc.free(p + 512),
        Err(AllocError::InvalidPointer { .. })
    ));
    assert!(matches!(
        alloc.record_stream(12345, StreamId(1)),
        Err(AllocError::InvalidPointer { .. })
    ));
    // Sizes whose rounding overflows 64 bits (torch 2.15 wraps around there): a counted
    // out-of-memory in torch's words, and nothing touched.
    for huge in [u64::MAX, u64::MAX - 1, u64::MAX - 511] {
        let e = alloc.malloc(huge, StreamId(0)).unwrap_err();
        let AllocError::OutOfMemory(r) = &e else {
            panic!("{e}")
        };
        assert_eq!(r.cause, cachalot_core::OomCause::SizeOverflow);
        assert!(
            e.to_string()
                .starts_with("CUDA out of memory. Tried to allocate 17179869184.00 GiB."),
            "{e}"
        );
    }
    // 1 EiB is representable: it is an ordinary out-of-memory, with torch's text.
    let e = alloc.malloc(1 << 60, StreamId(0)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("CUDA out of memory. Tried to allocate 1073741824.00 GiB."),
        "{e}"
    );
    let s = alloc.stats();
    assert_eq!(s.allocation.all().current, 1);
    assert_eq!(s.num_ooms, 4);
    alloc.free(p).unwrap();
    alloc.check_invariants().unwrap();
}

#[test]
fn worked_examples_of_the_spec() {
    // (request, block size handed out, segment size) on an empty cache, default config.
    let cases = [
        (1, 512, 2 * MIB),
        (1000, 1024, 2 * MIB),
        (MIB, MIB, 2 * MIB),
        (MIB + 1, MIB + 512, 20 * MIB),
        (3 * MIB, 3 * MIB, 20 * MIB),
        (12 * MIB, 12 * MIB, 12 * MIB),
        (13 * MIB + 1, 14 * MIB, 14 * MIB),
    ];
    for (req, block, segment) in cases {
        let alloc =
            CachingAllocator::new(AllocConf::default(), SimDevice::new(SimConfig::default()))
                .unwrap();
        alloc.malloc(req, StreamId(0)).unwrap();
        let s = alloc.stats();
        assert_eq!(
            s.allocated_bytes.all().current as u64,
            block,
            "request {req}"
        );
        assert_eq!(
            s.reserved_bytes.all().current as u64,
            segment,
            "request {req}"
        );
        assert_eq!(s.requested_bytes.all().current as u64, req);
    }
}

#[test]
fn free_then_empty_cache_follows_the_stats_of_the_spec() {
    let alloc =
        CachingAllocator::new(AllocConf::default(), SimDevice::new(SimConfig::default())).unwrap();
    alloc.record_history(Some(100));
    let x = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    let s = alloc.stats();
    assert_eq!(
        (s.segment.all().current, s.inactive_split.all().current),
        (1, 1)
    );
    assert_eq!(s.inactive_split_bytes.all().current as u64, 17 * MIB);
    alloc.free(x).unwrap();
    let s = alloc.stats();
    assert_eq!(
        (
            s.inactive_split.all().current,
            s.reserved_bytes.all().current as u64
        ),
        (0, 20 * MIB)
    );
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!(
        (
            s.num_sync_all_streams,
            s.num_device_free,
            s.segment.all().current
        ),
        (1, 1, 0)
    );
    let actions: Vec<&str> = alloc.history().iter().map(|e| e.action.name()).collect();
    assert_eq!(
        actions,
        [
            "segment_alloc",
            "alloc",
            "free_requested",
            "free_completed",
            "segment_free"
        ]
    );
}

#[test]
fn record_stream_delays_reuse_until_the_event_completes() {
    let sim = SimDevice::new(SimConfig {
        event_delay: 1,
        ..SimConfig::default()
    });
    let alloc = CachingAllocator::new(AllocConf::default(), sim).unwrap();
    let a = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    alloc.record_stream(a, StreamId(7)).unwrap();
    alloc.free(a).unwrap();
    let s = alloc.stats();
    assert_eq!(s.allocation.all().current, 0, "allocation drops at free");
    assert_eq!(
        s.active.all().current,
        1,
        "still active while the event is pending"
    );
    // The pending block cannot be reused: the next request carves a different block.
    let b = alloc.malloc(3 * MIB, StreamId(0)).unwrap();
    assert_ne!(a, b);
    // Each malloc polls the event once; on the second poll it has completed.
    let c = alloc.malloc(512, StreamId(0)).unwrap();
    let s = alloc.stats();
    assert_eq!(
        s.active.all().current,
        2,
        "the pending block went back to the pool"
    );
    alloc.free(b).unwrap();
    alloc.free(c).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
}

#[test]
fn spurious_oom_after_flush_is_torchs_and_research_after_flush_fixes_it() {
    // One 20 MiB segment on a 20 MiB device: a | b | c | rest, 5 MiB each. `b` is freed while
    // another stream still uses it (pending event); `c` is freed and merges with `rest`. A
    // 12 MiB request misses the cache (10 MiB free), the device is full, and the last-resort
    // flush synchronizes the event: `b` merges into a 15 MiB free block that `a` keeps
    // non-releasable. torch then retries only the device, not the pool, and raises OOM.
    let scenario = |research: bool| {
        let sim = SimDevice::new(SimConfig {
            event_delay: 100,
            ..SimConfig::with_capacity(20 * MIB)
        });
        let mut conf = AllocConf::default();
        conf.cachalot.research_after_flush = research;
        let alloc = CachingAllocator::new(conf, sim).unwrap();
        let _a = alloc.malloc(5 * MIB, StreamId(0)).unwrap();
        let b = alloc.malloc(5 * MIB, StreamId(0)).unwrap();
        let c = alloc.malloc(5 * MIB, StreamId(0)).unwrap();
        alloc.record_stream(b, StreamId(3)).unwrap();
        alloc.free(b).unwrap();
        alloc.free(c).unwrap();
        let r = alloc.malloc(12 * MIB, StreamId(0));
        (r, alloc.stats())
    };
    let (torch, stats) = scenario(false);
    assert!(
        matches!(torch, Err(AllocError::OutOfMemory(_))),
        "{torch:?}"
    );
    assert_eq!(
        (
            stats.num_alloc_retries,
            stats.num_ooms,
            stats.num_sync_all_streams
        ),
        (1, 1, 1)
    );
    let (fixed, stats) = scenario(true);
    assert!(fixed.is_ok(), "{fixed:?}");
    assert_eq!((stats.num_ooms, stats.num_device_alloc), (0, 1));
}

#[test]
fn threads_share_one_allocator_safely() {
    use std::sync::Arc;
    let alloc = Arc::new(
        CachingAllocator::new(
            AllocConf::default(),
            SimDevice::new(SimConfig::with_capacity(32 << 30)),
        )
        .unwrap(),
    );
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let alloc = Arc::clone(&alloc);
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..1500u64 {
                    let size = 1 + (i * 7919 + t * 104_729) % (3 * MIB);
                    live.push(alloc.malloc(size, StreamId(t % 2)).unwrap());
                    if i % 3 == 2 {
                        let p = live.swap_remove((i as usize * 31) % live.len());
                        alloc.free(p).unwrap();
                    }
                }
                live
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no address handed out twice");
    alloc.check_invariants().unwrap();
    assert_eq!(alloc.stats().allocation.all().current as usize, n);
    for p in all {
        alloc.free(p).unwrap();
    }
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
}

#[test]
fn a_failed_page_map_unwinds_and_the_retry_ladder_goes_on() {
    use cachalot_sim::Op;
    // 70 MiB device, 20 MiB pages: 30 MiB maps two pages (40 MiB), leaving 10 MiB free at
    // the end. A 35 MiB request needs two more pages; the first is created (60 MiB), the
    // second does not fit.
    let mut sim = SimDevice::new(SimConfig::with_capacity(70 * MIB));
    sim.enable_log();
    let conf = AllocConf {
        expandable_segments: true,
        ..AllocConf::default()
    };
    let alloc = CachingAllocator::new(conf, sim).unwrap();
    let _a = alloc.malloc(30 * MIB, StreamId(0)).unwrap();
    let before = alloc.stats();
    let e = alloc.malloc(35 * MIB, StreamId(0)).unwrap_err();
    assert!(matches!(e, AllocError::OutOfMemory(_)));
    alloc.check_invariants().unwrap();
    let after = alloc.stats();
    assert_eq!(
        after.reserved_bytes, before.reserved_bytes,
        "nothing half-mapped"
    );
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    assert_eq!((after.num_alloc_retries, after.num_ooms), (1, 1));
    assert_eq!(alloc.with_device(|d| d.phys_used()), 40 * MIB);
    let log = alloc.with_device(|d| d.take_log());
    let ops: Vec<(Op, u32)> = log.iter().skip(5).map(|e| (e.op, e.result)).collect();
    // First attempt: create ok, create fails, release the one created; the retry after the
    // flush does the same.
    let attempt = [(Op::MemCreate, 0), (Op::MemCreate, 2), (Op::MemRelease, 0)];
    assert_eq!(ops, [attempt, attempt].concat());
}

#[test]
fn no_manifest_turns_the_invariant_checker_on_for_everyone() {
    // `cargo test --workspace` unifies features: one crate enabling `check-invariants` would
    // run the O(n) checker after every operation of every replay in every test (minutes).
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for entry in std::fs::read_dir(&crates).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let offending = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.contains("cachalot-core") && l.contains("check-invariants"));
        assert!(
            !offending,
            "{} enables check-invariants on cachalot-core",
            manifest.display()
        );
    }
}
