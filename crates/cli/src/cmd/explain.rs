//! `cachalot explain SNAPSHOT`: why the out-of-memory recorded in a torch snapshot happened,
//! in numbers, and which option would have avoided it (replayed on the snapshot's history).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use cachalot_core::config::parse_pytorch;
use cachalot_core::{AllocConf, TraceAction, format_size};
use cachalot_replay::diagnose::{try_candidates, write_candidates};
use cachalot_replay::input::{pick_device, read_snapshot_path, trace_from_events};
use cachalot_replay::{ReplayOptions, replay};
use cachalot_sim::SimConfig;
use cachalot_torchfmt::{EventOptions, OomRequest, Segment, explain_oom, replay_events_with};

use crate::args::parse_size;

/// Arguments of `cachalot explain`.
#[derive(clap::Args)]
pub struct Args {
    /// A torch memory snapshot (pickle or JSON, plain or gzip) whose history has an `oom`
    /// entry: taken at an out-of-memory, e.g. with `_dump_snapshot` in an OOM observer.
    snapshot: PathBuf,
    /// For a snapshot with history on several devices: the device.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Device memory for the replays. Default: estimated from the snapshot (free device
    /// memory at the out-of-memory plus what the allocator had reserved then).
    #[arg(long, value_parser = parse_size)]
    capacity: Option<u64>,
    /// Only read the snapshot; do not replay its history.
    #[arg(long)]
    no_replay: bool,
}

/// Runs `cachalot explain`.
pub fn run(a: Args) -> Result<ExitCode> {
    if !a.snapshot.exists() {
        bail!("snapshot file {} does not exist", a.snapshot.display());
    }
    let snap = read_snapshot_path(&a.snapshot)?;
    let device = pick_device(&snap, a.device, &a.snapshot)?;
    let Some(trace) = snap.device_traces.get(device as usize) else {
        bail!("{}: no history for device {device}", a.snapshot.display());
    };
    let ooms: Vec<usize> = (0..trace.entries.len())
        .filter(|&i| trace.entries[i].action == TraceAction::Oom)
        .collect();
    let Some(&at) = ooms.last() else {
        bail!(
            "{}: device {device}'s history has no `oom` entry ({} entries); explain needs a \
             snapshot taken at an out-of-memory, with history recorded \
             (torch.cuda.memory._record_memory_history())",
            a.snapshot.display(),
            trace.entries.len()
        );
    };
    let oom = trace.entries[at];
    let (conf, conf_note) = match &snap.allocator_settings {
        Some(s) => match parse_pytorch(&s.alloc_conf) {
            Ok((c, _)) => (c, format!("'{}'", s.alloc_conf)),
            Err(e) => (
                AllocConf::default(),
                format!(
                    "default (the snapshot's '{}' does not parse: {e})",
                    s.alloc_conf
                ),
            ),
        },
        None => (
            AllocConf::default(),
            "default (the snapshot has no allocator_settings)".to_string(),
        ),
    };
    let after = trace.entries.len() - at - 1;
    println!(
        "snapshot {}: device {device}, {} out-of-memory entries in its history; reading the \
         last one, with the configuration {conf_note}",
        a.snapshot.display(),
        ooms.len()
    );
    // Reserved memory at the out-of-memory: at the snapshot, less what was obtained after it,
    // plus what was returned after it. With the free device memory then, the capacity.
    let reserved_at_snapshot: u64 = snap.device_segments(device).map(|s| s.total_size).sum();
    let mut reserved_then = reserved_at_snapshot as i128;
    for e in &trace.entries[at + 1..] {
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved_then -= e.size as i128,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved_then += e.size as i128,
            _ => {}
        }
    }
    let capacity = match a.capacity {
        Some(c) => c,
        None => u64::try_from(reserved_then.max(0) + oom.addr as i128).unwrap_or(u64::MAX),
    };
    let opts = ReplayOptions {
        conf: conf.clone(),
        sim: SimConfig::with_capacity(capacity),
        max_oom_reports: 1,
        ..ReplayOptions::default()
    };
    let attempts = EventOptions {
        oom_attempts: true,
        until: None,
    };
    let events = replay_events_with(&snap, device, &attempts)?;
    let request = OomRequest {
        device,
        rounded: oom.size,
        stream: oom.stream,
        device_free: oom.addr,
    };
    // The segments at the out-of-memory: the snapshot's own when it was taken there, else
    // rebuilt by replaying the history up to it (when the history is complete and the replay
    // fails there as torch did).
    let mut rebuilt = None;
    if after > 0 && !a.no_replay && !events.starts_mid_run() {
        let prefix = replay_events_with(
            &snap,
            device,
            &EventOptions {
                until: Some(at + 1),
                ..attempts
            },
        )?;
        let r = replay(
            &trace_from_events(&prefix),
            &ReplayOptions {
                snapshot_at_end: true,
                ..opts.clone()
            },
        )?;
        let last_failed = r.ooms.count as usize == ooms.len()
            && prefix
                .events
                .last()
                .is_some_and(|e| e.addr == u64::MAX - ooms.len() as u64);
        if let (true, Some(state)) = (last_failed, r.snapshot) {
            let segments: Vec<Segment> = state
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
                .collect();
            rebuilt = Some(segments);
        }
    }
    match (&rebuilt, after) {
        (_, 0) => println!("  the snapshot was taken at that out-of-memory: its segments are read"),
        (Some(_), _) => println!(
            "  the snapshot was taken {after} history entries later: the segments at the \
             out-of-memory are rebuilt by replaying the history up to it (the replay fails \
             there too)"
        ),
        (None, _) => println!(
            "  note: the snapshot was taken {after} history entries after that out-of-memory; \
             the segments below are those at the snapshot"
        ),
    }
    let x = match &rebuilt {
        Some(segs) => explain_oom(segs, request, &conf),
        None => explain_oom(snap.device_segments(device), request, &conf),
    };
    print!("{x}");
    if a.no_replay {
        return Ok(ExitCode::SUCCESS);
    }
    let trace = trace_from_events(&events);
    let base = replay(&trace, &opts)?;
    println!(
        "  replayed the snapshot's history ({} events, each out-of-memory as a request that is \
         never freed) on a {} device{}: {} out-of-memory errors (the snapshot records {})",
        events.events.len(),
        format_size(capacity),
        if a.capacity.is_some() {
            ""
        } else {
            " (capacity estimated: free + reserved at the out-of-memory)"
        },
        base.ooms.count,
        ooms.len()
    );
    if events.starts_mid_run() {
        println!(
            "  note: the history starts mid-run ({} frees of earlier blocks dropped, {} \
             requested bytes live before it): the replays lack that memory",
            events.dropped_frees, events.live_before_window
        );
    }
    let mut out = String::new();
    write_candidates(&mut out, &try_candidates(&trace, &opts)?)?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
