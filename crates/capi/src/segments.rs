//! cachalot as the allocator *of* a `torch.cuda.MemPool`: segments for torch's own caching
//! allocator, which rounds, caches and splits on top.
//!
//! ```python
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "cachalot_segment_malloc", "cachalot_segment_free")
//! pool = torch.cuda.MemPool(alloc.allocator())      # torch's allocator stays the process's
//! with torch.cuda.use_mem_pool(pool): ...
//! ```
//!
//! torch asks such an allocator for each new segment of the pool (`raw_alloc` of the segment
//! size: 2 MiB for small requests, 20 MiB or the rounded size for large ones) and gives it back
//! when it frees the segment (`raw_delete`, at `empty_cache` or its out-of-memory retry once
//! the pool is released). Caching here too would hold memory torch has already given back, so
//! each request is its own device allocation of exactly that size, freed at once: core's
//! direct allocator in `DirectMode::Segments`, one per device, apart from the caching
//! allocators `cachalot_malloc` serves. Its statistics ([`cachalot_segment_stats_json`]) are
//! what torch holds from it: `reserved_bytes` = the pool segments torch has.
//!
//! Out of memory returns NULL, which torch reads as a failed `cudaMalloc`: it frees what it
//! can, retries, and raises its own `torch.OutOfMemoryError`. Any other failure (a device that
//! cannot be opened) is raised as `RuntimeError` when torch's allocator made the call, as torch
//! raises a CUDA error that is not about memory, and is NULL for any other caller; the reason is in `cachalot_last_error`.

use std::ffi::{c_char, c_int, c_void};

use cachalot::{AllocError, DeviceError};

use crate::report::{fail, guard, set_error};
use crate::state::{Global, Segments};
use crate::{Failed, hand_back, open_for, stream};

/// The segment source of a device, found as lib.rs finds an allocator ([`open_for`]).
fn source(index: c_int) -> Option<&'static Segments> {
    open_for(index, |g| g.segment_source(index))
}

/// A new segment of exactly `size` bytes on `device` (`stream`: torch's current stream, not
/// needed). NULL for size 0 and on failure (see the module documentation).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cachalot_segment_malloc(
    size: usize,
    device_index: c_int,
    s: *mut c_void,
) -> *mut c_void {
    let result = guard(
        "cachalot_segment_malloc",
        Err(Failed::raise(false, "")),
        || {
            // The reason is this thread's last error already.
            let source = source(device_index).ok_or_else(|| Failed::raise(false, ""))?;
            source
                .malloc(size as u64, stream(s))
                .map(|p| p as usize as *mut c_void)
                .map_err(|e| match e {
                    AllocError::Device(DeviceError::OutOfMemory) => Failed::Null(format!(
                        "device {device_index}: a segment of {size} bytes: out of memory"
                    )),
                    e => Failed::raise(false, format!("device {device_index}: {e}")),
                })
        },
    );
    hand_back(result)
}

/// Gives the segment at `ptr` (from [`cachalot_segment_malloc`] on `device`) back to the
/// device at once. `size` and `stream` are what torch passes back; the source knows both.
/// NULL is a no-op; an unknown pointer is reported and counted, not fatal.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_segment_free(
    ptr: *mut c_void,
    _size: usize,
    device_index: c_int,
    _s: *mut c_void,
) {
    guard("cachalot_segment_free", (), || {
        let p = ptr as usize as u64;
        if p == 0 {
            return;
        }
        let g = match Global::get() {
            Ok(g) => g,
            Err(e) => return set_error(&e),
        };
        match g.segment_source(device_index) {
            Ok(source) => match source.free(p) {
                Ok(()) => {}
                Err(e) if e.is_invalid_pointer() => g.report_unknown_free(
                    p,
                    device_index,
                    "not a segment of this library's MemPool allocator",
                ),
                Err(e) => fail(&format!(
                    "freeing segment {p:#x} on device {device_index} failed: {e}"
                )),
            },
            Err(e) => g.report_unknown_free(p, device_index, &e),
        }
    })
}

/// What torch holds from [`cachalot_segment_malloc`] on `device`, as `memory_stats` JSON:
/// each live segment is one allocation and one segment of its size (small pool if at most
/// 2 MiB), so `reserved_bytes` = `allocated_bytes` = the bytes torch holds;
/// `num_device_alloc` / `num_device_free` count the device calls. Valid until this thread's
/// next call returning a string; NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_segment_stats_json(device_index: c_int) -> *const c_char {
    guard("cachalot_segment_stats_json", std::ptr::null(), || {
        let Some(source) = source(device_index) else {
            return std::ptr::null();
        };
        crate::stats_json(source.stats())
    })
}

/// `torch.cuda.reset_peak_memory_stats` for the segment source of `device`: peaks become the
/// current values.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_segment_reset_peak_stats(device_index: c_int) {
    guard("cachalot_segment_reset_peak_stats", (), || {
        if let Some(source) = source(device_index)
            && let Err(e) = source.reset_peak_stats()
        {
            fail(&e.to_string());
        }
    })
}
