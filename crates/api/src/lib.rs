//! PyTorch's CUDA caching allocator for Rust ML code (candle, burn, or plain cudarc).
//!
//! An [`Allocator`] is one GPU's allocator, configured exactly like PyTorch's
//! (`PYTORCH_CUDA_ALLOC_CONF`, or cachalot's `CACHALOT_ALLOC_CONF`, or a string in code). It
//! hands out [`DeviceBuffer`]s: RAII device memory, returned to the cache when dropped, usable
//! as a raw `CUdeviceptr` with any CUDA library. [`Allocators`] holds one allocator per GPU.
//!
//! The backend follows the configuration, as in torch 2.15: the caching allocator
//! (`backend:native`, the default), the driver's stream-ordered pool
//! (`backend:cudaMallocAsync`), or plain `cudaMalloc`/`cudaFree`
//! (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`).
//!
//! Everything is generic over [`Device`], so it runs on the simulated GPU of
//! [`cachalot_sim`] as well as on a real one ([`CudaDevice`], feature `cuda`, on by default; it
//! loads the CUDA driver at run time, so building needs no CUDA).
//!
//! ```
//! use cachalot::{Allocator, Settings, SimConfig, SimDevice, StreamId};
//!
//! let settings = Settings::parse("expandable_segments:True").unwrap();
//! let alloc = Allocator::new(&settings, SimDevice::new(SimConfig::default())).unwrap();
//! let buf = alloc.alloc(3 << 20, StreamId::DEFAULT).unwrap();
//! let raw: u64 = buf.as_ptr(); // a CUdeviceptr for cudarc, cuBLAS, your kernels, ...
//! assert_ne!(raw, 0);
//! drop(buf); // back to the cache
//! let stats = alloc.memory_stats().unwrap();
//! assert_eq!(stats["allocated_bytes.all.current"], 0);
//! assert_eq!(stats["reserved_bytes.all.current"], 20 << 20);
//! alloc.empty_cache().unwrap();
//! assert_eq!(alloc.memory_stats().unwrap()["reserved_bytes.all.current"], 0);
//! ```
//!
//! With cudarc, a buffer's pointer and stream are raw driver handles: pass
//! [`DeviceBuffer::device_ptr`] where a `CUdeviceptr` is expected, and allocate on the stream
//! your kernels run on (`StreamId(stream.cu_stream() as u64)`). Free order follows PyTorch's
//! rules: a buffer used on another stream than its own must be told so with
//! [`DeviceBuffer::record_stream`] before it is dropped.

#![forbid(unsafe_code)]

mod allocator;
pub mod stats;

pub use allocator::{Allocator, Allocators, DeviceBuffer};

pub use cachalot_core::async_backend::{AsyncAllocator, AsyncOomReport, DirectMode};
pub use cachalot_core::config::{self, ConfigError, EnvSource, Overrides, Settings, Warning};
pub use cachalot_core::{
    AllocConf, AllocError, Backend, ByteSizeError, CachingAllocator, DeviceStats, MemoryResource,
    MempoolId, OomReport, Operation, PoolError, SegmentInfo, Stat, StatArray, StreamFilter,
    TraceEntry, format_size, parse_byte_size,
};
pub use cachalot_device::{Device, DeviceError, DeviceResult, MemInfo, StreamId};
pub use cachalot_sim::{SimConfig, SimDevice};

#[cfg(feature = "cuda")]
pub use cachalot_cuda::{CudaDevice, CudaInitError, device_count as cuda_device_count};

/// A raw device address, as the CUDA driver API (and cudarc's `sys`) types it.
pub type CUdeviceptr = u64;

/// Why a call failed: an allocator error (core's one error type, the same for every backend),
/// a rejected configuration, or a GPU that could not be opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the allocator, whichever backend serves it; its out-of-memory text is torch's.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The configuration was rejected ([`ConfigError::torch_message`] is what torch 2.15
    /// would raise).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The CUDA driver or a GPU could not be opened (feature `cuda`).
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    CudaInit(#[from] CudaInitError),
}

impl Error {
    /// Whether this is an out-of-memory error (`torch.OutOfMemoryError`, any backend).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Alloc(e) if e.is_out_of_memory())
    }

    /// Whether the address given was not a live allocation.
    pub fn is_invalid_pointer(&self) -> bool {
        matches!(self, Error::Alloc(e) if e.is_invalid_pointer())
    }
}

/// Result of an allocator call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
