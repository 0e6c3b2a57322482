//! Private memory pools through the C library: the three optional hooks of torch's
//! `CUDAPluggableAllocator` that CUDA-graph capture and `torch.cuda.MemPool` drive
//! (`set_begin_allocate_to_pool`, `set_end_allocate_to_pool_fn`, `set_release_pool`), plus
//! `emptyCache(pool)` and `getPoolUseCount`.
//!
//! torch declares the hooks with C++ types: `std::function<void(int, MempoolId_t,
//! std::function<bool(cudaStream_t)>)>` for the first, `std::function<void(int,
//! MempoolId_t)>` for the others (`torch/csrc/cuda/CUDAPluggableAllocator.h`), and
//! `MempoolId_t` is `std::pair<uint64_t, uint64_t>`. A C function cannot take a
//! `std::function`, so these take the pool id as its two members and the stream filter as a
//! C function with a context pointer; `python/cachalot/graph_pools.cpp` wraps them for torch
//! (`cachalot.torch.enable_graph_pools()`). Every function returns 0 on success and -1 on
//! failure, with torch's message in `cachalot_last_error`; misuse leaves the allocator as it
//! was.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cachalot::{AllocError, MempoolId, StreamFilter, StreamId};

use crate::device;
use crate::report::{fail, guard};

/// A stream filter from C: nonzero if allocations on `stream` go to the pool.
pub type CachalotStreamFilter =
    Option<unsafe extern "C" fn(ctx: *mut c_void, stream: *mut c_void) -> c_int>;

/// The C filter and its context, callable from any thread.
struct CFilter {
    f: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    ctx: *mut c_void,
}

// SAFETY: the caller of `cachalot_begin_allocate_to_pool` promises (header) that the filter
// may be called from any thread with `ctx` until the matching `cachalot_end_allocate_to_pool`
// returns; cachalot only passes `ctx` back to it.
unsafe impl Send for CFilter {}
// SAFETY: as above; the filter only reads through `ctx`, torch's filters compare stream ids.
unsafe impl Sync for CFilter {}

impl CFilter {
    fn accepts(&self, s: StreamId) -> bool {
        // SAFETY: `f` is the caller's filter and `ctx` its context, valid until the pool is
        // ended (see above); the stream goes back as the handle it came from.
        unsafe { (self.f)(self.ctx, s.0 as usize as *mut c_void) != 0 }
    }
}

fn id(first: u64, second: u64) -> MempoolId {
    MempoolId { first, second }
}

/// Runs `f` on the caching allocator of `device_index`; 0, or -1 with the error reported.
fn on_pool(
    name: &str,
    device_index: c_int,
    f: impl FnOnce(&cachalot::CachingAllocator<Box<dyn cachalot::Device>>) -> Result<(), AllocError>,
) -> c_int {
    guard(name, -1, || {
        let Some(a) = device(device_index) else {
            return -1;
        };
        let Some(c) = a.caching() else {
            fail(&format!(
                "{name}: private pools need the caching allocator (backend:native); this one is {}",
                a.backend().name()
            ));
            return -1;
        };
        match f(c) {
            Ok(()) => 0,
            Err(e) => {
                fail(&e.to_string());
                -1
            }
        }
    })
}

/// torch's `beginAllocateToPool` hook: allocations on the streams `filter` accepts (every
/// stream if `filter` is NULL) go to pool `(first, second)` until
/// [`cachalot_end_allocate_to_pool`]; the pool is made if missing and holds a reference.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_begin_allocate_to_pool(
    device_index: c_int,
    first: u64,
    second: u64,
    filter: CachalotStreamFilter,
    ctx: *mut c_void,
) -> c_int {
    let filter = match filter {
        None => StreamFilter::All,
        Some(f) => {
            let c = CFilter { f, ctx };
            StreamFilter::Custom(Arc::new(move |s: StreamId| c.accepts(s)))
        }
    };
    on_pool("cachalot_begin_allocate_to_pool", device_index, |a| {
        a.begin_allocate_to_pool(id(first, second), filter)
    })
}

/// torch's `endAllocateToPool` hook: stops routing to the pool (the reference stays).
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_end_allocate_to_pool(
    device_index: c_int,
    first: u64,
    second: u64,
) -> c_int {
    on_pool("cachalot_end_allocate_to_pool", device_index, |a| {
        a.end_allocate_to_pool(id(first, second))
    })
}

/// torch's `releasePool` hook: drops one reference; at 0 the pool's free memory goes at the
/// next `empty_cache` (or out-of-memory retry).
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_release_pool(device_index: c_int, first: u64, second: u64) -> c_int {
    on_pool("cachalot_release_pool", device_index, |a| {
        a.release_pool(id(first, second))
    })
}

/// `createOrIncrefPool`: makes the pool with one reference (a `MemPool` object), or adds one.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_create_or_incref_pool(
    device_index: c_int,
    first: u64,
    second: u64,
) -> c_int {
    on_pool("cachalot_create_or_incref_pool", device_index, |a| {
        a.create_or_incref_pool(id(first, second))
    })
}

/// `emptyCache(pool)`: frees pool `(first, second)`'s free segments if its count is 0
/// (`(0, 0)`: the whole cache).
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_empty_cache_pool(device_index: c_int, first: u64, second: u64) -> c_int {
    on_pool("cachalot_empty_cache_pool", device_index, |a| {
        a.empty_cache_pool(id(first, second))
    })
}

/// `getPoolUseCount`: the pool's references, or -1 if there is no such pool.
#[unsafe(no_mangle)]
pub extern "C" fn cachalot_pool_use_count(device_index: c_int, first: u64, second: u64) -> c_int {
    guard("cachalot_pool_use_count", -1, || {
        device(device_index)
            .and_then(|a| a.caching())
            .and_then(|c| c.pool_use_count(id(first, second)))
            .unwrap_or(-1)
    })
}
