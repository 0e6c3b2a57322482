//! Tests of the private pools: lifecycle, routing, misuse.

use cachalot_device::StreamId;
use cachalot_sim::{SimConfig, SimDevice};

use super::*;
use crate::{AllocConf, CachingAllocator};

fn allocator(conf: AllocConf) -> CachingAllocator<SimDevice> {
    CachingAllocator::new(conf, SimDevice::new(SimConfig::with_capacity(1 << 30))).unwrap()
}

/// MemPool's life as torch's Python API drives it, with the invariants checked at each
/// step: own segments, isolation both ways, release only at empty_cache, then forgotten.
fn mempool_lifecycle(conf: AllocConf) {
    let a = allocator(conf);
    let id = MempoolId::mempool(1);
    let s = StreamId::DEFAULT;
    a.create_or_incref_pool(id).unwrap();
    a.begin_allocate_to_pool(id, StreamFilter::All).unwrap();
    let inside = a.malloc(5 << 20, s).unwrap();
    let small = a.malloc(1000, s).unwrap();
    a.check_invariants().unwrap();
    a.end_allocate_to_pool(id).unwrap();
    a.release_pool(id).unwrap();
    a.free(inside).unwrap();
    // A request outside the pool never takes the pool's free block.
    let outside = a.malloc(5 << 20, s).unwrap();
    assert_ne!(outside, inside);
    a.check_invariants().unwrap();
    assert_eq!(a.pool_segments(id).len(), 2);
    a.free(small).unwrap();
    a.free(outside).unwrap();
    // Still referenced (count 1): empty_cache keeps the pool's segments.
    a.empty_cache().unwrap();
    assert_eq!(a.pool_use_count(id), Some(1));
    assert!(!a.pool_segments(id).is_empty());
    a.release_pool(id).unwrap();
    a.check_invariants().unwrap();
    a.empty_cache_pool(id).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(
        a.pool_use_count(id),
        None,
        "forgotten once it has no segment"
    );
    assert_eq!(a.stats().reserved_bytes.all().current, 0);
    let per_pool = &a.stats().reserved_bytes_by_private_pools;
    assert_eq!(per_pool.len(), 1);
    assert_eq!(per_pool[0].1.all().current, 0);
    assert!(per_pool[0].1.all().peak > 0);
}

#[test]
fn mempool_lifecycle_classic() {
    mempool_lifecycle(AllocConf::default());
}

#[test]
fn mempool_lifecycle_expandable() {
    mempool_lifecycle(AllocConf {
        expandable_segments: true,
        ..AllocConf::default()
    });
}

#[test]
fn the_pool_begun_last_wins_and_filters_by_stream() {
    let a = allocator(AllocConf::default());
    let (p1, p2) = (MempoolId::mempool(1), MempoolId::graph(2));
    let (s5, s6) = (StreamId(5), StreamId(6));
    a.begin_allocate_to_pool(p1, StreamFilter::Stream(s5))
        .unwrap();
    a.begin_allocate_to_pool(p2, StreamFilter::All).unwrap();
    a.malloc(1000, s5).unwrap();
    a.end_allocate_to_pool(p2).unwrap();
    a.malloc(2000, s5).unwrap();
    a.malloc(3000, s6).unwrap();
    let alloc_in = |id| -> u64 { a.pool_segments(id).iter().map(|s| s.allocated_size).sum() };
    assert_eq!((alloc_in(p1), alloc_in(p2)), (2048, 1024));
    a.check_invariants().unwrap();
}

#[test]
fn misuse_gets_torchs_message_and_changes_nothing() {
    let a = allocator(AllocConf::default());
    let id = MempoolId::mempool(3);
    let err = a.end_allocate_to_pool(id).unwrap_err();
    assert_eq!(
        err.to_string(),
        "endAllocatePool: not currently recording to mempool_id"
    );
    assert!(matches!(
        a.release_pool(id),
        Err(AllocError::Pool(PoolError::NoSuchPool(_)))
    ));
    a.begin_allocate_to_pool(id, StreamFilter::All).unwrap();
    assert!(matches!(
        a.begin_allocate_to_pool(id, StreamFilter::All),
        Err(AllocError::Pool(PoolError::AlreadyRecording(_)))
    ));
    assert_eq!(
        a.pool_use_count(id),
        Some(1),
        "the failed begin took no reference"
    );
    a.end_allocate_to_pool(id).unwrap();
    a.release_pool(id).unwrap();
    assert!(matches!(
        a.release_pool(id),
        Err(AllocError::Pool(PoolError::ReleasedTooOften(_)))
    ));
    assert!(matches!(
        a.begin_allocate_to_pool(id, StreamFilter::All),
        Err(AllocError::Pool(PoolError::Released(_)))
    ));
    assert_eq!(a.pool_use_count(id), Some(0));
    a.check_invariants().unwrap();
}
