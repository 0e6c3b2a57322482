//! What a replay drives: torch's caching allocator (`backend:native`), or one of the direct
//! backends (`backend:cudaMallocAsync`, or no caching at all with
//! `PYTORCH_NO_CUDA_MEMORY_CACHING=1`) — one interface, so the replay loop is written once.

use cachalot_core::async_backend::{AsyncAllocator, AsyncError, DirectMode};
use cachalot_core::{
    AllocConf, AllocError, Backend, CachingAllocator, DeviceError, DeviceStats, MemorySnapshot,
    OomReport, StreamId,
};
use cachalot_sim::SimDevice;

/// The allocator a replay runs. One per replay, so the size difference is harmless.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    Caching(CachingAllocator<SimDevice>),
    Direct(AsyncAllocator<SimDevice>),
}

/// A failed allocation, as the replay sees it.
pub(crate) enum MallocError {
    /// Out of memory: the numbers (caching allocator only), and torch's message.
    OutOfMemory(Option<Box<OomReport>>, String),
    /// Rejected before reaching the allocator (sizes that overflow).
    Rejected(AllocError),
    /// Anything else stops the replay.
    Fatal(AllocError),
}

fn from_async(e: AsyncError) -> AllocError {
    match e {
        AsyncError::InvalidPointer { ptr } => AllocError::InvalidPointer { ptr },
        AsyncError::Device(d) => AllocError::Device(d),
        AsyncError::OutOfMemory(r) => AllocError::Device(DeviceError::Driver {
            call: "cudaMallocAsync",
            message: r.to_string(),
        }),
    }
}

impl Target {
    /// The allocator `conf` asks for; `no_caching` is `PYTORCH_NO_CUDA_MEMORY_CACHING=1`.
    pub fn new(conf: &AllocConf, no_caching: bool, device: SimDevice) -> Result<Self, AllocError> {
        let mode = match (conf.backend, no_caching) {
            (Backend::CudaMallocAsync, _) => Some(DirectMode::StreamOrdered),
            (Backend::Uncached, _) => Some(DirectMode::Uncached),
            (Backend::Native, true) => Some(DirectMode::Uncached),
            (Backend::Native, false) => None,
        };
        Ok(match mode {
            None => Target::Caching(CachingAllocator::new(conf.clone(), device)?),
            Some(mode) => {
                Target::Direct(AsyncAllocator::new(conf, mode, device).map_err(from_async)?)
            }
        })
    }

    pub fn malloc(&self, size: u64, stream: StreamId) -> Result<u64, MallocError> {
        match self {
            Target::Caching(a) => a.malloc(size, stream).map_err(|e| match e {
                AllocError::OutOfMemory(r) => {
                    let message = r.to_string();
                    MallocError::OutOfMemory(Some(r), message)
                }
                e @ AllocError::InvalidSize { .. } => MallocError::Rejected(e),
                e => MallocError::Fatal(e),
            }),
            Target::Direct(a) => a.malloc(size, stream).map_err(|e| match e {
                AsyncError::OutOfMemory(_) | AsyncError::Device(DeviceError::OutOfMemory) => {
                    MallocError::OutOfMemory(None, e.to_string())
                }
                e => MallocError::Fatal(from_async(e)),
            }),
        }
    }

    pub fn free(&self, ptr: u64) -> Result<(), AllocError> {
        match self {
            Target::Caching(a) => a.free(ptr),
            Target::Direct(a) => a.free(ptr).map_err(from_async),
        }
    }

    pub fn empty_cache(&self) -> Result<(), AllocError> {
        match self {
            Target::Caching(a) => a.empty_cache(),
            Target::Direct(a) => a.empty_cache().map_err(from_async),
        }
    }

    pub fn record_history(&self, max_entries: Option<usize>) {
        if let Target::Caching(a) = self {
            a.record_history(max_entries);
        }
    }

    /// The snapshot, for the caching allocator (the direct backends keep none).
    pub fn snapshot(&self) -> Option<MemorySnapshot> {
        match self {
            Target::Caching(a) => Some(a.snapshot()),
            Target::Direct(_) => None,
        }
    }

    pub fn stats(&self) -> DeviceStats {
        match self {
            Target::Caching(a) => a.stats(),
            Target::Direct(a) => a.stats().unwrap_or_default(),
        }
    }

    pub fn with_stats<T>(&self, f: impl FnOnce(&DeviceStats) -> T) -> T {
        match self {
            Target::Caching(a) => a.with_stats(f),
            Target::Direct(a) => f(&a.stats().unwrap_or_default()),
        }
    }

    pub fn with_device<T>(&self, f: impl FnOnce(&mut SimDevice) -> T) -> T {
        match self {
            Target::Caching(a) => a.with_device(f),
            Target::Direct(a) => a.with_device(f),
        }
    }

    pub fn into_device(self) -> SimDevice {
        match self {
            Target::Caching(a) => a.into_device(),
            Target::Direct(a) => a.into_device(),
        }
    }
}
