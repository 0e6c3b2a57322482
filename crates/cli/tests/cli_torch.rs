//! `replay --torch X.Y` and `compare --torch X.Y` make that release's decisions: a
//! `roundup_power2_divisions` list with `>` is read as torch 2.9 reads it (and the result is
//! torch 2.9's own allocator's where its oracle is built: `scripts/versions/oracle.sh 2.9`),
//! what the release rejects is refused as it would refuse it, what is not replayed is a
//! warning (2.12's tie order is replayed), and a bad `--torch` is exit 2 quoting it.

use std::process::Output;

use serde_json::Value;

const LIST: &str = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]";

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json(args: &[&str]) -> Value {
    let o = cachalot(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn gpt2() -> String {
    cachalot_testkit::fixture("traces/gpt2-train.csv.gz")
        .display()
        .to_string()
}

#[test]
fn replay_for_2_9_reads_a_roundup_list_as_2_9_does() {
    let trace = gpt2();
    let args = |torch: &'static str| {
        let mut a = vec![
            "replay",
            trace.as_str(),
            "--conf",
            LIST,
            "--capacity",
            "80G",
        ];
        if !torch.is_empty() {
            a.extend(["--torch", torch]);
        }
        a
    };
    let newest = json(&[args(""), vec!["--json"]].concat());
    let old = json(&[args("2.9.1+cu128"), vec!["--json"]].concat());
    assert_eq!(newest["torch"], "2.15");
    assert_eq!(old["torch"], "2.9");
    assert!(
        old.get("torch_warnings").is_none(),
        "{}",
        old["torch_warnings"]
    );
    assert_ne!(old["peak"], newest["peak"], "2.9 reads the list otherwise");
    // 2.10 reads it as 2.15 does
    let ten = json(&[args("2.10"), vec!["--json"]].concat());
    assert_eq!(ten["peak"], newest["peak"]);
    assert_eq!(ten["device_stats"], newest["device_stats"]);

    let o = cachalot(&args("2.9"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("decisions: torch 2.9's"), "{out}");
    assert!(out.contains("replayed as torch 2.9 decides"), "{out}");

    // the judge: torch 2.9's own allocator on the same trace and configuration
    let oracle = match cachalot_testkit::release_oracle("2.9") {
        Ok(o) => o,
        Err(why) => return cachalot_testkit::skip(why),
    };
    let theirs = cachalot_testkit::command(&oracle)
        .arg(&trace)
        .env("FAKE_CUDA_CAPACITY", (80u64 << 30).to_string())
        .env("PYTORCH_CUDA_ALLOC_CONF", LIST)
        .output()
        .unwrap();
    assert!(theirs.status.success(), "{}", text(&theirs.stderr));
    let theirs: Value = serde_json::from_slice(&theirs.stdout).unwrap();
    let mut diff = Vec::new();
    for field in cachalot_testkit::ORACLE_FIELDS {
        if let Some(t) = theirs.get(field) {
            cachalot_testkit::json_diff(field, &old[field], t, &mut diff);
        }
    }
    assert!(diff.is_empty(), "replay --torch 2.9 vs torch 2.9: {diff:?}");
    // and 2.15's reading is not torch 2.9's
    let mut diff = Vec::new();
    cachalot_testkit::json_diff("peak", &newest["peak"], &theirs["peak"], &mut diff);
    assert!(!diff.is_empty());
}

#[test]
fn what_a_release_rejects_is_refused_as_it_would() {
    for cmd in ["replay", "compare"] {
        let o = cachalot(&[
            cmd,
            "--conf",
            "expandable_segments:True,per_process_memory_fraction:0.9",
            "--torch",
            "2.9",
            "--capacity",
            "24G",
        ]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let err = text(&o.stderr);
        assert!(
            err.contains("torch 2.9 rejects the configuration 'expandable_segments:True,per_process_memory_fraction:0.9'"),
            "{cmd}: {err}"
        );
        assert!(err.contains("rejected before torch 2.10"), "{cmd}: {err}");
    }
    // 2.10 accepts it
    let o = cachalot(&[
        "replay",
        "--conf",
        "per_process_memory_fraction:0.9",
        "--torch",
        "2.10",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn bad_releases_are_exit_2_quoting_them() {
    for cmd in ["replay", "compare", "tune"] {
        for bad in ["2.16", "1.13.1", "two"] {
            let o = cachalot(&[cmd, "--torch", bad]);
            assert_eq!(o.status.code(), Some(2), "{cmd} --torch {bad}");
            let err = text(&o.stderr);
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("2.4 to 2.15"), "{err}");
        }
    }
}

#[test]
fn what_is_not_replayed_is_a_warning() {
    // torch 2.4 stops the program where expandable segments meet max_split_size_mb
    let conf = "expandable_segments:True,max_split_size_mb:128";
    let o = cachalot(&["replay", "--conf", conf, "--torch", "2.4", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = v["torch_warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].as_str().unwrap().contains("not torch 2.4's"), "{w:?}");
    assert!(text(&o.stderr).contains("warning: torch 2.4 decides otherwise"));
    // 2.12's own decisions are replayed (its tie order, TorchVersion::orders_ties_by_block_age):
    // no command warns about it, and 2.12's replay is not 2.11's or 2.13's where ties decide
    for args in [
        &["replay", "--no-explain"][..],
        &["compare", "--no-min-capacity", "-q"],
        &["tune", "--capacity", "24G", "--top", "1", "-q"],
    ] {
        let cmd = args[0];
        let v = json(&[args, &["--torch", "2.12", "--json"]].concat());
        assert_eq!(v["torch"], "2.12");
        assert!(v.get("torch_warnings").is_none(), "{cmd}: {v}");
    }
    let ties = cachalot_testkit::fixture("torch-versions/ties-2.12.csv");
    let segments = |torch: &str| {
        let v = json(&["replay", ties.to_str().unwrap(), "--torch", torch, "--json"]);
        v["num_device_alloc"].as_i64().unwrap()
    };
    assert_eq!(
        [segments("2.11"), segments("2.12"), segments("2.13")],
        [2, 1, 2]
    );
}

#[test]
fn compare_for_2_9_replays_each_row_as_2_9() {
    let trace = gpt2();
    let rows = |torch: &str| {
        let v = json(&[
            "compare",
            &trace,
            "--conf",
            LIST,
            "--capacity",
            "80G",
            "--no-min-capacity",
            "-q",
            "--torch",
            torch,
            "--json",
        ]);
        assert_eq!(v["torch"], torch);
        v["rows"].as_array().unwrap().clone()
    };
    let (old, newest) = (rows("2.9"), rows("2.15"));
    // the default decides alike; the list does not
    assert_eq!(old[0], newest[0]);
    let reserved = |row: &Value| row["result"]["peak_reserved"].clone();
    assert_ne!(reserved(&old[1]), reserved(&newest[1]), "{:?}", old[1]);
    // the row is replay --torch 2.9's replay
    let replayed = json(&[
        "replay",
        &trace,
        "--conf",
        LIST,
        "--capacity",
        "80G",
        "--torch",
        "2.9",
        "--json",
    ]);
    assert_eq!(reserved(&old[1]), replayed["peak"]["reserved_bytes"]);
}

#[test]
fn pytorch_alloc_conf_is_not_read_before_2_9() {
    let run = |torch: &str| {
        let o = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"))
            .args(["replay", "--torch", torch, "--json"])
            .env("PYTORCH_ALLOC_CONF", "expandable_segments:True")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        (
            serde_json::from_slice::<Value>(&o.stdout).unwrap(),
            text(&o.stderr),
        )
    };
    let (old, err) = run("2.8");
    assert!(
        err.contains("torch 2.8 does not read PYTORCH_ALLOC_CONF"),
        "{err}"
    );
    let (new, _) = run("2.9");
    let default = json(&["replay", "--torch", "2.8", "--json"]);
    assert_eq!(old["peak"], default["peak"]);
    assert_ne!(new["peak"], default["peak"]);
}

#[test]
fn replay_for_2_11_orders_equal_blocks_as_2_11_does() {
    // bert-finetune-varlen at its golden "tight" capacity: a cache flush frees equal-size
    // segments, in address order up to 2.11 and by segment age from 2.13
    let trace = cachalot_testkit::fixture("traces/bert-finetune-varlen.csv.gz")
        .display()
        .to_string();
    let capacity = "12415139840";
    let scratch = cachalot_testkit::scratch();
    let segments = |torch: &str| {
        let path = scratch.path().join(format!("{torch}.csv"));
        let o = cachalot(&[
            "replay",
            &trace,
            "--capacity",
            capacity,
            "--torch",
            torch,
            "--no-explain",
            "--segments",
            path.to_str().unwrap(),
        ]);
        assert!(
            o.status.code().is_some_and(|c| c <= 1),
            "{}",
            text(&o.stderr)
        );
        std::fs::read_to_string(&path).unwrap()
    };
    let (old, newest) = (segments("2.11"), segments("2.15"));
    assert_ne!(old, newest, "the device calls differ between 2.11 and 2.15");
    let oracle = match cachalot_testkit::release_oracle("2.11") {
        Ok(o) => o,
        Err(why) => return cachalot_testkit::skip(why),
    };
    let theirs = scratch.path().join("oracle.csv");
    let o = cachalot_testkit::command(&oracle)
        .arg("--segments")
        .arg(&theirs)
        .arg(&trace)
        .env("FAKE_CUDA_CAPACITY", capacity)
        .env("PYTORCH_CUDA_ALLOC_CONF", "")
        .output()
        .unwrap();
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{}",
        text(&o.stderr)
    );
    let theirs = std::fs::read_to_string(&theirs).unwrap();
    assert_eq!(
        cachalot_testkit::log_diff("device calls", &old, &theirs),
        None,
        "replay --torch 2.11 vs torch 2.11"
    );
}
