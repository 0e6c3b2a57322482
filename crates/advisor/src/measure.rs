//! One replay of one configuration at one capacity, and the ranking of its result.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use cachalot_core::bounds::LimitFacts;
use cachalot_replay::{
    LoadedTrace, Progress, ReplayOptions, ReplayReport, TraceOp, replay, replay_with_hook,
};
use cachalot_sim::SimConfig;

use crate::cost::{CallCounts, CostModel};
use crate::space::Candidate;
use crate::{AdvisorError, Workload};

/// How often (in operations) a replay that may be cut short looks at its running numbers.
pub const CHECK_EVERY: usize = 512;

/// Estimated device-call times are compared in whole steps of this many µs (10 ms over the
/// whole run): within one step they are a tie, and lower peak reserved memory decides. The
/// estimate is rough (docs/advisor.md), and a few milliseconds over a run are not worth
/// hundreds of MiB of memory. Steps are counted from 0 (`floor(time / step)`), so that the
/// order stays transitive; two times closer than a step can still fall on either side of a
/// step boundary.
pub const COST_TIE_US: f64 = 10_000.0;

/// The step of an estimated device-call time ([`COST_TIE_US`]).
pub fn cost_step(cost_us: f64) -> u64 {
    (cost_us.max(0.0) / COST_TIE_US).floor() as u64
}

/// The ranking: fewer out-of-memory errors, then fewer retries, then less estimated
/// device-call time in steps of [`COST_TIE_US`], then lower peak reserved memory, then less
/// device-call time. Every component only grows during a replay, so a replay whose running
/// key already ranks below a finished one's can be stopped: it cannot end better.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankKey {
    /// Out-of-memory errors.
    pub ooms: u64,
    /// Retries (each a full synchronize and cache flush).
    pub retries: u64,
    /// Estimated device-call time, µs.
    pub cost_us: f64,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
}

impl RankKey {
    /// The ranking order (less is better).
    pub fn rank_cmp(&self, other: &RankKey) -> Ordering {
        self.ooms
            .cmp(&other.ooms)
            .then(self.retries.cmp(&other.retries))
            .then(cost_step(self.cost_us).cmp(&cost_step(other.cost_us)))
            .then(self.peak_reserved.cmp(&other.peak_reserved))
            .then(self.cost_us.total_cmp(&other.cost_us))
    }

    fn from_progress(p: &Progress<'_>, cost: &CostModel) -> RankKey {
        RankKey {
            ooms: p.ooms,
            retries: p.stats.num_alloc_retries.max(0) as u64,
            cost_us: cost.cost_us(&CallCounts::from_replay(p.stats, p.device)),
            peak_reserved: p.stats.reserved_bytes.all().peak.max(0) as u64,
        }
    }
}

/// What one complete replay at one capacity did.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// Device capacity, bytes.
    pub capacity: u64,
    /// Operations replayed.
    pub events: u64,
    /// Out-of-memory errors.
    pub ooms: u64,
    /// The trace line of the first one.
    pub first_oom_line: Option<u64>,
    /// Retries (`num_alloc_retries`).
    pub retries: u64,
    /// Device allocations (`num_device_alloc`: `cudaMalloc`s and expandable growths).
    pub device_allocs: u64,
    /// Device frees (`num_device_free`: `cudaFree`s and expandable shrinks).
    pub device_frees: u64,
    /// The device calls the cost is computed from.
    pub calls: CallCounts,
    /// Estimated device-call time, µs.
    pub cost_us: f64,
    /// Peak allocated bytes.
    pub peak_allocated: u64,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// Peak number of `cudaMalloc` segments.
    pub peak_segments: u64,
    /// Which part of the workload these numbers are from: the one that ranks worst (0 for
    /// a single trace).
    pub part: usize,
    /// How close the replays of every part came to the fraction limit and the garbage
    /// collection threshold (`None` for the direct backends), which can prove that another
    /// fraction or threshold replays alike ([`LimitFacts::alike`]).
    pub limits: Option<LimitFacts>,
}

impl Metrics {
    /// The ranking key.
    pub fn key(&self) -> RankKey {
        RankKey {
            ooms: self.ooms,
            retries: self.retries,
            cost_us: self.cost_us,
            peak_reserved: self.peak_reserved,
        }
    }

    /// Peak allocated / peak reserved (1 when nothing was reserved).
    pub fn utilization(&self) -> f64 {
        if self.peak_reserved == 0 {
            1.0
        } else {
            self.peak_allocated as f64 / self.peak_reserved as f64
        }
    }
}

/// A candidate with its complete replay.
#[derive(Clone, Debug)]
pub struct Evaluated {
    /// The configuration.
    pub candidate: Candidate,
    /// Its numbers.
    pub metrics: Metrics,
}

impl Evaluated {
    /// The total order of rankings: the key, then fewer keys set, then the string.
    pub fn order(&self, other: &Evaluated) -> Ordering {
        self.metrics
            .key()
            .rank_cmp(&other.metrics.key())
            .then_with(|| self.candidate.order_key().cmp(&other.candidate.order_key()))
    }
}

/// A replay that ran to the end, or was cut short because it could no longer win.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The replay ran to the end.
    Done(Metrics),
    /// It stopped at this operation: its running key already ranked below the threshold.
    Cut {
        /// Operation index where it stopped.
        at_op: usize,
    },
}

pub(crate) fn options(conf: &cachalot_core::AllocConf, capacity: u64) -> ReplayOptions {
    ReplayOptions {
        conf: conf.clone(),
        sim: SimConfig::with_capacity(capacity),
        max_oom_reports: 1,
        ..ReplayOptions::default()
    }
}

/// Replays `candidate` at `capacity` on every part of the workload; the outcome is that of
/// the part that ranks worst. `beaten` is asked, every [`CHECK_EVERY`] operations and at each
/// out-of-memory, whether the running key of the part being replayed, with the out-of-memory
/// errors and retries that its requests still ahead which no device of `capacity` serves
/// will add, already loses (then the worst part does too); if so the replay stops and the
/// outcome is [`Outcome::Cut`].
pub fn evaluate(
    w: &dyn Workload,
    candidate: &Candidate,
    capacity: u64,
    cost: &CostModel,
    beaten: Option<&(dyn Fn(&RankKey) -> bool + Sync)>,
) -> Result<Outcome, AdvisorError> {
    let mut worst: Option<Metrics> = None;
    let mut limits: Option<Option<LimitFacts>> = None;
    for (part, trace) in w.parts().iter().enumerate() {
        let mut m = match evaluate_part(trace, candidate, capacity, cost, beaten)? {
            Outcome::Done(m) => m,
            cut @ Outcome::Cut { .. } => return Ok(cut),
        };
        m.part = part;
        limits = Some(match (limits, m.limits) {
            (None, l) => l,
            (Some(Some(a)), Some(b)) => Some(a.merge(&b)),
            _ => None,
        });
        if worst
            .as_ref()
            .is_none_or(|w| m.key().rank_cmp(&w.key()) == Ordering::Greater)
        {
            worst = Some(m);
        }
    }
    match worst {
        Some(m) => Ok(Outcome::Done(Metrics {
            limits: limits.flatten(),
            ..m
        })),
        None => Err(AdvisorError::EmptyTrace("no trace to replay".into())),
    }
}

fn evaluate_part(
    trace: &LoadedTrace,
    candidate: &Candidate,
    capacity: u64,
    cost: &CostModel,
    beaten: Option<&(dyn Fn(&RankKey) -> bool + Sync)>,
) -> Result<Outcome, AdvisorError> {
    let opts = options(&candidate.conf, capacity);
    let report = match beaten {
        None => replay(trace, &opts)?,
        Some(beaten) => {
            let mut cut_at = None;
            let ahead = Doomed::of(trace, &candidate.conf, capacity);
            let mut hook = |p: &Progress<'_>| {
                if beaten(&ahead.after(p.op_index, RankKey::from_progress(p, cost))) {
                    cut_at = Some(p.op_index);
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            let r = replay_with_hook(trace, &opts, CHECK_EVERY, &mut hook)?;
            if let Some(at_op) = cut_at {
                return Ok(Outcome::Cut { at_op });
            }
            r
        }
    };
    Ok(Outcome::Done(metrics_of(&report, capacity, cost)))
}

/// The requests of a trace that no device of the capacity serves
/// ([`cachalot_core::bounds::doomed_request`]), with what they add for certain: each
/// operation index with the out-of-memory errors and retries counted up to and including it.
struct Doomed {
    at: Vec<(usize, u64, u64)>,
}

impl Doomed {
    fn of(trace: &LoadedTrace, conf: &cachalot_core::AllocConf, capacity: u64) -> Self {
        let (mut ooms, mut retries) = (0, 0);
        let at = trace
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match *op {
                TraceOp::Alloc { size, .. } => {
                    let d = cachalot_core::bounds::doomed_request(size, capacity, conf)?;
                    ooms += d.ooms;
                    retries += d.retries;
                    Some((i, ooms, retries))
                }
                _ => None,
            })
            .collect();
        Doomed { at }
    }

    /// `key`, the running key after operation `op_index`, with what the doomed requests after
    /// it will add: a lower bound of the key the replay ends with.
    fn after(&self, op_index: usize, mut key: RankKey) -> RankKey {
        let (Some(&(_, ooms, retries)), done) = (
            self.at.last(),
            self.at.partition_point(|&(i, ..)| i <= op_index),
        ) else {
            return key;
        };
        let (ooms_done, retries_done) = match done {
            0 => (0, 0),
            n => (self.at[n - 1].1, self.at[n - 1].2),
        };
        key.ooms += ooms - ooms_done;
        key.retries += retries - retries_done;
        key
    }
}

/// The numbers of a finished replay.
pub(crate) fn metrics_of(report: &ReplayReport, capacity: u64, cost: &CostModel) -> Metrics {
    let s = &report.stats;
    let calls = CallCounts::from_replay(s, &report.device);
    Metrics {
        capacity,
        events: report.events,
        ooms: report.ooms.count,
        first_oom_line: report.ooms.events.first().map(|e| e.line),
        retries: s.num_alloc_retries.max(0) as u64,
        device_allocs: s.num_device_alloc.max(0) as u64,
        device_frees: s.num_device_free.max(0) as u64,
        calls,
        cost_us: cost.cost_us(&calls),
        peak_allocated: s.allocated_bytes.all().peak.max(0) as u64,
        peak_reserved: s.reserved_bytes.all().peak.max(0) as u64,
        peak_segments: s.segment.all().peak.max(0) as u64,
        part: 0,
        limits: report.limits,
    }
}

/// Replays `candidate` at `capacity` to the end and returns its numbers.
pub fn measure(
    trace: &dyn Workload,
    candidate: &Candidate,
    capacity: u64,
    cost: &CostModel,
) -> Result<Metrics, AdvisorError> {
    match evaluate(trace, candidate, capacity, cost, None)? {
        Outcome::Done(m) => Ok(m),
        Outcome::Cut { .. } => unreachable!("a replay without a threshold is never cut"),
    }
}

/// Whether every part of the workload runs without out-of-memory at `capacity` (each replay
/// stops at its first one).
pub fn fits(
    w: &dyn Workload,
    conf: &cachalot_core::AllocConf,
    capacity: u64,
) -> Result<bool, AdvisorError> {
    let opts = ReplayOptions {
        stop_at_first_oom: true,
        max_oom_reports: 0,
        ..options(conf, capacity)
    };
    for trace in w.parts() {
        if replay(trace, &opts)?.ooms.count > 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cost_us: f64, peak_reserved: u64) -> RankKey {
        RankKey {
            ooms: 0,
            retries: 0,
            cost_us,
            peak_reserved,
        }
    }

    #[test]
    fn a_millisecond_of_device_calls_does_not_outrank_memory() {
        // 1 ms more of estimated device calls, 170 MiB less reserved: the memory wins.
        let fast = key(52_300.0, 4_000 << 20);
        let lean = key(53_300.0, 3_830 << 20);
        assert_eq!(lean.rank_cmp(&fast), Ordering::Less);
        // More than a step apart, the time decides.
        let slow = key(65_000.0, 3_830 << 20);
        assert_eq!(fast.rank_cmp(&slow), Ordering::Less);
        // Same step and same memory: the exact time breaks the tie.
        assert_eq!(key(52_300.0, 1).rank_cmp(&key(53_300.0, 1)), Ordering::Less);
        // OOMs and retries still come first.
        let retrying = RankKey {
            retries: 1,
            ..key(0.0, 0)
        };
        assert_eq!(slow.rank_cmp(&retrying), Ordering::Less);
    }

    /// gpt2-train with requests no device of `capacity` serves inserted every `every` rows.
    fn with_doomed(every: usize, capacity: u64) -> LoadedTrace {
        let p = cachalot_testkit::fixture("traces").join("gpt2-train.csv.gz");
        let csv = String::from_utf8(cachalot_testkit::gunzip(&p)).unwrap();
        let mut out = String::new();
        for (i, line) in csv.lines().enumerate() {
            out.push_str(line);
            out.push('\n');
            if i > 0 && i % every == 0 {
                out.push_str(&format!("1,0,allocate,0xd00{i:x},{},0\n", capacity + 1));
            }
        }
        cachalot_replay::load_bytes(out.as_bytes()).unwrap()
    }

    #[test]
    fn the_doomed_requests_ahead_bound_the_final_key() {
        let cost = CostModel::default();
        for (capacity, every) in [(4u64 << 30, 3000), (20 << 30, 997), (2 << 30, 5000)] {
            let trace = with_doomed(every, capacity);
            for conf in [
                "",
                "expandable_segments:True",
                "max_split_size_mb:128,roundup_power2_divisions:4",
                "garbage_collection_threshold:0.6,per_process_memory_fraction:0.95",
            ] {
                let c = Candidate::parse(conf).unwrap();
                let ahead = Doomed::of(&trace, &c.conf, capacity);
                let mut seen = Vec::new();
                let mut hook = |p: &Progress<'_>| {
                    seen.push(ahead.after(p.op_index, RankKey::from_progress(p, &cost)));
                    ControlFlow::Continue(())
                };
                let r =
                    replay_with_hook(&trace, &options(&c.conf, capacity), 64, &mut hook).unwrap();
                let end = metrics_of(&r, capacity, &cost).key();
                for k in &seen {
                    assert_ne!(k.rank_cmp(&end), Ordering::Greater, "{conf} at {capacity}");
                }
                // The bound is the doomed requests exactly where nothing else fails.
                let doomed = ahead.at.last().map_or(0, |a| a.1);
                assert!(doomed > 0);
                if r.ooms.count == doomed {
                    assert_eq!(seen[0].ooms, end.ooms, "{conf} at {capacity}");
                    assert_eq!(seen[0].retries, end.retries, "{conf} at {capacity}");
                }
            }
        }
    }

    #[test]
    fn steps_keep_the_order_transitive() {
        let ks: Vec<RankKey> = (0..60)
            .map(|i| key(i as f64 * 997.0, (i * 7919 % 61) as u64))
            .collect();
        for a in &ks {
            for b in &ks {
                for c in &ks {
                    if a.rank_cmp(b) != Ordering::Greater && b.rank_cmp(c) != Ordering::Greater {
                        assert_ne!(a.rank_cmp(c), Ordering::Greater);
                    }
                }
            }
        }
    }
}
