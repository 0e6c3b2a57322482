//! A self-contained HTML report: the ranking table and, per configuration, inline SVG charts
//! of allocated and reserved memory over the trace, the number of device allocations held,
//! and where retries and out-of-memory errors fall. No scripts, no external resources; the
//! markup is well-formed XML so it can be checked with an XML parser.

use std::fmt::Write as _;

use cachalot_core::format_size;

use crate::compare::CompareResult;
use crate::search::TuneResult;
use crate::text::{capacity, ms, paste_line};
use crate::timeline::Timeline;

const W: f64 = 900.0;
const H: f64 = 240.0;
const SEG_H: f64 = 110.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 34.0;
/// Marks closer than this many pixels to the previous one are merged into it.
const MARK_GAP: f64 = 3.0;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// What goes on a page.
pub struct Page<'a> {
    /// The heading.
    pub title: String,
    /// Paragraphs under the heading (plain text).
    pub summary: Vec<String>,
    /// The configuration to paste, if there is a recommendation.
    pub recommended: Option<String>,
    /// Whether nothing fits: the summary is shown as a warning, the first row not as a
    /// recommendation.
    pub failing: bool,
    /// The table's column names.
    pub header: Vec<String>,
    /// The table's rows: (configuration, cells). The configuration is the row's
    /// `data-config`.
    pub rows: Vec<(String, Vec<String>)>,
    /// Device capacity, drawn as a line when it is within the chart.
    pub capacity: u64,
    /// The timelines, one section each.
    pub timelines: &'a [Timeline],
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:960px}\
h1{font-size:20px}h2{font-size:15px;margin:18px 0 4px;font-family:ui-monospace,monospace}\
table{border-collapse:collapse;font-size:13px}th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}\
td:last-child,th:last-child{text-align:left;font-family:ui-monospace,monospace;white-space:nowrap}\
.scroll{overflow-x:auto}\
tr.best td{background:#eef7ee;font-weight:600}code{background:#f3f3f3;padding:2px 5px;display:inline-block;line-height:1.6;white-space:nowrap;max-width:100%;overflow-x:auto}\
.rec{font-size:15px;margin:12px 0}.legend span{margin-right:14px;font-size:12px}\
.sw{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px}\
svg{display:block;margin:2px 0}svg text{font-size:11px;fill:#555}\
.series{fill:none;stroke-width:1.4}.allocated{stroke:#1f77b4}.reserved{stroke:#ff7f0e}.held{stroke:#2ca02c}\
.capacity{stroke:#d62728;stroke-dasharray:5 4}.grid{stroke:#eee}.axis{stroke:#999}\
.retry{stroke:#9467bd;stroke-width:1;stroke-dasharray:2 3;opacity:.8}.oom{stroke:#d62728;stroke-width:1.8}.note{font-size:12px;color:#666}\
.fail{background:#fdecea;border-left:4px solid #d62728;padding:8px 12px;font-weight:600}";

/// Renders a page.
pub fn render(p: &Page) -> String {
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    let _ = writeln!(o, "<title>{}</title>", esc(&p.title));
    let _ = writeln!(o, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(o, "<h1>{}</h1>", esc(&p.title));
    if let Some(r) = &p.recommended {
        let _ = writeln!(
            o,
            "<p class=\"rec\">Recommended: <code id=\"recommended\">{}</code></p>",
            esc(&paste_line(r))
        );
    }
    for (i, s) in p.summary.iter().enumerate() {
        if i == 0 && p.failing {
            let _ = writeln!(o, "<p class=\"fail\" id=\"nothing-fits\">{}</p>", esc(s));
        } else {
            let _ = writeln!(o, "<p>{}</p>", esc(s));
        }
    }
    o.push_str("<div class=\"scroll\"><table class=\"ranking\">\n<thead><tr>");
    for h in &p.header {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for (i, (conf, cells)) in p.rows.iter().enumerate() {
        let class = if i == 0 && p.recommended.is_some() {
            "row best"
        } else {
            "row"
        };
        let _ = write!(o, "<tr class=\"{class}\" data-config=\"{}\">", esc(conf));
        for c in cells {
            let _ = write!(o, "<td>{}</td>", esc(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody>\n</table></div>\n");
    o.push_str(
        "<p class=\"legend\"><span><i class=\"sw\" style=\"background:#1f77b4\"></i>allocated</span>\
         <span><i class=\"sw\" style=\"background:#ff7f0e\"></i>reserved</span>\
         <span><i class=\"sw\" style=\"background:#d62728\"></i>capacity / out-of-memory</span>\
         <span><i class=\"sw\" style=\"background:#9467bd\"></i>retry (synchronize + cache flush)</span>\
         <span><i class=\"sw\" style=\"background:#2ca02c\"></i>device allocations held</span></p>\n",
    );
    let ymax = p
        .timelines
        .iter()
        .flat_map(|t| t.points.iter().map(|pt| pt.reserved.max(pt.allocated)))
        .max()
        .unwrap_or(0)
        .max(1);
    let ymax = if p.capacity as f64 <= ymax as f64 * 1.25 {
        ymax.max(p.capacity)
    } else {
        ymax
    };
    let ymax = (ymax as f64 * 1.05) as u64;
    let smax = p
        .timelines
        .iter()
        .flat_map(|t| t.points.iter().map(|pt| pt.segments))
        .max()
        .unwrap_or(0)
        .max(1);
    for t in p.timelines {
        section(&mut o, t, ymax, smax, p.capacity);
    }
    o.push_str(
        "<p class=\"note\">Every number comes from a replay of the trace through cachalot's \
         allocator (torch 2.15's algorithm) on a simulated device. Each chart point is the \
         maximum over its stretch of operations. Device-call times are estimates from the cost \
         model (docs/advisor.md).</p>\n</body>\n</html>\n",
    );
    o
}

fn x_of(op: usize, events: usize) -> f64 {
    LEFT + (W - LEFT - RIGHT) * op as f64 / events.max(1) as f64
}

fn y_of(v: u64, max: u64, h: f64) -> f64 {
    TOP + (h - TOP - BOTTOM) * (1.0 - v as f64 / max.max(1) as f64)
}

fn path(t: &Timeline, max: u64, h: f64, f: impl Fn(&crate::TimePoint) -> u64) -> String {
    let mut d = String::new();
    for (i, pt) in t.points.iter().enumerate() {
        let x = x_of(pt.op_index, t.events);
        let y = y_of(f(pt), max, h);
        let _ = write!(d, "{}{x:.1},{y:.1}", if i == 0 { "M" } else { " L" });
    }
    if let Some(last) = t.points.last() {
        let x = x_of(t.events, t.events);
        let _ = write!(d, " L{x:.1},{:.1}", y_of(f(last), max, h));
    }
    d
}

/// A round step (1, 2 or 5 times a power of ten) giving about `n` steps up to `max`.
pub fn nice_step(max: f64, n: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Ticks of the memory axis: round numbers of MiB or GiB, with their labels.
fn memory_ticks(max: u64) -> Vec<(u64, String)> {
    let (unit, name) = if max >= 2 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    };
    let step = nice_step(max as f64 / unit, 4.0);
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| v * unit <= max as f64)
        .map(|v| ((v * unit) as u64, format!("{v:.decimals$} {name}")))
        .collect()
}

/// Ticks of a count axis: round numbers.
fn count_ticks(max: u64) -> Vec<(u64, String)> {
    let step = nice_step(max as f64, 4.0).max(1.0) as u64;
    (0..=max / step)
        .map(|i| (i * step, (i * step).to_string()))
        .collect()
}

fn axes(o: &mut String, max: u64, h: f64, events: usize, ticks: &[(u64, String)]) {
    for (v, label) in ticks {
        let y = y_of(*v, max, h);
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            esc(label)
        );
    }
    let base = h - BOTTOM;
    let _ = write!(
        o,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{base:.1}\" x2=\"{:.1}\" y2=\"{base:.1}\"/>",
        W - RIGHT
    );
    let step = nice_step(events as f64, 6.0).max(1.0) as usize;
    for i in 0..=events / step {
        let op = i * step;
        let x = x_of(op, events);
        let _ = write!(
            o,
            "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{base:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{op}</text>",
            base + 4.0,
            base + 15.0
        );
    }
    let _ = write!(
        o,
        "<text class=\"xlabel\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">event index \
         (allocations and frees, in trace order)</text>",
        (LEFT + W - RIGHT) / 2.0,
        h - 3.0
    );
}

/// The x positions of marks at `ops`, merging those closer than [`MARK_GAP`] pixels.
fn mark_positions(ops: &[usize], events: usize) -> Vec<f64> {
    let mut xs: Vec<f64> = Vec::new();
    for &op in ops {
        let x = x_of(op, events);
        if xs.last().is_none_or(|&l| x - l >= MARK_GAP) {
            xs.push(x);
        }
    }
    xs
}

fn gib(v: u64) -> String {
    format!("{:.1} GiB", v as f64 / (1u64 << 30) as f64)
}

fn section(o: &mut String, t: &Timeline, ymax: u64, smax: u64, cap: u64) {
    let label = &t.candidate.label;
    let m = &t.metrics;
    let _ = writeln!(
        o,
        "<section class=\"timeline\" data-config=\"{}\">\n<h2>{}</h2>",
        esc(label),
        esc(t.candidate.display_name())
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">peak allocated {}, peak reserved {}, {} OOMs, {} retries, {} device \
         allocations, {} frees, est. {} (marks closer than 3 px are drawn as one)</p>",
        esc(&format_size(m.peak_allocated)),
        esc(&format_size(m.peak_reserved)),
        m.ooms,
        m.retries,
        m.device_allocs,
        m.device_frees,
        esc(&ms(m.cost_us))
    );
    let _ = write!(
        o,
        "<svg class=\"chart memory\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         role=\"img\" aria-label=\"memory over the trace\">"
    );
    axes(o, ymax, H, t.events, &memory_ticks(ymax));
    if cap <= ymax {
        let y = y_of(cap, ymax, H);
        let _ = write!(
            o,
            "<line class=\"capacity\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">capacity {}</text>",
            W - RIGHT,
            W - RIGHT - 2.0,
            y - 3.0,
            esc(&gib(cap))
        );
    }
    let _ = write!(
        o,
        "<path class=\"series reserved\" d=\"{}\"/><path class=\"series allocated\" d=\"{}\"/>",
        path(t, ymax, H, |p| p.reserved),
        path(t, ymax, H, |p| p.allocated)
    );
    o.push_str("<g class=\"marks retries\">");
    for x in mark_positions(&t.retries, t.events) {
        let _ = write!(
            o,
            "<line class=\"retry\" x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>",
            H - BOTTOM
        );
    }
    o.push_str("</g><g class=\"marks ooms\">");
    for x in mark_positions(&t.ooms, t.events) {
        let y = TOP + 16.0;
        let _ = write!(
            o,
            "<path class=\"oom\" d=\"M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}\"/>",
            x - 4.0,
            y - 4.0,
            x + 4.0,
            y + 4.0,
            x - 4.0,
            y + 4.0,
            x + 4.0,
            y - 4.0
        );
    }
    o.push_str("</g></svg>\n");
    let _ = write!(
        o,
        "<svg class=\"chart held-chart\" width=\"{W}\" height=\"{SEG_H}\" viewBox=\"0 0 {W} {SEG_H}\" \
         role=\"img\" aria-label=\"device allocations held\">"
    );
    axes(o, smax, SEG_H, t.events, &count_ticks(smax));
    let _ = write!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\">device allocations held (cudaMalloc segments + mapped \
         expandable pages)</text>",
        LEFT + 4.0,
        TOP - 2.0
    );
    let _ = write!(
        o,
        "<path class=\"series held\" d=\"{}\"/></svg>\n</section>\n",
        path(t, smax, SEG_H, |p| p.segments)
    );
}

/// The page for `tune`.
pub fn tune_page(r: &TuneResult, src: &crate::text::Source, timelines: &[Timeline]) -> String {
    let trace = &src.name;
    let mut header = vec!["rank".to_string()];
    header.extend(crate::text::METRIC_HEADER.iter().map(|s| s.to_string()));
    header.push("config".into());
    let mut rows = Vec::new();
    for (i, e) in r.ranking.iter().enumerate() {
        let mut c = vec![(i + 1).to_string()];
        c.extend(crate::text::number_cells(&e.metrics));
        c.push(e.candidate.display_name().to_string());
        rows.push((e.candidate.label.clone(), c));
    }
    for e in std::iter::once(&r.default).chain(&r.advice) {
        if !rows.iter().any(|(l, _)| *l == e.candidate.label) {
            let mut c = vec!["-".to_string()];
            c.extend(crate::text::number_cells(&e.metrics));
            c.push(e.candidate.display_name().to_string());
            rows.push((e.candidate.label.clone(), c));
        }
    }
    render(&Page {
        title: format!(
            "cachalot tune: {trace} on a {} device",
            capacity(r.capacity)
        ),
        summary: {
            let mut v = Vec::new();
            match r.fit {
                crate::Fit::Fits => {}
                crate::Fit::Needs(c) => v.push(format!(
                    "Nothing fits: no configuration tried runs without out-of-memory on this \
                     device. The best of them ({}) needs {}, {} more than this device.",
                    paste_line(&r.winner().candidate.label),
                    capacity(c),
                    cachalot_core::format_size(c.saturating_sub(r.capacity))
                )),
                crate::Fit::Never => v.push(
                    "Nothing fits: no configuration tried runs without out-of-memory on this \
                     device, nor on a much larger one."
                        .to_string(),
                ),
            }
            v.push(format!("Why: {}.", r.reason()));
            v.push(format!(
                "{}; {} configurations tried.",
                crate::text::ranking_rule(),
                r.searched
            ));
            v.extend(src.capacity_note.iter().map(|n| format!("Capacity: {n}.")));
            v.extend(src.notes.iter().map(|n| format!("Note: {n}.")));
            v
        },
        recommended: (r.fit == crate::Fit::Fits).then(|| r.winner().candidate.label.clone()),
        failing: r.fit != crate::Fit::Fits,
        header,
        rows,
        capacity: r.capacity,
        timelines,
    })
}

/// The page for `compare`.
pub fn compare_page(
    r: &CompareResult,
    src: &crate::text::Source,
    timelines: &[Timeline],
) -> String {
    let trace = &src.name;
    let mut header = vec!["min capacity".to_string()];
    header.extend(crate::text::METRIC_HEADER.iter().map(|s| s.to_string()));
    header.push("config".into());
    let rows = r
        .rows
        .iter()
        .map(|row| {
            let mut c = vec![row.min_capacity.map(capacity).unwrap_or_else(|| "-".into())];
            c.extend(crate::text::number_cells(&row.metrics));
            c.push(row.candidate.display_name().to_string());
            (row.candidate.label.clone(), c)
        })
        .collect();
    render(&Page {
        title: format!(
            "cachalot compare: {trace} on a {} device",
            capacity(r.capacity)
        ),
        summary: std::iter::once(
            "Min capacity: the smallest 64 MiB multiple on which the trace runs without \
             out-of-memory (bisection; both sides of the boundary replayed)."
                .to_string(),
        )
        .chain(src.notes.iter().map(|n| format!("Note: {n}.")))
        .collect(),
        recommended: None,
        failing: false,
        header,
        rows,
        capacity: r.capacity,
        timelines,
    })
}

/// The page for `tune --min-capacity`: the search at the smallest capacity found, and the
/// minimum capacity of each configuration examined.
pub fn min_capacity_page(
    r: &crate::MinCapacityResult,
    tuned: &TuneResult,
    src: &crate::text::Source,
    timelines: &[Timeline],
) -> String {
    let mut page = tune_page(tuned, src, timelines);
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (i, m) in r.best.iter().enumerate() {
        rows.push(vec![
            (i + 1).to_string(),
            m.capacity
                .map(capacity)
                .unwrap_or_else(|| "does not fit".into()),
            m.candidate.display_name().to_string(),
        ]);
    }
    for m in &r.seeds {
        if !r
            .best
            .iter()
            .any(|b| b.candidate.label == m.candidate.label)
        {
            rows.push(vec![
                "-".into(),
                m.capacity
                    .map(capacity)
                    .unwrap_or_else(|| "does not fit".into()),
                m.candidate.display_name().to_string(),
            ]);
        }
    }
    let table = render_table(
        "Minimum capacity per configuration (64 MiB steps; keep headroom beyond it)",
        &["rank", "min capacity", "config"],
        &rows,
    );
    if let Some(at) = page.find("<p class=\"legend\">") {
        page.insert_str(at, &table);
    }
    page
}

fn render_table(title: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "<h2>{}</h2>", esc(title));
    o.push_str("<div class=\"scroll\"><table class=\"min-capacity\">\n<thead><tr>");
    for h in header {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", esc(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody>\n</table></div>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(17.3, 4.0), 5.0);
        assert_eq!(nice_step(11_940.0, 6.0), 2000.0);
        assert_eq!(nice_step(0.9, 4.0), 0.5);
        let t = memory_ticks(17 << 30);
        let labels: Vec<&str> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0 GiB", "5 GiB", "10 GiB", "15 GiB"]);
        assert_eq!(memory_ticks(600 << 20)[1].1, "200 MiB");
    }

    #[test]
    fn dense_marks_merge() {
        let ops: Vec<usize> = (0..1000).collect();
        let xs = mark_positions(&ops, 1000);
        assert!(xs.len() < 300, "{}", xs.len());
        assert!(xs.windows(2).all(|w| w[1] - w[0] >= MARK_GAP));
    }
}
