//! Differential test against torch 2.15 itself: random traces replayed by the oracle
//! (`shared/oracle`, torch's own allocator on the simulated device) and by cachalot must give
//! the same device-call log, row for row.
//!
//! Runs only where the oracle is set up (`shared/oracle/setup.sh` beside the checkout, or
//! `CACHALOT_ORACLE=/path/to/oracle`); elsewhere it prints why it was skipped. The golden test
//! covers the committed fixtures on every machine; this one finds differences on traces nobody
//! has seen before.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cachalot_core::config::parse_pytorch;
use cachalot_replay::report::write_segments;
use cachalot_replay::{ReplayOptions, load_rmm, replay};
use cachalot_sim::SimConfig;

fn oracle() -> Result<PathBuf, String> {
    let path = match std::env::var_os("CACHALOT_ORACLE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/oracle/oracle"),
    };
    if !path.exists() {
        return Err(format!("no oracle at {}", path.display()));
    }
    let setup = path.with_file_name("setup.sh");
    let ok = Command::new(&setup)
        .arg("--check")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        return Err(format!(
            "oracle not set up ({} --check fails)",
            setup.display()
        ));
    }
    Ok(path)
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Log-uniform in [lo, hi).
    fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((lo as f64).ln() + u * ((hi as f64).ln() - (lo as f64).ln())).exp() as u64
    }
}

fn random_trace(seed: u64, events: usize, streams: u64, max_live: usize) -> String {
    let mut rng = Rng(seed);
    let mut live: Vec<u64> = Vec::new();
    let mut next = 1u64;
    let mut out = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for t in 0..events {
        let alloc = live.is_empty() || (live.len() < max_live && rng.below(2) == 0);
        if alloc {
            let size = match rng.below(10) {
                0..=5 => rng.log_uniform(1, 1 << 20),
                6..=8 => rng.log_uniform(1 << 20, 10 << 20),
                _ => rng.log_uniform(10 << 20, 200 << 20),
            };
            let stream = rng.below(streams);
            writeln!(out, "1,{t},allocate,{next:#x},{size},{stream}").unwrap();
            live.push(next);
            next += 1;
        } else {
            let p = live.swap_remove(rng.below(live.len() as u64) as usize);
            writeln!(out, "1,{t},free,{p:#x},0,0").unwrap();
        }
    }
    out
}

#[test]
fn random_traces_match_the_oracle() {
    let oracle = match oracle() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("cachalot-oracle-random-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let confs = [
        "",
        "max_split_size_mb:40",
        "expandable_segments:True",
        "roundup_power2_divisions:[64:4,>:2]",
        "garbage_collection_threshold:0.5,per_process_memory_fraction:0.7",
        "expandable_segments:True,max_split_size_mb:32",
    ];
    let mut failures = Vec::new();
    let mut runs = 0;
    for (i, conf) in confs.iter().enumerate() {
        for (j, capacity) in [768u64 << 20, 3 << 30].into_iter().enumerate() {
            let seed = 1 + (i * 2 + j) as u64;
            let trace_path = dir.join(format!("t{seed}.csv"));
            std::fs::write(&trace_path, random_trace(seed, 3000, 1 + seed % 3, 200)).unwrap();
            let seg_path = dir.join(format!("t{seed}.segments.csv"));
            let out = Command::new(&oracle)
                .arg("--segments")
                .arg(&seg_path)
                .arg(&trace_path)
                .env("FAKE_CUDA_CAPACITY", capacity.to_string())
                .env("PYTORCH_CUDA_ALLOC_CONF", conf)
                .env_remove("PYTORCH_ALLOC_CONF")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "oracle failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let theirs = std::fs::read_to_string(&seg_path).unwrap();
            let trace = load_rmm(&trace_path).unwrap();
            let opts = ReplayOptions {
                conf: parse_pytorch(conf).unwrap().0,
                sim: SimConfig::with_capacity(capacity),
                log_segments: true,
                ..ReplayOptions::default()
            };
            let mut ours = Vec::new();
            write_segments(&mut ours, &replay(&trace, &opts).unwrap().segments).unwrap();
            let ours = String::from_utf8(ours).unwrap();
            runs += 1;
            if ours != theirs {
                let row = ours.lines().zip(theirs.lines()).position(|(a, b)| a != b);
                failures.push(format!("seed {seed}, capacity {capacity}, conf '{conf}': first difference at row {row:?}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {runs} random traces differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{runs} random traces identical to the oracle");
}
