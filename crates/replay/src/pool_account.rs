//! How much of the memory each pool holds, and what `empty_cache` can and cannot give back:
//! at the peaks of reserved and allocated memory and at the end of a replay.
//!
//! Words used here and in the reports:
//!
//! - **pool**: the default pools (`(0, 0)`, small and large together) or one private pool (a
//!   CUDA graph's `(n, 0)`, a `MemPool`'s `(0, n)`);
//! - **live**: bytes of allocated blocks (`allocated_bytes`, the tensors);
//! - **free**: the rest of the pool's reserved bytes: cached blocks, and blocks freed under
//!   `record_stream` whose events have not completed yet (`empty_cache` waits for those
//!   events first, so they count as free);
//! - **releasable**: what `torch.cuda.empty_cache()` returns to the device now. It waits for
//!   every outstanding event, then frees the whole free segments of the default pools and of
//!   every *released* pool (use count 0), and unmaps the whole pages inside free ranges of
//!   expandable segments (torch's `release_cached_blocks`);
//! - **kept next to live blocks**: free bytes of those pools that share a segment (or, with
//!   expandable segments, a page) with a live block;
//! - **kept, pool referenced**: every free byte of a pool whose use count is above 0 (its
//!   `MemPool` object is alive, its graph not reset, or a `use_mem_pool` block is open):
//!   `empty_cache` leaves such a pool alone.
//!
//! [`account`] reads the allocator's segments and pools; nothing is released to find out.
//! A replay with [`ReplayOptions::pool_peaks`](crate::ReplayOptions::pool_peaks) finds where
//! the peaks are ([`PeakTracker`]), and [`pool_peaks`] replays the trace up to them to take
//! the accounts there.

use cachalot_core::{MempoolId, format_size};

pub use crate::accounts::{PeakTracker, PoolAccount, PoolShare, PoolStatus, PoolTracking, account};
use crate::engine::{ReplayError, ReplayOptions, ReplayReport, replay};
use crate::load::LoadedTrace;

/// The pools of a replay: their shares at the peak of reserved memory, at the peak of
/// allocated memory and at the end, and each pool's own peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolPeaks {
    /// At the first operation where reserved memory reached its peak.
    pub at_peak_reserved: PoolAccount,
    /// At the first operation where allocated memory reached its peak.
    pub at_peak_allocated: PoolAccount,
    /// Where the replay ended.
    pub at_end: PoolAccount,
    /// Each pool's own peak of reserved bytes over the run, in the order of `at_end.pools`
    /// (the default pools' from [`PeakTracker::default_reserved`], the private pools' from
    /// `reserved_bytes_by_private_pools`).
    pub own_peaks: Vec<(MempoolId, u64)>,
}

/// The pool accounts of `report`, a replay of `trace` under `opts` with
/// [`ReplayOptions::pool_peaks`] on: replays the trace up to its peaks once more to take the
/// accounts there. `None` when the trace names no pool, or the backend keeps none.
pub fn pool_peaks(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
    report: &ReplayReport,
) -> Result<Option<PoolPeaks>, ReplayError> {
    let Some(t) = &report.pool_tracking else {
        return Ok(None);
    };
    if trace.pools.is_empty() {
        return Ok(None);
    }
    let (Some(res_at), Some(alloc_at)) = (t.peaks.reserved.1, t.peaks.allocated.1) else {
        // Nothing was ever reserved: every point looks like the end.
        return Ok(Some(PoolPeaks {
            at_peak_reserved: t.end.clone(),
            at_peak_allocated: t.end.clone(),
            at_end: t.end.clone(),
            own_peaks: own_peaks(&t.end, report, t.peaks.default_reserved),
        }));
    };
    let mut at = vec![res_at, alloc_at];
    at.sort_unstable();
    at.dedup();
    let accounts = accounts_after(trace, opts, at);
    let find = |i: usize| accounts.iter().find(|a| a.op_index == i).cloned();
    let (Some(r), Some(a)) = (find(res_at), find(alloc_at)) else {
        return Ok(None);
    };
    Ok(Some(PoolPeaks {
        at_peak_reserved: r,
        at_peak_allocated: a,
        at_end: t.end.clone(),
        own_peaks: own_peaks(&t.end, report, t.peaks.default_reserved),
    }))
}

fn own_peaks(end: &PoolAccount, report: &ReplayReport, default_peak: i64) -> Vec<(MempoolId, u64)> {
    end.pools
        .iter()
        .map(|p| {
            let peak = if p.id.is_default() {
                default_peak
            } else {
                report
                    .stats
                    .reserved_bytes_by_private_pools
                    .iter()
                    .find(|(id, _)| *id == p.id)
                    .map_or(0, |(_, a)| a.all().peak)
            };
            (p.id, peak.max(0) as u64)
        })
        .collect()
}

/// Replays `trace` under `opts` with the pool accounts on, and takes the accounts at its
/// peaks: the report, and the accounts (`None` when the trace names no pool or the backend
/// keeps none).
pub fn replay_with_pools(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
) -> Result<(ReplayReport, Option<PoolPeaks>), ReplayError> {
    let opts = ReplayOptions {
        pool_peaks: !trace.pools.is_empty(),
        ..opts.clone()
    };
    let report = replay(trace, &opts)?;
    let peaks = pool_peaks(trace, &opts, &report)?;
    Ok((report, peaks))
}

/// `14.44 GiB`, or `0` for none.
fn bytes(n: u64) -> String {
    if n == 0 { "0".into() } else { format_size(n) }
}

/// One line per pool that holds memory: reserved, live, status.
fn shares_text(acc: &PoolAccount) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for s in &acc.pools {
        if s.reserved == 0 && !s.id.is_default() {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<22} {:>10} reserved, {:>10} live  ({})",
            s.name(),
            format_size(s.reserved),
            format_size(s.live),
            s.status.describe()
        );
    }
    out
}

/// The accounts after operations `at` (ascending) of `trace` under `opts`: one replay that
/// stops after the last of them, with nothing else recorded; those it does not get to (or
/// all, when the backend keeps no pools) are missing.
fn accounts_after(trace: &LoadedTrace, opts: &ReplayOptions, at: Vec<usize>) -> Vec<PoolAccount> {
    let prefix = ReplayOptions {
        accounts_at: at,
        pool_peaks: false,
        log_segments: false,
        history_entries: None,
        snapshot_at_end: false,
        empty_cache_at_end: false,
        sample_every: 0,
        max_oom_reports: 0,
        ..opts.clone()
    };
    match replay(trace, &prefix) {
        Ok(r) => r.accounts,
        Err(e) => e.report.map(|r| r.accounts).unwrap_or_default(),
    }
}

/// The account after operation `op_index` of `trace` replayed under `opts` (one replay up to
/// it); `None` when the replay does not get there or the backend keeps no pools.
pub fn account_at(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
    op_index: usize,
) -> Option<PoolAccount> {
    accounts_after(trace, opts, vec![op_index])
        .into_iter()
        .next()
}

/// Where the memory was right after an out-of-memory, for people: the out-of-memory retry
/// has already freed what `empty_cache` frees, so what is left is live, next to live blocks,
/// or held by referenced pools.
pub fn oom_account_text(acc: &PoolAccount) -> String {
    let mut out = format!(
        "pools after the first out-of-memory (line {}): {} reserved\n",
        acc.line,
        format_size(acc.reserved())
    );
    out.push_str(&shares_text(acc));
    out.push_str(&empty_cache_text("then", acc));
    out
}

/// Text for people: the accounts at the peaks and at the end, and each pool's own peak.
pub fn pool_peaks_text(p: &PoolPeaks) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (what, acc) in [
        ("peak reserved", &p.at_peak_reserved),
        ("peak allocated", &p.at_peak_allocated),
    ] {
        let total = if what == "peak reserved" {
            acc.reserved()
        } else {
            acc.live()
        };
        let _ = writeln!(
            out,
            "pools at {what} ({}, line {}):",
            format_size(total),
            acc.line
        );
        out.push_str(&shares_text(acc));
        let pct = |part: u64| 100.0 * part as f64 / total.max(1) as f64;
        for s in acc.private().filter(|s| s.reserved > 0) {
            let _ = if what == "peak reserved" {
                writeln!(
                    out,
                    "  of the {} {what}, {} ({:.0}%) was in {}; it held {} of live tensors then",
                    format_size(total),
                    format_size(s.reserved),
                    pct(s.reserved),
                    s.name(),
                    bytes(s.live)
                )
            } else {
                writeln!(
                    out,
                    "  of the {} {what}, {} ({:.0}%) was live in {}, which reserved {} then",
                    format_size(total),
                    bytes(s.live),
                    pct(s.live),
                    s.name(),
                    format_size(s.reserved)
                )
            };
        }
    }
    let peaks: Vec<String> = p
        .own_peaks
        .iter()
        .filter(|(id, b)| id.is_default() || *b > 0)
        .map(|(id, b)| {
            let name = p
                .at_end
                .pools
                .iter()
                .find(|s| s.id == *id)
                .map(PoolShare::name)
                .unwrap_or_default();
            format!("{name} {}", format_size(*b))
        })
        .collect();
    let _ = writeln!(out, "each pool's own peak reserved: {}", peaks.join(", "));
    for (what, acc) in [
        ("at peak reserved", &p.at_peak_reserved),
        ("at the end", &p.at_end),
    ] {
        out.push_str(&empty_cache_text(what, acc));
    }
    out
}

/// One line for a list of configurations: the private pools' share of the peak of reserved
/// memory, and what `empty_cache` gives back and keeps at the end.
pub fn pool_peaks_brief(p: &PoolPeaks) -> String {
    let acc = &p.at_peak_reserved;
    let pools: Vec<String> = acc
        .private()
        .filter(|s| s.reserved > 0)
        .map(|s| {
            format!(
                "{} {} ({} live)",
                s.name(),
                format_size(s.reserved),
                bytes(s.live)
            )
        })
        .collect();
    format!(
        "of {} peak reserved, {}; empty_cache() at the end gives back {}, keeps {} in pools \
         still referenced",
        format_size(acc.reserved()),
        if pools.is_empty() {
            "none in private pools".to_string()
        } else {
            pools.join(", ")
        },
        bytes(p.at_end.releasable()),
        bytes(p.at_end.kept_referenced())
    )
}

/// What `empty_cache` would give back and keep at one point, for people.
pub fn empty_cache_text(what: &str, acc: &PoolAccount) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let released: u64 = acc
        .private()
        .filter(|s| s.status == PoolStatus::Released)
        .map(|s| s.releasable)
        .sum();
    let default = acc.pools.first().map_or(0, |s| s.releasable);
    let _ = writeln!(
        out,
        "empty_cache() {what}: gives back {} ({} from the default pools, {} from released \
         pools); keeps {} reserved: {} live, {} free next to live blocks, {} in pools still \
         referenced",
        bytes(acc.releasable()),
        bytes(default),
        bytes(released),
        bytes(acc.reserved() - acc.releasable()),
        bytes(acc.live()),
        bytes(acc.kept_next_to_live()),
        bytes(acc.kept_referenced()),
    );
    for s in acc.private().filter(|s| s.kept_referenced > 0) {
        let _ = writeln!(
            out,
            "  {} keeps {} free ({}): it goes only after the pool is released (del the \
             MemPool / reset the graph) and then empty_cache()",
            s.name(),
            format_size(s.kept_referenced),
            s.status.describe()
        );
    }
    out
}

/// JSON for programs.
pub fn pool_peaks_json(p: &PoolPeaks) -> serde_json::Value {
    serde_json::json!({
        "at_peak_reserved": account_json(&p.at_peak_reserved),
        "at_peak_allocated": account_json(&p.at_peak_allocated),
        "at_end": account_json(&p.at_end),
        "own_peak_reserved": p.own_peaks.iter().map(|(id, b)| serde_json::json!({
            "mempool_id": [id.first, id.second],
            "peak_reserved": b,
        })).collect::<Vec<_>>(),
    })
}

/// One account as JSON.
pub fn account_json(a: &PoolAccount) -> serde_json::Value {
    serde_json::json!({
        "op_index": a.op_index,
        "trace_line": a.line,
        "reserved": a.reserved(),
        "live": a.live(),
        "empty_cache": {
            "releasable": a.releasable(),
            "kept_next_to_live": a.kept_next_to_live(),
            "kept_referenced": a.kept_referenced(),
        },
        "pools": a.pools.iter().map(|s| serde_json::json!({
            "mempool_id": [s.id.first, s.id.second],
            "kind": if s.id.is_default() { "default" } else if s.graph { "graph" } else { "mempool" },
            "status": s.status.name(),
            "use_count": s.status.use_count(),
            "segments": s.segments,
            "reserved": s.reserved,
            "live": s.live,
            "free": s.free(),
            "releasable": s.releasable,
            "kept_next_to_live": s.kept_next_to_live,
            "kept_referenced": s.kept_referenced,
        })).collect::<Vec<_>>(),
    })
}
