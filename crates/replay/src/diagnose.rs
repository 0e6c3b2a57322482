//! Explaining an out-of-memory of a replay, and finding which documented option would have
//! avoided it on this trace, by replaying with each candidate.
//!
//! [`diagnose`] replays up to the first out-of-memory, reads the allocator's segments there
//! ([`cachalot_torchfmt::explain_oom`]), then replays the trace under each candidate
//! configuration (the replay's own, plus one option) and reports which of them run the whole
//! trace without an out-of-memory. Candidates: `expandable_segments:True`,
//! `max_split_size_mb` at 64, 128, 256 and 512, `roundup_power2_divisions:4`, and, when the
//! configuration sets a memory fraction below 1 (without one, torch's garbage collector never
//! runs), `garbage_collection_threshold:0.6`.

use std::fmt;

use cachalot_core::config::parse_pytorch;
use cachalot_core::{AllocConf, format_size};
use cachalot_torchfmt::{OomExplanation, OomRequest, Segment, explain_oom};

use crate::engine::{ReplayError, ReplayOptions, replay};
use crate::load::LoadedTrace;

/// What one candidate configuration did on the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateOutcome {
    /// The option added to the configuration, e.g. `expandable_segments:True`.
    pub option: String,
    /// The first out-of-memory's trace line, or `None` if the whole trace ran.
    pub first_oom_line: Option<u64>,
    /// Peak reserved bytes over what was replayed.
    pub peak_reserved: u64,
}

impl CandidateOutcome {
    /// Whether the candidate ran the whole trace without out-of-memory.
    pub fn avoids_oom(&self) -> bool {
        self.first_oom_line.is_none()
    }
}

/// The reading of a replay's first out-of-memory, and the candidates tried.
#[derive(Clone, Debug)]
pub struct Diagnosis {
    /// The trace line of the first out-of-memory.
    pub line: u64,
    /// torch's message for it.
    pub message: String,
    /// The numbers.
    pub explanation: OomExplanation,
    /// Each candidate, in the order tried.
    pub candidates: Vec<CandidateOutcome>,
}

/// The candidate to recommend: among those that avoid the out-of-memory, the one with the
/// lowest peak reserved memory (the first of equals).
pub fn best(candidates: &[CandidateOutcome]) -> Option<&CandidateOutcome> {
    candidates
        .iter()
        .filter(|c| c.avoids_oom())
        .min_by_key(|c| c.peak_reserved)
}

/// The candidate options for configuration `base`, each as a string to append to it.
pub fn candidate_options(base: &AllocConf) -> Vec<String> {
    let mut v = Vec::new();
    if !base.expandable_segments {
        v.push("expandable_segments:True".to_string());
    }
    for mb in [64u64, 128, 256, 512] {
        if base.max_split_size != mb << 20 {
            v.push(format!("max_split_size_mb:{mb}"));
        }
    }
    if base.roundup_power2_divisions.iter().all(|&d| d <= 1) {
        v.push("roundup_power2_divisions:4".to_string());
    }
    if base.per_process_memory_fraction < 1.0 && base.garbage_collection_threshold == 0.0 {
        v.push("garbage_collection_threshold:0.6".to_string());
    }
    v
}

/// `base` with `option` added (a later key wins, as in torch's parser); cachalot's own
/// options are kept.
pub fn with_option(base: &AllocConf, option: &str) -> Result<AllocConf, String> {
    let s = if base.last_allocator_settings.trim().is_empty() {
        option.to_string()
    } else {
        format!("{},{option}", base.last_allocator_settings)
    };
    let (mut conf, _) = parse_pytorch(&s).map_err(|e| format!("'{s}': {e}"))?;
    conf.cachalot = base.cachalot.clone();
    Ok(conf)
}

/// Replays `trace` under `opts` and each candidate; see the module docs.
pub fn try_candidates(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
) -> Result<Vec<CandidateOutcome>, ReplayError> {
    let mut out = Vec::new();
    for option in candidate_options(&opts.conf) {
        let Ok(conf) = with_option(&opts.conf, &option) else {
            continue;
        };
        let r = replay(
            trace,
            &ReplayOptions {
                conf,
                log_segments: false,
                stop_at_first_oom: true,
                max_oom_reports: 1,
                history_entries: None,
                snapshot_at_end: false,
                ..opts.clone()
            },
        )?;
        out.push(CandidateOutcome {
            option,
            first_oom_line: r.ooms.events.first().map(|o| o.line),
            peak_reserved: r.stats.reserved_bytes.all().peak as u64,
        });
    }
    Ok(out)
}

/// Explains the first out-of-memory of `trace` under `opts` and tries the candidates;
/// `None` when the replay has no out-of-memory.
pub fn diagnose(
    trace: &LoadedTrace,
    opts: &ReplayOptions,
) -> Result<Option<Diagnosis>, ReplayError> {
    let at_oom = replay(
        trace,
        &ReplayOptions {
            log_segments: false,
            stop_at_first_oom: true,
            max_oom_reports: 1,
            snapshot_at_end: true,
            ..opts.clone()
        },
    )?;
    let (Some(oom), Some(snap)) = (at_oom.ooms.events.first(), at_oom.snapshot.as_ref()) else {
        return Ok(None);
    };
    let Some(r) = &oom.report else {
        return Ok(None);
    };
    let segments: Vec<Segment> = snap
        .segments
        .iter()
        .map(|s| Segment::from_info(s, r.device))
        .collect();
    let request = OomRequest {
        device: r.device,
        rounded: r.rounded,
        stream: r.stream.0,
        device_free: r.device_free,
    };
    Ok(Some(Diagnosis {
        line: oom.line,
        message: r.to_string(),
        explanation: explain_oom(&segments, request, &opts.conf),
        candidates: try_candidates(trace, opts)?,
    }))
}

/// Writes the candidates' outcomes for people.
pub fn write_candidates(f: &mut impl fmt::Write, candidates: &[CandidateOutcome]) -> fmt::Result {
    writeln!(
        f,
        "  what would have avoided it (each option replayed on this trace):"
    )?;
    if candidates.is_empty() {
        writeln!(f, "    no candidate option to try")?;
    }
    for c in candidates {
        match c.first_oom_line {
            None => writeln!(
                f,
                "    {:<36} avoids it: no out-of-memory, peak reserved {}",
                c.option,
                format_size(c.peak_reserved)
            )?,
            Some(line) => writeln!(
                f,
                "    {:<36} still out of memory (first at trace line {line})",
                c.option
            )?,
        }
    }
    match best(candidates) {
        Some(b) => writeln!(
            f,
            "  suggestion: add {} to PYTORCH_CUDA_ALLOC_CONF (peak reserved {} on this trace)",
            b.option,
            format_size(b.peak_reserved)
        ),
        None => writeln!(
            f,
            "  suggestion: none of these options avoids it on this device; the trace needs more \
             memory, or changes beyond the allocator configuration"
        ),
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "first out-of-memory at trace line {}:", self.line)?;
        writeln!(f, "  torch says: {}", self.message)?;
        write!(f, "{}", self.explanation)?;
        write_candidates(f, &self.candidates)
    }
}
