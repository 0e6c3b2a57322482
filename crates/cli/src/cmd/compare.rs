//! `cachalot compare`: several configurations side by side on one trace.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachalot_advisor::{CompareOptions, compare, html, pools, record_timelines, text};
use cachalot_replay::pool_account::{
    PoolPeaks, pool_peaks_brief, pool_peaks_json, pool_peaks_text,
};

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
    // Where the traces use pools: each configuration's pool accounts (one replay more each).
    let row_pools = if pools::uses_pools(&w.traces) {
        r.rows
            .iter()
            .map(|row| {
                pools::pool_peaks_of(&w.traces, &row.candidate.conf, capacity, row.metrics.part)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    progress.finish();
    if a.common.json {
        let mut v = text::compare_json(&r);
        if let Some(rows) = v.get_mut("rows").and_then(serde_json::Value::as_array_mut) {
            for (row, p) in rows.iter_mut().zip(&row_pools) {
                if let (Some(m), Some(p)) = (row.as_object_mut(), p) {
                    m.insert("pool_accounts".into(), pool_peaks_json(p));
                }
            }
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", text::compare_text(&r, &src));
        if row_pools.iter().any(Option::is_some) {
            println!("\npools, per configuration:");
            for (row, p) in r.rows.iter().zip(&row_pools) {
                if let Some(p) = p {
                    println!(
                        "  {}: {}",
                        row.candidate.display_name(),
                        pool_peaks_brief(p)
                    );
                }
            }
        }
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

/// For a workload with private pools: the pool accounts of `tune`'s recommendation, and of
/// the default when it is another configuration.
pub struct TunePools {
    recommended: (String, PoolPeaks),
    default: Option<PoolPeaks>,
}

/// [`TunePools`] of a search; `None` when no trace names a pool.
pub fn tune_pools(
    w: &dyn cachalot_advisor::Workload,
    r: &cachalot_advisor::TuneResult,
) -> Result<Option<TunePools>> {
    if !pools::uses_pools(w) {
        return Ok(None);
    }
    let of = |e: &cachalot_advisor::Evaluated| {
        pools::pool_peaks_of(w, &e.candidate.conf, r.capacity, e.metrics.part)
    };
    let win = r.winner();
    let Some(recommended) = of(win)? else {
        return Ok(None);
    };
    let default = if win.candidate.label == r.default.candidate.label {
        None
    } else {
        of(&r.default)?
    };
    Ok(Some(TunePools {
        recommended: (win.candidate.display_name().to_string(), recommended),
        default,
    }))
}

impl TunePools {
    /// For people, after `tune`'s report.
    pub fn text(&self) -> String {
        let (name, p) = &self.recommended;
        let mut out = format!("\npools with the recommended configuration, {name}:\n");
        for line in pool_peaks_text(p).lines() {
            out.push_str(&format!("  {line}\n"));
        }
        if let Some(d) = &self.default {
            out.push_str(&format!(
                "  with the default configuration: {}\n",
                pool_peaks_brief(d)
            ));
        }
        out
    }

    /// For programs: `tune --json`'s `pool_accounts`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "recommended": pool_peaks_json(&self.recommended.1),
            "default": self.default.as_ref().map(pool_peaks_json),
        })
    }
}
