//! Builds `tests/c/pools.c` against the library and runs it on the simulated device: a
//! MemPool's life (its segment is kept by `empty_cache` while referenced, freed by `del pool`),
//! a pool that takes one stream only, and misuse reported with torch's message. Skipped (with
//! the reason printed) without gcc.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::build_c_program;

#[test]
fn pools_through_the_c_library() {
    if Command::new("gcc").arg("--version").output().is_err() {
        common::skip("gcc not found; the pools C program test needs it");
        return;
    }
    let exe = build_c_program("pools.c", "pools");
    let mut cmd = Command::new(&exe);
    common::clean_env(&mut cmd);
    cmd.env("CACHALOT_DEVICE", "sim");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pools.c failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once(' ')).collect();
    let mib20 = (20u64 << 20).to_string();
    for (key, want) in [
        ("create", "0"),
        ("begin", "0"),
        ("end", "0"),
        ("release_exit", "0"),
        ("count_after_with", "1"),
        ("outside_reuses_pool_block", "0"),
        ("reserved_before_empty", &(40u64 << 20).to_string()[..]),
        ("reserved_after_empty", &mib20[..]),
        ("release_del", "0"),
        ("empty_pool", "0"),
        ("reserved_after_del", "0"),
        ("count_after_del", "-1"),
        ("graph_begin", "0"),
        ("graph_end", "0"),
        ("segments_two_pools", "2"),
        ("end_again", "-1"),
        (
            "end_again_error",
            "endAllocatePool: not currently recording to mempool_id",
        ),
        ("release_unknown", "-1"),
    ] {
        assert_eq!(got.get(key).copied(), Some(want), "{key}\n{stdout}");
    }
}
