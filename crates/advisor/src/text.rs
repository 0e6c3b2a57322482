//! The advisor's results as text for people and as JSON for programs.

use std::fmt::Write as _;

use cachalot_core::format_size;
use serde_json::{Value, json};

use crate::capacity::{MinCapacity, MinCapacityResult};
use crate::compare::CompareResult;
use crate::measure::{Evaluated, Metrics};
use crate::search::TuneResult;

/// A capacity for people: GiB, and MiB when it is a whole number of them.
pub fn capacity(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} ({} MiB)", format_size(bytes), bytes >> 20)
    } else {
        format_size(bytes)
    }
}

/// Microseconds as milliseconds.
pub fn ms(us: f64) -> String {
    format!("{:.1} ms", us / 1000.0)
}

/// The line to paste.
pub fn paste_line(label: &str) -> String {
    if label.is_empty() {
        "unset PYTORCH_CUDA_ALLOC_CONF   # the default configuration".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={label}")
    }
}

/// One line saying why `w` is recommended over the default `d`, with the numbers.
pub fn reason(w: &Evaluated, d: &Evaluated) -> String {
    let (wm, dm) = (&w.metrics, &d.metrics);
    if wm.ooms > 0 {
        let fewer = if wm.ooms < dm.ooms {
            format!(
                "this one fails {} allocations, the default {}",
                wm.ooms, dm.ooms
            )
        } else {
            format!(
                "{} allocations fail with this one as with the default",
                wm.ooms
            )
        };
        return format!(
            "nothing tried runs without out-of-memory on this device ({fewer}); see \
             --min-capacity for a device that fits"
        );
    }
    if w.candidate.label.is_empty() {
        return "the default is already the best here: nothing tried beats it on OOMs, retries, \
                device-call time or peak reserved"
            .into();
    }
    if dm.ooms > 0 {
        return format!(
            "runs without out-of-memory where the default fails {} allocation{}",
            dm.ooms,
            if dm.ooms == 1 { "" } else { "s" }
        );
    }
    if wm.retries < dm.retries {
        return format!(
            "avoids {} of the default's {} retries (each a full device synchronize and cache \
             flush): an estimated {} of device calls instead of {}",
            dm.retries - wm.retries,
            dm.retries,
            ms(wm.cost_us),
            ms(dm.cost_us)
        );
    }
    if wm.cost_us < dm.cost_us {
        return format!(
            "same OOMs and retries as the default, an estimated {} of device calls instead of {} \
             ({} device allocations and {} frees instead of {} and {})",
            ms(wm.cost_us),
            ms(dm.cost_us),
            wm.device_allocs,
            wm.device_frees,
            dm.device_allocs,
            dm.device_frees
        );
    }
    format!(
        "same OOMs, retries and device-call time as the default, {} less reserved at peak ({} \
         instead of {})",
        format_size(dm.peak_reserved.saturating_sub(wm.peak_reserved)),
        format_size(wm.peak_reserved),
        format_size(dm.peak_reserved)
    )
}

/// Column names of [`number_cells`], shared by the text and HTML tables.
pub(crate) const METRIC_HEADER: [&str; 8] = [
    "OOMs",
    "retries",
    "dev allocs",
    "dev frees",
    "est. time",
    "peak reserved",
    "peak alloc",
    "util",
];

/// The table cells of one configuration's numbers, shared by the text and HTML reports.
pub(crate) fn number_cells(m: &Metrics) -> Vec<String> {
    vec![
        m.ooms.to_string(),
        m.retries.to_string(),
        m.device_allocs.to_string(),
        m.device_frees.to_string(),
        ms(m.cost_us),
        format_size(m.peak_reserved),
        format_size(m.peak_allocated),
        format!("{:.1}%", 100.0 * m.utilization()),
    ]
}

fn metric_cells(m: &Metrics, label: &str) -> Vec<String> {
    let mut cells = number_cells(m);
    cells.push(label.to_string());
    cells
}

/// Lays out rows as aligned columns (the last column left-aligned, the others right-aligned).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let n = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == n {
                s.push_str(c);
            } else if i == 0 {
                let _ = write!(s, "{c:<width$}  ", width = w[i]);
            } else {
                let _ = write!(s, "{c:>width$}  ", width = w[i]);
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// `tune`'s report.
pub fn tune_text(r: &TuneResult, trace: &str, events: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace: {trace} ({events} events) on a {} device",
        capacity(r.capacity)
    );
    let _ = writeln!(
        out,
        "ranked by: no out-of-memory, then fewest retries, then estimated device-call time, \
         then peak reserved ({} configurations tried)\n",
        r.searched
    );
    let mut header = vec!["rank"];
    header.extend_from_slice(&METRIC_HEADER);
    header.push("config");
    let mut rows = Vec::new();
    for (i, e) in r.ranking.iter().enumerate() {
        let mut row = vec![(i + 1).to_string()];
        row.extend(metric_cells(&e.metrics, e.candidate.display_name()));
        rows.push(row);
    }
    let ranked = |label: &str| r.ranking.iter().position(|e| e.candidate.label == label);
    let mut refs = vec![(&r.default, "")];
    for a in &r.advice {
        refs.push((a, "  <- common advice"));
    }
    for (e, note) in refs {
        if ranked(&e.candidate.label).is_none() {
            let mut row = vec!["-".to_string()];
            row.extend(metric_cells(&e.metrics, e.candidate.display_name()));
            let last = row.last_mut().expect("cells");
            last.push_str(note);
            rows.push(row);
        }
    }
    out.push_str(&table(&header, &rows));
    let w = r.winner();
    if w.metrics.ooms > 0 {
        let _ = writeln!(
            out,
            "\nnothing tried fits on this device; the fewest out-of-memory errors with:"
        );
    } else {
        let _ = writeln!(out, "\nrecommended for this trace on this device:");
    }
    let _ = writeln!(out, "  {}", paste_line(&w.candidate.label));
    let _ = writeln!(out, "why: {}", r.reason());
    for a in &r.advice {
        let place = ranked(&a.candidate.label)
            .map(|i| format!("rank {}", i + 1))
            .unwrap_or_else(|| format!("not in the best {}", r.ranking.len()));
        let _ = writeln!(
            out,
            "common advice {}: {place}; {} OOMs, {} retries, {}, {} reserved at peak",
            a.candidate.label,
            a.metrics.ooms,
            a.metrics.retries,
            ms(a.metrics.cost_us),
            format_size(a.metrics.peak_reserved)
        );
    }
    out
}

fn min_cap_cell(c: Option<u64>) -> String {
    c.map(capacity).unwrap_or_else(|| "does not fit".into())
}

/// `tune --min-capacity`'s report.
pub fn min_capacity_text(r: &MinCapacityResult, trace: &str, events: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "trace: {trace} ({events} events)");
    let _ = writeln!(
        out,
        "smallest device without out-of-memory, in 64 MiB steps ({} configurations tried):\n",
        r.searched
    );
    let mut rows: Vec<Vec<String>> = Vec::new();
    let push = |m: &MinCapacity, rank: String, rows: &mut Vec<Vec<String>>| {
        rows.push(vec![
            rank,
            min_cap_cell(m.capacity),
            m.candidate.display_name().to_string(),
        ]);
    };
    for (i, m) in r.best.iter().enumerate() {
        push(m, (i + 1).to_string(), &mut rows);
    }
    for m in &r.seeds {
        if !r
            .best
            .iter()
            .any(|b| b.candidate.label == m.candidate.label)
        {
            push(m, "-".into(), &mut rows);
        }
    }
    out.push_str(&table(&["rank", "min capacity", "config"], &rows));
    match (&r.capacity, &r.tune) {
        (Some(c), Some(t)) => {
            let with = r
                .fits_with
                .as_ref()
                .map(|m| m.candidate.display_name().to_string())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "\nsmallest device found: {} with {with} (at {} it runs out of memory)",
                capacity(*c),
                capacity(c - crate::STEP)
            );
            let _ = writeln!(out, "best configuration on it:");
            let _ = writeln!(out, "  {}", paste_line(&t.winner().candidate.label));
            let _ = writeln!(out, "why: {}", t.reason());
        }
        _ => {
            let _ = writeln!(
                out,
                "\nno configuration tried runs this trace without out-of-memory, even on a \
                 device of 80 GiB or four times its peak request"
            );
        }
    }
    out
}

/// `compare`'s report.
pub fn compare_text(r: &CompareResult, trace: &str, events: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace: {trace} ({events} events); OOMs, retries, device calls and time at {}\n",
        capacity(r.capacity)
    );
    let mut header = vec!["min capacity"];
    header.extend_from_slice(&METRIC_HEADER);
    header.push("config");
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            let mut cells = vec![min_cap_cell(row.min_capacity)];
            cells.extend(metric_cells(&row.metrics, row.candidate.display_name()));
            cells
        })
        .collect();
    out.push_str(&table(&header, &rows));
    let _ = writeln!(
        out,
        "\nmin capacity: smallest 64 MiB multiple without out-of-memory (bisection, both sides \
         replayed); util = peak allocated / peak reserved; est. time from the cost model \
         (estimates, see docs/advisor.md)"
    );
    out
}

/// A replay's numbers as JSON.
pub fn metrics_json(m: &Metrics) -> Value {
    json!({
        "capacity": m.capacity,
        "events": m.events,
        "num_ooms": m.ooms,
        "first_oom_line": m.first_oom_line,
        "num_alloc_retries": m.retries,
        "num_device_alloc": m.device_allocs,
        "num_device_free": m.device_frees,
        "cudaMalloc": m.calls.cuda_malloc,
        "cudaMalloc_failed": m.calls.cuda_malloc_failed,
        "cudaFree": m.calls.cuda_free,
        "cuMemMap": m.calls.page_map,
        "cuMemUnmap": m.calls.page_unmap,
        "cuMemAddressReserve": m.calls.address_reserve,
        "num_sync_all_streams": m.calls.synchronize,
        "reserved_bytes_allocated": m.calls.reserved_bytes_total,
        "estimated_device_time_us": m.cost_us,
        "peak_allocated": m.peak_allocated,
        "peak_reserved": m.peak_reserved,
        "peak_segments": m.peak_segments,
        "utilization": m.utilization(),
    })
}

fn evaluated_json(e: &Evaluated) -> Value {
    json!({"PYTORCH_CUDA_ALLOC_CONF": e.candidate.label, "result": metrics_json(&e.metrics)})
}

/// `tune --json`.
pub fn tune_json(r: &TuneResult) -> Value {
    json!({
        "capacity": r.capacity,
        "recommended": r.winner().candidate.label,
        "reason": r.reason(),
        "searched": r.searched,
        "ranking": r.ranking.iter().map(evaluated_json).collect::<Vec<_>>(),
        "default": evaluated_json(&r.default),
        "advice": r.advice.iter().map(evaluated_json).collect::<Vec<_>>(),
    })
}

/// `tune --min-capacity --json`.
pub fn min_capacity_json(r: &MinCapacityResult) -> Value {
    let mc = |m: &MinCapacity| json!({"PYTORCH_CUDA_ALLOC_CONF": m.candidate.label, "min_capacity": m.capacity});
    json!({
        "min_capacity": r.capacity,
        "fits_with": r.fits_with.as_ref().map(|m| m.candidate.label.clone()),
        "searched": r.searched,
        "best": r.best.iter().map(mc).collect::<Vec<_>>(),
        "seeds": r.seeds.iter().map(mc).collect::<Vec<_>>(),
        "tune": r.tune.as_ref().map(tune_json),
    })
}

/// `compare --json`.
pub fn compare_json(r: &CompareResult) -> Value {
    json!({
        "capacity": r.capacity,
        "rows": r.rows.iter().map(|row| json!({
            "PYTORCH_CUDA_ALLOC_CONF": row.candidate.label,
            "min_capacity": row.min_capacity,
            "result": metrics_json(&row.metrics),
        })).collect::<Vec<_>>(),
    })
}
