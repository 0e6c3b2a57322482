//! `convert IN OUT.csv`: any supported input as an RMM memory-log CSV, sealed (so that a
//! cut-short copy is an error when read back), written atomically, gzip where the name says.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use cachalot_replay::input::InputKind;
use cachalot_replay::{LoadOptions, LoadedInput, LoadedTrace, PoolOp, TraceOp, load_input};
use cachalot_torchfmt::write_rmm_csv;
use cachalot_trace::{seal_csv, write_atomic};

/// An input converted.
pub struct Converted {
    /// The sealed CSV.
    pub csv: Vec<u8>,
    /// Its number of event rows.
    pub rows: usize,
    /// What the input recorded that the CSV cannot say (for stderr).
    pub note: Option<String>,
}

/// Reads `input` (a snapshot's `device`) and converts it.
pub fn convert(input: &Path, device: Option<u32>) -> Result<Converted> {
    if !input.exists() {
        bail!("input file {} does not exist", input.display());
    }
    let loaded = load_input(
        input,
        &LoadOptions {
            device,
            ..LoadOptions::default()
        },
    )?;
    let (csv, rows) = rmm_csv(&loaded)?;
    Ok(Converted {
        csv: seal_csv(&csv),
        rows,
        note: loaded.note(),
    })
}

impl Converted {
    /// Writes the CSV to `path` atomically, gzip-compressed when the name ends in `.gz`.
    pub fn write(&self, path: &Path) -> Result<()> {
        let gzip = path.extension().is_some_and(|e| e == "gz");
        write_atomic(path, |w| {
            if gzip {
                let mut z = flate2::write::GzEncoder::new(w, flate2::Compression::default());
                z.write_all(&self.csv)?;
                z.finish()?.flush()
            } else {
                w.write_all(&self.csv)
            }
        })
        .with_context(|| format!("cannot write {}", path.display()))
    }
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
