//! The advisor: which `PYTORCH_CUDA_ALLOC_CONF` for this workload and this GPU.
//!
//! Every number comes from a replay of the trace through cachalot's allocator, which makes the
//! same decisions as torch 2.15's (the golden tests check it), on the simulated device:
//!
//! - [`compare()`]: a row per configuration (the default always included) — peaks, utilization,
//!   the smallest device on which the trace runs without out-of-memory, and at a given capacity
//!   the OOMs, device calls, retries and their estimated time ([`CostModel`]);
//! - [`tune()`]: searches the configurations torch 2.15 accepts ([`space`]) and ranks them at a
//!   capacity: no OOM first, then fewest retries, then least estimated device-call time, then
//!   lowest peak reserved ([`RankKey`]);
//! - [`min_capacity()`]: the smallest device the workload fits on, and with which configuration;
//! - [`html`]: a self-contained page with the memory timelines and the ranking;
//! - [`pools`]: for traces that use private pools, each pool's share of the peaks and what
//!   `empty_cache` can give back.
//!
//! Replays run in parallel (rayon); results do not depend on the number of threads.
//!
//! **Minimum capacity**, precisely: for one configuration, the 64 MiB multiple `c` found by
//! bisection between a capacity proven too small (below the trace's peak of live requested
//! bytes) and one verified to fit, such that the replay at `c` has no out-of-memory and the
//! replay at `c − 64 MiB` has one (or is proven to). Out-of-memory-freeness is not perfectly
//! monotonic in capacity for a caching allocator (a smaller device can change which segments
//! are freed and when), so a still smaller capacity might fit in rare cases; both sides of the
//! boundary are replayed, never assumed.

#![forbid(unsafe_code)]

pub mod capacity;
pub mod compare;
pub mod cost;
pub mod html;
pub mod measure;
pub mod pools;
pub mod search;
pub mod space;
pub mod text;
pub mod timeline;

pub use capacity::{MinCapacity, MinCapacityResult, STEP, min_capacity, min_capacity_of};
pub use compare::{CompareOptions, CompareResult, CompareRow, compare};
pub use cost::{CallCounts, CostModel};
pub use measure::{Evaluated, Metrics, Outcome, RankKey, evaluate, fits};
pub use search::{Fit, Tick, TuneOptions, TuneResult, tune};
pub use space::{Candidate, Roundup, SearchSpace, Settings};
pub use timeline::{TimePoint, Timeline, record_timeline, record_timelines};

/// What can go wrong in the advisor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdvisorError {
    /// A configuration string torch 2.15 would reject.
    #[error("configuration '{conf}': {message}")]
    Config {
        /// The string as given.
        conf: String,
        /// Why.
        message: String,
    },
    /// A bad cost-model constant or file.
    #[error("{0}")]
    Cost(String),
    /// A bad capacity.
    #[error("{0}")]
    Capacity(String),
    /// A trace with nothing to replay.
    #[error("{0}")]
    EmptyTrace(String),
    /// A replay failed for a reason other than out-of-memory.
    #[error(transparent)]
    Replay(#[from] cachalot_replay::ReplayError),
    /// Building the thread pool failed.
    #[error("cannot start worker threads: {0}")]
    Threads(String),
    /// A stop was asked (Ctrl-C, SIGTERM) before the search finished.
    #[error(transparent)]
    Interrupted(#[from] cachalot_replay::interrupt::Interrupted),
}

/// Runs `f` on a rayon pool of `threads` threads (all cores when `None`).
pub(crate) fn with_pool<T: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, AdvisorError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n.max(1));
    }
    let pool = b
        .build()
        .map_err(|e| AdvisorError::Threads(e.to_string()))?;
    Ok(pool.install(f))
}

/// Rejects a capacity of 0 bytes.
pub(crate) fn check_capacity(capacity: u64) -> Result<(), AdvisorError> {
    if capacity == 0 {
        return Err(AdvisorError::Capacity(
            "invalid capacity '0': the device must have at least 1 byte".into(),
        ));
    }
    Ok(())
}

/// What the advisor replays: one trace, or several that one configuration must serve —
/// the ranks of one job, or the devices of one snapshot (`PYTORCH_CUDA_ALLOC_CONF` is the
/// same for every process of a job). A configuration's numbers are those of its worst part:
/// the one whose replay ranks last ([`Metrics::part`]).
pub trait Workload: Sync {
    /// The traces, at least one.
    fn parts(&self) -> &[cachalot_replay::LoadedTrace];
}

impl Workload for cachalot_replay::LoadedTrace {
    fn parts(&self) -> &[cachalot_replay::LoadedTrace] {
        std::slice::from_ref(self)
    }
}

impl Workload for [cachalot_replay::LoadedTrace] {
    fn parts(&self) -> &[cachalot_replay::LoadedTrace] {
        self
    }
}

impl Workload for Vec<cachalot_replay::LoadedTrace> {
    fn parts(&self) -> &[cachalot_replay::LoadedTrace] {
        self
    }
}

/// Rejects a workload with no trace, or a trace with no allocation.
pub(crate) fn check_trace(w: &dyn Workload) -> Result<(), AdvisorError> {
    if w.parts().is_empty() {
        return Err(AdvisorError::EmptyTrace("no trace to replay".into()));
    }
    for (i, trace) in w.parts().iter().enumerate() {
        if trace.stats.allocs == 0 {
            let which = if w.parts().len() > 1 {
                format!("trace {} of {}", i + 1, w.parts().len())
            } else {
                "the trace".to_string()
            };
            return Err(AdvisorError::EmptyTrace(format!(
                "{which} has no allocation events ({} data rows read): nothing to replay",
                trace.stats.lines
            )));
        }
    }
    Ok(())
}
