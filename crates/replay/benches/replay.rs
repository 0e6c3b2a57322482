//! Replay speed: CPU time per replayed operation, default configuration, on the two traces the
//! foundation issue names. Compare with the oracle's `timing.ns_per_op` for the same trace
//! (torch 2.15's allocator on the same simulated device).

#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::time::Duration;

use cachalot_replay::{ReplayOptions, load_rmm, replay};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Replays each trace under two configurations.
fn bench(c: &mut Criterion) {
    let root = cachalot_testkit::fixture("traces");
    let mut group = c.benchmark_group("replay");
    group.measurement_time(Duration::from_secs(8));
    group.sample_size(10);
    for name in ["gpt2-generate-varlen", "random-4streams"] {
        let trace = load_rmm(&root.join(format!("{name}.csv.gz"))).expect("fixture trace");
        group.throughput(Throughput::Elements(trace.ops.len() as u64));
        for (label, conf) in [("default", ""), ("expandable", "expandable_segments:True")] {
            let opts = ReplayOptions {
                conf: cachalot_core::config::parse_pytorch(conf).unwrap().0,
                ..ReplayOptions::default()
            };
            group.bench_function(format!("{name}/{label}"), |b| {
                b.iter(|| replay(&trace, &opts).unwrap().events)
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
