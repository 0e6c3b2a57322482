//! # cachalot
//!
//! PyTorch's CUDA caching allocator (torch 2.15's algorithm, decision for decision) for Rust
//! ML code: candle, burn, or plain [cudarc](https://crates.io/crates/cudarc).
//!
//! An [`Allocator`] is one GPU's allocator, configured exactly like PyTorch's
//! (`PYTORCH_CUDA_ALLOC_CONF`, cachalot's `CACHALOT_ALLOC_CONF`, or a string in code, all read
//! by [`Settings`]). It hands out RAII device memory that goes back to the cache when dropped:
//! [`DeviceBuffer`] (bytes, any device) and, with the `cuda` feature, `CudaBuffer<T>` (typed,
//! on a cudarc `CudaStream`, usable wherever cudarc takes a device slice and as a kernel
//! argument). [`Allocators`] holds one allocator per GPU. Statistics are torch's
//! ([`DeviceStats`], the numbers of `torch.cuda.memory_stats()`).
//!
//! The backend follows the configuration, as in torch 2.15: the caching allocator
//! (`backend:native`, the default), the driver's stream-ordered pool
//! (`backend:cudaMallocAsync`), or plain `cudaMalloc`/`cudaFree`
//! (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`); see [`Backend`].
//!
//! ## Example
//!
//! Everything is generic over [`Device`]: this runs on the simulated GPU of [`cachalot_sim`];
//! on a real one use [`CudaDevice`] (feature `cuda`).
//!
//! ```
//! use cachalot::{Allocator, Settings, SimConfig, SimDevice, StreamId};
//!
//! let settings = Settings::parse("expandable_segments:True")?;
//! let alloc = Allocator::new(&settings, SimDevice::new(SimConfig::default()))?;
//! let buf = alloc.alloc(3 << 20, StreamId::DEFAULT)?;
//! assert_eq!(buf.len(), 3 << 20);
//! drop(buf); // back to the cache, not to the device
//! let stats = alloc.stats()?;
//! assert_eq!(stats.allocated_bytes.all().current, 0);
//! assert_eq!(stats.reserved_bytes.all().current, 20 << 20); // one 20 MiB page mapped
//! alloc.empty_cache()?;
//! assert_eq!(alloc.stats()?.reserved_bytes.all().current, 0);
//! # Ok::<(), cachalot::Error>(())
//! ```
//!
//! With cudarc (feature `cuda`; `examples/cudarc_kernel.rs` runs a kernel on a cachalot buffer):
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! use cachalot::cudarc::driver::CudaContext;
//! use cachalot::{Allocator, CudaDevice, Settings};
//!
//! let ctx = CudaContext::new(0).unwrap();
//! let stream = ctx.new_stream().unwrap();
//! let alloc = Allocator::new(&Settings::from_env().unwrap(), CudaDevice::new(0).unwrap()).unwrap();
//! let mut buf = alloc.alloc_on::<f32>(&stream, 1024).unwrap();
//! stream.memcpy_htod(&vec![1.0f32; 1024], &mut buf).unwrap(); // any cudarc copy or launch
//! let back: Vec<f32> = stream.clone_dtoh(&buf).unwrap();
//! assert_eq!(back[0], 1.0);
//! # }
//! ```
//!
//! ## Feature flags
//!
//! - `cuda` (default): real GPUs through the CUDA driver, loaded at run time (building needs
//!   no CUDA toolkit or driver; without a driver [`CudaDevice::new`] returns an error), and
//!   the cudarc interop: `CudaBuffer<T>`, `Allocator::alloc_on`, `stream_id`, and
//!   `cachalot::cudarc` (the cudarc this crate was built with).
//!
//! ## Error model
//!
//! Every fallible call returns [`Error`] (`#[non_exhaustive]`): [`Error::Alloc`] wraps core's
//! one allocator error [`AllocError`], the same for every backend. An out-of-memory error
//! ([`Error::is_out_of_memory`]) displays torch 2.15's numbers with its advice worded for this
//! crate: how to configure an [`Allocator`] (a [`Settings`] string for [`Allocator::new`],
//! or the environment for [`Allocator::from_env`]) where torch says to set
//! `PYTORCH_CUDA_ALLOC_CONF`; [`Error::torch_text`] is torch's own message, word for word
//! (what the C library raises inside PyTorch). [`Error::Config`] is a
//! configuration torch would reject, quoting the entry and saying what is valid
//! ([`ConfigError::torch_message`] is torch's own text). Nothing panics on bad input, and a
//! failed call leaves the allocator as it was. A free that fails when a buffer is dropped
//! cannot return its error: it is counted ([`Allocator::drop_errors`]) and printed on stderr.
//!
//! Stream rules are PyTorch's: memory belongs to the stream it was allocated on; a buffer
//! used on another stream must be told so ([`DeviceBuffer::record_stream`]; `CudaBuffer` does
//! it when cudarc asks for its pointer on another stream) so that its memory is not reused
//! before that stream's work completes.

// Unsafe only in `cudarc_buffer.rs`: implementing cudarc's `PushKernelArg` is an `unsafe impl`
// (each one carries a `// SAFETY:` comment). Everything else is safe code.
#![deny(unsafe_code)]

mod allocator;
#[cfg(feature = "cuda")]
mod cudarc_buffer;
pub mod stats;

pub use allocator::{Allocator, Allocators, DeviceBuffer};

pub use cachalot_core::async_backend::{AsyncAllocator, AsyncOomReport, DirectMode};
pub use cachalot_core::config::{self, ConfigError, EnvSource, Overrides, Settings, Warning};
/// torch's identity of a stream handle, for the order torch frees event-held blocks in.
pub use cachalot_core::streams::register_c10_stream;
pub use cachalot_core::{
    AllocConf, AllocError, Backend, ByteSizeError, CachingAllocator, DeviceStats, MemoryResource,
    MempoolId, OomReport, Operation, PoolError, SegmentInfo, Stat, StatArray, StreamFilter,
    TraceEntry, format_size, parse_byte_size,
};
pub use cachalot_device::{Device, DeviceError, DeviceResult, MemInfo, StreamId};
pub use cachalot_sim::{SimConfig, SimDevice};

#[cfg(feature = "cuda")]
pub use cachalot_cuda::{CudaDevice, CudaInitError, device_count as cuda_device_count};
#[cfg(feature = "cuda")]
pub use cudarc;
#[cfg(feature = "cuda")]
pub use cudarc_buffer::{CudaBuffer, stream_id};

/// A raw device address, as the CUDA driver API (and cudarc's `sys`) types it.
pub type CUdeviceptr = u64;

/// Why a call failed: an allocator error (core's one error type, the same for every backend),
/// a rejected configuration, or a GPU that could not be opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the allocator, whichever backend serves it; an out-of-memory error shows
    /// torch's numbers and this crate's advice ([`Error::torch_text`] is torch's text).
    #[error("{}", for_rust(.0))]
    Alloc(#[from] AllocError),
    /// The configuration was rejected ([`ConfigError::torch_message`] is what torch 2.15
    /// would raise).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `len` elements of `elem` bytes do not fit in a `usize`.
    #[error("cannot allocate {len} elements of {elem} bytes: the size overflows")]
    TooLarge {
        /// Elements asked for.
        len: usize,
        /// Bytes per element.
        elem: usize,
    },
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

    /// The message torch 2.15 gives for this error, word for word (an out-of-memory error's
    /// advice names `PYTORCH_CUDA_ALLOC_CONF`); the `Display` text of every other error.
    pub fn torch_text(&self) -> String {
        match self {
            Error::Alloc(e) => e.to_string(),
            other => other.to_string(),
        }
    }
}

/// torch's advice at the end of an out-of-memory message, and what this crate says instead.
const ADVICE: [(&str, &str); 3] = [
    (
        " If reserved but unallocated memory is large try setting \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        " If reserved but unallocated memory is large, configure the allocator with \
         expandable_segments:True to avoid fragmentation: \
         `Settings::parse(\"expandable_segments:True\")` for `Allocator::new`, or \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment of \
         `Allocator::from_env`.",
    ),
    (
        "Raise PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve",
        "Raise the allocator's expandable_segments_reserve (a `Settings` string, or \
         PYTORCH_CUDA_ALLOC_CONF for `Allocator::from_env`)",
    ),
    (
        "reduce it via PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve",
        "reduce it with the allocator's expandable_segments_reserve (a `Settings` string, or \
         PYTORCH_CUDA_ALLOC_CONF for `Allocator::from_env`)",
    ),
];

/// An allocator error as a Rust user reads it: torch's out-of-memory numbers, with the
/// advice that names torch's environment variable and documentation worded for this crate.
fn for_rust(e: &AllocError) -> String {
    let mut text = e.to_string();
    if !e.is_out_of_memory() {
        return text;
    }
    for (torch, ours) in ADVICE {
        text = text.replace(torch, ours);
    }
    if let Some(i) = text.find("  See documentation for Memory Management") {
        text.truncate(i);
    }
    text.replace(" by PyTorch", " by the allocator")
}

/// Result of an allocator call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
