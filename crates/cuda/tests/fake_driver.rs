//! `CudaDevice` against a fake CUDA driver (`tests/fake/libcuda.c`), so that the FFI —
//! symbols, arguments, structure layouts, result codes, context push/pop from threads — is
//! exercised on machines without a GPU.
//!
//! The fake is compiled with gcc and loaded by cudarc through `LD_LIBRARY_PATH` in a child
//! process (the driver library is loaded once per process). Skipped, with the reason printed,
//! without gcc or off Linux.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use cachalot_core::async_backend::{AsyncAllocator, DirectMode};
use cachalot_core::config::parse_pytorch;
use cachalot_core::{AllocConf, CachingAllocator};
use cachalot_cuda::{CudaDevice, CudaInitError, device_count};
use cachalot_device::{Device, DeviceError, StreamId};

const MIB: u64 = 1 << 20;
const CHILD: &str = "CACHALOT_FAKE_CUDA_CHILD";

fn skip(why: &str) {
    // Straight to stderr: libtest captures `eprintln!`.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED cuda_device_against_a_fake_driver: {why}"
    );
}

#[test]
fn cuda_device_against_a_fake_driver() {
    if !cfg!(target_os = "linux") {
        return skip("the fake driver is built for Linux");
    }
    if cachalot_testkit::compiler("gcc").is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-cuda-driver");
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/libcuda.c");
    let broken = dir.join("without-name");
    std::fs::create_dir_all(&broken).unwrap();
    for (lib, define) in [
        (dir.join("libcuda.so"), None),
        (broken.join("libcuda.so"), Some("-DFAKE_CUDA_WITHOUT_NAME")),
    ] {
        let mut gcc = Command::new("gcc");
        gcc.args([
            "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread", "-o",
        ])
        .arg(lib)
        .args(define)
        .arg(&src);
        cachalot_testkit::succeed(&mut gcc);
    }
    for (test, extra, libdir) in [
        ("fake_driver_child", None, &dir),
        ("fake_driver_without_device", Some("1"), &dir),
        ("fake_driver_missing_a_symbol", None, &broken),
    ] {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env("LD_LIBRARY_PATH", libdir)
            .env(CHILD, "1");
        match extra {
            Some(v) => cmd.env("FAKE_CUDA_NO_DEVICE", v),
            None => cmd.env_remove("FAKE_CUDA_NO_DEVICE"),
        };
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{test} failed:\n{text}");
        assert!(text.contains("1 passed"), "{test} did not run:\n{text}");
    }
}

fn in_child() -> bool {
    std::env::var(CHILD).as_deref() == Ok("1")
}

fn roundtrip(d: &mut CudaDevice, ptr: u64, n: usize) {
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 256) as u8).collect();
    d.copy_to_device(ptr, &data).unwrap();
    let mut back = vec![0; n];
    d.copy_from_device(ptr, &mut back).unwrap();
    assert_eq!(back, data);
}

/// Runs only inside the child process that loads the fake driver.
#[test]
fn fake_driver_child() {
    if !in_child() {
        return;
    }
    assert!(cachalot_cuda::driver_available());
    assert_eq!(device_count().unwrap(), 1);
    assert!(matches!(
        CudaDevice::new(1),
        Err(CudaInitError::NoSuchDevice {
            ordinal: 1,
            count: 1
        })
    ));
    let mut d = CudaDevice::new(0).unwrap();
    assert_eq!(d.name(), "Fake GPU (cachalot test driver)");
    assert!(d.supports_vmm() && d.supports_pools());
    assert_eq!(d.granularity(), 2 * MIB);

    // Memory, copies (bounds-checked), and the error kinds.
    let info = d.mem_get_info().unwrap();
    assert_eq!(info.total, 1 << 30);
    let p = d.malloc(MIB).unwrap();
    roundtrip(&mut d, p, 4096);
    assert!(d.copy_from_device(p + MIB - 1, &mut [0; 2]).is_err());
    d.free(p, MIB).unwrap();
    assert_eq!(
        d.free(p, MIB),
        Err(DeviceError::Driver {
            call: "cuMemFree",
            message: "CUDA_ERROR_INVALID_VALUE".into()
        })
    );
    assert_eq!(d.malloc(2 << 30), Err(DeviceError::OutOfMemory));

    // Events: not ready at the first query, then done; recycled.
    let e = d.record_event(StreamId(0x77)).unwrap();
    assert!(!d.query_event(e).unwrap());
    assert!(d.query_event(e).unwrap());
    let e2 = d.record_event(StreamId::DEFAULT).unwrap();
    assert_eq!(e2, e, "a consumed event is reused");
    d.synchronize_event(e2).unwrap();
    d.synchronize_stream(StreamId::DEFAULT).unwrap();

    // VMM: the structures reach the driver with device 0 and read/write access.
    let base = d.address_reserve(8 * MIB).unwrap();
    let h = d.mem_create(2 * MIB).unwrap();
    d.mem_map(base, 2 * MIB, h).unwrap();
    roundtrip(&mut d, base + 100, 1000);
    d.mem_unmap(base, 2 * MIB, h).unwrap();
    d.mem_release(h, 2 * MIB).unwrap();
    assert!(matches!(
        d.mem_release(h, 2 * MIB),
        Err(DeviceError::Driver {
            call: "cuMemRelease",
            ..
        })
    ));
    d.address_free(base, 8 * MIB).unwrap();

    // The pool: configured as torch does before the first allocation (the fake refuses
    // otherwise), keeps freed memory until trimmed.
    let a = d.malloc_async(3 * MIB, StreamId(5)).unwrap();
    let b = d.malloc_async(MIB, StreamId(5)).unwrap();
    d.free_async(a, 3 * MIB, StreamId(5), &[]).unwrap();
    d.free_async(b, MIB, StreamId(5), &[StreamId(6), StreamId(7)])
        .unwrap();
    let u = d.pool_usage().unwrap();
    assert_eq!((u.used_current, u.used_high), (0, 4 * MIB));
    assert_eq!((u.reserved_current, u.reserved_high), (4 * MIB, 4 * MIB));
    d.trim(0).unwrap();
    d.reset_pool_peaks().unwrap();
    let u = d.pool_usage().unwrap();
    assert_eq!(
        (u.reserved_current, u.reserved_high, u.used_high),
        (0, 0, 0)
    );
    assert_eq!(d.mem_get_info().unwrap().free, 1 << 30, "nothing leaked");
    drop(d);

    // The caching allocator on the "GPU", from threads that have no context of their own.
    let alloc = CachingAllocator::new(AllocConf::default(), CudaDevice::new(0).unwrap()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let alloc = &alloc;
            s.spawn(move || {
                for i in 0..200u64 {
                    let p = alloc
                        .malloc(512 + (i * 7919 + t) % (4 * MIB), StreamId(t))
                        .unwrap();
                    alloc.record_stream(p, StreamId(9)).unwrap();
                    alloc.free(p).unwrap();
                }
            });
        }
    });
    assert_eq!(alloc.stats().allocation.all().allocated, 800);
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);

    // Expandable segments map and unmap real (fake) pages.
    let (conf, _) = parse_pytorch("expandable_segments:True").unwrap();
    let alloc = CachingAllocator::new(conf, CudaDevice::new(0).unwrap()).unwrap();
    let p = alloc.malloc(30 * MIB, StreamId::DEFAULT).unwrap();
    alloc.with_device(|d| roundtrip(d, p + 25 * MIB, 4096));
    alloc.free(p).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.all().current, 0);
    let left = alloc.with_device(|d| d.mem_get_info()).unwrap();
    assert_eq!(left.free, left.total, "every page was released");

    // backend:cudaMallocAsync end to end, with torch's out-of-memory message.
    let alloc = AsyncAllocator::new(
        &AllocConf::default(),
        DirectMode::StreamOrdered,
        CudaDevice::new(0).unwrap(),
    )
    .unwrap();
    let p = alloc.malloc(100 * MIB, StreamId(3)).unwrap();
    alloc.record_stream(p, StreamId(4)).unwrap();
    assert_eq!(
        alloc.stats().unwrap().reserved_bytes.all().current,
        100 << 20
    );
    let e = alloc.malloc(2 << 30, StreamId(3)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("Allocation on device 0 would exceed"),
        "{e}"
    );
    alloc.free(p).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().unwrap().reserved_bytes.all().current, 0);
}

/// Runs only inside the child whose fake driver reports no device.
#[test]
fn fake_driver_without_device() {
    if !in_child() || std::env::var("FAKE_CUDA_NO_DEVICE").is_err() {
        return;
    }
    match CudaDevice::new(0) {
        Err(CudaInitError::Driver(DeviceError::Driver { call, message })) => {
            assert_eq!((call, message.as_str()), ("cuInit", "CUDA_ERROR_NO_DEVICE"));
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a device without a GPU"),
    }
    let e = CudaDevice::new(0).err().unwrap();
    assert_eq!(
        e.to_string(),
        "CUDA driver found, but cuInit failed: CUDA_ERROR_NO_DEVICE"
    );
}

/// Runs only inside the child whose fake driver lacks `cuDeviceGetName`: opening the device
/// is one error naming the symbol (checked when opened, not a panic at the first use), and the
/// same on every later try.
#[test]
fn fake_driver_missing_a_symbol() {
    if !in_child() || std::env::var("LD_LIBRARY_PATH").is_ok_and(|p| !p.ends_with("without-name")) {
        return;
    }
    for _ in 0..2 {
        let e = CudaDevice::new(0)
            .err()
            .expect("a driver without cuDeviceGetName fails");
        assert_eq!(
            e,
            CudaInitError::MissingSymbols {
                missing: vec!["cuDeviceGetName"]
            }
        );
        assert!(
            e.to_string().contains("does not export cuDeviceGetName"),
            "{e}"
        );
    }
    assert!(matches!(
        device_count(),
        Err(CudaInitError::MissingSymbols { .. })
    ));
}

/// `SYMBOLS` lists every driver function the crate calls, so the open-time check is complete.
#[test]
fn every_driver_call_is_checked_at_open() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut called = std::collections::BTreeSet::new();
    for f in std::fs::read_dir(src).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        for (i, _) in text.match_indices("sys::cu") {
            let name: String = text[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != "culib" {
                called.insert(name); // culib() is cudarc's loader, not a driver function
            }
        }
    }
    let listed: std::collections::BTreeSet<String> = cachalot_cuda::SYMBOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(called, listed);
}
