//! Any supported trace input, told apart by content: an RMM memory-log CSV, or a torch
//! memory snapshot (pickle, or the same structure as JSON), each plain or gzip-compressed.
//!
//! A snapshot is replayed from its recorded history (`cachalot_torchfmt::events`): allocs and
//! completed frees, streams renumbered by first appearance. [`LoadOptions::events`] says
//! whether that is the reference conversion (what `cachalot convert` writes: frees of blocks
//! allocated before the window dropped, failed requests left out) or the program's whole
//! workload (failed requests replayed, the window completed with what was live at its start:
//! what `replay`, `tune` and `compare` use). Each event gets its line in the RMM CSV of the
//! same events (header = line 1).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use cachalot_core::{AllocConf, MempoolId};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{
    EventKind, EventOptions, Recorded, ReplayEvents, Snapshot, SnapshotError, WindowStart,
    read_snapshot_from, replay_events_with,
};
use cachalot_trace::{PtrId, Record, StreamKey, TraceError};

use crate::load::{LoadedTrace, Origin, TraceBuilder, TracePool};

/// Why an input could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// An RMM CSV trace that could not be read.
    #[error("{}", trace_message(path, error))]
    Trace {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        error: TraceError,
    },
    /// A snapshot that could not be read.
    #[error("{}: {error}", path.display())]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        error: SnapshotError,
    },
    /// Reading the file failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A snapshot with history on several devices, and no device chosen.
    #[error(
        "{}: the snapshot has history for devices {}; choose one (--device N)",
        path.display(),
        list(devices)
    )]
    ChooseDevice {
        /// The file.
        path: PathBuf,
        /// Devices with history.
        devices: Vec<u32>,
    },
}

/// A trace error with the file named once.
fn trace_message(path: &Path, error: &TraceError) -> String {
    let msg = error.to_string();
    if msg.contains(&*path.to_string_lossy()) {
        msg
    } else {
        format!("{}: {msg}", path.display())
    }
}

fn list(devices: &[u32]) -> String {
    devices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How to load an input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// For snapshots: the device whose history to replay. `None`: the only device with
    /// history (an error if there are several).
    pub device: Option<u32>,
    /// For snapshots: what the history becomes (the default: the reference conversion;
    /// [`EventOptions::WORKLOAD`]: the program's whole workload).
    pub events: EventOptions,
}

impl LoadOptions {
    /// The program's whole workload on `device` ([`EventOptions::WORKLOAD`]).
    pub fn workload(device: Option<u32>) -> Self {
        LoadOptions {
            device,
            events: EventOptions::WORKLOAD,
        }
    }
}

/// What kind of input was loaded.
#[derive(Clone, Debug)]
pub enum InputKind {
    /// An RMM memory-log CSV.
    RmmCsv,
    /// A torch memory snapshot.
    Snapshot {
        /// Pickle or JSON.
        format: cachalot_torchfmt::Format,
        /// The events replayed and what the conversion left out.
        events: Box<ReplayEvents>,
        /// Devices with history in the snapshot.
        devices_with_history: Vec<u32>,
        /// What the snapshot records about the device's run.
        recorded: Box<Recorded>,
        /// For a window completed with [`WindowStart::Live`]: the same workload with the
        /// window's start state rebuilt ([`WindowStart::Layout`]), which the reconstruction
        /// check replays.
        layout: Option<Box<WindowLayout>>,
    },
}

/// A snapshot's workload with the start state of its window rebuilt
/// ([`WindowStart::Layout`]).
#[derive(Clone, Debug)]
pub struct WindowLayout {
    /// The events ([`ReplayEvents::window`] says whether the start state could be rebuilt).
    pub events: ReplayEvents,
    /// The trace of those events.
    pub trace: LoadedTrace,
}

/// A loaded input: the replayable trace and where it came from.
#[derive(Clone, Debug)]
pub struct LoadedInput {
    /// The trace, ready to replay.
    pub trace: LoadedTrace,
    /// What the input was.
    pub kind: InputKind,
}

impl LoadedInput {
    /// The snapshot's events, if the input is a snapshot.
    pub fn snapshot_events(&self) -> Option<&ReplayEvents> {
        match &self.kind {
            InputKind::Snapshot { events, .. } => Some(events),
            InputKind::RmmCsv => None,
        }
    }

    /// What the snapshot records, if the input is a snapshot.
    pub fn recorded(&self) -> Option<&Recorded> {
        match &self.kind {
            InputKind::Snapshot { recorded, .. } => Some(recorded),
            InputKind::RmmCsv => None,
        }
    }

    /// Lines for people about what the snapshot recorded and how its history was turned into
    /// the replayed workload (empty for a CSV).
    pub fn notes(&self) -> Vec<String> {
        let (Some(events), Some(rec)) = (self.snapshot_events(), self.recorded()) else {
            return Vec::new();
        };
        let mut out = vec![format!(
            "snapshot history of device {}: {} events replayed ({} history entries that are \
             not allocations or frees skipped)",
            events.device,
            events.events.len(),
            events.other_entries + events.unknown_entries
        )];
        if rec.ooms > 0 {
            let conf = match rec.alloc_conf.as_deref() {
                Some("") => "the default configuration".to_string(),
                Some(c) => format!("PYTORCH_CUDA_ALLOC_CONF={c}"),
                None => "an unrecorded configuration (no allocator_settings)".to_string(),
            };
            let cap = rec
                .capacity
                .map(|c| format!(" at a capacity of about {}", cachalot_core::format_size(c)))
                .unwrap_or_default();
            out.push(format!(
                "the snapshot recorded {} out-of-memory error{}{cap} under {conf}",
                rec.ooms,
                plural(rec.ooms)
            ));
            if events.failed_requests > 0 {
                out.push(format!(
                    "{} replayed as {} that must be served (each held until the program's live memory falls back to where it was \
                     when it asked; docs/advisor.md); after the first failure the history \
                     shows the program's error path, not its normal work, and the failed \
                     requests' lifetimes are modelled, so the memory found needed is an \
                     estimate for the complete run, not a bound either way",
                    if events.failed_requests == 1 {
                        "the failed request is".to_string()
                    } else {
                        format!("the {} failed requests are", events.failed_requests)
                    },
                    if events.failed_requests == 1 { "a request" } else { "requests" }
                ));
            } else {
                out.push(
                    "the failed requests are not replayed: this replay serves less than the \
                     program asked for"
                        .to_string(),
                );
            }
        }
        if events.reconstructed > 0 {
            out.push(format!(
                "the history starts mid-run (ring buffer): {} allocations live at its start \
                 ({}) are reconstructed from the snapshot's blocks and the window's frees, and \
                 replayed before it",
                events.reconstructed,
                cachalot_core::format_size(
                    u64::try_from(events.reconstructed_bytes).unwrap_or(u64::MAX)
                )
            ));
        } else if events.starts_mid_run() {
            out.push(format!(
                "the history starts mid-run (ring buffer): {} frees of blocks allocated before \
                 it were dropped, and {} live before it are not replayed",
                events.dropped_frees,
                signed_size(events.live_before_window)
            ));
        }
        out
    }

    /// What the event at trace line `line` is: for a snapshot, its history entry (a snapshot
    /// has no lines; see [`LoadedTrace::origin`]); `None` for a CSV, whose lines are the
    /// file's.
    pub fn describe_line(&self, line: u64) -> Option<String> {
        match self.trace.origin(line)? {
            Origin::SnapshotEvent(i) => self.snapshot_events()?.describe(i),
            Origin::CsvLine(_) => None,
        }
    }

    /// [`LoadedInput::notes`] as one line, if there is anything to say.
    pub fn note(&self) -> Option<String> {
        let notes = self.notes();
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn signed_size(bytes: i128) -> String {
    let abs = cachalot_core::format_size(u64::try_from(bytes.unsigned_abs()).unwrap_or(u64::MAX));
    if bytes < 0 { format!("-{abs}") } else { abs }
}

/// The check of a reconstructed window: the workload replayed under the snapshot's own
/// configuration, its end state next to the snapshot's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowCheck {
    /// The capacity replayed at (the recorded one when known).
    pub capacity: u64,
    /// The segments the window's start state was rebuilt with ([`WindowStart::Layout`]), or
    /// why it was not (then the figures below are those of [`WindowStart::Live`]).
    pub rebuilt: Result<u64, String>,
    /// Requested bytes live at the end of the replay, and at the snapshot (equal when the
    /// reconstruction has every block live at the end).
    pub requested: (u64, u64),
    /// Bytes allocated at the end of the replay, and at the snapshot (they also count the
    /// remainders too small to split, so they are equal when every block sits where it sat).
    pub allocated: (u64, u64),
    /// Bytes reserved at the end of the replay, and at the snapshot.
    pub reserved: (u64, u64),
    /// Peak allocated in the replay from the window's start on (the requests that rebuild
    /// the start state are not counted).
    pub peak_allocated: u64,
    /// Out-of-memory errors in the replay.
    pub ooms: u64,
    /// The workload `replay`, `tune` and `compare` replay ([`WindowStart::Live`]: the live
    /// blocks placed by the configuration): bytes allocated at its end, and its peak.
    pub placed: (u64, u64),
    /// The same end state for each private pool the replay or the snapshot has segments of.
    pub pools: Vec<PoolCheck>,
}

/// One private pool's end state in the reconstruction check: (replay, snapshot) each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCheck {
    /// The pool.
    pub pool: MempoolId,
    /// Segments.
    pub segments: (u64, u64),
    /// Requested bytes of the active blocks.
    pub requested: (u64, u64),
    /// Bytes in allocated blocks.
    pub allocated: (u64, u64),
    /// Bytes reserved.
    pub reserved: (u64, u64),
}

impl PoolCheck {
    /// Whether the pool ends as at the snapshot.
    pub fn matches(&self) -> bool {
        self.segments.0 == self.segments.1
            && self.requested.0 == self.requested.1
            && self.allocated.0 == self.allocated.1
            && self.reserved.0 == self.reserved.1
    }
}

/// Each private pool's end state in the replay next to the snapshot's.
fn pool_checks(r: &crate::ReplayReport, rec: &Recorded) -> Vec<PoolCheck> {
    fn at(out: &mut Vec<PoolCheck>, pool: MempoolId) -> &mut PoolCheck {
        let i = match out.iter().position(|p| p.pool == pool) {
            Some(i) => i,
            None => {
                out.push(PoolCheck {
                    pool,
                    segments: (0, 0),
                    requested: (0, 0),
                    allocated: (0, 0),
                    reserved: (0, 0),
                });
                out.len() - 1
            }
        };
        &mut out[i]
    }
    let mut out: Vec<PoolCheck> = Vec::new();
    for p in r.pools.iter().filter(|p| !p.segments.is_empty()) {
        let c = at(&mut out, p.id);
        for s in &p.segments {
            c.segments.0 += 1;
            c.requested.0 += s.requested_size;
            c.allocated.0 += s.allocated_size;
            c.reserved.0 += s.total_size;
        }
    }
    for p in &rec.pools {
        let c = at(&mut out, p.pool);
        c.segments.1 = p.segments;
        c.requested.1 = p.requested;
        c.allocated.1 = p.allocated;
        c.reserved.1 = p.reserved;
    }
    out.sort_by_key(|c| c.pool);
    out
}

impl WindowCheck {
    /// Whether the replay ends with the snapshot's allocated bytes.
    pub fn allocated_matches(&self) -> bool {
        self.allocated.0 == self.allocated.1
    }

    /// Whether the replay ends with the snapshot's requested bytes live.
    pub fn requested_matches(&self) -> bool {
        self.requested.0 == self.requested.1
    }

    /// Whether the replay ends with the snapshot's reserved bytes.
    pub fn reserved_matches(&self) -> bool {
        self.reserved.0 == self.reserved.1
    }

    /// Whether the replay ends in the snapshot's state: requested, allocated and reserved,
    /// overall and in each private pool.
    pub fn matches(&self) -> bool {
        self.requested_matches()
            && self.allocated_matches()
            && self.reserved_matches()
            && self.pools.iter().all(PoolCheck::matches)
    }
}

impl std::fmt::Display for WindowCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = cachalot_core::format_size;
        let verdict = |same: bool| if same { "equal" } else { "DIFFERENT" };
        let (rq, sq) = self.requested;
        let (ra, sa) = self.allocated;
        let (rr, sr) = self.reserved;
        write!(
            f,
            "reconstruction check: {} ",
            if self.matches() {
                "MATCHES the snapshot"
            } else {
                "does NOT match the snapshot"
            }
        )?;
        match &self.rebuilt {
            Ok(n) => write!(
                f,
                "(the window's start state rebuilt from the snapshot: {n} segment{} with the \
                 blocks live then at their addresses; ",
                plural(*n)
            )?,
            Err(why) => write!(
                f,
                "(the start state not rebuilt: {why}; the live blocks placed in address order; "
            )?,
        }
        write!(
            f,
            "replayed under the snapshot's own configuration on a {} device, {} \
             out-of-memory): at the end, requested bytes {} (replay {rq}, snapshot {sq}), \
             allocated {} (replay {ra} = {}, snapshot {sa} = {}), reserved {} (replay {rr} = \
             {}, snapshot {sr} = {}); peak allocated {}. The workload tune, compare and replay \
             use places the live blocks by each configuration: it ends with {} allocated and \
             peaks at {}",
            size(self.capacity),
            self.ooms,
            verdict(self.requested_matches()),
            verdict(self.allocated_matches()),
            size(ra),
            size(sa),
            verdict(self.reserved_matches()),
            size(rr),
            size(sr),
            size(self.peak_allocated),
            size(self.placed.0),
            size(self.placed.1)
        )?;
        for p in &self.pools {
            write!(
                f,
                "; private pool {}: {} (segments replay {} snapshot {}, requested {} / {}, \
                 allocated {} / {}, reserved {} / {})",
                p.pool,
                verdict(p.matches()),
                p.segments.0,
                p.segments.1,
                p.requested.0,
                p.requested.1,
                p.allocated.0,
                p.allocated.1,
                p.reserved.0,
                p.reserved.1
            )?;
        }
        Ok(())
    }
}

/// Replays a snapshot's workload under `conf` (the snapshot's own configuration) at its
/// recorded capacity (or a device large enough for anything it asks), with the window's
/// start state rebuilt where it can be, and compares the end state with the snapshot's.
/// `None` for a CSV.
pub fn check_window(
    input: &LoadedInput,
    conf: &AllocConf,
) -> Result<Option<WindowCheck>, crate::ReplayError> {
    let (Some(rec), InputKind::Snapshot { layout, .. }) = (input.recorded(), &input.kind) else {
        return Ok(None);
    };
    let capacity = rec.capacity.unwrap_or_else(|| {
        (80u64 << 30).max(LoadedTrace::peak_live_requested(&input.trace).saturating_mul(2))
    });
    let run = |trace: &LoadedTrace, sample_every: usize| {
        crate::replay(
            trace,
            &crate::ReplayOptions {
                conf: conf.clone(),
                sim: SimConfig::with_capacity(capacity),
                max_oom_reports: 0,
                sample_every,
                ..crate::ReplayOptions::default()
            },
        )
    };
    let stat = |v: i64| v.max(0) as u64;
    let live = run(&input.trace, 0)?;
    let placed = (
        stat(live.stats.allocated_bytes.all().current),
        stat(live.stats.allocated_bytes.all().peak),
    );
    let rebuilt = layout
        .as_deref()
        .filter(|l| l.events.window == WindowStart::Layout);
    let (r, peak, segments) = match rebuilt {
        Some(l) => {
            let r = run(&l.trace, 1)?;
            let prologue = l
                .events
                .entries
                .iter()
                .take_while(|&&e| e == ReplayEvents::NOT_RECORDED)
                .count();
            let peak = r
                .samples
                .iter()
                .filter(|s| s.op_index + 1 >= prologue)
                .map(|s| s.allocated)
                .max()
                .unwrap_or(0);
            (r, peak, Ok(l.events.start_segments))
        }
        None => {
            let why = match layout.as_deref() {
                Some(l) => l.events.layout_refused.clone().unwrap_or_default(),
                None => "the history has no blocks live before it".to_string(),
            };
            (live, placed.1, Err(why))
        }
    };
    Ok(Some(WindowCheck {
        capacity,
        rebuilt: segments,
        requested: (stat(r.stats.requested_bytes.all().current), rec.requested),
        allocated: (stat(r.stats.allocated_bytes.all().current), rec.allocated),
        reserved: (stat(r.stats.reserved_bytes.all().current), rec.reserved),
        peak_allocated: peak,
        ooms: r.ooms.count,
        placed,
        pools: pool_checks(&r, rec),
    }))
}

/// Builds the replayable trace of a snapshot's events. Its pools keep the snapshot's ids
/// (`MempoolId`), including a graph's `(n, 0)` next to a `MemPool`'s `(0, n)`, which the
/// trace numbering alone (one number per pool) could not tell apart.
pub fn trace_from_events(events: &ReplayEvents) -> LoadedTrace {
    let mut b = TraceBuilder::for_snapshot_events();
    let mut numbers: rustc_hash::FxHashMap<MempoolId, u64> = Default::default();
    let mut ids = Vec::new();
    let mut number = |pool: MempoolId| {
        *numbers.entry(pool).or_insert_with(|| {
            ids.push(pool);
            ids.len() as u64
        })
    };
    for (i, e) in events.events.iter().enumerate() {
        let record = match e.kind {
            EventKind::Allocate => Record::Alloc {
                ptr: PtrId::from_raw(e.addr),
                size: e.size,
                stream: StreamKey::from_raw(e.stream.into()),
            },
            EventKind::Free => Record::Free {
                ptr: PtrId::from_raw(e.addr),
            },
            EventKind::EmptyCache if e.pool.is_default() => Record::EmptyCache { pool: None },
            EventKind::EmptyCache => Record::EmptyCache {
                pool: Some(number(e.pool)),
            },
            EventKind::PoolBegin => Record::PoolBegin {
                pool: number(e.pool),
                stream: None,
            },
            EventKind::GraphBegin => Record::GraphBegin {
                pool: number(e.pool),
                stream: None,
            },
            EventKind::PoolEnd => Record::PoolEnd {
                pool: number(e.pool),
            },
            EventKind::GraphEnd => Record::GraphEnd {
                pool: number(e.pool),
            },
            EventKind::PoolRelease => Record::PoolRelease {
                pool: number(e.pool),
            },
        };
        b.push_event(i, record);
    }
    let mut trace = b.finish();
    for p in &mut trace.pools {
        // Numbered 1, 2, … above; the events open each pool before any other row names it.
        let id = ids[p.number as usize - 1];
        *p = if id.first != 0 {
            TracePool {
                number: id.first,
                graph: true,
            }
        } else {
            TracePool {
                number: id.second,
                graph: false,
            }
        };
    }
    trace
}

/// Reads a trace file into memory, whatever its format, detected by content: RMM CSV or a
/// torch memory snapshot (pickle or JSON), plain or gzip. A snapshot with history on several
/// devices needs [`load_input`] with a device.
pub fn load_path(path: &Path) -> Result<LoadedTrace, LoadError> {
    load_input(path, &LoadOptions::default()).map(|l| l.trace)
}

/// Reads a torch memory snapshot file (pickle or JSON, plain or gzip) as a stream: the
/// file is never held whole, and only what the snapshot model keeps is (see
/// `cachalot_torchfmt::decode`).
pub fn read_snapshot_path(path: &Path) -> Result<Snapshot, LoadError> {
    read_stream(open(path)?, path)
}

fn read_stream(input: impl BufRead, path: &Path) -> Result<Snapshot, LoadError> {
    let error = |error| LoadError::Snapshot {
        path: path.to_path_buf(),
        error,
    };
    let snap = read_snapshot_from(input).map_err(error)?;
    snap.check_sizes().map_err(|(path, message)| {
        error(cachalot_torchfmt::SnapshotError::Schema { path, message })
    })?;
    Ok(snap)
}

/// Opens a file, decompressing gzip.
fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, LoadError> {
    cachalot_trace::open_decompressed(path).map_err(|error| LoadError::Trace {
        path: path.to_path_buf(),
        error,
    })
}

/// The device to replay: `wanted`, or the only one with history.
pub fn pick_device(snap: &Snapshot, wanted: Option<u32>, path: &Path) -> Result<u32, LoadError> {
    if let Some(d) = wanted {
        return Ok(d);
    }
    match snap.devices_with_history()[..] {
        [] => Ok(0),
        [d] => Ok(d),
        ref several => Err(LoadError::ChooseDevice {
            path: path.to_path_buf(),
            devices: several.to_vec(),
        }),
    }
}

/// The input of one device of a snapshot already read.
pub fn snapshot_input(
    snap: &Snapshot,
    device: u32,
    format: cachalot_torchfmt::Format,
    events: &EventOptions,
) -> Result<LoadedInput, SnapshotError> {
    let layout = if events.window == WindowStart::Live {
        let layout = replay_events_with(
            snap,
            device,
            &EventOptions {
                window: WindowStart::Layout,
                ..*events
            },
        )?;
        (layout.reconstructed > 0).then(|| {
            Box::new(WindowLayout {
                trace: trace_from_events(&layout),
                events: layout,
            })
        })
    } else {
        None
    };
    let events = replay_events_with(snap, device, events)?;
    Ok(LoadedInput {
        trace: trace_from_events(&events),
        kind: InputKind::Snapshot {
            format,
            events: Box::new(events),
            devices_with_history: snap.devices_with_history(),
            recorded: Box::new(Recorded::of(snap, device)),
            layout,
        },
    })
}

/// Loads a snapshot from its opened file.
fn load_snapshot(
    input: impl BufRead,
    format: cachalot_torchfmt::Format,
    path: &Path,
    opts: &LoadOptions,
) -> Result<LoadedInput, LoadError> {
    let snap = read_stream(input, path)?;
    let device = pick_device(&snap, opts.device, path)?;
    snapshot_input(&snap, device, format, &opts.events).map_err(|error| LoadError::Snapshot {
        path: path.to_path_buf(),
        error,
    })
}

/// Loads every device with history of a snapshot (or the one trace of a CSV), each as the
/// program's whole workload.
pub fn load_all_devices(path: &Path) -> Result<Vec<LoadedInput>, LoadError> {
    let mut input = open(path)?;
    let head = input.fill_buf().map_err(|error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let format = cachalot_torchfmt::sniff(head);
    if format == cachalot_torchfmt::Format::Other {
        drop(input);
        return Ok(vec![load_input(path, &LoadOptions::workload(None))?]);
    }
    let snap = read_stream(input, path)?;
    let err = |error| LoadError::Snapshot {
        path: path.to_path_buf(),
        error,
    };
    let mut devices = snap.devices_with_history();
    if devices.is_empty() {
        devices.push(0);
    }
    devices
        .into_iter()
        .map(|d| snapshot_input(&snap, d, format, &EventOptions::WORKLOAD).map_err(err))
        .collect()
}

/// Loads any supported input file, detecting its format by content.
pub fn load_input(path: &Path, opts: &LoadOptions) -> Result<LoadedInput, LoadError> {
    let mut input = open(path)?;
    let head = input.fill_buf().map_err(|error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    match cachalot_torchfmt::sniff(head) {
        cachalot_torchfmt::Format::Other => {
            let mut b = TraceBuilder::new();
            for event in cachalot_trace::RmmReader::with_path(input, path) {
                let trace_err = |error| LoadError::Trace {
                    path: path.to_path_buf(),
                    error,
                };
                let event = event.map_err(trace_err)?;
                b.try_push(event.line, event.record).map_err(trace_err)?;
            }
            Ok(LoadedInput {
                trace: b.finish(),
                kind: InputKind::RmmCsv,
            })
        }
        format => load_snapshot(input, format, path, opts),
    }
}
