//! The pool accounts (`cachalot_replay::pool_account`) against what the allocator then does:
//! an `empty_cache` row after any point gives back exactly what the account at that point
//! says it can, pool by pool; the peaks are where the statistics reach them, and each pool's
//! share there is what the allocator's own per-pool numbers (`reserved_bytes_by_private_pools`,
//! `snapshot(pool)`) say. On the oracle's example traces with pool rows and on random ones.

#[path = "common/pool_traces.rs"]
mod pool_traces;

use std::collections::HashMap;
use std::ops::ControlFlow;

use cachalot_core::config::parse_pytorch;
use cachalot_core::{DeviceStats, MempoolId};
use cachalot_replay::pool_account::{PoolAccount, PoolStatus, replay_with_pools};
use cachalot_replay::{
    LoadedTrace, PoolOp, ReplayOptions, TraceOp, load_bytes, load_rmm, replay, replay_with_hook,
};
use cachalot_sim::SimConfig;
use cachalot_testkit::fixtures;
use pool_traces::random_pool_trace;

/// The trace where torch hands a forgotten pool's storage to a new pool: its per-pool
/// statistics then count bytes that sit in another pool (docs/pools.md), so only its totals
/// are compared.
const TAKEOVER: &str = "pool_storage_takeover";

const CONFS: [&str; 4] = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:64",
    "expandable_segments:True,max_split_size_mb:64",
];

fn options(conf: &str, capacity: u64) -> ReplayOptions {
    ReplayOptions {
        conf: parse_pytorch(conf).unwrap().0,
        sim: SimConfig::with_capacity(capacity),
        ..ReplayOptions::default()
    }
}

/// The traces: the oracle's examples with pool rows (as copied into the fixtures) and random
/// ones, each with the capacities to replay it at.
fn traces() -> Vec<(String, LoadedTrace, Vec<u64>)> {
    let mut out = Vec::new();
    let dir = fixtures().join("pools");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    names.sort();
    for p in names {
        if let Ok(t) = load_rmm(&p)
            && !t.pools.is_empty()
        {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            out.push((name, t, vec![80 << 30, 64 << 20]));
        }
    }
    for seed in 0..10u64 {
        let text = random_pool_trace(seed + 7_000, 250, 1 + seed % 3, false);
        let t = load_bytes(text.as_bytes()).unwrap();
        out.push((format!("random seed {seed}"), t, vec![80 << 30, 700 << 20]));
    }
    assert!(
        out.len() >= 20,
        "expected the pool fixtures and random traces"
    );
    out
}

/// `trace` up to operation `i`, then `empty_cache` of the whole cache.
fn prefix_then_empty_cache(trace: &LoadedTrace, i: usize) -> LoadedTrace {
    let mut t = trace.clone();
    t.ops.truncate(i + 1);
    let line = t.ops.last().map_or(0, TraceOp::line) + 1;
    t.ops.push(TraceOp::Pool {
        op: PoolOp::EmptyCache { pool: None },
        line,
    });
    t
}

fn private_current(s: &DeviceStats, id: MempoolId) -> i64 {
    s.reserved_bytes_by_private_pools
        .iter()
        .find(|(k, _)| *k == id)
        .map_or(0, |(_, a)| a.all().current)
}

/// The account after operation `i`, and the statistics then and after an `empty_cache` row
/// right after it; `None` when the replay stops with an error before.
fn around_empty_cache(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
    i: usize,
) -> Option<(PoolAccount, DeviceStats, DeviceStats)> {
    let t = prefix_then_empty_cache(trace, i);
    let before = replay(
        &t,
        &ReplayOptions {
            accounts_at: vec![i],
            ..opts.clone()
        },
    )
    .ok()?;
    let after = replay(&t, opts).ok()?;
    let account = before.accounts.into_iter().next()?;
    Some((account, before.stats, after.stats))
}

#[test]
fn an_empty_cache_row_gives_back_what_the_account_says() {
    let mut points = 0;
    let mut released_bytes = 0u64;
    let mut kept = (0u64, 0u64);
    for (name, trace, capacities) in traces() {
        for conf in CONFS {
            for &capacity in &capacities {
                let opts = options(conf, capacity);
                let step = (trace.ops.len() / 60).max(1);
                for i in (0..trace.ops.len()).step_by(step) {
                    let Some((acc, before, after)) = around_empty_cache(&trace, &opts, i) else {
                        continue;
                    };
                    let at = format!("{name}, '{conf}', {capacity} bytes, after op {i}");
                    let reserved = |s: &DeviceStats| s.reserved_bytes.all().current as u64;
                    assert_eq!(acc.reserved(), reserved(&before), "{at}: reserved");
                    assert_eq!(
                        acc.live(),
                        before.allocated_bytes.all().current as u64,
                        "{at}: live"
                    );
                    assert_eq!(
                        reserved(&before) - reserved(&after),
                        acc.releasable(),
                        "{at}: empty_cache gave back another amount than the account's {acc:#?}"
                    );
                    if name == TAKEOVER {
                        continue;
                    }
                    let mut private_freed = 0;
                    for s in acc.private() {
                        let freed = private_current(&before, s.id) - private_current(&after, s.id);
                        assert_eq!(freed, s.releasable as i64, "{at}: {} {s:?}", s.name());
                        assert_eq!(
                            s.reserved as i64,
                            private_current(&before, s.id),
                            "{at}: reserved of {}",
                            s.name()
                        );
                        if !s.status.releases() {
                            assert_eq!(s.releasable, 0, "{at}");
                        }
                        if s.status == PoolStatus::Released {
                            released_bytes += s.releasable;
                        }
                        private_freed += freed;
                    }
                    assert_eq!(
                        (reserved(&before) - reserved(&after)) as i64 - private_freed,
                        acc.pools[0].releasable as i64,
                        "{at}: the default pools"
                    );
                    assert_eq!(
                        acc.releasable() + acc.kept_next_to_live() + acc.kept_referenced(),
                        acc.reserved() - acc.live(),
                        "{at}"
                    );
                    kept.0 += acc.kept_next_to_live();
                    kept.1 += acc.kept_referenced();
                    points += 1;
                }
            }
        }
    }
    // The cases must reach every kind of byte, or the test shows nothing.
    assert!(points > 1000, "{points} points checked");
    assert!(released_bytes > 0, "no released pool gave anything back");
    assert!(
        kept.0 > 0 && kept.1 > 0,
        "kept bytes of both kinds: {kept:?}"
    );
}

/// After one operation: total reserved, allocated, and each private pool's reserved bytes.
type Point = (i64, i64, Vec<(MempoolId, i64)>);

/// A [`Point`] per operation.
fn timeline(trace: &LoadedTrace, opts: &ReplayOptions) -> Vec<Point> {
    let mut out = Vec::new();
    let mut hook = |p: &cachalot_replay::Progress<'_>| {
        let s = p.stats;
        while out.len() < p.op_index {
            // Operations the hook did not see (none with every = 1) repeat the last point.
            let last = out.last().cloned().unwrap_or((0, 0, Vec::new()));
            out.push(last);
        }
        out.push((
            s.reserved_bytes.all().current,
            s.allocated_bytes.all().current,
            s.reserved_bytes_by_private_pools
                .iter()
                .map(|(id, a)| (*id, a.all().current))
                .collect(),
        ));
        ControlFlow::Continue(())
    };
    let _ = replay_with_hook(trace, opts, 1, &mut hook);
    out
}

/// The live bytes of each private pool after operation `i`, found without the allocator's
/// segments: each allocation goes to the open pool begun last whose stream filter takes it
/// (torch's routing, as the oracle's README states it) and weighs what it added to
/// `allocated_bytes`; its free takes that off again.
fn live_by_pool(trace: &LoadedTrace, tl: &[Point], i: usize) -> HashMap<MempoolId, i64> {
    let id_of = |pool: u32| {
        let p = trace.pools[pool as usize];
        if p.graph {
            MempoolId::graph(p.number)
        } else {
            MempoolId::mempool(p.number)
        }
    };
    let mut open: Vec<(MempoolId, Option<u32>)> = Vec::new();
    let mut slots: HashMap<u32, (Option<MempoolId>, i64)> = HashMap::new();
    let mut live: HashMap<MempoolId, i64> = HashMap::new();
    for (k, op) in trace.ops.iter().enumerate().take(i + 1) {
        match *op {
            TraceOp::Alloc { slot, stream, .. } => {
                let before = if k == 0 { 0 } else { tl[k - 1].1 };
                let bytes = tl[k].1 - before;
                let pool = open
                    .iter()
                    .rev()
                    .find(|(_, f)| f.is_none_or(|s| s == stream))
                    .map(|(id, _)| *id);
                if let Some(id) = pool {
                    *live.entry(id).or_default() += bytes;
                }
                slots.insert(slot, (pool, bytes));
            }
            TraceOp::Free { slot, .. } => {
                if let Some((Some(id), bytes)) = slots.remove(&slot) {
                    *live.entry(id).or_default() -= bytes;
                }
            }
            TraceOp::Pool { op, .. } => match op {
                PoolOp::PoolBegin { pool, stream } | PoolOp::GraphBegin { pool, stream } => {
                    open.push((id_of(pool), stream))
                }
                PoolOp::PoolEnd { pool } | PoolOp::GraphEnd { pool } => {
                    open.retain(|(id, _)| *id != id_of(pool))
                }
                _ => {}
            },
        }
    }
    live
}

fn first_max(v: impl Iterator<Item = i64>) -> (i64, usize) {
    let mut best = (0, 0);
    for (i, x) in v.enumerate() {
        if x > best.0 {
            best = (x, i);
        }
    }
    best
}

#[test]
fn the_pools_at_the_peaks_are_what_the_allocator_reports_there() {
    let mut with_private = 0;
    for (name, trace, capacities) in traces() {
        for conf in CONFS {
            for &capacity in &capacities {
                let opts = options(conf, capacity);
                let Ok((report, Some(peaks))) = replay_with_pools(&trace, &opts) else {
                    continue;
                };
                let at = format!("{name}, '{conf}', {capacity} bytes");
                let tl = timeline(&trace, &opts);
                let (res, res_i) = first_max(tl.iter().map(|p| p.0));
                let (alloc, alloc_i) = first_max(tl.iter().map(|p| p.1));
                assert_eq!(res, report.stats.reserved_bytes.all().peak, "{at}");
                assert_eq!(alloc, report.stats.allocated_bytes.all().peak, "{at}");
                let pr = &peaks.at_peak_reserved;
                assert_eq!((pr.op_index, pr.reserved() as i64), (res_i, res), "{at}");
                let pa = &peaks.at_peak_allocated;
                assert_eq!((pa.op_index, pa.live() as i64), (alloc_i, alloc), "{at}");
                if name == TAKEOVER {
                    continue;
                }
                for (acc, i) in [(pr, res_i), (pa, alloc_i)] {
                    let live = live_by_pool(&trace, &tl, i);
                    for s in acc.private() {
                        let reserved = tl[i]
                            .2
                            .iter()
                            .find(|(id, _)| *id == s.id)
                            .map_or(0, |p| p.1);
                        assert_eq!(s.reserved as i64, reserved, "{at}: {}", s.name());
                        let want = live.get(&s.id).copied().unwrap_or(0);
                        assert_eq!(
                            s.live as i64,
                            want,
                            "{at}: live in {} after op {i}",
                            s.name()
                        );
                        with_private += usize::from(s.live > 0);
                    }
                    let default = tl[i].1 - live.values().sum::<i64>();
                    assert_eq!(
                        acc.pools[0].live as i64, default,
                        "{at}: live in the default pools"
                    );
                }
                // Each pool's own peak: the default pools' is the largest of total less
                // private; a private pool's, the largest of its reserved bytes.
                let default_peak = tl
                    .iter()
                    .map(|p| p.0 - p.2.iter().map(|q| q.1).sum::<i64>())
                    .max()
                    .unwrap_or(0);
                for (id, peak) in &peaks.own_peaks {
                    let want = if id.is_default() {
                        default_peak
                    } else {
                        tl.iter()
                            .filter_map(|p| p.2.iter().find(|q| q.0 == *id).map(|q| q.1))
                            .max()
                            .unwrap_or(0)
                    };
                    assert_eq!(*peak as i64, want.max(0), "{at}: own peak of {id}");
                }
            }
        }
    }
    assert!(
        with_private > 50,
        "{with_private} pool shares with live bytes checked"
    );
}

#[test]
fn traces_without_pools_have_no_pool_accounts() {
    let trace =
        cachalot_replay::load_path(&fixtures().join("traces").join("random-4streams.csv.gz"))
            .unwrap();
    assert!(trace.pools.is_empty());
    let (report, peaks) = replay_with_pools(&trace, &options("", 80 << 30)).unwrap();
    assert!(peaks.is_none());
    assert!(report.pool_tracking.is_none());
}
