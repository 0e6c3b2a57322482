//! What recording history costs per replayed operation.
//!
//! ```text
//! cargo run --release -p cachalot-torchfmt --example history_cost [TRACE ...]
//! ```
//! Replays each trace (default: the four models/ traces in tests/fixtures) with history off,
//! with an unbounded ring, and with a 10,000-entry ring, and prints the best of several interleaved runs in
//! nanoseconds per operation (the replay loop only, as `ReplayReport::ns_per_op` measures it),
//! plus the cost of writing the snapshot pickle.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cachalot_replay::{ReplayOptions, load_path, replay};
use cachalot_torchfmt::{Snapshot, to_pickle_bytes};

/// The best of `runs` replays for each history setting, interleaved so that load from other
/// processes falls on all settings alike.
fn best_ns_per_op(
    trace: &cachalot_replay::LoadedTrace,
    settings: &[Option<usize>],
    runs: usize,
) -> Vec<f64> {
    let mut best = vec![f64::INFINITY; settings.len()];
    for _ in 0..runs {
        for (b, &history) in best.iter_mut().zip(settings) {
            let r = replay(
                trace,
                &ReplayOptions {
                    history_entries: history,
                    ..ReplayOptions::default()
                },
            )
            .unwrap();
            *b = b.min(r.ns_per_op());
        }
    }
    best
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/traces");
    let mut paths: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        for name in [
            "gpt2-train",
            "bert-finetune-varlen",
            "resnet50-train",
            "gpt2-generate-varlen",
        ] {
            paths.push(root.join(format!("{name}.csv.gz")));
        }
    }
    println!(
        "{:<28} {:>9} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "trace", "ops", "off ns/op", "all ns/op", "10k ns/op", "entries", "pickle ms"
    );
    for p in paths {
        let trace = load_path(&p).unwrap();
        let runs = (2_000_000 / trace.ops.len().max(1)).clamp(3, 40);
        let best = best_ns_per_op(&trace, &[None, Some(usize::MAX), Some(10_000)], runs);
        let (off, all, ring) = (best[0], best[1], best[2]);
        let r = replay(
            &trace,
            &ReplayOptions {
                history_entries: Some(usize::MAX),
                snapshot_at_end: true,
                ..ReplayOptions::default()
            },
        )
        .unwrap();
        let s = r.snapshot.unwrap();
        let t = Instant::now();
        let conf = cachalot_core::AllocConf::default();
        let bytes = to_pickle_bytes(&Snapshot::from_allocator(&s.segments, &s.trace, &conf, 0));
        let pickle_ms = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "{:<28} {:>9} {:>10.1} {:>12.1} {:>12.1} {:>10} {:>12.1}  ({} bytes)",
            p.file_name().unwrap().to_string_lossy(),
            trace.ops.len(),
            off,
            all,
            ring,
            s.trace.len(),
            pickle_ms,
            bytes.len()
        );
    }
}
