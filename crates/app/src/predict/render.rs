//! How a [`Prediction`] reads: the report for people (the verdict first, then the advice, then
//! the numbers behind them) and `capture --json` (flat keys for the deciding rank and the job,
//! `outside_torch_bytes` with its parts, `advice`, and one object per rank).

use std::fmt::Write as _;

use cachalot_core::format_size;
use serde_json::{Value, json};

use super::{Advice, Prediction, RankPrediction, Verdict};
use crate::outside::Outside;

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// `0.40-0.97 GiB`.
fn range(low: u64, high: u64) -> String {
    let g = |b: u64| b as f64 / (1u64 << 30) as f64;
    format!("{:.2}-{:.2} GiB", g(low), g(high))
}

fn signed_gib(b: i128) -> String {
    let s = gib(b.unsigned_abs().min(u128::from(u64::MAX)) as u64);
    if b < 0 { format!("-{s}") } else { s }
}

fn conf_name(conf: &str) -> String {
    if conf.is_empty() {
        "torch's default config".into()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={conf}")
    }
}

/// Signed bytes to spare in the verdict's sense (negative: short by that much).
fn margin(v: &Verdict) -> Option<i128> {
    match *v {
        Verdict::Fits { margin } => Some(i128::from(margin)),
        Verdict::Tight { margin, .. } => Some(margin),
        Verdict::DoesNotFit { missing } => missing.map(|m| -i128::from(m)),
    }
}

fn verdict_json(v: &Verdict) -> Value {
    match *v {
        Verdict::Fits { margin } => json!({"verdict": "fits", "margin_bytes": margin}),
        Verdict::Tight {
            margin,
            uncertainty,
        } => json!({
            "verdict": "tight",
            "margin_bytes": i64::try_from(margin).unwrap_or(i64::MIN),
            "uncertainty_bytes": uncertainty,
        }),
        Verdict::DoesNotFit { missing } => {
            json!({"verdict": "does not fit", "missing_bytes": missing})
        }
    }
}

fn rank_json(r: &RankPrediction) -> Value {
    let mut v = json!({
        "trace": r.trace,
        "gpu": r.gpu.key(),
        "gpu_memory": r.gpu.usable,
        "capacity": r.capacity,
        "events": r.events,
        "peak_allocated": r.peak_allocated,
        "peak_reserved": r.peak_reserved,
        "fits": matches!(r.verdict, Verdict::Fits { .. }),
        "num_ooms": r.num_ooms,
        "num_alloc_retries": r.num_alloc_retries,
        "min_capacity": r.min_capacity,
        "outside_torch_bytes": r.outside.json(),
    });
    if let (Some(m), Value::Object(extra)) = (v.as_object_mut(), verdict_json(&r.verdict)) {
        m.extend(extra);
    }
    v
}

fn advice_json(p: &Prediction) -> Value {
    let text = advice_text(p);
    match &p.advice {
        Advice::Keep => json!({"action": "keep", "conf": p.conf, "text": text}),
        Advice::Change {
            conf,
            peak_reserved,
            saves,
            makes_it_fit,
        } => json!({
            "action": "change",
            "conf": conf,
            "peak_reserved": peak_reserved,
            "saves_bytes": saves,
            "makes_it_fit": makes_it_fit,
            "text": text,
        }),
        Advice::Closest {
            conf,
            needs,
            missing,
        } => json!({
            "action": "closest",
            "conf": conf,
            "needs_bytes": needs,
            "missing_bytes": missing,
            "text": text,
        }),
    }
}

/// `capture --json`: the deciding rank's numbers at the top level (a single-process capture
/// has only that one), the job's answers, and `ranks`.
pub(super) fn json(p: &Prediction) -> Value {
    let w = p.worst();
    let mut v = rank_json(w);
    let job = json!({
        "exit_status": p.exit_status(),
        "capacity": p.ranks.iter().map(|r| r.capacity).min(),
        "conf": p.conf,
        "min_capacity": p.min_capacity,
        "tuned_conf": p.tuned_conf(),
        "tune_reason": p.tuned.reason(),
        "tuned_fits": p.tuned_fits(),
        "best_min_capacity": p.best_min.0,
        "best_min_conf": p.best_min.1,
        "smallest_gpu": p.smallest_gpu.map(|g| g.key()),
        "advice": advice_json(p),
        "ranks": p.ranks.iter().map(rank_json).collect::<Vec<_>>(),
        "warnings": p.warnings,
        "torch_stats": p.torch_stats.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
    });
    if let (Some(m), Value::Object(job)) = (v.as_object_mut(), job) {
        m.extend(job);
    }
    v
}

fn headline(p: &Prediction) -> String {
    let w = p.worst();
    let on = if p.ranks.len() > 1 {
        let i = p.ranks.iter().position(|r| std::ptr::eq(r, w)).unwrap_or(0);
        format!("{} (rank {i} decides)", w.gpu.name)
    } else {
        w.gpu.name.to_string()
    };
    let (est, low, high) = (w.outside.bytes(), w.outside.low(), w.outside.high());
    let total = gib(w.gpu.usable);
    match w.verdict {
        Verdict::Fits { margin } => format!(
            "fits on {on}: {} to spare (peak reserved {} + at most {} outside torch, of CUDA's {total})",
            gib(margin),
            gib(w.peak_reserved),
            gib(high)
        ),
        Verdict::Tight {
            margin,
            uncertainty,
        } => {
            // What may be taken outside torch before the peak no longer fits.
            let room = w.gpu.usable.saturating_sub(w.peak_reserved);
            if uncertainty == 0 {
                return format!(
                    "tight on {on}: peak reserved {} and {} outside torch exceed CUDA's {total} by {}; \
                     it runs only by freeing cached memory ({} allocator retries)",
                    gib(w.peak_reserved),
                    gib(est),
                    signed_gib(-margin),
                    w.num_alloc_retries
                );
            }
            let how = if margin >= 0 {
                format!("{} to spare with the estimate", signed_gib(margin))
            } else {
                format!("{} short with the estimate", signed_gib(-margin))
            };
            format!(
                "tight on {on}: {how}, and the memory outside torch is uncertain by {} \
                 ({}, {}); it fits only if that stays under {} (peak reserved {} of CUDA's {total})",
                gib(uncertainty),
                gib(est),
                range(low, high),
                gib(room),
                gib(w.peak_reserved)
            )
        }
        Verdict::DoesNotFit { missing } => format!(
            "does not fit on {on}: out of memory ({} failed allocations) with {} outside torch; {}",
            w.num_ooms,
            gib(est),
            match missing {
                Some(m) => format!("{} missing as configured", gib(m)),
                None => "no device tried is large enough as configured".into(),
            }
        ),
    }
}

fn advice_text(p: &Prediction) -> String {
    let mine = conf_name(&p.conf);
    match (&p.advice, p.verdict()) {
        (Advice::Keep, Verdict::Fits { margin }) => format!(
            "keep {mine}: it fits with {} to spare, and no configuration tried saves a material \
             amount (5 % of peak reserved and at least 256 MiB)",
            gib(margin)
        ),
        (Advice::Keep, _) => format!(
            "keep {mine}: no configuration tried reserves materially less; for certainty leave \
             more room (a smaller batch) or a larger GPU{}",
            p.smallest_gpu
                .map_or(String::new(), |g| format!(" ({} fits)", g.key()))
        ),
        (
            Advice::Change {
                conf,
                peak_reserved,
                saves,
                makes_it_fit,
            },
            _,
        ) => format!(
            "set PYTORCH_CUDA_ALLOC_CONF={conf}: peak reserved {} ({} less than {mine}){}",
            gib(*peak_reserved),
            gib(*saves),
            if *makes_it_fit {
                ", which fits"
            } else {
                ", a material gain"
            }
        ),
        (
            Advice::Closest {
                conf,
                needs,
                missing,
            },
            _,
        ) => {
            let what = match (needs, missing) {
                (Some(n), Some(m)) => format!(
                    "{} missing: the configuration that needs least memory, {}, needs {} on this GPU with the outside estimate",
                    gib(*m),
                    conf_name(conf),
                    gib(*n)
                ),
                _ => "no configuration tried fits on any device tried".into(),
            };
            format!(
                "nothing fits: {what}; {}",
                match p.smallest_gpu {
                    Some(g) => format!("the smallest GPU it fits is {}", g.key()),
                    None => "no GPU in the table is large enough".into(),
                }
            )
        }
    }
}

fn outside_lines(out: &mut String, o: &Outside) {
    let _ = writeln!(
        out,
        "outside torch       {} ({}), beside the allocator:",
        gib(o.bytes()),
        range(o.low(), o.high())
    );
    for part in &o.parts {
        let _ = writeln!(
            out,
            "  {:<34} {:>11} ({}-{})  {}",
            part.name,
            format_size(part.bytes),
            format_size(part.low),
            format_size(part.high),
            part.source
        );
    }
}

/// The report for people.
pub(super) fn text(p: &Prediction) -> String {
    let w = p.worst();
    let mut out = String::new();
    let _ = writeln!(out, "{}", headline(p));
    let _ = writeln!(out, "advice: {}", advice_text(p));
    let _ = writeln!(out);
    let _ = writeln!(out, "peak allocated      {}", gib(w.peak_allocated));
    let _ = writeln!(
        out,
        "peak reserved       {}   ({})",
        gib(w.peak_reserved),
        conf_name(&p.conf)
    );
    outside_lines(&mut out, &w.outside);
    let _ = writeln!(
        out,
        "at the GPU          {} for the allocator (CUDA's {} less the estimate): {}{}",
        gib(w.capacity),
        gib(w.gpu.usable),
        if w.num_ooms == 0 {
            "no out-of-memory".to_string()
        } else {
            format!("{} failed allocations", w.num_ooms)
        },
        if w.num_alloc_retries > 0 {
            format!(", {} allocator retries", w.num_alloc_retries)
        } else {
            String::new()
        }
    );
    let need = |c: Option<u64>| c.map_or("more than any device tried".to_string(), gib);
    if p.best_min.1 == p.conf {
        let _ = writeln!(
            out,
            "needs at least      {} for the allocator (as configured; no config tried needs less)",
            need(p.min_capacity)
        );
    } else {
        let _ = writeln!(
            out,
            "needs at least      {} for the allocator as configured, {} with {}",
            need(p.min_capacity),
            need(p.best_min.0),
            if p.best_min.1.is_empty() {
                "the default config"
            } else {
                &p.best_min.1
            }
        );
    }
    let tuned = if p.tuned_conf().is_empty() {
        "(torch's default)"
    } else {
        p.tuned_conf()
    };
    if p.tuned_fits() {
        let _ = writeln!(
            out,
            "tune's ranking      {tuned} first at {}   [{}]",
            gib(p.tuned.capacity),
            p.tuned.reason()
        );
    } else {
        // Its first is then only the least bad by out-of-memory count: not advice.
        let _ = writeln!(
            out,
            "tune's ranking      nothing tried runs without out-of-memory at {}",
            gib(p.tuned.capacity)
        );
    }
    let _ = writeln!(
        out,
        "smallest GPU        {}",
        match p.smallest_gpu {
            Some(g) => format!(
                "{} (captured as {}; kernels differ by GPU: capture with --gpu to check it)",
                g.key(),
                w.gpu.key()
            ),
            None => "none in the table".into(),
        }
    );
    if p.ranks.len() > 1 {
        for (i, r) in p.ranks.iter().enumerate() {
            let m = margin(&r.verdict)
                .map_or(String::new(), |m| format!(", {} to spare", signed_gib(m)));
            let _ = writeln!(
                out,
                "rank {i:<14} {}{m}: peak reserved {}, {} outside torch ({})",
                r.verdict.word(),
                gib(r.peak_reserved),
                gib(r.outside.bytes()),
                r.trace
            );
        }
    }
    let _ = writeln!(
        out,
        "trace               {} ({} allocation events; `cachalot tune {} --capacity 24G` for another GPU)",
        w.trace, w.events, w.trace
    );
    for warning in &p.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out.pop();
    out
}
