//! Block pools: the free set ordered for best fit, and the unmapped set of expandable segments.
//!
//! The free set is ordered by (stream, size, segment creation number, address), as torch
//! 2.15's `BlockComparatorSizeCounterAddress`: the first block at or after `(stream, size)` is
//! the smallest block on that stream that fits; among equals, the one from the oldest segment,
//! then the lowest address. (Older torch versions broke ties by address alone; torch 2.15's
//! order was read off its binary and confirmed with the oracle.) The unmapped set is ordered
//! by (stream, address).

use std::collections::BTreeMap;
use std::ops::Bound;

use cachalot_device::StreamId;

use crate::block::{Block, BlockId, PoolKind};

/// Free-set key: (stream, size, segment creation number, address).
pub(crate) type SizeKey = (u64, u64, u32, u64);
/// Unmapped-set key: (stream, address).
pub(crate) type AddrKey = (u64, u64);

/// The free blocks of one pool kind.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Free, mapped blocks by (stream, size, address).
    pub blocks: BTreeMap<SizeKey, BlockId>,
    /// Unmapped blocks of expandable segments by (stream, address).
    pub unmapped: BTreeMap<AddrKey, BlockId>,
    /// Which pool this is.
    pub kind: PoolKind,
    /// Number of searches of this pool while GC is enabled: the GC clock.
    pub get_free_blocks_call_count: u64,
}

#[inline]
pub(crate) fn size_key(b: &Block) -> SizeKey {
    (b.stream.0, b.size, b.segment_id, b.ptr)
}

#[inline]
pub(crate) fn addr_key(b: &Block) -> AddrKey {
    (b.stream.0, b.ptr)
}

impl BlockPool {
    pub fn new(kind: PoolKind) -> Self {
        BlockPool {
            blocks: BTreeMap::new(),
            unmapped: BTreeMap::new(),
            kind,
            get_free_blocks_call_count: 0,
        }
    }

    /// Inserts a free block, stamping its GC age base (`insert_into_blocks`).
    #[inline]
    pub fn insert(&mut self, id: BlockId, b: &mut Block) {
        b.gc_count_base = self.get_free_blocks_call_count;
        let old = self.blocks.insert(size_key(b), id);
        debug_assert!(old.is_none(), "block already in the free set");
    }

    /// Removes a free block; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, b: &Block) -> bool {
        self.blocks.remove(&size_key(b)).is_some()
    }

    /// The free blocks at or after (stream, size, 0) in set order (`lower_bound`).
    #[inline]
    pub fn at_or_after(
        &self,
        stream: StreamId,
        size: u64,
    ) -> std::collections::btree_map::Range<'_, SizeKey, BlockId> {
        self.blocks
            .range((Bound::Included((stream.0, size, 0, 0)), Bound::Unbounded))
    }

    /// The free blocks strictly before (stream, size, 0), nearest first.
    #[inline]
    pub fn before(
        &self,
        stream: StreamId,
        size: u64,
    ) -> std::iter::Rev<std::collections::btree_map::Range<'_, SizeKey, BlockId>> {
        self.blocks
            .range((Bound::Unbounded, Bound::Excluded((stream.0, size, 0, 0))))
            .rev()
    }
}
