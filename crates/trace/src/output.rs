//! The one writer of every file cachalot writes (converted traces, `--segments` logs,
//! snapshots, HTML reports, the Python package's recordings and captures).
//!
//! What a path names decides how it is written ([`check_output`] says it before any work):
//! - `-`: standard output;
//! - a regular file, or a name not yet taken: replaced atomically, and only once the new content
//!   is complete (a temporary file in the same folder, flushed, synced, renamed over it); until
//!   then the previous file is untouched. A new file gets the mode `open(2)` gives (0666 less the
//!   umask, as torch's own files); a replaced one keeps its mode;
//! - a symbolic link: followed; the link stays, what it points to is written as above;
//! - a character device (`/dev/null`, a terminal, `/dev/stdout`), a FIFO or a socket: written
//!   through in place, since such a file cannot be replaced without destroying it;
//! - a block device, a folder, an empty name: refused, with a message saying what would do.
//!
//! Nothing else is ever removed or replaced: a failed write leaves no temporary file behind.
//! A stop asked while writing ([`crate::interrupt`]: Ctrl-C, SIGTERM) fails the write with
//! `Interrupted`, the previous file kept; a signal path that ends the process at once removes
//! the temporary files in flight first ([`crate::interrupt::remove_temp_files`]).

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::interrupt::{self, Writer};

/// How [`write_atomic`] will write a path (from [`check_output`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `-`: the process's standard output.
    Stdout,
    /// A regular file (existing or not) at this path, symbolic links resolved: replaced
    /// atomically.
    File(PathBuf),
    /// A character device, FIFO or socket: opened for writing and written in place.
    Stream(PathBuf),
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The folder a file at `path` lives in (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Follows `path`'s symbolic links to the name a regular file would have; a link to a name
/// not yet taken resolves to that name (as `open(O_CREAT)` would create it).
fn resolve_links(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&p)?;
                p = if to.is_absolute() {
                    to
                } else {
                    folder_of(&p).join(to)
                };
            }
            _ => return Ok(p),
        }
    }
    Err(invalid(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

/// Says how `path` would be written, checking now what can be checked before any work: that
/// it names a file, that its folder exists and takes new files (by creating and removing a
/// temporary file of ours there). Callers call it up front so that a run of minutes does not
/// end in "cannot write". The error quotes the path and says what would be valid.
pub fn check_output(path: &Path) -> io::Result<Target> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(invalid(
            "an empty output path names no file: give a file name, or - for standard output"
                .to_string(),
        ));
    }
    if path.as_os_str() == "-" {
        return Ok(Target::Stdout);
    }
    if let Ok(m) = fs::metadata(path) {
        let t = m.file_type();
        if t.is_dir() {
            return Err(invalid(format!(
                "{shown} is a folder: give a file name inside it, e.g. {}",
                path.join("out").display()
            )));
        }
        if t.is_block_device() {
            return Err(invalid(format!(
                "{shown} is a block device: cachalot does not write over disks; give a file name"
            )));
        }
        if t.is_char_device() || t.is_fifo() || t.is_socket() {
            return Ok(Target::Stream(path.to_path_buf()));
        }
    }
    let real = resolve_links(path)?;
    let name_ok = real.file_name().is_some_and(|n| n != "." && n != "..");
    if !name_ok || path.as_os_str().to_string_lossy().ends_with('/') {
        return Err(invalid(format!("{shown} names no file: give a file name")));
    }
    let dir = folder_of(&real);
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(invalid(format!(
                "cannot write {shown}: {} is not a folder",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot write {shown}: the folder {} does not exist ({e})",
                    dir.display()
                ),
            ));
        }
    }
    probe(dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot write {shown}: the folder {} takes no new file ({e})",
                dir.display()
            ),
        )
    })?;
    Ok(Target::File(real))
}

/// Creates and removes a temporary file of ours in `dir`: the one sure test that a rename into
/// it will work (permissions, a read-only file system, ACLs all answer at once).
fn probe(dir: &Path) -> io::Result<()> {
    tempfile::Builder::new()
        .prefix(".cachalot-probe-")
        .tempfile_in(dir)
        .map(drop)
}

/// Writes `path` through `write`, as the module docs say for what `path` names: a regular
/// file is replaced only once `write` has succeeded and the content is on disk; if `write`
/// fails, the disk fills up or the process is killed, the old file (if any) is untouched and
/// no partial file is left under its name.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    match check_output(path)? {
        Target::Stdout => {
            let out = io::stdout();
            let mut w = BufWriter::new(Writer(out.lock()));
            write(&mut w)?;
            w.flush()
        }
        Target::Stream(p) => {
            // A FIFO with no reader yet is waited for until a stop is asked.
            let f = interrupt::open_write(&p)?;
            let mut w = BufWriter::new(Writer(f));
            write(&mut w)?;
            w.flush()
        }
        Target::File(p) => replace_file(&p, write),
    }
}

/// Writes `data` to `path` (see [`write_atomic`]).
pub fn write_output(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic(path, |w| w.write_all(data))
}

fn replace_file(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| invalid(format!("{} names no file", path.display())))?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    // A replaced file keeps its mode; a new one gets 0666 less the umask, applied by open(2).
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o666);
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(folder_of(path))?;
    // Until it is renamed, a signal path that ends the process removes it.
    let _registered = interrupt::TempGuard::new(tmp.path());
    {
        let mut w = BufWriter::new(Writer(tmp.as_file()));
        write(&mut w)?;
        w.flush()?;
    }
    let f: &File = tmp.as_file();
    if mode != 0o666 {
        // open(2) took the umask off; an existing file's mode is kept exactly.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    f.sync_all()?;
    // A stop asked while the content was written: the previous file stays.
    interrupt::check().map_err(interrupt::io_error)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
