//! PyTorch's CUDA caching allocator (torch 2.15), rebuilt over a small [`Device`] trait.
//!
//! The algorithm knows nothing of CUDA: it asks a [`Device`] for segments, events and (for
//! expandable segments) virtual memory, and makes the same decisions torch 2.15 makes for the
//! same configuration — same segments, same sizes, same order, same statistics.
//!
//! ```
//! use cachalot_core::{AllocConf, CachingAllocator};
//! use cachalot_device::StreamId;
//! use cachalot_sim::{SimConfig, SimDevice};
//!
//! let alloc = CachingAllocator::new(AllocConf::default(), SimDevice::new(SimConfig::default())).unwrap();
//! let p = alloc.malloc(3 << 20, StreamId::DEFAULT).unwrap();  // a 20 MiB segment, 3 MiB used
//! alloc.free(p).unwrap();                                      // cached, not returned
//! assert_eq!(alloc.stats().reserved_bytes.all().current, 20 << 20);
//! alloc.empty_cache().unwrap();
//! assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
//! ```
//!
//! Module map: [`config`] (what `PYTORCH_CUDA_ALLOC_CONF` means), `size` (rounding and size
//! classes), `block`/`pool` (blocks and best-fit sets), `malloc`/`free`/`release` (the three
//! paths), `expandable` (virtual-memory segments), [`stats`], [`history`], [`snapshot`],
//! `invariants` (the recount checker), [`async_backend`] (`backend:cudaMallocAsync` and the
//! uncached mode, which do not cache blocks themselves).

#![forbid(unsafe_code)]

pub mod async_backend;
mod block;
pub mod bounds;
pub mod bytesize;
pub mod config;
mod error;
mod expandable;
mod free;
mod free_set;
pub mod history;
mod invariants;
mod malloc;
pub mod mempool;
mod oom;
mod pool;
mod pool_id;
mod release;
mod resource;
pub mod size;
mod ska_order;
pub mod snapshot;
mod state;
pub mod stats;
pub mod streams;
mod tally;

use std::sync::{Mutex, MutexGuard};

pub use block::PoolKind;
pub use bytesize::{ByteSizeError, parse_byte_size};
pub use cachalot_device::{Device, DeviceError, MemInfo, StreamId};
pub use config::{AllocConf, Backend, CachalotOptions, Settings};
pub use error::{AllocError, InvariantError, Operation};
pub use history::{History, TraceAction, TraceEntry};
pub use mempool::{MempoolId, PoolError, PoolInfo, StreamFilter};
pub use oom::{OomCause, OomReport, format_size};
pub use resource::MemoryResource;
pub use snapshot::{BlockInfo, BlockState, MemorySnapshot, SegmentInfo};
pub use stats::{DeviceStats, Stat, StatArray, StatType};

use state::State;

/// One device's caching allocator: thread-safe, one lock per device, as in torch.
pub struct CachingAllocator<D> {
    state: Mutex<State<D>>,
}

impl<D: Device> CachingAllocator<D> {
    /// An allocator for device 0 with configuration `conf`.
    pub fn new(conf: AllocConf, device: D) -> Result<Self, AllocError> {
        Self::with_index(conf, device, 0)
    }

    /// An allocator for the device with ordinal `index` (used in messages and snapshots).
    pub fn with_index(conf: AllocConf, device: D, index: u32) -> Result<Self, AllocError> {
        Ok(CachingAllocator {
            state: Mutex::new(State::new(conf, device, index)?),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<D>> {
        // A panic while the lock was held leaves no half-done state worth refusing: every
        // operation validates its input before it mutates anything.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn checked<T>(&self, f: impl FnOnce(&mut State<D>) -> T) -> T {
        let mut s = self.lock();
        let r = f(&mut s);
        #[cfg(feature = "check-invariants")]
        if let Err(e) = {
            s.sync_stats();
            s.check_invariants()
        } {
            panic!("allocator invariant broken: {e}");
        }
        r
    }

    /// Allocates `size` bytes for use on `stream` (`raw_alloc_with_stream`). A size of 0
    /// returns address 0 and touches nothing.
    pub fn malloc(&self, size: u64, stream: StreamId) -> Result<u64, AllocError> {
        if size == 0 {
            return Ok(0);
        }
        self.checked(|s| s.malloc(size, stream))
    }

    /// Frees the allocation at `ptr` (`raw_delete`). Address 0 is a no-op.
    pub fn free(&self, ptr: u64) -> Result<(), AllocError> {
        if ptr == 0 {
            return Ok(());
        }
        self.checked(|s| s.free(ptr))
    }

    /// Marks the allocation at `ptr` as used on `stream` too (`Tensor.record_stream`).
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<(), AllocError> {
        self.checked(|s| s.record_stream(ptr, stream))
    }

    /// Returns every whole free segment to the device and unmaps free expandable pages
    /// (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        self.checked(|s| s.release_cached_blocks())
    }

    /// A copy of the statistics (`torch.cuda.memory_stats()`).
    pub fn stats(&self) -> DeviceStats {
        let mut s = self.lock();
        s.sync_stats();
        s.stats.clone()
    }

    /// Reads one number from the statistics without copying them all.
    pub fn with_stats<T>(&self, f: impl FnOnce(&DeviceStats) -> T) -> T {
        let mut s = self.lock();
        s.sync_stats();
        f(&s.stats)
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&self) {
        self.lock().reset_peak_stats();
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&self) {
        self.lock().reset_accumulated_stats();
    }

    /// `torch.cuda.set_per_process_memory_fraction()`: limits reserved memory to
    /// `fraction` × device capacity; 1 removes the limit. Values outside [0, 1] are rejected.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), AllocError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(AllocError::InvalidMemoryFraction { fraction });
        }
        let mut s = self.lock();
        s.limits.disturb();
        s.set_memory_fraction(fraction);
        Ok(())
    }

    /// Replaces the configuration at runtime (`_set_allocator_settings`). Existing segments
    /// keep working; expandable segments made before a switch stay expandable.
    pub fn set_config(&self, conf: AllocConf) {
        let mut s = self.lock();
        let fraction_changed =
            conf.per_process_memory_fraction != s.conf.per_process_memory_fraction;
        let fraction = conf.per_process_memory_fraction;
        s.limits.disturb();
        s.conf = conf;
        if fraction_changed {
            s.set_memory_fraction(fraction);
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> AllocConf {
        self.lock().conf.clone()
    }

    /// All segments and their blocks, by address (`torch.cuda.memory_snapshot()`). As in
    /// torch, taking it records a `snapshot` history entry when recording is on.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.lock().snapshot_segments()
    }

    /// The history and the segments (`torch.cuda.memory._snapshot()`), in torch's order:
    /// the history is copied first, then the snapshot's own `snapshot` entry is recorded.
    pub fn snapshot(&self) -> MemorySnapshot {
        self.lock().memory_snapshot()
    }

    /// Starts keeping a history of at most `max_entries` entries (`_record_memory_history`);
    /// `None` stops and clears it.
    pub fn record_history(&self, max_entries: Option<usize>) {
        self.lock().history = max_entries.map(History::new);
    }

    /// A copy of the recorded history, oldest first.
    pub fn history(&self) -> Vec<TraceEntry> {
        self.lock()
            .history
            .as_ref()
            .map(|h| h.entries().copied().collect())
            .unwrap_or_default()
    }

    /// Runs `f` on the device with the allocator's lock held.
    pub fn with_device<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self.lock().device)
    }

    /// How close the run came to its per-process limit and garbage collection threshold.
    pub fn limit_facts(&self) -> bounds::LimitFacts {
        self.lock().limits
    }

    /// The bytes the allocator holds from the device, and the per-process limit if any.
    pub fn reserved_and_limit(&self) -> (u64, Option<u64>) {
        let s = self.lock();
        (s.total_allocated_memory, s.allowed_memory_maximum)
    }

    /// Checks every internal invariant (blocks tile segments, free sets, statistics against a
    /// recount): O(number of blocks). The `check-invariants` feature runs it after every
    /// operation; tests call it directly.
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        let mut s = self.lock();
        s.sync_stats();
        s.check_invariants()
            .map_err(|message| InvariantError { message })
    }

    /// Consumes the allocator and returns its device.
    pub fn into_device(self) -> D {
        self.state
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .device
    }
}
