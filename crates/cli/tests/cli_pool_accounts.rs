//! The pool accounts in `replay`, `tune` and `compare` (text and `--json`): shown for traces
//! that use private pools, agreeing with the commands' own peaks, and absent for the others.

use cachalot_testkit::fixtures;
use serde_json::Value;
use std::process::Output;

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

fn stdout(args: &[&str]) -> String {
    let out = cachalot(args);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "cachalot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&stdout(args)).unwrap()
}

/// The pools of an account, by kind: (reserved, live) of the default pools and of the rest.
fn split(account: &Value) -> ((u64, u64), (u64, u64)) {
    let mut default = (0, 0);
    let mut private = (0, 0);
    for p in account["pools"].as_array().unwrap() {
        let r = (p["reserved"].as_u64().unwrap(), p["live"].as_u64().unwrap());
        let to = if p["kind"] == "default" {
            &mut default
        } else {
            &mut private
        };
        to.0 += r.0;
        to.1 += r.1;
    }
    (default, private)
}

#[test]
fn pool_traces_show_each_pools_share_of_the_peaks() {
    let trace = fixtures().join("pools").join("example_graph_capture.csv");
    let t = trace.to_str().unwrap();
    // replay: the accounts' totals are the replay's own peaks.
    let v = json(&["replay", t, "--capacity", "64M", "--json"]);
    let acc = &v["pool_accounts"];
    let (d, p) = split(&acc["at_peak_reserved"]);
    assert_eq!(d.0 + p.0, v["peak"]["reserved_bytes"].as_u64().unwrap());
    assert!(p.0 > 0, "the graph pool holds part of the peak: {acc}");
    let (d, p) = split(&acc["at_peak_allocated"]);
    assert_eq!(d.1 + p.1, v["peak"]["allocated_bytes"].as_u64().unwrap());
    let end = &acc["at_end"]["empty_cache"];
    let kept = ["releasable", "kept_next_to_live", "kept_referenced"]
        .map(|k| end[k].as_u64().unwrap())
        .iter()
        .sum::<u64>();
    let (d, p) = split(&acc["at_end"]);
    assert_eq!(
        kept,
        d.0 + p.0 - d.1 - p.1,
        "free bytes = given back + kept"
    );
    let text = stdout(&["replay", t, "--capacity", "64M"]);
    assert!(text.contains("was in graph pool (1, 0)"), "{text}");
    assert!(
        text.contains("empty_cache() at the end: gives back"),
        "{text}"
    );

    // tune: the recommended configuration's account peaks where its row says.
    let v = json(&["tune", t, "--capacity", "64M", "--json", "-q"]);
    let rec = &v["pool_accounts"]["recommended"]["at_peak_reserved"];
    let best = &v["ranking"][0]["result"];
    assert_eq!(v["ranking"][0]["PYTORCH_CUDA_ALLOC_CONF"], v["best"]);
    let (d, p) = split(rec);
    assert_eq!(d.0 + p.0, best["peak_reserved"].as_u64().unwrap());
    let text = stdout(&["tune", t, "--capacity", "64M", "-q"]);
    assert!(
        text.contains("pools with the recommended configuration"),
        "{text}"
    );

    // tune --min-capacity: the account of the search at the capacity found.
    let v = json(&["tune", t, "--min-capacity", "--json", "-q"]);
    let m = &v["tune"];
    let (d, p) = split(&m["pool_accounts"]["recommended"]["at_peak_reserved"]);
    assert_eq!(
        d.0 + p.0,
        m["ranking"][0]["result"]["peak_reserved"].as_u64().unwrap()
    );

    // compare: every row has its account.
    let v = json(&[
        "compare",
        t,
        "--capacity",
        "64M",
        "--conf",
        "expandable_segments:True",
        "--no-min-capacity",
        "--json",
        "-q",
    ]);
    for row in v["rows"].as_array().unwrap() {
        let (d, p) = split(&row["pool_accounts"]["at_peak_reserved"]);
        assert_eq!(d.0 + p.0, row["result"]["peak_reserved"].as_u64().unwrap());
    }
}

#[test]
fn traces_without_pools_print_no_pool_accounts() {
    let trace = fixtures()
        .join("traces")
        .join("cs336_wedsonlin_medium_ctx1024_inference.csv.gz");
    let t = trace.to_str().unwrap();
    for args in [
        vec!["replay", t, "--capacity", "2G"],
        vec!["tune", t, "--capacity", "2G", "-q", "--top", "2"],
        vec!["compare", t, "--capacity", "2G", "--no-min-capacity", "-q"],
    ] {
        // The trace's own path may contain the word (a checkout under a folder named so).
        let text = stdout(&args).replace(t, "<trace>");
        assert!(!text.contains("pools"), "{args:?}: {text}");
        let mut with_json = args.clone();
        with_json.push("--json");
        assert!(!stdout(&with_json).contains("pool_accounts"), "{args:?}");
    }
}

/// vllm#49151's shape (`tests/fixtures/pool_accounts/mempool_growth.csv`): 2 GiB of weights
/// in the default pools, then inside `use_mem_pool` 40 steps that each allocate a tensor
/// 10 MiB larger than the last (200 … 590 MiB) and free the last one. No cached block fits the
/// next request, so the pool grows by a segment per step while its live tensors stay one or
/// two; `empty_cache()` keeps all of it while the pool is referenced. The expected numbers are
/// the sums of those sizes (torch 2.15's allocator, the oracle, gives the same peak).
#[test]
fn a_growing_mempool_is_named_with_what_empty_cache_keeps() {
    const MIB: u64 = 1 << 20;
    let trace = fixtures().join("pool_accounts").join("mempool_growth.csv");
    let t = trace.to_str().unwrap();
    let v = json(&["replay", t, "--capacity", "24G", "--json"]);
    let acc = &v["pool_accounts"]["at_peak_reserved"];
    let pool = acc["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["mempool_id"] == serde_json::json!([0, 1]))
        .unwrap();
    let segments: u64 = (0..40).map(|k| (200 + 10 * k) * MIB).sum();
    let live = (580 + 590) * MIB;
    assert_eq!(pool["reserved"].as_u64().unwrap(), segments);
    assert_eq!(pool["live"].as_u64().unwrap(), live);
    assert_eq!(pool["kept_referenced"].as_u64().unwrap(), segments - live);
    assert_eq!(pool["releasable"].as_u64().unwrap(), 0);
    assert_eq!(pool["status"], "open");
    assert_eq!(acc["reserved"].as_u64().unwrap(), 2048 * MIB + segments);
    // At the end the pool is released and emptied: only the weights are left.
    let end = &v["pool_accounts"]["at_end"];
    assert_eq!(end["reserved"].as_u64().unwrap(), 2048 * MIB);
    let own = &v["pool_accounts"]["own_peak_reserved"][1];
    assert_eq!(own["peak_reserved"].as_u64().unwrap(), segments);
    let text = stdout(&["replay", t, "--capacity", "24G"]);
    assert!(
        text.contains("of the 17.43 GiB peak reserved, 15.43 GiB (89%) was in MemPool (0, 1); it held 1.14 GiB of live tensors then"),
        "{text}"
    );
    assert!(
        text.contains("MemPool (0, 1) keeps 14.29 GiB free"),
        "{text}"
    );
}

/// `pool_oom_held`: a MemPool keeps a free 40 MiB segment while referenced, so a 70 MiB
/// request fails on a 100 MiB device. The account after that out-of-memory names the pool:
/// the retry freed what it could, and the 40 MiB are held by the referenced pool, which the
/// out-of-memory explanation names as the cause.
#[test]
fn after_an_out_of_memory_the_account_names_the_pool_that_holds_the_memory() {
    let trace = fixtures().join("pools").join("pool_oom_held.csv");
    let t = trace.to_str().unwrap();
    let v = json(&["replay", t, "--capacity", "100M", "--json"]);
    assert_eq!(v["num_ooms"], 1);
    let acc = &v["pool_accounts"]["at_first_oom"];
    assert_eq!(acc["reserved"].as_u64().unwrap(), 40 << 20);
    assert_eq!(acc["empty_cache"]["releasable"], 0);
    assert_eq!(
        acc["empty_cache"]["kept_referenced"].as_u64().unwrap(),
        40 << 20
    );
    let text = stdout(&["replay", t, "--capacity", "100M"]);
    assert!(
        text.contains("pools after the first out-of-memory (line 6): 40.00 MiB reserved"),
        "{text}"
    );
    assert!(
        text.contains("MemPool (0, 1) keeps 40.00 MiB free"),
        "{text}"
    );
    // The explanation knows the request went to the default pools, so the MemPool's free
    // segment is neither "releasable" nor fragmentation.
    assert!(text.contains("why: private pools: 40.00 MiB"), "{text}");
    assert!(!text.contains("why: fragmentation"), "{text}");
}
