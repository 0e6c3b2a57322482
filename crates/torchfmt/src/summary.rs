//! `torch.cuda.memory_stats()` and `torch.cuda.memory_summary()`, from [`DeviceStats`].
//!
//! - [`memory_stats`] is the flat dictionary: `<stat>.<pool>.<metric>` for the nine per-pool
//!   statistics (`pool` ∈ all / small_pool / large_pool, `metric` ∈ current / peak /
//!   allocated / freed), `<stat>.<metric>` for the two oversize counters, and the seven plain
//!   numbers; 123 keys, sorted by key as torch's `OrderedDict` is. Each private pool that has
//!   held a segment adds torch 2.15's 12 `reserved_bytes_by_private_pools.<first>_<second>.
//!   <pool>.<metric>` keys (also after the pool is forgotten, as torch keeps them).
//! - [`memory_summary`] is torch 2.15's text table, character for character (spec §11.3):
//!   77-character lines, each cell's unit chosen from the "all" row of its column.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cachalot_core::{DeviceStats, Stat, StatArray};

/// The four metrics of a [`Stat`], with their names.
fn metrics(s: &Stat) -> [(&'static str, i64); 4] {
    [
        ("current", s.current),
        ("peak", s.peak),
        ("allocated", s.allocated),
        ("freed", s.freed),
    ]
}

/// `torch.cuda.memory_stats()`: every statistic under its flattened name, sorted by name.
pub fn memory_stats(s: &DeviceStats) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    let mut insert_array = |name: &str, arr: &StatArray| {
        for (pool, idx) in [("all", 0), ("small_pool", 1), ("large_pool", 2)] {
            for (metric, v) in metrics(&arr.0[idx]) {
                m.insert(format!("{name}.{pool}.{metric}"), v);
            }
        }
    };
    for (name, arr) in s.arrays() {
        insert_array(name, arr);
    }
    for (id, arr) in &s.reserved_bytes_by_private_pools {
        let name = format!("reserved_bytes_by_private_pools.{}_{}", id.first, id.second);
        insert_array(&name, arr);
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

/// `memory_stats` as a JSON object (keys sorted), for reports.
pub fn memory_stats_json(s: &DeviceStats) -> serde_json::Value {
    serde_json::Value::Object(
        memory_stats(s)
            .into_iter()
            .map(|(k, v)| (k, v.into()))
            .collect(),
    )
}

/// Python's `_format_size`: a byte count in the unit chosen by `pref` (the "all" row's value).
fn format_bytes(mut value: i64, pref: i64) -> String {
    const UNITS: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = UNITS[0];
    let mut pref = pref as f64;
    for next in &UNITS[1..] {
        if pref < (768 * 1024) as f64 {
            break;
        }
        unit = next;
        value = value.div_euclid(1024);
        pref /= 1024.0;
    }
    format!("{value:6} {unit}")
}

/// Python's `_format_count`: a count in the unit chosen by `pref`.
fn format_count(mut value: i64, pref: i64) -> String {
    const UNITS: [&str; 3] = [" ", "K", "M"];
    let mut unit = UNITS[0];
    let mut pref = pref as f64;
    for next in &UNITS[1..] {
        if pref < (750 * 1000) as f64 {
            break;
        }
        unit = next;
        value = value.div_euclid(1000);
        pref /= 1000.0;
    }
    format!("{value:7} {unit} ")
}

/// Formats one cell: a value in the unit chosen by the "all" row's value.
type Formatter = fn(i64, i64) -> String;

/// One table row: a label and four cells, each in the unit of the matching `pref` cell.
fn row(label: &str, s: &Stat, pref: &Stat, fmt: Formatter) -> String {
    format!(
        " {label:<21} | {} | {} | {} | {} ",
        fmt(s.current, pref.current),
        fmt(s.peak, pref.peak),
        fmt(s.allocated, pref.allocated),
        fmt(s.freed, pref.freed),
    )
}

/// `torch.cuda.memory_summary(device, abbreviated)`: torch 2.15's table for `stats`.
/// `abbreviated` leaves out the per-pool rows.
pub fn memory_summary(stats: &DeviceStats, device: u32, abbreviated: bool) -> String {
    let bytes: Formatter = format_bytes;
    let count: Formatter = format_count;
    let table: [(&StatArray, &str, Formatter); 9] = [
        (&stats.allocated_bytes, "Allocated memory", bytes),
        (&stats.active_bytes, "Active memory", bytes),
        (&stats.requested_bytes, "Requested memory", bytes),
        (&stats.reserved_bytes, "GPU reserved memory", bytes),
        (&stats.inactive_split_bytes, "Non-releasable memory", bytes),
        (&stats.allocation, "Allocations", count),
        (&stats.active, "Active allocs", count),
        (&stats.segment, "GPU reserved segments", count),
        (&stats.inactive_split, "Non-releasable allocs", count),
    ];
    let heavy = "=".repeat(75);
    let light = "-".repeat(75);
    let mut lines = vec![
        heavy.clone(),
        format!(
            " {:16} PyTorch CUDA memory summary, device ID {device:<17} ",
            ""
        ),
        light.clone(),
        format!(
            "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
            "", stats.num_ooms, "", stats.num_alloc_retries
        ),
        heavy.clone(),
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_string(),
    ];
    for (arr, name, fmt) in table {
        lines.push(light.clone());
        let all = arr.all();
        lines.push(row(name, all, all, fmt));
        if !abbreviated {
            lines.push(row("      from large pool", &arr.0[2], all, fmt));
            lines.push(row("      from small pool", &arr.0[1], all, fmt));
        }
    }
    for (stat, name) in [
        (&stats.oversize_allocations, "Oversize allocations"),
        (&stats.oversize_segments, "Oversize GPU segments"),
    ] {
        lines.push(light.clone());
        lines.push(row(name, stat, stat, count));
    }
    lines.push(heavy);
    let mut out = String::with_capacity(lines.len() * 78);
    for line in &lines {
        let _ = writeln!(out, "|{line}|");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_all_row() {
        // 20 MiB = 20480 KiB stays in KiB: the unit steps up only from 768 KiB of the next.
        assert_eq!(format_bytes(20 << 20, 20 << 20), " 20480 KiB");
        assert_eq!(format_bytes(1 << 30, 1 << 30), "  1024 MiB");
        // A sub-row takes the unit of the "all" row, even when it is small itself.
        assert_eq!(format_bytes(512, 1 << 30), "     0 MiB");
        assert_eq!(format_bytes(700, 700), "   700 B  ");
        assert_eq!(format_count(749_999, 749_999), " 749999   ");
        assert_eq!(format_count(750_000, 750_000), "    750 K ");
    }

    #[test]
    fn empty_stats_give_torchs_table_shape() {
        let text = memory_summary(&DeviceStats::default(), 0, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 47);
        assert!(lines.iter().all(|l| l.chars().count() == 77), "{text}");
        assert_eq!(
            lines[1],
            "|                  PyTorch CUDA memory summary, device ID 0                 |"
        );
        assert_eq!(
            memory_summary(&DeviceStats::default(), 0, true)
                .lines()
                .count(),
            29
        );
        assert_eq!(memory_stats(&DeviceStats::default()).len(), 123);
    }

    #[test]
    fn private_pools_add_torchs_per_pool_reserved_keys() {
        let mut s = DeviceStats::default();
        let mut arr = StatArray::default();
        arr.0[0].current = 22 << 20;
        arr.0[2].peak = 20 << 20;
        s.reserved_bytes_by_private_pools.push((
            cachalot_core::MempoolId {
                first: 0,
                second: 1,
            },
            arr,
        ));
        s.reserved_bytes_by_private_pools.push((
            cachalot_core::MempoolId {
                first: 3,
                second: 0,
            },
            StatArray::default(),
        ));
        let m = memory_stats(&s);
        assert_eq!(m.len(), 123 + 2 * 12);
        assert_eq!(
            m["reserved_bytes_by_private_pools.0_1.all.current"],
            22 << 20
        );
        assert_eq!(
            m["reserved_bytes_by_private_pools.0_1.large_pool.peak"],
            20 << 20
        );
        assert_eq!(m["reserved_bytes_by_private_pools.3_0.small_pool.freed"], 0);
    }
}
