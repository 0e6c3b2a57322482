//! Prints the oracle's `trace_stats` of RMM CSV traces (plain or gzip), one JSON line per
//! file, as the replay counts them, and how long loading took.
//!
//! `cargo run --release -p cachalot-replay --example trace_stats -- FILE...` (add `--time N`
//! to load each file N times and report the best time on stderr).

use std::path::Path;
use std::time::{Duration, Instant};

use cachalot_replay::load_rmm;
use cachalot_replay::report::trace_stats_json;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 1;
    if let Some(i) = args.iter().position(|a| a == "--time") {
        reps = match args.get(i + 1).and_then(|n| n.parse().ok()) {
            Some(n) => n,
            None => {
                eprintln!("--time needs a number of repetitions");
                std::process::exit(64);
            }
        };
        args.drain(i..i + 2);
    }
    let mut failed = false;
    for file in &args {
        let mut best = Duration::MAX;
        let mut out = None;
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            let res = load_rmm(Path::new(file));
            best = best.min(t.elapsed());
            out = Some(res);
        }
        match out {
            Some(Ok(t)) => {
                println!("{}", trace_stats_json(&t.stats));
                let events = t.stats.lines as f64;
                eprintln!(
                    "{file}: {} events in {:.2} ms ({:.1} M events/s)",
                    t.stats.lines,
                    best.as_secs_f64() * 1e3,
                    events / best.as_secs_f64() / 1e6
                );
            }
            Some(Err(e)) => {
                eprintln!("{e}");
                failed = true;
            }
            None => {}
        }
    }
    if failed {
        std::process::exit(65);
    }
}
