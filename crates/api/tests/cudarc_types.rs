//! A program against the `cachalot` crate with cudarc's own types: a typed cachalot buffer
//! goes to cudarc's copies, memset and kernel launch builder as a `CudaSlice` would. Compiling
//! it is the test where no GPU is present; with one, it also runs.
#![cfg(feature = "cuda")]
// Launching a kernel is `unsafe` in cudarc (it cannot check the kernel's signature).
#![allow(unsafe_code)]

use std::sync::Arc;

use cachalot::cudarc::driver::{
    CudaFunction, CudaStream, DevicePtr, DeviceSlice, DriverError, LaunchConfig, PushKernelArg,
};
use cachalot::{Allocator, CudaBuffer, CudaDevice, Settings};

/// Everything a cudarc user does with a buffer, written against cudarc's generic bounds.
#[allow(dead_code)]
fn round_trip(
    alloc: &Allocator<CudaDevice>,
    stream: &Arc<CudaStream>,
    kernel: Option<&CudaFunction>,
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let mut buf: CudaBuffer<f32> = alloc.alloc_on(stream, 256)?;
    assert_eq!(DeviceSlice::len(&buf), 256);
    assert_eq!(buf.num_bytes(), 1024);
    assert!(Arc::ptr_eq(buf.stream(), stream));
    stream.memset_zeros(&mut buf)?;
    stream.memcpy_htod(&[2.0f32; 256], &mut buf)?;
    if let Some(k) = kernel {
        let n = 256u32;
        let mut launch = stream.launch_builder(k);
        launch.arg(&mut buf).arg(&n);
        // SAFETY: compiled only; a caller passes a kernel taking (float*, unsigned).
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
    }
    let (ptr, _sync) = buf.device_ptr(stream);
    assert_eq!(ptr, buf.cu_device_ptr());
    drop(_sync);
    Ok(stream.clone_dtoh(&buf)?)
}

#[test]
fn typed_buffers_pass_to_cudarc() {
    let gpu = match CudaDevice::new(0) {
        Ok(g) => g,
        Err(e) => return cachalot_testkit::skip(format!("no GPU ({e}); compiling was the test")),
    };
    let ctx = cachalot::cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let alloc = Allocator::new(&Settings::default(), gpu).unwrap();
    let back = round_trip(&alloc, &stream, None).unwrap();
    assert!(back.iter().all(|v| *v == 2.0), "{:?}", &back[..4]);
    let stats = alloc.stats().unwrap();
    assert_eq!(
        stats.allocated_bytes.all().current,
        0,
        "dropped buffers go back"
    );
    assert!(stats.reserved_bytes.all().current >= 1024);
    let _: Option<DriverError> = None;
}

#[test]
fn a_size_that_overflows_is_an_error() {
    let Ok(gpu) = CudaDevice::new(0) else {
        return cachalot_testkit::skip("no GPU");
    };
    let ctx = cachalot::cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let alloc = Allocator::new(&Settings::default(), gpu).unwrap();
    let e = alloc.alloc_on::<u64>(&stream, usize::MAX / 4).unwrap_err();
    assert!(matches!(e, cachalot::Error::TooLarge { .. }), "{e}");
}
