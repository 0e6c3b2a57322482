//! Issue #10, crash 5: a CSV trace written by `cachalot convert` and cut short (a full disk, a
//! killed writer) was accepted as a shorter, valid trace. Now the cut copy is refused, saying
//! so, and the whole one replays as before.

fn cachalot(args: &[&std::ffi::OsStr]) -> std::process::Output {
    cachalot_testkit::output(env!("CARGO_BIN_EXE_cachalot"), args)
}

#[test]
fn a_truncated_conversion_is_an_error_not_a_shorter_trace() {
    let scratch = cachalot_testkit::scratch();
    let dir = scratch.path();
    let input = cachalot_testkit::fixture("traces/bert-finetune-varlen.csv.gz");
    let whole = dir.join("whole.csv");
    let out = cachalot(&["convert".as_ref(), input.as_os_str(), whole.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.csv");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = cachalot(&["replay".as_ref(), whole.as_os_str(), "--json".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cachalot(&["replay".as_ref(), cut.as_os_str(), "--json".as_ref()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the trace is truncated"), "{err}");
}
