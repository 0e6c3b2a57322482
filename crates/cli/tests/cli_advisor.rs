//! `cachalot tune` and `cachalot compare` as a user runs them: output, JSON, HTML, and clear
//! errors for bad input.

use std::process::Output;

use serde_json::Value;

fn cachalot(args: &[&str]) -> Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fixture(name: &str) -> String {
    cachalot_testkit::fixture("traces")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn tune_on_the_bundled_trace_prints_a_line_to_paste() {
    // The bundled GPT-2 training trace on a 16.8 GiB device (its golden "tight" capacity):
    // the default retries once; expandable segments do not.
    let o = cachalot(&["tune", "--capacity", "17216M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("<bundled gpt2-train.csv.gz>"), "{out}");
    assert!(
        out.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{out}"
    );
    assert!(
        out.contains("why: avoids 1 of the default's 1 retries"),
        "{out}"
    );
    assert!(out.contains("max_split_size_mb:128"), "{out}");
}

#[test]
fn tune_json_and_html() {
    let scratch = cachalot_testkit::scratch();
    let page = scratch.path().join("tune.html");
    let o = cachalot(&[
        "tune",
        &fixture("resnet50-train.csv.gz"),
        "--capacity",
        "5632M",
        "--json",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["capacity"], 5632u64 << 20);
    assert_eq!(v["recommended"], "expandable_segments:True");
    assert_eq!(v["default"]["result"]["num_alloc_retries"], 7);
    assert_eq!(v["ranking"][0]["result"]["num_alloc_retries"], 0);
    let html = std::fs::read_to_string(&page).unwrap();
    let doc = roxmltree::Document::parse(html.trim_start_matches("<!DOCTYPE html>")).unwrap();
    let sections = doc
        .descendants()
        .filter(|n| n.has_tag_name("section"))
        .count();
    assert!(sections >= 3, "best three, default and advice: {sections}");
    assert!(!html.contains("https://") && !html.contains("<script"));
    // Issue #9 item 7: a config string never wraps. It sits in <code>, styled nowrap.
    let style = doc
        .descendants()
        .find(|n| n.has_tag_name("style"))
        .and_then(|n| n.text())
        .unwrap();
    let code = style
        .split('}')
        .find(|r| r.trim_start().starts_with("code{"))
        .unwrap();
    assert!(code.contains("white-space:nowrap"), "{code}");
    assert!(doc.descendants().any(|n| {
        n.has_tag_name("code")
            && n.text()
                .is_some_and(|t| t.contains("expandable_segments:True"))
    }));
}

#[test]
fn help_says_tune_compare_and_replay_read_snapshots() {
    // Issue #9 item 7: the help texts said "RMM memory-log CSV" only.
    for cmd in ["tune", "compare", "replay"] {
        let o = cachalot(&[cmd, "--help"]);
        assert!(o.status.success());
        let out = stdout(&o);
        assert!(out.contains("torch memory snapshot"), "{cmd}: {out}");
        assert!(out.contains("RMM memory-log CSV"), "{cmd}: {out}");
    }
}

#[test]
fn tune_min_capacity() {
    let o = cachalot(&["tune", "--min-capacity", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let cap = v["min_capacity"].as_u64().unwrap();
    assert_eq!(cap % (64 << 20), 0);
    // The default needs 17216 MiB (golden "tight"); something else needs less.
    let default = v["seeds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["PYTORCH_CUDA_ALLOC_CONF"] == "")
        .unwrap();
    assert_eq!(default["min_capacity"], 17216u64 << 20);
    assert!(cap < 17216 << 20);
    assert_eq!(v["tune"]["ranking"][0]["result"]["num_ooms"], 0);
}

#[test]
fn compare_rows_default_first() {
    let o = cachalot(&[
        "compare",
        "--conf",
        "max_split_size_mb:128",
        "--conf",
        "expandable_segments:True",
        "--capacity",
        "17216M",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["PYTORCH_CUDA_ALLOC_CONF"], "");
    assert_eq!(rows[0]["min_capacity"], 17216u64 << 20);
    assert_eq!(rows[1]["result"]["num_alloc_retries"], 4);
    let text = cachalot(&["compare", "--conf", "expandable_segments:True", "-q"]);
    assert!(text.status.success());
    assert!(stdout(&text).contains("(default)"));
}

#[test]
fn cost_overrides_change_the_estimate() {
    let scratch = cachalot_testkit::scratch();
    let run = |extra: &[&str]| {
        let mut args = vec!["compare", "--no-min-capacity", "--json", "-q"];
        args.extend_from_slice(extra);
        let o = cachalot(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["rows"][0]["result"]["estimated_device_time_us"]
            .as_f64()
            .unwrap()
    };
    let base = run(&[]);
    let more = run(&["--cost", "cuda_malloc_us=150"]);
    // The default configuration makes 197 cudaMallocs on the bundled trace.
    assert!((more - base - 197.0 * 100.0).abs() < 1e-6, "{base} {more}");
    let file = scratch.path().join("cost.json");
    std::fs::write(&file, r#"{"cuda_malloc_us": 150}"#).unwrap();
    assert_eq!(run(&["--cost-model", file.to_str().unwrap()]), more);
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let o = cachalot(args);
    assert!(!o.status.success(), "{args:?} should fail");
    let err = stderr(&o);
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected {n:?} in:\n{err}");
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let scratch = cachalot_testkit::scratch();
    fails_with(
        &["compare", "--conf", "no_such_key:1"],
        &["'no_such_key:1'", "unknown key 'no_such_key'"],
    );
    fails_with(&["tune", "--capacity", "0"], &["'0'", "at least 1 byte"]);
    fails_with(&["tune", "--capacity", "12Q"], &["'12Q'", "unknown unit"]);
    fails_with(&["compare", "--capacity", "12Q"], &["'12Q'"]);
    fails_with(&["tune"], &["--capacity"]);
    fails_with(
        &["tune", "--capacity", "24G", "--cost", "warp_speed_us=1"],
        &["'warp_speed_us'"],
    );
    fails_with(
        &["tune", "--capacity", "24G", "--cost", "cuda_free_us=fast"],
        &["'fast'"],
    );
    fails_with(
        &["tune", "/no/such/trace.csv", "--capacity", "24G"],
        &["/no/such/trace.csv"],
    );
    let empty = scratch.path().join("empty.csv");
    std::fs::write(&empty, "Thread,Time,Action,Pointer,Size,Stream\n").unwrap();
    fails_with(
        &["tune", empty.to_str().unwrap(), "--capacity", "24G"],
        &["no allocation events"],
    );
    fails_with(
        &["compare", empty.to_str().unwrap()],
        &["no allocation events"],
    );
    let blank = scratch.path().join("blank.csv");
    std::fs::write(&blank, "").unwrap();
    let o = cachalot(&["tune", blank.to_str().unwrap(), "--capacity", "24G"]);
    assert!(!o.status.success());
    assert!(!stderr(&o).is_empty());
}

#[test]
fn gpu_list_prints_the_table_with_its_sources() {
    let o = cachalot(&["tune", "--gpu", "list"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for key in ["t4", "a100-40gb", "h100", "h200"] {
        assert!(text.lines().any(|l| l.starts_with(key)), "{key}:\n{text}");
    }
    assert!(text.contains("15843721216 bytes"), "{text}");
}
