//! Replaying allocation traces through cachalot's allocator on the simulated device.
//!
//! - [`load`]: a trace file into replayable operations ([`LoadedTrace`]), with the oracle's
//!   rules for unmatched frees, duplicate ids and zero sizes;
//! - [`engine`]: the replay itself ([`replay`]), returning a [`ReplayReport`];
//! - [`report`]: the report as the oracle's JSON, its `--segments` CSV, and a readable summary.

#![forbid(unsafe_code)]

pub mod engine;
pub mod load;
pub mod report;

pub use engine::{OomEvent, OomSummary, ReplayError, ReplayOptions, ReplayReport, Sample, replay};
pub use load::{LoadedTrace, TraceBuilder, TraceOp, TraceStats, load_bytes, load_path, load_rmm};
