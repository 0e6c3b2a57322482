//! The seam between cachalot's caching algorithm and whatever hands out device memory.
//!
//! Words used here:
//! - a **segment** is one region obtained from the device with [`Device::malloc`] (PyTorch's
//!   `cudaMalloc`), returned whole with [`Device::free`];
//! - a **stream** is an ordered queue of device work, named by its raw handle ([`StreamId`]).
//!   The caching allocator orders its free blocks by this handle, so its numeric value matters;
//! - an **event** marks a point on a stream; the allocator records one on every stream that used
//!   a block before it reuses the block;
//! - **virtual memory** (VMM: reserve an address range, create physical pages, map them) is the
//!   optional capability behind expandable segments.
//!
//! Required methods: [`Device::malloc`], [`Device::free`], [`Device::mem_get_info`],
//! [`Device::record_event`], [`Device::query_event`], [`Device::synchronize_event`]. Everything
//! else has a default: a device without VMM answers [`DeviceError::NotSupported`].
//!
//! Errors are split the way PyTorch splits them: [`DeviceError::OutOfMemory`] is retryable (the
//! allocator frees its cache and tries again), every other error is fatal and surfaces to the
//! caller naming the call that failed.

#![forbid(unsafe_code)]

/// A raw stream handle. `StreamId(0)` is the default (legacy null) stream.
///
/// The caching allocator orders free blocks by this value, exactly as PyTorch orders them by the
/// raw `cudaStream_t` pointer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The default (null) stream.
    pub const DEFAULT: StreamId = StreamId(0);
}

/// An event handle returned by [`Device::record_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub u64);

/// A physical memory handle returned by [`Device::mem_create`] (VMM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemHandle(pub u64);

/// Why a device call failed. Deliberately exhaustive: core translates every case into
/// torch's text (`AllocError::torch_message`), so a new case must be handled there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device has no room: retryable after the cache is released.
    #[error("out of memory")]
    OutOfMemory,
    /// The device does not implement this capability (e.g. VMM on a simulated device without it).
    #[error("{call} is not supported by this device")]
    NotSupported {
        /// The call that was attempted.
        call: &'static str,
    },
    /// Any other driver failure: fatal, never treated as out-of-memory.
    #[error("{call} failed: {message}")]
    Driver {
        /// The call that failed, e.g. `cudaFree`.
        call: &'static str,
        /// The driver's error name or code.
        message: String,
    },
}

/// Result of a device call.
pub type DeviceResult<T> = Result<T, DeviceError>;

/// Free and total bytes, as `cudaMemGetInfo` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the device could still hand out.
    pub free: u64,
    /// The device's capacity.
    pub total: u64,
}

/// What a stream-ordered memory pool holds (`cudaMemPoolAttr{Reserved,Used}Mem{Current,High}`):
/// the numbers torch's `backend:cudaMallocAsync` reports as its statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes of device memory backing the pool now, used or cached (`ReservedMemCurrent`).
    pub reserved_current: u64,
    /// The highest `reserved_current` since the last peak reset (`ReservedMemHigh`).
    pub reserved_high: u64,
    /// Bytes of the pool handed out and not yet freed (`UsedMemCurrent`).
    pub used_current: u64,
    /// The highest `used_current` since the last peak reset (`UsedMemHigh`).
    pub used_high: u64,
}

/// A GPU, real or simulated, as the caching allocator sees it.
///
/// All methods take `&mut self`: the allocator calls them with its per-device lock held.
pub trait Device: Send {
    /// Allocates a segment of exactly `size` bytes (`cudaMalloc`).
    fn malloc(&mut self, size: u64) -> DeviceResult<u64>;
    /// Returns a segment obtained from [`Device::malloc`] (`cudaFree`). `size` is the size it
    /// was allocated with (a real device ignores it; the simulated one logs it).
    fn free(&mut self, ptr: u64, size: u64) -> DeviceResult<()>;
    /// Free and total memory (`cudaMemGetInfo`).
    fn mem_get_info(&mut self) -> DeviceResult<MemInfo>;
    /// Records an event on `stream` and returns it (`cudaEventRecord`).
    fn record_event(&mut self, stream: StreamId) -> DeviceResult<EventId>;
    /// Whether all work before `event` has completed (`cudaEventQuery`). A completed event is
    /// consumed: the device may reuse its handle.
    fn query_event(&mut self, event: EventId) -> DeviceResult<bool>;
    /// Waits for `event` and consumes it (`cudaEventSynchronize`).
    fn synchronize_event(&mut self, event: EventId) -> DeviceResult<()>;

    /// Waits for all work on `stream` (`cudaStreamSynchronize`). Default: nothing to wait for.
    fn synchronize_stream(&mut self, _stream: StreamId) -> DeviceResult<()> {
        Ok(())
    }
    /// Whether the VMM calls below work (expandable segments need them).
    fn supports_vmm(&self) -> bool {
        false
    }
    /// The VMM page granularity (`cuMemGetAllocationGranularity`).
    fn granularity(&self) -> u64 {
        2 << 20
    }
    /// Reserves `size` bytes of address space (`cuMemAddressReserve`).
    fn address_reserve(&mut self, _size: u64) -> DeviceResult<u64> {
        Err(DeviceError::NotSupported {
            call: "cuMemAddressReserve",
        })
    }
    /// Releases an address range from [`Device::address_reserve`] (`cuMemAddressFree`).
    fn address_free(&mut self, _ptr: u64, _size: u64) -> DeviceResult<()> {
        Err(DeviceError::NotSupported {
            call: "cuMemAddressFree",
        })
    }
    /// Creates `size` bytes of physical memory (`cuMemCreate`).
    fn mem_create(&mut self, _size: u64) -> DeviceResult<MemHandle> {
        Err(DeviceError::NotSupported {
            call: "cuMemCreate",
        })
    }
    /// Releases a physical handle (`cuMemRelease`); memory returns once it is also unmapped.
    fn mem_release(&mut self, _handle: MemHandle, _size: u64) -> DeviceResult<()> {
        Err(DeviceError::NotSupported {
            call: "cuMemRelease",
        })
    }
    /// Maps a whole handle at `ptr` and grants read/write access (`cuMemMap` + `cuMemSetAccess`).
    fn mem_map(&mut self, _ptr: u64, _size: u64, _handle: MemHandle) -> DeviceResult<()> {
        Err(DeviceError::NotSupported { call: "cuMemMap" })
    }
    /// Unmaps the mapping at `ptr` (`cuMemUnmap`).
    fn mem_unmap(&mut self, _ptr: u64, _size: u64, _handle: MemHandle) -> DeviceResult<()> {
        Err(DeviceError::NotSupported { call: "cuMemUnmap" })
    }

    // --- The stream-ordered pool (`backend:cudaMallocAsync`). A device without one answers
    // `NotSupported`. The pool is the device's default pool, configured as torch configures it:
    // release threshold at the maximum (freed memory stays cached until `trim`), and every
    // reuse policy enabled.

    /// Allocates exactly `size` bytes from the stream-ordered pool, usable in stream order on
    /// `stream` (`cudaMallocAsync`).
    fn malloc_async(&mut self, _size: u64, _stream: StreamId) -> DeviceResult<u64> {
        Err(DeviceError::NotSupported {
            call: "cudaMallocAsync",
        })
    }
    /// Returns `ptr` (allocated with `size` bytes by [`Device::malloc_async`]) to the pool once
    /// all work queued so far on `stream` and on every stream of `also_used_on` has completed
    /// (`cudaFreeAsync`; with other streams, on a private stream made to wait for all of them,
    /// as torch does).
    fn free_async(
        &mut self,
        _ptr: u64,
        _size: u64,
        _stream: StreamId,
        _also_used_on: &[StreamId],
    ) -> DeviceResult<()> {
        Err(DeviceError::NotSupported {
            call: "cudaFreeAsync",
        })
    }
    /// Waits for all work on the device, then releases the pool's cached memory until at most
    /// `keep` unused bytes remain (`cudaDeviceSynchronize` + `cudaMemPoolTrimTo`).
    fn trim(&mut self, _keep: u64) -> DeviceResult<()> {
        Err(DeviceError::NotSupported {
            call: "cudaMemPoolTrimTo",
        })
    }
    /// The pool's reserved and used bytes, current and high-water (`cudaMemPoolGetAttribute`).
    fn pool_usage(&mut self) -> DeviceResult<PoolUsage> {
        Err(DeviceError::NotSupported {
            call: "cudaMemPoolGetAttribute",
        })
    }
    /// Resets the pool's high-water marks to the current values (`cudaMemPoolSetAttribute` of
    /// `ReservedMemHigh` and `UsedMemHigh`).
    fn reset_pool_peaks(&mut self) -> DeviceResult<()> {
        Err(DeviceError::NotSupported {
            call: "cudaMemPoolSetAttribute",
        })
    }
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn malloc(&mut self, size: u64) -> DeviceResult<u64> {
        (**self).malloc(size)
    }
    fn free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        (**self).free(ptr, size)
    }
    fn mem_get_info(&mut self) -> DeviceResult<MemInfo> {
        (**self).mem_get_info()
    }
    fn record_event(&mut self, stream: StreamId) -> DeviceResult<EventId> {
        (**self).record_event(stream)
    }
    fn query_event(&mut self, event: EventId) -> DeviceResult<bool> {
        (**self).query_event(event)
    }
    fn synchronize_event(&mut self, event: EventId) -> DeviceResult<()> {
        (**self).synchronize_event(event)
    }
    fn synchronize_stream(&mut self, stream: StreamId) -> DeviceResult<()> {
        (**self).synchronize_stream(stream)
    }
    fn supports_vmm(&self) -> bool {
        (**self).supports_vmm()
    }
    fn granularity(&self) -> u64 {
        (**self).granularity()
    }
    fn address_reserve(&mut self, size: u64) -> DeviceResult<u64> {
        (**self).address_reserve(size)
    }
    fn address_free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        (**self).address_free(ptr, size)
    }
    fn mem_create(&mut self, size: u64) -> DeviceResult<MemHandle> {
        (**self).mem_create(size)
    }
    fn mem_release(&mut self, handle: MemHandle, size: u64) -> DeviceResult<()> {
        (**self).mem_release(handle, size)
    }
    fn mem_map(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        (**self).mem_map(ptr, size, handle)
    }
    fn mem_unmap(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        (**self).mem_unmap(ptr, size, handle)
    }
    fn malloc_async(&mut self, size: u64, stream: StreamId) -> DeviceResult<u64> {
        (**self).malloc_async(size, stream)
    }
    fn free_async(
        &mut self,
        ptr: u64,
        size: u64,
        stream: StreamId,
        also_used_on: &[StreamId],
    ) -> DeviceResult<()> {
        (**self).free_async(ptr, size, stream, also_used_on)
    }
    fn trim(&mut self, keep: u64) -> DeviceResult<()> {
        (**self).trim(keep)
    }
    fn pool_usage(&mut self) -> DeviceResult<PoolUsage> {
        (**self).pool_usage()
    }
    fn reset_pool_peaks(&mut self) -> DeviceResult<()> {
        (**self).reset_pool_peaks()
    }
}
