//! `tune`: which configuration for a workload at a capacity (the advisor's search), or the
//! smallest device it fits on and the configuration there (`min_capacity`); with the pools'
//! accounts of the recommendation where the workload uses private pools, and the HTML
//! report's timelines.

use std::path::PathBuf;

use anyhow::{Context, Result};
use cachalot_advisor::{
    Candidate, CostModel, Evaluated, Fit, MinCapacityResult, Tick, TuneOptions, TuneResult,
    Workload, html, min_capacity, pools, record_timelines, text, tune as search,
};
use cachalot_replay::pool_account::{
    PoolPeaks, pool_peaks_brief, pool_peaks_json, pool_peaks_text,
};

use cachalot_core::config::TorchVersion;

use crate::Notes;
use crate::release::Release;
use crate::workload::{AdvisorOptions, Loaded};

/// What to tune.
#[derive(Clone, Debug)]
pub struct TuneRequest {
    /// The traces (none: the bundled one).
    pub traces: Vec<PathBuf>,
    /// Device memory (default: the GPU's, else what the snapshots recorded).
    pub capacity: Option<u64>,
    /// Find the smallest device instead.
    pub min_capacity: bool,
    /// How many of the best to keep exact and show.
    pub top: usize,
    /// The torch release to recommend for, whose decisions every replay makes (`None`: the
    /// one the first trace's `STEM.device.json` recorded, else 2.15).
    pub release: Option<TorchVersion>,
    /// Loading, capacity and cost-model options.
    pub common: AdvisorOptions,
}

/// What the search found.
pub enum TuneOutcome {
    /// The ranking at one capacity.
    Search(Box<TuneResult>),
    /// The smallest device and the ranking there.
    MinCapacity(Box<MinCapacityResult>),
}

/// A finished `tune`.
pub struct Tuned {
    /// The workload searched.
    pub workload: Loaded,
    /// Its names and notes, with where the capacity came from.
    pub source: text::Source,
    /// What was found.
    pub outcome: TuneOutcome,
    /// The pools' accounts of the recommendation, where the workload uses pools.
    pub pools: Option<TunePools>,
    /// The torch release recommended for, and whether it was read from the trace's
    /// `STEM.device.json` (not asked for).
    pub release: Release,
    /// What that release makes of the workload's own configuration, where it differs from
    /// torch 2.15 (rejected keys, other decisions).
    pub own_release_notes: Vec<String>,
    cost: CostModel,
    threads: Option<usize>,
}

/// Runs `req`; `progress` counts replays queued and done; notes for stderr go to `notes`.
pub fn tune(
    req: &TuneRequest,
    progress: Option<&(dyn Fn(Tick) + Sync)>,
    notes: Notes,
) -> Result<Tuned> {
    let w = req.common.load(&req.traces)?;
    let cost = req.common.cost_model()?;
    let mut source = w.source.clone();
    let capacity = if req.min_capacity {
        0
    } else {
        let (c, note) = req.common.capacity(req.capacity, &w, None)?;
        source.capacity_note = note;
        c
    };
    let release = Release::choose(req.release, req.traces.first().map(PathBuf::as_path));
    let own = w.own_candidate(notes);
    let own_release_notes = own
        .as_ref()
        .map(|c| {
            release
                .version
                .check(&c.label)
                .iter()
                .map(|n| n.to_string())
                .collect()
        })
        .unwrap_or_default();
    let opts = TuneOptions {
        capacity,
        cost: cost.clone(),
        threads: req.common.threads,
        top: req.top.max(1),
        progress,
        own,
        release: release.version,
    };
    let (outcome, pools) = if req.min_capacity {
        let r = min_capacity(&w.traces, &opts)?;
        let pools = match &r.tune {
            Some(t) => tune_pools(&w.traces, t)?,
            None => None,
        };
        (TuneOutcome::MinCapacity(Box::new(r)), pools)
    } else {
        let r = search(&w.traces, &opts)?;
        let pools = tune_pools(&w.traces, &r)?;
        (TuneOutcome::Search(Box::new(r)), pools)
    };
    Ok(Tuned {
        workload: w,
        source,
        outcome,
        pools,
        release,
        own_release_notes,
        cost,
        threads: req.common.threads,
    })
}

impl Tuned {
    /// The ranking (at the smallest device, for `min_capacity`; `None` if it fits nowhere).
    pub fn ranking(&self) -> Option<&TuneResult> {
        match &self.outcome {
            TuneOutcome::Search(r) => Some(r),
            TuneOutcome::MinCapacity(m) => m.tune.as_ref(),
        }
    }

    /// What `tune --json` prints.
    pub fn json(&self) -> serde_json::Value {
        let mut v = self.outcome_json();
        if let Some(m) = v.as_object_mut() {
            m.insert("torch".into(), self.release.version.to_string().into());
            if !self.own_release_notes.is_empty() {
                m.insert(
                    "own_config_on_torch".into(),
                    self.own_release_notes.clone().into(),
                );
            }
            if let Some(d) = &self.workload.gpu_dependent {
                m.insert("gpu_dependent".into(), d.json());
            }
        }
        v
    }

    fn outcome_json(&self) -> serde_json::Value {
        match &self.outcome {
            TuneOutcome::Search(r) => {
                let mut v = text::tune_json(r);
                if let (Some(p), Some(m)) = (&self.pools, v.as_object_mut()) {
                    m.insert("pool_accounts".into(), p.json());
                }
                v
            }
            TuneOutcome::MinCapacity(r) => {
                let mut v = text::min_capacity_json(r);
                if let (Some(p), Some(m)) = (
                    &self.pools,
                    v.get_mut("tune").and_then(|t| t.as_object_mut()),
                ) {
                    m.insert("pool_accounts".into(), p.json());
                }
                v
            }
        }
    }

    /// What `tune` prints for people.
    pub fn text(&self) -> String {
        let mut out = match &self.outcome {
            TuneOutcome::Search(r) => text::tune_text(r, &self.source),
            TuneOutcome::MinCapacity(r) => text::min_capacity_text(r, &self.source),
        };
        if let Some(p) = &self.pools {
            out.push_str(&p.text());
        }
        out.push_str(&self.release_text());
        out
    }

    /// The lines on the torch release: for an older one, what the search kept to and what
    /// it makes of the workload's own configuration.
    fn release_text(&self) -> String {
        let mut out = String::new();
        if self.release.is_older() {
            out.push_str(&format!(
                "\nfor {}: only keys and values it accepts, and only settings whose decisions \
                 cachalot replays for it; every replay made its decisions\n",
                self.release.describe()
            ));
        }
        for n in &self.own_release_notes {
            out.push_str(&format!(
                "note: your configuration on torch {}: {n}\n",
                self.release.version
            ));
        }
        out
    }

    /// The search's statistics, for the CLI's timing line.
    pub fn stats(&self) -> String {
        match &self.outcome {
            TuneOutcome::Search(r) => format!(
                "{} configurations, {} replays ({} cut short once beaten; {} configurations \
                 given the numbers of one that provably replays alike)",
                r.searched, r.stats.replays, r.stats.cut_short, r.stats.shared
            ),
            TuneOutcome::MinCapacity(r) => format!(
                "{} configurations for the smallest device, then a search there",
                r.searched
            ),
        }
    }

    /// 0 when the recommendation fits, 1 when nothing does (the smallest-device search always
    /// answers 0).
    pub fn exit_status(&self) -> u8 {
        match &self.outcome {
            TuneOutcome::Search(r) if r.fit != Fit::Fits => 1,
            _ => 0,
        }
    }

    /// The self-contained HTML report (the best three, the default and the common advice
    /// replayed for their timelines); `None` when there is no ranking to show.
    pub fn html(&self) -> Result<Option<String>> {
        let Some(r) = self.ranking() else {
            return Ok(None);
        };
        let w = &self.workload;
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
        let timelines = record_timelines(trace, &shown, r.capacity, &self.cost, self.threads)
            .context("recording the timelines for the HTML report")?;
        Ok(Some(match &self.outcome {
            TuneOutcome::MinCapacity(m) => html::min_capacity_page(m, r, &self.source, &timelines),
            TuneOutcome::Search(_) => html::tune_page(r, &self.source, &timelines),
        }))
    }
}

/// For a workload with private pools: the pool accounts of `tune`'s recommendation, and of
/// the default when it is another configuration.
pub struct TunePools {
    recommended: (String, PoolPeaks),
    default: Option<PoolPeaks>,
}

/// [`TunePools`] of a search; `None` when no trace names a pool.
pub fn tune_pools(w: &dyn Workload, r: &TuneResult) -> Result<Option<TunePools>> {
    if !pools::uses_pools(w) {
        return Ok(None);
    }
    let of = |e: &Evaluated| pools::pool_peaks_of(w, &e.candidate.conf, r.capacity, e.metrics.part);
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
