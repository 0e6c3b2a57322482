//! `cachalot … | head`: a reader that stops early is a normal end, not an error or a panic.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn closing_stdout_early_ends_quietly() {
    let trace = cachalot_testkit::fixture("traces/bert-finetune-varlen.csv.gz");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachalot"))
        .args(["convert"])
        .arg(&trace)
        .arg("-")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.trim_end(), "Thread,Time,Action,Pointer,Size,Stream");
    // The pipe is closed here, with about 58,000 rows still to write.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
