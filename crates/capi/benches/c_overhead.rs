//! What the C library adds per operation: the same trace replayed by cachalot's own replay
//! loop (in process, the core behind `MemoryResource`) and by a C program calling
//! `cachalot_malloc` / `cachalot_free` from `libcachalot_capi.so` on the simulated device, as
//! a host such as torch calls them. Both count thread CPU time of their loop only; runs
//! alternate, and the minimum of each counts. A trace shorter than [`MIN_OPS`] is replayed as
//! several copies one after the other (each copy's allocations in slots of their own), as
//! `cachalot bench` does, so that a run lasts long enough to time.
//!
//! `cargo bench -p cachalot-capi --bench c_overhead [-- RUNS]` (default 7 runs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a broken setup stops it

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use cachalot_replay::{LoadedTrace, ReplayOptions, TraceOp, load_rmm, replay};

const TRACES: [&str; 3] = [
    "gpt2-generate-varlen",
    "bert-finetune-varlen",
    "random-4streams",
];

/// Operations one run replays at least.
const MIN_OPS: usize = 250_000;

/// The record `benches/c/replay_loop.c` reads: size, slot, stream (`FREE` for a free).
const FREE: u32 = u32::MAX;

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(7);
    let exe = common::compile_c(
        &common::crate_dir().join("benches/c/replay_loop.c"),
        "replay_loop",
        "-O2",
    );
    println!(
        "thread CPU time per operation, default configuration, simulated device; minimum (median) of {runs} alternating runs"
    );
    println!(
        "{:<22} {:>5} {:>8} {:>18} {:>18} {:>10}",
        "trace", "reps", "ops", "core replay ns", "C library ns", "C - core"
    );
    for name in TRACES {
        let once = load_rmm(&cachalot_testkit::fixture(&format!("traces/{name}.csv.gz")))
            .expect("fixture trace");
        let reps = MIN_OPS.div_ceil(once.ops.len().max(1));
        let trace = repeated(&once, reps);
        let ops = common::scratch(&format!("{name}.ops"));
        write_ops(&trace, &ops);
        let (mut core, mut c) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            core.push(core_ns_per_op(&trace));
            c.push(c_ns_per_op(&exe, &ops, trace.slots));
        }
        let (core_min, core_med) = min_median(&mut core);
        let (c_min, c_med) = min_median(&mut c);
        println!(
            "{name:<22} {reps:>5} {:>8} {:>18} {:>18} {:>+10.1}",
            trace.ops.len(),
            format!("{core_min:.1} ({core_med:.1})"),
            format!("{c_min:.1} ({c_med:.1})"),
            c_min - core_min
        );
    }
}

/// `reps` copies of `trace` one after the other, copy `k`'s allocations in slots
/// `k × slots ..`: each copy starts from the cache the one before left.
fn repeated(trace: &LoadedTrace, reps: usize) -> LoadedTrace {
    let slots = trace.slots;
    let shift = |slot: u32, k: usize| slot + slots * k as u32;
    let ops = (0..reps)
        .flat_map(|k| {
            trace.ops.iter().map(move |op| match *op {
                TraceOp::Alloc {
                    slot,
                    size,
                    stream,
                    line,
                } => TraceOp::Alloc {
                    slot: shift(slot, k),
                    size,
                    stream,
                    line,
                },
                TraceOp::Free { slot, line } => TraceOp::Free {
                    slot: shift(slot, k),
                    line,
                },
                pool => pool,
            })
        })
        .collect();
    LoadedTrace {
        ops,
        slots: slots * reps as u32,
        ..trace.clone()
    }
}

/// The trace's operations as 16-byte records for the C loop (left in the scratch folder, for
/// profiling the C loop by itself; the next run overwrites them).
fn write_ops(trace: &LoadedTrace, path: &Path) {
    let mut bytes = Vec::with_capacity(trace.ops.len() * 16);
    for op in &trace.ops {
        let (size, slot, stream) = match *op {
            TraceOp::Alloc {
                slot, size, stream, ..
            } => (size, slot, stream),
            TraceOp::Free { slot, .. } => (0, slot, FREE),
            TraceOp::Pool { line, .. } => panic!("line {line}: the C loop replays no pool rows"),
        };
        bytes.extend_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(&slot.to_le_bytes());
        bytes.extend_from_slice(&stream.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

fn core_ns_per_op(trace: &LoadedTrace) -> f64 {
    let report = replay(trace, &ReplayOptions::default()).expect("replay");
    report.cpu_ns as f64 / report.events as f64
}

fn c_ns_per_op(exe: &Path, ops: &Path, slots: u32) -> f64 {
    let mut cmd = Command::new(exe);
    common::clean_env(&mut cmd);
    cmd.env("CACHALOT_DEVICE", "sim")
        .arg(ops)
        .arg(slots.max(1).to_string());
    let text = cachalot_testkit::stdout_of(&mut cmd);
    let words: Vec<&str> = text.split_whitespace().collect();
    match words[..] {
        ["OPS", n, "CPU_NS", t] => t.parse::<f64>().unwrap() / n.parse::<f64>().unwrap(),
        _ => panic!("unexpected output: {text}"),
    }
}

fn min_median(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}
