//! Loading a trace into replayable operations, with the oracle's bookkeeping rules:
//!
//! - a free matches the live allocation with the same id; an id may be reused after its free;
//! - a free with no live allocation is counted (`unmatched_frees`) and dropped;
//! - an allocation whose id is still live is counted (`duplicate_alloc_ids`); the id then
//!   names the new allocation and the old one is never freed;
//! - zero-size allocations are kept (they return no pointer; their free does nothing);
//! - streams are numbered in order of first appearance on an allocation row, the default
//!   stream (0) first, so they sort as the oracle's stream handles do.

use std::path::Path;

use cachalot_trace::{Record, TraceError};
use rustc_hash::FxHashMap;

/// One replayable operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes on `stream` into `slot`.
    Alloc {
        /// Which allocation this is (index into the replay's live table).
        slot: u32,
        /// Bytes requested.
        size: u64,
        /// Stream number: 0 = default, then 1, 2, … by first appearance.
        stream: u32,
        /// The trace line.
        line: u64,
    },
    /// Free the allocation in `slot`.
    Free {
        /// Which allocation.
        slot: u32,
        /// The trace line.
        line: u64,
    },
}

impl TraceOp {
    /// The trace line of the operation.
    pub fn line(&self) -> u64 {
        match *self {
            TraceOp::Alloc { line, .. } | TraceOp::Free { line, .. } => line,
        }
    }
}

/// What was read from the trace (the oracle's `trace_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Data rows read (header and empty lines excluded).
    pub lines: u64,
    /// Allocation rows replayed (including zero-size ones).
    pub allocs: u64,
    /// Free rows that matched a live allocation.
    pub frees: u64,
    /// Allocations of 0 bytes.
    pub zero_size_allocs: u64,
    /// Frees of ids that were not live (dropped).
    pub unmatched_frees: u64,
    /// Allocations whose id was still live.
    pub duplicate_alloc_ids: u64,
    /// Rows whose action contains `fail` (RMM's failed allocations; dropped).
    pub trace_alloc_failures: u64,
    /// Rows with any other action (dropped).
    pub other_rows: u64,
    /// Allocations never freed by the trace.
    pub live_at_end: u64,
    /// Distinct non-default streams.
    pub streams: u64,
    /// Sum of allocation sizes.
    pub bytes_requested: u128,
}

/// A trace in memory, ready to replay any number of times.
#[derive(Clone, Debug, Default)]
pub struct LoadedTrace {
    /// Operations in file order.
    pub ops: Vec<TraceOp>,
    /// Counts.
    pub stats: TraceStats,
    /// Number of allocation slots the operations use.
    pub slots: u32,
}

/// Builds a [`LoadedTrace`] from records one at a time.
#[derive(Default)]
pub struct TraceBuilder {
    trace: LoadedTrace,
    live: FxHashMap<u64, u32>,
    streams: FxHashMap<u64, u32>,
}

impl TraceBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one record read at `line`.
    pub fn push(&mut self, line: u64, record: Record) {
        let t = &mut self.trace;
        t.stats.lines += 1;
        match record {
            Record::Alloc { ptr, size, stream } => {
                t.stats.allocs += 1;
                t.stats.bytes_requested += size as u128;
                if size == 0 {
                    t.stats.zero_size_allocs += 1;
                }
                let stream = if stream.is_default() {
                    0
                } else {
                    let next = self.streams.len() as u32 + 1;
                    *self.streams.entry(stream.raw()).or_insert(next)
                };
                let slot = t.slots;
                t.slots += 1;
                if self.live.insert(ptr.raw(), slot).is_some() {
                    t.stats.duplicate_alloc_ids += 1;
                }
                t.ops.push(TraceOp::Alloc {
                    slot,
                    size,
                    stream,
                    line,
                });
            }
            Record::Free { ptr } => match self.live.remove(&ptr.raw()) {
                Some(slot) => {
                    t.stats.frees += 1;
                    t.ops.push(TraceOp::Free { slot, line });
                }
                None => t.stats.unmatched_frees += 1,
            },
            Record::AllocFailure => t.stats.trace_alloc_failures += 1,
            Record::Other => t.stats.other_rows += 1,
        }
    }

    /// The finished trace.
    pub fn finish(mut self) -> LoadedTrace {
        self.trace.stats.live_at_end = self.live.len() as u64;
        self.trace.stats.streams = self.streams.len() as u64;
        self.trace
    }
}

/// Reads a trace file into memory, whatever its format, detected by content: RMM CSV or a
/// torch memory snapshot (pickle or JSON), plain or gzip. A snapshot with history on several
/// devices needs [`crate::input::load_input`] with a device.
pub fn load_path(path: &Path) -> Result<LoadedTrace, crate::input::LoadError> {
    crate::input::load_input(path, &crate::input::LoadOptions::default()).map(|l| l.trace)
}

/// Reads a trace held in memory (plain or gzip).
pub fn load_bytes(bytes: &[u8]) -> Result<LoadedTrace, TraceError> {
    let input: Box<dyn std::io::BufRead> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
            bytes,
        )))
    } else {
        Box::new(bytes)
    };
    let mut b = TraceBuilder::new();
    for event in cachalot_trace::RmmReader::new(input) {
        let event = event?;
        b.push(event.line, event.record);
    }
    Ok(b.finish())
}

/// Reads an RMM CSV trace (plain or gzip) into memory.
pub fn load_rmm(path: &Path) -> Result<LoadedTrace, TraceError> {
    let mut b = TraceBuilder::new();
    for event in cachalot_trace::open(path)? {
        let event = event?;
        b.push(event.line, event.record);
    }
    Ok(b.finish())
}
