//! The advisor's results as text for people and as JSON for programs.

use std::fmt::Write as _;

use cachalot_core::format_size;
use serde_json::{Value, json};

use crate::capacity::{MinCapacity, MinCapacityResult};
use crate::compare::CompareResult;
use crate::measure::{Evaluated, Metrics};
use crate::search::{Fit, TuneResult};

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

/// What was replayed, for the reports' headings.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The trace (or traces) as the user named them.
    pub name: String,
    /// Operations replayed, all parts together.
    pub events: usize,
    /// The parts' names, when the workload has several (each row names its worst part).
    pub parts: Vec<String>,
    /// What the inputs recorded and how they were replayed (e.g. a snapshot's OOMs).
    pub notes: Vec<String>,
    /// Where the capacity comes from (a GPU's usable memory, the headroom taken off).
    pub capacity_note: Option<String>,
}

impl Source {
    /// A single trace.
    pub fn trace(name: &str, events: usize) -> Self {
        Source {
            name: name.to_string(),
            events,
            ..Source::default()
        }
    }

    fn heading(&self, out: &mut String, capacity: Option<u64>) {
        match capacity {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "trace: {} ({} events) on a {} device",
                    self.name,
                    self.events,
                    self::capacity(c)
                );
            }
            None => {
                let _ = writeln!(out, "trace: {} ({} events)", self.name, self.events);
            }
        }
        if let Some(n) = &self.capacity_note {
            let _ = writeln!(out, "capacity: {n}");
        }
        if self.parts.len() > 1 {
            let _ = writeln!(
                out,
                "{} traces, one configuration for all of them: each row shows its worst trace",
                self.parts.len()
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }

    fn part(&self, m: &Metrics) -> Option<String> {
        (self.parts.len() > 1).then(|| self.parts.get(m.part).cloned().unwrap_or_default())
    }
}

/// How the ranking is decided, for people.
pub fn ranking_rule() -> String {
    format!(
        "ranked by: no out-of-memory, then fewest retries, then estimated device-call time (within {} ms a tie), then peak reserved",
        crate::measure::COST_TIE_US / 1000.0
    )
}

impl TuneResult {
    /// One line saying why the winner wins, with the numbers (the renderer's, so that the
    /// search does not call its own renderer).
    pub fn reason(&self) -> String {
        reason(self.winner(), &self.default)
    }
}

/// One line saying why `w` is recommended over the default `d`, quoting the numbers that
/// decided (the first component of the ranking where they differ).
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
        return format!("nothing tried runs without out-of-memory on this device ({fewer})");
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
    let tie = crate::measure::COST_TIE_US / 1000.0;
    let (ws, ds) = (
        crate::measure::cost_step(wm.cost_us),
        crate::measure::cost_step(dm.cost_us),
    );
    if ws < ds {
        return format!(
            "same OOMs and retries as the default, and an estimated {} of device calls instead \
             of {} ({} less, more than the {tie} ms tie)",
            ms(wm.cost_us),
            ms(dm.cost_us),
            ms(dm.cost_us - wm.cost_us)
        );
    }
    if wm.peak_reserved < dm.peak_reserved {
        return format!(
            "same OOMs and retries as the default, device-call time a tie ({} vs {}, within \
             {tie} ms), and {} less reserved at peak ({} instead of {})",
            ms(wm.cost_us),
            ms(dm.cost_us),
            format_size(dm.peak_reserved - wm.peak_reserved),
            format_size(wm.peak_reserved),
            format_size(dm.peak_reserved)
        );
    }
    format!(
        "same OOMs, retries and peak reserved as the default ({}), and an estimated {} of \
         device calls instead of {}",
        format_size(wm.peak_reserved),
        ms(wm.cost_us),
        ms(dm.cost_us)
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
pub fn tune_text(r: &TuneResult, src: &Source) -> String {
    let mut out = String::new();
    src.heading(&mut out, Some(r.capacity));
    let _ = writeln!(
        out,
        "{} ({} configurations tried)\n",
        ranking_rule(),
        r.searched
    );
    let mut header = vec!["rank"];
    header.extend_from_slice(&METRIC_HEADER);
    if src.parts.len() > 1 {
        header.push("worst trace");
    }
    header.push("config");
    let row_of = |rank: String, e: &Evaluated, note: &str| {
        let mut row = vec![rank];
        row.extend(number_cells(&e.metrics));
        row.extend(src.part(&e.metrics));
        row.push(format!("{}{note}", e.candidate.display_name()));
        row
    };
    let mut rows = Vec::new();
    for (i, e) in r.ranking.iter().enumerate() {
        rows.push(row_of((i + 1).to_string(), e, ""));
    }
    let mut refs = vec![(&r.default, "")];
    for a in &r.advice {
        refs.push((a, "  <- common advice"));
    }
    if let Some(own) = &r.own {
        refs.push((own, "  <- yours"));
    }
    let mut shown: Vec<&str> = Vec::new();
    for (e, note) in refs {
        let label = e.candidate.label.as_str();
        if r.rank_of(label).is_none() && !shown.contains(&label) {
            shown.push(label);
            rows.push(row_of("-".to_string(), e, note));
        }
    }
    out.push_str(&table(&header, &rows));
    let w = r.winner();
    match r.fit {
        Fit::Fits => {
            let _ = writeln!(out, "\nrecommended for this trace on this device:");
            let _ = writeln!(out, "  {}", paste_line(&w.candidate.label));
        }
        Fit::Needs(c) => {
            let _ = writeln!(
                out,
                "\nNOTHING FITS: no configuration tried runs without out-of-memory on this \
                 device. The best of them needs {} ({} more than this device: its smallest \
                 device without out-of-memory):",
                capacity(c),
                format_size(c.saturating_sub(r.capacity))
            );
            let _ = writeln!(
                out,
                "  {}   # still fails here",
                paste_line(&w.candidate.label)
            );
        }
        Fit::Never => {
            let _ = writeln!(
                out,
                "\nNOTHING FITS: no configuration tried runs without out-of-memory on this \
                 device, and the best of them does not fit on a much larger one either; the \
                 fewest out-of-memory errors with:"
            );
            let _ = writeln!(
                out,
                "  {}   # still fails here",
                paste_line(&w.candidate.label)
            );
        }
    }
    let _ = writeln!(out, "why: {}", r.reason());
    for a in &r.advice {
        let _ = writeln!(out, "{}", placement("common advice", a, r));
    }
    if let Some(own) = &r.own {
        let _ = writeln!(out, "{}", placement("your configuration", own, r));
    }
    out
}

/// Where a configuration lands in a search, with its numbers.
fn placement(what: &str, e: &Evaluated, r: &TuneResult) -> String {
    let place = r
        .rank_of(&e.candidate.label)
        .map(|i| format!("rank {i}"))
        .unwrap_or_else(|| format!("not in the best {}", r.ranking.len()));
    format!(
        "{what} {}: {place}; {} OOMs, {} retries, {}, {} reserved at peak",
        e.candidate.display_name(),
        e.metrics.ooms,
        e.metrics.retries,
        ms(e.metrics.cost_us),
        format_size(e.metrics.peak_reserved)
    )
}

fn min_cap_cell(c: Option<u64>) -> String {
    c.map(capacity).unwrap_or_else(|| "does not fit".into())
}

/// `tune --min-capacity`'s report.
pub fn min_capacity_text(r: &MinCapacityResult, src: &Source) -> String {
    let mut out = String::new();
    src.heading(&mut out, None);
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
            let _ = writeln!(
                out,
                "this is 64 MiB-tight: memory for PyTorch's allocator only, with nothing to \
                 spare. Keep headroom beyond it for what the allocator does not see (CUDA \
                 context, cuBLAS/cuDNN workspaces, NCCL buffers: often 0.5-2 GiB), e.g. a GPU \
                 with at least {} usable",
                capacity(c + (1 << 30))
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
pub fn compare_text(r: &CompareResult, src: &Source) -> String {
    let mut out = String::new();
    src.heading(&mut out, Some(r.capacity));
    let _ = writeln!(
        out,
        "OOMs, retries, device calls and time at this capacity\n"
    );
    let mut header = vec!["min capacity"];
    header.extend_from_slice(&METRIC_HEADER);
    if src.parts.len() > 1 {
        header.push("worst trace");
    }
    header.push("config");
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            let min = if r.min_capacity_computed {
                min_cap_cell(row.min_capacity)
            } else {
                "-".to_string()
            };
            let mut cells = vec![min];
            cells.extend(number_cells(&row.metrics));
            cells.extend(src.part(&row.metrics));
            let mark = if r.own.as_ref() == Some(&row.candidate.label) {
                "  <- yours"
            } else {
                ""
            };
            cells.push(format!("{}{mark}", row.candidate.display_name()));
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
        "worst_part": m.part,
    })
}

fn evaluated_json(e: &Evaluated) -> Value {
    json!({"PYTORCH_CUDA_ALLOC_CONF": e.candidate.label, "result": metrics_json(&e.metrics)})
}

/// `tune --json`.
pub fn tune_json(r: &TuneResult) -> Value {
    let (fits, needs) = match r.fit {
        Fit::Fits => (true, None),
        Fit::Needs(c) => (false, Some(c)),
        Fit::Never => (false, None),
    };
    json!({
        "capacity": r.capacity,
        "fits": fits,
        "best_needs_capacity": needs,
        "shortfall_bytes": r.fit.shortfall(r.capacity),
        "recommended": if fits { Some(r.winner().candidate.label.clone()) } else { None },
        "best": r.winner().candidate.label,
        "reason": r.reason(),
        "cost_tie_us": crate::measure::COST_TIE_US,
        "own": r.own.as_ref().map(|e| json!({
            "PYTORCH_CUDA_ALLOC_CONF": e.candidate.label,
            "rank": r.rank_of(&e.candidate.label),
            "result": metrics_json(&e.metrics),
        })),
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
        "own": r.own,
        "rows": r.rows.iter().map(|row| json!({
            "PYTORCH_CUDA_ALLOC_CONF": row.candidate.label,
            "min_capacity": row.min_capacity,
            "fits": row.metrics.ooms == 0,
            "result": metrics_json(&row.metrics),
        })).collect::<Vec<_>>(),
    })
}
