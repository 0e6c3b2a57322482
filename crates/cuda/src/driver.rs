//! Calling the driver: result codes to [`DeviceError`]s, panics of the run-time loader caught,
//! the device's context made current for the length of a call, and `repr(C)` mirrors of the
//! two VMM structures whose Rust shape differs between cudarc's CUDA versions.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::OnceLock;

use cachalot_device::{DeviceError, DeviceResult};
use cudarc::driver::sys::{self, CUresult};

/// Whether the driver library (`libcuda.so`) can be loaded; checked once per process.
pub(crate) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // Safety: is_culib_present only tries to dlopen the candidate library names and closes
    // what it opened; it calls no driver function.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Every driver entry point this crate calls (a test keeps the list complete). cudarc looks
/// each one up on first use and panics if it is missing; [`missing_symbol`] checks them all
/// when a device is opened instead, so a broken driver is one clear error.
pub const SYMBOLS: &[&str] = &[
    "cuCtxGetCurrent",
    "cuCtxPopCurrent_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxSynchronize",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxRetain",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuGetErrorName",
    "cuInit",
    "cuMemAddressFree",
    "cuMemAddressReserve",
    "cuMemAllocFromPoolAsync",
    "cuMemAlloc_v2",
    "cuMemCreate",
    "cuMemFreeAsync",
    "cuMemFree_v2",
    "cuMemGetAddressRange_v2",
    "cuMemGetAllocationGranularity",
    "cuMemGetInfo_v2",
    "cuMemMap",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuMemRelease",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
];

/// The entry points of [`SYMBOLS`] the loaded driver library does not export (empty: all
/// there), checked once per process. Call only when [`driver_present`] is true.
pub(crate) fn missing_symbols() -> &'static [&'static str] {
    static MISSING: OnceLock<Vec<&'static str>> = OnceLock::new();
    MISSING.get_or_init(|| {
        // Safety: culib loads the library driver_present found (it panics only when none
        // loads, caught below); `get` only looks a name up with dlsym, nothing is called.
        catch_unwind(|| unsafe {
            let lib = sys::culib();
            SYMBOLS
                .iter()
                .copied()
                .filter(|name| lib.get::<*const std::ffi::c_void>(name.as_bytes()).is_err())
                .collect()
        })
        .unwrap_or_else(|_| SYMBOLS.to_vec())
    })
}

/// The driver's name for a result code (`CUDA_ERROR_INVALID_VALUE`), or its number.
pub(crate) fn error_name(r: CUresult) -> String {
    if !driver_present() {
        return format!("CUDA error {}", r as u32);
    }
    let mut p: *const c_char = ptr::null();
    // Safety: cuGetErrorName only writes `p`, a valid out-pointer, and on success points it at
    // a static NUL-terminated string owned by the driver. A panic (no driver) is caught.
    let got = catch_unwind(AssertUnwindSafe(|| unsafe {
        sys::cuGetErrorName(r, &mut p)
    }));
    if matches!(got, Ok(CUresult::CUDA_SUCCESS)) && !p.is_null() {
        // Safety: checked non-null; the driver guarantees a static C string on success.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("CUDA error {}", r as u32)
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the CUDA driver library could not be used".into())
}

/// Runs one driver call and returns its raw result. cudarc loads each symbol on first use and
/// panics if the library or the symbol is missing; that panic becomes a driver error naming
/// the call (it never crosses into the caller).
pub(crate) fn raw(call: &'static str, f: impl FnOnce() -> CUresult) -> DeviceResult<CUresult> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| DeviceError::Driver {
        call,
        message: panic_text(p),
    })
}

/// Maps a result: success, `CUDA_ERROR_OUT_OF_MEMORY` (retryable), or a fatal driver error
/// naming the call and the CUDA error.
pub(crate) fn check(call: &'static str, r: CUresult) -> DeviceResult<()> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(DeviceError::OutOfMemory),
        other => Err(DeviceError::Driver {
            call,
            message: error_name(other),
        }),
    }
}

/// [`raw`] then [`check`].
pub(crate) fn call(call: &'static str, f: impl FnOnce() -> CUresult) -> DeviceResult<()> {
    check(call, raw(call, f)?)
}

/// The device's context made current on this thread for the guard's lifetime: pushed only if
/// another (or no) context is current, and popped on drop, so the caller's thread keeps the
/// context it had (PyTorch tracks the current device through it).
pub(crate) struct CtxGuard {
    pushed: bool,
}

impl CtxGuard {
    pub(crate) fn enter(ctx: sys::CUcontext) -> DeviceResult<CtxGuard> {
        let mut cur: sys::CUcontext = ptr::null_mut();
        // Safety: cuCtxGetCurrent writes one handle into `cur`, a valid out-pointer.
        call("cuCtxGetCurrent", || unsafe {
            sys::cuCtxGetCurrent(&mut cur)
        })?;
        if cur == ctx {
            return Ok(CtxGuard { pushed: false });
        }
        // Safety: `ctx` is the primary context this device retained and has not released.
        call("cuCtxPushCurrent", || unsafe {
            sys::cuCtxPushCurrent_v2(ctx)
        })?;
        Ok(CtxGuard { pushed: true })
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        if self.pushed {
            let mut old: sys::CUcontext = ptr::null_mut();
            // Safety: pops the context pushed in `enter` on this same thread (the guard is not
            // Send); `old` is a valid out-pointer. Errors cannot be reported from a drop and
            // leave the stack as the driver has it.
            let _ = raw("cuCtxPopCurrent", || unsafe {
                sys::cuCtxPopCurrent_v2(&mut old)
            });
        }
    }
}

/// `CUmemLocation`: `{ CUmemLocationType type; int id; }` (the id sits in a union in CUDA 13).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MemLocation {
    pub type_: c_uint,
    pub id: c_int,
}

/// `CUmemAllocationProp`, laid out as in `cuda.h` since CUDA 10.2.
#[repr(C)]
pub(crate) struct AllocationProp {
    pub type_: c_uint,
    pub requested_handle_types: c_uint,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut std::ffi::c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAccessDesc`: `{ CUmemLocation location; CUmemAccess_flags flags; }`.
#[repr(C)]
pub(crate) struct AccessDesc {
    pub location: MemLocation,
    pub flags: c_uint,
}

// The mirrors stand in for cudarc's types when passed by pointer: same size and alignment.
const _: () = {
    assert!(size_of::<MemLocation>() == size_of::<sys::CUmemLocation>());
    assert!(size_of::<AllocationProp>() == size_of::<sys::CUmemAllocationProp>());
    assert!(align_of::<AllocationProp>() == align_of::<sys::CUmemAllocationProp>());
    assert!(size_of::<AccessDesc>() == size_of::<sys::CUmemAccessDesc>());
    assert!(align_of::<AccessDesc>() == align_of::<sys::CUmemAccessDesc>());
};

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub(crate) const ALLOCATION_TYPE_PINNED: c_uint = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub(crate) const LOCATION_TYPE_DEVICE: c_uint = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub(crate) const ACCESS_READWRITE: c_uint = 3;

impl AllocationProp {
    /// Pinned device memory on device `ordinal`, no shareable handle: what `cuMemCreate`
    /// needs for memory used by this process only.
    pub(crate) fn device(ordinal: c_int) -> Self {
        AllocationProp {
            type_: ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: MemLocation {
                type_: LOCATION_TYPE_DEVICE,
                id: ordinal,
            },
            win32_handle_meta_data: ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        }
    }

    pub(crate) fn as_sys(&self) -> *const sys::CUmemAllocationProp {
        (self as *const AllocationProp).cast()
    }
}

impl AccessDesc {
    /// Read and write access for device `ordinal`.
    pub(crate) fn read_write(ordinal: c_int) -> Self {
        AccessDesc {
            location: MemLocation {
                type_: LOCATION_TYPE_DEVICE,
                id: ordinal,
            },
            flags: ACCESS_READWRITE,
        }
    }

    pub(crate) fn as_sys(&self) -> *const sys::CUmemAccessDesc {
        (self as *const AccessDesc).cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_retryable_and_nothing_else_is() {
        assert_eq!(check("cuMemAlloc", CUresult::CUDA_SUCCESS), Ok(()));
        assert_eq!(
            check("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            Err(DeviceError::OutOfMemory)
        );
        for r in [
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_NOT_INITIALIZED,
        ] {
            match check("cuMemAlloc", r) {
                Err(DeviceError::Driver { call, message }) => {
                    assert_eq!(call, "cuMemAlloc");
                    // Without a driver the name is the number; with one, the driver's name.
                    assert!(
                        message.starts_with("CUDA_ERROR_")
                            || message == format!("CUDA error {}", r as u32),
                        "{message}"
                    );
                }
                other => panic!("{r:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn a_loader_panic_is_a_driver_error() {
        let e = raw("cuMemFree", || panic!("Missing symbol cuMemFree_v2")).unwrap_err();
        assert_eq!(
            e,
            DeviceError::Driver {
                call: "cuMemFree",
                message: "Missing symbol cuMemFree_v2".into()
            }
        );
    }
}
