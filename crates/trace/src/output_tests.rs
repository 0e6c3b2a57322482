//! Tests of the output module: regular files, symbolic links, FIFOs, device nodes, `-`,
//! modes, and the folder checks.

use super::*;
use cachalot_testkit::{file_names, mkfifo};
use std::os::unix::fs::symlink;
use std::process::Command;

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.csv");
    write_atomic(&path, |w| w.write_all(b"old\n")).unwrap();
    let e = write_atomic(&path, |w| {
        w.write_all(b"half of the new")?;
        Err(io::Error::other("disk full"))
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "disk full");
    assert_eq!(fs::read(&path).unwrap(), b"old\n");
    assert_eq!(
        file_names(dir.path()),
        ["out.csv"],
        "a temporary file was left"
    );
    write_atomic(&path, |w| w.write_all(b"new\n")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"new\n");
}

#[test]
fn a_symlink_stays_a_symlink_and_its_target_gets_the_content() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.csv");
    fs::write(&target, b"old").unwrap();
    let link = dir.path().join("link.csv");
    symlink("real.csv", &link).unwrap();
    write_output(&link, b"new").unwrap();
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(&target).unwrap(), b"new");
    // A link to a name not yet taken creates that name, and the link stays.
    let dangling = dir.path().join("later.csv");
    symlink("sub-later.csv", &dangling).unwrap();
    write_output(&dangling, b"x").unwrap();
    assert!(
        fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(dir.path().join("sub-later.csv")).unwrap(), b"x");
}

#[test]
fn a_fifo_is_written_through_and_stays_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(&fifo).unwrap())
    };
    assert_eq!(check_output(&fifo).unwrap(), Target::Stream(fifo.clone()));
    write_output(&fifo, b"through the pipe").unwrap();
    assert_eq!(reader.join().unwrap(), b"through the pipe");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(file_names(dir.path()), ["pipe"]);
}

#[test]
fn a_device_node_is_written_through_and_stays_a_device() {
    // A private /dev/null-like node (char 1:3) in a temporary folder: needs CAP_MKNOD.
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("null");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["c", "1", "3"])
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mknod needs root (CAP_MKNOD), which this run does not have");
        return;
    }
    write_output(&node, b"into the void").unwrap();
    let m = fs::symlink_metadata(&node).unwrap();
    assert!(m.file_type().is_char_device(), "the device became {m:?}");
    // Through a symlink too (what /dev/stdout is).
    let link = dir.path().join("out");
    symlink(&node, &link).unwrap();
    write_output(&link, b"again").unwrap();
    assert!(
        fs::symlink_metadata(&node)
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert_eq!(file_names(dir.path()), ["null", "out"]);
}

#[test]
fn dev_null_is_written_through() {
    let p = Path::new("/dev/null");
    if !p.exists() {
        return;
    }
    assert_eq!(check_output(p).unwrap(), Target::Stream(p.to_path_buf()));
}

#[test]
fn dash_is_standard_output() {
    assert_eq!(check_output(Path::new("-")).unwrap(), Target::Stdout);
}

#[test]
fn a_new_file_gets_the_mode_open_gives_and_a_replaced_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    // What File::create gives here is 0666 less this process's umask.
    let reference = dir.path().join("reference");
    File::create(&reference).unwrap();
    let want = fs::metadata(&reference).unwrap().permissions().mode() & 0o777;
    let new = dir.path().join("new.pickle");
    write_output(&new, b"x").unwrap();
    assert_eq!(
        fs::metadata(&new).unwrap().permissions().mode() & 0o777,
        want
    );
    let kept = dir.path().join("kept.pickle");
    fs::write(&kept, b"old").unwrap();
    fs::set_permissions(&kept, fs::Permissions::from_mode(0o640)).unwrap();
    write_output(&kept, b"new").unwrap();
    assert_eq!(
        fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn bad_paths_are_refused_before_any_work_with_the_path_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let e = check_output(Path::new("")).unwrap_err().to_string();
    assert!(e.contains("empty output path"), "{e}");
    let e = check_output(dir.path()).unwrap_err().to_string();
    assert!(e.contains("is a folder"), "{e}");
    let missing = dir.path().join("no-such-dir").join("x.csv");
    let e = check_output(&missing).unwrap_err().to_string();
    assert!(
        e.contains("does not exist") && e.contains("no-such-dir"),
        "{e}"
    );
    let mut called = false;
    assert!(
        write_atomic(&missing, |_| {
            called = true;
            Ok(())
        })
        .is_err()
    );
    assert!(
        !called,
        "the content was computed for a path that cannot be written"
    );
    let e = check_output(&dir.path().join("x.csv/"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("names no file"), "{e}");
    assert_eq!(
        file_names(dir.path()),
        Vec::<String>::new(),
        "a check left a file"
    );
}

#[test]
fn a_read_only_folder_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    fs::create_dir(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    let probe_file = ro.join("x");
    let root_writes_anyway = File::create(&probe_file).is_ok();
    if root_writes_anyway {
        // root ignores the mode bits; a read-only file system would still be refused.
        fs::remove_file(&probe_file).unwrap();
        eprintln!("skipped: running as root, which writes into a 0555 folder");
    } else {
        let e = check_output(&ro.join("x.csv")).unwrap_err().to_string();
        assert!(e.contains("takes no new file"), "{e}");
    }
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_block_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("disk");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["b", "7", "200"])
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mknod needs root (CAP_MKNOD)");
        return;
    }
    let e = check_output(&node).unwrap_err().to_string();
    assert!(e.contains("block device"), "{e}");
    assert!(
        fs::symlink_metadata(&node)
            .unwrap()
            .file_type()
            .is_block_device()
    );
}
