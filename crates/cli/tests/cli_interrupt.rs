//! Ctrl-C and SIGTERM to the `cachalot` binary (#28 items 11 and 3): `tune FIFO` with no writer
//! ends at SIGINT with status 130; a `convert` killed with SIGTERM while it writes ends with 143,
//! keeps the previous file at the path and leaves no temporary file.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cachalot_testkit::{file_names, mkfifo};

fn cachalot() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cachalot"))
}

fn kill(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Waits for `child` at most `limit`; kills it and fails if it is still running.
fn wait_within(mut child: Child, limit: Duration) -> (i32, String) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("still running {limit:?} after the signal");
}

#[test]
fn tune_on_a_fifo_with_no_writer_ends_at_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.csv");
    mkfifo(&fifo);
    let child = cachalot()
        .args(["tune", "--capacity", "24G"])
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    kill(&child, nix::sys::signal::Signal::SIGINT);
    let (code, err) = wait_within(child, Duration::from_secs(10));
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("interrupted by Ctrl-C"), "{err}");
}

/// About 1.2 million rows of allocations and frees at `dir/big.csv`.
fn big_trace(dir: &Path) -> std::path::PathBuf {
    let input = dir.join("big.csv");
    let mut f = std::io::BufWriter::new(fs::File::create(&input).unwrap());
    writeln!(f, "Thread,Time,Action,Pointer,Size,Stream").unwrap();
    for i in 0..600_000u64 {
        let size = 512 + (i * 7919) % 4_000_000;
        writeln!(f, "1,{},allocate,{:#x},{size},0", 2 * i, 0x1000 + i).unwrap();
        writeln!(f, "1,{},free,{:#x},{size},0", 2 * i + 1, 0x1000 + i).unwrap();
    }
    input
}

#[test]
fn a_long_tune_stops_at_ctrl_c_by_itself_and_writes_no_report() {
    let dir = tempfile::tempdir().unwrap();
    let input = big_trace(dir.path());
    let html = dir.path().join("report.html");
    let child = cachalot()
        .args(["tune", "--capacity", "24G", "--threads", "1", "--html"])
        .arg(&html)
        .arg(&input)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Well inside the run (loading and replaying take seconds), well after the handlers are
    // installed (the first thing the command does).
    std::thread::sleep(Duration::from_millis(400));
    let signalled = Instant::now();
    kill(&child, nix::sys::signal::Signal::SIGINT);
    let (code, err) = wait_within(child, Duration::from_secs(10));
    assert_eq!(code, 130, "{err}");
    // Ended by its own checks (the replay rows, the search's waves, the reads), before the
    // signal thread's grace period would have ended the process.
    assert!(
        signalled.elapsed() < cachalot_cli::GRACE,
        "{:?}",
        signalled.elapsed()
    );
    assert_eq!(file_names(dir.path()), ["big.csv"]);
}

#[test]
fn convert_killed_while_writing_keeps_the_previous_file_and_no_temporary_one() {
    let dir = tempfile::tempdir().unwrap();
    // About 1.2 million rows: gzip-compressing them takes well over the moment the signal
    // needs to arrive while the temporary file is written.
    let input = big_trace(dir.path());
    let out_dir = dir.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("trace.csv.gz");
    fs::write(&out, "previous\n").unwrap();
    let child = cachalot()
        .arg("convert")
        .arg(&input)
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The temporary file appears when the write starts.
    let start = Instant::now();
    while file_names(&out_dir).len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no temporary file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(&child, nix::sys::signal::Signal::SIGTERM);
    let (code, err) = wait_within(child, Duration::from_secs(10));
    assert_eq!(code, 143, "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    assert_eq!(file_names(&out_dir), ["trace.csv.gz"]);
    assert_eq!(fs::read_to_string(&out).unwrap(), "previous\n");
}
