//! Explaining an out-of-memory of a replay, and finding which documented option would have
//! avoided it on this trace, by replaying with each candidate.
//!
//! [`diagnose`] replays up to the first out-of-memory, reads the allocator's segments there
//! ([`cachalot_torchfmt::explain_oom`]), then replays the trace under each candidate
//! configuration (the replay's own, plus one option) and reports which of them run the whole
//! trace without an out-of-memory. Candidates: `expandable_segments:True`,
//! `max_split_size_mb` at 64, 128, 256 and 512, `roundup_power2_divisions:4`, and, when the
//! configuration sets a memory fraction below 1 (without one, torch's garbage collector never
//! runs), `garbage_collection_threshold:0.6`. For an older torch release (`AllocConf::torch`)
//! the candidates keep to what it accepts and what cachalot replays of its decisions, and the
//! replays make them.

use std::fmt;

use cachalot_core::config::{ConfigError, parse_pytorch};
use cachalot_core::{AllocConf, TraceAction, format_size};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{
    EventOptions, FailedRequest, OomExplanation, OomRequest, Segment, Snapshot, capacity_at_oom,
    explain_oom, replay_events_with,
};

use crate::input::trace_from_events;

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
    /// What that line is for people, where "trace line" means nothing (a snapshot's history
    /// entry); `None`: "trace line N".
    pub line_name: Option<String>,
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
    // What base's release rejects, or decides otherwise than the replay, is no advice for it.
    let unfaithful = |line: &str| {
        base.torch
            .check(line)
            .iter()
            .filter(|n| !n.is_replayed())
            .count()
    };
    let before = unfaithful(&base.last_allocator_settings);
    v.retain(|o| unfaithful(&line_with(base, o)) <= before);
    v
}

/// `base`'s line with `option` added.
fn line_with(base: &AllocConf, option: &str) -> String {
    if base.last_allocator_settings.trim().is_empty() {
        option.to_string()
    } else {
        format!("{},{option}", base.last_allocator_settings)
    }
}

/// `base` with `option` added (a later key wins, as in torch's parser); cachalot's own
/// options and the torch release whose decisions `base` makes are kept.
pub fn with_option(base: &AllocConf, option: &str) -> Result<AllocConf, ConfigError> {
    let (mut conf, _) = parse_pytorch(&line_with(base, option))?;
    conf.cachalot = base.cachalot.clone();
    Ok(conf.for_torch(base.torch))
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
        pool: Some(r.pool),
    };
    Ok(Some(Diagnosis {
        line: oom.line,
        line_name: None,
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
        match &self.line_name {
            Some(name) => writeln!(f, "first out-of-memory at {name}:")?,
            None => writeln!(f, "first out-of-memory at trace line {}:", self.line)?,
        }
        writeln!(f, "  torch says: {}", self.message)?;
        write!(f, "{}", self.explanation)?;
        write_candidates(f, &self.candidates)
    }
}

/// Where the configuration of a snapshot's explanation comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfSource {
    /// The snapshot's `allocator_settings`.
    Snapshot(String),
    /// The snapshot's settings do not parse; the default is used.
    Unparsable {
        /// The recorded string.
        conf: String,
        /// Why it does not parse.
        error: String,
    },
    /// The snapshot has no `allocator_settings`; the default is used.
    Missing,
}

impl fmt::Display for ConfSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfSource::Snapshot(c) => write!(f, "'{c}'"),
            ConfSource::Unparsable { conf, error } => {
                write!(
                    f,
                    "default (the snapshot's '{conf}' does not parse: {error})"
                )
            }
            ConfSource::Missing => write!(f, "default (the snapshot has no allocator_settings)"),
        }
    }
}

/// The configuration a snapshot recorded, or the default with the reason.
pub fn snapshot_conf(snap: &Snapshot) -> (AllocConf, ConfSource) {
    match &snap.allocator_settings {
        Some(s) => match parse_pytorch(&s.alloc_conf) {
            Ok((c, _)) => (c, ConfSource::Snapshot(s.alloc_conf.clone())),
            Err(e) => (
                AllocConf::default(),
                ConfSource::Unparsable {
                    conf: s.alloc_conf.clone(),
                    error: e.to_string(),
                },
            ),
        },
        None => (AllocConf::default(), ConfSource::Missing),
    }
}

/// Which segments an explanation of a snapshot's out-of-memory reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentsAt {
    /// The snapshot was taken at the out-of-memory: its own segments.
    Snapshot,
    /// Taken `after` entries later; rebuilt by replaying the history up to the failure (the
    /// replay fails there too).
    Rebuilt {
        /// History entries after the out-of-memory.
        after: usize,
    },
    /// Taken `after` entries later and not rebuilt: the snapshot's segments, which are not
    /// those at the failure (no verdict is drawn from them).
    Later {
        /// History entries after the out-of-memory.
        after: usize,
    },
}

/// The whole history replayed at the capacity of the failure.
#[derive(Clone, Debug)]
pub struct HistoryReplay {
    /// Events replayed.
    pub events: usize,
    /// Out-of-memory errors of the replay.
    pub ooms: u64,
    /// Allocations reconstructed before a ring-buffer window.
    pub reconstructed: u64,
    /// Each candidate option.
    pub candidates: Vec<CandidateOutcome>,
}

/// Why the out-of-memory recorded in a snapshot happened ([`explain_snapshot`]).
#[derive(Clone, Debug)]
pub struct SnapshotDiagnosis {
    /// The device explained.
    pub device: u32,
    /// `oom` entries in its history.
    pub ooms: usize,
    /// Every device with `oom` entries, and how many.
    pub devices_with_ooms: Vec<(u32, usize)>,
    /// The configuration used, and where it comes from.
    pub conf: AllocConf,
    /// Where it comes from.
    pub conf_source: ConfSource,
    /// The capacity of the replays.
    pub capacity: u64,
    /// Whether it was estimated from the snapshot (else given).
    pub capacity_estimated: bool,
    /// Which segments the explanation reads.
    pub segments_at: SegmentsAt,
    /// The reading of the last out-of-memory.
    pub explanation: OomExplanation,
    /// The history replayed with each candidate (unless asked not to).
    pub replay: Option<HistoryReplay>,
}

/// Why a snapshot's out-of-memory cannot be explained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// The device's history has no `oom` entry.
    #[error(
        "device {device}'s history has no `oom` entry ({entries} entries); explain needs a \
         snapshot taken at an out-of-memory, with history recorded \
         (torch.cuda.memory._record_memory_history()){}",
        others(.devices_with_ooms)
    )]
    NoOom {
        /// The device.
        device: u32,
        /// Its history entries.
        entries: usize,
        /// Devices that do have `oom` entries.
        devices_with_ooms: Vec<u32>,
    },
    /// The snapshot could not be turned into events.
    #[error(transparent)]
    Snapshot(#[from] cachalot_torchfmt::SnapshotError),
    /// A replay failed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
}

fn others(devices: &[u32]) -> String {
    if devices.is_empty() {
        return String::new();
    }
    let list: Vec<String> = devices.iter().map(u32::to_string).collect();
    format!(
        "; devices with out-of-memory entries: {} (--device N)",
        list.join(", ")
    )
}

/// Every device of `snap` with `oom` entries, and how many.
pub fn devices_with_ooms(snap: &Snapshot) -> Vec<(u32, usize)> {
    snap.device_traces
        .iter()
        .enumerate()
        .map(|(d, t)| {
            let n = t
                .entries
                .iter()
                .filter(|e| e.action == TraceAction::Oom)
                .count();
            (d as u32, n)
        })
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Explains the last out-of-memory of device `device` in `snap`: the segments at the failure
/// (the snapshot's own, or rebuilt by replaying the history up to it), read by
/// [`explain_oom`]; then, when `replay_history`, the whole workload replayed at the capacity
/// of the failure (`capacity`, else estimated from the snapshot) under each candidate option.
pub fn explain_snapshot(
    snap: &Snapshot,
    device: u32,
    capacity: Option<u64>,
    replay_history: bool,
) -> Result<SnapshotDiagnosis, ExplainError> {
    let entries = snap
        .device_traces
        .get(device as usize)
        .map_or(&[][..], |t| &t.entries[..]);
    let with_ooms = devices_with_ooms(snap);
    let ooms: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].action == TraceAction::Oom)
        .collect();
    let Some(&at) = ooms.last() else {
        return Err(ExplainError::NoOom {
            device,
            entries: entries.len(),
            devices_with_ooms: with_ooms.iter().map(|&(d, _)| d).collect(),
        });
    };
    let oom = entries[at];
    let (conf, conf_source) = snapshot_conf(snap);
    let after = entries.len() - at - 1;
    let estimated = capacity_at_oom(snap, device, at).unwrap_or(u64::MAX);
    let cap = capacity.unwrap_or(estimated);
    let opts = ReplayOptions {
        conf: conf.clone(),
        sim: SimConfig::with_capacity(cap),
        max_oom_reports: 1,
        device_index: device,
        ..ReplayOptions::default()
    };
    let request = OomRequest {
        device,
        rounded: oom.size,
        stream: oom.stream,
        device_free: oom.addr,
        pool: oom.pool,
    };
    let mut segments_at = if after == 0 {
        SegmentsAt::Snapshot
    } else {
        SegmentsAt::Later { after }
    };
    let mut rebuilt = None;
    if after > 0 && replay_history {
        rebuilt = rebuild_at(snap, device, at, ooms.len() as u64, &opts)?;
        if rebuilt.is_some() {
            segments_at = SegmentsAt::Rebuilt { after };
        }
    }
    let mut explanation = match &rebuilt {
        Some(segs) => explain_oom(segs, request, &conf),
        None => explain_oom(snap.device_segments(device), request, &conf),
    };
    explanation.at_failure = !matches!(segments_at, SegmentsAt::Later { .. });
    let replay = if replay_history {
        let events = replay_events_with(snap, device, &EventOptions::WORKLOAD)?;
        let trace = trace_from_events(&events);
        let base = replay(&trace, &opts)?;
        Some(HistoryReplay {
            events: events.events.len(),
            ooms: base.ooms.count,
            reconstructed: events.reconstructed,
            candidates: try_candidates(&trace, &opts)?,
        })
    } else {
        None
    };
    Ok(SnapshotDiagnosis {
        device,
        ooms: ooms.len(),
        devices_with_ooms: with_ooms,
        conf,
        conf_source,
        capacity: cap,
        capacity_estimated: capacity.is_none(),
        segments_at,
        explanation,
        replay,
    })
}

/// The segments at history entry `at` (the `n`-th failure), rebuilt by replaying the
/// workload up to it, when the replay fails there as torch did.
fn rebuild_at(
    snap: &Snapshot,
    device: u32,
    at: usize,
    n: u64,
    opts: &ReplayOptions,
) -> Result<Option<Vec<Segment>>, ExplainError> {
    let prefix = replay_events_with(
        snap,
        device,
        &EventOptions {
            until: Some(at + 1),
            ..EventOptions::WORKLOAD
        },
    )?;
    let r = replay(
        &trace_from_events(&prefix),
        &ReplayOptions {
            snapshot_at_end: true,
            ..opts.clone()
        },
    )?;
    let last_failed = r.ooms.count == n
        && prefix
            .events
            .last()
            .is_some_and(|e| FailedRequest::from_addr(e.addr) == Some(FailedRequest::nth(n)));
    let (true, Some(state)) = (last_failed, r.snapshot) else {
        return Ok(None);
    };
    Ok(Some(
        state
            .segments
            .iter()
            .map(|s| {
                let mut seg = Segment::from_info(s, device);
                seg.stream = prefix
                    .streams
                    .get(s.stream.0 as usize)
                    .copied()
                    .unwrap_or(0);
                seg
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(line: &str, torch: &str) -> AllocConf {
        parse_pytorch(line)
            .unwrap()
            .0
            .for_torch(torch.parse().unwrap())
    }

    #[test]
    fn an_older_release_is_advised_only_what_it_accepts_and_is_replayed() {
        // torch 2.4 stops the program where expandable segments meet max_split_size_mb
        let splits = |c: &AllocConf| {
            candidate_options(c)
                .iter()
                .filter(|o| o.starts_with("max_split_size_mb"))
                .count()
        };
        assert_eq!(splits(&conf("expandable_segments:True", "2.15")), 4);
        assert_eq!(splits(&conf("expandable_segments:True", "2.5")), 4);
        assert_eq!(splits(&conf("expandable_segments:True", "2.4")), 0);
        // and the candidates replay with the release's decisions
        let c = conf("", "2.9");
        let with = with_option(&c, "max_split_size_mb:64").unwrap();
        assert_eq!(with.torch, c.torch);
    }
}
