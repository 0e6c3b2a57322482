//! Test helpers: the oracle's `trace_stats`, computed from reader events.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use cachalot_trace::{Event, PtrId, Record, RmmReader, TraceError};

/// The oracle's `trace_stats` (minus what needs the allocator).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OracleStats {
    pub lines: u64,
    pub allocs: u64,
    pub frees: u64,
    pub zero_size_allocs: u64,
    pub unmatched_frees: u64,
    pub duplicate_alloc_ids: u64,
    pub trace_alloc_failures: u64,
    pub other_rows: u64,
    pub live_at_end: u64,
    pub streams: u64,
    pub bytes_requested: u64,
}

impl OracleStats {
    /// Field names in the oracle's JSON, with their values.
    pub fn fields(&self) -> [(&'static str, u64); 11] {
        [
            ("lines", self.lines),
            ("allocs", self.allocs),
            ("frees", self.frees),
            ("zero_size_allocs", self.zero_size_allocs),
            ("unmatched_frees", self.unmatched_frees),
            ("duplicate_alloc_ids", self.duplicate_alloc_ids),
            ("trace_alloc_failures", self.trace_alloc_failures),
            ("other_rows", self.other_rows),
            ("live_at_end", self.live_at_end),
            ("streams", self.streams),
            ("bytes_requested", self.bytes_requested),
        ]
    }

    /// One-line JSON object.
    pub fn to_json(&self) -> String {
        let body: Vec<String> = self
            .fields()
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", body.join(","))
    }
}

/// Replays the bookkeeping the oracle does while loading a trace.
pub fn stats_of<I: IntoIterator<Item = Event>>(events: I) -> OracleStats {
    let mut s = OracleStats::default();
    let mut live: HashMap<PtrId, ()> = HashMap::new();
    let mut streams = HashSet::new();
    for ev in events {
        s.lines += 1;
        match ev.record {
            Record::Alloc { ptr, size, stream } => {
                if !stream.is_default() {
                    streams.insert(stream);
                }
                if live.insert(ptr, ()).is_some() {
                    s.duplicate_alloc_ids += 1;
                }
                if size == 0 {
                    s.zero_size_allocs += 1;
                }
                s.allocs += 1;
                s.bytes_requested = s.bytes_requested.wrapping_add(size);
            }
            Record::Free { ptr } => {
                if live.remove(&ptr).is_some() {
                    s.frees += 1;
                } else {
                    s.unmatched_frees += 1;
                }
            }
            Record::AllocFailure => s.trace_alloc_failures += 1,
            Record::Other => s.other_rows += 1,
            // Pool rows are not allocations; the streams they name get streams too.
            Record::PoolBegin { stream, .. } | Record::GraphBegin { stream, .. } => {
                streams.extend(stream.filter(|s| !s.is_default()));
            }
            Record::RecordStream { stream, .. } if !stream.is_default() => {
                streams.insert(stream);
            }
            _ => {}
        }
    }
    s.live_at_end = live.len() as u64;
    s.streams = streams.len() as u64;
    s
}

/// Reads a whole trace: stats, or the first error.
pub fn read_stats<R: BufRead>(reader: RmmReader<R>) -> Result<OracleStats, TraceError> {
    let events: Vec<Event> = reader.collect::<Result<_, _>>()?;
    Ok(stats_of(events))
}
