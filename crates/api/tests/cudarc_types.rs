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

/// The tests above again in a child process whose cudarc loads the capture runtime's simulated
/// driver, so that they run in CI without a GPU: the typed buffer's memset, copies and read
/// back reach a driver (its stream-ordered copies keep what they write). Skipped, saying why,
/// where that driver cannot be built (testkit::simulated_driver). Every test of the file must
/// pass there.
#[test]
fn the_tests_above_on_the_simulated_driver() {
    if cachalot_testkit::on_simulated_driver() {
        return; // the child
    }
    let driver = match cachalot_testkit::simulated_driver() {
        Ok(d) => d,
        Err(why) => return cachalot_testkit::skip(format!("simulated driver: {why}")),
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--test-threads=1", "--nocapture"])
        .envs(driver.env())
        .env("FAKE_CUDA_CAPACITY", "8G")
        .env_remove("FAKE_CUDA_LOG")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "on the simulated driver:\n{text}");
    assert!(!text.contains("SKIPPED"), "a test skipped there:\n{text}");
    let tests = include_str!("cudarc_types.rs").matches("#[test]").count() - 1; // less this string
    assert!(
        text.contains(&format!("test result: ok. {tests} passed")),
        "expected {tests} passed:\n{text}"
    );
}
