//! Ctrl-C during a long native call (`cachalot.tune`, `replay`, `compare`, …): the call runs
//! on a worker thread without the GIL while the calling thread polls Python's signal handlers
//! (`check_signals`, what lets Ctrl-C raise `KeyboardInterrupt`). When one raises, the stop
//! flag of `cachalot_trace::interrupt` is set, the Rust loops that check it (the replay rows,
//! the advisor's candidates, every read and write) end the call within milliseconds, its
//! temporary files are removed, and the handler's exception (`KeyboardInterrupt`) is raised
//! in place of the cut-short result.

use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use cachalot_trace::interrupt;
use pyo3::prelude::*;

/// How often the calling thread runs Python's signal handlers while the call runs.
const POLL: Duration = Duration::from_millis(50);

/// Runs `f` on a worker thread with the GIL released, polling Python's signal handlers every
/// [`POLL`]. Returns `f`'s result, or the exception a signal handler raised (the call then
/// stopped early and its result is dropped). A panic in `f` propagates as it would have.
pub(crate) fn interruptible<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    std::thread::scope(|s| {
        let (done_tx, mut done_rx) = channel::<()>();
        let worker = s.spawn(move || {
            let r = f();
            let _ = done_tx.send(());
            r
        });
        let mut raised: Option<PyErr> = None;
        loop {
            let (waited, rx) = py.detach(move || (done_rx.recv_timeout(POLL), done_rx));
            done_rx = rx;
            match waited {
                // Finished, or panicked (the sender dropped unsent).
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if raised.is_some() {
                continue;
            }
            if let Err(e) = py.check_signals() {
                interrupt::request(interrupt::SIGINT);
                raised = Some(e);
            }
        }
        let result = py.detach(move || worker.join());
        if let Some(e) = raised {
            interrupt::clear();
            return Err(e);
        }
        match result {
            // Another thread's interruption may have cut this call short too.
            Ok(_) if interrupt::requested().is_some() => {
                Err(pyo3::exceptions::PyKeyboardInterrupt::new_err(
                    "interrupted: another thread's call was interrupted while this one ran",
                ))
            }
            Ok(r) => Ok(r),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
