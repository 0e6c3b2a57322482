//! Allocation history, as torch's `_record_memory_history` keeps it: a bounded ring of trace
//! entries (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
//! segment_unmap, oom, snapshot), oldest first.

use std::collections::VecDeque;

use cachalot_device::StreamId;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceAction {
    /// A block was handed out (`size` = the unrounded request).
    Alloc,
    /// The user freed a block (it may still wait on stream events).
    FreeRequested,
    /// The block went back to its pool.
    FreeCompleted,
    /// A segment was obtained with `cudaMalloc`.
    SegmentAlloc,
    /// A segment was returned with `cudaFree`.
    SegmentFree,
    /// Pages of an expandable segment were mapped.
    SegmentMap,
    /// Pages of an expandable segment were unmapped.
    SegmentUnmap,
    /// A snapshot was taken (`size` = active bytes then).
    Snapshot,
    /// A request failed with out-of-memory (`size` = the rounded request).
    Oom,
}

impl TraceAction {
    /// The name torch writes in snapshots.
    pub fn name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
        }
    }
}

/// One history entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Block or segment address (0 for snapshot and oom).
    pub addr: u64,
    /// See [`TraceAction`] for what the size means per action.
    pub size: u64,
    /// The stream concerned.
    pub stream: StreamId,
    /// Free device bytes (oom entries only).
    pub device_free: u64,
    /// Position of the entry in the whole history (0 = first entry ever recorded). Snapshots
    /// report it as `time_us`: a virtual clock, one tick per entry (torch writes wall-clock
    /// microseconds there), so it is deterministic and strictly increasing.
    pub seq: u64,
}

/// A bounded ring of [`TraceEntry`].
#[derive(Clone, Debug)]
pub struct History {
    max_entries: usize,
    entries: VecDeque<TraceEntry>,
    next_seq: u64,
}

impl History {
    /// An empty history keeping at most `max_entries` (at least 1).
    pub fn new(max_entries: usize) -> Self {
        History {
            max_entries: max_entries.max(1),
            entries: VecDeque::new(),
            next_seq: 0,
        }
    }

    #[inline]
    fn push_entry(&mut self, e: TraceEntry) {
        if self.entries.len() == self.max_entries {
            self.entries.pop_front();
        }
        self.entries.push_back(e);
        self.next_seq += 1;
    }

    /// Records an entry.
    #[inline]
    pub fn push(&mut self, action: TraceAction, addr: u64, size: u64, stream: StreamId) {
        let seq = self.next_seq;
        self.push_entry(TraceEntry {
            action,
            addr,
            size,
            stream,
            device_free: 0,
            seq,
        });
    }

    /// Records an out-of-memory entry.
    pub fn push_oom(&mut self, rounded: u64, stream: StreamId, device_free: u64) {
        let seq = self.next_seq;
        self.push_entry(TraceEntry {
            action: TraceAction::Oom,
            addr: 0,
            size: rounded,
            stream,
            device_free,
            seq,
        });
    }

    /// The entries kept, oldest first.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &TraceEntry> {
        self.entries.iter()
    }

    /// The ring's capacity.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_entries() {
        let mut h = History::new(2);
        for i in 0..5 {
            h.push(TraceAction::Alloc, i, 1, StreamId(0));
        }
        let addrs: Vec<u64> = h.entries().map(|e| e.addr).collect();
        assert_eq!(addrs, vec![3, 4]);
        assert_eq!(h.entries().last().unwrap().seq, 4);
    }
}
