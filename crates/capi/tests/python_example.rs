//! `examples/use_from_torch.py --selftest`: the example's ctypes calls, on the simulated device
//! (no torch, no GPU). Skipped, with the reason printed, without python3.

mod common;

use std::process::Command;

use common::{clean_env, crate_dir, library};

#[test]
fn python_ctypes_example_runs_on_the_simulated_device() {
    if Command::new("python3").arg("--version").output().is_err() {
        common::skip("python3 not found");
        return;
    }
    let mut cmd = Command::new("python3");
    cmd.arg(crate_dir().join("examples/use_from_torch.py"))
        .arg("--selftest")
        .arg(library());
    clean_env(&mut cmd);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SELFTEST OK "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["allocation.all.allocated"], 4);
    // 1 MiB is a small-pool request (a 2 MiB segment); 3, 5 and 12 MiB are carved from one
    // 20 MiB segment.
    assert_eq!(v["num_device_alloc"], 2);
    assert_eq!(v["num_device_free"], 2);
    assert!(stderr.contains("ignored free of 0xdead000"), "{stderr}");
}

#[test]
fn without_a_gpu_the_example_says_so_and_runs_the_selftest() {
    // Issue #9 item 7: without `--selftest` the example needed torch and a GPU. With no GPU
    // visible (and with or without torch installed) it now says why and runs the self-test.
    if Command::new("python3").arg("--version").output().is_err() {
        common::skip("python3 not found");
        return;
    }
    let mut cmd = Command::new("python3");
    cmd.arg(crate_dir().join("examples/use_from_torch.py"))
        .arg(library());
    clean_env(&mut cmd);
    cmd.env("CUDA_VISIBLE_DEVICES", "");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("running the self-test instead"), "{stdout}");
    assert!(
        stdout.contains("torch is not installed") || stdout.contains("sees no CUDA GPU"),
        "{stdout}"
    );
    assert!(stdout.contains("SELFTEST OK "), "{stdout}");
}
