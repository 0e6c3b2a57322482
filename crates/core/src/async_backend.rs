//! The two ways torch 2.15 serves requests without its caching algorithm:
//!
//! - **`backend:cudaMallocAsync`** ([`DirectMode::StreamOrdered`], torch's
//!   `CUDAMallocAsyncAllocator`): every request goes to the device's stream-ordered pool with
//!   its exact size ([`Device::malloc_async`]); the *driver* caches (torch raises the pool's
//!   release threshold to the maximum). A free is ordered after the work of the allocating
//!   stream, or, once [`AsyncAllocator::record_stream`] added other streams, after the work of
//!   all of them. `empty_cache` synchronizes and trims the pool. The statistics are the pool's:
//!   `allocated_bytes`/`active_bytes` `all.current`/`all.peak` are its used bytes,
//!   `reserved_bytes` its reserved bytes, everything else 0 (`max_split_size` too).
//!   A request that would take the bytes torch counts (`pytorch_used_bytes`, exact sizes) above
//!   the limit set by [`AsyncAllocator::set_memory_fraction`] fails without a device call; a
//!   failed device allocation is retried once after a trim (torch 2.15), then raises torch's
//!   "would exceed allowed memory" error ([`AsyncOomReport`]). The configured
//!   `per_process_memory_fraction` is ignored, as torch ignores it for this backend.
//! - **`PYTORCH_NO_CUDA_MEMORY_CACHING=1`** ([`DirectMode::Uncached`]): every request is a
//!   `cudaMalloc` of the exact size and every free a `cudaFree`; the statistics stay 0
//!   (`max_split_size` is the configured one), and a failed `cudaMalloc` is a device error, not an
//!   out-of-memory error (torch raises `CUDA error: out of memory` through `C10_CUDA_CHECK`).
//!
//! A third mode is not a torch backend but a source of segments for a caching allocator above
//! it, torch's own under `torch.cuda.MemPool(allocator)`, which rounds, caches and splits what it
//! gets ([`DirectMode::Segments`]): device calls as without caching (exact size, freed at once),
//! but a failed `cudaMalloc` stays [`DeviceError::OutOfMemory`] (the allocator above frees its
//! cache and retries, as after its own failed `cudaMalloc`), and the statistics count what is
//! handed out: each live request is one allocation and one segment of its size (small pool
//! if at most [`SMALL_BUFFER`], the segment size of torch's small pool), so `allocated_bytes`
//! equals `reserved_bytes`, the bytes the allocator above holds.
//!
//! ```
//! use cachalot_core::async_backend::{AsyncAllocator, DirectMode};
//! use cachalot_core::{AllocConf, StreamId};
//! use cachalot_sim::{SimConfig, SimDevice};
//!
//! let dev = SimDevice::new(SimConfig::default());
//! let alloc = AsyncAllocator::new(&AllocConf::default(), DirectMode::StreamOrdered, dev).unwrap();
//! let p = alloc.malloc(1000, StreamId::DEFAULT).unwrap();
//! assert_eq!(alloc.stats().unwrap().allocated_bytes.all().current, 1024); // the charge
//! alloc.free(p).unwrap();
//! assert_eq!(alloc.stats().unwrap().allocated_bytes.all().peak, 1024);
//! ```

use std::sync::{Mutex, MutexGuard};

use cachalot_device::{Device, DeviceError, StreamId};
use rustc_hash::FxHashMap;

use crate::config::AllocConf;
use crate::error::AllocError;
use crate::oom::format_size;
use crate::size::SMALL_BUFFER;
use crate::stats::DeviceStats;

/// Which direct backend an [`AsyncAllocator`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectMode {
    /// `backend:cudaMallocAsync`: the device's stream-ordered pool.
    StreamOrdered,
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING=1`: plain `cudaMalloc`/`cudaFree`, no caching.
    Uncached,
    /// Segments for a caching allocator above (`torch.cuda.MemPool(allocator)`): plain
    /// `cudaMalloc`/`cudaFree`, out-of-memory retryable, statistics counted.
    Segments,
}

impl DirectMode {
    /// The name torch reports (`torch.cuda.get_allocator_backend()`); `segments` is not a
    /// torch backend.
    pub fn name(self) -> &'static str {
        match self {
            DirectMode::StreamOrdered => "cudaMallocAsync",
            DirectMode::Uncached => "native",
            DirectMode::Segments => "segments",
        }
    }
}

/// Why `backend:cudaMallocAsync` refused a request. `Display` is torch 2.15's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncOomReport {
    /// Device ordinal.
    pub device: u32,
    /// Bytes torch counts as allocated (exact requested sizes of live allocations).
    pub used: u64,
    /// The size asked for.
    pub requested: u64,
    /// Device capacity (`cudaMemGetInfo`).
    pub device_total: u64,
    /// Free device memory (`cudaMemGetInfo`).
    pub device_free: u64,
    /// The limit from the memory fraction; `u64::MAX` when none was set.
    pub limit: u64,
}

impl std::fmt::Display for AsyncOomReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Allocation on device {} would exceed allowed memory. (out of memory)\n\
             Currently allocated     : {}\n\
             Requested               : {}\n\
             Device limit            : {}\n\
             Free (according to CUDA): {}\n\
             PyTorch limit (set by user-supplied memory fraction)\n                        : {}",
            self.device,
            format_size(self.used),
            format_size(self.requested),
            format_size(self.device_total),
            format_size(self.device_free),
            format_size(self.limit),
        )
    }
}

/// A live allocation (torch's `PtrUsage`).
struct Usage {
    size: u64,
    stream: StreamId,
    /// Streams added by `record_stream`, the allocating stream excluded, in first-use order.
    recorded: Vec<StreamId>,
}

struct Direct<D> {
    device: D,
    index: u32,
    mode: DirectMode,
    live: FxHashMap<u64, Usage>,
    /// `pytorch_used_bytes`: exact sizes of live allocations.
    used: u64,
    /// `pytorch_memory_limits`.
    limit: u64,
    /// Statistics of the modes without a driver pool: for [`DirectMode::Uncached`] torch's
    /// native allocator's, never touched; for [`DirectMode::Segments`] the live segments.
    counted: DeviceStats,
    /// `record_stream` calls on an allocation's own stream (torch warns: no effect).
    redundant_record_streams: u64,
}

/// One device's `backend:cudaMallocAsync` (or uncached) allocator: thread-safe, one lock.
pub struct AsyncAllocator<D> {
    state: Mutex<Direct<D>>,
}

impl<D: Device> AsyncAllocator<D> {
    /// An allocator for device 0. `conf` gives `max_split_size` for the uncached statistics;
    /// nothing else of it applies to these backends.
    pub fn new(conf: &AllocConf, mode: DirectMode, device: D) -> Result<Self, AllocError> {
        Self::with_index(conf, mode, device, 0)
    }

    /// An allocator for the device with ordinal `index` (used in messages).
    pub fn with_index(
        conf: &AllocConf,
        mode: DirectMode,
        device: D,
        index: u32,
    ) -> Result<Self, AllocError> {
        let counted = DeviceStats {
            max_split_size: if conf.max_split_size == u64::MAX {
                -1
            } else {
                conf.max_split_size as i64
            },
            ..DeviceStats::default()
        };
        Ok(AsyncAllocator {
            state: Mutex::new(Direct {
                device,
                index,
                mode,
                live: FxHashMap::default(),
                used: 0,
                limit: u64::MAX,
                counted,
                redundant_record_streams: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Direct<D>> {
        // Every operation checks its input before it changes anything.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Which backend this is.
    pub fn mode(&self) -> DirectMode {
        self.lock().mode
    }

    /// Allocates `size` bytes for use on `stream`. A size of 0 returns 0 and calls nothing.
    pub fn malloc(&self, size: u64, stream: StreamId) -> Result<u64, AllocError> {
        if size == 0 {
            return Ok(0);
        }
        let mut s = self.lock();
        let ptr = match s.mode {
            // torch's `C10_CUDA_CHECK(cudaMalloc(...))`: no retry, a fatal `c10::Error`.
            DirectMode::Uncached => s.device.malloc(size).map_err(|e| match e {
                DeviceError::OutOfMemory => DeviceError::Driver {
                    call: "cudaMalloc",
                    message: "out of memory".into(),
                },
                e => e,
            })?,
            DirectMode::StreamOrdered => s.malloc_async(size, stream)?,
            DirectMode::Segments => {
                let p = s.device.malloc(size)?;
                s.count_segment(size, true);
                p
            }
        };
        s.live.insert(
            ptr,
            Usage {
                size,
                stream,
                recorded: Vec::new(),
            },
        );
        s.used += size;
        Ok(ptr)
    }

    /// Frees the allocation at `ptr`; address 0 is a no-op. The stream-ordered free waits for
    /// the allocating stream and every stream recorded with [`AsyncAllocator::record_stream`].
    pub fn free(&self, ptr: u64) -> Result<(), AllocError> {
        if ptr == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        let Some(u) = s.live.get(&ptr) else {
            return Err(AllocError::InvalidPointer { ptr });
        };
        let (size, stream) = (u.size, u.stream);
        match s.mode {
            DirectMode::Uncached => s.device.free(ptr, size)?,
            DirectMode::Segments => {
                s.device.free(ptr, size)?;
                s.count_segment(size, false);
            }
            DirectMode::StreamOrdered => {
                let recorded = std::mem::take(&mut s.live.get_mut(&ptr).expect("found").recorded);
                if let Err(e) = s.device.free_async(ptr, size, stream, &recorded) {
                    s.live.get_mut(&ptr).expect("found").recorded = recorded;
                    return Err(e.into());
                }
            }
        }
        s.live.remove(&ptr);
        s.used -= size;
        Ok(())
    }

    /// Marks the allocation at `ptr` as used on `stream` too (`Tensor.record_stream`). On its
    /// own stream this has no effect (torch warns); with no caching (and for segments, which
    /// are freed only when the allocator above frees them) it has no effect at all.
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<(), AllocError> {
        let mut s = self.lock();
        let mode = s.mode;
        let Some(u) = s.live.get_mut(&ptr) else {
            return Err(AllocError::InvalidPointer { ptr });
        };
        if mode != DirectMode::StreamOrdered {
            return Ok(());
        }
        if u.stream == stream {
            s.redundant_record_streams += 1;
        } else if !u.recorded.contains(&stream) {
            u.recorded.push(stream);
        }
        Ok(())
    }

    /// `torch.cuda.empty_cache()`: synchronizes the device and trims the pool to nothing.
    /// With no caching there is nothing to release (torch still counts a
    /// `num_sync_all_streams`); a segment source has nothing to release either.
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        let mut s = self.lock();
        match s.mode {
            DirectMode::StreamOrdered => s.device.trim(0)?,
            DirectMode::Uncached => s.counted.num_sync_all_streams += 1,
            DirectMode::Segments => {}
        }
        Ok(())
    }

    /// The statistics torch reports for this backend (see the module documentation).
    pub fn stats(&self) -> Result<DeviceStats, AllocError> {
        let mut s = self.lock();
        if s.mode != DirectMode::StreamOrdered {
            return Ok(s.counted.clone());
        }
        let u = s.device.pool_usage()?;
        let mut st = DeviceStats::default();
        for (array, current, peak) in [
            (&mut st.allocated_bytes, u.used_current, u.used_high),
            (&mut st.active_bytes, u.used_current, u.used_high),
            (&mut st.reserved_bytes, u.reserved_current, u.reserved_high),
        ] {
            // torch's int64 statistics; past 2^63 bytes they saturate, as the caching
            // allocator's do, instead of turning negative.
            array.0[0].current = i64::try_from(current).unwrap_or(i64::MAX);
            array.0[0].peak = i64::try_from(peak).unwrap_or(i64::MAX);
        }
        Ok(st)
    }

    /// `torch.cuda.reset_peak_memory_stats()`: the pool's high-water marks become the current
    /// values.
    pub fn reset_peak_stats(&self) -> Result<(), AllocError> {
        let mut s = self.lock();
        match s.mode {
            DirectMode::StreamOrdered => s.device.reset_pool_peaks()?,
            DirectMode::Uncached | DirectMode::Segments => s.counted.reset_peak(),
        }
        Ok(())
    }

    /// `torch.cuda.reset_accumulated_memory_stats()`: no effect with `backend:cudaMallocAsync`
    /// (torch warns "resetAccumulatedStats has no effect"); returns whether it had one.
    pub fn reset_accumulated_stats(&self) -> bool {
        let mut s = self.lock();
        match s.mode {
            DirectMode::StreamOrdered => false,
            DirectMode::Uncached | DirectMode::Segments => {
                s.counted.reset_accumulated();
                true
            }
        }
    }

    /// `torch.cuda.set_per_process_memory_fraction()`: with `backend:cudaMallocAsync`, limits
    /// the bytes torch counts to `fraction` × device capacity (1 = the capacity). No effect
    /// without caching or on a segment source. Values outside [0, 1] are rejected.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), AllocError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(AllocError::InvalidMemoryFraction { fraction });
        }
        let mut s = self.lock();
        if s.mode == DirectMode::StreamOrdered {
            let total = s.device.mem_get_info()?.total;
            s.limit = (fraction * total as f64) as u64;
        }
        Ok(())
    }

    /// The limit in force (`u64::MAX` when none) and the bytes counted against it.
    pub fn used_and_limit(&self) -> (u64, u64) {
        let s = self.lock();
        (s.used, s.limit)
    }

    /// Number of live allocations.
    pub fn live_allocations(&self) -> usize {
        self.lock().live.len()
    }

    /// How many `record_stream` calls named an allocation's own stream (no effect; torch
    /// warns about them).
    pub fn redundant_record_streams(&self) -> u64 {
        self.lock().redundant_record_streams
    }

    /// The device ordinal given at construction.
    pub fn index(&self) -> u32 {
        self.lock().index
    }

    /// Runs `f` on the device with the allocator's lock held.
    pub fn with_device<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        f(&mut self.lock().device)
    }

    /// Consumes the allocator and returns its device.
    pub fn into_device(self) -> D {
        self.state
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .device
    }
}

impl<D: Device> Direct<D> {
    /// [`DirectMode::Segments`]' statistics: a segment of `size` bytes handed out (`add`) or
    /// given back, as one allocation filling one segment.
    fn count_segment(&mut self, size: u64, add: bool) {
        let small = size <= SMALL_BUFFER;
        let st = &mut self.counted;
        for (array, n) in [
            (&mut st.allocation, 1),
            (&mut st.segment, 1),
            (&mut st.active, 1),
            (&mut st.allocated_bytes, size),
            (&mut st.reserved_bytes, size),
            (&mut st.active_bytes, size),
            (&mut st.requested_bytes, size),
        ] {
            if add {
                array.increase(small, n);
            } else {
                array.decrease(small, n);
            }
        }
        if add {
            st.num_device_alloc += 1;
        } else {
            st.num_device_free += 1;
        }
    }

    /// torch 2.15's `mallocAsync`: limit check, one device call, and on out-of-memory one
    /// retry after a synchronize and trim.
    fn malloc_async(&mut self, size: u64, stream: StreamId) -> Result<u64, AllocError> {
        if self.used.saturating_add(size) <= self.limit {
            match self.device.malloc_async(size, stream) {
                Ok(p) => return Ok(p),
                Err(DeviceError::OutOfMemory) => {}
                Err(e) => return Err(e.into()),
            }
            self.device.trim(0)?;
            match self.device.malloc_async(size, stream) {
                Ok(p) => return Ok(p),
                Err(DeviceError::OutOfMemory) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let info = self.device.mem_get_info()?;
        Err(AllocError::PoolOutOfMemory(Box::new(AsyncOomReport {
            device: self.index,
            used: self.used,
            requested: size,
            device_total: info.total,
            device_free: info.free,
            limit: self.limit,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_sim::{Op, SimConfig, SimDevice};

    const MIB: u64 = 1 << 20;

    fn alloc(mode: DirectMode, capacity: u64) -> AsyncAllocator<SimDevice> {
        let mut dev = SimDevice::new(SimConfig::with_capacity(capacity));
        dev.enable_log();
        AsyncAllocator::new(&AllocConf::default(), mode, dev).unwrap()
    }

    fn ops(a: &AsyncAllocator<SimDevice>) -> Vec<(Op, u64, u32)> {
        a.with_device(|d| d.log().iter().map(|e| (e.op, e.size, e.result)).collect())
    }

    #[test]
    fn exact_sizes_go_to_the_pool_and_stats_are_the_pools() {
        let a = alloc(DirectMode::StreamOrdered, 80 << 30);
        let p = a.malloc(5 * MIB + 1, StreamId(3)).unwrap();
        let q = a.malloc(100, StreamId::DEFAULT).unwrap();
        assert_eq!(a.used_and_limit(), (5 * MIB + 101, u64::MAX));
        let st = a.stats().unwrap();
        assert_eq!(st.allocated_bytes.all().current, (6 * MIB + 512) as i64);
        assert_eq!(st.reserved_bytes.all().current, (6 * MIB + 512) as i64);
        assert_eq!(st.active_bytes.all().peak, (6 * MIB + 512) as i64);
        assert_eq!(st.allocation.all().current, 0, "counts are not reported");
        assert_eq!(
            st.allocated_bytes.get(crate::StatType::LargePool).current,
            0
        );
        assert_eq!(st.max_split_size, 0);
        a.free(p).unwrap();
        let st = a.stats().unwrap();
        assert_eq!(st.allocated_bytes.all().current, 512);
        assert_eq!(st.allocated_bytes.all().peak, (6 * MIB + 512) as i64);
        a.reset_peak_stats().unwrap();
        assert_eq!(a.stats().unwrap().reserved_bytes.all().peak, 512);
        assert!(!a.reset_accumulated_stats());
        a.free(q).unwrap();
        assert_eq!(
            ops(&a),
            [
                (Op::CudaMallocAsync, 5 * MIB + 1, 0),
                (Op::CudaMallocAsync, 100, 0),
                (Op::CudaFreeAsync, 5 * MIB + 1, 0),
                (Op::CudaFreeAsync, 100, 0)
            ]
        );
        assert_eq!(a.malloc(0, StreamId::DEFAULT), Ok(0));
        assert_eq!(a.free(q), Err(AllocError::InvalidPointer { ptr: q }));
    }

    #[test]
    fn out_of_memory_retries_once_then_reports_torchs_message() {
        let a = alloc(DirectMode::StreamOrdered, 64 * MIB);
        let _p = a.malloc(60 * MIB - 100, StreamId::DEFAULT).unwrap();
        let err = a.malloc(8 * MIB, StreamId::DEFAULT).unwrap_err();
        let AllocError::PoolOutOfMemory(r) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(r.used, 60 * MIB - 100);
        assert_eq!(r.device_free, 4 * MIB);
        assert_eq!(
            err.to_string(),
            "Allocation on device 0 would exceed allowed memory. (out of memory)\n\
             Currently allocated     : 60.00 MiB\n\
             Requested               : 8.00 MiB\n\
             Device limit            : 64.00 MiB\n\
             Free (according to CUDA): 4.00 MiB\n\
             PyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB"
        );
        let failed: Vec<_> = ops(&a).into_iter().filter(|o| o.2 != 0).collect();
        assert_eq!(failed, [(Op::CudaMallocAsync, 8 * MIB, 2); 2]);
    }

    #[test]
    fn memory_fraction_limits_without_a_device_call() {
        let a = alloc(DirectMode::StreamOrdered, 100 * MIB);
        a.set_memory_fraction(0.5).unwrap();
        assert_eq!(a.used_and_limit().1, 50 * MIB);
        let p = a.malloc(30 * MIB, StreamId::DEFAULT).unwrap();
        let err = a.malloc(30 * MIB, StreamId::DEFAULT).unwrap_err();
        assert!(err.to_string().ends_with(": 50.00 MiB"), "{err}");
        assert_eq!(ops(&a).len(), 1, "the refused request made no device call");
        a.free(p).unwrap();
        assert!(a.set_memory_fraction(1.5).is_err());
    }

    #[test]
    fn record_stream_is_remembered_until_the_free() {
        let a = alloc(DirectMode::StreamOrdered, 1 << 30);
        let p = a.malloc(4096, StreamId(5)).unwrap();
        a.record_stream(p, StreamId(5)).unwrap();
        a.record_stream(p, StreamId(9)).unwrap();
        a.record_stream(p, StreamId(9)).unwrap();
        assert_eq!(a.redundant_record_streams(), 1);
        assert_eq!(
            a.record_stream(p + 1, StreamId(9)),
            Err(AllocError::InvalidPointer { ptr: p + 1 })
        );
        a.free(p).unwrap();
        assert_eq!(a.live_allocations(), 0);
    }

    #[test]
    fn uncached_goes_straight_to_cudamalloc() {
        let a = alloc(DirectMode::Uncached, 64 * MIB);
        let p = a.malloc(1000, StreamId(2)).unwrap();
        a.record_stream(p, StreamId(4)).unwrap();
        assert_eq!(
            a.malloc(64 * MIB, StreamId::DEFAULT),
            Err(AllocError::Device(DeviceError::Driver {
                call: "cudaMalloc",
                message: "out of memory".into()
            }))
        );
        a.free(p).unwrap();
        a.empty_cache().unwrap();
        let st = a.stats().unwrap();
        assert_eq!(st.reserved_bytes.all().peak, 0);
        assert_eq!(st.max_split_size, -1);
        assert_eq!(st.num_sync_all_streams, 1);
        assert_eq!(
            ops(&a),
            [
                (Op::CudaMalloc, 1000, 0),
                (Op::CudaMalloc, 64 * MIB, 2),
                (Op::CudaFree, 1000, 0)
            ]
        );
        assert_eq!(a.mode().name(), "native");
    }

    #[test]
    fn segments_are_exact_device_calls_counted_as_held() {
        let a = alloc(DirectMode::Segments, 64 * MIB);
        let small = a.malloc(2 * MIB, StreamId(2)).unwrap();
        let large = a.malloc(20 * MIB, StreamId::DEFAULT).unwrap();
        a.record_stream(small, StreamId(4)).unwrap();
        let st = a.stats().unwrap();
        for array in [&st.reserved_bytes, &st.allocated_bytes, &st.active_bytes] {
            assert_eq!(array.all().current, (22 * MIB) as i64);
            assert_eq!(
                array.get(crate::StatType::SmallPool).current,
                (2 * MIB) as i64
            );
            assert_eq!(
                array.get(crate::StatType::LargePool).current,
                (20 * MIB) as i64
            );
        }
        assert_eq!(st.segment.all().current, 2);
        assert_eq!(st.allocation.all().current, 2);
        assert_eq!(st.inactive_split_bytes.all().current, 0);
        assert_eq!(st.num_device_alloc, 2);
        // Out of memory stays retryable (the allocator above frees its cache and retries)
        // and changes nothing.
        assert_eq!(
            a.malloc(64 * MIB, StreamId::DEFAULT),
            Err(AllocError::Device(DeviceError::OutOfMemory))
        );
        assert_eq!(a.stats().unwrap(), st);
        a.empty_cache().unwrap();
        assert_eq!(a.stats().unwrap(), st, "nothing cached, nothing released");
        a.free(large).unwrap();
        assert_eq!(
            a.free(large),
            Err(AllocError::InvalidPointer { ptr: large })
        );
        a.free(small).unwrap();
        let st = a.stats().unwrap();
        assert_eq!(st.reserved_bytes.all().current, 0);
        assert_eq!(st.reserved_bytes.all().peak, (22 * MIB) as i64);
        assert_eq!(st.segment.all().freed, 2);
        assert_eq!(st.num_device_free, 2);
        assert_eq!(
            ops(&a),
            [
                (Op::CudaMalloc, 2 * MIB, 0),
                (Op::CudaMalloc, 20 * MIB, 0),
                (Op::CudaMalloc, 64 * MIB, 2),
                (Op::CudaFree, 20 * MIB, 0),
                (Op::CudaFree, 2 * MIB, 0)
            ]
        );
        a.reset_peak_stats().unwrap();
        assert_eq!(a.stats().unwrap().reserved_bytes.all().peak, 0);
    }
}
