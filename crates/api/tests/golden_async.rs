//! Fidelity of the direct backends: every trace of `tests/fixtures/golden-async` replayed with
//! `backend:cudaMallocAsync` (on the normal and on a tight device) and with
//! `PYTORCH_NO_CUDA_MEMORY_CACHING=1` must give the oracle's device calls (row for row, or by
//! SHA-256 where only the digest is stored), statistics, counters and OOM messages.
//!
//! Regenerate the goldens with `scripts/gen_async_golden.py`. `GOLDEN_FILTER=substring` runs a
//! subset (matched against `trace/scenario`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use cachalot::{Allocator, Device, Settings, StreamId};
use cachalot_replay::report::{
    config_json, device_stats_json, headline_json, trace_stats_json, write_segments,
};
use cachalot_replay::{LoadedTrace, TraceOp, load_rmm};
use cachalot_sim::{SimConfig, SimDevice};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn gunzip(path: &Path) -> String {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// The paths where `ours` and the oracle's `golden` differ (numbers compared by value).
fn diff(path: &str, ours: &Value, golden: &Value, out: &mut Vec<String>) {
    match (ours, golden) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                match x.get(k) {
                    Some(u) => diff(&format!("{path}.{k}"), u, v, out),
                    None => out.push(format!("{path}.{k}: missing (oracle {v})")),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), u, v, out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if ours == golden => {}
        _ => out.push(format!("{path}: cachalot {ours}, oracle {golden}")),
    }
}

/// What the oracle's replayer does, through cachalot's allocator with `settings`.
fn replay(trace: &LoadedTrace, settings: &Settings, capacity: u64) -> (Value, String) {
    let mut dev = SimDevice::new(SimConfig::with_capacity(capacity));
    dev.enable_log();
    let tag = dev.tag_handle();
    let alloc = Allocator::new(settings, dev).unwrap();
    let mut ptrs = vec![0u64; trace.slots as usize];
    let mut failed = vec![false; trace.slots as usize];
    let (mut count, mut bytes, mut skipped) = (0u64, 0u64, 0u64);
    let mut messages = Vec::new();
    let mut fatal = None;
    let mut events = 0u64;
    for op in &trace.ops {
        events += 1;
        tag.store(op.line() as i64, Ordering::Relaxed);
        match *op {
            TraceOp::Alloc {
                slot,
                size,
                stream,
                line,
            } => match alloc.malloc(size, StreamId(stream as u64)) {
                Ok(p) => ptrs[slot as usize] = p,
                Err(e) if e.is_out_of_memory() => {
                    failed[slot as usize] = true;
                    count += 1;
                    bytes += size;
                    if messages.len() < 5 {
                        messages.push(json!({"trace_line": line, "message": e.to_string()}));
                    }
                }
                Err(e) => {
                    fatal = Some(json!({"trace_line": line, "message": e.to_string()}));
                    break;
                }
            },
            TraceOp::Free { slot, line } => {
                let p = std::mem::take(&mut ptrs[slot as usize]);
                if p != 0 {
                    if let Err(e) = alloc.free(p) {
                        fatal = Some(json!({"trace_line": line, "message": e.to_string()}));
                        break;
                    }
                } else if failed[slot as usize] {
                    skipped += 1;
                }
            }
        }
    }
    let stats = alloc.stats().unwrap();
    let info = alloc.with_device(|d| d.mem_get_info()).unwrap();
    let (c, phys_used, va, log) = alloc.with_device(|d| {
        (
            d.counters().clone(),
            d.phys_used(),
            d.va_reserved(),
            d.take_log(),
        )
    });
    let mut out = json!({
        "config_effective": config_json(&settings.conf),
        "trace_stats": trace_stats_json(&trace.stats),
        "events": events,
        "peak": headline_json(&stats, true),
        "final": headline_json(&stats, false),
        "num_device_alloc": stats.num_device_alloc,
        "num_device_free": stats.num_device_free,
        "num_alloc_retries": stats.num_alloc_retries,
        "num_ooms": stats.num_ooms,
        "ooms": {"count": count, "bytes_requested": bytes, "skipped_frees": skipped,
                 "messages": messages},
        "device_stats": device_stats_json(&stats),
        "fake_device": {
            "capacity": capacity, "phys_used": phys_used, "phys_peak": c.phys_peak,
            "cudaMalloc": c.cuda_malloc, "cudaFree": c.cuda_free,
            "cudaMalloc_failed": c.cuda_malloc_failed, "cudaMallocAsync": c.cuda_malloc_async,
            "cudaFreeAsync": c.cuda_free_async, "cuMemCreate": c.mem_create,
            "cuMemCreate_failed": c.mem_create_failed, "cuMemRelease": c.mem_release,
            "cuMemMap": c.mem_map, "cuMemUnmap": c.mem_unmap,
            "cuMemAddressReserve": c.address_reserve, "cuMemAddressFree": c.address_free,
            "va_reserved": va, "unimplemented_calls": 0,
        },
        "cudaMemGetInfo_at_end": {"free": info.free, "total": info.total},
    });
    if let Some(f) = fatal {
        out["fatal_error"] = f;
    }
    let mut csv = Vec::new();
    write_segments(&mut csv, &log).unwrap();
    (out, String::from_utf8(csv).unwrap())
}

const COMPARED: &[&str] = &[
    "config_effective",
    "trace_stats",
    "events",
    "peak",
    "final",
    "num_device_alloc",
    "num_device_free",
    "num_alloc_retries",
    "num_ooms",
    "ooms",
    "device_stats",
    "fake_device",
    "cudaMemGetInfo_at_end",
    "fatal_error",
];

#[test]
fn direct_backends_match_the_oracle() {
    let root = fixtures();
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("golden-async/index.json")).unwrap(),
    )
    .unwrap();
    let filter = std::env::var("GOLDEN_FILTER").unwrap_or_default();
    let (mut checked, mut logs_compared, mut failures) = (0, 0, Vec::new());
    for (name, entry) in index.as_object().unwrap() {
        let mut trace = None;
        for (scenario, sc) in entry["scenarios"].as_object().unwrap() {
            let id = format!("{name}/{scenario}");
            if !id.contains(&filter) {
                continue;
            }
            let trace = trace.get_or_insert_with(|| {
                load_rmm(&root.join(entry["trace"].as_str().unwrap())).unwrap()
            });
            let conf = sc["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap();
            let mut settings = Settings::parse(conf).unwrap();
            settings.no_caching = sc["PYTORCH_NO_CUDA_MEMORY_CACHING"].as_bool().unwrap();
            let capacity = sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap();
            let (ours, csv) = replay(trace, &settings, capacity);
            let golden: Value = serde_json::from_str(
                &std::fs::read_to_string(root.join(format!("golden-async/{id}.json"))).unwrap(),
            )
            .unwrap();
            let mut diffs = Vec::new();
            for key in COMPARED {
                match (ours.get(key), golden.get(key)) {
                    (Some(a), Some(b)) => diff(key, a, b, &mut diffs),
                    (None, None) => {}
                    (a, b) => diffs.push(format!("{key}: cachalot {a:?}, oracle {b:?}")),
                }
            }
            let rows = csv.lines().count() as u64 - 1;
            let sha = format!("{:x}", Sha256::digest(csv.as_bytes()));
            if rows != golden["segments_rows"].as_u64().unwrap() {
                diffs.push(format!(
                    "device calls: cachalot {rows}, oracle {}",
                    golden["segments_rows"]
                ));
            }
            if sha != golden["segments_sha256"].as_str().unwrap() {
                diffs.push("device-call log digest differs".into());
            }
            let log_path = root.join(format!("golden-async/{id}.segments.csv.gz"));
            if sc["segments_log"].as_bool().unwrap() {
                let golden_csv = gunzip(&log_path);
                logs_compared += 1;
                if let Some((i, (a, b))) = csv
                    .lines()
                    .zip(golden_csv.lines())
                    .enumerate()
                    .find(|(_, (a, b))| a != b)
                {
                    diffs.push(format!("log row {i}: cachalot `{a}`, oracle `{b}`"));
                }
            }
            checked += 1;
            if !diffs.is_empty() {
                diffs.truncate(6);
                failures.push(format!("{id}:\n    {}", diffs.join("\n    ")));
            }
        }
    }
    assert!(checked > 0, "no scenario matched the filter {filter:?}");
    assert!(
        failures.is_empty(),
        "{} of {checked} scenarios differ from the oracle:\n{}",
        failures.len(),
        failures.join("\n")
    );
    if filter.is_empty() {
        assert_eq!(checked, 51, "17 traces × 3 scenarios");
        assert!(logs_compared >= 15, "{logs_compared} full logs compared");
    }
    eprintln!(
        "{checked} direct-backend scenarios identical to the oracle ({logs_compared} logs row by row)"
    );
}
