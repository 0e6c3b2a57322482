//! `cachalot-bench`: CPU time per replayed operation, next to torch 2.15's own allocator.
//!
//! Each trace × configuration is replayed `--runs` times through cachalot and, where the
//! oracle is set up, through torch's allocator, the two alternating so that a burst of load
//! on a shared machine hits both. The minimum of each counts, and the median is shown next to
//! it (with its own ratio) to show how much the load moved the numbers.
//!
//! - cachalot: the replaying thread's CPU time in the replay loop only.
//! - torch: the oracle's CPU time (user + system, of the whole process) on the trace, less
//!   its CPU time on the same trace with every action replaced by one it skips (`noop`):
//!   what is left is the replay loop, as the oracle reads and parses both files alike. The
//!   oracle's own `timing.ns_per_op` is a steady clock around its loop, which counts the time
//!   other processes had the core; it is shown too (`torch wall`).
//!
//! A trace of fewer than `--min-events` events (default 250,000) is replayed several times
//! over in each run, by both, as one trace: its rows again with the pointer ids of copy `r`
//! moved past those of copy `r − 1`, so each copy starts from the cache (and the live
//! allocations) the previous one left. On a short trace torch's replay loop is a few tens of
//! milliseconds against a process start of about as much, and the difference of two process
//! CPU times was mostly the start's noise; the copies make the loop dominate. The table
//! shows the number of copies (`reps`) and the events of all of them.
//!
//! Each row also says whether both made the same decisions (device allocations and frees,
//! peak reserved bytes, OOMs).

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use cachalot_core::config::{Overrides, Settings};
use cachalot_replay::{LoadedTrace, ReplayOptions, ReplayReport, load_rmm, replay};
use cachalot_sim::SimConfig;
use cachalot_trace::SplitMix64;
use nix::sys::resource::{UsageWho, getrusage};

/// Arguments of `cachalot bench`.
#[derive(clap::Args)]
pub struct Args {
    /// Repetitions of each trace × configuration, alternating cachalot and torch; the
    /// minimum of each counts.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Folder with the recorded traces gpt2-generate-varlen, bert-finetune-varlen and
    /// random-4streams (`.csv.gz`); those missing are skipped.
    #[arg(long, value_name = "DIR", default_value = "tests/fixtures/traces")]
    fixtures: PathBuf,
    /// The oracle command (torch 2.15's allocator on a simulated device). Default:
    /// `$CACHALOT_ORACLE`, else `../shared/oracle/oracle` where present.
    #[arg(long, value_name = "PATH")]
    oracle: Option<PathBuf>,
    /// Time cachalot only.
    #[arg(long)]
    no_oracle: bool,
    /// Only the traces with these names (as printed; repeatable).
    #[arg(long = "trace", value_name = "NAME")]
    traces: Vec<String>,
    /// Only the configurations with these labels (as printed; repeatable).
    #[arg(long = "config", value_name = "LABEL")]
    configs: Vec<String>,
    /// Multiply the event counts of the generated traces by this (e.g. 0.1 for a quick run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Replay a trace with fewer events than this several times over in each run (see
    /// above; `--scale` scales it too); 0 replays every trace once.
    #[arg(long, value_name = "N", default_value_t = 250_000)]
    min_events: usize,
}

/// The configurations compared: (label, `PYTORCH_CUDA_ALLOC_CONF`).
const CONFIGS: [(&str, &str); 5] = [
    ("default", ""),
    ("max_split_size_mb:128", "max_split_size_mb:128"),
    ("expandable_segments:True", "expandable_segments:True"),
    ("roundup_power2_divisions:4", "roundup_power2_divisions:4"),
    (
        "gc:0.8,fraction:0.9",
        "garbage_collection_threshold:0.8,per_process_memory_fraction:0.9",
    ),
];

/// The recorded traces, read from `--fixtures`.
const RECORDED: [&str; 3] = [
    "gpt2-generate-varlen",
    "bert-finetune-varlen",
    "random-4streams",
];

/// A generated trace: random requests on a few or many streams, up to `live` at once.
struct Synthetic {
    name: &'static str,
    events: usize,
    live: usize,
    streams: u64,
    seed: u64,
}

const SYNTHETIC: [Synthetic; 3] = [
    Synthetic {
        name: "live-5k",
        events: 1_000_000,
        live: 5_000,
        streams: 1,
        seed: 5,
    },
    Synthetic {
        name: "live-100k",
        events: 600_000,
        live: 100_000,
        streams: 1,
        seed: 100,
    },
    Synthetic {
        name: "streams-64",
        events: 400_000,
        live: 1_000,
        streams: 64,
        seed: 64,
    },
];

impl Synthetic {
    /// The trace as RMM CSV: it fills up to `live` blocks, then allocates and frees at
    /// random, and frees everything at the end. Sizes: 90 % from 512 B to 1 MiB, 10 % from
    /// 1 to 4 MiB, log-uniform (so 100k live blocks fit an 80 GB device).
    fn csv(&self, scale: f64) -> String {
        use std::fmt::Write;
        let events = ((self.events as f64 * scale) as usize).max(2 * self.live.min(1000));
        let mut rng = SplitMix64::new(self.seed);
        let mut live: Vec<u64> = Vec::new();
        let mut next = 1u64;
        let mut out = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
        for t in 0..events {
            let draining = events - t <= live.len();
            let filling = live.len() < self.live * 9 / 10 && t < events / 2;
            let p_alloc = if live.is_empty() {
                1.0
            } else if draining || live.len() >= self.live {
                0.0
            } else if filling {
                0.95
            } else {
                0.5
            };
            if rng.unit() < p_alloc {
                let size = if rng.below(10) < 9 {
                    rng.log_uniform(512, 1 << 20)
                } else {
                    rng.log_uniform(1 << 20, 4 << 20)
                };
                let stream = rng.below(self.streams);
                let _ = writeln!(out, "1,{t},allocate,{next:#x},{size},{stream:#x}");
                live.push(next);
                next += 1;
            } else {
                let p = live.swap_remove(rng.below(live.len() as u64) as usize);
                let _ = writeln!(out, "1,{t},free,{p:#x},0,0");
            }
        }
        out
    }
}

/// What one replay measured.
#[derive(Clone, Copy, PartialEq)]
struct Decisions {
    device_allocs: i64,
    device_frees: i64,
    peak_reserved: i64,
    ooms: i64,
}

fn cachalot_run(trace: &LoadedTrace, opts: &ReplayOptions) -> Result<(f64, Decisions)> {
    let r: ReplayReport = replay(trace, opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let s = &r.stats;
    let ns = r.cpu_ns as f64 / r.events.max(1) as f64;
    Ok((
        ns,
        Decisions {
            device_allocs: s.num_device_alloc,
            device_frees: s.num_device_free,
            peak_reserved: s.reserved_bytes.all().peak,
            ooms: s.num_ooms,
        },
    ))
}

/// CPU time (user + system) of all waited-for children so far.
fn children_cpu() -> Result<Duration> {
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage")?;
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Ok(Duration::from_micros(
        us(u.user_time()) + us(u.system_time()),
    ))
}

/// One oracle run: its CPU time, its loop's wall time per operation, its decisions.
fn oracle_run(oracle: &Path, trace: &Path, conf: &str) -> Result<(Duration, f64, Decisions)> {
    let before = children_cpu()?;
    let out = Command::new(oracle)
        .arg(trace)
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("PYTORCH_NO_CUDA_MEMORY_CACHING")
        .env("PYTORCH_CUDA_ALLOC_CONF", conf)
        .env("FAKE_CUDA_CAPACITY", "80G")
        .output()
        .with_context(|| format!("cannot run the oracle {}", oracle.display()))?;
    let cpu = children_cpu()?.saturating_sub(before);
    if !out.status.success() {
        bail!(
            "the oracle failed on {} with '{conf}' ({}): {}",
            trace.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("the oracle's output is not JSON")?;
    let int = |k: &str| v[k].as_i64().unwrap_or(-1);
    Ok((
        cpu,
        v["timing"]["ns_per_op"].as_f64().unwrap_or(f64::NAN),
        Decisions {
            device_allocs: int("num_device_alloc"),
            device_frees: int("num_device_free"),
            peak_reserved: v["peak"]["reserved_bytes"].as_i64().unwrap_or(-1),
            ooms: int("num_ooms"),
        },
    ))
}

/// A trace's rows, read to be written again (see [`write_twins`]).
struct Rows {
    header: Option<String>,
    rows: Vec<String>,
    action: usize,
    pointer: usize,
}

impl Rows {
    fn read(src: &Path) -> Result<Rows> {
        let input = cachalot_trace::open_decompressed(src)
            .with_context(|| format!("cannot read {}", src.display()))?;
        let mut lines = Vec::new();
        for line in input.lines() {
            lines.push(line.with_context(|| format!("cannot read {}", src.display()))?);
        }
        let (mut action, mut pointer) = (2, 3);
        let header = match lines.first() {
            Some(h)
                if h.split(',')
                    .next()
                    .is_some_and(|f| f.to_ascii_lowercase().contains("thread")) =>
            {
                let names: Vec<&str> = h.split(',').map(str::trim).collect();
                let at = |name: &str, default| {
                    names
                        .iter()
                        .position(|f| f.eq_ignore_ascii_case(name))
                        .unwrap_or(default)
                };
                (action, pointer) = (at("action", 2), at("pointer", 3));
                Some(lines.remove(0))
            }
            _ => None,
        };
        Ok(Rows {
            header,
            rows: lines,
            action,
            pointer,
        })
    }

    /// How far the pointer ids of one copy are moved from the previous copy's: a power of two
    /// above every id; `None` when a row is not an allocation or a free, or an id is not a
    /// number (those traces are replayed once).
    fn id_stride(&self) -> Option<u64> {
        let mut max = 0u64;
        for row in &self.rows {
            let f: Vec<&str> = row.split(',').map(str::trim).collect();
            let action = f.get(self.action)?.to_ascii_lowercase();
            if !matches!(
                action.as_str(),
                "allocate" | "alloc" | "malloc" | "deallocate" | "free" | "dealloc"
            ) {
                return None;
            }
            max = max.max(cachalot_trace::ids::parse_u64(
                f.get(self.pointer)?.as_bytes(),
            )?);
        }
        max.checked_add(1)?.checked_next_power_of_two()
    }
}

/// Writes `copies` copies of `rows` (copy `r`'s pointer ids moved by `r × stride`; id 0 is the
/// null pointer and stays) as plain CSV to `plain`, and again to `noop` with every action
/// replaced by `noop`, which the oracle reads and skips.
fn write_twins(rows: &Rows, copies: u64, stride: u64, plain: &Path, noop: &Path) -> Result<()> {
    let create = |p: &Path| -> Result<BufWriter<std::fs::File>> {
        Ok(BufWriter::new(std::fs::File::create(p).with_context(
            || format!("cannot create {}", p.display()),
        )?))
    };
    let (mut a, mut b) = (create(plain)?, create(noop)?);
    if let Some(h) = &rows.header {
        writeln!(a, "{h}")?;
        writeln!(b, "{h}")?;
    }
    for r in 0..copies {
        for line in &rows.rows {
            let mut f: Vec<String> = line.split(',').map(str::to_string).collect();
            if r > 0 {
                let id = f
                    .get(rows.pointer)
                    .and_then(|p| cachalot_trace::ids::parse_u64(p.trim().as_bytes()));
                if let Some(id) = id.filter(|&id| id != 0) {
                    let moved = r
                        .checked_mul(stride)
                        .and_then(|m| m.checked_add(id))
                        .context("pointer ids too large to repeat the trace")?;
                    f[rows.pointer] = format!("{moved:#x}");
                }
            }
            writeln!(a, "{}", f.join(","))?;
            if let Some(act) = f.get_mut(rows.action) {
                *act = "noop".to_string();
            }
            writeln!(b, "{}", f.join(","))?;
        }
    }
    a.flush()?;
    b.flush()?;
    Ok(())
}

/// How many copies of a trace of `events` events one run replays: enough for `min_events`,
/// when its ids allow repeating it (`stride`).
fn copies_for(events: usize, min_events: usize, stride: Option<u64>) -> u64 {
    match stride {
        Some(_) if events > 0 && events < min_events => min_events.div_ceil(events) as u64,
        _ => 1,
    }
}

/// The oracle to use, if any.
fn find_oracle(a: &Args) -> Option<PathBuf> {
    if a.no_oracle {
        return None;
    }
    if let Some(p) = &a.oracle {
        return Some(p.clone());
    }
    if let Some(p) = std::env::var_os("CACHALOT_ORACLE") {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from("../shared/oracle/oracle");
    p.exists().then_some(p)
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `cachalot bench`.
pub fn run(a: Args) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs 0: give at least 1 repetition");
    }
    if !(a.scale > 0.0 && a.scale.is_finite()) {
        bail!(
            "--scale {}: give a positive number such as 0.1 or 1",
            a.scale
        );
    }
    let oracle = find_oracle(&a);
    let wanted = |name: &str, list: &[String]| list.is_empty() || list.iter().any(|n| n == name);
    let configs: Vec<_> = CONFIGS
        .iter()
        .filter(|(label, _)| wanted(label, &a.configs))
        .collect();
    if configs.is_empty() {
        let labels: Vec<_> = CONFIGS.iter().map(|c| c.0).collect();
        bail!(
            "no configuration is labelled '{}'; the labels are: {}",
            a.configs.join("', '"),
            labels.join(", ")
        );
    }
    // The generated traces, removed when `tmp` is dropped.
    let tmp = tempfile::Builder::new()
        .prefix("cachalot-bench-")
        .tempdir()
        .context("cannot create a folder for the generated traces in the temp dir")?;
    // (name, the trace as given or generated)
    let mut traces: Vec<(String, PathBuf)> = Vec::new();
    for name in RECORDED {
        let path = a.fixtures.join(format!("{name}.csv.gz"));
        if !wanted(name, &a.traces) {
            continue;
        }
        if path.exists() {
            traces.push((name.to_string(), path));
        } else {
            eprintln!(
                "cachalot bench: skipping {name}: {} not found",
                path.display()
            );
        }
    }
    for s in &SYNTHETIC {
        if wanted(s.name, &a.traces) {
            let path = tmp.path().join(format!("{}.csv", s.name));
            std::fs::write(&path, s.csv(a.scale))
                .with_context(|| format!("cannot write {}", path.display()))?;
            traces.push((s.name.to_string(), path));
        }
    }
    if traces.is_empty() {
        bail!("no trace to time (check --trace and --fixtures)");
    }
    match &oracle {
        Some(o) => println!(
            "cachalot: thread CPU time of the replay loop; torch 2.15 ({}): CPU time of the \
             oracle less its CPU time on the trace with every row skipped; minimum (and \
             median) of {} alternating runs each",
            o.display(),
            a.runs
        ),
        None => println!(
            "cachalot only (no oracle set up): thread CPU time of the replay loop, minimum of {} runs",
            a.runs
        ),
    }
    println!(
        "{:<21} {:<27} {:>4} {:>8} {:>11} {:>9} {:>6} {:>15} {:>9}  {:>10}  same decisions",
        "trace",
        "config",
        "reps",
        "events",
        "cachalot ns",
        "torch ns",
        "ratio",
        "median ns c / t",
        "med ratio",
        "torch wall"
    );
    let mut differ = false;
    for (name, path) in &traces {
        let mut trace =
            load_rmm(path).with_context(|| format!("cannot read {}", path.display()))?;
        let rows = Rows::read(path)?;
        let stride = rows.id_stride();
        let min_events = (a.min_events as f64 * a.scale) as usize;
        let copies = copies_for(trace.ops.len(), min_events, stride);
        let twins = if oracle.is_some() || copies > 1 {
            let plain = tmp.path().join(format!("{name}.plain.csv"));
            let noop = tmp.path().join(format!("{name}.noop.csv"));
            write_twins(&rows, copies, stride.unwrap_or(0), &plain, &noop)?;
            if copies > 1 {
                trace =
                    load_rmm(&plain).with_context(|| format!("cannot read {}", plain.display()))?;
            }
            Some((plain, noop))
        } else {
            None
        };
        drop(rows);
        let events = trace.ops.len().max(1) as f64;
        for (label, conf) in &configs {
            let settings = Settings::resolve(
                |_| None,
                Overrides {
                    pytorch: Some(conf),
                    cachalot: None,
                },
            )?;
            let opts = ReplayOptions {
                conf: settings.conf,
                sim: SimConfig::with_capacity(80 << 30),
                ..ReplayOptions::default()
            };
            // Per run: cachalot ns/op; the oracle's CPU ns on the trace and on its skipped twin.
            let mut ours = Vec::with_capacity(a.runs);
            let mut torch_cpu = Vec::with_capacity(a.runs);
            let mut skip_cpu = Vec::with_capacity(a.runs);
            let mut torch_wall = f64::INFINITY;
            let mut same: Option<bool> = None;
            for _ in 0..a.runs {
                let (ns, d) = cachalot_run(&trace, &opts)?;
                ours.push(ns);
                if let (Some(o), Some((plain, noop))) = (&oracle, &twins) {
                    let (cpu, wall, td) = oracle_run(o, plain, conf)?;
                    torch_cpu.push(cpu.as_nanos() as f64);
                    torch_wall = torch_wall.min(wall);
                    same = Some(same.unwrap_or(true) && td == d);
                    let (cpu, _, _) = oracle_run(o, noop, conf)?;
                    skip_cpu.push(cpu.as_nanos() as f64);
                }
            }
            let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let (ours_min, ours_med) = (min(&ours), median(&mut ours));
            let (t, ratio, med, med_ratio, w, s) = match same {
                Some(s) => {
                    differ |= !s;
                    let theirs = (min(&torch_cpu) - min(&skip_cpu)).max(0.0) / events;
                    let theirs_med =
                        (median(&mut torch_cpu) - median(&mut skip_cpu)).max(0.0) / events;
                    (
                        format!("{theirs:.1}"),
                        format!("{:.3}", ours_min / theirs),
                        format!("{ours_med:.1} / {theirs_med:.1}"),
                        format!("{:.3}", ours_med / theirs_med),
                        format!("{torch_wall:.1}"),
                        if s { "yes" } else { "NO" },
                    )
                }
                None => (
                    "-".into(),
                    "-".into(),
                    format!("{ours_med:.1} / -"),
                    "-".into(),
                    "-".into(),
                    "-",
                ),
            };
            println!(
                "{name:<21} {label:<27} {copies:>4} {:>8} {ours_min:>11.1} {t:>9} {ratio:>6} \
                 {med:>15} {med_ratio:>9}  {w:>10}  {s}",
                trace.ops.len()
            );
        }
    }
    Ok(if differ {
        eprintln!("cachalot bench: cachalot and torch made different decisions on a row marked NO");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
