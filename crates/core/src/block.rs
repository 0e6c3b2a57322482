//! Blocks: the pieces a segment is cut into, kept in an arena and linked by index.
//!
//! ```text
//!   segment (one cudaMalloc, or one expandable reservation)
//!   ┌──────────────┬───────────┬──────────────────────┐
//!   │ block (alloc)│ block free│ block (alloc)        │
//!   └──────────────┴───────────┴──────────────────────┘
//!        prev ◄──────── ● ────────► next
//! ```
//!
//! - A block with neither `prev` nor `next` *is* a whole segment ("not split").
//! - Blocks of one segment tile it: `b.next.ptr == b.ptr + b.size`.
//! - A block is in its pool's free set iff it is mapped, not allocated, has no pending events
//!   and no recorded stream uses. Unmapped blocks (the not-yet-mapped part of an expandable
//!   segment) are in the pool's unmapped set instead.
//! - Links are [`BlockId`] indices into the [`Arena`], never pointers.
//! - A block is plain data (72 bytes, no heap part): the streams `record_stream` names for it
//!   are kept beside the arena (`State::stream_uses`), as few blocks ever have any.

use std::num::NonZeroU32;

use cachalot_device::StreamId;

pub use crate::pool_id::PoolKind;
use crate::pool_id::PoolRef;

/// Index of a block in the [`Arena`]. Never 0 (the arena's slot 0 holds no block), so an
/// `Option<BlockId>` link takes 4 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(NonZeroU32);

impl BlockId {
    /// The block in slot `i` (`None` for slot 0, which holds no block).
    #[inline]
    pub(crate) fn new(i: u32) -> Option<Self> {
        NonZeroU32::new(i).map(BlockId)
    }

    #[inline]
    fn slot(self) -> usize {
        self.0.get() as usize
    }
}

/// Sentinel for "no expandable segment".
pub(crate) const NOT_EXPANDABLE: u32 = u32::MAX;

/// One contiguous piece of a segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    /// Device address of the first byte.
    pub ptr: u64,
    /// Bytes covered.
    pub size: u64,
    /// The unrounded size of the current (or last) allocation; 0 if never allocated.
    pub requested_size: u64,
    /// The stream the segment was allocated for; only requests on it may reuse the block.
    pub stream: StreamId,
    /// The pool the segment belongs to: small or large, default or private.
    pub pool: PoolRef,
    /// Handed out to a user.
    pub allocated: bool,
    /// False only for the unmapped parts of an expandable segment.
    pub mapped: bool,
    /// The neighbour at lower addresses in the same segment.
    pub prev: Option<BlockId>,
    /// The neighbour at higher addresses in the same segment.
    pub next: Option<BlockId>,
    /// Outstanding events recorded on other streams; reusable only at 0.
    pub event_count: u32,
    /// Whether `record_stream` named other streams since the allocation (they are in
    /// `State::stream_uses`); only an allocated block has any.
    pub has_stream_uses: bool,
    /// The pool's search counter when the block last entered the free set (GC age base).
    pub gc_count_base: u64,
    /// Index of the owning expandable segment, or [`NOT_EXPANDABLE`].
    pub expandable: u32,
    /// Creation number of the segment the block belongs to (torch's
    /// `registration_counter`): every piece of a segment shares it. The free set orders
    /// equal-sized blocks by it before their address, so older segments are reused first.
    /// Torch 2.12 numbers each block as it is made instead (`State::piece_number`).
    pub segment_id: u32,
}

impl Block {
    /// A free, mapped, unlinked block of the segment numbered `segment_id`, never handed out,
    /// not part of an expandable segment: what every block starts from.
    #[inline]
    pub fn fresh(ptr: u64, size: u64, stream: StreamId, pool: PoolRef, segment_id: u32) -> Self {
        Block {
            ptr,
            size,
            requested_size: 0,
            stream,
            pool,
            allocated: false,
            mapped: true,
            prev: None,
            next: None,
            event_count: 0,
            has_stream_uses: false,
            gc_count_base: 0,
            expandable: NOT_EXPANDABLE,
            segment_id,
        }
    }

    /// Whether the block is part of a segment cut in several pieces.
    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
    /// Whether the block belongs to an expandable segment.
    #[inline]
    pub fn is_expandable(&self) -> bool {
        self.expandable != NOT_EXPANDABLE
    }
}

/// Storage for blocks, with recycling of freed slots. Slot 0 holds a placeholder that is
/// never a live block.
#[derive(Debug)]
pub(crate) struct Arena {
    slots: Vec<Block>,
    vacant: Vec<BlockId>,
}

impl Default for Arena {
    fn default() -> Self {
        let pool = PoolRef::default_pool(PoolKind::Large);
        let placeholder = Block::fresh(0, 0, StreamId::DEFAULT, pool, 0);
        Arena {
            slots: vec![placeholder],
            vacant: Vec::new(),
        }
    }
}

impl Arena {
    /// Stores a block and returns its id.
    #[inline]
    pub fn insert(&mut self, b: Block) -> BlockId {
        if let Some(id) = self.vacant.pop() {
            self.slots[id.slot()] = b;
            id
        } else {
            let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 blocks");
            self.slots.push(b);
            BlockId::new(i).expect("slot 0 is the placeholder")
        }
    }
    /// Forgets a block; its id may be reused.
    #[inline]
    pub fn remove(&mut self, id: BlockId) {
        debug_assert!(!self.vacant.contains(&id), "block removed twice");
        self.slots[id.slot()].size = 0;
        self.vacant.push(id);
    }
    /// The ids of all live blocks.
    pub fn live_ids(&self) -> Vec<BlockId> {
        let vacant: rustc_hash::FxHashSet<BlockId> = self.vacant.iter().copied().collect();
        (1..self.slots.len() as u32)
            .filter_map(BlockId::new)
            .filter(|id| !vacant.contains(id))
            .collect()
    }
}

impl std::ops::Index<BlockId> for Arena {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        &self.slots[id.slot()]
    }
}

impl std::ops::IndexMut<BlockId> for Arena {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.slots[id.slot()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block is plain data that fits in 72 bytes, and a link in 4.
    #[test]
    fn blocks_are_small() {
        assert_eq!(std::mem::size_of::<Option<BlockId>>(), 4);
        assert!(
            std::mem::size_of::<Block>() <= 72,
            "{}",
            std::mem::size_of::<Block>()
        );
    }

    /// Ids are recycled, never 0, and `live_ids` lists exactly the blocks stored.
    #[test]
    fn arena_recycles_ids() {
        let mut a = Arena::default();
        let pool = PoolRef::default_pool(PoolKind::Small);
        let b = |ptr| Block::fresh(ptr, 1, StreamId::DEFAULT, pool, 0);
        let x = a.insert(b(10));
        let y = a.insert(b(20));
        assert_eq!(a.live_ids(), vec![x, y]);
        a.remove(x);
        assert_eq!(a.live_ids(), vec![y]);
        let z = a.insert(b(30));
        assert_eq!(z, x, "a vacant slot is reused");
        assert_eq!((a[z].ptr, a[y].ptr), (30, 20));
        assert_eq!(a.live_ids(), vec![x, y]);
    }
}
