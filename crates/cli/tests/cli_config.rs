//! `cachalot config`: one line per option, the changed ones marked, bad input quoted.

use std::process::Command;

fn config(arg: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(["config", arg])
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("CACHALOT_ALLOC_CONF")
        .output()
        .unwrap()
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
