//! `cachalot replay`: a trace through the allocator on the simulated device.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachalot_replay::report::{ReportMeta, report_json, summary_text, write_segments};
use cachalot_replay::{ReplayOptions, replay};
use cachalot_sim::SimConfig;

use crate::args::{load_trace, parse_size, print_warnings, resolve_conf};

/// Arguments of `cachalot replay`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace: RMM memory-log CSV (plain or gzip). Without it, a bundled GPT-2 training
    /// trace is replayed.
    trace: Option<PathBuf>,
    /// Allocator configuration (PYTORCH_CUDA_ALLOC_CONF grammar). Default: read the
    /// environment as PyTorch does.
    #[arg(long)]
    conf: Option<String>,
    /// Device memory, e.g. 24G, 512M or bytes.
    #[arg(long, default_value = "80G", value_parser = parse_size)]
    capacity: u64,
    /// Print the oracle-compatible JSON object instead of the summary.
    #[arg(long)]
    json: bool,
    /// Write every device call to FILE as CSV (the oracle's --segments format).
    #[arg(long, value_name = "FILE")]
    segments: Option<PathBuf>,
    /// Replay every event on the default stream.
    #[arg(long)]
    ignore_streams: bool,
    /// Keep at most N OOM messages.
    #[arg(long, default_value_t = 5, value_name = "N")]
    max_oom_messages: usize,
}

/// Runs `cachalot replay`.
pub fn run(a: Args) -> Result<ExitCode> {
    let resolved = resolve_conf(a.conf.as_deref())?;
    print_warnings(&resolved.warnings);
    let (trace, name) = load_trace(a.trace.as_deref())?;
    let opts = ReplayOptions {
        conf: resolved.conf.clone(),
        sim: SimConfig::with_capacity(a.capacity),
        log_segments: a.segments.is_some(),
        ignore_streams: a.ignore_streams,
        max_oom_reports: a.max_oom_messages,
        ..ReplayOptions::default()
    };
    let report = replay(&trace, &opts)?;
    if let Some(path) = &a.segments {
        let f = File::create(path)
            .with_context(|| format!("cannot create segments file {}", path.display()))?;
        write_segments(BufWriter::new(f), &report.segments)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        let meta = ReportMeta {
            trace: name,
            pytorch_cuda_alloc_conf: resolved.pytorch_cuda_alloc_conf,
            pytorch_alloc_conf: resolved.pytorch_alloc_conf,
            cachalot_alloc_conf: resolved.cachalot_alloc_conf,
            ignore_streams: a.ignore_streams,
        };
        let v = report_json(&report, &resolved.conf, &trace.stats, a.capacity, &meta);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("trace: {name}");
        print!("{}", summary_text(&report, &trace.stats, a.capacity));
    }
    Ok(ExitCode::SUCCESS)
}
