//! `cachalot config`: one line per option, the changed ones marked, bad input quoted.

fn config(arg: &str) -> std::process::Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), &["config", arg])
}

#[test]
fn marks_exactly_the_options_that_differ_from_the_default() {
    let out = config("max_split_size_mb:128,expandable_segments:True");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" *") && !l.starts_with('('))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(marked, ["max_split_size_mb", "expandable_segments"]);
    let unchanged = config("");
    let text = String::from_utf8(unchanged.stdout).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains(" *")).count(),
        0,
        "{text}"
    );
}

#[test]
fn a_bad_entry_is_quoted_with_torchs_message() {
    let out = config("max_split_size_mb:12");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("'max_split_size_mb:12'"), "{err}");
    assert!(
        err.contains("CachingAllocator option max_split_size_mb too small, must be >= 20"),
        "{err}"
    );
}

/// `cachalot config` and `cachalot replay` read the environment through the one settings path:
/// `--cachalot` stands in for `CACHALOT_ALLOC_CONF`, and the no-caching variables are read as
/// torch 2.15 reads them (`true` is ignored with torch's warning; the HIP spelling counts).
#[test]
fn the_environment_is_read_as_torch_reads_it() {
    let run = |args: &[&str], vars: &[(&str, &str)]| {
        let mut c = cachalot_testkit::command(env!("CARGO_BIN_EXE_cachalot"));
        c.args(args);
        c.envs(vars.iter().copied());
        let out = c.output().unwrap();
        assert!(out.status.success(), "{args:?} {vars:?}: {out:?}");
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (text(out.stdout), text(out.stderr))
    };
    let marked =
        |text: &str, key: &str| text.lines().any(|l| l.starts_with(key) && l.contains(" *"));
    let (out, _) = run(
        &[
            "config",
            "max_split_size_mb:128",
            "--cachalot",
            "research_after_flush:True",
        ],
        &[("CACHALOT_ALLOC_CONF", "expandable_oversize_exempt:True")],
    );
    assert!(
        marked(&out, "research_after_flush") && !marked(&out, "expandable_oversize_exempt"),
        "{out}"
    );
    let (out, _) = run(
        &["config", "max_split_size_mb:128"],
        &[("CACHALOT_ALLOC_CONF", "expandable_oversize_exempt:True")],
    );
    assert!(marked(&out, "expandable_oversize_exempt"), "{out}");

    let scratch = cachalot_testkit::scratch();
    let trace = scratch.path().join("nocache.csv");
    std::fs::write(&trace, "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,1000,0\n1,1,deallocate,0x1,0,0\n1,2,allocate,0x2,1000,0\n").unwrap();
    let device_allocs = |vars: &[(&str, &str)]| {
        let (out, err) = run(&["replay", trace.to_str().unwrap(), "--json"], vars);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (
            v["num_device_alloc"].as_u64().unwrap(),
            v["config_effective"]["allocator_name"].clone(),
            err,
        )
    };
    // With caching the second request reuses the cached block: one device allocation. The
    // oracle counts none without caching (torch's counter belongs to the caching path).
    assert_eq!(device_allocs(&[]).0, 1);
    for on in [
        ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
        ("PYTORCH_NO_HIP_MEMORY_CACHING", "1"),
    ] {
        let (n, name, _) = device_allocs(&[on]);
        assert_eq!((n, name), (0, serde_json::json!("native")), "{on:?}");
    }
    for bad in ["true", "True", " 1", "1 "] {
        let (n, _, err) = device_allocs(&[("PYTORCH_NO_CUDA_MEMORY_CACHING", bad)]);
        assert_eq!(n, 1, "{bad:?} keeps caching");
        assert!(err.contains("caching stays on"), "{err}");
    }
    std::fs::remove_file(&trace).unwrap();
}
