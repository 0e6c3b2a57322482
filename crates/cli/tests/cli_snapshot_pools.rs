//! The commands on torch snapshots with private-pool segments (tests/fixtures/snapshots/pools,
//! recorded by torch 2.15 on the fake GPU): they replay into the pools and say so, and the
//! conversion replayed by torch's own allocator (the oracle) ends with the snapshot's pools.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

fn fixture(name: &str) -> String {
    cachalot_testkit::fixtures()
        .join(format!("snapshots/pools/{name}.pickle.gz"))
        .to_string_lossy()
        .into_owned()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const MIB: u64 = 1 << 20;

#[test]
fn replay_checks_the_ring_buffer_per_pool_and_reports_the_pools() {
    let out = cachalot(&["replay", &fixture("mempool-ring")]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("reconstruction check: MATCHES"), "{stderr}");
    for pool in ["(0, 1)", "(0, 4)", "(0, 5)"] {
        assert!(
            stderr.contains(&format!("private pool {pool}: equal")),
            "{stderr}"
        );
        assert!(stdout.contains(&format!("MemPool {pool}")), "{stdout}");
    }
}

#[test]
fn replay_json_has_the_snapshots_pools() {
    let out = cachalot(&["replay", &fixture("mempool-full"), "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pools = v["pools"].as_array().unwrap();
    let find = |id: [u64; 2]| {
        pools
            .iter()
            .find(|p| p["mempool_id"] == serde_json::json!(id))
            .unwrap_or_else(|| panic!("no pool {id:?} in {pools:?}"))
    };
    let outer = find([0, 1]);
    assert_eq!(outer["kind"], "mempool");
    assert_eq!(outer["use_count"], 1);
    assert_eq!(outer["segments"]["count"], 3);
    assert_eq!(outer["segments"]["total_size"], 42 * MIB);
    assert_eq!(outer["segments"]["allocated_size"], 12 * MIB);
    let graph = find([1, 0]);
    assert_eq!(graph["kind"], "graph");
    assert!(graph["use_count"].is_null(), "released and forgotten");
    assert_eq!(find([0, 2])["segments"]["count"], 0);
}

#[test]
fn tune_and_compare_report_the_pools() {
    let out = cachalot(&["tune", &fixture("mempool-full"), "--capacity", "1G"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for want in [
        "MemPool (0, 1)",
        "graph pool (1, 0)",
        "pools still referenced",
    ] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
    let out = cachalot(&[
        "compare",
        &fixture("mempool-full"),
        "--conf",
        "expandable_segments:True",
        "--capacity",
        "1G",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("MemPool (0, 1) 42.00 MiB"), "{stdout}");
}

#[test]
fn explain_counts_the_pools_free_memory_apart() {
    let out = cachalot(&["explain", &fixture("mempool-oom")]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("in other pools (not the request's)"),
        "{stdout}"
    );
    assert!(stdout.contains("private pools: 60.00 MiB"), "{stdout}");
    assert!(!stdout.contains("#189504"), "{stdout}");
}

#[test]
fn the_conversion_replayed_by_torchs_allocator_ends_with_the_snapshots_pools() {
    let dir = std::env::temp_dir().join(format!("cachalot-snappools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv: PathBuf = dir.join("mempool-full.csv");
    let out = cachalot(&["convert", &fixture("mempool-full"), csv.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out).1);
    let rows = std::fs::read_to_string(&csv).unwrap();
    // MemPools (0, 1), (0, 2); the graph's (1, 0) gets 3, a number no MemPool has.
    for row in [
        "pool_begin,1,0,*",
        "pool_release,2,0,0",
        "graph_begin,3,0,*",
    ] {
        assert!(rows.contains(row), "{row}: {rows}");
    }
    let oracle = match cachalot_testkit::oracle() {
        Ok(o) => o,
        Err(why) => {
            cachalot_testkit::skip(why);
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    };
    let out = cachalot_testkit::output(&oracle, &[csv.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", text(&out).1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The snapshot: 76 MiB reserved, 34.29 MiB allocated; pool (0, 1) 3 segments, 42 MiB
    // reserved, 12 MiB allocated; the others given back.
    assert_eq!(v["final"]["reserved_bytes"], 79_691_776);
    assert_eq!(v["final"]["allocated_bytes"], 35_951_616);
    assert_eq!(v["final"]["requested_bytes"], 35_951_584);
    let pool = |id: [u64; 2]| {
        v["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["mempool_id"] == serde_json::json!(id))
            .unwrap()
            .clone()
    };
    assert_eq!(pool([0, 1])["segments"]["count"], 3);
    assert_eq!(pool([0, 1])["segments"]["total_size"], 42 * MIB);
    assert_eq!(pool([0, 1])["segments"]["allocated_size"], 12 * MIB);
    for gone in [[0, 2], [3, 0]] {
        assert_eq!(pool(gone)["segments"]["count"], 0, "{gone:?}");
        assert!(pool(gone)["use_count"].is_null(), "{gone:?}");
    }
}
