//! cachalot's application layer: what every front end (the `cachalot` CLI, the Python
//! package's `_native`) calls between parsing its arguments and printing.
//!
//! - [`workload`]: any input (files, the bundled trace, a snapshot's devices, several ranks)
//!   opened as one workload, the settings a replay uses, and the advisor's shared options
//!   (capacity from `--capacity`/`--gpu`/headroom/the snapshot's record, the cost model);
//! - [`replay`], [`tune`], [`compare`], [`explain`]: one request each, answered with a typed
//!   result that renders itself as the CLI's text, its `--json` and, where it has one, its
//!   HTML report;
//! - [`release`]: the torch release whose decisions those replays make, and what it makes of
//!   a configuration line;
//! - [`predict`]: capture's answer for a job's traces (one per rank) on a GPU, with the memory
//!   outside torch's allocator of [`outside`], the verdict and the advice.
//!
//! Nothing here prints: notes meant for stderr go to a callback the front end gives, so the
//! CLI prints them and Python may ignore or keep them.

pub mod compare;
pub mod convert;
pub mod explain;
pub mod gpu_dependent;
pub mod gpus;
pub mod outside;
pub mod predict;
pub mod release;
pub mod replay;
pub mod tune;
pub mod workload;

/// Where a request's notes for stderr go (`cachalot: NOTE` in the CLI).
pub type Notes<'a> = &'a mut dyn FnMut(String);
