//! Replaying allocation traces through cachalot's allocator on the simulated device.
//!
//! - [`load`]: a trace file into replayable operations ([`LoadedTrace`]), with the oracle's
//!   rules for unmatched frees, duplicate ids and zero sizes;
//! - [`input`]: any supported input (RMM CSV, torch snapshot pickle or JSON), detected by
//!   content ([`load_input`]);
//! - [`engine`]: the replay itself ([`replay`]), returning a [`ReplayReport`];
//! - [`diagnose`]: why a replay ran out of memory, and which option avoids it (replayed);
//! - [`pool_account`]: each pool's share of the peaks and what `empty_cache` can give back;
//! - [`report`]: the report as the oracle's JSON, its `--segments` CSV, and a readable summary.

#![forbid(unsafe_code)]

mod accounts;
pub mod diagnose;
pub mod engine;
pub mod input;
pub mod load;
pub mod pool_account;
pub mod pools;
pub mod report;
mod target;

/// Cancellation (Ctrl-C, SIGTERM): the flag the replay loop checks.
pub use cachalot_trace::interrupt;

pub use engine::{
    OomEvent, OomSummary, Progress, ReplayError, ReplayHook, ReplayOptions, ReplayReport, Sample,
    replay, replay_with_hook,
};
pub use input::{LoadError, LoadOptions, LoadedInput, load_input, load_path};
pub use load::{
    LoadedTrace, Origin, PoolOp, RowSource, TraceBuilder, TraceOp, TracePool, TraceStats,
    load_bytes, load_rmm,
};
