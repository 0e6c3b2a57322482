//! `cachalot tune`: which `PYTORCH_CUDA_ALLOC_CONF` for this trace on this device, or the
//! smallest device it fits on (`--min-capacity`).

use std::path::PathBuf;
use std::process::ExitCode;

use std::fmt;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cachalot_advisor::{
    Candidate, CostModel, Tick, TuneOptions, TuneResult, html, min_capacity, record_timelines,
    text, tune,
};
use cachalot_replay::LoadedTrace;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::args::{load_trace, parse_size};

/// Arguments of `cachalot tune`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace: RMM memory-log CSV (plain or gzip). Without it, the bundled GPT-2 training
    /// trace.
    trace: Option<PathBuf>,
    /// Device memory to tune for, e.g. 24G, 16GiB, 512M or bytes.
    #[arg(long, value_parser = parse_size, required_unless_present = "min_capacity")]
    capacity: Option<u64>,
    /// Instead: find the smallest device (64 MiB steps) the trace fits on, and the
    /// configuration to use there.
    #[arg(long)]
    min_capacity: bool,
    /// How many of the best configurations to show (and keep exact).
    #[arg(long, default_value_t = 8, value_name = "N")]
    top: usize,
    #[command(flatten)]
    common: AdvisorArgs,
}

/// Runs `cachalot tune`.
pub fn run(a: Args) -> Result<ExitCode> {
    let (trace, name) = load_trace(a.trace.as_deref())?;
    let cost = a.common.cost_model()?;
    let progress = Progress::new(a.common.quiet);
    let tick = |t: Tick| progress.tick(t);
    let opts = TuneOptions {
        capacity: a.capacity.unwrap_or(0),
        cost,
        threads: a.common.threads,
        top: a.top.max(1),
        progress: Some(&tick),
    };
    let start = std::time::Instant::now();
    if a.min_capacity {
        let r = min_capacity(&trace, &opts)?;
        progress.finish();
        if a.common.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&text::min_capacity_json(&r))?
            );
        } else {
            print!("{}", text::min_capacity_text(&r, &name, trace.ops.len()));
        }
        a.common.stats_line(
            format_args!(
                "{} configurations for the smallest device, then a search there",
                r.searched
            ),
            start,
        );
        if let (Some(path), Some(t)) = (&a.common.html, &r.tune) {
            html_report(&trace, &name, t, &opts, path)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if opts.capacity == 0 {
        bail!("tune needs --capacity SIZE (e.g. --capacity 24G), or --min-capacity");
    }
    let r = tune(&trace, &opts)?;
    progress.finish();
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&text::tune_json(&r))?);
    } else {
        print!("{}", text::tune_text(&r, &name, trace.ops.len()));
    }
    a.common.stats_line(
        format_args!(
            "{} configurations, {} replays ({} cut short once beaten)",
            r.searched, r.stats.replays, r.stats.cut_short
        ),
        start,
    );
    if let Some(path) = &a.common.html {
        html_report(&trace, &name, &r, &opts, path)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The charts show the best three, the default and the common advice.
fn html_report(
    trace: &LoadedTrace,
    name: &str,
    r: &TuneResult,
    opts: &TuneOptions,
    path: &Path,
) -> Result<()> {
    let mut shown: Vec<Candidate> = Vec::new();
    for e in r
        .ranking
        .iter()
        .take(3)
        .chain(std::iter::once(&r.default))
        .chain(&r.advice)
    {
        if !shown.iter().any(|c| c.label == e.candidate.label) {
            shown.push(e.candidate.clone());
        }
    }
    let timelines = record_timelines(trace, &shown, r.capacity, &opts.cost, opts.threads)
        .context("recording the timelines for the HTML report")?;
    write_html(path, &html::tune_page(r, name, &timelines))
}

/// Options shared by `tune` and `compare`.
#[derive(clap::Args)]
pub struct AdvisorArgs {
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
    /// The cost model: the defaults, then the file, then the overrides.
    pub fn cost_model(&self) -> Result<CostModel> {
        let mut m = CostModel::default();
        if let Some(path) = &self.cost_model {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read cost model file {}", path.display()))?;
            m.apply_json(&text)
                .with_context(|| format!("in cost model file {}", path.display()))?;
        }
        for c in &self.costs {
            m.apply_override(c)?;
        }
        if self.threads == Some(0) {
            bail!("invalid --threads '0': need at least one thread");
        }
        Ok(m)
    }

    /// The search statistics and wall time, on stderr (they vary from run to run).
    pub fn stats_line(&self, what: fmt::Arguments<'_>, start: Instant) {
        if !self.quiet {
            eprintln!(
                "cachalot: {what} in {:.2} s on {} threads",
                start.elapsed().as_secs_f64(),
                self.threads.unwrap_or_else(rayon_threads)
            );
        }
    }
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
    std::fs::write(path, page)
        .with_context(|| format!("cannot write HTML report {}", path.display()))?;
    eprintln!("cachalot: wrote {}", path.display());
    Ok(())
}
