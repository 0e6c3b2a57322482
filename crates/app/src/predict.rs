//! `capture`'s answer: a job's traces (one per rank) on a GPU, each loaded once and every
//! question answered from that workload in memory: per rank the peaks of an unconstrained
//! replay, the memory outside torch's allocator ([`crate::outside`]), the verdict against
//! CUDA's total (fits / tight / does not fit), the out-of-memory errors and retries at the GPU
//! and the minimum capacity under the user's configuration; for the job (the worst rank
//! decides, one configuration for every rank as `tune r0 r1` does) the tuned configuration at
//! the GPU, the configuration that needs least, the smallest GPU of the table, and the advice
//! a person would give. Renders itself as text and JSON; [`Prediction::exit_status`] is
//! capture's exit status.

use std::path::PathBuf;

use anyhow::{Result, bail};
use cachalot_advisor::capacity::large_device;
use cachalot_advisor::measure::measure;
use cachalot_advisor::{
    Candidate, CostModel, Evaluated, Fit, MinCapacityResult, TuneOptions, TuneResult, fits,
    min_capacity, min_capacity_of, tune,
};
use cachalot_core::AllocConf;
use cachalot_core::config::{Settings, TorchVersion};
use cachalot_replay::LoadedTrace;

use crate::gpus::{self, GPUS, Gpu};
use crate::outside::{Outside, RankOutside};
use crate::workload::{Loaded, resolve_conf_in};

mod render;

/// What to predict.
#[derive(Clone, Debug, Default)]
pub struct PredictRequest {
    /// The traces, one per rank (a single-process capture is a list of one).
    pub traces: Vec<PathBuf>,
    /// The GPU, by a name [`gpus::find`] knows.
    pub gpu: String,
    /// The configuration (PyTorch's grammar); `None`: the environment, read as torch reads it.
    pub conf: Option<String>,
    /// Bytes outside torch's allocator per rank, replacing the model (`--reserve`).
    pub reserve: Option<u64>,
    /// Bytes kept free on top of the estimate (`--headroom`).
    pub headroom: Option<u64>,
    /// Per rank, what it does outside torch's allocator: empty (the defaults for every rank),
    /// or one entry per trace.
    pub outside: Vec<RankOutside>,
    /// Worker threads for the searches (`None`: all cores).
    pub threads: Option<usize>,
    /// The capture's own warnings, shown after the answer.
    pub warnings: Vec<String>,
    /// torch's own statistics from the captured process, passed through to the JSON.
    pub torch_stats: Vec<(String, i64)>,
}

/// How a rank's peak compares with its GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Peak reserved plus the high end of the outside estimate is within CUDA's total; this
    /// much is left over.
    Fits {
        /// Bytes to spare in the worst case of the estimate.
        margin: u64,
    },
    /// Within the estimate's uncertainty: it fits with the low end and not with the high end
    /// (or only by the allocator freeing its cache and retrying).
    Tight {
        /// CUDA's total less peak reserved and the estimate (negative: short by that much).
        margin: i128,
        /// The estimate's range (high less low).
        uncertainty: u64,
    },
    /// Out of memory even with the low end of the estimate.
    DoesNotFit {
        /// Bytes the GPU would need to have more (the minimum capacity under the user's
        /// configuration plus the estimate, less CUDA's total); `None` when it fits nowhere.
        missing: Option<u64>,
    },
}

impl Verdict {
    /// `fits`, `tight` or `does not fit`.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Fits { .. } => "fits",
            Verdict::Tight { .. } => "tight",
            Verdict::DoesNotFit { .. } => "does not fit",
        }
    }

    /// Worse is larger: fits < tight < does not fit.
    fn severity(&self) -> u8 {
        match self {
            Verdict::Fits { .. } => 0,
            Verdict::Tight { .. } => 1,
            Verdict::DoesNotFit { .. } => 2,
        }
    }
}

/// Capture's exit status when the program ran: fits.
pub const EXIT_FITS: u8 = 0;
/// Does not fit (a CI gate reads this).
pub const EXIT_DOES_NOT_FIT: u8 = 1;
/// Tight: within the uncertainty of the memory outside torch's allocator.
pub const EXIT_TIGHT: u8 = 4;

/// One rank's answer.
#[derive(Clone, Debug)]
pub struct RankPrediction {
    /// The trace's name.
    pub trace: String,
    /// Its GPU.
    pub gpu: &'static Gpu,
    /// Allocation events.
    pub events: u64,
    /// Peak allocated bytes, unconstrained.
    pub peak_allocated: u64,
    /// Peak reserved bytes, unconstrained.
    pub peak_reserved: u64,
    /// Memory outside torch's allocator.
    pub outside: Outside,
    /// What the allocator may use: CUDA's total less the outside estimate.
    pub capacity: u64,
    /// Out-of-memory errors replayed at `capacity`.
    pub num_ooms: u64,
    /// Allocator retries (cache flushes) at `capacity`.
    pub num_alloc_retries: u64,
    /// Fits, tight or not.
    pub verdict: Verdict,
    /// The smallest device this rank fits under the user's configuration (the advisor's
    /// search from a proven lower bound); `None`: not even the largest tried.
    pub min_capacity: Option<u64>,
}

/// What a person would advise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Keep the configuration: no other saves a material amount (or makes it fit).
    Keep,
    /// Change to `conf`: it fits where yours does not, or saves a material amount.
    Change {
        /// The configuration.
        conf: String,
        /// Its peak reserved at the GPU.
        peak_reserved: u64,
        /// Bytes of reserved it saves against yours at the GPU.
        saves: u64,
        /// Whether it fits (verdict `fits`) where yours does not.
        makes_it_fit: bool,
    },
    /// Nothing fits: the configuration that needs least memory, what it needs on the GPU
    /// (its minimum capacity plus the outside estimate), and how much is missing.
    Closest {
        /// The configuration.
        conf: String,
        /// Bytes the GPU would need.
        needs: Option<u64>,
        /// Bytes missing.
        missing: Option<u64>,
    },
}

/// A material gain in reserved memory: at least 5 % of the peak reserved, and at least
/// 256 MiB (`docs/budget.md`).
pub fn material(saved: u64, peak_reserved: u64) -> bool {
    saved >= (peak_reserved / 20).max(256 << 20)
}

/// The answer for a job.
pub struct Prediction {
    /// The ranks, in the request's order.
    pub ranks: Vec<RankPrediction>,
    /// The user's configuration as given or read (`""`: torch's defaults).
    pub conf: String,
    /// The tuned configuration at the job's capacity.
    pub tuned: TuneResult,
    /// The smallest device over the search space.
    pub best: MinCapacityResult,
    /// The job's minimum capacity under the user's configuration (the worst rank's).
    pub min_capacity: Option<u64>,
    /// The least capacity any configuration tried needs, and which (the user's if none
    /// needs less).
    pub best_min: (Option<u64>, String),
    /// The smallest GPU of the table the job fits on (with the high end of the estimate).
    pub smallest_gpu: Option<&'static Gpu>,
    /// The advice.
    pub advice: Advice,
    /// The capture's warnings.
    pub warnings: Vec<String>,
    /// torch's own statistics, passed through.
    pub torch_stats: Vec<(String, i64)>,
}

/// Answers `req` in the process environment.
pub fn predict(req: &PredictRequest) -> Result<Prediction> {
    predict_in(req, &|k| std::env::var(k).ok())
}

/// [`predict`] with the environment read through `env`.
pub fn predict_in(
    req: &PredictRequest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Prediction> {
    if req.traces.is_empty() {
        bail!("predict needs at least one trace (one per rank)");
    }
    if !req.outside.is_empty() && req.outside.len() != req.traces.len() {
        bail!(
            "{} outside-torch entries for {} traces: give one per rank, or none",
            req.outside.len(),
            req.traces.len()
        );
    }
    let gpu = gpus::find(&req.gpu)?;
    let settings = resolve_conf_in(env, req.conf.as_deref(), None)?;
    let own = own_candidate(&settings);
    // Each trace is loaded once; every question below is answered from these.
    let w = Loaded::load(&req.traces, None, false)?;
    let default_rank = RankOutside::default();
    let mut ranks = Vec::with_capacity(w.traces.len());
    for (i, trace) in w.traces.iter().enumerate() {
        let rank = req.outside.get(i).unwrap_or(&default_rank);
        let g = match &rank.gpu {
            Some(name) => gpus::find(name)?,
            None => gpu,
        };
        let outside = outside_of(req, g, rank, env);
        let name = req.traces[i].display().to_string();
        ranks.push(rank_prediction(name, trace, g, outside, &own)?);
    }
    let cost = CostModel::default();
    let capacity = ranks.iter().map(|r| r.capacity).min().unwrap_or(0);
    let opts = TuneOptions {
        capacity,
        cost,
        threads: req.threads,
        top: 8,
        progress: None,
        own: Some(own.clone()),
        // A capture runs torch 2.15, whose decisions the replay makes.
        release: TorchVersion::NEWEST,
    };
    let tuned = tune(&w.traces, &opts)?;
    let best = min_capacity(&w.traces, &opts)?;
    let min_capacity = ranks
        .iter()
        .map(|r| r.min_capacity)
        .collect::<Option<Vec<u64>>>()
        .and_then(|v| v.into_iter().max());
    let best_min = match (min_capacity, best.capacity) {
        (Some(mine), Some(b)) if mine <= b => (Some(mine), own.label.clone()),
        (_, Some(b)) => (
            Some(b),
            best.fits_with
                .as_ref()
                .map_or(String::new(), |m| m.candidate.label.clone()),
        ),
        (mine, None) => (mine, own.label.clone()),
    };
    let smallest_gpu = best_min.0.and_then(|need| {
        GPUS.iter().find(|g| {
            let high = req
                .traces
                .iter()
                .enumerate()
                .map(|(i, _)| outside_of(req, g, req.outside.get(i).unwrap_or(&default_rank), env))
                .map(|o| o.high())
                .max()
                .unwrap_or(0);
            need.saturating_add(high) <= g.usable
        })
    });
    let mut p = Prediction {
        ranks,
        conf: own.label.clone(),
        tuned,
        best,
        min_capacity,
        best_min,
        smallest_gpu,
        advice: Advice::Keep,
        warnings: req.warnings.clone(),
        torch_stats: req.torch_stats.clone(),
    };
    p.advice = p.advise();
    Ok(p)
}

/// The user's configuration as a candidate: its label is the string torch read.
fn own_candidate(s: &Settings) -> Candidate {
    let label = s
        .source
        .cuda
        .and_then(|var| s.source.value(var))
        .unwrap_or("")
        .to_string();
    Candidate {
        settings: None,
        complexity: label.split(',').filter(|p| !p.trim().is_empty()).count(),
        label,
        conf: s.conf.clone(),
    }
}

fn outside_of(
    req: &PredictRequest,
    g: &Gpu,
    rank: &RankOutside,
    env: &dyn Fn(&str) -> Option<String>,
) -> Outside {
    match req.reserve {
        Some(r) => Outside::explicit(r),
        None => Outside::model(g, rank, env),
    }
    .with_headroom(req.headroom)
}

fn rank_prediction(
    trace_name: String,
    trace: &LoadedTrace,
    gpu: &'static Gpu,
    outside: Outside,
    own: &Candidate,
) -> Result<RankPrediction> {
    let total = gpu.usable;
    let est = outside.bytes();
    if est >= total {
        bail!(
            "{} outside torch's allocator leaves nothing of {}'s {} bytes",
            cachalot_core::format_size(est),
            gpu.key(),
            total
        );
    }
    let cost = CostModel::default();
    let free = measure(trace, own, large_device(trace), &cost)?;
    let capacity = total - est;
    let at = measure(trace, own, capacity, &cost)?;
    let min_cap = min_capacity_of(trace, &own.conf)?;
    let verdict = verdict(
        trace,
        &own.conf,
        total,
        free.peak_reserved,
        &outside,
        min_cap,
    )?;
    Ok(RankPrediction {
        trace: trace_name,
        gpu,
        events: trace.ops.len() as u64,
        peak_allocated: free.peak_allocated,
        peak_reserved: free.peak_reserved,
        outside,
        capacity,
        num_ooms: at.ooms,
        num_alloc_retries: at.retries,
        verdict,
        min_capacity: min_cap,
    })
}

/// Fits when peak reserved plus the high end is within `total`; does not fit when a replay
/// with only the low end outside runs out of memory; tight in between.
fn verdict(
    trace: &LoadedTrace,
    conf: &AllocConf,
    total: u64,
    peak: u64,
    outside: &Outside,
    min_cap: Option<u64>,
) -> Result<Verdict> {
    let (est, low, high) = (outside.bytes(), outside.low(), outside.high());
    if peak.saturating_add(high) <= total {
        return Ok(Verdict::Fits {
            margin: total - peak - high,
        });
    }
    let runs = low < total && (peak + low <= total || fits(trace, conf, total - low)?);
    Ok(if runs {
        Verdict::Tight {
            margin: i128::from(total) - i128::from(peak) - i128::from(est),
            uncertainty: high - low,
        }
    } else {
        Verdict::DoesNotFit {
            missing: min_cap.map(|c| c.saturating_add(est).saturating_sub(total)),
        }
    })
}

impl Prediction {
    /// The rank that decides: the worst verdict, then the least margin.
    pub fn worst(&self) -> &RankPrediction {
        let margin = |r: &RankPrediction| {
            i128::from(r.gpu.usable) - i128::from(r.peak_reserved) - i128::from(r.outside.high())
        };
        self.ranks
            .iter()
            .max_by(|a, b| {
                (a.verdict.severity(), -margin(a)).cmp(&(b.verdict.severity(), -margin(b)))
            })
            .expect("a prediction has at least one rank")
    }

    /// The job's verdict: the worst rank's.
    pub fn verdict(&self) -> Verdict {
        self.worst().verdict
    }

    /// Capture's exit status: [`EXIT_FITS`], [`EXIT_TIGHT`] or [`EXIT_DOES_NOT_FIT`].
    pub fn exit_status(&self) -> u8 {
        match self.verdict() {
            Verdict::Fits { .. } => EXIT_FITS,
            Verdict::Tight { .. } => EXIT_TIGHT,
            Verdict::DoesNotFit { .. } => EXIT_DOES_NOT_FIT,
        }
    }

    /// Whether a configuration with `peak_reserved` at the GPU (and no retries) fits every
    /// rank with the high end of its estimate.
    fn fits_every_rank(&self, peak_reserved: u64) -> bool {
        self.ranks
            .iter()
            .all(|r| peak_reserved.saturating_add(r.outside.high()) <= r.gpu.usable)
    }

    /// The configuration tried at the GPU that runs without out-of-memory or retries and
    /// reserves least.
    fn least_reserved(&self) -> Option<&Evaluated> {
        let t = &self.tuned;
        t.ranking
            .iter()
            .chain(&t.advice)
            .chain(std::iter::once(&t.default))
            .filter(|e| e.metrics.ooms == 0 && e.metrics.retries == 0)
            .min_by_key(|e| e.metrics.peak_reserved)
    }

    fn advise(&self) -> Advice {
        let verdict = self.verdict();
        let mine = self.tuned.own.as_ref().map(|e| &e.metrics);
        let my_peak = mine.map_or(self.worst().peak_reserved, |m| m.peak_reserved);
        if let Some(alt) = self
            .least_reserved()
            .filter(|e| e.candidate.label != self.conf)
        {
            let saves = my_peak.saturating_sub(alt.metrics.peak_reserved);
            let alt_fits = self.fits_every_rank(alt.metrics.peak_reserved);
            let change = |makes_it_fit| Advice::Change {
                conf: alt.candidate.label.clone(),
                peak_reserved: alt.metrics.peak_reserved,
                saves,
                makes_it_fit,
            };
            match verdict {
                Verdict::Fits { .. } if material(saves, my_peak) => return change(false),
                Verdict::Fits { .. } => return Advice::Keep,
                _ if alt_fits => return change(true),
                Verdict::Tight { .. } if material(saves, my_peak) => return change(false),
                _ => {}
            }
        }
        match verdict {
            Verdict::Fits { .. } | Verdict::Tight { .. } => Advice::Keep,
            Verdict::DoesNotFit { .. } => {
                let worst = self.worst();
                let needs = self
                    .best_min
                    .0
                    .map(|c| c.saturating_add(worst.outside.bytes()));
                Advice::Closest {
                    conf: self.best_min.1.clone(),
                    needs,
                    missing: needs.map(|n| n.saturating_sub(worst.gpu.usable)),
                }
            }
        }
    }

    /// Whether the tuned configuration runs without out-of-memory at the GPU.
    pub fn tuned_fits(&self) -> bool {
        self.tuned.fit == Fit::Fits
    }

    /// The tuned configuration: the recommendation where it fits, else the best tried.
    pub fn tuned_conf(&self) -> &str {
        &self.tuned.winner().candidate.label
    }

    /// What `capture --json` prints (less what only capture knows: torch's version, the
    /// program's exit code, the seconds).
    pub fn json(&self) -> serde_json::Value {
        render::json(self)
    }

    /// The report for people, the verdict first.
    pub fn text(&self) -> String {
        render::text(self)
    }
}
