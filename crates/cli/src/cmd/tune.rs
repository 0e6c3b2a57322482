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
    Candidate, CostModel, Fit, Tick, TuneOptions, TuneResult, html, min_capacity, record_timelines,
    text, tune,
};
use cachalot_replay::{LoadedInput, LoadedTrace};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::args::parse_capacity;

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
    #[command(flatten)]
    common: AdvisorArgs,
}

/// Runs `cachalot tune`.
pub fn run(a: Args) -> Result<ExitCode> {
    let w = a.common.load(&a.traces)?;
    let cost = a.common.cost_model()?;
    let progress = Progress::new(a.common.quiet);
    let tick = |t: Tick| progress.tick(t);
    let mut src = w.source.clone();
    let capacity = if a.min_capacity {
        0
    } else {
        let (c, note) = a.common.capacity(a.capacity, &w)?;
        src.capacity_note = note;
        c
    };
    let opts = TuneOptions {
        capacity,
        cost,
        threads: a.common.threads,
        top: a.top.max(1),
        progress: Some(&tick),
        own: w.own_candidate()?,
    };
    let start = std::time::Instant::now();
    let traces = &w.traces;
    if a.min_capacity {
        let r = min_capacity(traces, &opts)?;
        let pools = match &r.tune {
            Some(t) => crate::cmd::compare::tune_pools(traces, t)?,
            None => None,
        };
        progress.finish();
        if a.common.json {
            let mut v = text::min_capacity_json(&r);
            if let (Some(p), Some(m)) = (&pools, v.get_mut("tune").and_then(|t| t.as_object_mut()))
            {
                m.insert("pool_accounts".into(), p.json());
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print!("{}", text::min_capacity_text(&r, &src));
            if let Some(p) = &pools {
                print!("{}", p.text());
            }
        }
        a.common.stats_line(
            format_args!(
                "{} configurations for the smallest device, then a search there",
                r.searched
            ),
            start,
        );
        if let (Some(path), Some(t)) = (&a.common.html, &r.tune) {
            html_report(&w, &src, t, Some(&r), &opts, path)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = tune(traces, &opts)?;
    let pools = crate::cmd::compare::tune_pools(traces, &r)?;
    progress.finish();
    if a.common.json {
        let mut v = text::tune_json(&r);
        if let (Some(p), Some(m)) = (pools, v.as_object_mut()) {
            m.insert("pool_accounts".into(), p.json());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", text::tune_text(&r, &src));
        if let Some(p) = pools {
            print!("{}", p.text());
        }
    }
    a.common.stats_line(
        format_args!(
            "{} configurations, {} replays ({} cut short once beaten; {} configurations given \
             the numbers of one that provably replays alike)",
            r.searched, r.stats.replays, r.stats.cut_short, r.stats.shared
        ),
        start,
    );
    if let Some(path) = &a.common.html {
        html_report(&w, &src, &r, None, &opts, path)?;
    }
    Ok(if r.fit == Fit::Fits {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The charts show the best three, the default and the common advice.
pub fn html_report(
    w: &Loaded,
    src: &text::Source,
    r: &TuneResult,
    min: Option<&cachalot_advisor::MinCapacityResult>,
    opts: &TuneOptions,
    path: &Path,
) -> Result<()> {
    // The charts replay the winner's worst trace.
    let trace = &w.traces[r.winner().metrics.part.min(w.traces.len() - 1)];
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
    let page = match min {
        Some(m) => html::min_capacity_page(m, r, src, &timelines),
        None => html::tune_page(r, src, &timelines),
    };
    write_html(path, &page)
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
    /// A common GPU instead of --capacity: its memory a process can use (see
    /// `--gpu list`), less --headroom.
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
    /// Loads the traces as one workload (see [`Loaded`]).
    pub fn load(&self, paths: &[PathBuf]) -> Result<Loaded> {
        Loaded::load(paths, self.device, self.all_devices)
    }

    /// The capacity to replay at, and where it comes from: `--capacity` or `--gpu`, else the
    /// capacity the snapshots recorded; less `--headroom`.
    pub fn capacity(&self, given: Option<u64>, w: &Loaded) -> Result<(u64, Option<String>)> {
        let (base, mut note) = match (given, &self.gpu) {
            (Some(c), _) => (c, None),
            (None, Some(name)) => {
                let g = cachalot_advisor::gpus::find(name)?;
                (
                    g.usable,
                    Some(format!(
                        "{}: {} usable by a process ({})",
                        g.name,
                        cachalot_core::format_size(g.usable),
                        g.source
                    )),
                )
            }
            (None, None) => match w.recorded_capacity() {
                Some(c) => (
                    c,
                    Some(format!(
                        "{}, where the snapshot ran out of memory (free device memory plus \
                         reserved at its last out-of-memory); pass --capacity to change it",
                        cachalot_core::format_size(c)
                    )),
                ),
                None => bail!(
                    "needs --capacity SIZE (e.g. --capacity 24G) or --gpu NAME, or \
                     --min-capacity"
                ),
            },
        };
        let Some(h) = self.headroom else {
            return Ok((base, note));
        };
        if h >= base {
            bail!(
                "--headroom {} leaves nothing of a {} device",
                cachalot_core::format_size(h),
                cachalot_core::format_size(base)
            );
        }
        let left = base - h;
        let line = format!(
            "{} for PyTorch's allocator: {} less {} headroom",
            cachalot_core::format_size(left),
            cachalot_core::format_size(base),
            cachalot_core::format_size(h)
        );
        note = Some(match note {
            Some(n) => format!("{line}; {n}"),
            None => line,
        });
        Ok((left, note))
    }

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
    cachalot_trace::write_atomic(path, |w| w.write_all(page.as_bytes()))
        .with_context(|| format!("cannot write HTML report {}", path.display()))?;
    eprintln!("cachalot: wrote {}", path.display());
    Ok(())
}

/// The inputs of `tune` or `compare` as one workload: each file (and, with --all-devices,
/// each device of a snapshot) is one part that the configuration must serve.
pub struct Loaded {
    /// The traces.
    pub traces: Vec<LoadedTrace>,
    /// The inputs they came from, less their traces (moved into `traces`).
    pub inputs: Vec<LoadedInput>,
    /// Names and notes for the reports.
    pub source: text::Source,
}

impl Loaded {
    fn load(paths: &[PathBuf], device: Option<u32>, all_devices: bool) -> Result<Loaded> {
        let mut inputs: Vec<(String, LoadedInput)> = Vec::new();
        if paths.is_empty() {
            if device.is_some() || all_devices {
                bail!("--device and --all-devices are for torch snapshots; no trace was given");
            }
            let (input, name) = crate::cmd::replay::load(None, None)?;
            inputs.push((name, input));
        }
        for p in paths {
            if all_devices {
                if !p.exists() {
                    bail!("trace file {} does not exist", p.display());
                }
                let all = cachalot_replay::input::load_all_devices(p)?;
                let several = all.len() > 1;
                for input in all {
                    let name = match input.snapshot_events() {
                        Some(e) if several && paths.len() == 1 => format!("device {}", e.device),
                        Some(e) if several => format!("{} (device {})", p.display(), e.device),
                        _ => p.display().to_string(),
                    };
                    inputs.push((name, input));
                }
            } else {
                let (input, name) = crate::cmd::replay::load(Some(p), device)?;
                let name = match (device, input.snapshot_events()) {
                    (Some(_), Some(e)) => format!("{name} (device {})", e.device),
                    _ => name,
                };
                inputs.push((name, input));
            }
        }
        let mut source = text::Source {
            name: if all_devices && paths.len() == 1 {
                format!("{} (all devices)", paths[0].display())
            } else {
                inputs
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            events: inputs.iter().map(|(_, i)| i.trace.ops.len()).sum(),
            ..text::Source::default()
        };
        if inputs.len() > 1 {
            source.parts = inputs.iter().map(|(n, _)| n.clone()).collect();
        }
        for (name, input) in &inputs {
            for note in input.notes() {
                source.notes.push(if inputs.len() > 1 {
                    format!("{name}: {note}")
                } else {
                    note
                });
            }
        }
        let (names, mut inputs): (Vec<String>, Vec<LoadedInput>) = inputs.into_iter().unzip();
        drop(names);
        Ok(Loaded {
            // Moved, not copied: a snapshot's trace can be hundreds of megabytes.
            traces: inputs
                .iter_mut()
                .map(|i| std::mem::take(&mut i.trace))
                .collect(),
            inputs,
            source,
        })
    }

    /// The smallest capacity the snapshots recorded at an out-of-memory, if any did.
    pub fn recorded_capacity(&self) -> Option<u64> {
        self.inputs
            .iter()
            .filter_map(|i| i.recorded().and_then(|r| r.capacity))
            .min()
    }

    /// The configuration the snapshots recorded (the first one's, if they differ).
    pub fn own_conf(&self) -> Option<String> {
        self.inputs
            .iter()
            .find_map(|i| i.recorded().and_then(|r| r.alloc_conf.clone()))
    }

    /// [`Loaded::own_conf`] as a candidate; a recorded string torch rejects is skipped with
    /// a warning.
    pub fn own_candidate(&self) -> Result<Option<Candidate>> {
        let Some(conf) = self.own_conf() else {
            return Ok(None);
        };
        match Candidate::parse(conf.trim()) {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                eprintln!("cachalot: warning: the snapshot's own configuration is not ranked: {e}");
                Ok(None)
            }
        }
    }
}
