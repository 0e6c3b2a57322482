//! Raising torch's exceptions from `cachalot_malloc` (the C++ side is `cpp/throw.cpp`).
//!
//! torch's `CUDAPluggableAllocator` uses whatever the allocation function returns; only a C++
//! exception stops it. Inside a process that has torch's `libc10` loaded, a failed allocation
//! throws `c10::OutOfMemoryError` (out of memory: `torch.OutOfMemoryError` in Python) or
//! `c10::Error` (anything else: `RuntimeError`), as torch's own allocator does. Elsewhere (a C
//! program) the function returns NULL and the error is in `cachalot_last_error`.

use std::ffi::{CString, c_char};

// SAFETY: both functions are defined in cpp/throw.cpp with exactly these C signatures;
// `cachalot_host_throw` unwinds with a C++ exception, hence "C-unwind".
unsafe extern "C-unwind" {
    fn cachalot_host_can_throw() -> bool;
    fn cachalot_host_throw(out_of_memory: bool, msg: *const c_char) -> !;
}

/// Whether a failure can be raised as torch's C++ exception (libc10 is loaded).
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
