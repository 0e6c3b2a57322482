//! Writing a file so that readers see the old version or the new one, never a part: every
//! file cachalot writes (converted traces, `--segments` logs, snapshots, HTML reports) goes
//! through [`write_atomic`].

use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Writes `path` through `write`: into a temporary file in the same folder, flushed and synced,
/// then renamed over `path`. If `write` fails, the disk fills up or the process is killed, the
/// old file (if any) is untouched and no partial file is left under `path`'s name.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(dir)?;
    {
        let mut w = BufWriter::new(tmp.as_file());
        write(&mut w)?;
        w.flush()?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(std::fs::read(&path).unwrap(), b"old\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
        write_atomic(&path, |w| w.write_all(b"new\n")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new\n");
    }

    #[test]
    fn a_folder_that_does_not_exist_is_an_error() {
        let e = write_atomic(Path::new("/nonexistent-dir-cachalot/x.csv"), |w| {
            w.write_all(b"x")
        });
        assert!(e.is_err());
    }
}
