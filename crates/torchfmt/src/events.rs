//! From a snapshot's history to replayable events, and RMM CSV out.
//!
//! The rules are those of `shared/traces/README.md` (the reference conversion of the real
//! snapshots into `*.csv.gz`):
//!
//! - `alloc` → allocate (requested size, the entry's stream);
//! - `free_completed` → free, when its block was allocated inside the window; frees of blocks
//!   allocated before the window (the ring buffer kept only the tail of the run) are dropped
//!   and counted;
//! - every other action (free_requested, segment_*, oom, snapshot) is not an event of the
//!   program and is skipped;
//! - streams are renumbered 0, 1, 2, … in order of first appearance (on an alloc or
//!   free_completed entry).
//!
//! [`write_rmm_csv`] writes the events exactly as the reference files are written.

use std::io::{self, Write};

use cachalot_core::TraceAction;
use rustc_hash::FxHashMap;

use crate::SnapshotError;
use crate::model::Snapshot;

/// An allocation or a free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `allocate`.
    Allocate,
    /// `free`.
    Free,
}

/// One replayable event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayEvent {
    /// Allocate or free.
    pub kind: EventKind,
    /// The block's address (the allocation's id).
    pub addr: u64,
    /// Requested bytes.
    pub size: u64,
    /// Stream number, in order of first appearance.
    pub stream: u32,
}

/// The events of one device, and what the conversion had to leave out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayEvents {
    /// The device.
    pub device: u32,
    /// Allocations and frees, in history order.
    pub events: Vec<ReplayEvent>,
    /// Frees of blocks allocated before the window (dropped).
    pub dropped_frees: u64,
    /// Requested bytes of those dropped frees.
    pub dropped_free_bytes: u128,
    /// Requested bytes that were already live when the window starts and are not replayed:
    /// the snapshot's active requested bytes, minus what the window allocated, plus what it
    /// freed. 0 for a history recorded from the start.
    pub live_before_window: i128,
    /// History entries that are not events (free_requested, segment_*, oom, snapshot).
    pub other_entries: u64,
    /// Entries with actions cachalot does not know, skipped.
    pub unknown_entries: u64,
    /// The raw stream handle of each stream number.
    pub streams: Vec<u64>,
    /// `oom` entries in the window.
    pub ooms: u64,
}

impl ReplayEvents {
    /// Whether the window starts mid-run (frees dropped, or memory live before it).
    pub fn starts_mid_run(&self) -> bool {
        self.dropped_frees > 0 || self.live_before_window != 0
    }
}

/// Options of [`replay_events_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventOptions {
    /// Turn each `oom` entry into an allocation of its (rounded) size that is never freed:
    /// the request that failed, so that a replay makes it again. Its address is synthetic
    /// (`u64::MAX - n` for the n-th). Off for conversions, which keep the program's events.
    pub oom_attempts: bool,
    /// Use only the history entries before this index.
    pub until: Option<usize>,
}

/// The replayable events of device `device`'s history.
pub fn replay_events(snap: &Snapshot, device: u32) -> Result<ReplayEvents, SnapshotError> {
    replay_events_with(snap, device, &EventOptions::default())
}

/// [`replay_events`] with options.
pub fn replay_events_with(
    snap: &Snapshot,
    device: u32,
    opts: &EventOptions,
) -> Result<ReplayEvents, SnapshotError> {
    let Some(trace) = snap.device_traces.get(device as usize) else {
        return Err(SnapshotError::NoSuchDevice {
            device,
            with_history: snap.devices_with_history(),
        });
    };
    let mut out = ReplayEvents {
        device,
        unknown_entries: trace.skipped.iter().map(|(_, n)| n).sum(),
        ..ReplayEvents::default()
    };
    let mut streams: FxHashMap<u64, u32> = FxHashMap::default();
    let mut live: FxHashMap<u64, ()> = FxHashMap::default();
    // Requested bytes allocated minus freed over the whole window.
    let mut window_net: i128 = 0;
    let until = opts.until.unwrap_or(usize::MAX);
    for (i, e) in trace.entries.iter().enumerate() {
        let (kind, addr) = match e.action {
            TraceAction::Alloc => {
                window_net += e.size as i128;
                (EventKind::Allocate, e.addr)
            }
            TraceAction::FreeCompleted => {
                window_net -= e.size as i128;
                (EventKind::Free, e.addr)
            }
            TraceAction::Oom => {
                out.ooms += 1;
                if !opts.oom_attempts {
                    out.other_entries += 1;
                    continue;
                }
                (EventKind::Allocate, u64::MAX - out.ooms)
            }
            _ => {
                out.other_entries += 1;
                continue;
            }
        };
        if i >= until {
            continue;
        }
        let next = streams.len() as u32;
        let stream = *streams.entry(e.stream).or_insert_with(|| {
            out.streams.push(e.stream);
            next
        });
        match kind {
            EventKind::Allocate => {
                live.insert(addr, ());
            }
            EventKind::Free => {
                if live.remove(&addr).is_none() {
                    out.dropped_frees += 1;
                    out.dropped_free_bytes += e.size as u128;
                    continue;
                }
            }
        }
        out.events.push(ReplayEvent {
            kind,
            addr,
            size: e.size,
            stream,
        });
    }
    let active_requested: i128 = snap
        .device_segments(device)
        .map(|s| s.requested_size as i128)
        .sum();
    out.live_before_window = active_requested - window_net;
    Ok(out)
}

/// Writes events as an RMM memory-log CSV (`Thread,Time,Action,Pointer,Size,Stream`), as
/// the reference conversions in `shared/traces/real` are written: thread 1, time = row
/// number, pointer in hex.
pub fn write_rmm_csv(mut w: impl Write, events: &[ReplayEvent]) -> io::Result<()> {
    writeln!(w, "Thread,Time,Action,Pointer,Size,Stream")?;
    for (i, e) in events.iter().enumerate() {
        let action = match e.kind {
            EventKind::Allocate => "allocate",
            EventKind::Free => "free",
        };
        writeln!(w, "1,{i},{action},{:#x},{},{}", e.addr, e.size, e.stream)?;
    }
    w.flush()
}
