//! A CUDA GPU behind cachalot's [`Device`](cachalot_device::Device) trait.
//!
//! [`CudaDevice`] calls the CUDA **driver API** through [`cudarc`]'s raw bindings, with the
//! driver library (`libcuda.so`) loaded at run time: building needs no CUDA toolkit and no
//! driver, and on a machine without one [`CudaDevice::new`] returns
//! [`CudaInitError::NoDriver`] ("no CUDA driver found: …") instead of failing to start.
//!
//! Why the driver API rather than the runtime's `cudaMalloc`: the VMM calls of expandable
//! segments (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, …) exist only there, the
//! driver is the one library every CUDA machine has (the runtime ships with applications and
//! comes in several versions, of which PyTorch loads its own), and working in the device's
//! *primary* context shares memory, streams and events with the runtime, so PyTorch's
//! `cudaStream_t` handles can be passed straight in as [`StreamId`](cachalot_device::StreamId)s.
//!
//! What the trait's calls become:
//!
//! | trait | driver |
//! |---|---|
//! | `malloc` / `free` | `cuMemAlloc` / `cuMemFree` |
//! | `mem_get_info` | `cuMemGetInfo` |
//! | `record_event` / `query_event` / `synchronize_event` | `cuEventRecord` / `cuEventQuery` / `cuEventSynchronize` (events recycled) |
//! | `synchronize_stream` | `cuStreamSynchronize` |
//! | `address_reserve` / `address_free` | `cuMemAddressReserve` / `cuMemAddressFree` |
//! | `mem_create` / `mem_release` | `cuMemCreate` / `cuMemRelease` |
//! | `mem_map` / `mem_unmap` | `cuMemMap` + `cuMemSetAccess` / `cuMemUnmap` |
//! | `granularity` | `cuMemGetAllocationGranularity` |
//! | `malloc_async` / `free_async` | `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` on the default pool |
//! | `trim` | `cuCtxSynchronize` + `cuMemPoolTrimTo` |
//! | `pool_usage` / `reset_pool_peaks` | `cuMemPoolGetAttribute` / `cuMemPoolSetAttribute` |
//!
//! `CUDA_ERROR_OUT_OF_MEMORY` becomes [`DeviceError::OutOfMemory`](cachalot_device::DeviceError)
//! (the allocator frees its cache and retries); every other error becomes
//! `DeviceError::Driver { call, message }` with the call and the driver's error name, and is
//! never treated as out-of-memory.
//!
//! ```no_run
//! use cachalot_cuda::CudaDevice;
//! use cachalot_device::{Device, StreamId};
//!
//! match CudaDevice::new(0) {
//!     Ok(mut gpu) => {
//!         let p = gpu.malloc(1 << 20).unwrap();
//!         gpu.copy_to_device(p, &[1, 2, 3]).unwrap();
//!         gpu.free(p, 1 << 20).unwrap();
//!     }
//!     Err(e) => eprintln!("skipping: {e}"), // "no CUDA driver found: ..."
//! }
//! ```
//!
//! cudarc needs one CUDA version feature to choose its bindings; this crate's default feature
//! `cuda-13020` picks CUDA 13.2 (what torch 2.15 is built with). The bindings call only
//! functions every driver since CUDA 11.2 exports.

// This crate and `cachalot-capi` are the only places cachalot calls C code. Every `unsafe`
// block carries a `// Safety:` comment saying why it is sound.
#![allow(unsafe_code)]

mod device;
mod driver;

pub use device::{CudaDevice, device_count};
#[doc(hidden)]
pub use driver::SYMBOLS;

use cachalot_device::DeviceError;

/// Why a [`CudaDevice`] could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaInitError {
    /// `libcuda.so` is not installed or cannot be loaded.
    #[error("no CUDA driver found: {0}")]
    NoDriver(String),
    /// The driver library lacks entry points cachalot calls (an old or incomplete driver).
    #[error(
        "the CUDA driver library (libcuda) does not export {}, which cachalot calls: the \
         driver is older than CUDA 11.2 or not a complete NVIDIA driver; update the NVIDIA driver",
        missing.join(", ")
    )]
    MissingSymbols {
        /// The missing functions.
        missing: Vec<&'static str>,
    },
    /// The driver has fewer devices than the ordinal asked for.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A driver call failed while opening the device (e.g. `cuInit` with no GPU present).
    #[error("CUDA driver found, but {0}")]
    Driver(#[from] DeviceError),
}

/// Whether the CUDA driver library can be loaded on this machine (no driver call is made).
pub fn driver_available() -> bool {
    driver::driver_present()
}
