//! The core's bounds ([`cachalot_core::bounds`]) against full replays: a request no device of
//! the capacity serves counts exactly the out-of-memory error and the retries promised, under
//! every kind of configuration the search tries.

use cachalot_advisor::Candidate;
use cachalot_core::bounds::doomed_request;
use cachalot_replay::{LoadedTrace, ReplayOptions, TraceOp, replay};
use cachalot_sim::SimConfig;

/// A small training-like loop (allocations of a few sizes, most freed), with a request of
/// `doomed` bytes every 50 rows.
fn trace(doomed: u64) -> LoadedTrace {
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let sizes = [512u64, 4096, 1 << 20, 3 << 20, 25 << 20, 100 << 20];
    let mut live: Vec<u64> = Vec::new();
    for i in 0..2000u64 {
        if i % 50 == 49 {
            csv.push_str(&format!("1,{i},allocate,0xf{i:x},{doomed},0\n"));
            csv.push_str(&format!("1,{i},free,0xf{i:x},{doomed},0\n"));
        } else if live.len() >= 30 || (i % 3 == 2 && !live.is_empty()) {
            let p = live.remove((i as usize * 7) % live.len());
            csv.push_str(&format!("1,{i},free,{p:#x},0,0\n"));
        } else {
            let size = sizes[(i as usize * 5) % sizes.len()];
            csv.push_str(&format!("1,{i},allocate,{:#x},{size},0\n", i + 1));
            live.push(i + 1);
        }
    }
    cachalot_replay::load_bytes(csv.as_bytes()).unwrap()
}

#[test]
fn doomed_requests_count_what_the_bound_says() {
    let capacity = 4u64 << 30;
    let confs = [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.95",
        "expandable_segments:True,garbage_collection_threshold:0.8,per_process_memory_fraction:0.5",
        "throw_on_cudamalloc_oom:True",
        "backend:cudaMallocAsync",
    ];
    let mut doomed_seen = 0;
    for doomed in [capacity + 1, 80 << 30, u64::MAX - 1] {
        let t = trace(doomed);
        for conf in confs {
            let conf = Candidate::parse(conf).unwrap().conf;
            let (mut ooms, mut retries) = (0, 0);
            for op in &t.ops {
                if let TraceOp::Alloc { size, .. } = *op
                    && let Some(d) = doomed_request(size, capacity, &conf)
                {
                    ooms += d.ooms;
                    retries += d.retries;
                }
            }
            let r = replay(
                &t,
                &ReplayOptions {
                    conf: conf.clone(),
                    sim: SimConfig::with_capacity(capacity),
                    ..ReplayOptions::default()
                },
            )
            .unwrap();
            // Everything else fits on this device: the bound is exact.
            if conf.backend == cachalot_core::Backend::Native {
                assert_eq!(r.ooms.count, 40, "{conf:?}");
                assert_eq!(ooms, 40, "{conf:?}");
                doomed_seen += 1;
            } else {
                assert_eq!(ooms, 0);
            }
            assert!(r.ooms.count >= ooms);
            assert_eq!(
                r.stats.num_alloc_retries.max(0) as u64,
                retries,
                "{conf:?} with {doomed}-byte requests"
            );
        }
    }
    assert_eq!(doomed_seen, 3 * (confs.len() - 1));
}
