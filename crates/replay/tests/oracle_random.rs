//! The standing differential test against torch 2.15 itself (the oracle, `shared/oracle`:
//! torch's own allocator on the simulated device).
//!
//! Each run draws a random trace of 1–6 streams and a random configuration over every key
//! torch 2.15 accepts, with values near the thresholds (`max_split_size_mb` 20/21/40, odd
//! `roundup_power2_divisions` lists, garbage collection with small fractions, expandable
//! reserves, `large_segment_size_mb`, `throw_on_cudamalloc_oom`, `backend:cudaMallocAsync`
//! and the no-caching variables). The capacity where the oracle stops running out of memory
//! is found by bisection; the case is then replayed on both sides at that boundary, ±2 MiB
//! and ±64 MiB, and compared on the exit status, statistics, counts, OOM and fatal-error
//! text and the device calls row for row (`common::differences`).
//!
//! Runs only where the oracle is set up; elsewhere it prints why it was skipped.
//! `CACHALOT_ORACLE_RUNS` (default 8 cases, 40 runs) and `CACHALOT_ORACLE_SEED` size it;
//! `scripts/oracle/oracle_random.sh` runs a long one. Differing traces are kept under
//! `CACHALOT_ORACLE_OUT` when set, for `scripts/oracle/oracle_diff.py --shrink`.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use cachalot_trace::SplitMix64 as Rng;
use common::pool_traces::random_pool_trace;
use common::{Case, differences, oracle, run_oracle, run_ours, try_run_oracle};

const MIB: u64 = 1 << 20;

/// A request size: mostly ordinary, often right at a size-class edge.
fn request_size(rng: &mut Rng) -> u64 {
    let edges = [
        512,
        MIB,
        MIB + 1,
        2 * MIB,
        10 * MIB - 1,
        10 * MIB,
        20 * MIB,
        21 * MIB,
        40 * MIB,
        64 * MIB,
    ];
    match rng.below(20) {
        0..=1 => {
            let e = edges[rng.below(edges.len() as u64) as usize];
            (e + rng.below(3)).saturating_sub(1)
        }
        2..=10 => rng.log_uniform(1, MIB),
        11..=16 => rng.log_uniform(MIB, 12 * MIB),
        17..=18 => rng.log_uniform(12 * MIB, 160 * MIB),
        _ => rng.log_uniform(160 * MIB, 700 * MIB),
    }
}

fn random_trace(rng: &mut Rng) -> String {
    let streams = 1 + rng.below(6);
    let events = 100 + rng.below(1400) as usize;
    let max_live = 20 + rng.below(200) as usize;
    let stream_ids: Vec<u64> = (0..streams)
        .map(|s| if s == 0 { 0 } else { 0x10 + s })
        .collect();
    let mut live: Vec<u64> = Vec::new();
    let mut next = 1u64;
    let mut out = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for t in 0..events {
        let alloc = live.is_empty() || (live.len() < max_live && rng.chance(55));
        if alloc {
            let size = request_size(rng);
            let stream = stream_ids[rng.below(streams) as usize];
            writeln!(out, "1,{t},allocate,{next:#x},{size},{stream:#x}").unwrap();
            live.push(next);
            next += 1;
        } else {
            let p = live.swap_remove(rng.below(live.len() as u64) as usize);
            writeln!(out, "1,{t},free,{p:#x},0,0").unwrap();
        }
    }
    out
}

/// A configuration over the keys torch 2.15 accepts, values near their thresholds.
fn random_conf(rng: &mut Rng) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut add = |rng: &mut Rng, p: u64, key: &str, values: &[&str]| {
        if rng.chance(p) {
            parts.push(format!("{key}:{}", rng.pick(values)));
        }
    };
    add(
        rng,
        30,
        "max_split_size_mb",
        &["20", "21", "40", "64", "128", "300"],
    );
    add(
        rng,
        15,
        "max_non_split_rounding_mb",
        &["0", "1", "20", "64"],
    );
    add(
        rng,
        15,
        "large_segment_size_mb",
        &["11", "12", "20", "22", "40"],
    );
    add(
        rng,
        30,
        "roundup_power2_divisions",
        &[
            "1",
            "2",
            "4",
            "8",
            "[256:1,512:2,1024:4,>:8]",
            "[64:4,>:2]",
            "[1:2,2:8,8:1,>:4]",
            "[>:16]",
            "[32:32,>:1]",
        ],
    );
    add(
        rng,
        20,
        "garbage_collection_threshold",
        &["0.01", "0.1", "0.5", "0.8", "0.99"],
    );
    add(rng, 30, "expandable_segments", &["True", "False"]);
    add(rng, 10, "release_lock_on_cudamalloc", &["True", "False"]);
    add(
        rng,
        30,
        "per_process_memory_fraction",
        &["0.3", "0.5", "0.7", "0.9", "0.999", "1.0"],
    );
    add(rng, 20, "throw_on_cudamalloc_oom", &["True", "False"]);
    add(
        rng,
        15,
        "expandable_segments_reserve",
        &["0.01", "0.1", "0.5", "1.0", "1.125", "2.0", "0.5G", "4G"],
    );
    add(
        rng,
        5,
        "graph_capture_record_stream_reuse",
        &["True", "False"],
    );
    add(rng, 5, "pinned_num_register_threads", &["1", "8"]);
    add(rng, 6, "backend", &["native", "cudaMallocAsync"]);
    // Shuffle: the order of keys matters to torch only where one key reads another.
    for i in (1..parts.len()).rev() {
        parts.swap(i, rng.below(i as u64 + 1) as usize);
    }
    parts.join(",")
}

/// The no-caching variables: mostly unset, sometimes `1`, `0` or a value torch ignores.
fn random_env(rng: &mut Rng) -> (Option<String>, Option<String>) {
    let value = |rng: &mut Rng, percent| {
        rng.chance(percent)
            .then(|| rng.pick(&["1", "1", "0", "true", " 1", "TRUE"]).to_string())
    };
    let cuda = value(rng, 14);
    let hip = value(rng, 5);
    (cuda, hip)
}

/// Whether the oracle runs `trace` under `case` without an out-of-memory.
fn fits(oracle: &Path, trace: &Path, case: &Case, scratch: &Path) -> bool {
    let o = run_oracle(oracle, trace, case, scratch);
    o.status == 0 && o.json["ooms"]["count"].as_u64() == Some(0)
}

/// The smallest capacity (a multiple of 2 MiB) at which the oracle replays `trace` without an
/// out-of-memory, by bisection between 2 MiB and the peak it reserves on an 80 GiB device.
fn oom_boundary(oracle: &Path, trace: &Path, base: &Case, scratch: &Path) -> u64 {
    let mut case = base.clone();
    case.capacity = 80 << 30;
    let o = run_oracle(oracle, trace, &case, scratch);
    let peak = o.json["peak"]["reserved_bytes"].as_u64().unwrap_or(0);
    let phys = o.json["fake_device"]["phys_peak"].as_u64().unwrap_or(0);
    let mut hi = (peak.max(phys) + 64 * MIB).div_ceil(2 * MIB) * 2 * MIB;
    let mut lo = 0;
    case.capacity = hi;
    if !fits(oracle, trace, &case, scratch) {
        return hi;
    }
    while hi - lo > 2 * MIB {
        let mid = (lo + hi) / 2 / (2 * MIB) * (2 * MIB);
        case.capacity = mid.max(2 * MIB);
        if fits(oracle, trace, &case, scratch) {
            hi = case.capacity;
        } else {
            lo = case.capacity;
        }
    }
    hi
}

#[test]
fn random_configs_traces_and_capacities_match_the_oracle() {
    let oracle = match oracle() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let cases: u64 = std::env::var("CACHALOT_ORACLE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let seed: u64 = std::env::var("CACHALOT_ORACLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_150);
    let keep = std::env::var_os("CACHALOT_ORACLE_OUT").map(std::path::PathBuf::from);
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    let (mut runs, mut identical) = (0u64, 0u64);
    // How the oracle ended the runs: replayed (0), configuration rejected (2), fatal (3).
    let mut by_status = std::collections::BTreeMap::<i32, u64>::new();
    let mut with_oom = 0u64;
    let mut failures = Vec::new();
    for i in 0..cases {
        let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(i));
        let trace_path = dir.join(format!("t{i}.csv"));
        std::fs::write(&trace_path, random_trace(&mut rng)).unwrap();
        let (no_cuda_caching, no_hip_caching) = random_env(&mut rng);
        let base = Case {
            capacity: 0,
            conf: random_conf(&mut rng),
            no_cuda_caching,
            no_hip_caching,
            ignore_streams: rng.chance(10),
        };
        let scratch = dir.join(format!("t{i}"));
        let boundary = oom_boundary(&oracle, &trace_path, &base, &scratch);
        for delta in [0i64, -2, 2, -64, 64] {
            let capacity = boundary
                .saturating_add_signed(delta * MIB as i64)
                .max(2 * MIB);
            let case = Case {
                capacity,
                ..base.clone()
            };
            let theirs = run_oracle(&oracle, &trace_path, &case, &scratch);
            let ours = run_ours(&trace_path, &case);
            let diffs = differences(&ours, &theirs);
            runs += 1;
            *by_status.entry(theirs.status).or_default() += 1;
            with_oom += u64::from(theirs.json["ooms"]["count"].as_u64().unwrap_or(0) > 0);
            if diffs.is_empty() {
                identical += 1;
                continue;
            }
            if let Some(keep) = &keep {
                std::fs::create_dir_all(keep).unwrap();
                let name = format!("seed{seed}-case{i}-cap{capacity}.csv");
                std::fs::copy(&trace_path, keep.join(&name)).unwrap();
            }
            failures.push(format!(
                "case {i} ({}):\n    {}",
                case.describe(&trace_path),
                diffs[..diffs.len().min(4)].join("\n    ")
            ));
        }
    }
    let status = |k| by_status.get(&k).copied().unwrap_or(0);
    eprintln!(
        "oracle_random: {runs} runs, {identical} identical, {} differ (seed {seed}, {cases} cases; \
         oracle: {} replayed ({with_oom} with an OOM), {} configs rejected, {} fatal errors)",
        runs - identical,
        status(0),
        status(2),
        status(3)
    );
    assert!(
        failures.is_empty(),
        "{} of {runs} runs differ from the oracle:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

#[test]
fn random_pool_traces_match_the_oracle() {
    compare_random_pool_traces(
        "pools",
        &[
            "",
            "max_split_size_mb:40",
            "garbage_collection_threshold:0.5,per_process_memory_fraction:0.7",
        ],
        pool_seeds_per_case(),
    );
}

/// Expandable segments in private pools, alone and with the other options. These traces
/// reach torch's forgetting of a pool whose pages are still mapped, and the next pool's
/// taking over its storage (`PrivatePools::slot_for_new_pool` in the core).
#[test]
fn random_expandable_pool_traces_match_the_oracle() {
    compare_random_pool_traces(
        "expandable-pools",
        &[
            "expandable_segments:True",
            "expandable_segments:True,max_split_size_mb:40",
            "expandable_segments:True,garbage_collection_threshold:0.5,per_process_memory_fraction:0.7",
        ],
        pool_seeds_per_case(),
    );
}

/// The consistency check of torch's own free sets that stopped the oracle, if one did: what
/// torch does once it wrote into a deleted pool's free sets (undefined behaviour, not
/// reproduced).
fn torch_corrupted(o: &common::Outcome) -> Option<String> {
    let message = o.json.get("fatal_error")?.get("message")?.as_str()?;
    [
        "erased == erased_by_addr INTERNAL ASSERT",
        "inserted INTERNAL ASSERT",
    ]
    .iter()
    .any(|m| message.starts_with(m))
    .then(|| message.to_string())
}

/// Random traces per configuration and capacity: `CACHALOT_POOL_SEEDS`, or 2. Their seeds
/// start at `CACHALOT_POOL_SEED` (default 100).
fn pool_seeds_per_case() -> u64 {
    env_u64("CACHALOT_POOL_SEEDS").unwrap_or(2)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Random pool traces (1–3 streams, 256 MiB to 8 GiB, so some run out of memory), each
/// under every configuration of `confs`, compared with the oracle on everything
/// `common::differences` checks, the per-pool report included.
fn compare_random_pool_traces(name: &str, confs: &[&str], seeds_per_case: u64) {
    let oracle = match oracle() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let seed_base = env_u64("CACHALOT_POOL_SEED").unwrap_or(100);
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    let mut failures = Vec::new();
    let mut crashed = Vec::new();
    let mut runs = 0;
    let cases = confs
        .iter()
        .flat_map(|c| [256 * MIB, 1 << 30, 8 << 30].map(|cap| (*c, cap)))
        .flat_map(|(c, cap)| (0..seeds_per_case).map(move |_| (c, cap)));
    for (n, (conf, capacity)) in cases.enumerate() {
        let seed = seed_base + n as u64 + if conf.contains("expandable") { 5 } else { 0 };
        let trace = dir.join(format!("p{seed}.csv"));
        let text = random_pool_trace(seed, 1500, 1 + seed % 3, seed.is_multiple_of(4));
        std::fs::write(&trace, text).unwrap();
        let case = Case {
            capacity,
            conf: conf.into(),
            ..Case::default()
        };
        let theirs = match try_run_oracle(&oracle, &trace, &case, &dir.join(format!("p{seed}"))) {
            Ok(o) => o,
            Err(why) => {
                crashed.push(why.lines().next().unwrap_or_default().to_string());
                continue;
            }
        };
        if let Some(why) = torch_corrupted(&theirs) {
            crashed.push(format!("{}: {why}", case.describe(&trace)));
            continue;
        }
        let ours = run_ours(&trace, &case);
        runs += 1;
        let d = differences(&ours, &theirs);
        if !d.is_empty() {
            failures.push(format!(
                "{}:\n    {}",
                case.describe(&trace),
                d.join("\n    ")
            ));
        }
    }
    if !failures.is_empty() {
        let kept = scratch.keep();
        panic!(
            "{name}: {} of {runs} random pool traces differ (kept in {}):\n{}",
            failures.len(),
            kept.display(),
            failures.join("\n")
        );
    }
    // torch deletes a forgotten pool while blocks of it are alive; a free of one before
    // another pool takes the storage writes into freed memory, and the oracle may die of it
    // or trip one of torch's consistency checks of its free sets. Those traces cannot be
    // compared; the rest must be most of them.
    for why in &crashed {
        eprintln!("not compared (torch used a deleted pool): {why}");
    }
    assert!(
        crashed.len() * 4 <= runs,
        "torch crashed on {} traces, more than a quarter of the {runs} compared: {crashed:?}",
        crashed.len()
    );
    eprintln!(
        "{runs} random pool traces identical to the oracle ({} not compared: torch crashed or failed its own free-set checks)",
        crashed.len()
    );
}
