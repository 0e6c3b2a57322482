//! [`MemoryResource`]: one device's allocator, whichever backend serves it — the one interface
//! the replay, the Rust API and the C library allocate through (rmm's single memory-resource
//! interface is the model).
//!
//! The backend is [`AllocConf::backend`] ([`Backend`]): torch's caching allocator
//! ([`CachingAllocator`]), or one of the direct backends ([`AsyncAllocator`]:
//! `backend:cudaMallocAsync`, or no caching with `PYTORCH_NO_CUDA_MEMORY_CACHING=1`). This file
//! is the only place that chooses between them; every call returns [`AllocError`].
//!
//! ```
//! use cachalot_core::config::Settings;
//! use cachalot_core::{Backend, MemoryResource, StreamId};
//! use cachalot_sim::{SimConfig, SimDevice};
//!
//! let settings = Settings::parse("backend:cudaMallocAsync").unwrap();
//! let mr = MemoryResource::new(settings.conf, SimDevice::new(SimConfig::default()), 0).unwrap();
//! assert_eq!(mr.backend(), Backend::CudaMallocAsync);
//! let p = mr.malloc(1000, StreamId::DEFAULT).unwrap();
//! mr.free(p).unwrap();
//! assert!(mr.segments().is_err(), "the driver's pool keeps no blocks to show");
//! ```

use cachalot_device::{Device, StreamId};

use crate::CachingAllocator;
use crate::async_backend::{AsyncAllocator, DirectMode};
use crate::config::{AllocConf, Backend};
use crate::error::{AllocError, Operation};
use crate::history::TraceEntry;
use crate::snapshot::{MemorySnapshot, SegmentInfo};
use crate::stats::DeviceStats;

/// One device's allocator for any [`Backend`]. Thread-safe (one lock per device, as in torch);
/// every method takes `&self`.
pub struct MemoryResource<D> {
    engine: Engine<D>,
    conf: AllocConf,
    index: u32,
}

// One per device: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Engine<D> {
    Caching(CachingAllocator<D>),
    Direct(AsyncAllocator<D>),
}

impl<D: Device> MemoryResource<D> {
    /// The allocator `conf.backend` names, for the device with ordinal `index` (used in
    /// messages and snapshots).
    pub fn new(conf: AllocConf, device: D, index: u32) -> Result<Self, AllocError> {
        let engine = match conf.backend {
            Backend::Native => {
                Engine::Caching(CachingAllocator::with_index(conf.clone(), device, index)?)
            }
            Backend::CudaMallocAsync => Engine::Direct(AsyncAllocator::with_index(
                &conf,
                DirectMode::StreamOrdered,
                device,
                index,
            )?),
            Backend::Uncached => Engine::Direct(AsyncAllocator::with_index(
                &conf,
                DirectMode::Uncached,
                device,
                index,
            )?),
        };
        Ok(MemoryResource {
            engine,
            conf,
            index,
        })
    }

    /// The backend serving requests.
    pub fn backend(&self) -> Backend {
        self.conf.backend
    }

    /// The configuration the allocator was built with.
    pub fn config(&self) -> &AllocConf {
        &self.conf
    }

    /// The device ordinal.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Allocates `size` bytes for use on `stream` (`raw_alloc_with_stream`). A size of 0
    /// returns address 0 and touches nothing.
    pub fn malloc(&self, size: u64, stream: StreamId) -> Result<u64, AllocError> {
        match &self.engine {
            Engine::Caching(a) => a.malloc(size, stream),
            Engine::Direct(a) => a.malloc(size, stream),
        }
    }

    /// Frees the allocation at `ptr` (`raw_delete`). Address 0 is a no-op; an unknown address
    /// is [`AllocError::InvalidPointer`].
    pub fn free(&self, ptr: u64) -> Result<(), AllocError> {
        match &self.engine {
            Engine::Caching(a) => a.free(ptr),
            Engine::Direct(a) => a.free(ptr),
        }
    }

    /// Marks the allocation at `ptr` as used on `stream` too (`Tensor.record_stream`).
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<(), AllocError> {
        match &self.engine {
            Engine::Caching(a) => a.record_stream(ptr, stream),
            Engine::Direct(a) => a.record_stream(ptr, stream),
        }
    }

    /// Returns cached memory to the device (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        match &self.engine {
            Engine::Caching(a) => a.empty_cache(),
            Engine::Direct(a) => a.empty_cache(),
        }
    }

    /// The statistics as torch reports them for this backend (for `backend:cudaMallocAsync`,
    /// the pool's numbers).
    pub fn stats(&self) -> Result<DeviceStats, AllocError> {
        match &self.engine {
            Engine::Caching(a) => Ok(a.stats()),
            Engine::Direct(a) => a.stats(),
        }
    }

    /// Reads from the statistics without copying them (the caching allocator's; a direct
    /// backend builds them first, and a failure to read them gives the defaults).
    pub fn with_stats<T>(&self, f: impl FnOnce(&DeviceStats) -> T) -> T {
        match &self.engine {
            Engine::Caching(a) => a.with_stats(f),
            Engine::Direct(a) => f(&a.stats().unwrap_or_default()),
        }
    }

    /// How close the run came to its per-process limit and garbage collection threshold
    /// ([`crate::bounds::LimitFacts`]); `None` for the direct backends.
    pub fn limit_facts(&self) -> Option<crate::bounds::LimitFacts> {
        match &self.engine {
            Engine::Caching(a) => Some(a.limit_facts()),
            Engine::Direct(_) => None,
        }
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&self) -> Result<(), AllocError> {
        match &self.engine {
            Engine::Caching(a) => {
                a.reset_peak_stats();
                Ok(())
            }
            Engine::Direct(a) => a.reset_peak_stats(),
        }
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`; returns whether it had an effect (none
    /// with `backend:cudaMallocAsync`, as in torch).
    pub fn reset_accumulated_stats(&self) -> bool {
        match &self.engine {
            Engine::Caching(a) => {
                a.reset_accumulated_stats();
                true
            }
            Engine::Direct(a) => a.reset_accumulated_stats(),
        }
    }

    /// `torch.cuda.set_per_process_memory_fraction()`: `fraction` in [0, 1] of the device's
    /// capacity (no effect without caching).
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), AllocError> {
        match &self.engine {
            Engine::Caching(a) => a.set_memory_fraction(fraction),
            Engine::Direct(a) => a.set_memory_fraction(fraction),
        }
    }

    /// All segments and their blocks (`torch.cuda.memory_snapshot()`); torch's error for the
    /// backends that do not track blocks.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>, AllocError> {
        Ok(self.caching_for(Operation::Snapshot)?.segments())
    }

    /// The history and the segments (`torch.cuda.memory._snapshot()`); torch's error for the
    /// backends that do not track blocks.
    pub fn snapshot(&self) -> Result<MemorySnapshot, AllocError> {
        Ok(self.caching_for(Operation::Snapshot)?.snapshot())
    }

    /// Starts (or with `None` stops) recording allocation history
    /// (`torch.cuda.memory._record_memory_history`). Only the caching backend records; the
    /// others refuse to start, and stopping is a no-op.
    pub fn record_history(&self, max_entries: Option<usize>) -> Result<(), AllocError> {
        match (&self.engine, max_entries) {
            (Engine::Caching(a), _) => a.record_history(max_entries),
            (Engine::Direct(_), None) => {}
            (Engine::Direct(_), Some(_)) => {
                self.caching_for(Operation::RecordHistory)?;
            }
        }
        Ok(())
    }

    /// The recorded history, oldest first (empty when not recording).
    pub fn history(&self) -> Vec<TraceEntry> {
        self.caching().map(|a| a.history()).unwrap_or_default()
    }

    /// The caching allocator itself, for the rest of the core API (`None` for the other
    /// backends).
    pub fn caching(&self) -> Option<&CachingAllocator<D>> {
        match &self.engine {
            Engine::Caching(a) => Some(a),
            Engine::Direct(_) => None,
        }
    }

    /// The caching allocator, or torch's error for `operation` on this backend.
    fn caching_for(&self, operation: Operation) -> Result<&CachingAllocator<D>, AllocError> {
        self.caching().ok_or(AllocError::Unsupported {
            backend: self.backend(),
            operation,
        })
    }

    /// Runs `f` on the device with the allocator's lock held.
    pub fn with_device<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        match &self.engine {
            Engine::Caching(a) => a.with_device(f),
            Engine::Direct(a) => a.with_device(f),
        }
    }

    /// Consumes the allocator and returns its device.
    pub fn into_device(self) -> D {
        match self.engine {
            Engine::Caching(a) => a.into_device(),
            Engine::Direct(a) => a.into_device(),
        }
    }
}
