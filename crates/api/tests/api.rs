//! The Rust API on the simulated device: buffers, streams, backends, statistics.

use std::sync::Arc;

use cachalot::stats::{memory_stats, memory_stats_json};
use cachalot::{Allocator, Allocators, Backend, Settings, SimConfig, SimDevice, StreamId};
use serde_json::Value;

const MIB: usize = 1 << 20;

fn sim(capacity: u64) -> SimDevice {
    SimDevice::new(SimConfig::with_capacity(capacity))
}

#[test]
fn buffers_return_to_the_cache_when_dropped() {
    let alloc = Allocator::new(&Settings::default(), sim(80 << 30)).unwrap();
    assert_eq!(alloc.backend(), Backend::Native);
    let a = alloc.alloc(3 * MIB, StreamId(7)).unwrap();
    let b = alloc.alloc(1000, StreamId(7)).unwrap();
    assert_eq!(
        (a.len(), a.stream(), a.is_empty()),
        (3 * MIB, StreamId(7), false)
    );
    let s = alloc.memory_stats().unwrap();
    assert_eq!(s["allocated_bytes.all.current"], (3 * MIB + 1024) as i64);
    assert_eq!(s["reserved_bytes.all.current"], 22 * MIB as i64); // 20 MiB + 2 MiB segments
    assert_eq!(s["allocation.all.current"], 2);
    let addr = a.device_ptr();
    drop(a);
    // The freed block is reused for the same stream: same address, no new segment.
    let c = alloc.alloc(3 * MIB, StreamId(7)).unwrap();
    assert_eq!(c.device_ptr(), addr);
    assert_eq!(alloc.stats().unwrap().num_device_alloc, 2);
    drop((b, c));
    let s = alloc.memory_stats().unwrap();
    assert_eq!(s["allocated_bytes.all.current"], 0);
    assert_eq!(s["allocation.all.freed"], 3);
    alloc.empty_cache().unwrap();
    assert_eq!(
        alloc.memory_stats().unwrap()["reserved_bytes.all.current"],
        0
    );
    assert_eq!(alloc.drop_errors(), 0);
    let empty = alloc.alloc(0, StreamId::DEFAULT).unwrap();
    assert!(empty.is_empty() && empty.device_ptr() == 0);
}

#[test]
fn record_stream_delays_reuse_until_the_free() {
    let alloc = Allocator::new(&Settings::default(), sim(80 << 30)).unwrap();
    let a = alloc.alloc(MIB, StreamId(1)).unwrap();
    a.record_stream(StreamId(2)).unwrap();
    let p = a.into_raw();
    alloc.free(p).unwrap();
    // As in torch, the block stays active until the next allocation polls its event (the
    // simulated device completes events at once).
    let s = alloc.memory_stats().unwrap();
    assert_eq!(
        (s["allocation.all.current"], s["active.all.current"]),
        (0, 1)
    );
    drop(alloc.alloc(512, StreamId(1)).unwrap());
    assert_eq!(alloc.memory_stats().unwrap()["active.all.current"], 0);
    assert!(alloc.free(p).unwrap_err().is_invalid_pointer());
    assert!(
        alloc
            .record_stream(p, StreamId(3))
            .unwrap_err()
            .is_invalid_pointer()
    );
}

#[test]
fn out_of_memory_has_torchs_message_for_each_backend() {
    let native = Allocator::new(&Settings::default(), sim(64 << 20)).unwrap();
    let _keep = native.alloc(40 * MIB, StreamId::DEFAULT).unwrap();
    let e = native.alloc(40 * MIB, StreamId::DEFAULT).unwrap_err();
    assert!(e.is_out_of_memory());
    assert!(
        e.to_string()
            .starts_with("CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0"),
        "{e}"
    );
    let settings = Settings::parse("backend:cudaMallocAsync").unwrap();
    let pool = Allocator::new(&settings, sim(64 << 20)).unwrap();
    assert_eq!(pool.backend(), Backend::CudaMallocAsync);
    let _keep = pool.alloc(40 * MIB, StreamId::DEFAULT).unwrap();
    let e = pool.alloc(40 * MIB, StreamId::DEFAULT).unwrap_err();
    assert!(e.is_out_of_memory());
    assert!(
        e.to_string()
            .starts_with("Allocation on device 0 would exceed allowed memory. (out of memory)")
    );
    assert!(pool.segments().is_err(), "the pool does not track blocks");
    assert!(pool.set_memory_fraction(2.0).is_err());
}

#[test]
fn out_of_memory_tells_a_rust_user_how_to_configure_this_allocator() {
    // Issue #9 item 7: the Rust crate's OOM error told a Rust user to set
    // PYTORCH_CUDA_ALLOC_CONF; torch's own text stays available for the C library.
    let native = Allocator::new(&Settings::default(), sim(64 << 20)).unwrap();
    let _keep = native.alloc(40 * MIB, StreamId::DEFAULT).unwrap();
    let e = native.alloc(40 * MIB, StreamId::DEFAULT).unwrap_err();
    let (ours, torch) = (e.to_string(), e.torch_text());
    assert!(
        torch.contains("try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{torch}"
    );
    assert!(
        torch.contains("reserved by PyTorch but unallocated"),
        "{torch}"
    );
    assert!(
        ours.contains(r#"Settings::parse("expandable_segments:True")"#),
        "{ours}"
    );
    assert!(ours.contains("Allocator::from_env"), "{ours}");
    assert!(
        !ours.contains("try setting PYTORCH_CUDA_ALLOC_CONF"),
        "{ours}"
    );
    assert!(!ours.contains("PyTorch"), "{ours}");
    assert!(!ours.contains("docs.pytorch.org"), "{ours}");
    // The numbers are torch's.
    let numbers = |s: &str| {
        s.split(". If reserved")
            .next()
            .unwrap()
            .replace("PyTorch", "the allocator")
    };
    assert_eq!(numbers(&ours), numbers(&torch));
    // Under expandable segments torch names its variable in another sentence.
    let settings = Settings::parse("expandable_segments:True").unwrap();
    let exp = Allocator::new(&settings, sim(64 << 20)).unwrap();
    let _keep = exp.alloc(40 * MIB, StreamId::DEFAULT).unwrap();
    let e = exp.alloc(40 * MIB, StreamId::DEFAULT).unwrap_err();
    assert!(
        e.torch_text()
            .contains("PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve")
    );
    assert!(
        e.to_string()
            .contains("the allocator's expandable_segments_reserve"),
        "{e}"
    );
}

#[test]
fn uncached_backend_goes_straight_to_the_device() {
    let settings = Settings::from_env_with(|k| {
        (k == "PYTORCH_NO_CUDA_MEMORY_CACHING").then(|| "1".to_string())
    })
    .unwrap();
    let alloc = Allocator::new(&settings, sim(80 << 30)).unwrap();
    assert_eq!(alloc.backend(), Backend::Uncached);
    assert_eq!(alloc.backend().torch_name(), "native");
    let a = alloc.alloc(1000, StreamId::DEFAULT).unwrap();
    assert_eq!(alloc.with_device(|d| d.phys_used()), 1024);
    drop(a);
    assert_eq!(alloc.with_device(|d| d.counters().cuda_free), 1);
    assert_eq!(alloc.memory_stats().unwrap()["max_split_size"], -1);
}

#[test]
fn many_threads_and_streams_share_one_allocator() {
    let alloc = Arc::new(Allocator::new(&Settings::default(), sim(80 << 30)).unwrap());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let alloc = alloc.clone();
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..500u64 {
                    let size = 512 + ((i * 7919 + t * 104_729) % (4 * MIB as u64)) as usize;
                    live.push(alloc.alloc(size, StreamId(t % 3)).unwrap());
                    if i % 3 == 0 {
                        live.swap_remove((i as usize * 31) % live.len());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = alloc.memory_stats().unwrap();
    assert_eq!(s["allocation.all.current"], 0);
    assert_eq!(s["allocation.all.allocated"], 4000);
    assert_eq!(s["allocated_bytes.all.current"], 0);
    alloc.caching().unwrap().check_invariants().unwrap();
}

#[test]
fn one_allocator_per_device() {
    let settings = Settings::parse("max_split_size_mb:64").unwrap();
    let all = Allocators::new(&settings, [sim(1 << 30), sim(2 << 30)]).unwrap();
    assert_eq!(all.len(), 2);
    let a = all.get(1).unwrap();
    assert_eq!(a.index(), 1);
    let b = a.alloc(100 * MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(
        all.get(0).unwrap().memory_stats().unwrap()["allocation.all.current"],
        0
    );
    assert_eq!(a.memory_stats().unwrap()["oversize_allocations.current"], 1);
    drop(b);
    all.empty_cache().unwrap();
    assert!(all.get(2).is_none());
}

/// The flat names and values equal torch 2.15's own `torch.cuda.memory_stats()` on the
/// gpt2-train trace (`tests/fixtures/golden/gpt2-train/default.memory_stats.json`).
#[test]
fn memory_stats_keys_and_values_are_torchs() {
    let root = cachalot_testkit::fixtures();
    let trace = cachalot_replay::load_rmm(&root.join("traces/gpt2-train.csv.gz")).unwrap();
    let report = cachalot_replay::replay(&trace, &Default::default()).unwrap();
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("golden/gpt2-train/default.memory_stats.json")).unwrap(),
    )
    .unwrap();
    let ours = memory_stats(&report.stats);
    let golden = golden.as_object().unwrap();
    assert_eq!(ours.len(), golden.len());
    for ((k, v), (gk, gv)) in ours.iter().zip(golden) {
        assert_eq!((k, *v), (gk, gv.as_i64().unwrap()));
    }
    let json: Value = serde_json::from_str(&memory_stats_json(&report.stats)).unwrap();
    assert_eq!(json.as_object().unwrap(), golden);
}
