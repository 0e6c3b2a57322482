//! Prints the oracle-style `trace_stats` of RMM CSV traces (plain or gzip),
//! one JSON line per file, and how long parsing took.
//!
//! `cargo run --release --example rmm_stats -- FILE...` (add `--time N` to
//! parse each file N times and report the best time on stderr).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 1;
    if let Some(i) = args.iter().position(|a| a == "--time") {
        reps = args[i + 1].parse().expect("--time N");
        args.drain(i..i + 2);
    }
    let mut failed = false;
    for file in &args {
        let mut best = Duration::MAX;
        let mut out = None;
        for _ in 0..reps {
            let t = Instant::now();
            let res = cachalot_trace::open(Path::new(file)).and_then(common::read_stats);
            best = best.min(t.elapsed());
            out = Some(res);
        }
        match out.unwrap() {
            Ok(s) => {
                println!("{}", s.to_json());
                eprintln!(
                    "{file}: {} events in {:.2} ms ({:.1} M events/s)",
                    s.lines,
                    best.as_secs_f64() * 1e3,
                    s.lines as f64 / best.as_secs_f64() / 1e6
                );
            }
            Err(e) => {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(65);
    }
}
