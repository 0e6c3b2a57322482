//! The smallest device a workload fits on.
//!
//! For one configuration ([`min_capacity_of`]): the 64 MiB multiple `c` found by bisection
//! between a capacity proven too small and one verified to fit, such that the replay at `c`
//! has no out-of-memory and the replay at `c − 64 MiB` has one (replayed, or proven because
//! `c − 64 MiB` is below the trace's peak of live requested bytes, which any device must hold).
//! The upper end is found by replaying on a device large enough for anything the trace asks
//! for (80 GiB, or four times the peak request if more) and taking the peak device memory
//! charged, divided by the memory fraction if one is set; it is replayed to confirm it fits,
//! and doubled (up to that large device) if it does not.
//!
//! For a search ([`min_capacity`]): the same per configuration, over the search space of
//! [`crate::space`]; candidates after the default are first replayed at the best capacity
//! found so far minus 64 MiB, and bisected only if they fit there (otherwise they cannot
//! beat it). The answer is the smallest capacity found, then a full [`crate::tune()`] at that
//! capacity picks the configuration to use there.

use cachalot_core::AllocConf;
use cachalot_replay::{LoadedTrace, TraceOp, replay};
use rayon::prelude::*;

use crate::measure::{fits, options};
use crate::search::{Tick, TuneOptions, TuneResult, explore, tune_with_seeds};
use crate::space::{Candidate, SearchSpace, Settings};
use crate::{AdvisorError, Workload, check_trace, with_pool};

/// The capacity grid: 64 MiB.
pub const STEP: u64 = 64 << 20;

/// The most bytes live at once in any part of the workload, as requested (unrounded),
/// ignoring out-of-memory: no device smaller than this can run it without one.
pub fn peak_live_requested(w: &dyn Workload) -> u64 {
    w.parts()
        .iter()
        .map(LoadedTrace::peak_live_requested)
        .max()
        .unwrap_or(0)
}

/// The largest multiple of [`STEP`] below the peak live request: proven too small.
pub fn proven_too_small(trace: &dyn Workload) -> u64 {
    peak_live_requested(trace).saturating_sub(1) / STEP * STEP
}

/// The device used to find an upper bound: 80 GiB, or four times the peak request.
pub fn large_device(trace: &dyn Workload) -> u64 {
    let four = peak_live_requested(trace).saturating_mul(4);
    (80u64 << 30).max(four.div_ceil(STEP).saturating_mul(STEP))
}

fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(STEP).saturating_mul(STEP).max(STEP)
}

/// A capacity on the grid verified to fit, or `None` if the trace does not fit even on
/// [`large_device`].
pub fn verified_upper_bound(
    trace: &dyn Workload,
    conf: &AllocConf,
) -> Result<Option<u64>, AdvisorError> {
    let big = large_device(trace);
    let mut charged = 0;
    for part in trace.parts() {
        let r = replay(part, &options(conf, big))?;
        if r.ooms.count > 0 {
            return Ok(None);
        }
        charged = charged.max(
            r.device
                .phys_peak
                .max(r.stats.reserved_bytes.all().peak.max(0) as u64),
        );
    }
    let fraction = conf
        .per_process_memory_fraction
        .clamp(f64::MIN_POSITIVE, 1.0);
    let mut hi = round_up((charged as f64 / fraction).ceil() as u64).min(big);
    while hi < big {
        if fits(trace, conf, hi)? {
            return Ok(Some(hi));
        }
        hi = round_up(hi.saturating_mul(2)).min(big);
    }
    Ok(Some(big))
}

/// What every device that runs the workload under one configuration without out-of-memory
/// must hold, so that a smaller one is known not to fit without a replay.
///
/// Each block handed out is at least the request rounded (`round_size`), so at the moment
/// the rounded sizes of the live requests peak, a run without out-of-memory has at least
/// that much allocated, inside its reserved memory. Reserved memory never exceeds the
/// device; with `per_process_memory_fraction` below 1, every growth is refused that would
/// take reserved memory plus the request's segment size past the fraction's limit, and an
/// expandable growth maps whole pages (`large_segment_size` at most), so reserved memory
/// stays below the limit plus one page. Only for torch's caching allocator (the other
/// backends round differently).
struct Floor {
    /// The peak, over the parts, of the live requests' rounded sizes (`None`: no rule).
    peak_rounded: Option<u64>,
    fraction: f64,
    page_slack: u64,
}

impl Floor {
    fn new(trace: &dyn Workload, conf: &AllocConf) -> Self {
        let peak_rounded = (conf.backend == cachalot_core::config::Backend::Native).then(|| {
            trace
                .parts()
                .iter()
                .map(|t| peak_rounded_of(t, conf))
                .max()
                .unwrap_or(0)
        });
        Floor {
            peak_rounded,
            fraction: conf.per_process_memory_fraction,
            page_slack: if conf.expandable_segments {
                conf.large_segment_size
            } else {
                0
            },
        }
    }

    /// Whether a device of `capacity` bytes is proven too small.
    fn rules_out(&self, capacity: u64) -> bool {
        let Some(peak) = self.peak_rounded else {
            return false;
        };
        let limit = match cachalot_core::bounds::allowed_maximum(self.fraction, capacity) {
            Some(allowed) => allowed.saturating_add(self.page_slack),
            None => capacity,
        };
        peak > limit
    }

    /// [`fits`], answered without a replay where the floor rules the capacity out.
    fn fits(
        &self,
        trace: &dyn Workload,
        conf: &AllocConf,
        capacity: u64,
    ) -> Result<bool, AdvisorError> {
        if self.rules_out(capacity) {
            return Ok(false);
        }
        fits(trace, conf, capacity)
    }
}

/// The most bytes live at once as `conf` rounds the requests (zero-size requests take none).
fn peak_rounded_of(trace: &LoadedTrace, conf: &AllocConf) -> u64 {
    let mut sizes = vec![0u64; trace.slots as usize];
    let (mut live, mut peak) = (0u64, 0u64);
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size, .. } if size > 0 => {
                // A size past rounding is an out-of-memory anywhere; it takes nothing here.
                let rounded = cachalot_core::size::round_size(size, conf).unwrap_or(0);
                sizes[slot as usize] = rounded;
                live = live.saturating_add(rounded);
                peak = peak.max(live);
            }
            TraceOp::Free { slot, .. } => {
                live = live.saturating_sub(std::mem::take(&mut sizes[slot as usize]));
            }
            TraceOp::Alloc { .. } | TraceOp::Pool { .. } => {}
        }
    }
    peak
}

/// Bisection on the grid: `lo` does not fit (proven or replayed), `hi` fits (replayed). A
/// midpoint the [`Floor`] rules out is not replayed: the replay could only say it does not
/// fit, so the bisection takes the same steps.
fn bisect(
    trace: &dyn Workload,
    conf: &AllocConf,
    mut lo: u64,
    mut hi: u64,
) -> Result<u64, AdvisorError> {
    let floor = Floor::new(trace, conf);
    while hi - lo > STEP {
        let mid = lo + (hi - lo) / STEP / 2 * STEP;
        if floor.fits(trace, conf, mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// The minimum capacity of one configuration (see the module documentation), or `None` if
/// it does not fit even on [`large_device`].
pub fn min_capacity_of(
    trace: &dyn Workload,
    conf: &AllocConf,
) -> Result<Option<u64>, AdvisorError> {
    check_trace(trace)?;
    min_capacity_above(trace, conf, proven_too_small(trace))
}

/// [`min_capacity_of`], given `lo`, a capacity proven too small.
fn min_capacity_above(
    trace: &dyn Workload,
    conf: &AllocConf,
    lo: u64,
) -> Result<Option<u64>, AdvisorError> {
    match verified_upper_bound(trace, conf)? {
        None => Ok(None),
        Some(hi) => Ok(Some(bisect(trace, conf, lo, hi)?)),
    }
}

/// One candidate's minimum capacity in a search.
#[derive(Clone, Debug)]
pub struct MinCapacity {
    /// The configuration.
    pub candidate: Candidate,
    /// Its minimum capacity; `None`: it does not fit on [`large_device`].
    pub capacity: Option<u64>,
}

/// The answer of [`min_capacity`].
#[derive(Clone, Debug)]
pub struct MinCapacityResult {
    /// The smallest capacity found, if any configuration fits at all.
    pub capacity: Option<u64>,
    /// The configuration that fits there (first found; ties keep the simpler).
    pub fits_with: Option<MinCapacity>,
    /// The default and the common advice, always computed exactly.
    pub seeds: Vec<MinCapacity>,
    /// The best few, exact, best first.
    pub best: Vec<MinCapacity>,
    /// Configurations examined.
    pub searched: usize,
    /// The full search at [`MinCapacityResult::capacity`]: which configuration to use there.
    pub tune: Option<TuneResult>,
}

fn order(a: &MinCapacity, b: &MinCapacity) -> std::cmp::Ordering {
    let cap = |m: &MinCapacity| m.capacity.unwrap_or(u64::MAX);
    cap(a)
        .cmp(&cap(b))
        .then_with(|| a.candidate.order_key().cmp(&b.candidate.order_key()))
}

/// The smallest device the workload fits on, over the search space, and the configuration
/// to use there (a full [`crate::tune()`] at that capacity). `opts.capacity` is ignored.
pub fn min_capacity(
    trace: &dyn Workload,
    opts: &TuneOptions,
) -> Result<MinCapacityResult, AdvisorError> {
    check_trace(trace)?;
    let space = SearchSpace::for_trace(trace).for_release(opts.release);
    let search = CapacitySearch {
        trace,
        lo: proven_too_small(trace),
        progress: opts.progress,
    };
    let mut result = with_pool(opts.threads, || search.run(&space, opts.top))??;
    result.tune = tune_at_minimum(trace, opts, &result)?;
    Ok(result)
}

/// The seeds of a capacity search: the default and the two common pieces of advice.
const SEEDS: [Settings; 3] = [
    Settings::DEFAULT,
    Settings::ADVICE_MAX_SPLIT,
    Settings::ADVICE_EXPANDABLE,
];

/// The steps of [`min_capacity`] for one workload.
struct CapacitySearch<'a> {
    trace: &'a dyn Workload,
    /// A capacity proven too small ([`proven_too_small`]).
    lo: u64,
    progress: Option<&'a (dyn Fn(Tick) + Sync)>,
}

impl CapacitySearch<'_> {
    /// The seeds exactly, then [`explore`] over the space, bisecting only the candidates that
    /// fit below the best capacity so far.
    fn run(&self, space: &SearchSpace, top: usize) -> Result<MinCapacityResult, AdvisorError> {
        let seeds = self.seeds(space)?;
        let initial: Vec<(Candidate, MinCapacity)> = seeds
            .iter()
            .map(|m| (m.candidate.clone(), m.clone()))
            .collect();
        let (found, examined) = explore(
            space,
            initial,
            top,
            |a, b| order(&a.1, &b.1),
            |a, b| a.capacity == b.capacity,
            |cands, best| self.round(cands, best),
        )?;
        let best: Vec<MinCapacity> = found.into_iter().map(|(_, m)| m).collect();
        let fits_with = best.first().filter(|m| m.capacity.is_some()).cloned();
        Ok(MinCapacityResult {
            capacity: fits_with.as_ref().and_then(|m| m.capacity),
            fits_with,
            searched: seeds.len() + examined,
            seeds,
            best,
            tune: None,
        })
    }

    /// The exact minimum capacity of each seed, in parallel.
    fn seeds(&self, space: &SearchSpace) -> Result<Vec<MinCapacity>, AdvisorError> {
        let cands: Vec<Candidate> = SEEDS
            .iter()
            .map(|s| space.candidate(*s))
            .collect::<Result<_, _>>()?;
        self.tick(Tick::Added(cands.len()));
        cands
            .par_iter()
            .map(|c| {
                let capacity = min_capacity_above(self.trace, &c.conf, self.lo);
                self.tick(Tick::Done);
                Ok(MinCapacity {
                    candidate: c.clone(),
                    capacity: capacity?,
                })
            })
            .collect()
    }

    /// One round of [`explore`]: each candidate's minimum capacity if it beats `best`, else
    /// `None`.
    fn round(
        &self,
        cands: Vec<Candidate>,
        best: Option<&(Candidate, MinCapacity)>,
    ) -> Result<Vec<(Candidate, Option<MinCapacity>)>, AdvisorError> {
        let bound = best.and_then(|b| b.1.capacity);
        self.tick(Tick::Added(cands.len()));
        cands
            .into_par_iter()
            .map(|c| {
                let capacity = self.below(&c.conf, bound)?;
                self.tick(Tick::Done);
                let found = capacity.map(|capacity| MinCapacity {
                    candidate: c.clone(),
                    capacity: Some(capacity),
                });
                Ok((c, found))
            })
            .collect()
    }

    /// The minimum capacity of `conf` if it is below `bound` (exact when there is no bound
    /// yet), else `None`: a candidate that does not fit 64 MiB below the best cannot beat it.
    fn below(&self, conf: &AllocConf, bound: Option<u64>) -> Result<Option<u64>, AdvisorError> {
        let Some(bound) = bound else {
            return min_capacity_above(self.trace, conf, self.lo);
        };
        if bound <= self.lo + STEP
            || !Floor::new(self.trace, conf).fits(self.trace, conf, bound - STEP)?
        {
            return Ok(None);
        }
        Ok(Some(bisect(self.trace, conf, self.lo, bound - STEP)?))
    }

    fn tick(&self, t: Tick) {
        if let Some(progress) = self.progress {
            progress(t);
        }
    }
}

/// The full search at the capacity found, with the configuration that fits there among its
/// seeds; `None` when nothing fits.
fn tune_at_minimum(
    trace: &dyn Workload,
    opts: &TuneOptions,
    result: &MinCapacityResult,
) -> Result<Option<TuneResult>, AdvisorError> {
    let (Some(capacity), Some(fits_with)) = (result.capacity, &result.fits_with) else {
        return Ok(None);
    };
    let at = TuneOptions {
        capacity,
        ..opts.clone()
    };
    let extra: Vec<Settings> = fits_with.candidate.settings.into_iter().collect();
    Ok(Some(tune_with_seeds(trace, &at, &extra)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(rows: &[(&str, u64, u64)]) -> LoadedTrace {
        let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
        for (i, (action, ptr, size)) in rows.iter().enumerate() {
            csv.push_str(&format!("1,{i},{action},{ptr:#x},{size},0\n"));
        }
        cachalot_replay::load_bytes(csv.as_bytes()).unwrap()
    }

    #[test]
    fn peak_request_and_bounds() {
        let t = trace(&[
            ("allocate", 1, 100 << 20),
            ("allocate", 2, 50 << 20),
            ("free", 1, 0),
            ("allocate", 3, 30 << 20),
        ]);
        assert_eq!(peak_live_requested(&t), 150 << 20);
        assert_eq!(proven_too_small(&t), 128 << 20);
        assert_eq!(large_device(&t), 80 << 30);
    }

    #[test]
    fn one_big_block_needs_its_rounded_size() {
        // 100 MiB + 50 MiB live: segments of exactly those sizes (2 MiB-aligned), 150 MiB.
        let t = trace(&[("allocate", 1, 100 << 20), ("allocate", 2, 50 << 20)]);
        let conf = AllocConf::default();
        let c = min_capacity_of(&t, &conf).unwrap().unwrap();
        assert_eq!(c, 192 << 20);
        assert!(fits(&t, &conf, c).unwrap());
        assert!(!fits(&t, &conf, c - STEP).unwrap());
    }

    #[test]
    fn the_floor_rules_out_only_devices_that_run_out_of_memory() {
        // At the largest grid capacity the floor rules out, a replay runs out of memory.
        let mut beyond_old_bound = 0;
        for name in ["gpt2-train", "resnet50-train", "cs336_magma"] {
            let p = cachalot_testkit::fixture("traces").join(format!("{name}.csv.gz"));
            let t = cachalot_replay::load_path(&p).unwrap();
            for conf in [
                "",
                "expandable_segments:True",
                "roundup_power2_divisions:4",
                "garbage_collection_threshold:0.6,per_process_memory_fraction:0.95",
                "expandable_segments:True,garbage_collection_threshold:0.8,per_process_memory_fraction:0.99",
                "expandable_segments:True,per_process_memory_fraction:0.5",
                "max_split_size_mb:64,per_process_memory_fraction:0.7",
            ] {
                let conf = Candidate::parse(conf).unwrap().conf;
                let floor = Floor::new(&t, &conf);
                let mut c = STEP;
                while floor.rules_out(c + STEP) {
                    c += STEP;
                }
                if !floor.rules_out(c) {
                    continue;
                }
                assert!(!fits(&t, &conf, c).unwrap(), "{name} {conf:?} at {c}");
                if c > proven_too_small(&t) {
                    beyond_old_bound += 1;
                }
            }
        }
        assert!(beyond_old_bound >= 6, "{beyond_old_bound}");
    }
}
