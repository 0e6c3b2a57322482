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

use cachalot_device::StreamId;

use crate::mempool::PoolRef;

/// Index of a block in the [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub(crate) u32);

/// Which pool a block belongs to (the default small or large pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, in 2 MiB segments.
    Small,
    /// Everything else.
    Large,
}

impl PoolKind {
    /// Whether this is the small pool.
    #[inline]
    pub fn is_small(self) -> bool {
        self == PoolKind::Small
    }
}

/// Sentinel for "no expandable segment".
pub(crate) const NOT_EXPANDABLE: u32 = u32::MAX;

/// One contiguous piece of a segment.
#[derive(Clone, Debug)]
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
    /// Streams recorded with `record_stream` since the allocation.
    pub stream_uses: Vec<StreamId>,
    /// The pool's search counter when the block last entered the free set (GC age base).
    pub gc_count_base: u64,
    /// Index of the owning expandable segment, or [`NOT_EXPANDABLE`].
    pub expandable: u32,
    /// Creation number of the segment the block belongs to (torch's
    /// `registration_counter`): every piece of a segment shares it. The free set orders
    /// equal-sized blocks by it before their address, so older segments are reused first.
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
            stream_uses: Vec::new(),
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

/// Storage for blocks, with recycling of freed slots.
#[derive(Default, Debug)]
pub(crate) struct Arena {
    slots: Vec<Block>,
    vacant: Vec<u32>,
}

impl Arena {
    /// Stores a block and returns its id.
    #[inline]
    pub fn insert(&mut self, b: Block) -> BlockId {
        if let Some(i) = self.vacant.pop() {
            self.slots[i as usize] = b;
            BlockId(i)
        } else {
            self.slots.push(b);
            BlockId((self.slots.len() - 1) as u32)
        }
    }
    /// Forgets a block; its id may be reused.
    #[inline]
    pub fn remove(&mut self, id: BlockId) {
        debug_assert!(!self.vacant.contains(&id.0), "block removed twice");
        self.slots[id.0 as usize].size = 0;
        self.vacant.push(id.0);
    }
    /// The ids of all live blocks.
    pub fn live_ids(&self) -> Vec<BlockId> {
        let vacant: rustc_hash::FxHashSet<u32> = self.vacant.iter().copied().collect();
        (0..self.slots.len() as u32)
            .filter(|i| !vacant.contains(i))
            .map(BlockId)
            .collect()
    }
}

impl std::ops::Index<BlockId> for Arena {
    type Output = Block;
    #[inline]
    fn index(&self, id: BlockId) -> &Block {
        &self.slots[id.0 as usize]
    }
}

impl std::ops::IndexMut<BlockId> for Arena {
    #[inline]
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.slots[id.0 as usize]
    }
}
