//! `cachalot compare`: several configurations side by side on one trace.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachalot_advisor::{CompareOptions, compare, html, record_timelines, text};

use crate::args::parse_capacity;
use crate::cmd::tune::{AdvisorArgs, Progress, write_html};

/// Arguments of `cachalot compare`.
#[derive(clap::Args)]
pub struct Args {
    /// The traces: RMM memory-log CSVs or torch memory snapshots (pickle or JSON), plain or
    /// gzip; several are one workload (each row shows its worst trace). Without any, the
    /// bundled GPT-2 training trace.
    traces: Vec<PathBuf>,
    /// A configuration to compare (PYTORCH_CUDA_ALLOC_CONF grammar); repeat for more. The
    /// default configuration is always the first row.
    #[arg(long = "conf", value_name = "CONF")]
    confs: Vec<String>,
    /// Device memory for the OOM, retry and device-call columns, e.g. 24G. Default: for
    /// snapshots that ran out of memory, the capacity they recorded; else 80G.
    #[arg(long, value_parser = parse_capacity)]
    capacity: Option<u64>,
    /// Skip the minimum-capacity column (it takes several replays per configuration).
    #[arg(long)]
    no_min_capacity: bool,
    #[command(flatten)]
    common: AdvisorArgs,
}

/// Runs `cachalot compare`.
pub fn run(a: Args) -> Result<ExitCode> {
    // Configurations are checked before the trace is read, so a typo fails fast.
    cachalot_advisor::compare::candidates(&a.confs)?;
    let w = a.common.load(&a.traces)?;
    let mut src = w.source.clone();
    let capacity = match (a.capacity, &a.common.gpu, w.recorded_capacity()) {
        (None, None, None) => {
            let (c, note) = a.common.capacity(Some(80 << 30), &w)?;
            src.capacity_note = note;
            c
        }
        (given, _, _) => {
            let (c, note) = a.common.capacity(given, &w)?;
            src.capacity_note = note;
            c
        }
    };
    let progress = Progress::new(a.common.quiet);
    let tick = |t: cachalot_advisor::Tick| progress.tick(t);
    let opts = CompareOptions {
        capacity,
        cost: a.common.cost_model()?,
        threads: a.common.threads,
        min_capacity: !a.no_min_capacity,
        progress: Some(&tick),
        own: w.own_candidate()?.map(|c| c.label),
    };
    let start = std::time::Instant::now();
    let r = compare(&w.traces, &a.confs, &opts)?;
    progress.finish();
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&text::compare_json(&r))?);
    } else {
        print!("{}", text::compare_text(&r, &src));
    }
    a.common
        .stats_line(format_args!("{} configurations", r.rows.len()), start);
    if let Some(path) = &a.common.html {
        let cands: Vec<_> = r.rows.iter().map(|row| row.candidate.clone()).collect();
        let timelines = record_timelines(&w.traces[0], &cands, capacity, &opts.cost, opts.threads)
            .context("recording the timelines for the HTML report")?;
        write_html(path, &html::compare_page(&r, &src, &timelines))?;
    }
    Ok(ExitCode::SUCCESS)
}
