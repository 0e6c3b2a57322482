//! Builds `tests/c/exercise.c` against `include/cachalot.h` and `libcachalot_capi.so` with gcc,
//! runs it on the simulated device, and checks what it prints: allocations across 8 threads,
//! 4 streams and 2 devices, the hooks, torch's statistics, summary and snapshot, and that
//! misuse is reported without aborting. Skipped (with the reason printed) without gcc.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{crate_dir, library, scratch};
use serde_json::Value;

const MIB: i64 = 1 << 20;

/// Compiles the C program once per test process; `None` (skip) when there is no gcc.
fn build() -> Option<PathBuf> {
    static EXE: OnceLock<Option<PathBuf>> = OnceLock::new();
    EXE.get_or_init(compile).clone()
}

fn compile() -> Option<PathBuf> {
    let lib = library();
    let dir = lib.parent().unwrap();
    let exe = scratch("exercise");
    let part = common::partial(&exe);
    let mut gcc = cachalot_testkit::compiler("gcc")?;
    gcc.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("tests/c/exercise.c"))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lcachalot_capi", "-o"])
        .arg(&part);
    cachalot_testkit::succeed(&mut gcc);
    common::install(&part, &exe);
    Some(exe)
}

fn run(exe: &PathBuf, mode: &str, conf: Option<&str>) -> (Output, String, String) {
    run_on(exe, mode, conf, "sim")
}

fn run_on(exe: &PathBuf, mode: &str, conf: Option<&str>, device: &str) -> (Output, String, String) {
    let snapshot = scratch(&format!("snapshot-{mode}.pickle"));
    let mut cmd = Command::new(exe);
    cmd.args([mode, snapshot.to_str().unwrap()]);
    common::clean_env(&mut cmd);
    cmd.env("CACHALOT_DEVICE", device);
    if let Some(c) = conf {
        cmd.env("PYTORCH_CUDA_ALLOC_CONF", c);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "exercise {mode} failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (out, stdout, stderr)
}

fn stats(stdout: &str, tag: &str) -> BTreeMap<String, i64> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no {tag} line in:\n{stdout}"));
    let v: Value = serde_json::from_str(line).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
        .collect()
}

#[test]
fn c_program_on_the_native_backend() {
    let Some(exe) = build() else { return };
    let (_, out, err) = run(&exe, "native", Some("max_split_size_mb:256"));
    assert!(out.contains("FIRST 0x100000000000"), "{out}");
    let s0 = stats(&out, "STATS0");
    assert_eq!(s0.len(), 123, "torch's 123 keys");
    assert_eq!(s0["allocation.all.current"], 0);
    assert_eq!(s0["allocation.all.allocated"], 1 + 8 * 2000);
    assert_eq!(s0["allocated_bytes.all.current"], 0);
    assert_eq!(s0["max_split_size"], 256 * MIB);
    assert!(s0["reserved_bytes.all.current"] > 0);
    assert!(s0["num_device_alloc"] > 0);
    assert_eq!(s0["num_ooms"], 0);
    let s1 = stats(&out, "STATS1");
    assert_eq!(s1["allocation.all.current"], 1);
    assert_eq!(s1["allocated_bytes.all.current"], 5 * MIB);
    assert_eq!(s1["reserved_bytes.all.current"], 20 * MIB);
    // empty_cache: device 0 gives everything back, device 1 keeps its live segment.
    assert_eq!(stats(&out, "RESET0")["reserved_bytes.all.current"], 0);
    assert_eq!(
        stats(&out, "RESET1")["reserved_bytes.all.current"],
        20 * MIB
    );
    let f0 = stats(&out, "FINAL0");
    assert_eq!(f0["num_ooms"], 0, "accumulated stats were reset");
    assert_eq!(f0["allocation.all.allocated"], 0);
    // Misuse was reported on stderr, three times, and nothing aborted.
    assert_eq!(err.matches("cachalot: ignored free of").count(), 3, "{err}");
    assert!(out.contains("DONE"));
    // torch's summary table.
    let summary = &out[out.find("SUMMARY-BEGIN").unwrap()..out.find("SUMMARY-END").unwrap()];
    assert!(
        summary.contains("PyTorch CUDA memory summary, device ID 0"),
        "{summary}"
    );
    assert!(summary.contains("Allocated memory"), "{summary}");
    // The snapshot pickle.
    assert!(out.contains("SNAPSHOT 0"), "{out}");
    let pickle = std::fs::read(scratch("snapshot-native.pickle")).unwrap();
    assert_eq!(&pickle[..2], b"\x80\x04", "pickle protocol 4");
    check_pickle_with_python(&scratch("snapshot-native.pickle"));
}

/// With python3 at hand, the snapshot must unpickle with torch's keys.
fn check_pickle_with_python(path: &std::path::Path) {
    let code = "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); \
                print(sorted(d)); print(len(d['segments']), len(d['device_traces']), len(d['device_traces'][0]))";
    match Command::new("python3")
        .args(["-c", code])
        .arg(path)
        .output()
    {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("'segments'") && text.contains("'device_traces'"),
                "{text}"
            );
            let counts: Vec<usize> = text
                .lines()
                .nth(1)
                .unwrap()
                .split(' ')
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(
                counts[0] >= 1,
                "segments of the live allocation on device 1: {text}"
            );
            assert_eq!(counts[1], 2, "one history per device: {text}");
            assert!(
                counts[2] > 16_000,
                "the history of device 0 was recorded: {text}"
            );
        }
        Ok(o) => panic!(
            "python3 could not read the snapshot: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => common::skip("python3 not found: the snapshot was checked by its header only"),
    }
}

#[test]
fn c_program_on_the_async_backend() {
    let Some(exe) = build() else { return };
    let (_, out, _) = run(&exe, "async", Some("backend:cudaMallocAsync"));
    let s0 = stats(&out, "STATS0");
    // torch's cudaMallocAsync statistics: only the pool's byte counts.
    assert_eq!(s0["allocation.all.allocated"], 0);
    assert_eq!(s0["allocated_bytes.all.current"], 0);
    assert!(s0["allocated_bytes.all.peak"] > 0);
    assert_eq!(
        s0["reserved_bytes.all.peak"],
        s0["allocated_bytes.all.peak"]
    );
    assert_eq!(s0["max_split_size"], 0);
    let s1 = stats(&out, "STATS1");
    // (the pool counts what the device charged: 5 MiB rounded up to 2 MiB pages)
    assert_eq!(s1["allocated_bytes.all.current"], 6 * MIB);
    assert!(
        out.contains("SNAPSHOT -2"),
        "no snapshot of the async backend: {out}"
    );
    assert!(out.contains("DONE"));
}

#[test]
fn c_program_with_a_bad_configuration() {
    let Some(exe) = build() else { return };
    let (_, out, err) = run(&exe, "bad-config", Some("max_split_size_mb:1"));
    assert!(out.contains("BAD-CONFIG-OK"), "{out}");
    assert!(err.contains("max_split_size_mb"), "{err}");
    assert_eq!(
        err.matches("configuration rejected").count(),
        1,
        "reported once: {err}"
    );
}

#[test]
fn c_program_without_cuda_reports_and_does_not_abort() {
    let Some(exe) = build() else { return };
    if cachalot::CudaDevice::new(0).is_ok() {
        return common::skip("this machine has a GPU; the no-CUDA path cannot be shown here");
    }
    let (_, out, err) = run_on(&exe, "cuda-absent", None, "cuda");
    assert!(out.contains("CUDA-ABSENT-OK"), "{out}");
    assert_eq!(
        err.matches("no CUDA driver found").count(),
        1,
        "reported once: {err}"
    );
    assert!(err.contains("ignored free of 0x1000"), "{err}");
}
