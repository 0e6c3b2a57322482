//! `cachalot replay`: a trace through the allocator on the simulated device. The work is
//! `cachalot_app::replay`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cachalot_app::gpu_dependent::for_trace;
use cachalot_app::replay::{ReplayRequest, replay};

use cachalot_core::config::TorchVersion;

use crate::args::{note, parse_capacity, parse_release};

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
    /// A common GPU instead of --capacity: CUDA's total memory on it (`--gpu list` prints
    /// the table); says what torch sizes by the GPU that may differ from the recording GPU.
    #[arg(long, value_name = "NAME", conflicts_with = "capacity")]
    gpu: Option<String>,
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
    /// Make the decisions of this torch release (2.4 … 2.15, e.g. 2.9 or 2.9.1+cu128) where
    /// releases differ. Default: the release the trace's STEM.device.json recorded, else 2.15.
    #[arg(long, value_name = "VERSION", value_parser = parse_release)]
    torch: Option<TorchVersion>,
}

/// Runs `cachalot replay`. Exit status: 0 when every request was served, 1 when the replay
/// ran out of memory, 3 when a fatal error stopped it, 2 on an error.
pub fn run(a: Args) -> Result<ExitCode> {
    let mut capacity = a.capacity;
    if let Some(name) = &a.gpu {
        if name.trim().eq_ignore_ascii_case("list") {
            print!("{}", cachalot_app::gpus::table_text());
            return Ok(ExitCode::SUCCESS);
        }
        let (g, dependent) = for_trace(name, a.trace.as_deref(), a.device)?;
        note(format!(
            "capacity: {}, CUDA's total on the {} ({})",
            cachalot_core::format_size(g.usable),
            g.name,
            g.key()
        ));
        for line in dependent.iter().flat_map(|d| d.lines()) {
            note(format!("note: {line}"));
        }
        capacity = Some(g.usable);
    }
    let req = ReplayRequest {
        trace: a.trace,
        conf: a.conf,
        capacity,
        device: a.device,
        ignore_streams: a.ignore_streams,
        max_oom_messages: a.max_oom_messages,
        stop_at_oom: a.stop_at_oom,
        segments: a.segments.is_some(),
        snapshot_entries: a.snapshot.is_some().then_some(a.history_entries),
        explain: !a.no_explain,
        summary: a.summary,
        release: a.torch,
    };
    if a.history_entries == 0 {
        anyhow::bail!("--history-entries 0: torch keeps at least 1 entry; give N >= 1");
    }
    let r = replay(req, &mut note)?;
    if let Some(path) = &a.segments {
        r.write_segments(path)?;
    }
    if let Some(path) = &a.snapshot {
        r.write_snapshot(path)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r.json())?);
    }
    if let Some(e) = &r.fatal {
        eprintln!("cachalot: {e}");
    } else if !a.json {
        print!("{}", r.text()?);
    }
    Ok(ExitCode::from(r.exit_status()))
}
