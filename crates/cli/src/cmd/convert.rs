//! `cachalot convert IN OUT.csv`: any supported input as an RMM memory-log CSV.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use cachalot_replay::input::InputKind;
use cachalot_replay::{LoadOptions, LoadedInput, TraceOp, load_input};
use cachalot_torchfmt::{EventKind, ReplayEvent, write_rmm_csv};
use cachalot_trace::{seal_csv, write_atomic};

/// Arguments of `cachalot convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The input: a torch memory snapshot (pickle or JSON) or an RMM CSV, plain or gzip.
    input: PathBuf,
    /// The RMM CSV to write (`-` for standard output); gzip-compressed when the name ends in
    /// `.gz`.
    output: PathBuf,
    /// For a snapshot with history on several devices: the device to convert.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
}

/// Runs `cachalot convert`.
pub fn run(a: Args) -> Result<ExitCode> {
    if !a.input.exists() {
        bail!("input file {} does not exist", a.input.display());
    }
    let input = load_input(
        &a.input,
        &LoadOptions {
            device: a.device,
            ..LoadOptions::default()
        },
    )?;
    let events = rmm_events(&input);
    if let Some(note) = input.note() {
        eprintln!("cachalot: {note}");
    }
    // Sealed, so that a cut-short copy is an error when read back, not a shorter trace.
    let mut csv = Vec::new();
    write_rmm_csv(&mut csv, &events)?;
    let csv = seal_csv(&csv);
    if a.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(&csv)?;
    } else {
        let gzip = a.output.extension().is_some_and(|e| e == "gz");
        write_atomic(&a.output, |w| {
            if gzip {
                let mut z = flate2::write::GzEncoder::new(w, flate2::Compression::default());
                z.write_all(&csv)?;
                z.finish()?.flush()
            } else {
                w.write_all(&csv)
            }
        })
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The events to write as RMM CSV: a snapshot's as recorded; an RMM CSV's normalized.
pub fn rmm_events(input: &LoadedInput) -> Vec<ReplayEvent> {
    match &input.kind {
        // A snapshot keeps its own addresses.
        InputKind::Snapshot { events, .. } => events.events.clone(),
        // An RMM CSV is normalized: the oracle's rules applied (unmatched frees dropped,
        // streams renumbered), each allocation named by its number.
        InputKind::RmmCsv => {
            let mut allocs = Vec::new();
            let mut out = Vec::with_capacity(input.trace.ops.len());
            for op in &input.trace.ops {
                let (kind, slot) = match *op {
                    TraceOp::Alloc {
                        slot, size, stream, ..
                    } => {
                        allocs.push((size, stream));
                        (EventKind::Allocate, slot)
                    }
                    TraceOp::Free { slot, .. } => (EventKind::Free, slot),
                    // The snapshot event format has no pool rows: they are left out.
                    TraceOp::Pool { .. } => continue,
                };
                let (size, stream) = allocs[slot as usize];
                out.push(ReplayEvent {
                    kind,
                    addr: u64::from(slot) + 1,
                    size,
                    stream,
                });
            }
            out
        }
    }
}
