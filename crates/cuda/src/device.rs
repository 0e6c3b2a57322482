//! [`CudaDevice`]: one GPU through the CUDA driver API.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use cachalot_device::{
    Device, DeviceError, DeviceResult, EventId, MemHandle, MemInfo, PoolUsage, StreamId,
};
use cudarc::driver::sys::{self, CUresult};

use crate::CudaInitError;
use crate::driver::{AccessDesc, AllocationProp, CtxGuard, call, check, driver_present, raw};

/// The handles of one GPU, as the driver gave them.
///
/// Raw pointers make the struct `!Send` by default; see the `Send` impl below.
struct Handles {
    ctx: sys::CUcontext,
    pool: sys::CUmemoryPool,
    unify: sys::CUstream,
    spare_events: Vec<sys::CUevent>,
}

/// A CUDA GPU behind [`Device`]: `cuMemAlloc`/`cuMemFree`, events, memory info, the VMM calls
/// of expandable segments, and the device's default stream-ordered pool.
///
/// Every call runs in the device's primary context (the one the CUDA runtime, and so PyTorch,
/// uses); a thread that had another context current gets it back after the call. Stream
/// handles are raw `CUstream`/`cudaStream_t` values (`StreamId(0)` is the legacy default
/// stream); event handles are recycled `CUevent`s. `CUDA_ERROR_OUT_OF_MEMORY` is
/// [`DeviceError::OutOfMemory`]; every other failure is [`DeviceError::Driver`] naming the call
/// and the CUDA error.
pub struct CudaDevice {
    ordinal: c_int,
    dev: sys::CUdevice,
    name: String,
    vmm: bool,
    pools: bool,
    granularity: u64,
    /// This device's address reservations (base → size), for the copies' range check.
    reservations: std::collections::BTreeMap<u64, u64>,
    h: Handles,
}

// Safety: the driver's context, stream, event and pool handles are process-wide objects that
// any thread may use; the driver synchronizes its own state. `CudaDevice` is only ever used
// through `&mut self` (one thread at a time), and each call makes the context current on the
// calling thread itself (`CtxGuard`), so nothing thread-local travels with the value.
unsafe impl Send for CudaDevice {}

fn as_stream(s: StreamId) -> sys::CUstream {
    s.0 as usize as sys::CUstream
}

/// Number of CUDA devices, or why there are none usable.
pub fn device_count() -> Result<usize, CudaInitError> {
    init_driver()?;
    let mut n: c_int = 0;
    // Safety: writes one int into `n`, a valid out-pointer; the driver is initialized.
    call("cuDeviceGetCount", || unsafe {
        sys::cuDeviceGetCount(&mut n)
    })?;
    Ok(n.max(0) as usize)
}

fn init_driver() -> Result<(), CudaInitError> {
    if !driver_present() {
        let tried = cudarc::get_lib_name_candidates("cuda");
        return Err(CudaInitError::NoDriver(format!(
            "libcuda could not be loaded (tried {}, {} and {} other names; is the NVIDIA \
             driver installed, and its directory on LD_LIBRARY_PATH?)",
            tried[0],
            tried[tried.len() - 1],
            tried.len() - 2
        )));
    }
    let missing = crate::driver::missing_symbols();
    if !missing.is_empty() {
        return Err(CudaInitError::MissingSymbols {
            missing: missing.to_vec(),
        });
    }
    // Safety: cuInit takes flags (must be 0) and may be called any number of times.
    call("cuInit", || unsafe { sys::cuInit(0) })?;
    Ok(())
}

fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> DeviceResult<i32> {
    let mut v: c_int = 0;
    // Safety: writes one int into `v`; `dev` came from cuDeviceGet.
    call("cuDeviceGetAttribute", || unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, dev)
    })?;
    Ok(v)
}

impl CudaDevice {
    /// The GPU with ordinal `ordinal` (as `CUDA_VISIBLE_DEVICES` numbers them). Fails with
    /// "no CUDA driver found: …" when `libcuda.so` cannot be loaded; never panics.
    pub fn new(ordinal: usize) -> Result<Self, CudaInitError> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaInitError::NoSuchDevice { ordinal, count });
        }
        let ordinal = ordinal as c_int;
        let mut dev: sys::CUdevice = 0;
        // Safety: writes one device handle into `dev`; the ordinal was checked above.
        call("cuDeviceGet", || unsafe {
            sys::cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // Safety: writes one context handle; released in Drop, once.
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let mut device = CudaDevice {
            ordinal,
            dev,
            name: String::new(),
            vmm: false,
            pools: false,
            granularity: 2 << 20,
            reservations: Default::default(),
            h: Handles {
                ctx,
                pool: ptr::null_mut(),
                unify: ptr::null_mut(),
                spare_events: Vec::new(),
            },
        };
        use sys::CUdevice_attribute::*;
        device.vmm = attribute(
            dev,
            CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        )? != 0;
        device.pools = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0;
        let mut name = [0 as std::ffi::c_char; 256];
        // Safety: the driver writes at most `len` bytes, NUL-terminated, into `name`.
        call("cuDeviceGetName", || unsafe {
            sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        // Safety: NUL-terminated by the driver within the buffer (checked by the call).
        device.name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if device.vmm {
            let prop = AllocationProp::device(ordinal);
            let mut g: usize = 0;
            // Safety: `prop` is a valid CUmemAllocationProp (see the mirror's layout check)
            // that outlives the call; `g` is a valid out-pointer.
            call("cuMemGetAllocationGranularity", || unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut g,
                    prop.as_sys(),
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            })?;
            device.granularity = g as u64;
        }
        Ok(device)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal as usize
    }

    /// The device's name, e.g. `NVIDIA H200`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the device has stream-ordered memory pools (`backend:cudaMallocAsync`).
    pub fn supports_pools(&self) -> bool {
        self.pools
    }

    fn enter(&self) -> DeviceResult<CtxGuard> {
        CtxGuard::enter(self.h.ctx)
    }

    /// The default pool, configured as torch configures it on first use.
    fn pool(&mut self) -> DeviceResult<sys::CUmemoryPool> {
        if !self.h.pool.is_null() {
            return Ok(self.h.pool);
        }
        if !self.pools {
            return Err(DeviceError::NotSupported {
                call: "cuDeviceGetDefaultMemPool",
            });
        }
        let mut pool: sys::CUmemoryPool = ptr::null_mut();
        let dev = self.dev;
        // Safety: writes one pool handle; `dev` is valid. The default pool lives as long as
        // the device's context.
        call("cuDeviceGetDefaultMemPool", || unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, dev)
        })?;
        use sys::CUmemPool_attribute::*;
        let mut threshold: u64 = u64::MAX;
        // Safety: RELEASE_THRESHOLD takes a pointer to a cuuint64_t, which `threshold` is.
        call("cuMemPoolSetAttribute", || unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast::<c_void>(),
            )
        })?;
        for attr in [
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
        ] {
            let mut enable: c_int = 1;
            // Safety: the reuse attributes take a pointer to an int, which `enable` is.
            call("cuMemPoolSetAttribute", || unsafe {
                sys::cuMemPoolSetAttribute(pool, attr, (&mut enable as *mut c_int).cast())
            })?;
        }
        self.h.pool = pool;
        Ok(pool)
    }

    fn pool_attr(&self, attr: sys::CUmemPool_attribute) -> DeviceResult<u64> {
        let mut v: u64 = 0;
        let pool = self.h.pool;
        // Safety: the four usage attributes are cuuint64_t values written through `v`;
        // `pool` is the configured default pool.
        call("cuMemPoolGetAttribute", || unsafe {
            sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast())
        })?;
        Ok(v)
    }

    /// A private non-blocking stream that frees of memory used on several streams wait on.
    fn unify_stream(&mut self) -> DeviceResult<sys::CUstream> {
        if self.h.unify.is_null() {
            let mut s: sys::CUstream = ptr::null_mut();
            // Safety: writes one stream handle; destroyed in Drop.
            call("cuStreamCreate", || unsafe {
                sys::cuStreamCreate(
                    &mut s,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint,
                )
            })?;
            self.h.unify = s;
        }
        Ok(self.h.unify)
    }

    fn new_event(&mut self) -> DeviceResult<sys::CUevent> {
        if let Some(e) = self.h.spare_events.pop() {
            return Ok(e);
        }
        let mut e: sys::CUevent = ptr::null_mut();
        // Safety: writes one event handle; recycled through `spare_events`, destroyed in Drop.
        call("cuEventCreate", || unsafe {
            sys::cuEventCreate(
                &mut e,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint,
            )
        })?;
        Ok(e)
    }

    /// Checks that `[ptr, ptr + len)` is device memory the driver knows: inside one
    /// allocation, or, inside one of this device's address reservations, across consecutive
    /// mappings (an expandable segment's pages, each of which the driver reports as its own
    /// range).
    fn check_range(&self, ptr: u64, len: usize, call_name: &'static str) -> DeviceResult<()> {
        let fail = |what: String| DeviceError::Driver {
            call: call_name,
            message: format!("{len} bytes at {ptr:#x} {what}"),
        };
        let end = ptr
            .checked_add(len as u64)
            .ok_or_else(|| fail("pass the end of the address space".into()))?;
        let reserved = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&base, &size)| end <= base + size);
        let mut at = ptr;
        while at < end {
            let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
            // Safety: writes the base and size of the allocation holding `at` into valid
            // out-pointers, or fails for an address the driver did not allocate.
            call("cuMemGetAddressRange", || unsafe {
                sys::cuMemGetAddressRange_v2(&mut base, &mut size, at)
            })?;
            let next = base.saturating_add(size as u64);
            if next <= at || (next < end && !reserved) {
                return Err(fail(format!("overrun the allocation [{base:#x}, +{size})")));
            }
            at = next;
        }
        Ok(())
    }

    /// Copies `src` to device memory at `dst` and waits for the copy (`cuMemcpyHtoD`). The
    /// destination must lie inside one allocation the driver knows (checked first).
    pub fn copy_to_device(&mut self, dst: u64, src: &[u8]) -> DeviceResult<()> {
        let _g = self.enter()?;
        self.check_range(dst, src.len(), "cuMemcpyHtoD")?;
        // Safety: `src` is valid for `src.len()` bytes of reads; the destination range was
        // checked to be device memory of one allocation, so no host memory is written.
        call("cuMemcpyHtoD", || unsafe {
            sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len())
        })
    }

    /// Copies device memory at `src` into `dst` and waits for the copy (`cuMemcpyDtoH`). The
    /// source must lie inside one allocation the driver knows (checked first).
    pub fn copy_from_device(&mut self, src: u64, dst: &mut [u8]) -> DeviceResult<()> {
        let _g = self.enter()?;
        self.check_range(src, dst.len(), "cuMemcpyDtoH")?;
        // Safety: `dst` is valid for `dst.len()` bytes of writes and borrowed mutably, so
        // nothing else observes it during the copy; the source range was checked.
        call("cuMemcpyDtoH", || unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }

    /// Waits for all work on the device (`cuCtxSynchronize`).
    pub fn synchronize(&mut self) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: no arguments; synchronizes the current (this device's) context.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; each release is attempted independently.
        let Ok(_g) = self.enter() else { return };
        for e in self.h.spare_events.drain(..) {
            // Safety: `e` was created by cuEventCreate and is not in use (spare).
            let _ = raw("cuEventDestroy", || unsafe { sys::cuEventDestroy_v2(e) });
        }
        if !self.h.unify.is_null() {
            let s = self.h.unify;
            // Safety: our own stream; pending work completes before the driver frees it.
            let _ = raw("cuStreamDestroy", || unsafe { sys::cuStreamDestroy_v2(s) });
        }
        drop(_g);
        let dev = self.dev;
        // Safety: balances the cuDevicePrimaryCtxRetain of `new`, once.
        let _ = raw("cuDevicePrimaryCtxRelease", || unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(dev)
        });
    }
}

impl Device for CudaDevice {
    fn malloc(&mut self, size: u64) -> DeviceResult<u64> {
        let _g = self.enter()?;
        let mut p: sys::CUdeviceptr = 0;
        // Safety: writes one device pointer into `p`.
        call("cuMemAlloc", || unsafe {
            sys::cuMemAlloc_v2(&mut p, size as usize)
        })?;
        Ok(p)
    }

    fn free(&mut self, ptr: u64, _size: u64) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: the allocator only frees addresses it obtained from `malloc`; a wrong
        // address is rejected by the driver (CUDA_ERROR_INVALID_VALUE), not undefined.
        call("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) })
    }

    fn mem_get_info(&mut self) -> DeviceResult<MemInfo> {
        let _g = self.enter()?;
        let (mut free, mut total): (usize, usize) = (0, 0);
        // Safety: writes two sizes into valid out-pointers.
        call("cuMemGetInfo", || unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn record_event(&mut self, stream: StreamId) -> DeviceResult<EventId> {
        let _g = self.enter()?;
        let e = self.new_event()?;
        // Safety: `e` is a live event of this context; the stream handle comes from the
        // caller (PyTorch's cudaStream_t); a dead handle is an error from the driver.
        let r = call("cuEventRecord", || unsafe {
            sys::cuEventRecord(e, as_stream(stream))
        });
        if let Err(err) = r {
            self.h.spare_events.push(e);
            return Err(err);
        }
        Ok(EventId(e as usize as u64))
    }

    fn query_event(&mut self, event: EventId) -> DeviceResult<bool> {
        let _g = self.enter()?;
        let e = event.0 as usize as sys::CUevent;
        // Safety: `e` is an event handed out by `record_event` and not yet consumed.
        match raw("cuEventQuery", || unsafe { sys::cuEventQuery(e) })? {
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => {
                check("cuEventQuery", r)?;
                self.h.spare_events.push(e);
                Ok(true)
            }
        }
    }

    fn synchronize_event(&mut self, event: EventId) -> DeviceResult<()> {
        let _g = self.enter()?;
        let e = event.0 as usize as sys::CUevent;
        // Safety: `e` is an event handed out by `record_event` and not yet consumed.
        call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(e)
        })?;
        self.h.spare_events.push(e);
        Ok(())
    }

    fn synchronize_stream(&mut self, stream: StreamId) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: the stream handle comes from the caller; a dead one is a driver error.
        call("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(as_stream(stream))
        })
    }

    fn supports_vmm(&self) -> bool {
        self.vmm
    }

    fn granularity(&self) -> u64 {
        self.granularity
    }

    fn address_reserve(&mut self, size: u64) -> DeviceResult<u64> {
        let _g = self.enter()?;
        let mut p: sys::CUdeviceptr = 0;
        // Safety: reserves address space only (no memory); writes the base into `p`.
        call("cuMemAddressReserve", || unsafe {
            sys::cuMemAddressReserve(&mut p, size as usize, 0, 0, 0)
        })?;
        self.reservations.insert(p, size);
        Ok(p)
    }

    fn address_free(&mut self, ptr: u64, size: u64) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: the driver checks that (ptr, size) names a reservation.
        call("cuMemAddressFree", || unsafe {
            sys::cuMemAddressFree(ptr, size as usize)
        })?;
        self.reservations.remove(&ptr);
        Ok(())
    }

    fn mem_create(&mut self, size: u64) -> DeviceResult<MemHandle> {
        let _g = self.enter()?;
        let prop = AllocationProp::device(self.ordinal);
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        // Safety: `prop` is a valid CUmemAllocationProp for the duration of the call; the
        // handle is written into `h`.
        call("cuMemCreate", || unsafe {
            sys::cuMemCreate(&mut h, size as usize, prop.as_sys(), 0)
        })?;
        Ok(MemHandle(h))
    }

    fn mem_release(&mut self, handle: MemHandle, _size: u64) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: the handle came from `mem_create`; the driver rejects an unknown one.
        call("cuMemRelease", || unsafe { sys::cuMemRelease(handle.0) })
    }

    fn mem_map(&mut self, ptr: u64, size: u64, handle: MemHandle) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: maps a whole handle (offset 0) inside a reservation we made; the driver
        // checks range and handle.
        call("cuMemMap", || unsafe {
            sys::cuMemMap(ptr, size as usize, 0, handle.0, 0)
        })?;
        let desc = AccessDesc::read_write(self.ordinal);
        // Safety: one valid CUmemAccessDesc (see the mirror's layout check), alive for the call.
        let access = call("cuMemSetAccess", || unsafe {
            sys::cuMemSetAccess(ptr, size as usize, desc.as_sys(), 1)
        });
        if let Err(e) = access {
            // Safety: undoes the mapping made just above.
            let _ = raw("cuMemUnmap", || unsafe {
                sys::cuMemUnmap(ptr, size as usize)
            });
            return Err(e);
        }
        Ok(())
    }

    fn mem_unmap(&mut self, ptr: u64, size: u64, _handle: MemHandle) -> DeviceResult<()> {
        let _g = self.enter()?;
        // Safety: unmaps a range we mapped; the driver checks it covers whole mappings.
        call("cuMemUnmap", || unsafe {
            sys::cuMemUnmap(ptr, size as usize)
        })
    }

    fn malloc_async(&mut self, size: u64, stream: StreamId) -> DeviceResult<u64> {
        let _g = self.enter()?;
        let pool = self.pool()?;
        let mut p: sys::CUdeviceptr = 0;
        // Safety: allocates from our configured default pool in stream order; writes the
        // address into `p`.
        call("cuMemAllocFromPoolAsync", || unsafe {
            sys::cuMemAllocFromPoolAsync(&mut p, size as usize, pool, as_stream(stream))
        })?;
        Ok(p)
    }

    fn free_async(
        &mut self,
        ptr: u64,
        _size: u64,
        stream: StreamId,
        also_used_on: &[StreamId],
    ) -> DeviceResult<()> {
        let _g = self.enter()?;
        if also_used_on.is_empty() {
            // Safety: frees a pool allocation in the order of its only stream.
            return call("cuMemFreeAsync", || unsafe {
                sys::cuMemFreeAsync(ptr, as_stream(stream))
            });
        }
        // Used on several streams: a private stream waits for all of them, then frees.
        let unify = self.unify_stream()?;
        for &s in std::iter::once(&stream).chain(also_used_on) {
            let e = self.new_event()?;
            // Safety: `e` is a live event; recording on the caller's stream and making our
            // stream wait on it only orders work. The event may be reused once the wait is
            // enqueued (the driver captures its state at cuStreamWaitEvent).
            let r = call("cuEventRecord", || unsafe {
                sys::cuEventRecord(e, as_stream(s))
            })
            .and_then(|()| {
                call("cuStreamWaitEvent", || unsafe {
                    sys::cuStreamWaitEvent(unify, e, 0)
                })
            });
            self.h.spare_events.push(e);
            r?;
        }
        // Safety: frees the pool allocation in the order of the stream that waits for all.
        call("cuMemFreeAsync", || unsafe {
            sys::cuMemFreeAsync(ptr, unify)
        })
    }

    fn trim(&mut self, keep: u64) -> DeviceResult<()> {
        if self.h.pool.is_null() {
            return Ok(()); // never used: nothing cached
        }
        let _g = self.enter()?;
        // Safety: no arguments; waits for this context's work so that pending frees land.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })?;
        let pool = self.h.pool;
        // Safety: trims our default pool; memory in use is never released.
        call("cuMemPoolTrimTo", || unsafe {
            sys::cuMemPoolTrimTo(pool, keep as usize)
        })
    }

    fn pool_usage(&mut self) -> DeviceResult<PoolUsage> {
        let _g = self.enter()?;
        self.pool()?;
        use sys::CUmemPool_attribute::*;
        Ok(PoolUsage {
            reserved_current: self.pool_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high: self.pool_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
            used_current: self.pool_attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high: self.pool_attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        })
    }

    fn reset_pool_peaks(&mut self) -> DeviceResult<()> {
        let _g = self.enter()?;
        let pool = self.pool()?;
        use sys::CUmemPool_attribute::*;
        for attr in [
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        ] {
            let mut zero: u64 = 0;
            // Safety: the high-water attributes take a cuuint64_t, which must be 0 to reset.
            call("cuMemPoolSetAttribute", || unsafe {
                sys::cuMemPoolSetAttribute(pool, attr, (&mut zero as *mut u64).cast())
            })?;
        }
        Ok(())
    }
}
