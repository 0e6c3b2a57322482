//! `compare`: several configurations side by side on one workload, with each row's pool
//! accounts where the workload uses private pools, and the HTML report's timelines.

use std::path::PathBuf;

use anyhow::{Context, Result};
use cachalot_advisor::{
    CompareOptions, CompareResult, CostModel, Tick, html, pools, record_timelines, text,
};
use cachalot_core::config::TorchVersion;
use cachalot_replay::pool_account::{PoolPeaks, pool_peaks_brief, pool_peaks_json};

use crate::Notes;
use crate::release::{Release, ReleaseReport};
use crate::workload::{AdvisorOptions, DEFAULT_CAPACITY, Loaded};

/// What to compare.
#[derive(Clone, Debug, Default)]
pub struct CompareRequest {
    /// The traces (none: the bundled one).
    pub traces: Vec<PathBuf>,
    /// The configurations (PyTorch's grammar); the default is always the first row.
    pub confs: Vec<String>,
    /// Device memory (default: the GPU's, else what the snapshots recorded, else 80 GiB).
    pub capacity: Option<u64>,
    /// Compute each configuration's minimum capacity (several replays each).
    pub min_capacity: bool,
    /// The torch release whose decisions every row makes (`None`: the one the first
    /// trace's `STEM.device.json` recorded, else 2.15).
    pub release: Option<TorchVersion>,
    /// Loading, capacity and cost-model options.
    pub common: AdvisorOptions,
}

/// A finished `compare`.
pub struct Compared {
    /// The workload compared on.
    pub workload: Loaded,
    /// Its names and notes, with where the capacity came from.
    pub source: text::Source,
    /// The rows.
    pub result: CompareResult,
    /// Each row's pool accounts (empty when the workload uses no pools).
    pub row_pools: Vec<Option<PoolPeaks>>,
    /// The torch release whose decisions the rows make, and what it makes of them.
    pub torch: ReleaseReport,
    capacity: u64,
    cost: CostModel,
    threads: Option<usize>,
}

/// Runs `req`; the configurations are checked (by torch 2.15 and by the release) before any
/// trace is read, so a typo fails fast.
pub fn compare(
    req: &CompareRequest,
    progress: Option<&(dyn Fn(Tick) + Sync)>,
    notes: Notes,
) -> Result<Compared> {
    cachalot_advisor::compare::candidates(&req.confs)?;
    let release = Release::choose(req.release, req.traces.first().map(PathBuf::as_path));
    let mut torch = ReleaseReport::new(release);
    let mut read = |conf: &str| -> Result<()> {
        let r = release.read(conf)?;
        let name = if conf.is_empty() { "(default)" } else { conf };
        torch
            .notes
            .extend(r.replayed.iter().map(|n| format!("{name}: {n}")));
        torch
            .warnings
            .extend(r.warnings.iter().map(|w| format!("{name}: {w}")));
        Ok(())
    };
    for c in &req.confs {
        read(c.trim())?;
    }
    let w = req.common.load(&req.traces)?;
    // The snapshot's own line, where the release would refuse it, is not a row.
    let own = w
        .own_candidate(notes)
        .map(|c| c.label)
        .filter(|own| match read(own.trim()) {
            Ok(()) => true,
            Err(e) => {
                notes(format!(
                    "warning: the snapshot's own configuration is not compared: {e:#}"
                ));
                false
            }
        });
    torch.announce(notes);
    let mut source = w.source.clone();
    let (capacity, note) = req
        .common
        .capacity(req.capacity, &w, Some(DEFAULT_CAPACITY))?;
    source.capacity_note = note;
    let opts = CompareOptions {
        capacity,
        cost: req.common.cost_model()?,
        threads: req.common.threads,
        min_capacity: req.min_capacity,
        progress,
        own,
        release: release.version,
    };
    let result = cachalot_advisor::compare(&w.traces, &req.confs, &opts)?;
    // Where the traces use pools: each configuration's pool accounts (one replay more each).
    let row_pools = if pools::uses_pools(&w.traces) {
        result
            .rows
            .iter()
            .map(|row| {
                pools::pool_peaks_of(&w.traces, &row.candidate.conf, capacity, row.metrics.part)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    Ok(Compared {
        workload: w,
        source,
        result,
        row_pools,
        torch,
        capacity,
        cost: opts.cost,
        threads: req.common.threads,
    })
}

impl Compared {
    /// What `compare --json` prints.
    pub fn json(&self) -> serde_json::Value {
        let mut v = text::compare_json(&self.result);
        if let Some(rows) = v.get_mut("rows").and_then(serde_json::Value::as_array_mut) {
            for (row, p) in rows.iter_mut().zip(&self.row_pools) {
                if let (Some(m), Some(p)) = (row.as_object_mut(), p) {
                    m.insert("pool_accounts".into(), pool_peaks_json(p));
                }
            }
        }
        if let Some(m) = v.as_object_mut() {
            self.torch.add_json(m);
            if let Some(d) = &self.workload.gpu_dependent {
                m.insert("gpu_dependent".into(), d.json());
            }
        }
        v
    }

    /// What `compare` prints for people.
    pub fn text(&self) -> String {
        let mut out = text::compare_text(&self.result, &self.source);
        if self.row_pools.iter().any(Option::is_some) {
            out.push_str("\npools, per configuration:\n");
            for (row, p) in self.result.rows.iter().zip(&self.row_pools) {
                if let Some(p) = p {
                    out.push_str(&format!(
                        "  {}: {}\n",
                        row.candidate.display_name(),
                        pool_peaks_brief(p)
                    ));
                }
            }
        }
        let torch = self.torch.text();
        if !torch.is_empty() {
            out.push('\n');
            out.push_str(&torch);
        }
        out
    }

    /// The self-contained HTML report (every row replayed for its timeline).
    pub fn html(&self) -> Result<String> {
        let cands: Vec<_> = self
            .result
            .rows
            .iter()
            .map(|row| row.candidate.clone())
            .collect();
        let timelines = record_timelines(
            &self.workload.traces[0],
            &cands,
            self.capacity,
            &self.cost,
            self.threads,
        )
        .context("recording the timelines for the HTML report")?;
        Ok(html::compare_page(&self.result, &self.source, &timelines))
    }
}
