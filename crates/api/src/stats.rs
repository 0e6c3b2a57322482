//! Statistics under torch's flat `memory_stats()` names.
//!
//! torch 2.15 flattens its nested statistics with `.`: `<array>.<pool>.<metric>` for the nine
//! arrays (`allocated_bytes.all.current`), `<stat>.<metric>` for the two single stats
//! (`oversize_segments.peak`), and the bare counters (`num_ooms`, `max_split_size`, …): 123
//! keys, sorted by name.
//!
//! (A local flattener; the `cachalot-torchfmt` crate has the same one next to
//! `memory_summary` and the snapshot pickle writer.)

use std::collections::BTreeMap;
use std::fmt::Write;

use cachalot_core::{DeviceStats, Stat};

fn metrics(s: &Stat) -> [(&'static str, i64); 4] {
    [
        ("current", s.current),
        ("peak", s.peak),
        ("allocated", s.allocated),
        ("freed", s.freed),
    ]
}

/// `torch.cuda.memory_stats()` of `s`: every statistic under its flat name, sorted.
pub fn memory_stats(s: &DeviceStats) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for (name, arr) in s.arrays() {
        for (pool, i) in [("all", 0), ("small_pool", 1), ("large_pool", 2)] {
            for (metric, v) in metrics(&arr.0[i]) {
                m.insert(format!("{name}.{pool}.{metric}"), v);
            }
        }
    }
    for (name, stat) in [
        ("oversize_allocations", &s.oversize_allocations),
        ("oversize_segments", &s.oversize_segments),
    ] {
        for (metric, v) in metrics(stat) {
            m.insert(format!("{name}.{metric}"), v);
        }
    }
    for (name, v) in [
        ("num_alloc_retries", s.num_alloc_retries),
        ("num_ooms", s.num_ooms),
        ("num_sync_all_streams", s.num_sync_all_streams),
        ("num_device_alloc", s.num_device_alloc),
        ("num_device_free", s.num_device_free),
        ("num_oom_rejections", s.num_oom_rejections),
        ("max_split_size", s.max_split_size),
    ] {
        m.insert(name.to_string(), v);
    }
    m
}

/// [`memory_stats`] as a JSON object on one line, keys sorted (all keys are plain ASCII
/// names, all values integers).
pub fn memory_stats_json(s: &DeviceStats) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in memory_stats(s).iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "\"{k}\": {v}");
    }
    out.push('}');
    out
}
