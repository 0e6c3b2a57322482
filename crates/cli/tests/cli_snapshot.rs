//! The snapshot-related commands end to end: `replay --summary/--json/--snapshot/--device`,
//! `convert` and `explain`, on the fixtures, with real values checked.

use cachalot_testkit::{fixtures, gunzip};
use std::path::Path;
use std::process::Output;

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

/// A replay that ran out of memory: exit status 1, the report on stdout.
fn out_of_memory(args: &[&str]) -> String {
    let out = cachalot(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "cachalot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = cachalot(args);
    assert!(
        out.status.success(),
        "cachalot {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn replay_summary_prints_torchs_table() {
    let trace = fixtures().join("traces/resnet50-train.csv.gz");
    let out = ok(&["replay", path(&trace), "--summary"]);
    let table: String = out
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    let golden =
        std::fs::read_to_string(fixtures().join("golden/resnet50-train/default.summary.txt"))
            .unwrap();
    assert_eq!(table, golden);
}

#[test]
fn replay_json_has_memory_stats() {
    let trace = fixtures().join("traces/resnet50-train.csv.gz");
    let out = out_of_memory(&["replay", path(&trace), "--json", "--capacity", "5215617024"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let golden: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("golden/resnet50-train/oom.memory_stats.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(v["memory_stats"], golden);
    assert_eq!(v["num_ooms"], 800);
}

#[test]
fn replay_snapshot_writes_a_pickle_that_reads_back_as_torchs() {
    let scratch = cachalot_testkit::scratch();
    let trace = fixtures().join("traces/resnet50-train.csv.gz");
    let out = scratch.path().join("r50.pickle");
    ok(&["replay", path(&trace), "--snapshot", path(&out)]);
    let ours = cachalot_torchfmt::read_snapshot(&std::fs::read(&out).unwrap()).unwrap();
    let theirs = cachalot_torchfmt::read_snapshot(&gunzip(
        &fixtures().join("pickle/resnet50-train.default.pickle.gz"),
    ))
    .unwrap();
    assert_eq!(ours.segments, theirs.segments);
    assert_eq!(ours.device_traces[0].entries.len(), 15680);
    // A ring of 100 entries keeps the last 100.
    let short = scratch.path().join("r50-100.pickle");
    ok(&[
        "replay",
        path(&trace),
        "--snapshot",
        path(&short),
        "--history-entries",
        "100",
    ]);
    let ring = cachalot_torchfmt::read_snapshot(&std::fs::read(&short).unwrap()).unwrap();
    assert_eq!(
        ring.device_traces[0].entries[..],
        ours.device_traces[0].entries[15580..]
    );
}

#[test]
fn replay_reads_snapshots_as_input_and_says_what_it_dropped() {
    // A ring-buffer window: the allocations live at its start are reconstructed and replayed
    // before it (447 live at its start, 222 of them freed by the window), and the
    // reconstruction is checked against the snapshot's own end state.
    let snap = fixtures().join("snapshots/cs336_bcrafton.json.gz");
    let csv = fixtures().join("traces/cs336_bcrafton.csv.gz");
    let a = cachalot(&["replay", path(&snap), "--json"]);
    assert!(a.status.success());
    let stderr = String::from_utf8_lossy(&a.stderr);
    assert!(
        stderr.contains("447 allocations live at its start"),
        "{stderr}"
    );
    assert!(
        stderr.contains("reconstruction check: MATCHES the snapshot"),
        "{stderr}"
    );
    assert!(stderr.contains("requested bytes equal"), "{stderr}");
    assert!(stderr.contains("reserved equal"), "{stderr}");
    let a: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let b: serde_json::Value =
        serde_json::from_str(&ok(&["replay", path(&csv), "--json"])).unwrap();
    assert_eq!(a["events"], b["events"].as_u64().unwrap() + 447 + 222);
    assert!(a["peak"]["allocated_bytes"].as_u64() > b["peak"]["allocated_bytes"].as_u64());
}

#[test]
fn replay_picks_a_device_of_a_multi_device_snapshot() {
    let snap = fixtures().join("snapshots/code_location_expandable_3gpu_oom.json.gz");
    let err = cachalot(&["replay", path(&snap)]);
    assert!(!err.status.success());
    let msg = String::from_utf8_lossy(&err.stderr);
    assert!(msg.contains("choose one (--device N)"), "{msg}");
    // Device 1 ran out of memory under its recorded expandable_segments:True: replayed at
    // its recorded capacity with its recorded configuration, the failed request (one more
    // allocation and its free) fails again.
    let out = out_of_memory(&["replay", path(&snap), "--device", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["events"], 376);
    assert_eq!(v["num_ooms"], 1);
}

#[test]
fn convert_writes_the_reference_csv() {
    let scratch = cachalot_testkit::scratch();
    for (input, reference, device) in [
        (
            "snapshots/select_n_multistream.json.gz",
            "traces/select_n_multistream.csv.gz",
            None,
        ),
        (
            "snapshots/code_location_expandable_3gpu_oom.json.gz",
            "traces/code_location_expandable_3gpu_oom.dev2.csv.gz",
            Some("2"),
        ),
    ] {
        let out = scratch.path().join("converted.csv");
        let mut args = vec![
            "convert".to_string(),
            path(&fixtures().join(input)).to_string(),
            path(&out).to_string(),
        ];
        if let Some(d) = device {
            args.extend(["--device".to_string(), d.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&args);
        // The reference rows, between the seal rows that make a truncated copy detectable.
        let want = cachalot_trace::seal_csv(gunzip(&fixtures().join(reference)).as_slice());
        assert!(std::fs::read(&out).unwrap() == want, "{input}");
    }
    // A pickle converts too, and the conversion replays like the original trace.
    let out = scratch.path().join("from-pickle.csv");
    ok(&[
        "convert",
        path(&fixtures().join("pickle/resnet50-train.default.pickle.gz")),
        path(&out),
    ]);
    let a: serde_json::Value =
        serde_json::from_str(&ok(&["replay", path(&out), "--json"])).unwrap();
    let b: serde_json::Value = serde_json::from_str(&ok(&[
        "replay",
        path(&fixtures().join("traces/resnet50-train.csv.gz")),
        "--json",
    ]))
    .unwrap();
    assert_eq!(a["device_stats"], b["device_stats"]);
}

#[test]
fn convert_to_a_gz_name_writes_gzip() {
    let scratch = cachalot_testkit::scratch();
    // Issue #9 item 7: `convert … x.csv.gz` wrote plain text under a gzip name.
    let input = fixtures().join("snapshots/cs336_magma.json.gz");
    let dir = scratch.path().join("convert-gz");
    std::fs::create_dir_all(&dir).unwrap();
    let (plain, gz) = (dir.join("magma.csv"), dir.join("magma.csv.gz"));
    ok(&["convert", path(&input), path(&plain)]);
    ok(&["convert", path(&input), path(&gz)]);
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(bytes[..2], [0x1f, 0x8b], "not gzip");
    assert!(gunzip(&gz) == std::fs::read(&plain).unwrap());
    // It reads back as the same trace.
    let a = ok(&["replay", path(&gz), "--json"]);
    let b = ok(&["replay", path(&plain), "--json"]);
    let stats =
        |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()["device_stats"].clone();
    assert_eq!(stats(&a), stats(&b));
    // Written atomically: no temporary file is left beside it.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn explain_reads_torchs_oom_snapshot() {
    let snap = fixtures().join("pickle/resnet50-train.oom-5G.pickle.gz");
    let out = ok(&["explain", path(&snap)]);
    assert!(out.contains("646 out-of-memory entries"), "{out}");
    assert!(
        out.contains("rebuilt by replaying the history up to it"),
        "{out}"
    );
    assert!(
        out.contains("646 out-of-memory errors (the snapshot records 646)"),
        "{out}"
    );
    // torch's last OOM: 0 bytes free on the device, 33.88 MiB reserved but unallocated (as
    // cachalot's own replay reports at its 646th OOM).
    assert!(out.contains("a request of 49.00 MiB (rounded)"), "{out}");
    assert!(out.contains("the device had 0 bytes free"), "{out}");
    let unallocated = out
        .lines()
        .find(|l| l.contains("reserved but unallocated"))
        .unwrap();
    assert!(unallocated.ends_with("33.88 MiB"), "{unallocated}");
    assert!(out.contains("why: not enough memory"), "{out}");
}

#[test]
fn explain_of_a_snapshot_at_the_oom_matches_the_replay() {
    let scratch = cachalot_testkit::scratch();
    let trace = fixtures().join("traces/resnet50-train.csv.gz");
    let snap = scratch.path().join("at-oom.pickle");
    let replayed = out_of_memory(&[
        "replay",
        path(&trace),
        "--capacity",
        "5G",
        "--max-oom-messages",
        "1",
    ]);
    out_of_memory(&[
        "replay",
        path(&trace),
        "--capacity",
        "5G",
        "--stop-at-oom",
        "--no-explain",
        "--snapshot",
        path(&snap),
    ]);
    let explained = ok(&["explain", path(&snap)]);
    let reading = |s: &str| -> Vec<String> {
        let start = s.find("out of memory on device").unwrap();
        s[start..]
            .lines()
            .take_while(|l| !l.contains("why:"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(reading(&replayed), reading(&explained));
    assert!(
        explained.contains("suggestion: add expandable_segments:True"),
        "{explained}"
    );
}

#[test]
fn bad_inputs_get_errors_that_quote_them() {
    let scratch = cachalot_testkit::scratch();
    let bad = scratch.path().join("bad.json");
    std::fs::write(&bad, br#"{"segments": [{"device": 0}]}"#).unwrap();
    let out = cachalot(&["replay", path(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("bad.json"), "{msg}");
    assert!(
        msg.contains("snapshot field segments[0]: missing key 'address'"),
        "{msg}"
    );
    let trunc = scratch.path().join("trunc.pickle");
    let full = gunzip(&fixtures().join("pickle/resnet50-train.default.pickle.gz"));
    std::fs::write(&trunc, &full[..1000]).unwrap();
    let msg = String::from_utf8_lossy(&cachalot(&["explain", path(&trunc)]).stderr).to_string();
    assert!(
        msg.contains("truncated: a frame of 65540 bytes starts here"),
        "{msg}"
    );
    let msg = String::from_utf8_lossy(
        &cachalot(&[
            "explain",
            path(&fixtures().join("snapshots/cs336_magma.json.gz")),
        ])
        .stderr,
    )
    .to_string();
    assert!(msg.contains("history has no `oom` entry"), "{msg}");
}
