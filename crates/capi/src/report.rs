//! How the exported functions report failures without ever aborting or unwinding into C.
//!
//! - stderr is best effort: a closed descriptor, a closed pipe with SIGPIPE ignored (as
//!   Python runs) or a full disk (`2>/dev/full`) loses the message, nothing else;
//!   `eprintln!` would panic there, and a panic while reporting a panic aborts.
//! - The last error and returned strings live in thread-locals, reached with `try_with`: on a
//!   thread that is exiting (a TLS destructor calling `cachalot_free`) they are gone, and
//!   process-wide fallbacks take their place.
//! - [`guard`] turns a panic into a reported error and a fallback value; panics inside it are
//!   not printed by the panic hook (one line from [`guard`] instead of a backtrace).

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, Once};

thread_local! {
    /// The last error on this thread, and the last string returned to this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static RETURNED: RefCell<CString> = RefCell::new(CString::default());
    /// Inside [`guard`]: the panic hook stays quiet, [`guard`] reports.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// The last error of threads whose thread-locals are already destroyed.
static EXITING_THREAD_ERROR: Mutex<Option<CString>> = Mutex::new(None);

fn to_cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// Writes `cachalot: {msg}` on stderr if it can; a write error is ignored.
pub fn report(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "cachalot: {msg}");
}

/// Records `msg` as this thread's last error (not printed).
pub fn set_error(msg: &str) {
    let c = to_cstring(msg);
    if let Err(std::thread::AccessError { .. }) = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = c.clone();
        }
    }) {
        *EXITING_THREAD_ERROR
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(c);
    }
}

/// Reports `msg` on stderr and records it as the last error.
pub fn fail(msg: &str) {
    report(msg);
    set_error(msg);
}

/// This thread's last error ("" if none), valid until its next error. On an exiting thread,
/// the last error of any exiting thread.
pub fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.try_borrow().map(|e| e.as_ptr()).ok())
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            let mut slot = EXITING_THREAD_ERROR
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // The CString's buffer does not move while it stays in the static slot; it is
            // replaced only by a later error of an exiting thread.
            slot.get_or_insert_with(CString::default).as_ptr()
        })
}

/// This thread's last error as text.
pub fn last_error_text() -> String {
    // SAFETY: `last_error` returns a NUL-terminated string that stays valid until the next
    // error is recorded, which cannot happen while this line copies it.
    unsafe { std::ffi::CStr::from_ptr(last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Keeps `s` alive for the caller until this thread's next string-returning call. On an
/// exiting thread (no thread-locals left) the string is leaked instead: such calls are rare
/// and a pointer that stays valid is the contract.
pub fn returned(s: &str) -> *const c_char {
    let c = to_cstring(s);
    let mut c = Some(c);
    let kept = RETURNED.try_with(|r| {
        let mut r = r.try_borrow_mut().ok()?;
        *r = c.take()?;
        Some(r.as_ptr())
    });
    match kept {
        Ok(Some(p)) => p,
        _ => Box::leak(c.unwrap_or_default().into_boxed_c_str()).as_ptr(),
    }
}

/// Installs (once) a panic hook that is silent inside [`guard`] and otherwise does what the
/// previous hook did. The hook belongs to this library's copy of the Rust runtime.
fn quiet_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.try_with(Cell::get).unwrap_or(true) {
                previous(info);
            }
        }));
    });
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs an entry point: a panic becomes a reported error and `fallback`, never an unwind
/// into C. Nothing after `catch_unwind` can panic. Inlined: it runs around every malloc and
/// free, and what a panic needs is in [`caught`].
#[inline]
pub fn guard<T>(name: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    quiet_hook();
    // One thread-local lookup per call (in a shared library each is a `__tls_get_addr`
    // call). `GUARDED` has no destructor, so it is never gone and `try_with` cannot fail;
    // were it to, the call is reported as failed rather than run unmarked.
    let result = GUARDED
        .try_with(move |g| {
            let outer = g.replace(true);
            let result = catch_unwind(AssertUnwindSafe(f));
            g.set(outer);
            result
        })
        .unwrap_or_else(|e| Err(Box::new(e.to_string())));
    match result {
        Ok(v) => v,
        Err(p) => {
            caught(name, p);
            fallback
        }
    }
}

/// Reports the panic `p` caught in entry point `name`.
#[cold]
#[inline(never)]
fn caught(name: &str, p: Box<dyn std::any::Any + Send>) {
    // Formatting the message could only fail on allocation, which aborts anyway.
    let msg = format!("internal error in {name}: {}", panic_text(&*p));
    // Dropping the payload runs foreign code (its destructor) that may panic.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
    fail(&msg);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: last_error returns a NUL-terminated string valid until the next error on
        // this thread; none happens while it is read.
        unsafe { CStr::from_ptr(last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_error_not_an_unwind() {
        assert_eq!(guard("cachalot_test", 7, || panic!("boom")), 7);
        assert_eq!(last(), "internal error in cachalot_test: boom");
        let p: *mut u8 = guard("cachalot_test", std::ptr::null_mut(), || {
            let v: Vec<u8> = Vec::new();
            #[allow(clippy::indexing_slicing)]
            let _ = v[3];
            std::ptr::dangling_mut()
        });
        assert!(p.is_null());
        assert!(last().contains("index out of bounds"), "{}", last());
    }

    #[test]
    fn returned_strings_live_until_the_next_call() {
        let a = returned("first");
        // SAFETY: `a` points at the thread's returned string, not yet replaced.
        assert_eq!(unsafe { CStr::from_ptr(a) }.to_str().unwrap(), "first");
        let b = returned("with\0nul");
        // SAFETY: as above, for `b`.
        assert_eq!(unsafe { CStr::from_ptr(b) }.to_str().unwrap(), "with nul");
    }

    #[test]
    fn errors_and_strings_work_while_a_thread_exits() {
        struct OnExit;
        impl Drop for OnExit {
            fn drop(&mut self) {
                // Runs as the thread's locals are destroyed; LAST_ERROR may be gone already.
                set_error("from a destructor");
                let s = returned("kept");
                // SAFETY: `returned` gives a pointer that stays valid (leaked if need be).
                assert_eq!(unsafe { CStr::from_ptr(s) }.to_str().unwrap(), "kept");
                assert_eq!(guard("cachalot_test", 3, || panic!("late")), 3);
            }
        }
        thread_local!(static GUARD: RefCell<Option<OnExit>> = const { RefCell::new(None) });
        std::thread::spawn(|| {
            // Thread-locals are destroyed in reverse order of first use: GUARD first used
            // before LAST_ERROR and RETURNED is destroyed after them.
            GUARD.with(|g| *g.borrow_mut() = Some(OnExit));
            set_error("x");
            let _ = returned("y");
        })
        .join()
        .expect("the thread exits without a panic or an abort");
    }
}
