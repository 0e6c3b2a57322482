//! The C library under sizes and capacities across the whole `u64` range (issue 10, "no
//! arithmetic overflow reachable from input"): `tests/c/u64_sizes.c` calls the exported
//! functions in random order with sizes from 0 to `SIZE_MAX` (weighted towards the band
//! 2^64 − 2^25 … 2^64 − 2^22 where torch's rounding starts to wrap), on three simulated
//! devices, under every backend and a spread of configurations, with simulated capacities
//! from 2 MiB to `u64::MAX`. After every call it checks that no two live allocations of any
//! device overlap or wrap, that a failure is NULL with its reason in `cachalot_last_error()`
//! and leaves what is allocated as it was, and that a refused call leaves torch's statistics
//! exactly as they were (the list is at the top of the C file).
//!
//! The same program runs with `CACHALOT_DEVICE=cuda` on the capture runtime's simulated CUDA
//! driver (cachalot's CUDA device through cudarc, the driver's VMM calls and memory pool),
//! with the driver's capacities from 2 MiB to 2^63 bytes and three devices on one memory
//! (`sizes_across_u64_on_the_cuda_device_of_the_simulated_driver`); skipped, saying why,
//! where that driver cannot be built. Only on the simulated driver: the program's streams are
//! plain numbers, which a real driver would take for pointers.
//!
//! `CACHALOT_CAPI_SEED` changes the seeds, `CACHALOT_CAPI_CALLS` the calls per run (1,000).
//! Skipped, with the reason printed, without gcc.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use common::build_c_program;

/// Configurations, as (variable, value).
const CONFIGS: &[(&str, &str)] = &[
    ("PYTORCH_CUDA_ALLOC_CONF", ""),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
    ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:21"),
    ("PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:2"),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "roundup_power2_divisions:[1:2,2:8,>:4]",
    ),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "garbage_collection_threshold:0.5,per_process_memory_fraction:0.8",
    ),
    ("PYTORCH_CUDA_ALLOC_CONF", "throw_on_cudamalloc_oom:True"),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "expandable_segments:True,expandable_segments_reserve:0.01",
    ),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "expandable_segments:True,max_split_size_mb:40",
    ),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "large_segment_size_mb:11,expandable_segments:True",
    ),
    ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
];

/// `CACHALOT_SIM_CAPACITY` values: 2 MiB to 2^64 − 1 bytes.
const CAPACITIES: &[&str] = &[
    "2M",
    "100M",
    "1G",
    "80G",
    "16T",
    "1152921504606846976", // 2^60: 8 × capacity of addresses leaves room for two devices
    "2305843009213693952", // 2^61: 8 × capacity wraps to 0 in the oracle's fake
    "9223372036854775808", // 2^63
    "18446744073709551615",
];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `key=value` counts of the program's `SUMMARY` line.
fn summary(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("SUMMARY "))
        .unwrap_or_else(|| panic!("no SUMMARY line in:\n{stdout}"))
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What every configuration and capacity of a run matrix added up to: the `SUMMARY` counts,
/// the runs per backend, and how many runs had fewer than 3 devices.
struct Totals {
    counts: BTreeMap<String, u64>,
    backends: BTreeMap<String, u64>,
    fewer_devices: usize,
}

/// Runs the C program under every configuration and each of `capacities`, the device and its
/// capacity set by `device(cmd, capacity)`; a run that fails fails the test with its output.
/// `name` names the compiled program: each test builds its own, since the tests run in
/// parallel and a program being written cannot be started ("Text file busy").
fn run_matrix(name: &str, capacities: &[&str], device: impl Fn(&mut Command, &str)) -> Totals {
    let exe = build_c_program("u64_sizes.c", name);
    let seed = env_u64("CACHALOT_CAPI_SEED", 10);
    let calls = env_u64("CACHALOT_CAPI_CALLS", 1000);
    let mut totals = Totals {
        counts: BTreeMap::new(),
        backends: BTreeMap::new(),
        fewer_devices: 0,
    };
    for (c, (var, value)) in CONFIGS.iter().enumerate() {
        for (k, capacity) in capacities.iter().enumerate() {
            let run_seed = seed
                .wrapping_mul(1000)
                .wrapping_add((c * CAPACITIES.len() + k) as u64);
            let mut cmd = Command::new(&exe);
            cmd.arg(run_seed.to_string())
                .arg(calls.to_string())
                .arg("3");
            common::clean_env(&mut cmd);
            device(&mut cmd, capacity);
            cmd.env(var, value)
                // stderr carries one report per refused call; only stdout is read.
                .stderr(Stdio::null());
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{var}={value} capacity {capacity}: {exe:?} {run_seed} {calls} 3 \
                 failed ({:?}):\n{stdout}",
                out.status,
            );
            let s = summary(&stdout);
            for (key, v) in &s {
                if let Ok(n) = v.parse::<u64>() {
                    *totals.counts.entry(key.clone()).or_default() += n;
                }
            }
            if s["devices"] != "3" {
                totals.fewer_devices += 1;
            }
            *totals.backends.entry(s["backend"].clone()).or_insert(0) += 1;
        }
    }
    eprintln!("u64_sizes: {:?} {:?}", totals.counts, totals.backends);
    // The runs reached what they are meant to: both outcomes, the top of the range, refusals.
    for key in [
        "allocated",
        "out_of_memory",
        "other_errors",
        "zero",
        "near_top",
        "refused",
        "bad_fractions",
    ] {
        assert!(totals.counts[key] > 0, "no {key} in {:?}", totals.counts);
    }
    assert_eq!(
        totals.backends.len(),
        3,
        "every backend ran: {:?}",
        totals.backends
    );
    totals
}

#[test]
fn sizes_across_u64_never_overlap_and_failures_change_nothing() {
    if Command::new("gcc").arg("--version").output().is_err() {
        return common::skip("gcc not found; the u64-wide C library test needs it");
    }
    let totals = run_matrix("u64_sizes_sim", CAPACITIES, |cmd, capacity| {
        cmd.env("CACHALOT_DEVICE", "sim")
            .env("CACHALOT_SIM_CAPACITY", capacity);
    });
    // The largest devices do not all fit below 2^64: the ones that do not refused to open.
    assert!(
        totals.fewer_devices > 0 && totals.fewer_devices < CONFIGS.len() * CAPACITIES.len(),
        "{} runs had fewer than 3 devices",
        totals.fewer_devices
    );
}

/// The simulated driver's capacities (`FAKE_CUDA_CAPACITY`, read as a double there: up to
/// 2^63 bytes exactly, where 8 × capacity of addresses wraps and the driver falls back to its
/// 64 GiB range).
const DRIVER_CAPACITIES: &[&str] = &["2M", "100M", "1G", "80G", "16T", "9223372036854775808"];

#[test]
fn sizes_across_u64_on_the_cuda_device_of_the_simulated_driver() {
    if Command::new("gcc").arg("--version").output().is_err() {
        return common::skip("gcc not found; the u64-wide C library test needs it");
    }
    let driver = match cachalot_testkit::simulated_driver() {
        Ok(d) => d,
        Err(why) => return common::skip(format!("u64 sizes on the simulated driver: {why}")),
    };
    let totals = run_matrix("u64_sizes_cuda", DRIVER_CAPACITIES, |cmd, capacity| {
        cmd.env("CACHALOT_DEVICE", "cuda")
            .envs(driver.env())
            .env("FAKE_CUDA_CAPACITY", capacity)
            .env("FAKE_CUDA_DEVICE_COUNT", "3");
        for v in ["FAKE_CUDA_LOG", "FAKE_CUDA_TOTAL", "FAKE_CUDA_RESERVED"] {
            cmd.env_remove(v);
        }
    });
    // Every device is a device of the driver: all three open, whatever the capacity.
    assert_eq!(totals.fewer_devices, 0);
}
