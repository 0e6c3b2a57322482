//! Shared by the tests that hold cachalot to torch 2.15's allocator (the oracle,
//! `shared/oracle`): one way to run a case through each side and one way to compare them.
//!
//! A case is a trace file, a capacity, a `PYTORCH_CUDA_ALLOC_CONF` string, the no-caching
//! environment and `--ignore-streams`. Both sides are compared on what the oracle reports:
//! the exit-status class (0 replayed, 2 config rejected, 3 fatal `c10::Error`), the JSON
//! fields listed in `cachalot_testkit::ORACLE_FIELDS` (statistics, counts, OOM messages, `fatal_error`) and the
//! device-call log row for row.

#![allow(dead_code)]

pub mod pool_traces;
pub mod remembered;

use std::path::Path;
use std::process::Command;

use cachalot_core::config::{
    NO_CUDA_CACHING_VAR, NO_HIP_CACHING_VAR, Overrides, Settings, TorchVersion,
};
use cachalot_replay::report::{ReportMeta, report_json, write_segments};
use cachalot_replay::{ReplayOptions, load_rmm, replay};
use cachalot_sim::SimConfig;
use serde_json::Value;

/// The oracle command, if it is set up beside the checkout (or named by `CACHALOT_ORACLE`).
pub use cachalot_testkit::oracle;
use cachalot_testkit::{ORACLE_FIELDS, json_diff, log_diff};

/// One replay setting.
#[derive(Clone, Debug, Default)]
pub struct Case {
    /// Device bytes (`FAKE_CUDA_CAPACITY`).
    pub capacity: u64,
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    pub conf: String,
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING`, if set.
    pub no_cuda_caching: Option<String>,
    /// `PYTORCH_NO_HIP_MEMORY_CACHING`, if set.
    pub no_hip_caching: Option<String>,
    /// `--ignore-streams`.
    pub ignore_streams: bool,
}

impl Case {
    /// The settings this case's environment gives, read by cachalot's one settings reader.
    pub fn settings(&self) -> Result<Settings, cachalot_core::config::ConfigError> {
        let get = |var: &str| match var {
            NO_CUDA_CACHING_VAR => self.no_cuda_caching.clone(),
            NO_HIP_CACHING_VAR => self.no_hip_caching.clone(),
            _ => None,
        };
        let over = Overrides {
            pytorch: Some(&self.conf),
            cachalot: None,
        };
        Settings::resolve(get, over)
    }

    /// The case as a shell line, to rerun it by hand.
    pub fn describe(&self, trace: &Path) -> String {
        let mut s = format!("FAKE_CUDA_CAPACITY={} ", self.capacity);
        if let Some(v) = &self.no_cuda_caching {
            s += &format!("PYTORCH_NO_CUDA_MEMORY_CACHING='{v}' ");
        }
        if let Some(v) = &self.no_hip_caching {
            s += &format!("PYTORCH_NO_HIP_MEMORY_CACHING='{v}' ");
        }
        s += &format!("PYTORCH_CUDA_ALLOC_CONF='{}' oracle ", self.conf);
        if self.ignore_streams {
            s += "--ignore-streams ";
        }
        s + &trace.display().to_string()
    }
}

/// What one side reported.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The exit-status class: 0 replayed, 2 configuration rejected, 3 fatal error.
    pub status: i32,
    /// The JSON report (`Null` when the configuration was rejected).
    pub json: Value,
    /// The `--segments` CSV.
    pub segments: String,
}

/// Runs the oracle on `trace`; its segments file goes to `scratch`.
pub fn run_oracle(oracle: &Path, trace: &Path, case: &Case, scratch: &Path) -> Outcome {
    try_run_oracle(oracle, trace, case, scratch).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_oracle`], with an oracle that did not end with one of its exit statuses (killed by
/// a signal: torch itself crashed) as an error that says so.
pub fn try_run_oracle(
    oracle: &Path,
    trace: &Path,
    case: &Case,
    scratch: &Path,
) -> Result<Outcome, String> {
    let seg = scratch.with_extension("oracle-segments.csv");
    let mut cmd = Command::new(oracle);
    if case.ignore_streams {
        cmd.arg("--ignore-streams");
    }
    cmd.arg("--segments")
        .arg(&seg)
        .arg(trace)
        .env("FAKE_CUDA_CAPACITY", case.capacity.to_string())
        .env("PYTORCH_CUDA_ALLOC_CONF", &case.conf)
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("PYTORCH_NO_CUDA_MEMORY_CACHING")
        .env_remove("PYTORCH_NO_HIP_MEMORY_CACHING");
    if let Some(v) = &case.no_cuda_caching {
        cmd.env("PYTORCH_NO_CUDA_MEMORY_CACHING", v);
    }
    if let Some(v) = &case.no_hip_caching {
        cmd.env("PYTORCH_NO_HIP_MEMORY_CACHING", v);
    }
    let out = cmd.output().expect("the oracle runs");
    let status = out.status.code().unwrap_or(-1);
    if !matches!(status, 0 | 2 | 3) {
        let _ = std::fs::remove_file(&seg);
        return Err(format!(
            "oracle failed ({}) on {}: {}",
            out.status,
            case.describe(trace),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let json = if status == 2 {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).expect("oracle JSON")
    };
    let segments = std::fs::read_to_string(&seg).unwrap_or_default();
    let _ = std::fs::remove_file(&seg);
    Ok(Outcome {
        status,
        json,
        segments,
    })
}

/// Replays `trace` through cachalot as the CLI's `replay --json --segments` does.
pub fn run_ours(trace: &Path, case: &Case) -> Outcome {
    run_ours_as(trace, case, TorchVersion::NEWEST)
}

/// [`run_ours`] with torch `torch`'s decisions (`replay --torch`).
pub fn run_ours_as(trace: &Path, case: &Case, torch: TorchVersion) -> Outcome {
    let loaded = load_rmm(trace).expect("trace loads");
    let conf = match case.settings() {
        Ok(s) => s.conf.for_torch(torch),
        Err(_) => {
            return Outcome {
                status: 2,
                json: Value::Null,
                segments: String::new(),
            };
        }
    };
    let opts = ReplayOptions {
        conf: conf.clone(),
        sim: SimConfig::with_capacity(case.capacity),
        log_segments: true,
        ignore_streams: case.ignore_streams,
        ..ReplayOptions::default()
    };
    let (report, status) = match replay(&loaded, &opts) {
        Ok(r) => (r, 0),
        Err(mut e) => match e.report.take() {
            Some(r) => (*r, 3),
            None => panic!("replay failed before the trace: {e}"),
        },
    };
    let meta = ReportMeta {
        ignore_streams: case.ignore_streams,
        ..ReportMeta::default()
    };
    let json = report_json(&report, &conf, &loaded.stats, case.capacity, &meta);
    let mut csv = Vec::new();
    write_segments(&mut csv, &report.segments).unwrap();
    Outcome {
        status,
        json,
        segments: String::from_utf8(csv).unwrap(),
    }
}

/// Everything in which `ours` differs from the oracle's `theirs`; empty when identical.
pub fn differences(ours: &Outcome, theirs: &Outcome) -> Vec<String> {
    let mut d = Vec::new();
    if ours.status != theirs.status {
        d.push(format!(
            "exit status class: cachalot {}, oracle {}",
            ours.status, theirs.status
        ));
        return d;
    }
    if theirs.status == 2 {
        return d;
    }
    for key in ORACLE_FIELDS {
        json_diff(key, &ours.json[key], &theirs.json[key], &mut d);
    }
    d.extend(log_diff("device calls", &ours.segments, &theirs.segments));
    d
}
