//! Driving the allocator with a loaded trace on the simulated device.
//!
//! The replay follows the oracle's rules: events in file order; an allocation that fails with
//! out-of-memory is counted and its later free skipped; zero-size allocations return no
//! pointer. Each device call is tagged with the trace line being replayed.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use cachalot_core::bounds::LimitFacts;
use cachalot_core::{
    AllocConf, AllocError, Backend, DeviceStats, MemInfo, MemorySnapshot, OomReport, StreamId,
};
use cachalot_sim::{LogEntry, SimConfig, SimCounters, SimDevice};

use crate::accounts::{Accounting, PoolAccount, PoolTracking};
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
    /// Find where reserved and allocated memory peaked, each pool's own peak, and the pools'
    /// account at the end ([`ReplayReport::pool_tracking`]; `crate::pool_account`).
    pub pool_peaks: bool,
    /// Take the pools' account after each of these operations (ascending); the replay stops
    /// after the last one ([`ReplayReport::accounts`]).
    pub accounts_at: Vec<usize>,
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
            pool_peaks: false,
            accounts_at: Vec::new(),
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
    /// Where the peaks were and the pools' account at the end, if asked for
    /// ([`ReplayOptions::pool_peaks`]) and the backend keeps pools.
    pub pool_tracking: Option<PoolTracking>,
    /// The accounts asked for with [`ReplayOptions::accounts_at`].
    pub accounts: Vec<PoolAccount>,
    /// How close the run came to its fraction limit and GC threshold (caching allocator
    /// only).
    pub limits: Option<LimitFacts>,
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
    hook: Option<(usize, &mut ReplayHook<'_>)>,
) -> Result<ReplayReport, ReplayError> {
    let (alloc, tag) = open_target(opts)?;
    let mut run = Run::new(trace, opts, alloc, tag);
    let clock = Clock::start();
    run.all_rows(hook);
    let (wall_ns, cpu_ns) = clock.read();
    run.finish(wall_ns, cpu_ns)
}

/// The allocator under `opts` on a fresh simulated device, and the handle that tags each
/// device call with the trace line being replayed.
fn open_target(opts: &ReplayOptions) -> Result<(Target, Arc<AtomicI64>), ReplayError> {
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
    Ok((alloc, tag))
}

/// Wall and thread CPU time of the row loop.
struct Clock {
    wall: Instant,
    cpu: cpu_time::ThreadTime,
}

impl Clock {
    fn start() -> Self {
        Clock {
            wall: Instant::now(),
            cpu: cpu_time::ThreadTime::now(),
        }
    }

    /// Nanoseconds since [`Clock::start`]: (wall, CPU).
    fn read(&self) -> (u128, u128) {
        (
            self.wall.elapsed().as_nanos(),
            self.cpu.elapsed().as_nanos(),
        )
    }
}

/// Why the row loop ended before the trace did.
enum Stop {
    /// An out-of-memory under `stop_at_first_oom`, or the hook said stop.
    Early,
    /// An error torch treats as fatal, at this trace line.
    Fatal(u64, AllocError),
}

/// Rows between two checks of the stop flag ([`cachalot_trace::interrupt`]): a check costs
/// one relaxed load; 4,096 rows take well under a millisecond.
const INTERRUPT_EVERY: usize = 4096;

/// [`Stop::Early`] at every [`INTERRUPT_EVERY`]-th row once a stop is asked (Ctrl-C, SIGTERM):
/// the replay ends as a cut-short one, and the front end that asked reports the interruption.
#[inline(always)]
fn interrupted_at(i: usize) -> Result<(), Stop> {
    if i.is_multiple_of(INTERRUPT_EVERY) && cachalot_trace::interrupt::requested().is_some() {
        return Err(Stop::Early);
    }
    Ok(())
}

/// A replay in progress: the allocator and what the rows have done to it so far.
struct Run<'t> {
    trace: &'t LoadedTrace,
    opts: &'t ReplayOptions,
    alloc: Target,
    backend: Backend,
    tag: Arc<AtomicI64>,
    /// The pointer each trace slot holds now (0: none).
    ptrs: Vec<u64>,
    /// Slots whose allocation failed, so that their free is skipped.
    failed: Vec<bool>,
    ooms: OomSummary,
    samples: Vec<Sample>,
    /// Allocation and free rows replayed (pool rows are not events).
    events: u64,
    stopped_early: bool,
    fatal: Option<(u64, AllocError)>,
    pool_rows: PoolReplay,
    /// The pool accounts asked for (`None`: none, and no work per row).
    accounting: Option<Box<Accounting>>,
    /// The last operation replayed.
    last_op: usize,
    /// The next operations at which a timeline sample and the hook are due (counted, not
    /// divided: this runs after every row).
    next_sample: usize,
    next_hook: usize,
}

impl<'t> Run<'t> {
    fn new(
        trace: &'t LoadedTrace,
        opts: &'t ReplayOptions,
        alloc: Target,
        tag: Arc<AtomicI64>,
    ) -> Self {
        Run {
            trace,
            opts,
            backend: alloc.backend(),
            alloc,
            tag,
            ptrs: vec![0u64; trace.slots as usize],
            failed: vec![false; trace.slots as usize],
            ooms: OomSummary::default(),
            samples: Vec::new(),
            events: 0,
            stopped_early: false,
            fatal: None,
            pool_rows: PoolReplay::default(),
            accounting: Accounting::of(opts.pool_peaks, &opts.accounts_at),
            last_op: trace.ops.len().saturating_sub(1),
            next_sample: 0,
            next_hook: 0,
        }
    }

    /// Replays the trace's rows in file order until the end or the first [`Stop`]. Never
    /// inlined, so that a profiler can count the row loop alone (`--toggle-collect`).
    #[inline(never)]
    fn all_rows(&mut self, mut hook: Option<(usize, &mut ReplayHook<'_>)>) {
        let per_row = self.accounting.is_some() || self.opts.sample_every > 0;
        let end = if per_row || self.opts.log_segments {
            self.checked_rows(&mut hook)
        } else {
            self.lean_rows(&mut hook)
        };
        match end {
            Ok(()) => {}
            Err((i, Stop::Early)) => {
                self.stopped_early = true;
                self.last_op = i;
            }
            Err((i, Stop::Fatal(line, source))) => {
                self.fatal = Some((line, source));
                self.last_op = i;
            }
        }
    }

    /// The row loop with every per-row duty: the device-call tag, the pool accounts, the
    /// timeline samples and the hook.
    fn checked_rows(
        &mut self,
        hook: &mut Option<(usize, &mut ReplayHook<'_>)>,
    ) -> Result<(), (usize, Stop)> {
        for (i, op) in self.trace.ops.iter().enumerate() {
            interrupted_at(i).map_err(|stop| (i, stop))?;
            if self.opts.log_segments {
                self.tag.store(op.line() as i64, Ordering::Relaxed);
            }
            self.events += u64::from(!matches!(op, TraceOp::Pool { .. }));
            let step = self
                .row(i, op)
                .and_then(|oom_now| self.after_row(i, oom_now, hook));
            step.map_err(|stop| (i, stop))?;
        }
        Ok(())
    }

    /// The row loop when nothing is due per row (no device-call log, no accounts, no
    /// samples: the bench's replays and most of the advisor's): the rows, and the hook only
    /// at its operations and at an out-of-memory.
    fn lean_rows(
        &mut self,
        hook: &mut Option<(usize, &mut ReplayHook<'_>)>,
    ) -> Result<(), (usize, Stop)> {
        let hooked = hook.is_some();
        let mut next_hook = if hooked { self.next_hook } else { usize::MAX };
        let mut events = 0u64;
        let mut end = Ok(());
        for (i, op) in self.trace.ops.iter().enumerate() {
            if let Err(stop) = interrupted_at(i) {
                end = Err((i, stop));
                break;
            }
            events += u64::from(!matches!(op, TraceOp::Pool { .. }));
            let step = match self.row(i, op) {
                Ok(oom_now) if hooked && (oom_now || i == next_hook) => {
                    let r = self.after_row(i, oom_now, hook);
                    next_hook = self.next_hook;
                    r
                }
                Ok(_) => Ok(()),
                Err(stop) => Err(stop),
            };
            if let Err(stop) = step {
                end = Err((i, stop));
                break;
            }
        }
        self.events += events;
        end
    }

    /// One trace row; `Ok(true)` when it was an allocation that failed with out-of-memory.
    /// Inlined into both row loops (a call per row costs more than the loop's own work).
    #[inline(always)]
    fn row(&mut self, i: usize, op: &TraceOp) -> Result<bool, Stop> {
        match *op {
            TraceOp::Alloc {
                slot,
                size,
                stream,
                line,
            } => self.alloc_row(i, slot as usize, size, stream, line),
            TraceOp::Free { slot, line } => self.free_row(slot as usize, line).map(|()| false),
            TraceOp::Pool { op, line } => self
                .pool_rows
                .apply(
                    &self.alloc,
                    self.trace,
                    op,
                    &self.ptrs,
                    self.opts.ignore_streams,
                )
                .map(|()| false)
                .map_err(|source| Stop::Fatal(line, source)),
        }
    }

    /// An allocation row: out-of-memory is counted (`Ok(true)`, and stops the replay only
    /// under `stop_at_first_oom`), anything else is fatal.
    #[inline]
    fn alloc_row(
        &mut self,
        i: usize,
        slot: usize,
        size: u64,
        stream: u32,
        line: u64,
    ) -> Result<bool, Stop> {
        let stream = if self.opts.ignore_streams { 0 } else { stream };
        let error = match self.alloc.malloc(size, StreamId(u64::from(stream))) {
            Ok(p) => {
                self.ptrs[slot] = p;
                return Ok(false);
            }
            Err(e) => MallocError::of(e, self.backend),
        };
        match error {
            MallocError::OutOfMemory(report, message) => {
                self.failed[slot] = true;
                self.count_oom(i, size, line, report, message);
                if self.opts.stop_at_first_oom {
                    return Err(Stop::Early);
                }
                Ok(true)
            }
            MallocError::Fatal(source) => Err(Stop::Fatal(line, source)),
        }
    }

    fn count_oom(
        &mut self,
        op_index: usize,
        size: u64,
        line: u64,
        report: Option<Box<OomReport>>,
        message: String,
    ) {
        self.ooms.count += 1;
        self.ooms.bytes_requested += u128::from(size);
        if self.ooms.events.len() < self.opts.max_oom_reports {
            self.ooms.events.push(OomEvent {
                line,
                op_index,
                report: report.map(|r| *r),
                message,
            });
        }
    }

    /// A free row; the free of an allocation that failed is skipped and counted.
    #[inline]
    fn free_row(&mut self, slot: usize, line: u64) -> Result<(), Stop> {
        let p = std::mem::take(&mut self.ptrs[slot]);
        if p != 0 {
            self.alloc
                .free(p)
                .map_err(|source| Stop::Fatal(line, source))?;
        } else if self.failed[slot] {
            self.ooms.skipped_frees += 1;
        }
        Ok(())
    }

    /// After row `i`: the timeline sample and the hook, each when due.
    #[inline]
    fn after_row(
        &mut self,
        i: usize,
        oom_now: bool,
        hook: &mut Option<(usize, &mut ReplayHook<'_>)>,
    ) -> Result<(), Stop> {
        if let Some(acc) = &mut self.accounting
            && acc.after_row(i, &self.alloc, self.trace)
        {
            return Err(Stop::Early);
        }
        if self.opts.sample_every > 0 && i == self.next_sample {
            self.next_sample += self.opts.sample_every;
            self.samples.push(self.alloc.with_stats(|s| Sample {
                op_index: i,
                allocated: s.allocated_bytes.all().current as u64,
                reserved: s.reserved_bytes.all().current as u64,
            }));
        }
        let Some((every, hook)) = hook.as_mut() else {
            return Ok(());
        };
        let due = *every > 0 && i == self.next_hook;
        if due {
            self.next_hook += *every;
        }
        if !(oom_now || due) {
            return Ok(());
        }
        let device = self.alloc.with_device(|d| d.counters().clone());
        let flow = self.alloc.with_stats(|stats| {
            hook(&Progress {
                op_index: i,
                stats,
                device: &device,
                ooms: self.ooms.count,
                oom_now,
            })
        });
        if flow.is_break() {
            return Err(Stop::Early);
        }
        Ok(())
    }

    /// The end state, the optional clean-up, and the report (inside the error when a fatal
    /// error stopped the rows).
    fn finish(mut self, wall_ns: u128, cpu_ns: u128) -> Result<ReplayReport, ReplayError> {
        // Skipped frees are counted by the trace, not by what was replayed: an OOM'd
        // allocation whose free lies beyond an early stop is not counted.
        let mut stats = self.alloc.stats().unwrap_or_default();
        stats.num_sync_all_streams += self.pool_rows.extra_syncs();
        let mem_info_at_end = self
            .alloc
            .with_device(cachalot_core::Device::mem_get_info)
            .map_err(|e| ReplayError::at(0, e.into()))?;
        let pools = self.pool_rows.report(&self.alloc, self.trace);
        let mut accounting = self.accounting.take();
        let pool_tracking = accounting
            .as_mut()
            .and_then(|a| a.finish(&self.alloc, self.trace, self.last_op));
        let accounts = accounting.map(|a| a.taken).unwrap_or_default();
        let snapshot = if self.opts.snapshot_at_end {
            self.alloc.snapshot().ok()
        } else {
            None
        };
        let after_empty_cache = if self.opts.empty_cache_at_end && self.fatal.is_none() {
            Some(self.free_all_and_empty_cache()?)
        } else {
            None
        };
        let limits = self.alloc.limit_facts();
        let mut device = self.alloc.into_device();
        let report = ReplayReport {
            // The oracle counts the trace's allocations and frees, also when an error stopped
            // the replay.
            events: if self.fatal.is_some() {
                self.trace.stats.allocs + self.trace.stats.frees
            } else {
                self.events
            },
            stats,
            ooms: self.ooms,
            phys_used: device.phys_used(),
            va_reserved: device.va_reserved(),
            device: device.counters().clone(),
            mem_info_at_end,
            segments: device.take_log(),
            wall_ns,
            cpu_ns,
            stopped_early: self.stopped_early,
            samples: self.samples,
            after_empty_cache,
            snapshot,
            fatal_error: self
                .fatal
                .as_ref()
                .map(|(line, e)| (*line, e.torch_message())),
            pools,
            pool_tracking,
            accounts,
            limits,
        };
        match self.fatal {
            None => Ok(report),
            Some((line, source)) => Err(ReplayError {
                line,
                source,
                report: Some(Box::new(report)),
            }),
        }
    }

    /// [`ReplayOptions::empty_cache_at_end`]: frees what is still live, empties the cache,
    /// and reads the state then. Device calls are tagged with line -1.
    fn free_all_and_empty_cache(&self) -> Result<AfterEmptyCache, ReplayError> {
        self.tag.store(-1, Ordering::Relaxed);
        for p in self.ptrs.iter().copied().filter(|&p| p != 0) {
            self.alloc
                .free(p)
                .map_err(|source| ReplayError::at(0, source))?;
        }
        self.alloc
            .empty_cache()
            .map_err(|source| ReplayError::at(0, source))?;
        Ok(AfterEmptyCache {
            stats: self.alloc.stats().unwrap_or_default(),
            phys_used: self.alloc.with_device(|d| d.phys_used()),
        })
    }
}
