//! cachalot as PyTorch's CUDA allocator: the C functions `torch.cuda.memory.CUDAPluggableAllocator`
//! loads, exported by `libcachalot_capi.so` and by the Python package's native module
//! (`cachalot._native`, which links this crate; `cachalot.torch.use()` sets it up).
//!
//! ```python
//! import torch
//! alloc = torch.cuda.memory.CUDAPluggableAllocator("libcachalot_capi.so", "cachalot_malloc", "cachalot_free")
//! torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
//! ```
//!
//! The C interface is `include/cachalot.h`. Besides the pair torch requires
//! (`cachalot_malloc`, `cachalot_free`) it exports the optional hooks torch calls (init, reset
//! on `empty_cache`, memory fraction, record_stream), and what torch's pluggable interface
//! cannot give: torch's `memory_stats` as JSON, `memory_summary`, and a snapshot pickle for
//! `https://pytorch.org/memory_viz`.
//!
//! A second pair, `cachalot_segment_malloc`/`cachalot_segment_free` (see `segments`), is for
//! the other way round: torch's own allocator as the process's, cachalot as the allocator of a
//! `torch.cuda.MemPool`, handing out whole segments that torch caches and splits.
//!
//! Every entry point catches panics (none crosses into C) and reports failures on stderr (best
//! effort: a closed or full stderr loses only the message) and through [`cachalot_last_error`],
//! never by aborting, also on a thread that is exiting (see `report`). Called by PyTorch's
//! allocator, a failed [`cachalot_malloc`] throws torch's own exception instead of returning
//! NULL (see `host`); any other caller, also in a process with torch loaded, gets NULL. A free
//! of a pointer the library did not hand out is reported and counted
//! ([`cachalot_unknown_frees`]), not fatal. Configuration,
//! device choice and sizes come from the environment (see the `state` module).

// This crate and `cachalot-cuda` are the only places cachalot touches C. Here the `unsafe` is
// the `extern "C"` ABI itself, the C++ shim that throws torch's exceptions, and reading the C
// string of `cachalot_dump_snapshot`; each use says why it is sound.
#![allow(unsafe_code)]

mod device_log;
mod host;
mod pools;
mod report;
mod segments;
mod state;

use std::ffi::{CStr, c_char, c_double, c_int, c_void};
use std::path::Path;
use std::sync::atomic::Ordering;

use cachalot::{StreamId, stats};
use report::{fail, guard, returned, set_error};
use state::{Alloc, Global};

/// The allocator of a device: the open one, else [`open_for`] opens it.
#[inline]
fn device(index: c_int) -> Option<&'static Alloc> {
    Global::ready(index).or_else(|| open_for(index, |g| g.device(index)))
}

/// What `open` finds in the library's state for device `index` (its allocator, its segment
/// source). Start-up and opening failures were printed once where they happened and only
/// become this thread's last error here; a bad index is printed.
#[cold]
pub(crate) fn open_for<T: ?Sized>(
    index: c_int,
    open: impl FnOnce(&'static Global) -> Result<&'static T, String>,
) -> Option<&'static T> {
    let g = Global::get().map_err(|e| set_error(&e)).ok()?;
    if !(0..state::MAX_DEVICES as c_int).contains(&index) {
        fail(&format!(
            "device index {index} out of range 0..{}",
            state::MAX_DEVICES
        ));
        return None;
    }
    open(g).map_err(|e| set_error(&e)).ok()
}

fn stream(s: *mut c_void) -> StreamId {
    StreamId(s as usize as u64)
}

/// Allocates `size` bytes on `device` for use on `stream` (`cudaStream_t`). Size 0 gives
/// NULL. On failure (out of memory: torch's message; a device that cannot be opened: why),
/// called by PyTorch's allocator it throws `c10::OutOfMemoryError` / `c10::Error`, which torch
/// raises as `torch.OutOfMemoryError` / `RuntimeError`; called by anything else (C, ctypes)
/// it returns NULL. The reason is always in [`cachalot_last_error`]; an OOM's text is printed
/// only where it is not raised.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cachalot_malloc(
    size: usize,
    device_index: c_int,
    s: *mut c_void,
) -> *mut c_void {
    let result = guard("cachalot_malloc", Err(Failed::raise(false, "")), || {
        // A device that could not be opened was reported once, when first asked for.
        let a = device(device_index).ok_or_else(|| Failed::raise(false, ""))?;
        a.resource()
            .malloc(size as u64, stream(s))
            .map(|p| p as usize as *mut c_void)
            .map_err(|e| Failed::raise(e.is_out_of_memory(), e.to_string()))
    });
    hand_back(result)
}

/// How an allocating entry point that failed tells its caller. The message may be empty
/// when the reason is this thread's last error already.
pub(crate) enum Failed {
    /// Called by PyTorch's allocator, raised as `c10::OutOfMemoryError` (`out_of_memory`) or
    /// `c10::Error`; for any other caller NULL, the message printed.
    Raise { out_of_memory: bool, msg: String },
    /// NULL everywhere, the message not printed (a MemPool allocator's NULL is torch's cue
    /// to free its cache and retry).
    Null(String),
}

impl Failed {
    pub(crate) fn raise(out_of_memory: bool, msg: impl Into<String>) -> Self {
        Failed::Raise {
            out_of_memory,
            msg: msg.into(),
        }
    }
}

/// The pointer of an allocation, or for a failure what [`Failed`] says, with the reason as
/// this thread's last error. Called outside `guard`: the C++ exception must not meet
/// `catch_unwind`.
#[inline]
pub(crate) fn hand_back(result: Result<*mut c_void, Failed>) -> *mut c_void {
    match result {
        Ok(p) => p,
        Err(failed) => hand_back_failure(failed),
    }
}

/// [`hand_back`] of a failure.
#[cold]
#[inline(never)]
fn hand_back_failure(failed: Failed) -> *mut c_void {
    match failed {
        Failed::Null(msg) => {
            set_error(&msg);
            std::ptr::null_mut()
        }
        Failed::Raise { out_of_memory, msg } if host::can_throw() => {
            if !msg.is_empty() {
                set_error(&msg);
            }
            host::throw(out_of_memory, &report::last_error_text())
        }
        Failed::Raise { msg, .. } => {
            if !msg.is_empty() {
                fail(&msg);
            }
            std::ptr::null_mut()
        }
    }
}

/// Frees `ptr` (from [`cachalot_malloc`] on `device`). `size` and `stream` are what torch
/// passes back; the allocator knows both already. NULL is a no-op; an unknown pointer is
/// reported and counted, not fatal.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_free(
    ptr: *mut c_void,
    _size: usize,
    device_index: c_int,
    _s: *mut c_void,
) {
    guard("cachalot_free", (), || {
        let p = ptr as usize as u64;
        if p == 0 {
            return;
        }
        let Some(a) = Global::ready(device_index) else {
            return free_on_unopened(p, device_index);
        };
        if let Err(e) = a.resource().free(p) {
            freeing_failed(p, device_index, &e);
        }
    })
}

/// [`cachalot_free`] when the state or the device is not open: opens it (a pointer can only
/// be its allocation if it opened before), or reports the pointer as unknown.
#[cold]
fn free_on_unopened(p: u64, device_index: c_int) {
    let g = match Global::get() {
        Ok(g) => g,
        Err(e) => return set_error(&e),
    };
    match g.device(device_index) {
        Ok(a) => {
            if let Err(e) = a.resource().free(p) {
                freeing_failed(p, device_index, &e);
            }
        }
        Err(_) if (0..state::MAX_DEVICES as c_int).contains(&device_index) => {
            g.report_unknown_free(p, device_index, "the device could not be opened")
        }
        Err(e) => g.report_unknown_free(p, device_index, &e),
    }
}

/// Reports a free the allocator of an open device refused: a pointer it did not hand out is
/// counted as unknown, anything else is printed.
#[cold]
fn freeing_failed(p: u64, device_index: c_int, e: &cachalot::AllocError) {
    match Global::get() {
        Ok(g) if e.is_invalid_pointer() => {
            g.report_unknown_free(p, device_index, "not an allocation of this library")
        }
        _ => fail(&format!(
            "freeing {p:#x} on device {device_index} failed: {e}"
        )),
    }
}

/// torch's init hook (`set_init_fn`): reads the configuration now, so that a bad one is
/// reported at start-up. `device_count` is recorded; devices open on first use.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_init(device_count: c_int) {
    guard("cachalot_init", (), || match Global::get() {
        Ok(g) => g
            .init_device_count
            .store(device_count.max(0) as u64, Ordering::Relaxed),
        Err(e) => set_error(&e),
    })
}

/// torch's reset hook (`set_reset_fn`), called by `torch.cuda.empty_cache()`: returns cached
/// memory of every open device.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_reset() {
    guard("cachalot_reset", (), || {
        let Ok(g) = Global::get() else { return };
        for (i, a) in g.opened() {
            if let Err(e) = a.empty_cache() {
                fail(&format!("empty_cache on device {i}: {e}"));
            }
        }
    })
}

/// torch's memory-fraction hook (`set_memory_fraction_fn`): limits `device` to `fraction` of
/// its memory.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_set_memory_fraction(fraction: c_double, device_index: c_int) {
    guard("cachalot_set_memory_fraction", (), || {
        if let Some(a) = device(device_index)
            && let Err(e) = a.set_memory_fraction(fraction)
        {
            fail(&e.to_string());
        }
    })
}

/// torch's record-stream hook (`set_record_stream_fn`, `Tensor.record_stream`): the memory at
/// `ptr` is also used on `stream`. NULL (an empty tensor's storage) is a no-op, as in torch.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_record_stream(ptr: *mut c_void, s: *mut c_void) {
    guard("cachalot_record_stream", (), || {
        let p = ptr as usize as u64;
        if p == 0 {
            // torch's allocator returns at once for a null pointer: no block, nothing to do.
            return;
        }
        let Ok(g) = Global::get() else { return };
        // Addresses are unique across devices (CUDA's unified addressing; distinct ranges on
        // the simulator), so the device that knows the pointer is the one.
        for (_, a) in g.opened() {
            match a.record_stream(p, stream(s)) {
                Ok(()) => return,
                Err(e) if e.is_invalid_pointer() => continue,
                Err(e) => return fail(&e.to_string()),
            }
        }
        fail(&format!(
            "record_stream: {p:#x} is not an allocation of this library"
        ));
    })
}

/// Tells the library which c10 stream the handle `s` is: `torch.cuda.Stream().stream_id` on
/// `device` (`cachalot.torch` calls it for each stream torch creates). torch walks the
/// outstanding `record_stream` events in a hash table keyed by that identity, which decides
/// the order in which completed events give blocks back (and so the `inactive_split` peak);
/// unregistered handles count as external streams. A device outside 0..=255 is ignored with
/// the error set.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_register_stream(s: *mut c_void, device: c_int, stream_id: i64) {
    guard("cachalot_register_stream", (), || {
        let Ok(d) = u8::try_from(device) else {
            return fail(&format!(
                "register_stream: device {device} is not a device index (0..=255)"
            ));
        };
        cachalot::register_c10_stream(stream(s), d, stream_id);
    })
}

/// `torch.cuda.memory_stats(device)` as one JSON object with torch's flat keys
/// (`"allocated_bytes.all.current": 1024, ...`). The string stays valid until this thread's
/// next call returning a string; NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_memory_stats_json(device_index: c_int) -> *const c_char {
    guard("cachalot_memory_stats_json", std::ptr::null(), || {
        let Some(a) = device(device_index) else {
            return std::ptr::null();
        };
        stats_json(a.stats())
    })
}

/// `stats` as `memory_stats` JSON, valid until this thread's next call returning a string;
/// NULL, with the error reported, when they could not be read.
pub(crate) fn stats_json<E: std::fmt::Display>(
    stats: Result<cachalot::DeviceStats, E>,
) -> *const c_char {
    match stats {
        Ok(s) => returned(&stats::memory_stats_json(&s)),
        Err(e) => {
            fail(&e.to_string());
            std::ptr::null()
        }
    }
}

/// `torch.cuda.memory_summary(device)`: torch's table. Valid until this thread's next call
/// returning a string; NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_memory_summary(device_index: c_int) -> *const c_char {
    guard("cachalot_memory_summary", std::ptr::null(), || {
        let Some(a) = device(device_index) else {
            return std::ptr::null();
        };
        match a.stats() {
            Ok(s) => returned(&cachalot_torchfmt::memory_summary(
                &s,
                device_index as u32,
                false,
            )),
            Err(e) => {
                fail(&e.to_string());
                std::ptr::null()
            }
        }
    })
}

/// Starts recording allocation history on every open device and on devices opened later
/// (`torch.cuda.memory._record_memory_history(max_entries=...)`); 0 stops and clears it.
/// Returns 0, or -1 if a device cannot record (the direct backends).
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_record_history(max_entries: usize) -> c_int {
    guard("cachalot_record_history", -1, || {
        let Ok(g) = Global::get() else { return -1 };
        let entries = (max_entries > 0).then_some(max_entries);
        *g.history.lock().unwrap_or_else(|e| e.into_inner()) = entries;
        let mut rc = 0;
        for (i, a) in g.opened() {
            if let Err(e) = a.record_history(entries) {
                fail(&format!("device {i}: {e}"));
                rc = -1;
            }
        }
        rc
    })
}

/// Writes a torch-compatible snapshot pickle of every open device to `path`
/// (`torch.cuda.memory._dump_snapshot`), viewable at `https://pytorch.org/memory_viz`.
/// Returns 0, -1 for a bad path or a write error, -2 when a device's backend keeps no blocks
/// (`backend:cudaMallocAsync`, no caching), -3 when the library could not start.
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string that stays valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cachalot_dump_snapshot(path: *const c_char) -> c_int {
    guard("cachalot_dump_snapshot", -1, || {
        if path.is_null() {
            fail("cachalot_dump_snapshot: path is NULL");
            return -1;
        }
        // Safety: non-null (checked), and NUL-terminated and valid for the call by this
        // function's contract (the header documents it); it is only read.
        let path = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned();
        let g = match Global::get() {
            Ok(g) => g,
            Err(e) => {
                set_error(&e);
                return -3;
            }
        };
        let _lock = g.dump_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut snap = cachalot_torchfmt::Snapshot::from_allocator(&[], &[], &g.settings.conf, 0);
        for (i, a) in g.opened() {
            let segments = match a.segments() {
                Ok(s) => s,
                Err(e) => {
                    fail(&format!("device {i}: {e}"));
                    return -2;
                }
            };
            let one = cachalot_torchfmt::Snapshot::from_allocator(
                &segments,
                &a.history(),
                &g.settings.conf,
                i as u32,
            );
            snap.segments.extend(one.segments);
            if snap.device_traces.len() <= i {
                snap.device_traces.resize(i + 1, Default::default());
            }
            snap.device_traces[i] = one.device_traces[i].clone();
        }
        let bytes = cachalot_torchfmt::to_pickle_bytes(&snap);
        match cachalot_trace::write_atomic(Path::new(&path), |w| w.write_all(&bytes)) {
            Ok(()) => 0,
            Err(e) => {
                fail(&format!("cannot write snapshot {path}: {e}"));
                -1
            }
        }
    })
}

/// `torch.cuda.reset_peak_memory_stats(device)`.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_reset_peak_stats(device_index: c_int) {
    guard("cachalot_reset_peak_stats", (), || {
        if let Some(a) = device(device_index)
            && let Err(e) = a.reset_peak_stats()
        {
            fail(&e.to_string());
        }
    })
}

/// `torch.cuda.reset_accumulated_memory_stats(device)`.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_reset_accumulated_stats(device_index: c_int) {
    guard("cachalot_reset_accumulated_stats", (), || {
        if let Some(a) = device(device_index) {
            a.reset_accumulated_stats();
        }
    })
}

/// How many frees of pointers the library did not hand out were reported and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_unknown_frees() -> u64 {
    guard("cachalot_unknown_frees", 0, || {
        Global::get().map_or(0, |g| g.unknown_frees.load(Ordering::Relaxed))
    })
}

/// The last error reported on this thread ("" if none). Valid until the next error on this
/// thread.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_last_error() -> *const c_char {
    guard(
        "cachalot_last_error",
        c"internal error".as_ptr(),
        report::last_error,
    )
}

/// Where memory comes from: `cuda` or `sim` (`CACHALOT_DEVICE`, read when the library starts,
/// which this call does), or NULL if the library could not start. A static string.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_device_kind() -> *const c_char {
    guard(
        "cachalot_device_kind",
        std::ptr::null(),
        || match Global::get() {
            Ok(g) => match g.kind {
                state::Kind::Cuda => c"cuda".as_ptr(),
                state::Kind::Sim => c"sim".as_ptr(),
            },
            Err(e) => {
                set_error(&e);
                std::ptr::null()
            }
        },
    )
}

/// The backend serving requests (`native`, `cudaMallocAsync` or `uncached`), or NULL if the
/// library could not start. A static string.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_backend() -> *const c_char {
    guard("cachalot_backend", std::ptr::null(), || {
        match Global::get() {
            Ok(g) => match g.settings.backend() {
                cachalot::Backend::Native => c"native".as_ptr(),
                cachalot::Backend::CudaMallocAsync => c"cudaMallocAsync".as_ptr(),
                cachalot::Backend::Uncached => c"uncached".as_ptr(),
            },
            Err(e) => {
                set_error(&e);
                std::ptr::null()
            }
        }
    })
}
