//! `cachalot explain SNAPSHOT`: why the out-of-memory recorded in a torch snapshot happened,
//! in numbers, and which option would have avoided it. The work is `cachalot_app::explain`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cachalot_app::explain::{ExplainRequest, explain};

use crate::args::parse_capacity;

/// Arguments of `cachalot explain`.
#[derive(clap::Args)]
pub struct Args {
    /// A torch memory snapshot (pickle or JSON, plain or gzip) whose history has an `oom`
    /// entry: taken at an out-of-memory, e.g. with `_dump_snapshot` in an OOM observer.
    snapshot: PathBuf,
    /// For a snapshot with history on several devices: the device. Default: the only device
    /// with history, else the only one with out-of-memory entries.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Device memory for the replays. Default: estimated from the snapshot (free device
    /// memory at the out-of-memory plus what the allocator had reserved then).
    #[arg(long, value_parser = parse_capacity)]
    capacity: Option<u64>,
    /// Only read the snapshot; do not replay its history.
    #[arg(long)]
    no_replay: bool,
}

/// Runs `cachalot explain`.
pub fn run(a: Args) -> Result<ExitCode> {
    let r = explain(&ExplainRequest {
        snapshot: a.snapshot,
        device: a.device,
        capacity: a.capacity,
        replay: !a.no_replay,
    })?;
    print!("{}", r.text());
    Ok(ExitCode::SUCCESS)
}
