//! Raising torch's exceptions from `cachalot_malloc` (the C++ side is `cpp/throw.cpp`).
//!
//! torch's `CUDAPluggableAllocator` uses whatever the allocation function returns; only a C++
//! exception stops it. When torch's own code made the call (the nearest frame outside this
//! library is in `libtorch*`/`libc10*`, and `libc10` is loaded), a failed allocation throws
//! `c10::OutOfMemoryError` (out of memory: `torch.OutOfMemoryError` in Python) or `c10::Error`
//! (anything else: `RuntimeError`), as torch's own allocator does. Any other caller (a C
//! program, Python's ctypes in a process that imported torch) gets NULL and the error in
//! `cachalot_last_error`: an exception has no handler there and would abort the host.

use std::ffi::{CString, c_char};

// SAFETY: both functions are defined in cpp/throw.cpp with exactly these C signatures;
// `cachalot_host_throw` unwinds with a C++ exception, hence "C-unwind".
unsafe extern "C-unwind" {
    fn cachalot_host_can_throw() -> bool;
    fn cachalot_host_throw(out_of_memory: bool, msg: *const c_char) -> !;
}

/// Whether a failure can be raised as torch's C++ exception: libc10 is loaded and torch's code
/// called into this library. Call it from the entry point's own call chain (it walks the stack).
pub fn can_throw() -> bool {
    // SAFETY: takes no arguments; only looks symbols up with dlsym/dlopen(RTLD_NOLOAD).
    unsafe { cachalot_host_can_throw() }
}

/// Throws torch's exception carrying `msg`. Call only where [`can_throw`] said yes, from an
/// `extern "C-unwind"` function, and never inside `catch_unwind`
/// (a foreign exception caught there aborts).
pub fn throw(out_of_memory: bool, msg: &str) -> ! {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `c` is a valid NUL-terminated string for the call; the shim copies it before
    // throwing. The exception unwinds through this "C-unwind" frame (dropping `c`, as Rust
    // does for foreign exceptions) and its callers.
    unsafe { cachalot_host_throw(out_of_memory, c.as_ptr()) }
}
