//! `cachalot compare`: several configurations side by side on one trace. The work is
//! `cachalot_app::compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cachalot_app::compare::{CompareRequest, compare};

use cachalot_core::config::TorchVersion;

use crate::args::{AdvisorArgs, Progress, note, parse_capacity, parse_release, write_html};

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
    /// Make the decisions of this torch release (2.4 … 2.15, e.g. 2.9 or 2.9.1+cu128) where
    /// releases differ. Default: the release the trace's STEM.device.json recorded, else 2.15.
    #[arg(long, value_name = "VERSION", value_parser = parse_release)]
    torch: Option<TorchVersion>,
    #[command(flatten)]
    common: AdvisorArgs,
}

/// Runs `cachalot compare`.
pub fn run(a: Args) -> Result<ExitCode> {
    if a.common.print_gpu_list() {
        return Ok(ExitCode::SUCCESS);
    }
    let req = CompareRequest {
        traces: a.traces,
        confs: a.confs,
        capacity: a.capacity,
        min_capacity: !a.no_min_capacity,
        release: a.torch,
        common: a.common.options(),
    };
    let progress = Progress::new(a.common.quiet);
    let tick = |t: cachalot_advisor::Tick| progress.tick(t);
    let start = std::time::Instant::now();
    let r = compare(&req, Some(&tick), &mut note)?;
    progress.finish();
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&r.json())?);
    } else {
        print!("{}", r.text());
    }
    a.common.stats_line(
        format_args!("{} configurations", r.result.rows.len()),
        start,
    );
    if let Some(path) = &a.common.html {
        write_html(path, &r.html()?)?;
    }
    Ok(ExitCode::SUCCESS)
}
