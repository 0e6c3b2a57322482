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

/// Free-set key within one stream: (size, segment creation number, address).
pub(crate) type SizeKey = (u64, u32, u64);
/// Unmapped-set key: (stream, address).
pub(crate) type AddrKey = (u64, u64);

/// The free blocks of one stream, best fit first.
type StreamSet = BTreeMap<SizeKey, BlockId>;

/// The free blocks of one pool kind.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Free, mapped blocks: one set per stream, by stream (few streams, so a sorted vector).
    /// Together they are torch's single set ordered by (stream, size, counter, address); split
    /// by stream, the keys are a quarter smaller and a lookup never crosses streams.
    streams: Vec<(u64, StreamSet)>,
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
            streams: Vec::new(),
            unmapped: BTreeMap::new(),
            kind,
            get_free_blocks_call_count: 0,
        }
    }

    #[inline]
    fn set(&self, stream: StreamId) -> Option<&StreamSet> {
        self.streams
            .iter()
            .find(|(s, _)| *s == stream.0)
            .map(|(_, set)| set)
    }

    #[inline]
    fn set_mut(&mut self, stream: StreamId) -> &mut StreamSet {
        let i = match self.streams.iter().position(|(s, _)| *s >= stream.0) {
            Some(i) if self.streams[i].0 == stream.0 => i,
            Some(i) => {
                self.streams.insert(i, (stream.0, StreamSet::new()));
                i
            }
            None => {
                self.streams.push((stream.0, StreamSet::new()));
                self.streams.len() - 1
            }
        };
        &mut self.streams[i].1
    }

    /// Inserts a free block, stamping its GC age base (`insert_into_blocks`).
    #[inline]
    pub fn insert(&mut self, id: BlockId, b: &mut Block) {
        b.gc_count_base = self.get_free_blocks_call_count;
        let old = self.set_mut(b.stream).insert(size_key(b), id);
        debug_assert!(old.is_none(), "block already in the free set");
    }

    /// Removes a free block; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, b: &Block) -> bool {
        self.set_mut(b.stream).remove(&size_key(b)).is_some()
    }

    /// The free blocks of `stream` of at least `size` bytes, best fit first (`lower_bound`,
    /// limited to the stream).
    #[inline]
    pub fn at_or_after(
        &self,
        stream: StreamId,
        size: u64,
    ) -> impl Iterator<Item = (&SizeKey, &BlockId)> + '_ {
        self.set(stream)
            .into_iter()
            .flat_map(move |set| set.range((Bound::Included((size, 0, 0)), Bound::Unbounded)))
    }

    /// The free blocks of `stream` smaller than `size` bytes, largest first.
    #[inline]
    pub fn before(
        &self,
        stream: StreamId,
        size: u64,
    ) -> impl Iterator<Item = (&SizeKey, &BlockId)> + '_ {
        self.set(stream).into_iter().flat_map(move |set| {
            set.range((Bound::Unbounded, Bound::Excluded((size, 0, 0))))
                .rev()
        })
    }

    /// Every free block, in torch's set order: by stream, then best fit.
    pub fn free_ids(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.streams
            .iter()
            .flat_map(|(_, set)| set.values().copied())
    }

    /// Every free block with its stream and key, in set order (for the invariant checker).
    pub fn free_entries(&self) -> impl Iterator<Item = (u64, SizeKey, BlockId)> + '_ {
        self.streams
            .iter()
            .flat_map(|(s, set)| set.iter().map(move |(&k, &id)| (*s, k, id)))
    }
}
