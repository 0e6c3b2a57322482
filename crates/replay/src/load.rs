//! Loading a trace into replayable operations, with the oracle's bookkeeping rules:
//!
//! - a free matches the live allocation with the same id; an id may be reused after its free;
//! - a free with no live allocation is counted (`unmatched_frees`) and dropped;
//! - an allocation whose id is still live is counted (`duplicate_alloc_ids`); the id then
//!   names the new allocation and the old one is never freed;
//! - zero-size allocations are kept (they return no pointer; their free does nothing);
//! - streams are numbered in order of first appearance on an allocation, `pool_begin`,
//!   `graph_begin` or `record_stream` row, the default stream (0) first, so they sort as the
//!   oracle's stream handles do;
//! - pools are numbered in order of first appearance; the first row naming a pool fixes its
//!   kind (`graph_begin`/`graph_end`: a graph pool, any other row: a MemPool);
//! - a `record_stream` of an id with no live allocation is counted
//!   (`unmatched_record_streams`) and dropped.

use std::path::Path;

use cachalot_trace::{Record, StreamKey, TraceError};
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
    /// A private-pool, `empty_cache` or `record_stream` row.
    Pool {
        /// What it does.
        op: PoolOp,
        /// The trace line.
        line: u64,
    },
}

/// The rows of the oracle's "Private pools, `empty_cache` and `record_stream`". Pools are
/// indexes into [`LoadedTrace::pools`]; streams are numbered as on allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    /// `with use_mem_pool(pool)` entry: make the pool if torch has none, then route the
    /// stream's allocations (every stream's for `None`) to it.
    PoolBegin {
        /// The pool.
        pool: u32,
        /// The stream it takes, or every stream.
        stream: Option<u32>,
    },
    /// `use_mem_pool` exit: stop routing, drop the reference.
    PoolEnd {
        /// The pool.
        pool: u32,
    },
    /// `CUDAGraph.capture_begin()` into the pool on the stream.
    GraphBegin {
        /// The pool.
        pool: u32,
        /// The capture stream, or every stream.
        stream: Option<u32>,
    },
    /// `CUDAGraph.capture_end()`.
    GraphEnd {
        /// The pool.
        pool: u32,
    },
    /// `releasePool`: one reference fewer.
    PoolRelease {
        /// The pool.
        pool: u32,
    },
    /// `torch.cuda.empty_cache()` (`None`), or `emptyCache(pool)`.
    EmptyCache {
        /// The pool, or the whole cache.
        pool: Option<u32>,
    },
    /// `tensor.record_stream(stream)` of the allocation in `slot`.
    RecordStream {
        /// Which allocation.
        slot: u32,
        /// The stream that uses it.
        stream: u32,
    },
}

/// A pool a trace names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracePool {
    /// The number written in the trace (P).
    pub number: u64,
    /// A CUDA-graph pool (`(P, 0)`) rather than a MemPool (`(0, P)`).
    pub graph: bool,
}

impl TraceOp {
    /// The trace line of the operation.
    pub fn line(&self) -> u64 {
        match *self {
            TraceOp::Alloc { line, .. }
            | TraceOp::Free { line, .. }
            | TraceOp::Pool { line, .. } => line,
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
    /// Whether the trace has rows of the pool section (the five counts below are reported
    /// only then).
    pub has_pool_rows: bool,
    /// `pool_begin`, `pool_end`, `graph_begin`, `graph_end` and `pool_release` rows.
    pub pool_ops: u64,
    /// Distinct pool ids.
    pub pools: u64,
    /// `empty_cache` rows.
    pub empty_cache_calls: u64,
    /// `record_stream` rows naming a live allocation.
    pub record_streams: u64,
    /// `record_stream` rows naming no live allocation (dropped).
    pub unmatched_record_streams: u64,
}

/// Where a trace's operations come from, and so what their `line` is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowSource {
    /// Rows of an RMM CSV: `line` is the file's line (1-based, header counted).
    #[default]
    CsvLines,
    /// Events of a torch snapshot's history ([`cachalot_torchfmt::ReplayEvents`]): `line` is
    /// the event's line in the CSV `cachalot convert` writes of them
    /// ([`cachalot_torchfmt::events::event_line`]).
    SnapshotEvents,
}

/// What one operation's `line` names, in the terms of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A line of the CSV file read.
    CsvLine(u64),
    /// The index of a snapshot event ([`cachalot_torchfmt::ReplayEvents::events`]).
    SnapshotEvent(usize),
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
    /// The pools the trace names, in order of first appearance.
    pub pools: Vec<TracePool>,
    /// Where the operations come from.
    pub source: RowSource,
}

impl LoadedTrace {
    /// What an operation's `line` (as in [`TraceOp::line`], and in the replay's messages)
    /// names: a CSV line, or a snapshot event; `None` for a line no event has.
    pub fn origin(&self, line: u64) -> Option<Origin> {
        match self.source {
            RowSource::CsvLines => Some(Origin::CsvLine(line)),
            RowSource::SnapshotEvents => {
                cachalot_torchfmt::events::event_at_line(line).map(Origin::SnapshotEvent)
            }
        }
    }

    /// The most bytes live at once, as requested (unrounded), ignoring out-of-memory: no
    /// device smaller than this runs the trace without one. Summed in `u128` (requests near
    /// 2^64 add up past `u64`); a peak past `u64::MAX` reads as `u64::MAX`, more than any
    /// device holds.
    pub fn peak_live_requested(&self) -> u64 {
        let mut sizes = vec![0u64; self.slots as usize];
        let (mut live, mut peak) = (0u128, 0u128);
        for op in &self.ops {
            match *op {
                TraceOp::Alloc { slot, size, .. } => {
                    sizes[slot as usize] = size;
                    live += u128::from(size);
                    peak = peak.max(live);
                }
                TraceOp::Free { slot, .. } => {
                    live -= u128::from(std::mem::take(&mut sizes[slot as usize]));
                }
                TraceOp::Pool { .. } => {}
            }
        }
        u64::try_from(peak).unwrap_or(u64::MAX)
    }
}

/// Builds a [`LoadedTrace`] from records one at a time.
#[derive(Default)]
pub struct TraceBuilder {
    trace: LoadedTrace,
    live: FxHashMap<u64, u32>,
    streams: FxHashMap<u64, u32>,
    pools: FxHashMap<u64, u32>,
}

impl TraceBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder of a snapshot's events ([`RowSource::SnapshotEvents`]).
    pub fn for_snapshot_events() -> Self {
        let mut b = Self::default();
        b.trace.source = RowSource::SnapshotEvents;
        b
    }

    /// Adds snapshot event `i` ([`TraceBuilder::for_snapshot_events`]), named by its line in
    /// the CSV `cachalot convert` writes.
    pub fn push_event(&mut self, i: usize, record: Record) {
        self.push(cachalot_torchfmt::events::event_line(i), record);
    }

    /// [`TraceBuilder::push`], with the tables it grows reserved first, fallibly: a trace
    /// too large for this process's memory is an error ([`TraceError::OutOfMemory`]), not an
    /// abort of the host. Nothing is added when it fails.
    pub fn try_push(&mut self, line: u64, record: Record) -> Result<(), TraceError> {
        let rows = self.trace.ops.len() as u64;
        let oom = |what: &'static str, bytes: usize| TraceError::OutOfMemory {
            line,
            rows,
            what,
            bytes: bytes as u64,
        };
        let ops = &mut self.trace.ops;
        if ops.len() == ops.capacity() {
            let more = ops.capacity().max(1);
            ops.try_reserve(1)
                .map_err(|_| oom("operations", more * size_of::<TraceOp>()))?;
        }
        if matches!(record, Record::Alloc { .. }) && self.live.len() == self.live.capacity() {
            let more = self.live.capacity().max(1);
            self.live
                .try_reserve(1)
                .map_err(|_| oom("live allocations", more * size_of::<(u64, u32)>()))?;
        }
        self.push(line, record);
        Ok(())
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
                let stream = self.stream(stream);
                let t = &mut self.trace;
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
            other => self.push_pool_row(line, other),
        }
    }

    /// The number of a stream: 0 for the default, then 1, 2, … by first appearance.
    fn stream(&mut self, stream: StreamKey) -> u32 {
        if stream.is_default() {
            0
        } else {
            let next = self.streams.len() as u32 + 1;
            *self.streams.entry(stream.raw()).or_insert(next)
        }
    }

    /// The index of pool `number`, made with kind `graph` on first sight.
    fn pool(&mut self, number: u64, graph: bool) -> u32 {
        let next = self.pools.len() as u32;
        *self.pools.entry(number).or_insert_with(|| {
            self.trace.pools.push(TracePool { number, graph });
            next
        })
    }

    fn push_pool_row(&mut self, line: u64, record: Record) {
        self.trace.stats.has_pool_rows = true;
        let op = match record {
            Record::PoolBegin { pool, stream } => {
                let stream = stream.map(|s| self.stream(s));
                PoolOp::PoolBegin {
                    pool: self.pool(pool, false),
                    stream,
                }
            }
            Record::GraphBegin { pool, stream } => {
                let stream = stream.map(|s| self.stream(s));
                PoolOp::GraphBegin {
                    pool: self.pool(pool, true),
                    stream,
                }
            }
            Record::PoolEnd { pool } => PoolOp::PoolEnd {
                pool: self.pool(pool, false),
            },
            Record::GraphEnd { pool } => PoolOp::GraphEnd {
                pool: self.pool(pool, true),
            },
            Record::PoolRelease { pool } => PoolOp::PoolRelease {
                pool: self.pool(pool, false),
            },
            Record::EmptyCache { pool } => {
                self.trace.stats.empty_cache_calls += 1;
                PoolOp::EmptyCache {
                    pool: pool.map(|p| self.pool(p, false)),
                }
            }
            Record::RecordStream { ptr, stream } => {
                let stream = self.stream(stream);
                match self.live.get(&ptr.raw()) {
                    Some(&slot) => {
                        self.trace.stats.record_streams += 1;
                        PoolOp::RecordStream { slot, stream }
                    }
                    None => {
                        self.trace.stats.unmatched_record_streams += 1;
                        return;
                    }
                }
            }
            _ => return,
        };
        if !matches!(op, PoolOp::EmptyCache { .. } | PoolOp::RecordStream { .. }) {
            self.trace.stats.pool_ops += 1;
        }
        self.trace.ops.push(TraceOp::Pool { op, line });
    }

    /// The finished trace.
    pub fn finish(mut self) -> LoadedTrace {
        self.trace.stats.live_at_end = self.live.len() as u64;
        self.trace.stats.streams = self.streams.len() as u64;
        self.trace.stats.pools = self.trace.pools.len() as u64;
        self.trace
    }
}

/// Reads a trace held in memory (plain or gzip).
pub fn load_bytes(bytes: &[u8]) -> Result<LoadedTrace, TraceError> {
    let input = cachalot_trace::decompressed(bytes).map_err(|source| TraceError::Read {
        path: "<input>".into(),
        line: 0,
        source,
    })?;
    let mut b = TraceBuilder::new();
    for event in cachalot_trace::RmmReader::new(input) {
        let event = event?;
        b.try_push(event.line, event.record)?;
    }
    Ok(b.finish())
}

/// Reads an RMM CSV trace (plain or gzip) into memory.
pub fn load_rmm(path: &Path) -> Result<LoadedTrace, TraceError> {
    let mut b = TraceBuilder::new();
    for event in cachalot_trace::open(path)? {
        let event = event?;
        b.try_push(event.line, event.record)?;
    }
    Ok(b.finish())
}
