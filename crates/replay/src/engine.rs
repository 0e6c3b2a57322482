//! Driving the allocator with a loaded trace on the simulated device.
//!
//! The replay follows the oracle's rules: events in file order; an allocation that fails with
//! out-of-memory is counted and its later free skipped; zero-size allocations return no
//! pointer. Each device call is tagged with the trace line being replayed.

use std::sync::atomic::Ordering;
use std::time::Instant;

use cachalot_core::{
    AllocConf, AllocError, CachingAllocator, DeviceStats, MemInfo, OomReport, StreamId,
};
use cachalot_sim::{LogEntry, SimConfig, SimCounters, SimDevice};

use crate::load::{LoadedTrace, TraceOp};

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The allocator configuration.
    pub conf: AllocConf,
    /// The simulated device.
    pub sim: SimConfig,
    /// Log every device call (for `--segments`).
    pub log_segments: bool,
    /// Replay every event on the default stream.
    pub ignore_streams: bool,
    /// How many OOM reports to keep in full.
    pub max_oom_reports: usize,
    /// After the trace: free everything still live and empty the cache.
    pub empty_cache_at_end: bool,
    /// Stop at the first out-of-memory (the advisor uses it to cut hopeless replays short).
    pub stop_at_first_oom: bool,
    /// Record (op index, allocated, reserved) every this many operations; 0 = never.
    pub sample_every: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            conf: AllocConf::default(),
            sim: SimConfig::default(),
            log_segments: false,
            ignore_streams: false,
            max_oom_reports: 5,
            empty_cache_at_end: false,
            stop_at_first_oom: false,
            sample_every: 0,
        }
    }
}

/// One out-of-memory during a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomEvent {
    /// The trace line of the failed allocation.
    pub line: u64,
    /// Index of the operation in the trace.
    pub op_index: usize,
    /// The numbers (its `Display` is torch's message).
    pub report: OomReport,
}

/// Out-of-memory summary (the oracle's `ooms`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OomSummary {
    /// Allocations that failed with out-of-memory.
    pub count: u64,
    /// Sum of their sizes.
    pub bytes_requested: u128,
    /// Frees of those allocations, skipped.
    pub skipped_frees: u64,
    /// The first ones in full.
    pub events: Vec<OomEvent>,
}

/// One point of the memory timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Operation index.
    pub op_index: usize,
    /// `allocated_bytes.all.current`.
    pub allocated: u64,
    /// `reserved_bytes.all.current`.
    pub reserved: u64,
}

/// The state after [`ReplayOptions::empty_cache_at_end`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterEmptyCache {
    /// Statistics then.
    pub stats: DeviceStats,
    /// Bytes still charged on the device.
    pub phys_used: u64,
}

/// What a replay did.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    /// Operations replayed.
    pub events: u64,
    /// Final statistics (peaks included).
    pub stats: DeviceStats,
    /// Out-of-memory errors.
    pub ooms: OomSummary,
    /// Requests rejected as invalid (sizes that overflow), with their lines and messages.
    pub rejected: Vec<(u64, String)>,
    /// The device's counters.
    pub device: SimCounters,
    /// Bytes charged on the device at the end.
    pub phys_used: u64,
    /// Bytes of virtual address space reserved at the end.
    pub va_reserved: u64,
    /// `cudaMemGetInfo` at the end.
    pub mem_info_at_end: MemInfo,
    /// The device-call log (empty unless asked for).
    pub segments: Vec<LogEntry>,
    /// Wall time of the replay loop only.
    pub wall_ns: u128,
    /// Whether the replay stopped early at an OOM.
    pub stopped_early: bool,
    /// Timeline samples (empty unless asked for).
    pub samples: Vec<Sample>,
    /// State after the end-of-trace cleanup, if asked for.
    pub after_empty_cache: Option<AfterEmptyCache>,
}

impl ReplayReport {
    /// Nanoseconds per replayed operation.
    pub fn ns_per_op(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.wall_ns as f64 / self.events as f64
        }
    }
}

/// A replay that failed for a reason other than out-of-memory (a device error).
#[derive(Debug, thiserror::Error)]
#[error("replay stopped at trace line {line}: {source}")]
pub struct ReplayError {
    /// The trace line.
    pub line: u64,
    /// What went wrong.
    #[source]
    pub source: AllocError,
}

/// Replays `trace` under `opts`.
pub fn replay(trace: &LoadedTrace, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let mut device = SimDevice::new(opts.sim.clone());
    if opts.log_segments {
        device.enable_log();
    }
    let tag = device.tag_handle();
    let alloc = CachingAllocator::new(opts.conf.clone(), device)
        .map_err(|source| ReplayError { line: 0, source })?;
    let mut ptrs = vec![0u64; trace.slots as usize];
    let mut failed = vec![false; trace.slots as usize];
    let mut ooms = OomSummary::default();
    let mut rejected = Vec::new();
    let mut samples = Vec::new();
    let mut stopped_early = false;
    let mut events = 0u64;
    let start = Instant::now();
    for (i, op) in trace.ops.iter().enumerate() {
        events += 1;
        if opts.log_segments {
            tag.store(op.line() as i64, Ordering::Relaxed);
        }
        match *op {
            TraceOp::Alloc {
                slot,
                size,
                stream,
                line,
            } => {
                let stream = if opts.ignore_streams { 0 } else { stream };
                match alloc.malloc(size, StreamId(stream as u64)) {
                    Ok(p) => ptrs[slot as usize] = p,
                    Err(AllocError::OutOfMemory(report)) => {
                        failed[slot as usize] = true;
                        ooms.count += 1;
                        ooms.bytes_requested += size as u128;
                        if ooms.events.len() < opts.max_oom_reports {
                            ooms.events.push(OomEvent {
                                line,
                                op_index: i,
                                report: *report,
                            });
                        }
                        if opts.stop_at_first_oom {
                            stopped_early = true;
                            break;
                        }
                    }
                    Err(e @ AllocError::InvalidSize { .. }) => {
                        failed[slot as usize] = true;
                        rejected.push((line, e.to_string()));
                    }
                    Err(source) => return Err(ReplayError { line, source }),
                }
            }
            TraceOp::Free { slot, line } => {
                let p = std::mem::take(&mut ptrs[slot as usize]);
                if p != 0 {
                    alloc
                        .free(p)
                        .map_err(|source| ReplayError { line, source })?;
                } else if failed[slot as usize] {
                    ooms.skipped_frees += 1;
                }
            }
        }
        if opts.sample_every > 0 && i % opts.sample_every == 0 {
            samples.push(alloc.with_stats(|s| Sample {
                op_index: i,
                allocated: s.allocated_bytes.all().current as u64,
                reserved: s.reserved_bytes.all().current as u64,
            }));
        }
    }
    let wall_ns = start.elapsed().as_nanos();
    // Skipped frees are counted by the trace, not by what was replayed: an OOM'd allocation
    // whose free lies beyond an early stop is not counted.
    let stats = alloc.stats();
    let mem_info_at_end = alloc
        .with_device(cachalot_core::Device::mem_get_info)
        .map_err(|e| ReplayError {
            line: 0,
            source: e.into(),
        })?;
    let after_empty_cache = if opts.empty_cache_at_end {
        tag.store(-1, Ordering::Relaxed);
        for p in ptrs.iter().copied().filter(|&p| p != 0) {
            alloc
                .free(p)
                .map_err(|source| ReplayError { line: 0, source })?;
        }
        alloc
            .empty_cache()
            .map_err(|source| ReplayError { line: 0, source })?;
        Some(AfterEmptyCache {
            stats: alloc.stats(),
            phys_used: alloc.with_device(|d| d.phys_used()),
        })
    } else {
        None
    };
    let mut device = alloc.into_device();
    Ok(ReplayReport {
        events,
        stats,
        ooms,
        rejected,
        phys_used: device.phys_used(),
        va_reserved: device.va_reserved(),
        device: device.counters().clone(),
        mem_info_at_end,
        segments: device.take_log(),
        wall_ns,
        stopped_early,
        samples,
        after_empty_cache,
    })
}
