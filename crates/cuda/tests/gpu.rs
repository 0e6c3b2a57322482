//! The CUDA device on a real GPU, and the same tests on the capture runtime's simulated driver
//! (`every_test_on_the_simulated_driver` runs this binary again with cudarc pointed at it),
//! so that they run in CI on machines without a GPU. Each test prints why it is skipped when
//! there is no CUDA driver or no GPU (and passes), so the workspace's tests pass on any
//! machine; the simulated driver's run is skipped, saying why, where it cannot be built.
//!
//! `CACHALOT_REQUIRE_GPU=1` turns a skip into a failure (scripts/gpu_check.sh sets it, and so
//! does the run on the simulated driver). What only a real GPU does (a pool that keeps freed
//! memory until trimmed) is checked where the driver is real; on the simulated one
//! (`CACHALOT_SIMULATED_DRIVER=1`) the test checks what that driver does instead.

use cachalot_core::async_backend::{AsyncAllocator, DirectMode};
use cachalot_core::config::parse_pytorch;
use cachalot_core::{AllocConf, CachingAllocator};
use cachalot_cuda::CudaDevice;
use cachalot_device::{Device, DeviceError, EventId, StreamId};

use std::io::Write;
use std::process::Command;

use cachalot_testkit::on_simulated_driver;

const MIB: u64 = 1 << 20;

/// Says why a test does not run. Written to stderr directly: libtest captures `eprintln!`,
/// and the reason for a skip should show in a plain `cargo test`.
fn skip(test: &str, why: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

fn gpu(test: &str) -> Option<CudaDevice> {
    match CudaDevice::new(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CACHALOT_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: CACHALOT_REQUIRE_GPU=1 but {e}");
            }
            skip(test, e);
            None
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn roundtrip(d: &mut CudaDevice, ptr: u64, n: usize, seed: u8) {
    let data = pattern(n, seed);
    d.copy_to_device(ptr, &data).unwrap();
    let mut back = vec![0u8; n];
    d.copy_from_device(ptr, &mut back).unwrap();
    assert_eq!(
        back, data,
        "device memory at {ptr:#x} holds what was written"
    );
}

#[test]
fn malloc_copy_free_and_error_kinds() {
    let Some(mut d) = gpu("malloc_copy_free_and_error_kinds") else {
        return;
    };
    eprintln!(
        "GPU 0: {} (VMM {}, pools {})",
        d.name(),
        d.supports_vmm(),
        d.supports_pools()
    );
    let info = d.mem_get_info().unwrap();
    assert!(info.total > 0 && info.free <= info.total);
    let p = d.malloc(MIB).unwrap();
    roundtrip(&mut d, p, 4096, 1);
    // Copies are checked against the allocation's bounds.
    assert!(d.copy_to_device(p + MIB - 8, &[0; 16]).is_err());
    d.free(p, MIB).unwrap();
    // A second free is a driver error naming the call, never out-of-memory.
    match d.free(p, MIB) {
        Err(DeviceError::Driver { call, message }) => {
            assert_eq!(call, "cuMemFree");
            assert!(message.starts_with("CUDA_ERROR_"), "{message}");
        }
        other => panic!("double free gave {other:?}"),
    }
    // More than the device has: out-of-memory, retryable.
    assert_eq!(d.malloc(info.total * 2), Err(DeviceError::OutOfMemory));
    let after = d.mem_get_info().unwrap();
    assert!(
        after.free + 64 * MIB >= info.free,
        "the failed calls leaked nothing"
    );
}

#[test]
fn events_complete_on_the_default_stream() {
    let Some(mut d) = gpu("events_complete_on_the_default_stream") else {
        return;
    };
    let e = d.record_event(StreamId::DEFAULT).unwrap();
    d.synchronize_stream(StreamId::DEFAULT).unwrap();
    assert!(d.query_event(e).unwrap(), "the stream was synchronized");
    let e = d.record_event(StreamId::DEFAULT).unwrap();
    d.synchronize_event(e).unwrap();
    // Recycled events keep working.
    for _ in 0..100 {
        let e = d.record_event(StreamId::DEFAULT).unwrap();
        d.synchronize_event(e).unwrap();
    }
}

#[test]
fn virtual_memory_map_and_unmap() {
    let Some(mut d) = gpu("virtual_memory_map_and_unmap") else {
        return;
    };
    if !d.supports_vmm() {
        skip("virtual_memory_map_and_unmap", "GPU without VMM");
        return;
    }
    let g = d.granularity();
    assert!(g.is_power_of_two() && g >= 64 * 1024, "granularity {g}");
    let base = d.address_reserve(4 * g).unwrap();
    let h1 = d.mem_create(g).unwrap();
    let h2 = d.mem_create(g).unwrap();
    d.mem_map(base, g, h1).unwrap();
    d.mem_map(base + g, g, h2).unwrap();
    roundtrip(&mut d, base + g - 100, 200, 7); // across the two pages
    d.mem_unmap(base, g, h1).unwrap();
    d.mem_unmap(base + g, g, h2).unwrap();
    d.mem_release(h1, g).unwrap();
    d.mem_release(h2, g).unwrap();
    d.address_free(base, 4 * g).unwrap();
    assert!(matches!(
        d.mem_release(h1, g),
        Err(DeviceError::Driver { .. })
    ));
}

#[test]
fn stream_ordered_pool() {
    let Some(mut d) = gpu("stream_ordered_pool") else {
        return;
    };
    if !d.supports_pools() {
        skip("stream_ordered_pool", "GPU without memory pools");
        return;
    }
    let before = d.pool_usage().unwrap();
    let p = d.malloc_async(3 * MIB, StreamId::DEFAULT).unwrap();
    d.synchronize_stream(StreamId::DEFAULT).unwrap();
    roundtrip(&mut d, p, 8192, 3);
    let u = d.pool_usage().unwrap();
    assert!(u.used_current >= before.used_current + 3 * MIB, "{u:?}");
    assert!(u.reserved_current >= u.used_current);
    // Used on a second stream: the free waits for both (here the default stream twice).
    d.free_async(p, 3 * MIB, StreamId::DEFAULT, &[StreamId::DEFAULT])
        .unwrap();
    d.synchronize_stream(StreamId::DEFAULT).unwrap();
    let u = d.pool_usage().unwrap();
    assert_eq!(u.used_current, before.used_current);
    if on_simulated_driver() {
        // Its pool caches nothing, as the oracle's device (and cachalot's simulated one).
        assert_eq!(u.reserved_current, u.used_current, "{u:?}");
        d.trim(0).unwrap();
    } else {
        // The release threshold is the maximum: memory stays in the pool until trimmed.
        assert!(u.reserved_current >= 3 * MIB, "{u:?}");
        d.trim(0).unwrap();
        assert!(d.pool_usage().unwrap().reserved_current < u.reserved_current);
    }
    d.reset_pool_peaks().unwrap();
    let u = d.pool_usage().unwrap();
    assert_eq!(u.used_high, u.used_current);
}

#[test]
fn caching_allocator_on_the_gpu_from_many_threads() {
    let Some(d) = gpu("caching_allocator_on_the_gpu_from_many_threads") else {
        return;
    };
    let alloc = CachingAllocator::new(AllocConf::default(), d).unwrap();
    // Threads that never touched CUDA: the device makes its context current for each call.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let alloc = &alloc;
            s.spawn(move || {
                let mut live = Vec::new();
                for i in 0..300u64 {
                    let size = 512 + (i * 7919 + t * 104_729) % (8 * MIB);
                    let p = alloc.malloc(size, StreamId::DEFAULT).unwrap();
                    if i % 16 == 0 {
                        alloc.with_device(|d| roundtrip(d, p, 256, t as u8));
                    }
                    live.push(p);
                    if i % 2 == 0 {
                        alloc.free(live.swap_remove(0)).unwrap();
                    }
                }
                for p in live {
                    alloc.free(p).unwrap();
                }
            });
        }
    });
    let s = alloc.stats();
    assert_eq!(s.allocation.all().current, 0);
    assert_eq!(s.allocation.all().allocated, 1200);
    assert!(s.reserved_bytes.all().current > 0);
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
}

#[test]
fn expandable_segments_on_the_gpu() {
    let Some(d) = gpu("expandable_segments_on_the_gpu") else {
        return;
    };
    if !d.supports_vmm() {
        skip("expandable_segments_on_the_gpu", "GPU without VMM");
        return;
    }
    let (conf, _) = parse_pytorch("expandable_segments:True").unwrap();
    let alloc = CachingAllocator::new(conf, d).unwrap();
    let ptrs: Vec<u64> = (1..=6)
        .map(|i| alloc.malloc(i * 7 * MIB, StreamId::DEFAULT).unwrap())
        .collect();
    for &p in &ptrs {
        alloc.with_device(|d| roundtrip(d, p, 1024, 9));
    }
    let s = alloc.stats();
    assert!(s.num_device_alloc > 0 && s.segment.all().current == 0);
    for p in ptrs {
        alloc.free(p).unwrap();
    }
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
}

#[test]
fn cuda_malloc_async_backend_on_the_gpu() {
    let Some(d) = gpu("cuda_malloc_async_backend_on_the_gpu") else {
        return;
    };
    if !d.supports_pools() {
        skip("cuda_malloc_async_backend_on_the_gpu", "no memory pools");
        return;
    }
    let alloc = AsyncAllocator::new(&AllocConf::default(), DirectMode::StreamOrdered, d).unwrap();
    let p = alloc.malloc(5 * MIB + 3, StreamId::DEFAULT).unwrap();
    alloc.record_stream(p, StreamId(2)).unwrap(); // the per-thread default stream
    let s = alloc.stats().unwrap();
    assert!(s.allocated_bytes.all().current as u64 >= 5 * MIB);
    alloc.free(p).unwrap();
    alloc.empty_cache().unwrap();
    let total = alloc.with_device(|d| d.mem_get_info()).unwrap().total;
    let e = alloc.malloc(total * 2, StreamId::DEFAULT).unwrap_err();
    assert!(e.to_string().contains("would exceed allowed memory"), "{e}");
}

/// `call` failed with a driver error naming it and a CUDA error code: on the simulated driver
/// exactly `code` (the real driver's code for that misuse), on a GPU any `CUDA_ERROR_*`.
fn assert_driver_error<T: std::fmt::Debug>(r: Result<T, DeviceError>, call: &str, code: &str) {
    match r {
        Err(DeviceError::Driver { call: c, message }) => {
            assert_eq!(c, call, "{message}");
            if on_simulated_driver() {
                assert_eq!(message, code, "{call}");
            } else {
                assert!(message.starts_with("CUDA_ERROR_"), "{call}: {message}");
            }
            let text = DeviceError::Driver { call: c, message }.to_string();
            assert!(
                text.starts_with(&format!("{call} failed: CUDA_ERROR_")),
                "{text}"
            );
        }
        other => panic!("{call}: expected a driver error, got {other:?}"),
    }
}

#[test]
fn driver_misuse_is_an_error_naming_the_call_and_the_code() {
    let Some(mut d) = gpu("driver_misuse_is_an_error_naming_the_call_and_the_code") else {
        return;
    };
    let before = d.mem_get_info().unwrap();
    let p = d.malloc(MIB).unwrap();
    d.free(p, MIB).unwrap();
    assert_driver_error(d.free(p, MIB), "cuMemFree", "CUDA_ERROR_INVALID_VALUE");
    if d.supports_vmm() {
        let g = d.granularity();
        // Wrong granularity: a size that is not a multiple of it.
        assert_driver_error(
            d.mem_create(g + 4096),
            "cuMemCreate",
            "CUDA_ERROR_INVALID_VALUE",
        );
        let base = d.address_reserve(4 * g).unwrap();
        let h = d.mem_create(g).unwrap();
        // A mapping that does not start on the granularity, one outside the reservation.
        let misaligned = d.mem_map(base + 4096, g, h);
        assert_driver_error(misaligned, "cuMemMap", "CUDA_ERROR_INVALID_VALUE");
        let outside = d.mem_map(base + 4 * g, g, h);
        assert_driver_error(outside, "cuMemMap", "CUDA_ERROR_INVALID_VALUE");
        d.mem_map(base, g, h).unwrap();
        // Unmapping a range that is not mapped; releasing twice; freeing with the wrong size.
        let unmapped = d.mem_unmap(base + g, g, h);
        assert_driver_error(unmapped, "cuMemUnmap", "CUDA_ERROR_INVALID_VALUE");
        d.mem_unmap(base, g, h).unwrap();
        d.mem_release(h, g).unwrap();
        assert_driver_error(
            d.mem_release(h, g),
            "cuMemRelease",
            "CUDA_ERROR_INVALID_VALUE",
        );
        let wrong_size = d.address_free(base, g);
        assert_driver_error(wrong_size, "cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE");
        d.address_free(base, 4 * g).unwrap();
    }
    if on_simulated_driver() {
        // Handles the driver never gave out (on a GPU these would be wild pointers).
        let bogus = EventId(0x1234);
        assert_driver_error(
            d.query_event(bogus),
            "cuEventQuery",
            "CUDA_ERROR_INVALID_HANDLE",
        );
        let sync = d.synchronize_event(bogus);
        assert_driver_error(sync, "cuEventSynchronize", "CUDA_ERROR_INVALID_HANDLE");
    }
    // After all that the device works, and nothing leaked.
    let p = d.malloc(3 * MIB).unwrap();
    roundtrip(&mut d, p, 4096, 5);
    d.free(p, 3 * MIB).unwrap();
    let after = d.mem_get_info().unwrap();
    assert!(after.free + 64 * MIB >= before.free, "{before:?} {after:?}");
    if on_simulated_driver() {
        assert_eq!(after, before, "the simulated driver's memory is all back");
    }
}

/// Every test of this file again, in a child process whose cudarc loads the capture runtime's
/// simulated driver (built by `python/cachalot/capture/build.py`), with
/// `CACHALOT_REQUIRE_GPU=1`: none may skip, and the device must be the simulated one.
#[test]
fn every_test_on_the_simulated_driver() {
    if on_simulated_driver() {
        return; // the child
    }
    let driver = match cachalot_testkit::simulated_driver() {
        Ok(d) => d,
        Err(why) => return skip("every_test_on_the_simulated_driver", why),
    };
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--test-threads=1", "--nocapture"])
        .envs(driver.env())
        .env("CACHALOT_REQUIRE_GPU", "1")
        .env("FAKE_CUDA_CAPACITY", "8G");
    for v in [
        "FAKE_CUDA_LOG",
        "FAKE_CUDA_DEVICE_NAME",
        "FAKE_CUDA_DEVICE_COUNT",
        "FAKE_CUDA_TOTAL",
    ] {
        child.env_remove(v);
    }
    let out = child.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "on the simulated driver:\n{text}");
    assert!(
        text.contains("(fake_cudart)"),
        "not the simulated GPU:\n{text}"
    );
    assert!(!text.contains("SKIPPED"), "{text}");
    let tests = include_str!("gpu.rs").matches("#[test]").count() - 1; // less the string here
    assert!(
        text.contains(&format!("test result: ok. {tests} passed")),
        "expected {tests} passed:\n{text}"
    );
}
