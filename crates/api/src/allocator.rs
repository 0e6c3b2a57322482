//! [`Allocator`] (one device), [`DeviceBuffer`] (RAII memory) and [`Allocators`] (one
//! allocator per device).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cachalot_core::{
    AllocConf, Backend, CachingAllocator, DeviceStats, MemoryResource, SegmentInfo, TraceEntry,
};
use cachalot_device::{Device, StreamId};

use crate::{CUdeviceptr, Result, Settings, stats};

struct Inner<D> {
    resource: MemoryResource<D>,
    /// Frees that failed when a [`DeviceBuffer`] was dropped (the error cannot be returned).
    drop_errors: AtomicU64,
}

/// One device's allocator. Cloning is cheap and shares the allocator (it is an `Arc`);
/// every method takes `&self` and is thread-safe (one lock per device, as in torch).
///
/// It is core's [`MemoryResource`] (the one allocator interface, for every [`Backend`]) behind
/// an `Arc`, plus the RAII [`DeviceBuffer`]s on top; [`Allocator::resource`] gives the rest of
/// its API.
pub struct Allocator<D> {
    inner: Arc<Inner<D>>,
}

impl<D> Clone for Allocator<D> {
    fn clone(&self) -> Self {
        Allocator {
            inner: self.inner.clone(),
        }
    }
}

impl<D: Device> Allocator<D> {
    /// An allocator for device 0 with `settings`.
    pub fn new(settings: &Settings, device: D) -> Result<Self> {
        Self::with_index(settings, device, 0)
    }

    /// An allocator configured from the environment (see [`Settings::from_env`]).
    pub fn from_env(device: D) -> Result<Self> {
        Self::new(&Settings::from_env()?, device)
    }

    /// An allocator for the device with ordinal `index` (used in messages and snapshots).
    pub fn with_index(settings: &Settings, device: D, index: u32) -> Result<Self> {
        Ok(Allocator {
            inner: Arc::new(Inner {
                resource: MemoryResource::new(settings.conf.clone(), device, index)?,
                drop_errors: AtomicU64::new(0),
            }),
        })
    }

    /// The allocator behind this handle: every operation of core's one interface.
    pub fn resource(&self) -> &MemoryResource<D> {
        &self.inner.resource
    }

    /// Allocates `size` bytes for use on `stream`, returned to the allocator when the buffer
    /// is dropped. A size of 0 gives an empty buffer at address 0.
    pub fn alloc(&self, size: usize, stream: StreamId) -> Result<DeviceBuffer<D>> {
        let ptr = self.malloc(size as u64, stream)?;
        Ok(DeviceBuffer {
            alloc: self.clone(),
            ptr,
            len: size,
            stream,
        })
    }

    /// Allocates `size` bytes on `stream` and returns the raw address; free it with
    /// [`Allocator::free`]. A size of 0 returns 0.
    pub fn malloc(&self, size: u64, stream: StreamId) -> Result<u64> {
        Ok(self.resource().malloc(size, stream)?)
    }

    /// Frees an address from [`Allocator::malloc`]. Address 0 is a no-op; an unknown address
    /// is an error ([`crate::Error::is_invalid_pointer`]), never a crash.
    pub fn free(&self, ptr: u64) -> Result<()> {
        Ok(self.resource().free(ptr)?)
    }

    /// Marks the allocation at `ptr` as used on `stream` too (`Tensor.record_stream`): its
    /// memory is not reused until the work queued on `stream` by then has completed.
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<()> {
        Ok(self.resource().record_stream(ptr, stream)?)
    }

    /// Returns cached memory to the device (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&self) -> Result<()> {
        Ok(self.resource().empty_cache()?)
    }

    /// The statistics as torch's `DeviceStats` (for `backend:cudaMallocAsync`, the pool's
    /// numbers, as torch reports them).
    pub fn stats(&self) -> Result<DeviceStats> {
        Ok(self.resource().stats()?)
    }

    /// `torch.cuda.memory_stats()`: every statistic under torch's flat name
    /// (`allocated_bytes.all.current`, ...), sorted by name. [`Allocator::stats`] has the same
    /// numbers typed.
    pub fn memory_stats(&self) -> Result<BTreeMap<String, i64>> {
        Ok(stats::memory_stats(&self.stats()?))
    }

    /// `torch.cuda.reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&self) -> Result<()> {
        Ok(self.resource().reset_peak_stats()?)
    }

    /// `torch.cuda.reset_accumulated_memory_stats()` (no effect with
    /// `backend:cudaMallocAsync`, as in torch).
    pub fn reset_accumulated_stats(&self) {
        self.resource().reset_accumulated_stats();
    }

    /// `torch.cuda.set_per_process_memory_fraction()`: `fraction` in [0, 1] of the device's
    /// capacity.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        Ok(self.resource().set_memory_fraction(fraction)?)
    }

    /// The backend serving requests.
    pub fn backend(&self) -> Backend {
        self.resource().backend()
    }

    /// The configuration the allocator was built with.
    pub fn config(&self) -> &AllocConf {
        self.resource().config()
    }

    /// The device ordinal.
    pub fn index(&self) -> u32 {
        self.resource().index()
    }

    /// Frees that failed when a [`DeviceBuffer`] was dropped (each also printed on stderr).
    pub fn drop_errors(&self) -> u64 {
        self.inner.drop_errors.load(Ordering::Relaxed)
    }

    /// All segments and their blocks (`torch.cuda.memory_snapshot()`); torch's error for the
    /// backends that do not track blocks.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        Ok(self.resource().segments()?)
    }

    /// Starts (or with `None` stops) recording allocation history for snapshots
    /// (`torch.cuda.memory._record_memory_history`). Only the caching backend records; the
    /// others refuse to start (stopping is a no-op).
    pub fn record_history(&self, max_entries: Option<usize>) -> Result<()> {
        Ok(self.resource().record_history(max_entries)?)
    }

    /// The recorded history, oldest first (empty when not recording).
    pub fn history(&self) -> Vec<TraceEntry> {
        self.resource().history()
    }

    /// The caching allocator itself, for the rest of the core API (`None` for the other
    /// backends).
    pub fn caching(&self) -> Option<&CachingAllocator<D>> {
        self.resource().caching()
    }

    /// Runs `f` on the device with the allocator's lock held.
    pub fn with_device<T>(&self, f: impl FnOnce(&mut D) -> T) -> T {
        self.resource().with_device(f)
    }
}

/// Device memory from an [`Allocator`], returned to it when dropped.
///
/// The buffer is a raw device allocation: [`DeviceBuffer::device_ptr`] is the `CUdeviceptr`
/// to give to kernels, cuBLAS or cudarc's raw functions, in stream order on
/// [`DeviceBuffer::stream`] (for a typed buffer that cudarc takes directly, see
/// `Allocator::alloc_on`, feature `cuda`). It holds a clone of its allocator, so it may outlive the
/// [`Allocator`] value it came from.
pub struct DeviceBuffer<D: Device> {
    alloc: Allocator<D>,
    ptr: u64,
    len: usize,
    stream: StreamId,
}

impl<D: Device> DeviceBuffer<D> {
    /// The device address, as the driver API types it (0 for an empty buffer).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The size asked for, in bytes (the block behind it may be larger).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stream the buffer was allocated on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The allocator the buffer returns to.
    pub fn allocator(&self) -> &Allocator<D> {
        &self.alloc
    }

    /// Marks the buffer as used on `stream` too, so that its memory is not reused before the
    /// work queued there has completed (`Tensor.record_stream`).
    pub fn record_stream(&self, stream: StreamId) -> Result<()> {
        if self.ptr == 0 {
            return Ok(());
        }
        self.alloc.record_stream(self.ptr, stream)
    }

    /// Gives up ownership: the address stays allocated until passed to
    /// [`Allocator::free`].
    pub fn into_raw(self) -> u64 {
        let p = self.ptr;
        std::mem::forget(self);
        p
    }
}

impl<D: Device> Drop for DeviceBuffer<D> {
    fn drop(&mut self) {
        if let Err(e) = self.alloc.free(self.ptr) {
            self.alloc.inner.drop_errors.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "cachalot: freeing a dropped buffer at {:#x} failed: {e}",
                self.ptr
            );
        }
    }
}

impl<D: Device> std::fmt::Debug for DeviceBuffer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("stream", &self.stream)
            .finish()
    }
}

/// One [`Allocator`] per device, indexed by device ordinal.
pub struct Allocators<D> {
    list: Vec<Allocator<D>>,
}

impl<D: Device> Allocators<D> {
    /// One allocator per device of `devices`, in order (ordinal = position), all with
    /// `settings`.
    pub fn new(settings: &Settings, devices: impl IntoIterator<Item = D>) -> Result<Self> {
        let list = devices
            .into_iter()
            .enumerate()
            .map(|(i, d)| Allocator::with_index(settings, d, i as u32))
            .collect::<Result<_>>()?;
        Ok(Allocators { list })
    }

    /// The allocator of device `index`.
    pub fn get(&self, index: usize) -> Option<&Allocator<D>> {
        self.list.get(index)
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The allocators, by ordinal.
    pub fn iter(&self) -> impl Iterator<Item = &Allocator<D>> {
        self.list.iter()
    }

    /// Empties every device's cache.
    pub fn empty_cache(&self) -> Result<()> {
        self.list.iter().try_for_each(Allocator::empty_cache)
    }
}

#[cfg(feature = "cuda")]
impl Allocators<cachalot_cuda::CudaDevice> {
    /// One allocator per visible GPU, configured from the environment. Fails with
    /// "no CUDA driver found: …" on a machine without CUDA.
    pub fn cuda_from_env() -> Result<Self> {
        let settings = Settings::from_env()?;
        let n = cachalot_cuda::device_count()?;
        let devices = (0..n)
            .map(cachalot_cuda::CudaDevice::new)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Self::new(&settings, devices)
    }
}
