//! Snapshots with private-pool segments, recorded by torch 2.15 on the fake GPU
//! (tests/fixtures/snapshots/pools, `scripts/fixtures/gen_pool_snapshots.py`): their allocations are
//! replayed into their pools, so the replay ends with the snapshot's memory in each pool and
//! overall, whole and cut into ring buffers.

use cachalot_core::{MempoolId, TraceAction};
use cachalot_replay::input::{WindowCheck, snapshot_input};
use cachalot_replay::{ReplayOptions, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{EventKind, EventOptions, Format, Snapshot, SnapshotError};

const FIXTURES: [&str; 4] = [
    "mempool-full",
    "mempool-ring",
    "mempool-expandable",
    "mempool-oom",
];

#[path = "common/snapshots.rs"]
mod snapshots;

use snapshots::ring;

fn read(name: &str) -> Snapshot {
    snapshots::read(&format!("snapshots/pools/{name}.pickle.gz"))
}

fn check(snap: &Snapshot) -> WindowCheck {
    snapshots::check(snap, 0)
}

/// The private pools with segments at the snapshot.
fn pools_of(snap: &Snapshot) -> Vec<MempoolId> {
    let mut p: Vec<MempoolId> = snap
        .segments
        .iter()
        .map(|s| s.pool)
        .filter(|p| !p.is_default())
        .collect();
    p.sort();
    p.dedup();
    p
}

#[test]
fn recorded_snapshots_end_in_their_state_in_every_pool() {
    for name in FIXTURES {
        let snap = read(name);
        let pools = pools_of(&snap);
        assert!(!pools.is_empty(), "{name}: no pool segments");
        let c = check(&snap);
        assert!(c.matches(), "{name}: {c}");
        let checked: Vec<MempoolId> = c.pools.iter().map(|p| p.pool).collect();
        assert_eq!(checked, pools, "{name}: {c}");
        assert!(c.pools.iter().all(|p| p.reserved.1 > 0), "{name}: {c}");
        assert!(c.peak_allocated >= c.allocated.1, "{name}: {c}");
        assert!(c.placed.1 >= c.allocated.1, "{name}: {c}");
        assert!(
            c.to_string().contains("private pool (0, 1): equal"),
            "{name}: {c}"
        );
    }
}

#[test]
fn the_pools_given_back_are_given_back_in_the_replay() {
    // mempool-full: the nested MemPool (0, 2) is deleted and the graph-kind pool (1, 0)
    // reset; the replay releases both and gives their segments back where torch did.
    let snap = read("mempool-full");
    let input = snapshot_input(&snap, 0, Format::Pickle, &EventOptions::WORKLOAD).unwrap();
    let events = input.snapshot_events().unwrap();
    let count = |kind: EventKind, pool: MempoolId| {
        events
            .events
            .iter()
            .filter(|e| e.kind == kind && e.pool == pool)
            .count()
    };
    for gone in [MempoolId::mempool(2), MempoolId::graph(1)] {
        assert_eq!(count(EventKind::PoolRelease, gone), 1, "{gone}");
        assert_eq!(count(EventKind::EmptyCache, gone), 1, "{gone}");
    }
    assert_eq!(count(EventKind::GraphBegin, MempoolId::graph(1)), 1);
    // The outer MemPool is still referenced at the snapshot: never released.
    assert_eq!(count(EventKind::PoolRelease, MempoolId::mempool(1)), 0);
    assert!(count(EventKind::PoolBegin, MempoolId::mempool(1)) >= 2);
    let r = replay(
        &input.trace,
        &ReplayOptions {
            sim: SimConfig::with_capacity(80 << 30),
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let report = |id: MempoolId| r.pools.iter().find(|p| p.id == id).unwrap();
    assert_eq!(report(MempoolId::mempool(1)).use_count, Some(1));
    for gone in [MempoolId::mempool(2), MempoolId::graph(1)] {
        let p = report(gone);
        assert_eq!(p.use_count, None, "{gone}: torch forgets a released pool");
        assert!(p.segments.is_empty());
        let r = p.reserved.unwrap();
        assert!(r.all().peak > 0 && r.all().current == 0, "{gone}");
    }
}

#[test]
fn ring_buffer_cuts_are_rebuilt_per_pool() {
    for name in ["mempool-full", "mempool-ring"] {
        let full = read(name);
        let n = full.device_traces[0].entries.len();
        for keep in [n / 10, n / 3, n / 2, n - 1] {
            let cut = ring(&full, keep);
            let c = check(&cut);
            assert!(c.matches(), "{name} keep {keep}: {c}");
            assert!(c.peak_allocated >= c.allocated.1, "{name} keep {keep}: {c}");
            let events =
                cachalot_torchfmt::replay_events_with(&cut, 0, &EventOptions::WORKLOAD).unwrap();
            if events.reconstructed > 0 {
                assert!(c.rebuilt.is_ok(), "{name} keep {keep}: {c}");
            }
        }
    }
}

#[test]
fn torchs_own_ring_buffer_starts_with_pool_blocks_live() {
    let snap = read("mempool-ring");
    let events = cachalot_torchfmt::replay_events(&snap, 0).unwrap();
    assert!(events.starts_mid_run());
    let c = check(&snap);
    assert!(c.rebuilt.is_ok() && c.matches(), "{c}");
    // Pools whose segments the window frees without having made them were live at its start.
    let freed_before_made = snap.device_traces[0]
        .entries
        .iter()
        .filter(|e| e.action == TraceAction::SegmentFree)
        .filter(|e| e.pool.is_some_and(|p| !p.is_default()))
        .count();
    assert!(freed_before_made >= 2, "{freed_before_made}");
}

#[test]
fn expandable_pool_segments_are_placed_not_rebuilt() {
    let full = read("mempool-expandable");
    let n = full.device_traces[0].entries.len();
    for keep in [n / 3, n / 2] {
        let c = check(&ring(&full, keep));
        let why = c.rebuilt.clone().unwrap_err();
        assert!(why.contains("expandable"), "{c}");
        assert!(c.requested_matches(), "{c}");
        for p in &c.pools {
            assert_eq!(p.requested.0, p.requested.1, "{c}");
        }
    }
}

#[test]
fn a_history_that_disagrees_with_the_segments_is_refused() {
    // The last allocation (12 MiB, live at the end in a default-pool segment) said to be in
    // the MemPool (0, 1).
    let mut snap = read("mempool-full");
    let entries = &mut snap.device_traces[0].entries;
    let last = entries
        .iter()
        .rposition(|e| e.action == TraceAction::Alloc)
        .unwrap();
    entries[last].pool = Some(MempoolId::mempool(1));
    let e = snapshot_input(&snap, 0, Format::Pickle, &EventOptions::WORKLOAD).unwrap_err();
    assert!(matches!(e, SnapshotError::Schema { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("device_traces[0][{last}].pool_id")) && msg.contains("(0, 1)"),
        "{msg}"
    );
}

#[test]
fn without_entry_pool_ids_the_segments_route_the_live_blocks() {
    // A snapshot from torch before 2.12 has segment_pool_id but no pool_id on entries: the
    // blocks live at the end go to their segment's pool.
    let mut snap = read("mempool-full");
    for e in &mut snap.device_traces[0].entries {
        e.pool = None;
    }
    let c = check(&snap);
    assert!(c.requested_matches() && c.allocated_matches(), "{c}");
    let outer = c
        .pools
        .iter()
        .find(|p| p.pool == MempoolId::mempool(1))
        .unwrap();
    assert_eq!(outer.allocated.0, outer.allocated.1, "{c}");
}

#[test]
fn an_out_of_memory_beside_a_pools_free_memory_is_explained_and_replayed() {
    // mempool-oom: a MemPool keeps 60 MiB of freed blocks; a 24 MiB default-pool request then
    // fails on a 200 MiB device with 10 MiB free. Only the pool's own requests can use its
    // blocks, so this is not the missed search of torch issue #189504.
    let snap = read("mempool-oom");
    let d = cachalot_replay::diagnose::explain_snapshot(&snap, 0, None, true).unwrap();
    let x = &d.explanation;
    const MIB: u64 = 1 << 20;
    assert_eq!(x.other_pools, 60 * MIB, "{x}");
    assert_eq!(x.would_fit, 0, "{x}");
    assert_eq!(x.releasable, 0, "{x}");
    assert!(x.verdict().starts_with("private pools: 60.00 MiB"), "{x}");
    assert!(
        x.to_string().contains("in other pools (not the request's)"),
        "{x}"
    );
    // Replayed at the recorded capacity with the pool's blocks in the pool, the request
    // fails again; in the default pools it would have reused them.
    let h = d.replay.as_ref().unwrap();
    assert_eq!(h.ooms, 1, "the replay fits where torch ran out of memory");
    let c = check(&snap);
    assert!(c.matches(), "{c}");
}
