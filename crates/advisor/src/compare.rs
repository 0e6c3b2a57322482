//! `compare`: a row per configuration, the default always first.

use cachalot_core::config::TorchVersion;
use rayon::prelude::*;

use crate::capacity::min_capacity_of;
use crate::cost::CostModel;
use crate::measure::{Metrics, measure};
use crate::search::Tick;
use crate::space::Candidate;
use crate::{AdvisorError, Workload, check_capacity, check_trace, with_pool};

/// How to compare.
#[derive(Clone)]
pub struct CompareOptions<'a> {
    /// Device capacity for the per-capacity columns, bytes.
    pub capacity: u64,
    /// The cost model.
    pub cost: CostModel,
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
    /// Whether to compute each configuration's minimum capacity (several replays each).
    pub min_capacity: bool,
    /// Called as work is queued and done.
    pub progress: Option<&'a (dyn Fn(Tick) + Sync)>,
    /// The user's own configuration (e.g. a snapshot's): a row, marked as theirs.
    pub own: Option<String>,
    /// The torch release whose decisions every row's replays make
    /// ([`Candidate::for_torch`]).
    pub release: TorchVersion,
}

/// One configuration's row.
#[derive(Clone, Debug)]
pub struct CompareRow {
    /// The configuration.
    pub candidate: Candidate,
    /// The replay at the capacity.
    pub metrics: Metrics,
    /// Its minimum capacity (`None`: not computed, or does not fit on a very large device).
    pub min_capacity: Option<u64>,
}

/// `compare`'s answer.
#[derive(Clone, Debug)]
pub struct CompareResult {
    /// Device capacity of the per-capacity columns.
    pub capacity: u64,
    /// The rows: the default, then the configurations in the order given (repeats dropped),
    /// then the user's own if it is not among them.
    pub rows: Vec<CompareRow>,
    /// Whether the minimum capacities were computed.
    pub min_capacity_computed: bool,
    /// The label of the user's own configuration's row.
    pub own: Option<String>,
}

/// Parses the configurations (the default first, repeats of the same string dropped).
pub fn candidates(confs: &[String]) -> Result<Vec<Candidate>, AdvisorError> {
    let mut out = vec![Candidate::parse("")?];
    for c in confs {
        let cand = Candidate::parse(c.trim())?;
        if !out.iter().any(|o| o.conf == cand.conf) {
            out.push(cand);
        }
    }
    Ok(out)
}

/// Replays every configuration at `opts.capacity` and finds its minimum capacity.
pub fn compare(
    trace: &dyn Workload,
    confs: &[String],
    opts: &CompareOptions,
) -> Result<CompareResult, AdvisorError> {
    check_trace(trace)?;
    check_capacity(opts.capacity)?;
    let mut all = confs.to_vec();
    all.extend(opts.own.clone());
    let cands: Vec<Candidate> = candidates(&all)?
        .into_iter()
        .map(|c| c.for_torch(opts.release))
        .collect();
    let own = match &opts.own {
        Some(o) => {
            let c = Candidate::parse(o.trim())?.for_torch(opts.release);
            cands
                .iter()
                .find(|x| x.conf == c.conf)
                .map(|x| x.label.clone())
        }
        None => None,
    };
    let tick = |t: Tick| {
        if let Some(p) = opts.progress {
            p(t)
        }
    };
    tick(Tick::Added(
        cands.len() * if opts.min_capacity { 2 } else { 1 },
    ));
    let rows = with_pool(opts.threads, || {
        cands
            .par_iter()
            .map(|c| {
                let metrics = measure(trace, c, opts.capacity, &opts.cost)?;
                tick(Tick::Done);
                let min_capacity = if opts.min_capacity {
                    let m = min_capacity_of(trace, &c.conf)?;
                    tick(Tick::Done);
                    m
                } else {
                    None
                };
                Ok(CompareRow {
                    candidate: c.clone(),
                    metrics,
                    min_capacity,
                })
            })
            .collect::<Result<Vec<_>, AdvisorError>>()
    })??;
    Ok(CompareResult {
        capacity: opts.capacity,
        rows,
        min_capacity_computed: opts.min_capacity,
        own,
    })
}
