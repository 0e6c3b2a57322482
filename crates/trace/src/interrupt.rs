//! Cancellation of long calls (Ctrl-C, SIGTERM): one process-wide flag that front ends set and
//! long loops read, and the registry of the temporary files in flight that a signal path
//! removes before the process ends.
//!
//! - A front end calls [`request`] when the user asks to stop (the CLI's signal thread on
//!   SIGINT/SIGTERM, the Python module when `check_signals()` raises `KeyboardInterrupt`).
//! - Long loops call [`check`] now and then (the replay engine every few thousand rows, the
//!   advisor per candidate, readers and writers per buffer): it is one relaxed atomic load, and
//!   it returns the typed [`Interrupted`] error once a stop is asked.
//! - Readers and writers wrap their streams in [`Reader`] and [`Writer`], which fail with an
//!   `io::Error` holding [`Interrupted`] (see [`is_interrupted`]).
//! - [`open_read`] and [`open_write`] open a path as `File::open`/`OpenOptions::write` do, but a
//!   FIFO with no writer (or no reader) yet is waited for in short polls, so that the wait ends
//!   on a stop instead of blocking forever.
//! - The output module registers each temporary file it creates ([`TempGuard`]); a signal path
//!   that must end the process at once calls [`remove_temp_files`] first, so that no
//!   `.NAME.XXXX.tmp` is left behind.
//!
//! The flag is cleared with [`clear`] once the interrupted call has returned.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// 0: running; otherwise the signal number that asked to stop (`SIGINT` = 2 for a Python
/// `KeyboardInterrupt` too).
static REQUESTED: AtomicI32 = AtomicI32::new(0);

/// The temporary files written now, removed by [`remove_temp_files`].
static TEMP_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// SIGINT's number (Ctrl-C).
pub const SIGINT: i32 = 2;
/// SIGTERM's number (`kill`, timeouts, schedulers).
pub const SIGTERM: i32 = 15;

/// The call was interrupted (Ctrl-C or SIGTERM) before it finished; nothing it would have
/// written was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {} before the command finished", signal_name(*.signal))]
pub struct Interrupted {
    /// The signal number that asked to stop.
    pub signal: i32,
}

impl Interrupted {
    /// The exit status a shell gives a process ended by this signal (128 + its number).
    pub fn exit_status(&self) -> u8 {
        u8::try_from(128 + self.signal.clamp(1, 127)).unwrap_or(130)
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        SIGINT => "Ctrl-C (SIGINT)".to_string(),
        SIGTERM => "SIGTERM".to_string(),
        n => format!("signal {n}"),
    }
}

/// Asks every long call of this process to stop, on behalf of `signal` (the first request
/// wins).
pub fn request(signal: i32) {
    let _ = REQUESTED.compare_exchange(0, signal.max(1), Ordering::Relaxed, Ordering::Relaxed);
}

/// The stop asked, if any.
pub fn requested() -> Option<Interrupted> {
    match REQUESTED.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(Interrupted { signal }),
    }
}

/// `Err(Interrupted)` once a stop is asked: the check long loops make.
#[inline]
pub fn check() -> Result<(), Interrupted> {
    requested().map_or(Ok(()), Err)
}

/// Forgets the stop asked (after the interrupted call has returned).
pub fn clear() {
    REQUESTED.store(0, Ordering::Relaxed);
}

/// The `io::Error` a reader or writer fails with on a stop.
pub fn io_error(i: Interrupted) -> io::Error {
    io::Error::other(i)
}

/// Whether `e`, or an error in its chain of causes (an `io::Error` holding it included), is
/// [`Interrupted`].
pub fn is_interrupted(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.is::<Interrupted>() {
            return true;
        }
        let inner = c.downcast_ref::<io::Error>().and_then(|io| io.get_ref());
        if inner.is_some_and(|i| i.is::<Interrupted>()) {
            return true;
        }
        cur = c.source();
    }
    false
}

/// A reader that fails with [`Interrupted`] once a stop is asked (checked on every `read`,
/// which buffered readers call once per buffer).
#[derive(Debug)]
pub struct Reader<R>(pub R);

impl<R: Read> Read for Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        check().map_err(io_error)?;
        self.0.read(buf)
    }
}

/// A writer that fails with [`Interrupted`] once a stop is asked (checked on every `write`).
#[derive(Debug)]
pub struct Writer<W>(pub W);

impl<W: Write> Write for Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        check().map_err(io_error)?;
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// How long a wait for a FIFO's other end sleeps between checks of the flag.
const FIFO_POLL: Duration = Duration::from_millis(50);

fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Opens `path` for reading as `File::open` does; a FIFO is opened without blocking and then
/// waited for (until a writer has written or gone) in short polls that end with
/// [`Interrupted`] on a stop.
pub fn open_read(path: &Path) -> io::Result<File> {
    if !is_fifo(path) {
        return File::open(path);
    }
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc_flag(OFlag::O_NONBLOCK))
        .open(path)?;
    loop {
        check().map_err(io_error)?;
        let mut fds = [PollFd::new(f.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(FIFO_POLL).unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    // Data (or the writer's end) is there: reads block as usual from here on.
    let flags = OFlag::from_bits_truncate(fcntl(&f, FcntlArg::F_GETFL)?);
    fcntl(&f, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    Ok(f)
}

/// Opens `path` (an existing file: a device, a FIFO) for writing in place; a FIFO with no
/// reader yet is retried in short sleeps that end with [`Interrupted`] on a stop.
pub fn open_write(path: &Path) -> io::Result<File> {
    if !is_fifo(path) {
        return OpenOptions::new().write(true).open(path);
    }
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::unix::fs::OpenOptionsExt;
    loop {
        check().map_err(io_error)?;
        // O_NONBLOCK on a FIFO with no reader fails with ENXIO instead of waiting.
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc_flag(OFlag::O_NONBLOCK))
            .open(path)
        {
            Ok(f) => {
                let flags = OFlag::from_bits_truncate(fcntl(&f, FcntlArg::F_GETFL)?);
                fcntl(&f, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
                return Ok(f);
            }
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) => {
                std::thread::sleep(FIFO_POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

fn libc_flag(f: nix::fcntl::OFlag) -> i32 {
    f.bits()
}

/// A temporary file registered for [`remove_temp_files`] while this guard lives.
#[derive(Debug)]
pub struct TempGuard(PathBuf);

impl TempGuard {
    /// Registers `path` (a temporary file just created).
    pub fn new(path: &Path) -> Self {
        let mut files = TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner());
        files.push(path.to_path_buf());
        TempGuard(path.to_path_buf())
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        let mut files = TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = files.iter().rposition(|p| *p == self.0) {
            files.swap_remove(i);
        }
    }
}

/// Removes every registered temporary file (the signal path, before the process ends): what
/// a write in flight had written goes, the file it would have replaced stays as it was.
/// Returns how many were removed.
pub fn remove_temp_files() -> usize {
    let mut files = TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files
        .drain(..)
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}
