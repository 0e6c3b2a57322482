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
//!
//! What a replay of the program's workload needs goes beyond those rules
//! ([`EventOptions::WORKLOAD`]): the requests that failed (`oom` entries) are requests the
//! program made, and a ring-buffer window is completed with the allocations live at its
//! start, reconstructed from the snapshot's final blocks and the window's frees.
//!
//! Private pools (`crate::routing`): every allocation goes to the pool its entry names, by
//! the oracle's pool rows around it: `pool_begin`/`pool_end` (every stream) for a `MemPool`'s
//! `(0, n)`, `graph_begin`/`graph_end` for a graph's `(n, 0)`, opened before the first
//! allocation of a run into one pool and closed before the next allocation elsewhere. At a
//! pool's release point its references are dropped (`pool_release`: one for a `MemPool`, one
//! per capture for a graph) and its free segments given back (`empty_cache` of the pool), as
//! `del pool` does.

use std::io::{self, Write};

use cachalot_core::{MempoolId, TraceAction};
use rustc_hash::FxHashMap;

use crate::SnapshotError;
use crate::model::Snapshot;
use crate::routing::Routing;
use crate::window::{self, Step};

/// An allocation, a free, the cache given back, or a private pool's routing and release
/// (the oracle's rows of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `allocate`.
    Allocate,
    /// `free`.
    Free,
    /// `empty_cache` of the whole cache ([`ReplayEvent::pool`] the default pools: where the
    /// history shows the allocator giving cached segments back, [`WindowStart::Layout`]
    /// only) or of one private pool (at its release point).
    EmptyCache,
    /// `pool_begin` of a `MemPool` for every stream (made at its first begin).
    PoolBegin,
    /// `pool_end`: routing stops and the begin's reference is dropped.
    PoolEnd,
    /// `graph_begin` of a graph's pool for every stream (one reference per capture).
    GraphBegin,
    /// `graph_end`: routing stops; the graph keeps its reference.
    GraphEnd,
    /// `pool_release`: one reference dropped.
    PoolRelease,
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
    /// The pool of a pool event or of `empty_cache` ([`MempoolId::DEFAULT`] otherwise).
    pub pool: MempoolId,
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
    /// The index of the first `oom` entry in the history.
    pub first_oom_entry: Option<usize>,
    /// `oom` entries replayed as requests ([`EventOptions::failed_requests`]).
    pub failed_requests: u64,
    /// For each event, the index of the history entry it comes from (`device_traces[d][i]`);
    /// [`ReplayEvents::NOT_RECORDED`] for events the history does not hold (allocations
    /// reconstructed before the window).
    pub entries: Vec<u32>,
    /// Allocations put before the window ([`EventOptions::window`]).
    pub reconstructed: u64,
    /// Their requested bytes.
    pub reconstructed_bytes: u128,
    /// How the window's start was completed: [`WindowStart::Layout`] falls back to
    /// [`WindowStart::Live`] where the start state cannot be rebuilt.
    pub window: WindowStart,
    /// Why the start state could not be rebuilt, when [`WindowStart::Layout`] was asked for
    /// and [`WindowStart::Live`] used instead.
    pub layout_refused: Option<String>,
    /// Events that only rebuild the start state ([`WindowStart::Layout`]'s fillers and the
    /// whole-segment requests); they come first, before the window's own.
    pub layout_events: u64,
    /// Segments at the start of the window ([`WindowStart::Layout`]).
    pub start_segments: u64,
}

impl ReplayEvents {
    /// [`ReplayEvents::entries`] of an event the history does not hold.
    pub const NOT_RECORDED: u32 = u32::MAX;

    /// What event `i` is in the snapshot, for people: `device_traces[d][n] (alloc)`.
    pub fn describe(&self, i: usize) -> Option<String> {
        let e = self.events.get(i)?;
        let entry = *self.entries.get(i)?;
        let what = match (e.kind, FailedRequest::from_addr(e.addr)) {
            (EventKind::Allocate, Some(_)) => "oom: the failed request",
            (EventKind::Free, Some(_)) => "free of a failed request (the lifetime model)",
            (EventKind::Allocate, None) => "alloc",
            (EventKind::Free, None) => "free_completed",
            (EventKind::EmptyCache, _) if e.pool.is_default() => {
                "segment_free: the cache given back"
            }
            (EventKind::EmptyCache, _) => "segment_free: the pool's memory given back",
            (EventKind::PoolBegin | EventKind::GraphBegin, _) => {
                "alloc: the first of a run into a private pool, which the pool takes"
            }
            (EventKind::PoolEnd | EventKind::GraphEnd, _) => {
                "alloc: the first after a run into a private pool, which it no longer takes"
            }
            (EventKind::PoolRelease, _) => "segment_free: the pool's last reference dropped",
        };
        let what = if e.pool.is_default() {
            what.to_string()
        } else {
            format!("{what}; pool {}", e.pool)
        };
        Some(if window::is_filler(e.addr) {
            "a request that rebuilds the snapshot's segments as they were before the history's \
             window"
                .to_string()
        } else if entry == Self::NOT_RECORDED {
            format!(
                "an allocation live before the history's window (reconstructed), address {:#x}",
                e.addr
            )
        } else {
            format!(
                "history entry device_traces[{}][{entry}] ({what})",
                self.device
            )
        })
    }

    /// Whether the window starts mid-run (frees dropped, or memory live before it).
    pub fn starts_mid_run(&self) -> bool {
        self.dropped_frees > 0 || self.live_before_window != 0 || self.reconstructed > 0
    }
}

/// The id a replay gives the `n`-th failed request of a history (`n` from 1): the address
/// `u64::MAX - n`, which no device hands out, so it never names a real block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FailedRequest(u64);

impl FailedRequest {
    /// At most this many failed requests get an id (far more than any history holds).
    const MAX: u64 = 1 << 32;

    /// The `n`-th failed request (`n` ≥ 1).
    pub fn nth(n: u64) -> Self {
        FailedRequest(n.clamp(1, Self::MAX))
    }

    /// Which failed request this is, from 1.
    pub fn number(self) -> u64 {
        self.0
    }

    /// The address the replay uses for it.
    pub fn addr(self) -> u64 {
        u64::MAX - self.0
    }

    /// The failed request an address names, if it is one.
    pub fn from_addr(addr: u64) -> Option<Self> {
        let n = u64::MAX - addr;
        (1..=Self::MAX).contains(&n).then_some(FailedRequest(n))
    }
}

/// What a snapshot's history is turned into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventOptions {
    /// Replay each `oom` entry as a request of its (rounded) size (id [`FailedRequest`]).
    /// The history never frees it; it is freed at the first free after which the program's
    /// live requested bytes are back at or below what they were when it was requested (the
    /// model of docs/advisor.md: memory taken while the program's usage climbs is given back
    /// when it falls back), and is held to the end if they never are. Off for conversions,
    /// which keep the program's recorded events.
    pub failed_requests: bool,
    /// For a window that starts mid-run (ring buffer): what to put before it.
    pub window: WindowStart,
    /// Use only the history entries before this index.
    pub until: Option<usize>,
}

impl EventOptions {
    /// The whole workload the program asked for: failed requests included and the window
    /// completed. What `replay`, `tune` and `compare` replay.
    pub const WORKLOAD: EventOptions = EventOptions {
        failed_requests: true,
        window: WindowStart::Live,
        until: None,
    };
}

/// What a window that starts mid-run (a ring buffer's) gets before it (`crate::window` says
/// how the start state is found).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowStart {
    /// Nothing: frees of blocks allocated before the window are dropped (the reference
    /// conversion, what `cachalot convert` writes).
    #[default]
    Dropped,
    /// The blocks live at its start (allocated at the snapshot but not by the window, and
    /// freed by the window without being allocated by it), requested in address order, so
    /// their frees are replayed too. Each configuration places them its own way, in fresh
    /// segments: what `replay`, `tune` and `compare` use, since they compare configurations.
    /// Requested bytes at the end are the snapshot's; allocated bytes can differ by the
    /// remainders too small to split, which depend on where a block lands.
    Live,
    /// The start state itself: the snapshot's segments at the window's start with those
    /// blocks at their places and the free gaps between them, rebuilt by requests, and each
    /// release of cached segments the window records (`segment_free`) as an `empty_cache`.
    /// Under the snapshot's own configuration the replay then makes the recorded run's
    /// decisions; under another it inherits the recorded fragmentation. What the
    /// reconstruction check replays. Falls back to [`WindowStart::Live`] (saying why in
    /// [`ReplayEvents::layout_refused`]) where the start state is not known: expandable
    /// segments, or pieces no request can make under the snapshot's configuration.
    Layout,
}

/// The replayable events of device `device`'s history, as the reference conversions make
/// them (no failed requests, window not completed).
pub fn replay_events(snap: &Snapshot, device: u32) -> Result<ReplayEvents, SnapshotError> {
    replay_events_with(snap, device, &EventOptions::default())
}

/// Builds the event list: numbers streams by first appearance, drops unmatched frees, and
/// frees failed requests when the live bytes fall back (see [`EventOptions::failed_requests`]).
struct Builder<'a> {
    out: &'a mut ReplayEvents,
    streams: FxHashMap<u64, u32>,
    live: FxHashMap<u64, u64>,
    /// Requested bytes live, failed requests excluded (wide: sizes near 2^64 add up past it).
    level: u128,
    /// Failed requests not yet freed: (level when requested, id, size, stream), max-heap.
    pending: std::collections::BinaryHeap<(u128, FailedRequest, u64, u32)>,
    /// The history entry being turned into events.
    entry: u32,
    /// The private pool allocations go to now.
    route: Option<MempoolId>,
    /// References the events gave each private pool (a `MemPool`: 1; a graph: 1 per capture).
    refs: FxHashMap<MempoolId, u32>,
}

/// Whether a pool id is a graph's (`(n, 0)`).
fn is_graph(pool: MempoolId) -> bool {
    pool.first != 0
}

impl Builder<'_> {
    fn stream(&mut self, raw: u64) -> u32 {
        let next = self.streams.len() as u32;
        let out = &mut *self.out;
        *self.streams.entry(raw).or_insert_with(|| {
            out.streams.push(raw);
            next
        })
    }

    fn push(&mut self, kind: EventKind, addr: u64, size: u64, stream: u32) {
        self.push_pool(kind, addr, size, stream, MempoolId::DEFAULT);
    }

    fn push_pool(&mut self, kind: EventKind, addr: u64, size: u64, stream: u32, pool: MempoolId) {
        self.out.entries.push(self.entry);
        self.out.events.push(ReplayEvent {
            kind,
            addr,
            size,
            stream,
            pool,
        });
    }

    /// Routes the next allocations to `pool`: closes the open pool, opens this one.
    fn route_to(&mut self, pool: MempoolId) {
        let wanted = (!pool.is_default()).then_some(pool);
        if self.route == wanted {
            return;
        }
        if let Some(open) = self.route.take() {
            let end = if is_graph(open) {
                EventKind::GraphEnd
            } else {
                EventKind::PoolEnd
            };
            self.push_pool(end, 0, 0, 0, open);
        }
        if let Some(p) = wanted {
            let refs = self.refs.entry(p).or_insert(0);
            let begin = if is_graph(p) {
                *refs += 1;
                EventKind::GraphBegin
            } else {
                *refs = 1;
                EventKind::PoolBegin
            };
            self.push_pool(begin, 0, 0, 0, p);
            self.route = Some(p);
        }
    }

    /// Drops the references the events gave `pool` and gives its free segments back.
    fn release(&mut self, pool: MempoolId) {
        let Some(refs) = self.refs.remove(&pool) else {
            return; // never made by these events: nothing of it to give back
        };
        if self.route == Some(pool) {
            self.route_to(MempoolId::DEFAULT);
        }
        for _ in 0..refs {
            self.push_pool(EventKind::PoolRelease, 0, 0, 0, pool);
        }
        self.push_pool(EventKind::EmptyCache, 0, 0, 0, pool);
    }

    fn alloc(&mut self, addr: u64, size: u64, raw_stream: u64, pool: MempoolId) {
        self.route_to(pool);
        let stream = self.stream(raw_stream);
        if let Some(old) = self.live.insert(addr, size) {
            self.level -= u128::from(old);
        }
        self.level += u128::from(size);
        self.push(EventKind::Allocate, addr, size, stream);
    }

    fn free(&mut self, addr: u64, size: u64, raw_stream: u64) {
        let stream = self.stream(raw_stream);
        let Some(live) = self.live.remove(&addr) else {
            self.out.dropped_frees += 1;
            self.out.dropped_free_bytes += size as u128;
            return;
        };
        self.level -= u128::from(live);
        self.push(EventKind::Free, addr, size, stream);
        while let Some(&(at, id, size, stream)) = self.pending.peek() {
            if at < self.level {
                break;
            }
            self.pending.pop();
            self.push(EventKind::Free, id.addr(), size, stream);
        }
    }

    fn failed(&mut self, size: u64, raw_stream: u64, pool: MempoolId) {
        self.route_to(pool);
        let stream = self.stream(raw_stream);
        self.out.failed_requests += 1;
        let id = FailedRequest::nth(self.out.failed_requests);
        self.push(EventKind::Allocate, id.addr(), size, stream);
        self.pending.push((self.level, id, size, stream));
    }
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
    // Requested bytes allocated minus freed over the whole window.
    let mut window_net: i128 = 0;
    for e in &trace.entries {
        match e.action {
            TraceAction::Alloc => window_net += e.size as i128,
            TraceAction::FreeCompleted => window_net -= e.size as i128,
            TraceAction::Oom => out.ooms += 1,
            _ => {}
        }
    }
    let active_requested: i128 = snap
        .device_segments(device)
        .map(|s| s.requested_size as i128)
        .sum();
    out.live_before_window = active_requested - window_net;
    out.first_oom_entry = trace
        .entries
        .iter()
        .position(|e| e.action == TraceAction::Oom);
    let routing = Routing::new(snap, device, &trace.entries)?;
    let before = match opts.window {
        WindowStart::Dropped => Vec::new(),
        WindowStart::Live | WindowStart::Layout => {
            window::live_before(snap, device, &trace.entries, &routing)
        }
    };
    let mut steps = None;
    if opts.window == WindowStart::Layout && !before.is_empty() {
        match window::layout_steps(snap, device, &trace.entries, &before, &routing) {
            Ok(s) => steps = Some(s),
            Err(why) => out.layout_refused = Some(why),
        }
    }
    out.window = match (opts.window, &steps) {
        (WindowStart::Dropped, _) => WindowStart::Dropped,
        (_, Some(_)) => WindowStart::Layout,
        _ => WindowStart::Live,
    };
    let releases = if steps.is_some() {
        window::releases(&trace.entries, &routing)
    } else {
        Default::default()
    };
    let mut b = Builder {
        out: &mut out,
        streams: FxHashMap::default(),
        live: FxHashMap::default(),
        level: 0,
        pending: std::collections::BinaryHeap::new(),
        entry: ReplayEvents::NOT_RECORDED,
        route: None,
        refs: FxHashMap::default(),
    };
    let live_step = |b: &mut Builder, addr: u64, size: u64, stream: u64, pool: MempoolId| {
        b.alloc(addr, size, stream, pool);
        b.out.reconstructed += 1;
        b.out.reconstructed_bytes += size as u128;
    };
    match steps {
        Some(steps) => {
            for step in steps {
                match step {
                    Step::Alloc {
                        id,
                        size,
                        stream,
                        live: true,
                        pool,
                    } => live_step(&mut b, id, size, stream, pool),
                    Step::Alloc {
                        id,
                        size,
                        stream,
                        pool,
                        ..
                    } => {
                        b.out.layout_events += 1;
                        b.alloc(id, size, stream, pool);
                    }
                    Step::Free { id, stream } => {
                        b.out.layout_events += 1;
                        b.free(id, 0, stream);
                    }
                }
            }
            b.out.start_segments =
                window::start_segment_count(snap, device, &trace.entries, &routing);
        }
        None => {
            for l in &before {
                live_step(&mut b, l.addr, l.requested, l.stream, l.pool);
            }
        }
    }
    let until = opts.until.unwrap_or(usize::MAX);
    for (i, e) in trace.entries.iter().enumerate().take(until) {
        b.entry = u32::try_from(i).unwrap_or(ReplayEvents::NOT_RECORDED);
        if releases.contains(&i) {
            b.push(EventKind::EmptyCache, 0, 0, 0);
        }
        for &pool in routing.released_before(i) {
            b.release(pool);
        }
        match e.action {
            TraceAction::Alloc => b.alloc(e.addr, e.size, e.stream, routing.pool_of(e)),
            TraceAction::FreeCompleted => b.free(e.addr, e.size, e.stream),
            TraceAction::Oom if opts.failed_requests => {
                b.failed(e.size, e.stream, routing.pool_of(e))
            }
            _ => b.out.other_entries += 1,
        }
    }
    b.route_to(MempoolId::DEFAULT);
    // Entries past `until` still count as seen.
    out.other_entries += trace
        .entries
        .iter()
        .skip(until)
        .filter(|e| !matches!(e.action, TraceAction::Alloc | TraceAction::FreeCompleted))
        .count() as u64;
    Ok(out)
}

/// The number each private pool of `events` gets in a trace, where a pool is named by one
/// number and the first row naming it fixes its kind (the oracle's rows): a `MemPool`'s
/// `(0, n)` is `n`, a graph's `(n, 0)` is `n` unless a `MemPool` of the events has that
/// number (torch counts the two kinds apart), in which case it gets the next number no
/// pool of the events uses.
pub fn pool_numbers(events: &[ReplayEvent]) -> FxHashMap<MempoolId, u64> {
    let mut out = FxHashMap::default();
    let pools = || events.iter().map(|e| e.pool).filter(|p| !p.is_default());
    let taken: rustc_hash::FxHashSet<u64> = pools().map(|p| p.first.max(p.second)).collect();
    let mempools: rustc_hash::FxHashSet<u64> = pools()
        .filter(|p| !is_graph(*p))
        .map(|p| p.second)
        .collect();
    let mut next = taken.iter().copied().max().unwrap_or(0);
    for p in pools() {
        out.entry(p).or_insert_with(|| {
            if is_graph(p) && mempools.contains(&p.first) {
                next = next.saturating_add(1);
                next
            } else {
                p.first.max(p.second)
            }
        });
    }
    out
}

/// The line of event 0 in the CSV [`write_rmm_csv`] writes (line 1 is the header): event `i`
/// is on line `i + FIRST_EVENT_LINE`. A replay of a snapshot names its events by these lines,
/// so that its messages point into the file `cachalot convert` makes of the snapshot.
pub const FIRST_EVENT_LINE: u64 = 2;

/// The line of event `i` in the CSV [`write_rmm_csv`] writes.
pub fn event_line(i: usize) -> u64 {
    i as u64 + FIRST_EVENT_LINE
}

/// The event on `line` of the CSV [`write_rmm_csv`] writes; `None` for the header.
pub fn event_at_line(line: u64) -> Option<usize> {
    usize::try_from(line.checked_sub(FIRST_EVENT_LINE)?).ok()
}

/// Writes events as an RMM memory-log CSV (`Thread,Time,Action,Pointer,Size,Stream`), as
/// the reference conversions in `shared/traces/real` are written: thread 1, time = row
/// number, pointer in hex; pool rows name their pool by [`pool_numbers`] and open it for
/// every stream (`*`).
pub fn write_rmm_csv(mut w: impl Write, events: &[ReplayEvent]) -> io::Result<()> {
    writeln!(w, "Thread,Time,Action,Pointer,Size,Stream")?;
    let numbers = pool_numbers(events);
    for (i, e) in events.iter().enumerate() {
        let n = numbers.get(&e.pool).copied().unwrap_or(0);
        let (action, stream) = match e.kind {
            EventKind::Allocate | EventKind::Free => {
                let action = if e.kind == EventKind::Allocate {
                    "allocate"
                } else {
                    "free"
                };
                writeln!(w, "1,{i},{action},{:#x},{},{}", e.addr, e.size, e.stream)?;
                continue;
            }
            EventKind::EmptyCache => ("empty_cache", "0"),
            EventKind::PoolBegin => ("pool_begin", "*"),
            EventKind::PoolEnd => ("pool_end", "0"),
            EventKind::GraphBegin => ("graph_begin", "*"),
            EventKind::GraphEnd => ("graph_end", "0"),
            EventKind::PoolRelease => ("pool_release", "0"),
        };
        if e.kind == EventKind::EmptyCache && e.pool.is_default() {
            writeln!(w, "1,{i},empty_cache,0x0,0,0")?;
        } else {
            writeln!(w, "1,{i},{action},{n},0,{stream}")?;
        }
    }
    w.flush()
}
