//! Any supported trace input, told apart by content: an RMM memory-log CSV, or a torch
//! memory snapshot (pickle, or the same structure as JSON), each plain or gzip-compressed.
//!
//! A snapshot is replayed from its recorded history with the rules of the reference
//! conversions (`cachalot_torchfmt::events`): allocs and completed frees, frees of blocks
//! allocated before the window dropped and counted, streams renumbered by first appearance.
//! Each event gets the line it has in the RMM CSV `cachalot convert` writes (header = line 1),
//! so replaying the snapshot and replaying its conversion are the same replay.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use cachalot_torchfmt::{EventKind, ReplayEvents, Snapshot, SnapshotError, read_snapshot};
use cachalot_trace::{PtrId, Record, StreamKey, TraceError};

use crate::load::{LoadedTrace, TraceBuilder};

/// The largest snapshot read (after decompression). Reading needs memory proportional to
/// the size, so a larger file is refused rather than read.
pub const MAX_SNAPSHOT_BYTES: u64 = 2 << 30;

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
    /// The snapshot is larger than [`MAX_SNAPSHOT_BYTES`].
    #[error("{}: snapshot larger than {} MiB after decompression; not read", path.display(), MAX_SNAPSHOT_BYTES >> 20)]
    TooLarge {
        /// The file.
        path: PathBuf,
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
}

/// What kind of input was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    },
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
    /// A line for people about what was dropped from a snapshot, if anything.
    pub fn note(&self) -> Option<String> {
        let InputKind::Snapshot { events, .. } = &self.kind else {
            return None;
        };
        let mut parts = vec![format!(
            "snapshot history of device {}: {} events replayed ({} history entries that are \
             not allocations or frees skipped)",
            events.device,
            events.events.len(),
            events.other_entries + events.unknown_entries
        )];
        if events.starts_mid_run() {
            parts.push(format!(
                "the history starts mid-run (ring buffer): {} frees of blocks allocated before \
                 it were dropped, and {} requested bytes live before it are not replayed",
                events.dropped_frees, events.live_before_window
            ));
        }
        Some(parts.join("; "))
    }
}

/// Builds the replayable trace of a snapshot's events.
pub fn trace_from_events(events: &ReplayEvents) -> LoadedTrace {
    let mut b = TraceBuilder::new();
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
        };
        b.push(i as u64 + 2, record);
    }
    b.finish()
}

/// Reads all of `input` (at most [`MAX_SNAPSHOT_BYTES`]).
fn read_all(mut input: impl Read, path: &Path) -> Result<Vec<u8>, LoadError> {
    let mut data = Vec::new();
    input
        .by_ref()
        .take(MAX_SNAPSHOT_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|error| LoadError::Io {
            path: path.to_path_buf(),
            error,
        })?;
    if data.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(data)
}

/// Reads a torch memory snapshot file (pickle or JSON, plain or gzip).
pub fn read_snapshot_path(path: &Path) -> Result<Snapshot, LoadError> {
    let input = open(path)?;
    let data = read_all(input, path)?;
    read_snapshot(&data).map_err(|error| LoadError::Snapshot {
        path: path.to_path_buf(),
        error,
    })
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

/// Loads a snapshot already read into memory.
fn load_snapshot(
    data: &[u8],
    format: cachalot_torchfmt::Format,
    path: &Path,
    opts: &LoadOptions,
) -> Result<LoadedInput, LoadError> {
    let err = |error| LoadError::Snapshot {
        path: path.to_path_buf(),
        error,
    };
    let snap = read_snapshot(data).map_err(err)?;
    let device = pick_device(&snap, opts.device, path)?;
    let events = cachalot_torchfmt::replay_events(&snap, device).map_err(err)?;
    Ok(LoadedInput {
        trace: trace_from_events(&events),
        kind: InputKind::Snapshot {
            format,
            events: Box::new(events),
            devices_with_history: snap.devices_with_history(),
        },
    })
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
                let event = event.map_err(|error| LoadError::Trace {
                    path: path.to_path_buf(),
                    error,
                })?;
                b.push(event.line, event.record);
            }
            Ok(LoadedInput {
                trace: b.finish(),
                kind: InputKind::RmmCsv,
            })
        }
        format => {
            let data = read_all(input, path)?;
            load_snapshot(&data, format, path, opts)
        }
    }
}
