//! Driving the allocator with a loaded trace on the simulated device.
//!
//! The replay follows the oracle's rules: events in file order; an allocation that fails with
//! out-of-memory is counted and its later free skipped; zero-size allocations return no
//! pointer. Each device call is tagged with the trace line being replayed.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cachalot_core::{
    AllocConf, AllocError, DeviceStats, MemInfo, MemorySnapshot, OomReport, StreamId,
};
use cachalot_sim::{LogEntry, SimConfig, SimCounters, SimDevice};

use crate::load::{LoadedTrace, TraceOp};
use crate::pools::{PoolReplay, PoolReport};
use crate::target::{MallocError, Target};

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
    /// Record the allocator's history (`_record_memory_history`) in a ring of this many
    /// entries; `None` = off.
    pub history_entries: Option<usize>,
    /// Take a memory snapshot (history and segments) where the replay ends.
    pub snapshot_at_end: bool,
    /// The device ordinal the allocator reports (torch's "GPU N" in OOM messages), e.g. the
    /// device of a snapshot being replayed.
    pub device_index: u32,
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
            history_entries: None,
            snapshot_at_end: false,
            device_index: 0,
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
    /// The numbers, for the caching allocator; `None` for the direct backends
    /// (`cudaMallocAsync`, no caching), whose only account is the message.
    pub report: Option<OomReport>,
    /// torch's message for this backend.
    pub message: String,
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
    /// CPU time of the replaying thread in the replay loop only (what `cachalot bench`
    /// compares; unlike wall time, it does not count time other processes had the core).
    pub cpu_ns: u128,
    /// Whether the replay stopped early at an OOM.
    pub stopped_early: bool,
    /// Timeline samples (empty unless asked for).
    pub samples: Vec<Sample>,
    /// State after the end-of-trace cleanup, if asked for.
    pub after_empty_cache: Option<AfterEmptyCache>,
    /// The memory snapshot where the replay ended, if asked for
    /// ([`ReplayOptions::snapshot_at_end`]).
    pub snapshot: Option<MemorySnapshot>,
    /// The error that stopped the replay, if one did: its trace line and torch's message
    /// (the oracle's `fatal_error`). Only [`ReplayError::report`] carries such a report.
    pub fatal_error: Option<(u64, String)>,
    /// Every pool the trace names, as it is at the end.
    pub pools: Vec<PoolReport>,
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

/// A replay that failed for a reason other than out-of-memory (a device error, as torch's
/// fatal `c10::Error`).
#[derive(Debug, thiserror::Error)]
#[error("replay stopped at trace line {line}: {}", source.torch_message().trim_end())]
#[non_exhaustive]
pub struct ReplayError {
    /// The trace line.
    pub line: u64,
    /// What went wrong.
    #[source]
    pub source: AllocError,
    /// What the replay did up to the error (statistics, device calls, with
    /// [`ReplayReport::fatal_error`] set), when the error came from a trace row; the oracle
    /// reports it too.
    pub report: Option<Box<ReplayReport>>,
}

impl ReplayError {
    fn at(line: u64, source: AllocError) -> Self {
        ReplayError {
            line,
            source,
            report: None,
        }
    }
}

/// What a [`replay_with_hook`] hook sees after an operation.
#[derive(Debug)]
pub struct Progress<'a> {
    /// Index of the operation just replayed.
    pub op_index: usize,
    /// The allocator's statistics now.
    pub stats: &'a DeviceStats,
    /// The device's counters now.
    pub device: &'a SimCounters,
    /// Out-of-memory errors so far.
    pub ooms: u64,
    /// Whether the operation just replayed failed with out-of-memory.
    pub oom_now: bool,
}

/// A callback run during a replay; `ControlFlow::Break` stops the replay there.
pub type ReplayHook<'h> = dyn FnMut(&Progress<'_>) -> ControlFlow<()> + 'h;

/// Replays `trace` under `opts`.
pub fn replay(trace: &LoadedTrace, opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    replay_inner(trace, opts, None)
}

/// Replays like [`replay`], calling `hook` after every `every`-th operation (operation indices
/// 0, `every`, 2 × `every`, …; `every` = 0 means never) and after every operation that fails
/// with out-of-memory. When the hook returns `ControlFlow::Break`, the replay stops there and
/// the report says [`ReplayReport::stopped_early`]. The advisor uses it to cut short replays
/// that can no longer beat the best candidate, and to record timelines.
pub fn replay_with_hook(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
    every: usize,
    hook: &mut ReplayHook<'_>,
) -> Result<ReplayReport, ReplayError> {
    replay_inner(trace, opts, Some((every, hook)))
}

fn replay_inner(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
    mut hook: Option<(usize, &mut ReplayHook<'_>)>,
) -> Result<ReplayReport, ReplayError> {
    let mut device = SimDevice::new(opts.sim.clone());
    if opts.log_segments {
        device.enable_log();
    }
    let tag = device.tag_handle();
    let alloc = Target::new(opts.conf.clone(), device, opts.device_index)
        .map_err(|source| ReplayError::at(0, source))?;
    if opts.history_entries.is_some() {
        // Only the caching allocator records; the direct backends replay without a history.
        let _ = alloc.record_history(opts.history_entries);
    }
    let backend = alloc.backend();
    let mut ptrs = vec![0u64; trace.slots as usize];
    let mut failed = vec![false; trace.slots as usize];
    let mut ooms = OomSummary::default();
    let mut samples = Vec::new();
    let mut stopped_early = false;
    let mut events = 0u64;
    let mut fatal = None;
    let mut pool_rows = PoolReplay::default();
    let start = Instant::now();
    let cpu_start = cpu_time::ThreadTime::now();
    for (i, op) in trace.ops.iter().enumerate() {
        events += u64::from(!matches!(op, TraceOp::Pool { .. }));
        let ooms_before = ooms.count;
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
                match (alloc.malloc(size, StreamId(stream as u64)))
                    .map_err(|e| MallocError::of(e, backend))
                {
                    Ok(p) => ptrs[slot as usize] = p,
                    Err(MallocError::OutOfMemory(report, message)) => {
                        failed[slot as usize] = true;
                        ooms.count += 1;
                        ooms.bytes_requested += size as u128;
                        if ooms.events.len() < opts.max_oom_reports {
                            ooms.events.push(OomEvent {
                                line,
                                op_index: i,
                                report: report.map(|r| *r),
                                message,
                            });
                        }
                        if opts.stop_at_first_oom {
                            stopped_early = true;
                            break;
                        }
                    }
                    Err(MallocError::Fatal(source)) => {
                        fatal = Some((line, source));
                        break;
                    }
                }
            }
            TraceOp::Free { slot, line } => {
                let p = std::mem::take(&mut ptrs[slot as usize]);
                if p != 0 {
                    if let Err(source) = alloc.free(p) {
                        fatal = Some((line, source));
                        break;
                    }
                } else if failed[slot as usize] {
                    ooms.skipped_frees += 1;
                }
            }
            TraceOp::Pool { op, line } => {
                if let Err(source) = pool_rows.apply(&alloc, trace, op, &ptrs, opts.ignore_streams)
                {
                    fatal = Some((line, source));
                    break;
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
        if let Some((every, hook)) = hook.as_mut() {
            let oom_now = ooms.count > ooms_before;
            if oom_now || (*every > 0 && i % *every == 0) {
                let device = alloc.with_device(|d| d.counters().clone());
                let flow = alloc.with_stats(|stats| {
                    hook(&Progress {
                        op_index: i,
                        stats,
                        device: &device,
                        ooms: ooms.count,
                        oom_now,
                    })
                });
                if flow.is_break() {
                    stopped_early = true;
                    break;
                }
            }
        }
    }
    let wall_ns = start.elapsed().as_nanos();
    let cpu_ns = cpu_start.elapsed().as_nanos();
    // Skipped frees are counted by the trace, not by what was replayed: an OOM'd allocation
    // whose free lies beyond an early stop is not counted.
    let mut stats = alloc.stats().unwrap_or_default();
    stats.num_sync_all_streams += pool_rows.extra_syncs();
    let mem_info_at_end = alloc
        .with_device(cachalot_core::Device::mem_get_info)
        .map_err(|e| ReplayError::at(0, e.into()))?;
    let pools = pool_rows.report(&alloc, trace);
    let snapshot = if opts.snapshot_at_end {
        alloc.snapshot().ok()
    } else {
        None
    };
    let after_empty_cache = if opts.empty_cache_at_end && fatal.is_none() {
        tag.store(-1, Ordering::Relaxed);
        for p in ptrs.iter().copied().filter(|&p| p != 0) {
            alloc.free(p).map_err(|source| ReplayError::at(0, source))?;
        }
        alloc
            .empty_cache()
            .map_err(|source| ReplayError::at(0, source))?;
        Some(AfterEmptyCache {
            stats: alloc.stats().unwrap_or_default(),
            phys_used: alloc.with_device(|d| d.phys_used()),
        })
    } else {
        None
    };
    let mut device = alloc.into_device();
    let report = ReplayReport {
        // The oracle counts the trace's allocations and frees, also when an error stopped the
        // replay.
        events: if fatal.is_some() {
            trace.stats.allocs + trace.stats.frees
        } else {
            events
        },
        stats,
        ooms,
        phys_used: device.phys_used(),
        va_reserved: device.va_reserved(),
        device: device.counters().clone(),
        mem_info_at_end,
        segments: device.take_log(),
        wall_ns,
        cpu_ns,
        stopped_early,
        samples,
        after_empty_cache,
        snapshot,
        fatal_error: fatal
            .as_ref()
            .map(|(line, e): &(u64, AllocError)| (*line, e.torch_message())),
        pools,
    };
    match fatal {
        None => Ok(report),
        Some((line, source)) => Err(ReplayError {
            line,
            source,
            report: Some(Box::new(report)),
        }),
    }
}
