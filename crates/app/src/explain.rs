//! `explain SNAPSHOT`: why the out-of-memory recorded in a torch snapshot happened, in
//! numbers, and which option would have avoided it. The analysis is
//! `cachalot_replay::diagnose::explain_snapshot`; this picks the device and renders it.

use std::path::PathBuf;

use anyhow::{Result, bail};
use cachalot_core::format_size;
use cachalot_replay::diagnose::{
    SegmentsAt, SnapshotDiagnosis, devices_with_ooms, explain_snapshot, write_candidates,
};
use cachalot_replay::input::{pick_device, read_snapshot_path};

/// What to explain.
#[derive(Clone, Debug, Default)]
pub struct ExplainRequest {
    /// The snapshot.
    pub snapshot: PathBuf,
    /// Its device (default: the only one with history, else the only one with OOMs).
    pub device: Option<u32>,
    /// Device memory for the replays (default: estimated from the snapshot).
    pub capacity: Option<u64>,
    /// Replay the history (else only read the snapshot).
    pub replay: bool,
}

/// A snapshot explained.
pub struct Explained {
    /// The analysis.
    pub diagnosis: SnapshotDiagnosis,
    name: String,
}

/// Reads and explains `req.snapshot`.
pub fn explain(req: &ExplainRequest) -> Result<Explained> {
    if !req.snapshot.exists() {
        bail!("snapshot file {} does not exist", req.snapshot.display());
    }
    let snap = read_snapshot_path(&req.snapshot)?;
    let with_ooms = devices_with_ooms(&snap);
    let device = match (req.device, &with_ooms[..]) {
        (None, [(d, _)]) if snap.devices_with_history().len() > 1 => *d,
        _ => pick_device(&snap, req.device, &req.snapshot)?,
    };
    let diagnosis = explain_snapshot(&snap, device, req.capacity, req.replay)
        .map_err(|e| anyhow::anyhow!("{}: {e}", req.snapshot.display()))?;
    Ok(Explained {
        diagnosis,
        name: req.snapshot.display().to_string(),
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

impl Explained {
    /// The headline numbers, for programs.
    pub fn json(&self) -> serde_json::Value {
        let d = &self.diagnosis;
        serde_json::json!({
            "device": d.device,
            "ooms": d.ooms,
            "devices_with_ooms": d.devices_with_ooms,
            "capacity": d.capacity,
            "capacity_estimated": d.capacity_estimated,
            "conf": d.conf.to_pytorch_string(),
            "conf_source": d.conf_source.to_string(),
        })
    }

    /// The diagnosis for people (what `cachalot explain` prints).
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let d = &self.diagnosis;
        let name = &self.name;
        let mut out = String::new();
        if d.devices_with_ooms.len() > 1
            || d.devices_with_ooms.iter().any(|&(dev, _)| dev != d.device)
        {
            let list: Vec<String> = d
                .devices_with_ooms
                .iter()
                .map(|(dev, n)| {
                    format!(
                        "device {dev} ({n} out-of-memory entr{})",
                        if *n == 1 { "y" } else { "ies" }
                    )
                })
                .collect();
            let _ = writeln!(out, "devices that ran out of memory: {}", list.join(", "));
        }
        let _ = writeln!(
            out,
            "snapshot {name}: device {}, {} out-of-memory entr{} in its history; reading the \
             last one, with the configuration {}",
            d.device,
            d.ooms,
            if d.ooms == 1 { "y" } else { "ies" },
            d.conf_source
        );
        match d.segments_at {
            SegmentsAt::Snapshot => {
                let _ = writeln!(
                    out,
                    "  the snapshot was taken at that out-of-memory: its segments are read"
                );
            }
            SegmentsAt::Rebuilt { after } => {
                let _ = writeln!(
                    out,
                    "  the snapshot was taken {after} history entr{} later: the segments at the \
                     out-of-memory are rebuilt by replaying the history up to it (the replay fails \
                     there too)",
                    if after == 1 { "y" } else { "ies" }
                );
            }
            SegmentsAt::Later { after } => {
                let _ = writeln!(
                    out,
                    "  note: the snapshot was taken {after} history entr{} after that \
                     out-of-memory; the segments below are those at the snapshot",
                    if after == 1 { "y" } else { "ies" }
                );
            }
        }
        let _ = write!(out, "{}", d.explanation);
        if let Some(r) = &d.replay {
            let _ = writeln!(
                out,
                "  replayed the snapshot's history ({} events, each failed request as a request \
                 that must be served) on a {} device{}: {} out-of-memory error{} (the snapshot \
                 records {})",
                r.events,
                format_size(d.capacity),
                if d.capacity_estimated {
                    " (capacity estimated: free + reserved at the out-of-memory)"
                } else {
                    ""
                },
                r.ooms,
                plural(r.ooms as usize),
                d.ooms
            );
            if r.reconstructed > 0 {
                let _ = writeln!(
                    out,
                    "  note: the history starts mid-run: {} allocations live at its start are \
                     reconstructed from the snapshot and replayed before it",
                    r.reconstructed
                );
            }
            let _ = write_candidates(&mut out, &r.candidates);
        }
        out
    }
}
