//! `cachalot tune`: which `PYTORCH_CUDA_ALLOC_CONF` for this trace on this device, or the
//! smallest device it fits on (`--min-capacity`). The work is `cachalot_app::tune`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cachalot_advisor::Tick;
use cachalot_app::tune::{TuneRequest, tune};
use cachalot_core::config::TorchVersion;

use crate::args::{AdvisorArgs, Progress, note, parse_capacity, parse_release, write_html};

/// Arguments of `cachalot tune`.
#[derive(clap::Args)]
pub struct Args {
    /// The traces: RMM memory-log CSVs or torch memory snapshots (pickle or JSON), plain or
    /// gzip. Several (the ranks of one job): one configuration that works for all of them.
    /// Without any, the bundled GPT-2 training trace.
    traces: Vec<PathBuf>,
    /// Device memory to tune for, e.g. 24G, 16GiB, 512M. Default: for snapshots that ran out
    /// of memory, the capacity they recorded.
    #[arg(long, value_parser = parse_capacity)]
    capacity: Option<u64>,
    /// Instead: find the smallest device (64 MiB steps) the trace fits on, and the
    /// configuration to use there.
    #[arg(long)]
    min_capacity: bool,
    /// How many of the best configurations to show (and keep exact).
    #[arg(long, default_value_t = 8, value_name = "N")]
    top: usize,
    /// The torch release the job runs on (2.4 … 2.15, e.g. 2.9 or 2.9.1+cu128): recommend
    /// only keys and values it accepts, with every replay making its decisions. Default: the
    /// release the trace's STEM.device.json recorded, else 2.15.
    #[arg(long, value_name = "VERSION", value_parser = parse_release)]
    torch: Option<TorchVersion>,
    #[command(flatten)]
    common: AdvisorArgs,
}

/// Runs `cachalot tune`.
pub fn run(a: Args) -> Result<ExitCode> {
    if a.common.print_gpu_list() {
        return Ok(ExitCode::SUCCESS);
    }
    let req = TuneRequest {
        traces: a.traces,
        capacity: a.capacity,
        min_capacity: a.min_capacity,
        top: a.top,
        release: a.torch,
        common: a.common.options(),
    };
    let progress = Progress::new(a.common.quiet);
    let tick = |t: Tick| progress.tick(t);
    let start = std::time::Instant::now();
    let r = tune(&req, Some(&tick), &mut note)?;
    progress.finish();
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&r.json())?);
    } else {
        print!("{}", r.text());
    }
    a.common.stats_line(format_args!("{}", r.stats()), start);
    if let Some(path) = &a.common.html
        && let Some(page) = r.html()?
    {
        write_html(path, &page)?;
    }
    Ok(ExitCode::from(r.exit_status()))
}
