//! Arguments shared by subcommands: the value parsers, the advisor's shared options as clap
//! flags, and what every command does on stderr (notes, warnings, progress, timing).

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cachalot_advisor::Tick;
use cachalot_app::workload::AdvisorOptions;
use cachalot_core::config::Warning;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use cachalot_app::workload::{parse_capacity, resolve_conf};

/// `--torch`'s reader: `2.9`, `2.9.1`, `2.9.1+cu128`; anything else is refused with the
/// input quoted and the releases cachalot knows.
pub fn parse_release(s: &str) -> Result<cachalot_core::config::TorchVersion, String> {
    s.parse()
        .map_err(|e: cachalot_core::config::VersionError| e.to_string())
}

/// Prints configuration warnings to stderr.
pub fn print_warnings(warnings: &[Warning]) {
    for w in warnings {
        eprintln!("cachalot: warning: {w}");
    }
}

/// Prints one of the application layer's notes on stderr.
pub fn note(n: String) {
    eprintln!("cachalot: {n}");
}

/// Options shared by `tune` and `compare`.
#[derive(clap::Args)]
pub struct AdvisorArgs {
    /// For torch snapshots with history on several devices: the device to replay.
    #[arg(long, value_name = "N", conflicts_with = "all_devices")]
    pub device: Option<u32>,
    /// For torch snapshots: every device with history, one configuration for all of them
    /// (the worst device decides).
    #[arg(long)]
    pub all_devices: bool,
    /// A common GPU instead of --capacity: CUDA's total memory on it, less --headroom.
    /// `--gpu list` prints the table (names, memory and where each figure comes from).
    #[arg(long, value_name = "NAME", conflicts_with = "capacity")]
    pub gpu: Option<String>,
    /// Memory to keep outside PyTorch's allocator (CUDA context, cuBLAS/cuDNN workspaces,
    /// NCCL), taken off the capacity, e.g. 1G.
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity)]
    pub headroom: Option<u64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report (memory timelines and the table) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Cost-model constants from a JSON file: {"cuda_free_us": 250, ...} (any subset; see
    /// docs/advisor.md).
    #[arg(long, value_name = "FILE")]
    pub cost_model: Option<PathBuf>,
    /// Override one cost-model constant, e.g. --cost synchronize_us=2000 (repeatable; applied
    /// after --cost-model).
    #[arg(long = "cost", value_name = "NAME=US")]
    pub costs: Vec<String>,
    /// Worker threads (default: all cores). The results do not depend on it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// No progress bar and no timing line on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

impl AdvisorArgs {
    /// The application layer's options.
    pub fn options(&self) -> AdvisorOptions {
        AdvisorOptions {
            device: self.device,
            all_devices: self.all_devices,
            gpu: self.gpu.clone(),
            headroom: self.headroom,
            cost_model: self.cost_model.clone(),
            costs: self.costs.clone(),
            threads: self.threads,
        }
    }

    /// For `--gpu list`: prints the GPU table and says so (the command then does nothing else).
    pub fn print_gpu_list(&self) -> bool {
        let list = self
            .gpu
            .as_deref()
            .is_some_and(|g| g.trim().eq_ignore_ascii_case("list"));
        if list {
            print!("{}", cachalot_app::gpus::table_text());
        }
        list
    }

    /// The search statistics and wall time, on stderr (they vary from run to run).
    pub fn stats_line(&self, what: fmt::Arguments<'_>, start: Instant) {
        if !self.quiet {
            eprintln!(
                "cachalot: {what} in {:.2} s on {} threads",
                start.elapsed().as_secs_f64(),
                self.threads.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                })
            );
        }
    }
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar (hidden if `quiet` or stderr is not a terminal).
    pub fn new(quiet: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(0),
            if quiet || !std::io::stderr().is_terminal() {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            },
        );
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} replaying {pos}/{len} [{elapsed}] {wide_bar}")
        {
            bar.set_style(style);
        }
        Progress { bar }
    }

    /// Counts work queued and done.
    pub fn tick(&self, t: Tick) {
        match t {
            Tick::Added(n) => self.bar.inc_length(n as u64),
            Tick::Done => self.bar.inc(1),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Writes an HTML report and says where.
pub fn write_html(path: &Path, page: &str) -> Result<()> {
    cachalot_trace::write_atomic(path, |w| w.write_all(page.as_bytes()))
        .with_context(|| format!("cannot write HTML report {}", path.display()))?;
    eprintln!("cachalot: wrote {}", path.display());
    Ok(())
}
