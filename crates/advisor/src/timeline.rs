//! Memory over the course of a replay, for the HTML report.

use std::ops::ControlFlow;

use cachalot_replay::{LoadedTrace, Progress, replay_with_hook};

use crate::AdvisorError;
use crate::cost::CostModel;
use crate::measure::{Metrics, metrics_of, options};
use crate::space::Candidate;

/// At most this many points per timeline (each the maximum over its stretch of operations).
pub const MAX_POINTS: usize = 1200;
/// At most this many retry or OOM marks per timeline.
pub const MAX_MARKS: usize = 400;

/// One stretch of operations: the highest values reached in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimePoint {
    /// First operation of the stretch.
    pub op_index: usize,
    /// Highest allocated bytes.
    pub allocated: u64,
    /// Highest reserved bytes.
    pub reserved: u64,
    /// Highest number of device allocations held: `cudaMalloc` segments plus mapped
    /// expandable pages.
    pub segments: u64,
}

/// A replay's memory over time.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// The configuration.
    pub candidate: Candidate,
    /// Operations in the trace.
    pub events: usize,
    /// Operations per point.
    pub stride: usize,
    /// The points, in order.
    pub points: Vec<TimePoint>,
    /// Operations during which a retry (synchronize and cache flush) happened.
    pub retries: Vec<usize>,
    /// Operations that failed with out-of-memory.
    pub ooms: Vec<usize>,
    /// The replay's numbers (the same as without the timeline).
    pub metrics: Metrics,
}

/// Replays `candidate` at `capacity`, recording its timeline.
pub fn record_timeline(
    trace: &LoadedTrace,
    candidate: &Candidate,
    capacity: u64,
    cost: &CostModel,
) -> Result<Timeline, AdvisorError> {
    let events = trace.ops.len();
    let stride = events.div_ceil(MAX_POINTS).max(1);
    let mut points: Vec<TimePoint> = Vec::with_capacity(MAX_POINTS + 1);
    let mut retries = Vec::new();
    let mut ooms = Vec::new();
    let mut last_retries = 0i64;
    let mut hook = |p: &Progress<'_>| {
        let s = p.stats;
        let segments = s.segment.all().current.max(0) as u64
            + p.device.mem_map.saturating_sub(p.device.mem_unmap);
        let bucket = p.op_index / stride;
        if points.len() <= bucket {
            points.push(TimePoint {
                op_index: bucket * stride,
                ..TimePoint::default()
            });
        }
        let pt = points.last_mut().expect("a point");
        pt.allocated = pt
            .allocated
            .max(s.allocated_bytes.all().current.max(0) as u64);
        pt.reserved = pt
            .reserved
            .max(s.reserved_bytes.all().current.max(0) as u64);
        pt.segments = pt.segments.max(segments);
        if s.num_alloc_retries > last_retries {
            last_retries = s.num_alloc_retries;
            if retries.len() < MAX_MARKS {
                retries.push(p.op_index);
            }
        }
        if p.oom_now && ooms.len() < MAX_MARKS {
            ooms.push(p.op_index);
        }
        ControlFlow::Continue(())
    };
    let opts = options(&candidate.conf, capacity);
    let report = replay_with_hook(trace, &opts, 1, &mut hook)?;
    let metrics = metrics_of(&report, capacity, cost);
    Ok(Timeline {
        candidate: candidate.clone(),
        events,
        stride,
        points,
        retries,
        ooms,
        metrics,
    })
}

/// Records the timelines of several configurations in parallel, in the order given.
pub fn record_timelines(
    trace: &LoadedTrace,
    candidates: &[Candidate],
    capacity: u64,
    cost: &CostModel,
    threads: Option<usize>,
) -> Result<Vec<Timeline>, AdvisorError> {
    use rayon::prelude::*;
    crate::with_pool(threads, || {
        candidates
            .par_iter()
            .map(|c| record_timeline(trace, c, capacity, cost))
            .collect::<Result<Vec<_>, _>>()
    })?
}
