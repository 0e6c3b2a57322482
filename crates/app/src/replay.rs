//! `replay`: one trace through the allocator on the simulated device, with what the CLI
//! reports around it: the pools' accounts at the peaks and at the first out-of-memory (one
//! replay more each), the explanation of an out-of-memory (diagnose's replays), and the files
//! a replay can leave (segments, a torch snapshot where it ends).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cachalot_core::config::{self, Settings, TorchVersion};
use cachalot_replay::diagnose::diagnose;
use cachalot_replay::input::check_window;
use cachalot_replay::pool_account::{
    PoolAccount, PoolPeaks, account_at, account_json, oom_account_text, pool_peaks,
    pool_peaks_json, pool_peaks_text,
};
use cachalot_replay::report::{ReportMeta, report_json, summary_text, write_segments};
use cachalot_replay::{LoadedInput, ReplayError, ReplayOptions, ReplayReport};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{Snapshot, memory_stats_json, memory_summary, write_pickle};
use cachalot_trace::write_atomic;

use crate::Notes;
use crate::release::{Release, ReleaseReport};
use crate::workload::{DEFAULT_CAPACITY, load_input, snapshot_conf};

/// What to replay and how (the CLI's `replay` options).
#[derive(Clone, Debug)]
pub struct ReplayRequest {
    /// The trace (none: the bundled one).
    pub trace: Option<PathBuf>,
    /// The configuration (PyTorch's grammar); default: the snapshot's own, else the
    /// environment's.
    pub conf: Option<String>,
    /// Device memory; default: what the snapshot recorded at an out-of-memory, else 80 GiB.
    pub capacity: Option<u64>,
    /// A snapshot's device.
    pub device: Option<u32>,
    /// Every event on the default stream.
    pub ignore_streams: bool,
    /// How many out-of-memory messages to keep.
    pub max_oom_messages: usize,
    /// Stop at the first out-of-memory.
    pub stop_at_oom: bool,
    /// Log every device call (for [`ReplayRun::write_segments`]).
    pub segments: bool,
    /// Keep a snapshot where the replay ends with at most this many history entries (for
    /// [`ReplayRun::write_snapshot`]).
    pub snapshot_entries: Option<usize>,
    /// Explain out-of-memory errors in the text (more replays).
    pub explain: bool,
    /// Torch's `memory_summary()` table at the end of the text.
    pub summary: bool,
    /// The torch release whose decisions to make (`None`: the one the trace's
    /// `STEM.device.json` recorded, else 2.15).
    pub release: Option<TorchVersion>,
}

impl Default for ReplayRequest {
    fn default() -> Self {
        ReplayRequest {
            trace: None,
            conf: None,
            capacity: None,
            device: None,
            ignore_streams: false,
            max_oom_messages: 5,
            stop_at_oom: false,
            segments: false,
            snapshot_entries: None,
            explain: true,
            summary: false,
            release: None,
        }
    }
}

/// A replay done, with everything its reports need.
pub struct ReplayRun {
    req: ReplayRequest,
    input: LoadedInput,
    name: String,
    resolved: Settings,
    /// The release replayed as, and what it makes of the configuration.
    torch: ReleaseReport,
    capacity: u64,
    opts: ReplayOptions,
    /// The replay's report (up to the fatal error, if one stopped it).
    pub report: ReplayReport,
    /// The fatal error (torch's `c10::Error`) that stopped the replay, if any.
    pub fatal: Option<ReplayError>,
    pools: Option<PoolPeaks>,
    at_oom: Option<PoolAccount>,
}

/// Runs `req`; notes for stderr (the configuration chosen, the capacity recorded, warnings)
/// go to `notes` as they arise.
pub fn replay(req: ReplayRequest, notes: Notes) -> Result<ReplayRun> {
    if req.snapshot_entries == Some(0) {
        bail!("--history-entries 0: torch keeps at least 1 entry; give N >= 1");
    }
    let release = Release::choose(req.release, req.trace.as_deref());
    let (input, name) = load_input(req.trace.as_deref(), req.device)?;
    let (resolved, torch) = release.settle(snapshot_conf(req.conf.as_deref(), &input, notes)?)?;
    for w in &resolved.warnings {
        notes(format!("warning: {w}"));
    }
    torch.announce(notes);
    for note in input.notes() {
        notes(note);
    }
    let trace = &input.trace;
    if trace.stats.allocs == 0 {
        bail!(
            "{name}: the trace has no allocation events ({} data rows read, {} frees): nothing to replay",
            trace.stats.lines,
            trace.stats.frees + trace.stats.unmatched_frees
        );
    }
    let recorded_capacity = input.recorded().and_then(|r| r.capacity);
    let capacity = match (req.capacity, recorded_capacity) {
        (Some(c), _) => c,
        (None, Some(c)) => {
            notes(format!(
                "capacity: {} (where the snapshot ran out of memory: free device \
                 memory plus reserved at its last out-of-memory); pass --capacity to change it",
                cachalot_core::format_size(c)
            ));
            c
        }
        (None, None) => DEFAULT_CAPACITY,
    };
    if input.snapshot_events().is_some_and(|e| e.reconstructed > 0)
        && req.conf.is_none()
        && let Some(check) = check_window(&input, &resolved.conf)?
    {
        notes(check.to_string());
    }
    let opts = ReplayOptions {
        conf: resolved.conf.clone(),
        sim: SimConfig::with_capacity(capacity),
        log_segments: req.segments,
        ignore_streams: req.ignore_streams,
        max_oom_reports: req.max_oom_messages,
        stop_at_first_oom: req.stop_at_oom,
        history_entries: req.snapshot_entries,
        snapshot_at_end: req.snapshot_entries.is_some(),
        device_index: input.snapshot_events().map_or(0, |e| e.device),
        pool_peaks: !trace.pools.is_empty(),
        ..ReplayOptions::default()
    };
    // A fatal error still reports what happened up to it, as the oracle does.
    let (report, fatal) = match cachalot_replay::replay(trace, &opts) {
        Ok(r) => (r, None),
        Err(mut e) => match e.report.take() {
            Some(r) => (*r, Some(e)),
            None => return Err(e.into()),
        },
    };
    // Where the trace uses pools: each pool's share at the peaks (one more replay), and what
    // the pools held when the first out-of-memory's retry could free no more.
    let pools = pool_peaks(trace, &opts, &report)?;
    let at_oom = match (&pools, report.ooms.events.first()) {
        (Some(_), Some(oom)) => account_at(trace, &opts, oom.op_index),
        _ => None,
    };
    Ok(ReplayRun {
        req,
        input,
        name,
        resolved,
        torch,
        capacity,
        opts,
        report,
        fatal,
        pools,
        at_oom,
    })
}

impl ReplayRun {
    /// The capacity replayed at.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// What `replay --json` prints: the oracle-compatible object with `memory_stats`, and
    /// `pool_accounts` where the trace uses pools.
    pub fn json(&self) -> serde_json::Value {
        let raw = |var: &str| self.resolved.source.value(var).map(String::from);
        let meta = ReportMeta {
            trace: self.name.clone(),
            pytorch_cuda_alloc_conf: raw(config::CUDA_VAR),
            pytorch_alloc_conf: raw(config::ALLOC_VAR),
            cachalot_alloc_conf: raw(config::CACHALOT_VAR),
            ignore_streams: self.req.ignore_streams,
        };
        let stats = &self.input.trace.stats;
        let mut v = report_json(
            &self.report,
            &self.resolved.conf,
            stats,
            self.capacity,
            &meta,
        );
        if let Some(m) = v.as_object_mut() {
            self.torch.add_json(m);
            m.insert("memory_stats".into(), memory_stats_json(&self.report.stats));
            if let Some(p) = &self.pools {
                let mut v = pool_peaks_json(p);
                if let Some(acc) = &self.at_oom {
                    v["at_first_oom"] = account_json(acc);
                }
                m.insert("pool_accounts".into(), v);
            }
        }
        v
    }

    /// What `replay` prints for people (empty when a fatal error stopped it: the error says
    /// it). Explaining an out-of-memory replays the trace again.
    pub fn text(&self) -> Result<String> {
        use std::fmt::Write as _;
        if self.fatal.is_some() {
            return Ok(String::new());
        }
        let mut out = format!("trace: {}\n", self.name);
        out.push_str(&self.torch.text());
        if self.opts.conf.backend == cachalot_core::Backend::CudaMallocAsync {
            out.push_str(
                "backend: cudaMallocAsync (the simulated stream-ordered pool caches nothing)\n",
            );
        } else if self.opts.conf.backend == cachalot_core::Backend::Uncached {
            out.push_str(
                "backend: no caching (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every request is a cudaMalloc, and torch's statistics stay at 0\n",
            );
        }
        let trace = &self.input.trace;
        out.push_str(&summary_text(&self.report, &trace.stats, self.capacity));
        if let Some(p) = &self.pools {
            out.push_str(&pool_peaks_text(p));
            let mut lines = vec![p.at_peak_reserved.line, p.at_peak_allocated.line];
            lines.dedup();
            for line in lines {
                if let Some(what) = self.input.describe_line(line) {
                    let _ = writeln!(out, "  (line {line} is {what})");
                }
            }
        }
        // A snapshot has no lines: say which history entries the lines above are.
        let shown = self
            .report
            .ooms
            .events
            .iter()
            .take(self.req.max_oom_messages);
        for line in shown.map(|e| e.line) {
            if let Some(what) = self.input.describe_line(line) {
                let _ = writeln!(out, "  (line {line} is {what})");
            }
        }
        if self.req.summary {
            out.push_str(&memory_summary(&self.report.stats, 0, false));
        }
        if self.report.ooms.count > 0
            && self.req.explain
            && let Some(mut d) = diagnose(trace, &self.opts)?
        {
            d.line_name = self
                .input
                .describe_line(d.line)
                .map(|what| format!("line {} = {what}", d.line));
            let _ = write!(out, "{d}");
        }
        if let Some(acc) = &self.at_oom {
            out.push_str(&oom_account_text(acc));
        }
        Ok(out)
    }

    /// 3 when a fatal error stopped the replay (the oracle's status), 1 when it ran out of
    /// memory (so a script can test whether a trace fits), else 0.
    pub fn exit_status(&self) -> u8 {
        if self.fatal.is_some() {
            3
        } else if self.report.ooms.count > 0 {
            1
        } else {
            0
        }
    }

    /// Writes every device call as CSV (the oracle's `--segments` format), atomically.
    pub fn write_segments(&self, path: &Path) -> Result<()> {
        write_atomic(path, |w| write_segments(w, &self.report.segments))
            .with_context(|| format!("cannot write segments file {}", path.display()))
    }

    /// Writes the torch snapshot taken where the replay ended (if one was asked for), as the
    /// pickle `torch.cuda.memory._dump_snapshot()` writes.
    pub fn write_snapshot(&self, path: &Path) -> Result<()> {
        let Some(snap) = &self.report.snapshot else {
            return Ok(());
        };
        let snap = Snapshot::from_allocator(&snap.segments, &snap.trace, &self.resolved.conf, 0);
        write_atomic(path, |w| write_pickle(&snap, w))
            .with_context(|| format!("cannot write snapshot file {}", path.display()))
    }
}
