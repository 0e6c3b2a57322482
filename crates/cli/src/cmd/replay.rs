//! `cachalot replay`: a trace through the allocator on the simulated device.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachalot_core::config::{self, Settings};
use cachalot_replay::diagnose::diagnose;
use cachalot_replay::input::check_window;
use cachalot_replay::pool_account::{
    account_at, account_json, oom_account_text, pool_peaks, pool_peaks_json, pool_peaks_text,
};
use cachalot_replay::report::{ReportMeta, report_json, summary_text, write_segments};
use cachalot_replay::{LoadOptions, LoadedInput, ReplayOptions, load_input, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{Snapshot, memory_stats_json, memory_summary, write_pickle};
use cachalot_trace::write_atomic;

use crate::args::{load_trace, parse_capacity, print_warnings, resolve_conf};

/// Arguments of `cachalot replay`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace: an RMM memory-log CSV, or a torch memory snapshot (pickle or its JSON
    /// form), plain or gzip; the format is read from the content. Without it, a bundled GPT-2
    /// training trace is replayed.
    trace: Option<PathBuf>,
    /// Allocator configuration (PYTORCH_CUDA_ALLOC_CONF grammar). Default: for a snapshot,
    /// the configuration it recorded (allocator_settings); else the environment, read as
    /// PyTorch does.
    #[arg(long)]
    conf: Option<String>,
    /// Device memory, e.g. 24G, 512M or bytes. Default: for a snapshot that ran out of
    /// memory, the capacity it recorded; else 80G.
    #[arg(long, value_parser = parse_capacity)]
    capacity: Option<u64>,
    /// Print the oracle-compatible JSON object (with `memory_stats`) instead of the summary.
    #[arg(long)]
    json: bool,
    /// Also print torch's `memory_summary()` table at the end of the replay.
    #[arg(long)]
    summary: bool,
    /// Write every device call to FILE as CSV (the oracle's --segments format).
    #[arg(long, value_name = "FILE")]
    segments: Option<PathBuf>,
    /// Write a torch memory snapshot (history and segments) where the replay ends to FILE,
    /// as the pickle `torch.cuda.memory._dump_snapshot()` writes (memory_viz opens it).
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
    /// Keep at most N history entries in the snapshot (torch's `max_entries`).
    #[arg(long, value_name = "N", default_value_t = usize::MAX, hide_default_value = true)]
    history_entries: usize,
    /// Stop at the first out-of-memory (a --snapshot is then taken there).
    #[arg(long)]
    stop_at_oom: bool,
    /// For a snapshot with history on several devices: the device to replay.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Replay every event on the default stream.
    #[arg(long)]
    ignore_streams: bool,
    /// Keep at most N OOM messages.
    #[arg(long, default_value_t = 5, value_name = "N")]
    max_oom_messages: usize,
    /// Do not explain out-of-memory errors (explaining replays the trace once more per
    /// candidate option).
    #[arg(long)]
    no_explain: bool,
}

/// Loads a trace argument as the program's whole workload (any supported format), or the
/// bundled trace.
pub fn load(path: Option<&Path>, device: Option<u32>) -> Result<(LoadedInput, String)> {
    match path {
        Some(p) => {
            if !p.exists() {
                anyhow::bail!("trace file {} does not exist", p.display());
            }
            let input = load_input(p, &LoadOptions::workload(device))?;
            if device.is_some() && input.snapshot_events().is_none() {
                anyhow::bail!(
                    "--device: {} is an RMM CSV trace, which has one device; --device is for \
                     torch snapshots with history on several devices",
                    p.display()
                );
            }
            Ok((input, p.display().to_string()))
        }
        None => {
            let (trace, name) = load_trace(None)?;
            Ok((
                LoadedInput {
                    trace,
                    kind: cachalot_replay::input::InputKind::RmmCsv,
                },
                name,
            ))
        }
    }
}

/// The configuration to replay: `--conf`, else the snapshot's own (said on stderr), else
/// the environment.
pub fn snapshot_conf(conf: Option<&str>, input: &LoadedInput) -> Result<Settings> {
    let recorded = input.recorded().and_then(|r| r.alloc_conf.clone());
    match (conf, recorded) {
        (None, Some(rec)) => {
            let resolved = resolve_conf(Some(&rec), None).with_context(|| {
                format!(
                    "the snapshot's own allocator_settings '{rec}' (pass --conf to replay another)"
                )
            })?;
            let shown = if rec.is_empty() {
                "the default".to_string()
            } else {
                format!("'{rec}'")
            };
            eprintln!(
                "cachalot: configuration: the snapshot's own ({shown}, from its \
                 allocator_settings); pass --conf to replay another"
            );
            for var in ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"] {
                if std::env::var_os(var).is_some() {
                    eprintln!(
                        "cachalot: note: {var} from the environment is not used for a snapshot; pass --conf \"${var}\" to use it"
                    );
                }
            }
            Ok(resolved)
        }
        _ => Ok(resolve_conf(conf, None)?),
    }
}

/// Runs `cachalot replay`. Exit status: 0 when every request was served, 1 when the replay
/// ran out of memory, 2 on an error.
pub fn run(a: Args) -> Result<ExitCode> {
    if a.history_entries == 0 {
        anyhow::bail!("--history-entries 0: torch keeps at least 1 entry; give N >= 1");
    }
    let (input, name) = load(a.trace.as_deref(), a.device)?;
    let resolved = snapshot_conf(a.conf.as_deref(), &input)?;
    print_warnings(&resolved.warnings);
    for note in input.notes() {
        eprintln!("cachalot: {note}");
    }
    let trace = &input.trace;
    if trace.stats.allocs == 0 {
        anyhow::bail!(
            "{name}: the trace has no allocation events ({} data rows read, {} frees): nothing to replay",
            trace.stats.lines,
            trace.stats.frees + trace.stats.unmatched_frees
        );
    }
    let recorded_capacity = input.recorded().and_then(|r| r.capacity);
    let capacity = match (a.capacity, recorded_capacity) {
        (Some(c), _) => c,
        (None, Some(c)) => {
            eprintln!(
                "cachalot: capacity: {} (where the snapshot ran out of memory: free device \
                 memory plus reserved at its last out-of-memory); pass --capacity to change it",
                cachalot_core::format_size(c)
            );
            c
        }
        (None, None) => 80 << 30,
    };
    if input.snapshot_events().is_some_and(|e| e.reconstructed > 0)
        && a.conf.is_none()
        && let Some(check) = check_window(&input, &resolved.conf)?
    {
        eprintln!("cachalot: {check}");
    }
    let opts = ReplayOptions {
        conf: resolved.conf.clone(),
        sim: SimConfig::with_capacity(capacity),
        log_segments: a.segments.is_some(),
        ignore_streams: a.ignore_streams,
        max_oom_reports: a.max_oom_messages,
        stop_at_first_oom: a.stop_at_oom,
        history_entries: a.snapshot.is_some().then_some(a.history_entries),
        snapshot_at_end: a.snapshot.is_some(),
        device_index: input.snapshot_events().map_or(0, |e| e.device),
        pool_peaks: !trace.pools.is_empty(),
        ..ReplayOptions::default()
    };
    // A fatal error (torch's `c10::Error`) still reports what happened up to it, as the oracle
    // does: the segments file, the JSON with `fatal_error`, and exit status 3.
    let (report, fatal) = match replay(trace, &opts) {
        Ok(r) => (r, None),
        Err(mut e) => match e.report.take() {
            Some(r) => (*r, Some(e)),
            None => return Err(e.into()),
        },
    };
    // Where the trace uses pools: each pool's share at the peaks, and what empty_cache can
    // give back (one more replay, up to the peaks).
    let pools = pool_peaks(trace, &opts, &report)?;
    // And after the first out-of-memory: what the pools held when the retry could free no more.
    let at_oom = match (&pools, report.ooms.events.first()) {
        (Some(_), Some(oom)) => account_at(trace, &opts, oom.op_index),
        _ => None,
    };
    if let Some(path) = &a.segments {
        write_atomic(path, |w| write_segments(w, &report.segments))
            .with_context(|| format!("cannot write segments file {}", path.display()))?;
    }
    if let (Some(path), Some(snap)) = (&a.snapshot, &report.snapshot) {
        let snap = Snapshot::from_allocator(&snap.segments, &snap.trace, &resolved.conf, 0);
        write_atomic(path, |w| write_pickle(&snap, w))
            .with_context(|| format!("cannot write snapshot file {}", path.display()))?;
    }
    if a.json {
        let raw = |var: &str| resolved.source.value(var).map(String::from);
        let meta = ReportMeta {
            trace: name,
            pytorch_cuda_alloc_conf: raw(config::CUDA_VAR),
            pytorch_alloc_conf: raw(config::ALLOC_VAR),
            cachalot_alloc_conf: raw(config::CACHALOT_VAR),
            ignore_streams: a.ignore_streams,
        };
        let mut v = report_json(&report, &resolved.conf, &trace.stats, capacity, &meta);
        if let Some(m) = v.as_object_mut() {
            m.insert("memory_stats".into(), memory_stats_json(&report.stats));
            if let Some(p) = &pools {
                let mut v = pool_peaks_json(p);
                if let Some(acc) = &at_oom {
                    v["at_first_oom"] = account_json(acc);
                }
                m.insert("pool_accounts".into(), v);
            }
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        if let Some(e) = &fatal {
            eprintln!("cachalot: {e}");
        }
        return Ok(exit_status(&report, fatal.is_some()));
    }
    if let Some(e) = fatal {
        eprintln!("cachalot: {e}");
        return Ok(exit_status(&report, true));
    }
    println!("trace: {name}");
    if opts.conf.backend == cachalot_core::Backend::CudaMallocAsync {
        println!("backend: cudaMallocAsync (the simulated stream-ordered pool caches nothing)");
    } else if opts.conf.backend == cachalot_core::Backend::Uncached {
        println!(
            "backend: no caching (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every request is a cudaMalloc, and torch's statistics stay at 0"
        );
    }
    print!("{}", summary_text(&report, &trace.stats, capacity));
    if let Some(p) = &pools {
        print!("{}", pool_peaks_text(p));
        let mut lines = vec![p.at_peak_reserved.line, p.at_peak_allocated.line];
        lines.dedup();
        for line in lines {
            if let Some(what) = input.describe_line(line) {
                println!("  (line {line} is {what})");
            }
        }
    }
    // A snapshot has no lines: say which history entries the lines above are.
    let shown = report.ooms.events.iter().take(a.max_oom_messages);
    for line in shown.map(|e| e.line) {
        if let Some(what) = input.describe_line(line) {
            println!("  (line {line} is {what})");
        }
    }
    if a.summary {
        print!("{}", memory_summary(&report.stats, 0, false));
    }
    if report.ooms.count > 0
        && !a.no_explain
        && let Some(mut d) = diagnose(trace, &opts)?
    {
        d.line_name = input
            .describe_line(d.line)
            .map(|what| format!("line {} = {what}", d.line));
        print!("{d}");
    }
    if let Some(acc) = &at_oom {
        print!("{}", oom_account_text(acc));
    }
    Ok(exit_status(&report, false))
}

/// 3 when a fatal error stopped the replay (the oracle's status), 1 when it ran out of memory
/// (so a script can test whether a trace fits), else 0.
fn exit_status(report: &cachalot_replay::ReplayReport, fatal: bool) -> ExitCode {
    if fatal {
        ExitCode::from(3)
    } else if report.ooms.count > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
