//! Block pools: the free set ordered for best fit, and the unmapped set of expandable segments.
//!
//! The free set is ordered by (stream, size, segment creation number, address), as torch
//! 2.15's `BlockComparatorSizeCounterAddress`: the first block at or after `(stream, size)` is
//! the smallest block on that stream that fits; among equals, the one from the oldest segment,
//! then the lowest address. (Older torch versions broke ties by address alone; torch 2.15's
//! order was read off its binary and confirmed with the oracle.) How it is stored is
//! [`crate::free_set`]'s business. The unmapped set is ordered by (stream, address).

use std::collections::BTreeMap;

use cachalot_device::StreamId;

use crate::block::{Block, BlockId, PoolKind};
use crate::free_set::{Backward, Forward, FreeSet};
pub(crate) use crate::free_set::{First, SizeKey, Slot};

/// Unmapped-set key: (stream, address).
pub(crate) type AddrKey = (u64, u64);

/// The free blocks of one pool kind.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Free, mapped blocks, in torch's order.
    free: FreeSet,
    /// Unmapped blocks of expandable segments by (stream, address).
    pub unmapped: BTreeMap<AddrKey, BlockId>,
    /// Which pool this is.
    pub kind: PoolKind,
    /// Number of searches of this pool while GC is enabled: the GC clock.
    pub get_free_blocks_call_count: u64,
}

#[inline]
pub(crate) fn size_key(b: &Block) -> SizeKey {
    (b.size, b.segment_id, b.ptr)
}

#[inline]
pub(crate) fn addr_key(b: &Block) -> AddrKey {
    (b.stream.0, b.ptr)
}

impl BlockPool {
    pub fn new(kind: PoolKind) -> Self {
        BlockPool {
            free: FreeSet::default(),
            unmapped: BTreeMap::new(),
            kind,
            get_free_blocks_call_count: 0,
        }
    }

    /// Inserts a free block, stamping its GC age base (`insert_into_blocks`).
    #[inline]
    pub fn insert(&mut self, id: BlockId, b: &mut Block) {
        b.gc_count_base = self.get_free_blocks_call_count;
        self.free.insert(b.stream.0, size_key(b), id);
    }

    /// Removes a free block; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, id: BlockId, b: &Block) -> bool {
        self.free.remove(b.stream.0, size_key(b), id)
    }

    /// Removes the block a search of this pool found at `slot`, with no second search; the
    /// pool must not have changed since the search.
    #[inline]
    pub fn remove_at(&mut self, slot: Slot) -> BlockId {
        self.free.remove_at(slot)
    }

    /// The free blocks of `stream` of at least `size` bytes, best fit first (`lower_bound`,
    /// limited to the stream), each with the slot that [`BlockPool::remove_at`] takes.
    #[inline]
    pub fn at_or_after(&self, stream: StreamId, size: u64) -> Forward<'_> {
        self.free.at_or_after(stream.0, size)
    }

    /// The best fit for `size` bytes on `stream`, removed if `accept` takes its block (see
    /// [`First`]).
    #[inline(always)]
    pub fn take_first_at_or_after(
        &mut self,
        stream: StreamId,
        size: u64,
        accept: impl FnOnce(BlockId) -> bool,
    ) -> Option<First> {
        self.free.take_first_at_or_after(stream.0, size, accept)
    }

    /// The free blocks of `stream` smaller than `size` bytes, largest first.
    #[inline]
    pub fn before(&self, stream: StreamId, size: u64) -> Backward<'_> {
        self.free.before(stream.0, size)
    }

    /// Every free block, in torch's set order: by stream, then best fit.
    pub fn free_ids(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.free.entries().map(|(_, _, id)| id)
    }

    /// Every free block with its stream and key, in set order (for the invariant checker).
    pub fn free_entries(&self) -> impl Iterator<Item = (u64, SizeKey, BlockId)> + '_ {
        self.free.entries()
    }
}
