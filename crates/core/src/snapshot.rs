//! A picture of the allocator's memory: segments and the blocks that tile them, as torch's
//! `memory_snapshot()` reports them.

use cachalot_device::{Device, StreamId};

use crate::block::BlockId;
use crate::state::State;

/// The state of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out to a user.
    ActiveAllocated,
    /// Freed by the user, waiting on events of other streams.
    ActivePendingFree,
    /// Free, in the cache.
    Inactive,
}

impl BlockState {
    /// The name torch writes in snapshots.
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Unrounded size of the current or last allocation (0 if never allocated).
    pub requested_size: u64,
    /// Allocated, pending free, or free.
    pub state: BlockState,
}

/// One segment: a `cudaMalloc` region, or one contiguous mapped range of an expandable
/// segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Base address.
    pub address: u64,
    /// Sum of the block sizes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks (allocated or pending free).
    pub active_size: u64,
    /// Sum of requested sizes of active blocks.
    pub requested_size: u64,
    /// The stream it serves.
    pub stream: StreamId,
    /// Small or large pool.
    pub is_small: bool,
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// Blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

impl<D: Device> State<D> {
    /// All segments, sorted by address.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let mut heads: Vec<BlockId> = Vec::new();
        for pool in [&self.small, &self.large] {
            heads.extend(pool.blocks.values().copied());
            heads.extend(pool.unmapped.values().copied());
        }
        heads.extend(self.allocated.values().copied());
        heads.extend(
            self.events
                .values()
                .flat_map(|q| q.iter().map(|&(_, id)| id)),
        );
        // Keep the blocks that start a reported segment.
        heads.retain(|&id| {
            let b = &self.blocks[id];
            b.mapped && b.prev.is_none_or(|p| !self.blocks[p].mapped)
        });
        heads.sort_by_key(|&id| self.blocks[id].ptr);
        heads.dedup();
        heads
            .into_iter()
            .map(|head| {
                let h = &self.blocks[head];
                let mut seg = SegmentInfo {
                    address: h.ptr,
                    total_size: 0,
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: h.stream,
                    is_small: h.pool.is_small(),
                    is_expandable: h.is_expandable(),
                    blocks: Vec::new(),
                };
                let mut cur = Some(head);
                while let Some(id) = cur {
                    let b = &self.blocks[id];
                    if !b.mapped {
                        break;
                    }
                    let state = if b.allocated {
                        BlockState::ActiveAllocated
                    } else if b.event_count > 0 {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::Inactive
                    };
                    seg.total_size += b.size;
                    if state == BlockState::ActiveAllocated {
                        seg.allocated_size += b.size;
                    }
                    if state != BlockState::Inactive {
                        seg.active_size += b.size;
                        seg.requested_size += b.requested_size;
                    }
                    seg.blocks.push(BlockInfo {
                        address: b.ptr,
                        size: b.size,
                        requested_size: b.requested_size,
                        state,
                    });
                    cur = b.next;
                }
                seg
            })
            .collect()
    }
}
