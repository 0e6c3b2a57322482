//! `cachalot explain SNAPSHOT`: why the out-of-memory recorded in a torch snapshot happened,
//! in numbers, and which option would have avoided it (replayed on the snapshot's history).
//! The analysis is `cachalot_replay::diagnose::explain_snapshot`; this prints it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use cachalot_core::format_size;
use cachalot_replay::diagnose::{
    SegmentsAt, SnapshotDiagnosis, explain_snapshot, write_candidates,
};
use cachalot_replay::input::{pick_device, read_snapshot_path};

use crate::args::parse_capacity;

/// Arguments of `cachalot explain`.
#[derive(clap::Args)]
pub struct Args {
    /// A torch memory snapshot (pickle or JSON, plain or gzip) whose history has an `oom`
    /// entry: taken at an out-of-memory, e.g. with `_dump_snapshot` in an OOM observer.
    snapshot: PathBuf,
    /// For a snapshot with history on several devices: the device. Default: the only device
    /// with history, else the only one with out-of-memory entries.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Device memory for the replays. Default: estimated from the snapshot (free device
    /// memory at the out-of-memory plus what the allocator had reserved then).
    #[arg(long, value_parser = parse_capacity)]
    capacity: Option<u64>,
    /// Only read the snapshot; do not replay its history.
    #[arg(long)]
    no_replay: bool,
}

/// Runs `cachalot explain`.
pub fn run(a: Args) -> Result<ExitCode> {
    if !a.snapshot.exists() {
        bail!("snapshot file {} does not exist", a.snapshot.display());
    }
    let snap = read_snapshot_path(&a.snapshot)?;
    let with_ooms = cachalot_replay::diagnose::devices_with_ooms(&snap);
    let device = match (a.device, &with_ooms[..]) {
        (None, [(d, _)]) if snap.devices_with_history().len() > 1 => *d,
        _ => pick_device(&snap, a.device, &a.snapshot)?,
    };
    let d = explain_snapshot(&snap, device, a.capacity, !a.no_replay)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.snapshot.display()))?;
    print!("{}", render(&d, &a.snapshot.display().to_string()));
    Ok(ExitCode::SUCCESS)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The diagnosis for people.
pub fn render(d: &SnapshotDiagnosis, name: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if d.devices_with_ooms.len() > 1 || d.devices_with_ooms.iter().any(|&(dev, _)| dev != d.device)
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
