//! Writing a [`ReplayReport`] out: the oracle's JSON object (same field names, so the two can
//! be diffed), its `--segments` CSV, and a summary for people.

use std::io::{self, Write};

use cachalot_core::{AllocConf, DeviceStats, Stat, StatArray, format_size};
use cachalot_sim::LogEntry;
use serde_json::{Map, Value, json};

use crate::engine::ReplayReport;
use crate::load::TraceStats;
use crate::pools::PoolReport;

fn stat_json(s: &Stat) -> Value {
    json!({"current": s.current, "peak": s.peak, "allocated": s.allocated, "freed": s.freed})
}

fn array_json(a: &StatArray) -> Value {
    json!({
        "all": stat_json(&a.0[0]),
        "small_pool": stat_json(&a.0[1]),
        "large_pool": stat_json(&a.0[2]),
    })
}

/// `device_stats`: every field of torch's `DeviceStats`.
pub fn device_stats_json(s: &DeviceStats) -> Value {
    let mut m = Map::new();
    for (name, arr) in s.arrays() {
        m.insert(name.into(), array_json(arr));
    }
    m.insert("num_alloc_retries".into(), s.num_alloc_retries.into());
    m.insert("num_ooms".into(), s.num_ooms.into());
    m.insert(
        "oversize_allocations".into(),
        stat_json(&s.oversize_allocations),
    );
    m.insert("oversize_segments".into(), stat_json(&s.oversize_segments));
    m.insert("num_sync_all_streams".into(), s.num_sync_all_streams.into());
    m.insert("num_device_alloc".into(), s.num_device_alloc.into());
    m.insert("num_device_free".into(), s.num_device_free.into());
    m.insert("num_oom_rejections".into(), s.num_oom_rejections.into());
    m.insert("max_split_size".into(), s.max_split_size.into());
    m.insert(
        "private_pools".into(),
        s.reserved_bytes_by_private_pools.len().into(),
    );
    Value::Object(m)
}

/// The seven headline numbers, `.peak` or `.current` of the aggregate stats.
pub fn headline_json(s: &DeviceStats, peak: bool) -> Value {
    let pick = |a: &StatArray| {
        if peak { a.all().peak } else { a.all().current }
    };
    json!({
        "allocated_bytes": pick(&s.allocated_bytes),
        "reserved_bytes": pick(&s.reserved_bytes),
        "active_bytes": pick(&s.active_bytes),
        "requested_bytes": pick(&s.requested_bytes),
        "inactive_split_bytes": pick(&s.inactive_split_bytes),
        "segments": pick(&s.segment),
        "allocations": pick(&s.allocation),
    })
}

/// `config_effective`: what the configuration means, in the oracle's fields.
pub fn config_json(c: &AllocConf) -> Value {
    json!({
        "allocator_name": c.backend.name(),
        "max_split_size": c.max_split_size,
        "max_non_split_rounding_size": c.max_non_split_rounding_size,
        "large_segment_size": c.large_segment_size,
        "garbage_collection_threshold": c.garbage_collection_threshold,
        "expandable_segments": c.expandable_segments,
        "release_lock_on_cudamalloc": c.release_lock_on_cudamalloc,
        "per_process_memory_fraction": c.per_process_memory_fraction,
        "throw_on_cudamalloc_oom": c.throw_on_cudamalloc_oom,
        "roundup_power2_divisions": c.roundup_power2_divisions.to_vec(),
        "last_allocator_settings": c.last_allocator_settings,
    })
}

/// `trace_stats`.
pub fn trace_stats_json(t: &TraceStats) -> Value {
    let mut v = json!({
        "lines": t.lines,
        "allocs": t.allocs,
        "frees": t.frees,
        "zero_size_allocs": t.zero_size_allocs,
        "unmatched_frees": t.unmatched_frees,
        "duplicate_alloc_ids": t.duplicate_alloc_ids,
        "trace_alloc_failures": t.trace_alloc_failures,
        "other_rows": t.other_rows,
        "live_at_end": t.live_at_end,
        "streams": t.streams,
        "bytes_requested": t.bytes_requested as u64,
    });
    if t.has_pool_rows
        && let Value::Object(m) = &mut v
    {
        m.insert("pool_ops".into(), t.pool_ops.into());
        m.insert("pools".into(), t.pools.into());
        m.insert("empty_cache_calls".into(), t.empty_cache_calls.into());
        m.insert("record_streams".into(), t.record_streams.into());
        m.insert(
            "unmatched_record_streams".into(),
            t.unmatched_record_streams.into(),
        );
    }
    v
}

/// `pools`: one object per pool the trace names.
pub fn pools_json(pools: &[PoolReport]) -> Value {
    pools
        .iter()
        .map(|p| {
            let segs = &p.segments;
            json!({
                "pool": p.number,
                "kind": if p.graph { "graph" } else { "mempool" },
                "mempool_id": [p.id.first, p.id.second],
                "use_count": p.use_count,
                "reserved_bytes": p.reserved.as_ref().map(array_json),
                "segments": {
                    "count": segs.len(),
                    "total_size": segs.iter().map(|s| s.total_size).sum::<u64>(),
                    "allocated_size": segs.iter().map(|s| s.allocated_size).sum::<u64>(),
                    "active_size": segs.iter().map(|s| s.active_size).sum::<u64>(),
                    "blocks": segs.iter().map(|s| s.blocks.len()).sum::<usize>(),
                },
            })
        })
        .collect()
}

/// Where a report came from, for the JSON's first fields.
#[derive(Clone, Debug, Default)]
pub struct ReportMeta {
    /// The trace argument as given.
    pub trace: String,
    /// Raw `PYTORCH_CUDA_ALLOC_CONF`, if any.
    pub pytorch_cuda_alloc_conf: Option<String>,
    /// Raw `PYTORCH_ALLOC_CONF`, if any.
    pub pytorch_alloc_conf: Option<String>,
    /// Raw `CACHALOT_ALLOC_CONF`, if any.
    pub cachalot_alloc_conf: Option<String>,
    /// Whether streams were ignored.
    pub ignore_streams: bool,
}

/// The whole report as the oracle's JSON object (keys in the oracle's order, plus cachalot's
/// own fields at the end).
pub fn report_json(
    r: &ReplayReport,
    conf: &AllocConf,
    trace: &TraceStats,
    capacity: u64,
    meta: &ReportMeta,
) -> Value {
    let d = &r.device;
    let mut m = Map::new();
    m.insert("trace".into(), meta.trace.clone().into());
    m.insert(
        "PYTORCH_CUDA_ALLOC_CONF".into(),
        json!(meta.pytorch_cuda_alloc_conf),
    );
    m.insert("PYTORCH_ALLOC_CONF".into(), json!(meta.pytorch_alloc_conf));
    m.insert("config_effective".into(), config_json(conf));
    m.insert("capacity".into(), capacity.into());
    m.insert("device_count".into(), 1.into());
    m.insert("ignore_streams".into(), meta.ignore_streams.into());
    let mut stats = trace_stats_json(trace);
    if meta.ignore_streams {
        // The oracle creates no stream when it ignores them, and counts the ones it created.
        stats["streams"] = 0.into();
    }
    m.insert("trace_stats".into(), stats);
    m.insert("events".into(), r.events.into());
    m.insert("peak".into(), headline_json(&r.stats, true));
    m.insert("final".into(), headline_json(&r.stats, false));
    m.insert("num_device_alloc".into(), r.stats.num_device_alloc.into());
    m.insert("num_device_free".into(), r.stats.num_device_free.into());
    m.insert("num_alloc_retries".into(), r.stats.num_alloc_retries.into());
    m.insert("num_ooms".into(), r.stats.num_ooms.into());
    let messages: Vec<Value> = r
        .ooms
        .events
        .iter()
        .map(|o| json!({"trace_line": o.line, "message": o.message}))
        .collect();
    m.insert(
        "ooms".into(),
        json!({
            "count": r.ooms.count,
            "bytes_requested": r.ooms.bytes_requested as u64,
            "skipped_frees": r.ooms.skipped_frees,
            "messages": messages,
        }),
    );
    m.insert("device_stats".into(), device_stats_json(&r.stats));
    if !r.pools.is_empty() {
        m.insert("pools".into(), pools_json(&r.pools));
    }
    m.insert(
        "fake_device".into(),
        json!({
            "capacity": capacity,
            "phys_used": r.phys_used,
            "phys_peak": d.phys_peak,
            "cudaMalloc": d.cuda_malloc,
            "cudaFree": d.cuda_free,
            "cudaMalloc_failed": d.cuda_malloc_failed,
            "cudaMallocAsync": d.cuda_malloc_async,
            "cudaFreeAsync": d.cuda_free_async,
            "cuMemCreate": d.mem_create,
            "cuMemCreate_failed": d.mem_create_failed,
            "cuMemRelease": d.mem_release,
            "cuMemMap": d.mem_map,
            "cuMemUnmap": d.mem_unmap,
            "cuMemAddressReserve": d.address_reserve,
            "cuMemAddressFree": d.address_free,
            "va_reserved": r.va_reserved,
            "unimplemented_calls": 0,
        }),
    );
    m.insert(
        "cudaMemGetInfo_at_end".into(),
        json!({"free": r.mem_info_at_end.free, "total": r.mem_info_at_end.total}),
    );
    m.insert(
        "timing".into(),
        json!({
            "wall_ns": r.wall_ns as u64,
            "ns_per_op": r.ns_per_op(),
            "clock": "std::time::Instant, replay loop only",
        }),
    );
    if let Some((line, message)) = &r.fatal_error {
        m.insert(
            "fatal_error".into(),
            json!({"trace_line": line, "message": message}),
        );
    }
    if let Some(a) = &r.after_empty_cache {
        m.insert(
            "after_empty_cache".into(),
            json!({
                "final": headline_json(&a.stats, false),
                "num_device_free": a.stats.num_device_free,
                "phys_used": a.phys_used,
            }),
        );
    }
    Value::Object(m)
}

/// Writes the device-call log in the oracle's `--segments` CSV format.
pub fn write_segments(mut w: impl Write, log: &[LogEntry]) -> io::Result<()> {
    writeln!(w, "seq,trace_line,op,size,ptr,handle,result,phys_used")?;
    for e in log {
        writeln!(
            w,
            "{},{},{},{},{:#x},{},{},{}",
            e.seq,
            e.tag,
            e.op.name(),
            e.size,
            e.ptr,
            e.handle,
            e.result,
            e.phys_used
        )?;
    }
    Ok(())
}

/// A readable summary of a replay.
pub fn summary_text(r: &ReplayReport, trace: &TraceStats, capacity: u64) -> String {
    let s = &r.stats;
    let peak_alloc = s.allocated_bytes.all().peak as u64;
    let peak_res = s.reserved_bytes.all().peak as u64;
    let util = if peak_res == 0 {
        100.0
    } else {
        100.0 * peak_alloc as f64 / peak_res as f64
    };
    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "replayed {} events ({} allocations, {} frees, {} stream{}) on a {} device",
        r.events,
        trace.allocs,
        trace.frees,
        trace.streams + 1,
        if trace.streams == 0 { "" } else { "s" },
        format_size(capacity)
    );
    let _ = writeln!(out, "peak allocated      {}", format_size(peak_alloc));
    let _ = writeln!(out, "peak reserved       {}", format_size(peak_res));
    let _ = writeln!(
        out,
        "utilization at peak {util:.1}% (peak allocated / peak reserved)"
    );
    let _ = writeln!(
        out,
        "device calls        {} allocations, {} frees",
        s.num_device_alloc, s.num_device_free
    );
    let _ = writeln!(
        out,
        "retries             {} (each one synchronizes the device and flushes the cache)",
        s.num_alloc_retries
    );
    let _ = writeln!(out, "out of memory       {}", r.ooms.count);
    for o in &r.ooms.events {
        let _ = writeln!(out, "  line {}: {}", o.line, o.message);
    }
    if r.ooms.count as usize > r.ooms.events.len() {
        let _ = writeln!(
            out,
            "  … and {} more",
            r.ooms.count as usize - r.ooms.events.len()
        );
    }
    let _ = writeln!(out, "replay speed        {:.0} ns per event", r.ns_per_op());
    out
}
