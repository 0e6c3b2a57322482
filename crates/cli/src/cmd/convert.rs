//! `cachalot convert IN OUT.csv`: any supported input as an RMM memory-log CSV.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use cachalot_replay::input::InputKind;
use cachalot_replay::{LoadOptions, LoadedInput, LoadedTrace, PoolOp, TraceOp, load_input};
use cachalot_torchfmt::write_rmm_csv;
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
    let (csv, _) = rmm_csv(&input)?;
    if let Some(note) = input.note() {
        eprintln!("cachalot: {note}");
    }
    // Sealed, so that a cut-short copy is an error when read back, not a shorter trace.
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

/// The input as RMM CSV, and its number of rows: a snapshot's events as recorded; an RMM
/// CSV normalized (the oracle's rules applied: unmatched frees and `record_stream`s dropped,
/// streams renumbered, each allocation named by its number), its pool, `empty_cache` and
/// `record_stream` rows kept in place.
pub fn rmm_csv(input: &LoadedInput) -> std::io::Result<(Vec<u8>, usize)> {
    let mut csv = Vec::new();
    match &input.kind {
        // A snapshot keeps its own addresses.
        InputKind::Snapshot { events, .. } => {
            write_rmm_csv(&mut csv, &events.events)?;
            Ok((csv, events.events.len()))
        }
        InputKind::RmmCsv => {
            let trace = &input.trace;
            writeln!(csv, "Thread,Time,Action,Pointer,Size,Stream")?;
            let mut allocs = Vec::new();
            for (i, op) in trace.ops.iter().enumerate() {
                let (action, pointer, size, stream) = match *op {
                    TraceOp::Alloc {
                        slot, size, stream, ..
                    } => {
                        allocs.push((size, stream));
                        (
                            "allocate",
                            format!("{:#x}", u64::from(slot) + 1),
                            size,
                            stream.to_string(),
                        )
                    }
                    TraceOp::Free { slot, .. } => {
                        let (size, stream) = allocs[slot as usize];
                        (
                            "free",
                            format!("{:#x}", u64::from(slot) + 1),
                            size,
                            stream.to_string(),
                        )
                    }
                    TraceOp::Pool { op, .. } => pool_row(trace, op),
                };
                writeln!(csv, "1,{i},{action},{pointer},{size},{stream}")?;
            }
            Ok((csv, trace.ops.len()))
        }
    }
}

/// A pool, `empty_cache` or `record_stream` row as the oracle reads it: (action, pointer
/// column, size, stream column).
fn pool_row(trace: &LoadedTrace, op: PoolOp) -> (&'static str, String, u64, String) {
    let number = |pool: u32| trace.pools[pool as usize].number.to_string();
    let filter = |stream: Option<u32>| stream.map_or("*".to_string(), |s| s.to_string());
    match op {
        PoolOp::PoolBegin { pool, stream } => ("pool_begin", number(pool), 0, filter(stream)),
        PoolOp::PoolEnd { pool } => ("pool_end", number(pool), 0, "0".into()),
        PoolOp::GraphBegin { pool, stream } => ("graph_begin", number(pool), 0, filter(stream)),
        PoolOp::GraphEnd { pool } => ("graph_end", number(pool), 0, "0".into()),
        PoolOp::PoolRelease { pool } => ("pool_release", number(pool), 0, "0".into()),
        PoolOp::EmptyCache { pool } => (
            "empty_cache",
            pool.map_or("0".to_string(), number),
            0,
            "0".into(),
        ),
        PoolOp::RecordStream { slot, stream } => (
            "record_stream",
            format!("{:#x}", u64::from(slot) + 1),
            0,
            stream.to_string(),
        ),
    }
}
