//! Shared by the integration tests: fixture paths and replays set up as the golden test does.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;

use cachalot_core::config::parse_pytorch;
use cachalot_replay::{LoadedTrace, ReplayOptions, ReplayReport, load_rmm, replay};
use cachalot_sim::SimConfig;
pub use cachalot_testkit::fixtures;
use serde_json::Value;

/// A file's bytes, gunzipped when it is gzip.
pub fn read(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        raw
    }
}

/// The golden index.
pub fn golden_index() -> Value {
    serde_json::from_slice(&read(&fixtures().join("golden/index.json"))).unwrap()
}

/// A golden scenario's configuration string and capacity.
pub fn scenario(trace: &str, scenario: &str) -> (String, u64) {
    let index = golden_index();
    let sc = &index[trace]["scenarios"][scenario];
    (
        sc["PYTORCH_CUDA_ALLOC_CONF"].as_str().unwrap().to_string(),
        sc["FAKE_CUDA_CAPACITY"].as_u64().unwrap(),
    )
}

/// The trace of a golden entry.
pub fn load_trace(trace: &str) -> LoadedTrace {
    let index = golden_index();
    load_rmm(&fixtures().join(index[trace]["trace"].as_str().unwrap())).unwrap()
}

/// Replays a golden scenario as `crates/replay/tests/golden.rs` does, with extra options.
pub fn replay_scenario(
    trace: &LoadedTrace,
    conf: &str,
    capacity: u64,
    extra: impl FnOnce(&mut ReplayOptions),
) -> ReplayReport {
    let (conf, _) = parse_pytorch(conf).unwrap();
    let mut opts = ReplayOptions {
        conf,
        sim: SimConfig::with_capacity(capacity),
        ..ReplayOptions::default()
    };
    extra(&mut opts);
    replay(trace, &opts).unwrap()
}
