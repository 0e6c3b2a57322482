//! A picture of the allocator's memory: segments and the blocks that tile them, as torch's
//! `memory_snapshot()` reports them.

use cachalot_device::{Device, StreamId};

use crate::block::BlockId;
use crate::history::{TraceAction, TraceEntry};
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
    /// The pool that owns it (`segment_pool_id`): `(0, 0)` for the default pools.
    pub pool_id: crate::pool_id::MempoolId,
    /// Blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

/// What `torch.cuda.memory._snapshot()` returns for one device: the recorded history and
/// the segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// The device ordinal.
    pub device: u32,
    /// All segments and their blocks, by address.
    pub segments: Vec<SegmentInfo>,
    /// The recorded history, oldest first (empty when recording is off). As in torch, it is
    /// copied before the snapshot's own `snapshot` entry is recorded, so that entry appears
    /// only in the next snapshot.
    pub trace: Vec<TraceEntry>,
}

impl<D: Device> State<D> {
    /// torch's `snapshot()`: the segments, then a `snapshot` history entry (size = active
    /// bytes) when recording.
    pub fn snapshot_segments(&mut self) -> Vec<SegmentInfo> {
        let segments = self.segments();
        if self.history.is_some() {
            let active: u64 = segments.iter().map(|s| s.active_size).sum();
            self.record(TraceAction::Snapshot, 0, active, StreamId(0));
        }
        segments
    }

    /// torch's `NativeCachingAllocator::snapshot`: the history first, then the segments.
    pub fn memory_snapshot(&mut self) -> MemorySnapshot {
        let trace = self
            .history
            .as_ref()
            .map(|h| h.entries().copied().collect())
            .unwrap_or_default();
        MemorySnapshot {
            device: self.device_index,
            segments: self.snapshot_segments(),
            trace,
        }
    }

    /// All segments, sorted by address.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let mut heads: Vec<BlockId> = Vec::new();
        let private = self.private.live().flat_map(|(_, p)| [&p.small, &p.large]);
        for pool in [&self.small, &self.large].into_iter().chain(private) {
            heads.extend(pool.free_ids());
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
        self.describe_segments(heads)
    }

    /// The segments of the private pool `owner` as torch's `snapshot(mempool_id)` lists them
    /// (`get_private_pool_head_blocks`): only those whose first block has no neighbour before
    /// it, so a mapped range of an expandable segment after an unmapped gap is left out.
    pub(crate) fn pool_segment_infos(&self, owner: u32) -> Vec<SegmentInfo> {
        let p = self.private.get(owner);
        let mut heads: Vec<BlockId> = [&p.small, &p.large]
            .into_iter()
            .flat_map(|set| set.free_ids())
            .chain(self.allocated.values().copied())
            .chain(
                self.events
                    .values()
                    .flat_map(|q| q.iter().map(|&(_, id)| id)),
            )
            .filter(|&id| self.blocks[id].pool.owner == owner)
            .collect();
        heads.retain(|&id| self.blocks[id].mapped && self.blocks[id].prev.is_none());
        self.describe_segments(heads)
    }

    /// One segment for each head block, sorted by address.
    fn describe_segments(&self, mut heads: Vec<BlockId>) -> Vec<SegmentInfo> {
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
                    pool_id: self.pool_id_of(head),
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

#[cfg(test)]
mod tests {
    use cachalot_device::StreamId;
    use cachalot_sim::{SimConfig, SimDevice};

    use crate::{AllocConf, CachingAllocator, TraceAction};

    #[test]
    fn a_snapshot_entry_shows_in_the_next_snapshot_as_in_torch() {
        let a = CachingAllocator::new(AllocConf::default(), SimDevice::new(SimConfig::default()))
            .unwrap();
        a.record_history(Some(100));
        let p = a.malloc(3 << 20, StreamId::DEFAULT).unwrap();
        let first = a.snapshot();
        let actions: Vec<TraceAction> = first.trace.iter().map(|e| e.action).collect();
        assert_eq!(actions, [TraceAction::SegmentAlloc, TraceAction::Alloc]);
        assert_eq!(first.segments.len(), 1);
        a.free(p).unwrap();
        let second = a.snapshot();
        let e = second.trace[2];
        assert_eq!(
            (e.action, e.addr, e.size),
            (TraceAction::Snapshot, 0, 3 << 20)
        );
        assert_eq!(second.trace.len(), 5); // + free_requested, free_completed
        // memory_snapshot() (segments) records one too; with history off nothing is kept.
        let _ = a.segments();
        assert_eq!(a.history().last().unwrap().size, 0);
        a.record_history(None);
        let _ = a.segments();
        assert!(a.history().is_empty());
    }
}
