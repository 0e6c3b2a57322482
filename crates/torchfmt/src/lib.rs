//! What PyTorch users see of the caching allocator, in torch 2.15's own formats.
//!
//! - [`summary`]: `torch.cuda.memory_stats()` (the flat dictionary) and
//!   `torch.cuda.memory_summary()` (the text table), from cachalot's statistics.
//! - [`model`]: a memory snapshot (`torch.cuda.memory._snapshot()`): segments, blocks,
//!   per-device history and allocator settings.
//! - [`pickle`]: writing a snapshot as the pickle `_dump_snapshot()` writes, readable by
//!   `torch.cuda._memory_viz` and the memory_viz page.
//! - Reading snapshots: [`read_snapshot`] (in memory) and [`read_snapshot_from`] (a
//!   stream: a file, a gzip decoder) take a pickle or its JSON form (detected by content).
//!   [`unpickle`] / [`json`] read the document as a stream and hand each value to the
//!   [`decode`] builder, which keeps only what the snapshot model holds (no value tree;
//!   stack frames are dropped as they are read). Malformed or hostile input gives a
//!   [`SnapshotError`], never a panic, with working memory bounded by what is decoded
//!   ([`decode::WORK_BASE`], [`decode::WORK_PER_KEPT`]).
//! - [`events`]: a snapshot's history as replayable allocate/free events (the rules of the
//!   reference conversions), and RMM CSV output.
//! - [`explain`]: why an allocation ran out of memory, in numbers, from the segments at the
//!   failure.
//!
//! This crate knows the allocator only through `cachalot-core`'s public types
//! ([`cachalot_core::DeviceStats`], [`cachalot_core::SegmentInfo`],
//! [`cachalot_core::TraceEntry`], [`cachalot_core::AllocConf`]).

#![forbid(unsafe_code)]

pub mod decode;
pub mod events;
pub mod explain;
pub mod json;
pub mod model;
pub mod pickle;
mod routing;
mod schema;
pub mod summary;
pub mod unpickle;
mod window;

pub use events::{
    EventKind, EventOptions, FailedRequest, ReplayEvent, ReplayEvents, WindowStart, pool_numbers,
    replay_events, replay_events_with, write_rmm_csv,
};
pub use explain::{OomExplanation, OomRequest, PoolMemory, Recorded, capacity_at_oom, explain_oom};
pub use model::{AllocatorSettings, Block, DeviceTrace, Segment, Snapshot, TraceEvent};
pub use pickle::{to_pickle_bytes, write_pickle};
pub use summary::{memory_stats, memory_stats_json, memory_summary};
pub use unpickle::PickleError;

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The pickle itself is malformed or uses what a snapshot never holds.
    #[error("not a readable torch snapshot pickle: {0}")]
    Pickle(PickleError),
    /// The JSON is malformed.
    #[error("not valid JSON: {0}")]
    Json(serde_json::Error),
    /// The document parsed, but is not shaped like a snapshot.
    #[error("snapshot field {path}: {message}")]
    Schema {
        /// Where, e.g. `segments[3].blocks[0].size`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The content is neither a pickle nor JSON.
    #[error(
        "not a torch memory snapshot: starts with {found}; expected a pickle (protocol 2-5, \
         first byte 0x80) or its JSON form (first character '{{' or '[')"
    )]
    UnknownFormat {
        /// The first bytes, quoted.
        found: String,
    },
    /// The requested device has no history in the snapshot.
    #[error("the snapshot has no history for device {device}; {}", describe_devices(.with_history))]
    NoSuchDevice {
        /// The device asked for.
        device: u32,
        /// Devices that have history.
        with_history: Vec<u32>,
    },
}

impl From<PickleError> for SnapshotError {
    fn from(e: PickleError) -> Self {
        SnapshotError::Pickle(e)
    }
}

impl From<serde_json::Error> for SnapshotError {
    fn from(e: serde_json::Error) -> Self {
        SnapshotError::Json(e)
    }
}

fn describe_devices(devices: &[u32]) -> String {
    if devices.is_empty() {
        "it has no recorded history at all (was _record_memory_history enabled?)".into()
    } else {
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        format!("devices with history: {}", list.join(", "))
    }
}

/// How the content of a file looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A pickle of protocol 2 or later (first byte 0x80).
    Pickle,
    /// JSON (first non-blank character `{` or `[`).
    Json,
    /// Anything else: an RMM CSV trace, or not a trace at all.
    Other,
}

/// Tells a snapshot pickle or JSON document from other content, by its first bytes
/// (decompressed already).
pub fn sniff(data: &[u8]) -> Format {
    if data.first() == Some(&0x80) && data.get(1).is_some_and(|v| (2..=5).contains(v)) {
        return Format::Pickle;
    }
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | Some(b'[') => Format::Json,
        _ => Format::Other,
    }
}

/// Reads a torch memory snapshot: a pickle (as `_dump_snapshot` writes it) or the same
/// structure as JSON, told apart by content.
pub fn read_snapshot(data: &[u8]) -> Result<Snapshot, SnapshotError> {
    match sniff(data) {
        Format::Pickle => unpickle::read_pickle(data),
        Format::Json => json::read_json(data),
        Format::Other => Err(not_a_snapshot(data)),
    }
}

/// [`read_snapshot`] from a stream, read once and never held whole.
pub fn read_snapshot_from(mut input: impl std::io::BufRead) -> Result<Snapshot, SnapshotError> {
    let mut head = Vec::new();
    // Enough of the start to tell the format (fill_buf may return little at a time).
    while head.len() < SNIFF_BYTES {
        let buf = input.fill_buf().map_err(io_error)?;
        if buf.is_empty() {
            break;
        }
        let n = buf.len().min(SNIFF_BYTES - head.len());
        head.extend_from_slice(&buf[..n]);
        input.consume(n);
        if head.len() >= 2 && head.iter().any(|b| !b.is_ascii_whitespace()) {
            break;
        }
    }
    let input = std::io::Read::chain(&head[..], input);
    match sniff(&head) {
        Format::Pickle => unpickle::read_pickle(std::io::BufReader::new(input)),
        Format::Json => json::read_json_from(std::io::BufReader::with_capacity(1 << 16, input)),
        Format::Other => Err(not_a_snapshot(&head)),
    }
}

/// How much of a stream's start [`read_snapshot_from`] looks at to tell the format.
const SNIFF_BYTES: usize = 4096;

fn io_error(e: std::io::Error) -> SnapshotError {
    SnapshotError::Pickle(PickleError {
        offset: 0,
        message: format!("reading the input failed: {e}"),
    })
}

/// The error for content that is neither a pickle nor JSON.
fn not_a_snapshot(data: &[u8]) -> SnapshotError {
    if data.first() == Some(&0x80) {
        // A PROTO opcode with a version we do not read: let the reader say so.
        if let Err(e) = unpickle::read_pickle(&data[..data.len().min(2)]) {
            return e;
        }
    }
    let head: String = String::from_utf8_lossy(&data[..data.len().min(16)])
        .chars()
        .flat_map(char::escape_debug)
        .collect();
    SnapshotError::UnknownFormat {
        found: if data.is_empty() {
            "nothing (empty input)".into()
        } else {
            format!("\"{head}\"")
        },
    }
}
