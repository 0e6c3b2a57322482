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
use crate::search::{TuneOptions, TuneResult, explore, tune_with_seeds};
use crate::space::{Candidate, SearchSpace, Settings};
use crate::{AdvisorError, Workload, check_trace, with_pool};

/// The capacity grid: 64 MiB.
pub const STEP: u64 = 64 << 20;

/// The most bytes live at once in any part of the workload, as requested (unrounded),
/// ignoring out-of-memory: no device smaller than this can run it without one.
pub fn peak_live_requested(w: &dyn Workload) -> u64 {
    w.parts().iter().map(peak_live_of).max().unwrap_or(0)
}

fn peak_live_of(trace: &LoadedTrace) -> u64 {
    let mut sizes = vec![0u64; trace.slots as usize];
    let (mut live, mut peak) = (0u64, 0u64);
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size, .. } => {
                sizes[slot as usize] = size;
                live += size;
                peak = peak.max(live);
            }
            TraceOp::Free { slot, .. } => live -= std::mem::take(&mut sizes[slot as usize]),
            TraceOp::Pool { .. } => {}
        }
    }
    peak
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

/// Bisection on the grid: `lo` does not fit (proven or replayed), `hi` fits (replayed).
fn bisect(
    trace: &dyn Workload,
    conf: &AllocConf,
    mut lo: u64,
    mut hi: u64,
) -> Result<u64, AdvisorError> {
    while hi - lo > STEP {
        let mid = lo + (hi - lo) / STEP / 2 * STEP;
        if fits(trace, conf, mid)? {
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
    let lo = proven_too_small(trace);
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
    let space = SearchSpace::for_trace(trace);
    let lo = proven_too_small(trace);
    let tick = opts.progress;
    let seeds_settings = [
        Settings::DEFAULT,
        Settings::ADVICE_MAX_SPLIT,
        Settings::ADVICE_EXPANDABLE,
    ];
    let exact_one = |c: &Candidate| -> Result<Option<u64>, AdvisorError> {
        let r = match verified_upper_bound(trace, &c.conf)? {
            None => None,
            Some(hi) => Some(bisect(trace, &c.conf, lo, hi)?),
        };
        Ok(r)
    };
    let run = || -> Result<MinCapacityResult, AdvisorError> {
        let seed_cands: Vec<Candidate> = seeds_settings
            .iter()
            .map(|s| Candidate::from_settings(*s))
            .collect::<Result<_, _>>()?;
        if let Some(t) = tick {
            t(crate::Tick::Added(seed_cands.len()));
        }
        let seeds: Vec<MinCapacity> = seed_cands
            .par_iter()
            .map(|c| {
                let r = exact_one(c).map(|capacity| MinCapacity {
                    candidate: c.clone(),
                    capacity,
                });
                if let Some(t) = tick {
                    t(crate::Tick::Done);
                }
                r
            })
            .collect::<Result<_, _>>()?;
        let mut searched = seeds.len();
        let initial: Vec<(Candidate, MinCapacity)> = seeds
            .iter()
            .map(|m| (m.candidate.clone(), m.clone()))
            .collect();
        let (found, n) = explore(
            &space,
            initial,
            opts.top,
            |a, b| order(&a.1, &b.1),
            |a, b| a.capacity == b.capacity,
            |cands: Vec<Candidate>, best: Option<&(Candidate, MinCapacity)>| {
                let bound = best.and_then(|b| b.1.capacity);
                if let Some(t) = tick {
                    t(crate::Tick::Added(cands.len()));
                }
                cands
                    .into_par_iter()
                    .map(|c| {
                        let cap = match bound {
                            // Must fit below the best to matter.
                            Some(b) if b <= lo + STEP => None,
                            Some(b) => {
                                if fits(trace, &c.conf, b - STEP)? {
                                    Some(bisect(trace, &c.conf, lo, b - STEP)?)
                                } else {
                                    None
                                }
                            }
                            None => exact_one(&c)?,
                        };
                        if let Some(t) = tick {
                            t(crate::Tick::Done);
                        }
                        Ok((
                            c.clone(),
                            cap.map(|capacity| MinCapacity {
                                candidate: c,
                                capacity: Some(capacity),
                            }),
                        ))
                    })
                    .collect::<Result<Vec<_>, AdvisorError>>()
            },
        )?;
        searched += n;
        let best: Vec<MinCapacity> = found.into_iter().map(|(_, m)| m).collect();
        let fits_with = best.first().filter(|m| m.capacity.is_some()).cloned();
        let capacity = fits_with.as_ref().and_then(|m| m.capacity);
        Ok(MinCapacityResult {
            capacity,
            fits_with,
            seeds,
            best,
            searched,
            tune: None,
        })
    };
    let mut result = with_pool(opts.threads, run)??;
    if let (Some(cap), Some(w)) = (result.capacity, &result.fits_with) {
        let at = TuneOptions {
            capacity: cap,
            ..opts.clone()
        };
        let extra = w.candidate.settings.into_iter().collect::<Vec<_>>();
        result.tune = Some(tune_with_seeds(trace, &at, &extra)?);
    }
    Ok(result)
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
}
