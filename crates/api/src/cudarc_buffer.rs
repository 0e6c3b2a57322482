//! Typed device buffers for cudarc (feature `cuda`): [`CudaBuffer<T>`] is `len` elements of
//! `T` from a cachalot [`Allocator`], allocated in stream order on a cudarc [`CudaStream`].
//! It implements cudarc's [`DeviceSlice`], [`DevicePtr`] and [`DevicePtrMut`], so it goes
//! wherever cudarc takes a device slice (`memcpy_htod`, `memcpy_dtoh`, `memset_zeros`, …),
//! and kernel launches take it as an argument (`launch_builder(..).arg(&buf)`).
//!
//! Stream semantics are PyTorch's: the memory belongs to the stream it was allocated on.
//! Using it on another stream (a copy or a launch there through [`DevicePtr::device_ptr`])
//! makes that stream wait for the allocating stream's work so far and records the use
//! (`record_stream`), so the block is not reused before that stream's work completes.

use std::marker::PhantomData;
use std::sync::Arc;

use cachalot_cuda::CudaDevice;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{
    CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
};

use crate::{Allocator, DeviceBuffer, Error, Result, StreamId};

/// The cachalot stream id of a cudarc stream (its raw `CUstream` handle).
pub fn stream_id(stream: &CudaStream) -> StreamId {
    StreamId(stream.cu_stream() as usize as u64)
}

impl Allocator<CudaDevice> {
    /// `len` elements of `T` for use on `stream`, uninitialized (as `cudaMalloc`'s memory
    /// is), returned to the cache when the buffer is dropped. `len` 0 gives an empty buffer.
    /// The stream must belong to this allocator's GPU.
    pub fn alloc_on<T>(&self, stream: &Arc<CudaStream>, len: usize) -> Result<CudaBuffer<T>> {
        let elem = std::mem::size_of::<T>();
        let bytes = len.checked_mul(elem).ok_or(Error::TooLarge { len, elem })?;
        let raw = self.alloc(bytes, stream_id(stream))?;
        Ok(CudaBuffer {
            ptr: raw.device_ptr(),
            raw,
            stream: stream.clone(),
            len,
            _elem: PhantomData,
        })
    }
}

/// `len` elements of `T` in device memory from a cachalot [`Allocator`]
/// ([`Allocator::alloc_on`]), on a cudarc [`CudaStream`], returned to the cache when dropped.
///
/// It implements cudarc's [`DeviceSlice`], [`DevicePtr`] and [`DevicePtrMut`], so it goes
/// wherever cudarc takes a device slice (`memcpy_htod`, `clone_dtoh`, `memset_zeros`, …), and
/// kernel launches take it as an argument (`launch_builder(..).arg(&mut buf)`). Asking for its
/// pointer on another stream than its own makes that stream wait for the allocating stream's
/// work so far and records the use, as `Tensor.record_stream` does, so the memory is not
/// reused before that stream's work completes.
pub struct CudaBuffer<T> {
    /// The address, kept as a field so that a kernel launch can take a reference to it.
    ptr: CUdeviceptr,
    raw: DeviceBuffer<CudaDevice>,
    stream: Arc<CudaStream>,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T> CudaBuffer<T> {
    /// The device address (`CUdeviceptr`; 0 for an empty buffer).
    pub fn cu_device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The untyped buffer underneath (its allocator, `record_stream`, …).
    pub fn raw(&self) -> &DeviceBuffer<CudaDevice> {
        &self.raw
    }

    /// Makes `stream` safe to use this memory on: it waits for the work queued on the
    /// allocating stream so far, and the allocator keeps the block until `stream`'s work
    /// completes. Nothing to do on the allocating stream itself.
    fn use_on(&self, stream: &CudaStream) {
        if stream.cu_stream() == self.stream.cu_stream() || self.ptr == 0 {
            return;
        }
        stream.context().record_err(stream.join(&self.stream));
        // A live buffer's address is always known to its allocator; `record_stream` fails
        // only for an unknown address, so there is no error to lose here.
        let _ = self.raw.record_stream(stream_id(stream));
    }
}

impl<T> DeviceSlice<T> for CudaBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for CudaBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.use_on(stream);
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for CudaBuffer<T> {
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        self.use_on(stream);
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

// SAFETY: a kernel argument is a pointer to the argument's bytes that must stay valid until
// the launch. This pushes a reference to the buffer's `ptr` field (a `CUdeviceptr`, which
// cudarc passes as a `u64` value argument through its own `DeviceRepr` impl), borrowed for
// 'b, which outlives the builder's 'a. Launches on another stream than the allocating one
// must call `DevicePtr::device_ptr` first (cudarc's builder does not tell us its stream).
#[allow(unsafe_code)]
unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b CudaBuffer<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b CudaBuffer<T>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}

// SAFETY: as for `&CudaBuffer<T>` above; the mutable borrow only says the kernel writes.
#[allow(unsafe_code)]
unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b mut CudaBuffer<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut CudaBuffer<T>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}

impl<T> std::fmt::Debug for CudaBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("elem", &std::any::type_name::<T>())
            .finish()
    }
}
