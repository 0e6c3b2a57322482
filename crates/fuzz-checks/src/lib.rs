//! What cachalot's fuzz targets (`fuzz/`, cargo-fuzz on nightly) check, as plain functions of
//! the input bytes. Each panics when a property fails; otherwise it returns. The corpora under
//! `fuzz/regressions/<target>/`, every reproducer of issue #10 included, run through the same
//! functions in `tests/corpus.rs`, so a regression fails `cargo test` on stable.
//!
//! | target | input | properties |
//! |---|---|---|
//! | [`rmm_csv`] | an RMM CSV trace, plain or gzip | no panic; every event or one error |
//! | [`gzip_trace`] | a gzip stream of a trace | no panic |
//! | [`snapshot`] | a torch snapshot, pickle or JSON | no panic; OOMs explained without wrapping; what reads writes back to the same |
//! | [`config`] | a `PYTORCH_CUDA_ALLOC_CONF` string | no panic; the canonical string reads back |
//! | [`allocator_ops`] | allocator calls, encoded | invariants after every call; no overlap; a failing call changes nothing |

#![forbid(unsafe_code)]

mod ops;

pub use ops::{CAPACITIES, CONFIGS, Op, allocator_ops, conf_at, decode_ops, run_ops};

use cachalot_core::config::{parse_cachalot, parse_pytorch};
use cachalot_core::{AllocConf, TraceAction};
use cachalot_torchfmt::{OomRequest, explain_oom, read_snapshot, replay_events, to_pickle_bytes};

/// Reads `data` as an RMM CSV (gzip recognised by content) through the streaming reader and
/// the replay loader: events or an error, never a panic; both agree on whether it reads.
pub fn rmm_csv(data: &[u8]) {
    let loaded = cachalot_replay::load_bytes(data);
    if !data.starts_with(&[0x1f, 0x8b]) {
        let mut events = 0u64;
        let mut failed = false;
        for e in cachalot_trace::RmmReader::new(data) {
            match e {
                Ok(_) => events += 1,
                Err(_) => failed = true,
            }
        }
        assert_eq!(
            failed,
            loaded.is_err(),
            "the reader and the loader disagree"
        );
        if let Ok(t) = &loaded {
            assert_eq!(t.stats.lines, events);
        }
    }
}

/// Reads `data`, after the gzip magic bytes, as a gzip-compressed trace ([`rmm_csv`]): a bad
/// stream is an error, never a panic.
pub fn gzip_trace(data: &[u8]) {
    let mut bytes = vec![0x1f, 0x8b];
    bytes.extend_from_slice(data);
    rmm_csv(&bytes);
}

/// Reads `data` as a torch memory snapshot: a snapshot or an error, never a panic; a snapshot
/// that reads converts to replay events (or says why not) and writes back to a pickle that
/// reads as the same snapshot.
pub fn snapshot(data: &[u8]) {
    let Ok(mut snap) = read_snapshot(data) else {
        return;
    };
    for (device, trace) in snap.device_traces.iter().enumerate() {
        let _ = replay_events(&snap, device as u32);
        // Explaining every recorded out-of-memory: numbers saturate, never wrap or panic.
        for e in trace
            .entries
            .iter()
            .filter(|e| e.action == TraceAction::Oom)
        {
            let request = OomRequest {
                device: device as u32,
                rounded: e.size,
                stream: e.stream,
                device_free: e.addr,
                pool: e.pool,
            };
            let x = explain_oom(&snap.segments, request, &AllocConf::default());
            assert!(x.alloc_size >= x.request.rounded.min(2 << 20), "{x:?}");
            let _ = x.to_string();
        }
    }
    // Actions the writer does not know are not written back.
    for t in &mut snap.device_traces {
        t.skipped.clear();
    }
    let again = read_snapshot(&to_pickle_bytes(&snap)).expect("our own pickle reads");
    // Floats compare by their shortest exact text, so that a NaN read (a hostile
    // `garbage_collection_threshold`) and written back counts as the same value.
    if again != snap {
        assert_eq!(format!("{again:?}"), format!("{snap:?}"));
    }
}

/// Parses `data` as a configuration string (both grammars): a configuration or an error
/// that quotes the input, never a panic; a PyTorch configuration's canonical string reads
/// back to the same configuration.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((conf, _)) = parse_pytorch(text) {
        let canonical = conf.to_pytorch_string();
        let (mut back, _) = parse_pytorch(&canonical)
            .unwrap_or_else(|e| panic!("canonical {canonical:?} of {text:?} rejected: {e}"));
        // The string as written is kept verbatim; everything else must read back. A legacy
        // bypass threshold is written as its torch >= 2.0 equivalent.
        back.last_allocator_settings = conf.last_allocator_settings.clone();
        if conf.roundup_bypass_threshold == u64::MAX {
            assert_eq!(back, conf, "{text:?} -> {canonical:?}");
        }
        let _ = conf.describe();
    }
    let _ = parse_cachalot(text);
}
