//! The stop flag of `cachalot_trace::interrupt` (Ctrl-C, SIGTERM) against reads and writes:
//! a FIFO with no writer or reader is waited for only until a stop, a write stopped midway
//! keeps the previous file and leaves no temporary file, and the signal path's
//! `remove_temp_files` removes the temporary file of a write in flight. The flag is
//! process-wide, so the cases run one after the other.

use std::fs;
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cachalot_testkit::{file_names, mkfifo};
use cachalot_trace::interrupt::{self, Interrupted};
use cachalot_trace::{open_decompressed, write_atomic};

static SERIAL: Mutex<()> = Mutex::new(());

/// Asks a stop `after` from now, on another thread.
fn stop_after(after: Duration, signal: i32) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        interrupt::request(signal);
    })
}

#[test]
fn a_fifo_with_no_writer_is_waited_for_until_a_stop() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt::clear();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.csv");
    mkfifo(&fifo);
    let t = Instant::now();
    let stopper = stop_after(Duration::from_millis(200), interrupt::SIGINT);
    let err = open_decompressed(&fifo).err().expect("no writer: no trace");
    stopper.join().unwrap();
    assert!(interrupt::is_interrupted(&err), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    interrupt::clear();
}

#[test]
fn a_fifo_is_read_once_a_writer_comes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt::clear();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.csv");
    mkfifo(&fifo);
    let w = fifo.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let mut f = fs::OpenOptions::new().write(true).open(w).unwrap();
        f.write_all(b"Thread,Time,Action\n").unwrap();
    });
    let mut text = String::new();
    open_decompressed(&fifo)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    writer.join().unwrap();
    assert_eq!(text, "Thread,Time,Action\n");
}

#[test]
fn a_fifo_with_no_reader_is_waited_for_until_a_stop() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt::clear();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.csv");
    mkfifo(&fifo);
    let stopper = stop_after(Duration::from_millis(200), interrupt::SIGTERM);
    let err = write_atomic(&fifo, |w| w.write_all(b"x")).unwrap_err();
    stopper.join().unwrap();
    assert!(interrupt::is_interrupted(&err), "{err}");
    assert_eq!(
        interrupt::requested(),
        Some(Interrupted {
            signal: interrupt::SIGTERM
        })
    );
    assert_eq!(interrupt::requested().unwrap().exit_status(), 143);
    // The FIFO is still one.
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    interrupt::clear();
}

#[test]
fn a_write_stopped_midway_keeps_the_previous_file_and_no_temporary_one() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt::clear();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.csv");
    fs::write(&out, "previous\n").unwrap();
    let err = write_atomic(&out, |w| {
        for i in 0..1000u32 {
            if i == 10 {
                interrupt::request(interrupt::SIGINT);
            }
            w.write_all(&[b'x'; 100_000])?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(interrupt::is_interrupted(&err), "{err}");
    assert_eq!(fs::read_to_string(&out).unwrap(), "previous\n");
    assert_eq!(file_names(dir.path()), ["out.csv"]);
    interrupt::clear();
    // Without a stop the same write goes through.
    write_atomic(&out, |w| w.write_all(b"new\n")).unwrap();
    assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
}

#[test]
fn the_signal_path_removes_the_temporary_file_of_a_write_in_flight() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    interrupt::clear();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    fs::write(&out, "previous\n").unwrap();
    let mut seen = Vec::new();
    let r = write_atomic(&out, |w| {
        w.write_all(b"half")?;
        w.flush()?;
        seen = file_names(dir.path());
        // What the CLI's signal thread does before it ends the process.
        assert_eq!(interrupt::remove_temp_files(), 1);
        Ok(())
    });
    // The temporary file was there while writing, and is gone: the rename fails.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter()
            .any(|n| n.starts_with(".report.html.") && n.ends_with(".tmp"))
    );
    assert!(r.is_err());
    assert_eq!(fs::read_to_string(&out).unwrap(), "previous\n");
    assert_eq!(file_names(dir.path()), ["report.html"]);
    // Nothing stays registered after a write.
    write_atomic(&out, |w| w.write_all(b"new\n")).unwrap();
    assert_eq!(interrupt::remove_temp_files(), 0);
    assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
}
