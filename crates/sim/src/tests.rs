//! The oracle's address-policy checks (`address_policy_*` in its test suite), restated.

use super::*;

const BASE: u64 = 0x1000_0000_0000;

#[test]
fn first_fit_alignment_and_rounding() {
    let mut d = SimDevice::new(SimConfig::default());
    let a = d.malloc(1).unwrap();
    let b = d.malloc(1000).unwrap();
    let c = d.malloc(3 * MIB).unwrap();
    assert_eq!((a - BASE, b - BASE, c - BASE), (0, 0x200, 0x20_0000));
    d.free(a, 1).unwrap();
    assert_eq!(d.malloc(100).unwrap(), BASE);
}

#[test]
fn coalesced_frees_make_room_for_a_bigger_block() {
    let mut d = SimDevice::new(SimConfig::default());
    let p: Vec<u64> = (0..5).map(|_| d.malloc(2 * MIB).unwrap()).collect();
    for &q in &p[1..4] {
        d.free(q, 2 * MIB).unwrap();
    }
    let before = d.phys_used();
    let e = d.malloc(4 * MIB + 1).unwrap();
    assert_eq!(e - BASE, 0x20_0000);
    assert_eq!(d.phys_used() - before, 6 * MIB);
}

#[test]
fn capacity_is_checked_before_placement() {
    let mut d = SimDevice::new(SimConfig::with_capacity(4 * MIB));
    d.enable_log();
    assert!(d.malloc(2 * MIB).is_ok());
    assert_eq!(d.malloc(4 * MIB), Err(DeviceError::OutOfMemory));
    let last = *d.log().last().unwrap();
    assert_eq!(
        (last.op, last.ptr, last.result, last.phys_used),
        (Op::CudaMalloc, 0, 2, 2 * MIB)
    );
    assert_eq!(d.counters().cuda_malloc_failed, 1);
}

#[test]
fn unknown_free_is_an_error_not_a_panic() {
    let mut d = SimDevice::new(SimConfig::default());
    assert!(matches!(d.free(BASE, 1), Err(DeviceError::Driver { .. })));
}

#[test]
fn vmm_reservation_addresses_and_handles() {
    let mut d = SimDevice::new(SimConfig::with_capacity(GIB));
    let r1 = d.address_reserve(1160 * MIB).unwrap();
    let r2 = d.address_reserve(1152 * MIB).unwrap();
    assert_eq!(r1, 0x2000_0000_0000);
    assert_eq!(r2, 0x2000_4880_0000);
    let h1 = d.mem_create(20 * MIB).unwrap();
    let h2 = d.mem_create(20 * MIB).unwrap();
    assert_eq!((h1.0, h2.0), (1, 2));
    d.mem_map(r1, 20 * MIB, h1).unwrap();
    assert_eq!(d.phys_used(), 40 * MIB);
    // Released but still mapped: still charged.
    d.mem_release(h1, 20 * MIB).unwrap();
    assert_eq!(d.phys_used(), 40 * MIB);
    d.mem_unmap(r1, 20 * MIB, h1).unwrap();
    assert_eq!(d.phys_used(), 20 * MIB);
    assert_eq!(
        d.mem_create(2 * MIB).unwrap().0,
        3,
        "handle ids are never reused"
    );
}

/// Issue #10, crash 2: `round_up(u64::MAX, 2 MiB)` wrapped to a charge of 0, so the device
/// handed out an address twice. A charge past 64 bits now simply does not fit.
#[test]
fn sizes_whose_charge_overflows_never_alias() {
    let mut d = SimDevice::new(SimConfig::default());
    for size in [u64::MAX, u64::MAX - 511, u64::MAX - 2 * MIB + 2] {
        assert_eq!(d.malloc(size), Err(DeviceError::OutOfMemory));
        assert_eq!(
            d.malloc_async(size, StreamId::DEFAULT),
            Err(DeviceError::OutOfMemory)
        );
    }
    assert_eq!(d.phys_used(), 0);
    let a = d.malloc(1000).unwrap();
    let b = d.malloc(1000).unwrap();
    assert_ne!(a, b);
}

/// Issue #10, crash 6: `8 * capacity` and `base + range` overflowed for capacities of 2^61
/// bytes and more (a panic with overflow checks). The fake's own arithmetic is modulo 2^64,
/// which is kept where it stays inside the address space.
#[test]
fn any_capacity_builds_a_device() {
    for capacity in [16 << 40, 1 << 61, (1 << 61) + (1 << 40), 1 << 63, u64::MAX] {
        let mut d = SimDevice::new(SimConfig::with_capacity(capacity));
        let a = d.malloc(3 * MIB).unwrap();
        assert_eq!(a, BASE, "capacity {capacity}");
        let r = d.address_reserve(64 * MIB).unwrap();
        assert!(r >= 0x2000_0000_0000 && r.checked_add(64 * MIB).is_some());
        assert_eq!(d.mem_get_info().unwrap().total, capacity);
    }
    let mut d = SimDevice::new(SimConfig {
        va_base: u64::MAX - 5,
        ..SimConfig::default()
    });
    let a = d.malloc(1000).unwrap();
    assert!(a.checked_add(1000).is_some());
    let r = d.address_reserve(64 * MIB).unwrap();
    assert!(r.checked_add(64 * MIB).is_some() && r > a);
}

/// Several simulated devices (the C library's `CACHALOT_DEVICE=sim`) never share an address:
/// with 16 TiB devices the 64 TiB spacing used before put device 2's `cudaMalloc` range on
/// device 0's virtual-memory range, and from 2^60 bytes device 0's range covered them all.
#[test]
fn devices_of_one_machine_share_no_address() {
    let tib = 1u64 << 40;
    let default: Vec<u64> = (0..3)
        .map(|i| SimConfig::device_of_many(i, 80 << 30).unwrap().va_base)
        .collect();
    assert_eq!(
        default,
        [BASE, BASE + 64 * tib, BASE + 128 * tib],
        "as before"
    );
    let capacities = [
        2 * MIB,
        80 << 30,
        4 * tib,
        5 * tib,
        16 * tib,
        1 << 59,
        1 << 60,
        (1 << 61) - 1,
        1 << 61,
        1 << 63,
        u64::MAX,
    ];
    for capacity in capacities {
        let mut end_before = 0;
        let mut fitted = 0;
        for i in 0..64 {
            let Some(config) = SimConfig::device_of_many(i, capacity) else {
                assert!(
                    (i + 1..64).all(|j| SimConfig::device_of_many(j, capacity).is_none()),
                    "capacity {capacity}: devices after a missing one are missing too"
                );
                break;
            };
            let [(b, e), (vb, ve)] = config.address_ranges();
            assert!(
                end_before <= b && b < e && e <= vb && vb < ve,
                "capacity {capacity}, device {i}: [{b:#x}, {e:#x}) [{vb:#x}, {ve:#x}) after {end_before:#x}"
            );
            end_before = ve;
            fitted += 1;
        }
        assert!(fitted >= 1, "capacity {capacity}: device 0 always fits");
    }
    assert!(SimConfig::device_of_many(1, 1 << 60).is_some());
    assert!(SimConfig::device_of_many(2, 1 << 60).is_none());
    assert_eq!(
        SimConfig::device_of_many(1, 16 * tib).unwrap().va_base,
        SimConfig::device_of_many(0, 16 * tib)
            .unwrap()
            .address_ranges()[1]
            .1,
        "right above device 0's virtual-memory range"
    );
}
