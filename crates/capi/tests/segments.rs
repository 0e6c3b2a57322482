//! Builds `tests/c/segments.c` against the library and runs it on a simulated 64 MiB device:
//! cachalot as the allocator *of* a `torch.cuda.MemPool` hands out exact segments, counts what
//! is held, gives memory back at once, returns NULL on out of memory (torch retries and raises
//! its own error) and reports misuse without aborting. Skipped (with the reason printed)
//! without gcc. Real PyTorch drives the same functions in `tests/python/test_mempool.py`.

mod common;

#[test]
fn segments_for_a_mempool_through_the_c_library() {
    let Some(printed) = common::run_c_program("segments.c", &[("CACHALOT_SIM_CAPACITY", "64M")])
    else {
        return;
    };
    let (stdout, stderr) = (&printed.stdout, &printed.stderr);
    let got = printed.keys();
    let mib = |n: u64| (n << 20).to_string();
    let expected: Vec<(&str, String)> = vec![
        ("kind", "sim".into()),
        ("got_both", "1".into()),
        ("reserved", mib(22)),
        ("allocated", mib(22)),
        ("reserved_small", mib(2)),
        ("reserved_large", mib(20)),
        ("segments", "2".into()),
        ("inactive_split_bytes", "0".into()),
        ("device_allocs", "2".into()),
        ("caching_apart", "1".into()),
        // The caching allocator's own small segment, nothing of the MemPool's.
        ("caching_reserved", mib(2)),
        ("oom_null", "1".into()),
        (
            "oom_error",
            "device 0: a segment of 67108864 bytes: out of memory".into(),
        ),
        ("reserved_after_oom", mib(22)),
        ("reserved_after_free", mib(2)),
        // 40 MiB fit only because the freed 20 MiB went back to the device (64 MiB in all,
        // 2 MiB of it cachalot_malloc's cached segment).
        ("reuses_freed_memory", "1".into()),
        ("unknown_frees", "2".into()),
        ("bad_device_null", "1".into()),
        (
            "bad_device_error",
            "device index -1 out of range 0..64".into(),
        ),
        ("bad_device_stats_null", "1".into()),
        ("reserved_end", "0".into()),
        ("peak", mib(42)),
        ("device_frees", "3".into()),
        ("peak_after_reset", "0".into()),
    ];
    for (key, want) in &expected {
        assert_eq!(got.get(key).copied(), Some(&want[..]), "{key}\n{stdout}");
    }
    assert_eq!(got.len(), expected.len(), "{stdout}");
    // Out of memory is torch's to report: nothing printed for it. Misuse is printed.
    assert!(!stderr.contains("out of memory"), "{stderr}");
    assert_eq!(stderr.matches("ignored free of").count(), 2, "{stderr}");
    assert!(stderr.contains("not a segment of this library's MemPool allocator"));
    assert!(!stderr.contains("panicked"), "{stderr}");
}
