//! Private memory pools: what `torch.cuda.MemPool` with `use_mem_pool`, and CUDA-graph capture,
//! allocate into (torch 2.15's `PrivatePool`, `graph_pools` and `captures_underway`).
//!
//! - A pool is named by a [`MempoolId`] and has its own small and large free sets and its own
//!   segments. Its blocks never serve requests routed elsewhere, and it never takes blocks of
//!   the default pools or of another pool.
//! - **Routing.** [`begin_allocate_to_pool`](crate::CachingAllocator::begin_allocate_to_pool)
//!   opens a pool for the streams its [`StreamFilter`] accepts. While several open pools accept
//!   a stream, the one begun last gets its allocations. A free returns a block to the pool it
//!   came from, open or not.
//! - **Use counts.** Creating a pool and beginning to allocate to it each add 1; `release_pool`
//!   subtracts 1. At 0 the pool becomes *freeable*: the next `empty_cache` (of the whole cache
//!   or of that pool) or out-of-memory retry returns its whole free segments to the device, and
//!   forgets the pool once it has no segment left. Until then nothing of a pool is freed.
//! - **Statistics.** The pool's blocks count in the ordinary statistics; torch also keeps the
//!   reserved bytes of each private pool (`reserved_bytes_by_private_pools`), from the pool's
//!   first segment on, also after the pool is forgotten.
//!
//! Misuse gets torch's own message ([`PoolError`]) and leaves the allocator as it was.

use std::sync::Arc;

use cachalot_device::{Device, StreamId};
use rustc_hash::FxHashMap;

use crate::block::{Arena, BlockId, PoolKind};
use crate::oom::AllocError;
use crate::pool::BlockPool;
pub(crate) use crate::pool_id::PoolRef;
pub use crate::pool_id::{MempoolId, PoolError};
use crate::ska_order::SkaOrder;
use crate::snapshot::SegmentInfo;
use crate::state::State;
use crate::stats::StatArray;
use crate::{CachingAllocator, size};

/// Which streams' allocations an open pool takes (the filter `beginAllocateToPool` gets).
#[derive(Clone)]
pub enum StreamFilter {
    /// Every stream (`use_mem_pool` without a stream check).
    All,
    /// One stream (a capture stream).
    Stream(StreamId),
    /// Any rule (a C caller's filter function).
    Custom(Arc<dyn Fn(StreamId) -> bool + Send + Sync>),
}

impl StreamFilter {
    fn accepts(&self, stream: StreamId) -> bool {
        match self {
            StreamFilter::All => true,
            StreamFilter::Stream(s) => *s == stream,
            StreamFilter::Custom(f) => f(stream),
        }
    }
}

impl std::fmt::Debug for StreamFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamFilter::All => f.write_str("All"),
            StreamFilter::Stream(s) => write!(f, "Stream({})", s.0),
            StreamFilter::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// One private pool (`PrivatePool`).
#[derive(Debug)]
pub(crate) struct PrivatePool {
    pub id: MempoolId,
    /// References: MemPool objects, open begins, graphs.
    pub use_count: i32,
    /// torch's `cudaMalloc_count`: +1 per segment allocated and per successful expandable
    /// growth (however many pages it mapped, none included), -1 per segment freed and per
    /// unmapped range. The pool is forgotten only at 0, so a pool whose pages were mapped in
    /// more steps than they were unmapped in is never forgotten, and one unmapped in more
    /// steps is forgotten with pages still mapped, as in torch.
    pub cuda_malloc_count: i64,
    /// Forgotten by torch while blocks of it were still alive (see `release_cached`): no id
    /// names it any more, and its free blocks are never reused or freed, as in torch.
    pub forgotten: bool,
    pub small: BlockPool,
    pub large: BlockPool,
    /// Blocks torch no longer has in any free set: the free blocks of the forgotten pools
    /// whose storage this pool took over (see [`PrivatePools::slot_for_new_pool`]). No
    /// search finds them and no `empty_cache` frees them, but a neighbour freed next to
    /// one absorbs it, as torch's merge does.
    pub ghost_small: BlockPool,
    pub ghost_large: BlockPool,
    /// Device bytes the blocks of this storage hold, small and large (what the invariant
    /// checker recounts). It equals the pool's `reserved_bytes_by_private_pools` entry until
    /// the storage passes to a new pool, which then holds bytes its own entry never counted.
    pub reserved: [i64; 2],
}

impl PrivatePool {
    fn new(id: MempoolId) -> Self {
        PrivatePool {
            id,
            use_count: 1,
            cuda_malloc_count: 0,
            forgotten: false,
            small: BlockPool::new(PoolKind::Small),
            large: BlockPool::new(PoolKind::Large),
            ghost_small: BlockPool::new(PoolKind::Small),
            ghost_large: BlockPool::new(PoolKind::Large),
            reserved: [0; 2],
        }
    }

    /// The ghost set of `kind`.
    pub fn ghost_mut(&mut self, kind: PoolKind) -> &mut BlockPool {
        match kind {
            PoolKind::Small => &mut self.ghost_small,
            PoolKind::Large => &mut self.ghost_large,
        }
    }
}

/// All private pools of one device, and the routing state.
#[derive(Debug, Default)]
pub(crate) struct PrivatePools {
    /// By owner number - 1; `None` once forgotten (numbers are not reused).
    pub pools: Vec<Option<PrivatePool>>,
    /// `graph_pools`: live pools by id.
    by_id: FxHashMap<MempoolId, u32>,
    /// `graph_pools_freeable`, in torch's iteration order.
    freeable: SkaOrder<MempoolId>,
    /// `captures_underway`: open pools, oldest first.
    captures: Vec<(MempoolId, StreamFilter)>,
    /// Owner numbers of forgotten pools, most recently forgotten last: the storage the next
    /// new pool takes (see [`PrivatePools::slot_for_new_pool`]).
    free_slots: Vec<u32>,
}

impl PrivatePools {
    /// The owner number of the live pool `id`.
    pub fn owner(&self, id: MempoolId) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// The live pool numbered `owner`.
    pub fn get(&self, owner: u32) -> &PrivatePool {
        self.pools[owner as usize - 1]
            .as_ref()
            .expect("a block points at a forgotten pool")
    }

    pub fn get_mut(&mut self, owner: u32) -> &mut PrivatePool {
        self.pools[owner as usize - 1]
            .as_mut()
            .expect("a block points at a forgotten pool")
    }

    /// The pools torch knows, with their owner numbers.
    pub fn live(&self) -> impl Iterator<Item = (u32, &PrivatePool)> + '_ {
        self.all().filter(|(_, p)| !p.forgotten)
    }

    /// Every pool that still has storage (those torch knows, and forgotten ones that still
    /// hold blocks).
    pub fn all(&self) -> impl Iterator<Item = (u32, &PrivatePool)> + '_ {
        self.pools
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i as u32 + 1, p)))
    }

    /// Whether any pool is open.
    #[inline]
    pub fn any_open(&self) -> bool {
        !self.captures.is_empty()
    }

    /// The ids of the open pools, oldest first.
    pub fn open_ids(&self) -> impl Iterator<Item = MempoolId> + '_ {
        self.captures.iter().map(|(id, _)| *id)
    }

    /// Whether the pool is in the freeable set.
    pub fn is_freeable(&self, id: MempoolId) -> bool {
        self.freeable.contains(id)
    }

    /// Forgets pool `id`; its storage goes too unless blocks still point at it.
    fn forget(&mut self, id: MempoolId, has_blocks: bool) {
        if let Some(owner) = self.by_id.remove(&id) {
            let slot = &mut self.pools[owner as usize - 1];
            match slot {
                Some(p) if has_blocks => p.forgotten = true,
                _ => *slot = None,
            }
            self.free_slots.push(owner);
        }
        self.freeable.remove(id);
    }

    /// The owner number a new pool gets, and the storage it takes over.
    ///
    /// torch deletes a forgotten `PrivatePool` even while blocks of it are alive; they keep
    /// pointing at its free sets. The heap hands that memory to the next `PrivatePool` torch
    /// makes (glibc reuses the most recently freed chunk of a size first), so a block of the
    /// old pool that is freed afterwards lands in the new pool's free sets: the new pool can
    /// reuse it, and frees it at its own `empty_cache`. The new pool takes the most recently
    /// forgotten pool's number, so its blocks are the new pool's; what the old pool still
    /// had in free sets, torch no longer finds there, so it becomes a ghost (observed with
    /// expandable segments, whose pools are forgotten with pages still mapped).
    fn slot_for_new_pool(&mut self, id: MempoolId, blocks: &mut Arena) -> u32 {
        let mut pool = PrivatePool::new(id);
        let Some(owner) = self.free_slots.pop() else {
            self.pools.push(Some(pool));
            return self.pools.len() as u32;
        };
        if let Some(old) = self.pools[owner as usize - 1].take() {
            pool.reserved = old.reserved;
            for set in [old.small, old.large, old.ghost_small, old.ghost_large] {
                let ghost = pool.ghost_mut(set.kind);
                for id in set.free_ids() {
                    ghost.insert(id, &mut blocks[id]);
                }
                ghost.unmapped.extend(set.unmapped);
            }
        }
        self.pools[owner as usize - 1] = Some(pool);
        owner
    }
}

impl<D: Device> State<D> {
    /// `create_or_incref_pool`.
    pub(crate) fn create_or_incref_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        match self.private.owner(id) {
            Some(owner) => {
                let pool = self.private.get_mut(owner);
                if pool.use_count <= 0 {
                    return Err(PoolError::Released(id));
                }
                pool.use_count += 1;
            }
            None => {
                let owner = self.private.slot_for_new_pool(id, &mut self.blocks);
                self.private.by_id.insert(id, owner);
            }
        }
        Ok(())
    }

    /// `beginAllocateToPool`: references the pool (creating it if needed) and routes the
    /// allocations `filter` accepts to it.
    pub(crate) fn begin_allocate_to_pool(
        &mut self,
        id: MempoolId,
        filter: StreamFilter,
    ) -> Result<(), PoolError> {
        if let Some(owner) = self.private.owner(id)
            && self.private.get(owner).use_count <= 0
        {
            return Err(PoolError::Released(id));
        }
        if self.private.open_ids().any(|open| open == id) {
            return Err(PoolError::AlreadyRecording(id));
        }
        self.create_or_incref_pool(id)?;
        self.private.captures.push((id, filter));
        Ok(())
    }

    /// `endAllocateToPool`: stops routing to the pool (its reference stays).
    pub(crate) fn end_allocate_to_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        let Some(i) = self.private.open_ids().position(|open| open == id) else {
            return Err(PoolError::NotRecording(id));
        };
        self.private.captures.remove(i);
        Ok(())
    }

    /// `releasePool`: drops one reference; at 0 the pool's memory may be freed.
    pub(crate) fn release_pool(&mut self, id: MempoolId) -> Result<(), PoolError> {
        let Some(owner) = self.private.owner(id) else {
            return Err(PoolError::NoSuchPool(id));
        };
        let pool = self.private.get_mut(owner);
        if pool.use_count <= 0 {
            return Err(PoolError::ReleasedTooOften(id));
        }
        pool.use_count -= 1;
        if pool.use_count == 0 {
            self.private.freeable.insert(id, &MempoolId::hash);
        }
        Ok(())
    }

    /// The pool a request of rounded `size` on `stream` goes to (`get_pool`).
    #[inline]
    pub(crate) fn route(&self, size: u64, stream: StreamId) -> PoolRef {
        let kind = if size::is_small(size) {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let owner = if self.private.any_open() {
            self.private
                .captures
                .iter()
                .rev()
                .find(|(_, f)| f.accepts(stream))
                .and_then(|(id, _)| self.private.owner(*id))
                .unwrap_or(0)
        } else {
            0
        };
        PoolRef { owner, kind }
    }

    /// The free sets of `pool`.
    #[inline]
    pub(crate) fn pool(&self, pool: PoolRef) -> &BlockPool {
        match (pool.owner, pool.kind) {
            (0, PoolKind::Small) => &self.small,
            (0, PoolKind::Large) => &self.large,
            (o, PoolKind::Small) => &self.private.get(o).small,
            (o, PoolKind::Large) => &self.private.get(o).large,
        }
    }

    /// The free sets of `pool`, mutable, with the block arena beside them.
    #[inline]
    pub(crate) fn pool_and_blocks(
        &mut self,
        pool: PoolRef,
    ) -> (&mut BlockPool, &crate::block::Arena) {
        let (set, blocks, _) = self.pool_blocks_conf(pool);
        (set, blocks)
    }

    /// The free sets of `pool`, mutable, with the block arena and the configuration.
    #[inline]
    pub(crate) fn pool_blocks_conf(
        &mut self,
        pool: PoolRef,
    ) -> (&mut BlockPool, &crate::block::Arena, &crate::AllocConf) {
        let set = match (pool.owner, pool.kind) {
            (0, PoolKind::Small) => &mut self.small,
            (0, PoolKind::Large) => &mut self.large,
            (o, PoolKind::Small) => &mut self.private.get_mut(o).small,
            (o, PoolKind::Large) => &mut self.private.get_mut(o).large,
        };
        (set, &self.blocks, &self.conf)
    }

    /// The free sets of `pool`, mutable.
    #[inline]
    pub(crate) fn pool_mut(&mut self, pool: PoolRef) -> &mut BlockPool {
        self.pool_and_blocks(pool).0
    }

    /// Counts a segment (or expandable growth) added to (`+1`) or taken from (`-1`) `pool`;
    /// torch's assertion when it would take one from a pool that counts none.
    pub(crate) fn pool_segment_count(
        &mut self,
        pool: PoolRef,
        delta: i64,
    ) -> Result<(), PoolError> {
        if pool.owner != 0 {
            let p = self.private.get_mut(pool.owner);
            if delta < 0 && p.cuda_malloc_count <= 0 {
                return Err(PoolError::UnmapUncounted(p.id));
            }
            p.cuda_malloc_count += delta;
        }
        Ok(())
    }

    /// Accounts for `bytes` of device memory added to (`increase`) or taken from `pool`, in
    /// the private pool's reserved statistics.
    pub(crate) fn pool_reserved(&mut self, pool: PoolRef, bytes: u64, increase: bool) {
        if pool.owner == 0 {
            return;
        }
        let p = self.private.get_mut(pool.owner);
        let held = &mut p.reserved[usize::from(!pool.is_small())];
        let delta = i64::try_from(bytes).unwrap_or(i64::MAX);
        *held = if increase {
            held.saturating_add(delta)
        } else {
            held.saturating_sub(delta)
        };
        let id = p.id;
        let stats = &mut self.stats.reserved_bytes_by_private_pools;
        let i = match stats.iter().position(|(k, _)| *k == id) {
            Some(i) => i,
            None => {
                stats.push((id, StatArray::default()));
                stats.len() - 1
            }
        };
        if increase {
            stats[i].1.increase(pool.is_small(), bytes);
        } else {
            stats[i].1.decrease(pool.is_small(), bytes);
        }
    }

    /// `release_cached_blocks(mempool_id)`: for the whole cache (`MempoolId::DEFAULT`), waits
    /// for every outstanding event and frees the default pools' whole free segments and those
    /// of every freeable pool; for one pool, does that for it alone if it is freeable (and
    /// nothing otherwise). A freeable pool left without segments is forgotten.
    pub(crate) fn release_cached(&mut self, id: MempoolId) -> Result<(), AllocError> {
        if id.is_default() {
            self.synchronize_and_free_events()?;
            self.release_blocks(PoolRef::default_pool(PoolKind::Large))?;
            self.release_blocks(PoolRef::default_pool(PoolKind::Small))?;
        }
        let freeable: Vec<MempoolId> = self.private.freeable.iter().collect();
        for pid in freeable {
            if !id.is_default() && pid != id {
                continue;
            }
            let Some(owner) = self.private.owner(pid) else {
                continue;
            };
            if !id.is_default() {
                self.synchronize_pool_events(owner)?;
            }
            self.release_blocks(PoolRef {
                owner,
                kind: PoolKind::Small,
            })?;
            self.release_blocks(PoolRef {
                owner,
                kind: PoolKind::Large,
            })?;
            // torch forgets the pool when its count is 0. A pool of expandable segments can
            // get there with pages still mapped (mapped in one step, unmapped in several):
            // torch then leaves the blocks pointing at the freed pool, so a block freed later
            // is never reused or returned. cachalot keeps such a pool's storage, unnamed, so
            // that it behaves the same without the dangling pointers.
            if self.private.get(owner).cuda_malloc_count == 0 {
                let has_blocks = self.pool_has_blocks(owner);
                self.private.forget(pid, has_blocks);
            }
        }
        Ok(())
    }

    /// `synchronize_and_free_events(pool)`: waits for the outstanding events of the blocks
    /// of one private pool only.
    fn synchronize_pool_events(&mut self, owner: u32) -> Result<(), AllocError> {
        self.stats.num_sync_all_streams += 1;
        for s in self.event_streams() {
            let Some(mut queue) = self.events.remove(&s) else {
                continue;
            };
            let mut kept = std::collections::VecDeque::new();
            while let Some((ev, id)) = queue.pop_front() {
                if self.blocks[id].pool.owner != owner {
                    kept.push_back((ev, id));
                    continue;
                }
                if let Err(e) = self.device.synchronize_event(ev) {
                    kept.push_back((ev, id));
                    kept.extend(queue);
                    self.put_back_events(s, kept);
                    return Err(e.into());
                }
                self.event_done(id);
            }
            self.put_back_events(s, kept);
        }
        Ok(())
    }

    /// Whether any block (mapped or not) belongs to the private pool `owner`.
    fn pool_has_blocks(&self, owner: u32) -> bool {
        let p = self.private.get(owner);
        let free = [&p.small, &p.large, &p.ghost_small, &p.ghost_large]
            .iter()
            .any(|set| set.free_ids().next().is_some() || !set.unmapped.is_empty());
        free || self
            .allocated
            .values()
            .chain(
                self.events
                    .values()
                    .flat_map(|q| q.iter().map(|(_, id)| id)),
            )
            .any(|&id| self.blocks[id].pool.owner == owner)
    }

    /// Takes a free block out of its pool's ghost sets (a merge absorbing it); returns
    /// whether it was there.
    pub(crate) fn remove_ghost(&mut self, id: BlockId) -> bool {
        let b = &self.blocks[id];
        if b.pool.owner == 0 {
            return false;
        }
        let ghost = self.private.get_mut(b.pool.owner).ghost_mut(b.pool.kind);
        if b.mapped {
            ghost.remove(id, b)
        } else {
            ghost.unmapped.remove(&crate::pool::addr_key(b)).is_some()
        }
    }

    /// Bytes in the free sets of all private pools (what torch's out-of-memory message calls
    /// "allocated in private pools").
    pub(crate) fn private_pool_cached(&self) -> u64 {
        self.private
            .live()
            .flat_map(|(_, p)| [&p.small, &p.large])
            .flat_map(|set| set.free_ids())
            .map(|id| self.blocks[id].size)
            .sum()
    }

    /// The id of the pool a block belongs to (`segment_pool_id`).
    pub(crate) fn pool_id_of(&self, id: BlockId) -> MempoolId {
        self.owner_id(self.blocks[id].pool.owner)
    }

    /// The id of the pool `owner` (a [`PoolRef::owner`]) names.
    pub(crate) fn owner_id(&self, owner: u32) -> MempoolId {
        match owner {
            0 => MempoolId::DEFAULT,
            o => self.private.get(o).id,
        }
    }
}

/// What one private pool holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// Its id.
    pub id: MempoolId,
    /// `getPoolUseCount`.
    pub use_count: i32,
    /// Whether its count reached 0 (its free memory goes at the next `empty_cache`).
    pub freeable: bool,
    /// Whether allocations are being routed to it.
    pub open: bool,
}

impl<D: Device> CachingAllocator<D> {
    /// `createOrIncrefPool`: makes pool `id` with one reference, or adds one to it.
    pub fn create_or_incref_pool(&self, id: MempoolId) -> Result<(), AllocError> {
        self.checked(|s| s.create_or_incref_pool(id).map_err(AllocError::from))
    }

    /// `beginAllocateToPool`: routes the allocations on the streams `filter` accepts to pool
    /// `id` (made if missing), holding a reference, until [`Self::end_allocate_to_pool`].
    pub fn begin_allocate_to_pool(
        &self,
        id: MempoolId,
        filter: StreamFilter,
    ) -> Result<(), AllocError> {
        self.checked(|s| {
            s.begin_allocate_to_pool(id, filter)
                .map_err(AllocError::from)
        })
    }

    /// `endAllocateToPool`: stops routing to pool `id`. The reference stays until
    /// [`Self::release_pool`].
    pub fn end_allocate_to_pool(&self, id: MempoolId) -> Result<(), AllocError> {
        self.checked(|s| s.end_allocate_to_pool(id).map_err(AllocError::from))
    }

    /// `releasePool`: drops one reference to pool `id`. At 0 the pool's memory is freed by
    /// the next `empty_cache` or out-of-memory retry (not by this call).
    pub fn release_pool(&self, id: MempoolId) -> Result<(), AllocError> {
        self.checked(|s| s.release_pool(id).map_err(AllocError::from))
    }

    /// `getPoolUseCount`; `None` if there is no such pool (never made, or forgotten).
    pub fn pool_use_count(&self, id: MempoolId) -> Option<i32> {
        let s = self.lock();
        s.private.owner(id).map(|o| s.private.get(o).use_count)
    }

    /// The live private pools, oldest first.
    pub fn pools(&self) -> Vec<PoolInfo> {
        let s = self.lock();
        s.private
            .live()
            .map(|(_, p)| PoolInfo {
                id: p.id,
                use_count: p.use_count,
                freeable: s.private.is_freeable(p.id),
                open: s.private.open_ids().any(|o| o == p.id),
            })
            .collect()
    }

    /// `emptyCache(mempool_id)`: the whole cache for `MempoolId::DEFAULT`, else only pool
    /// `id`, and only if its use count is 0.
    pub fn empty_cache_pool(&self, id: MempoolId) -> Result<(), AllocError> {
        self.checked(|s| s.release_cached(id))
    }

    /// `snapshot(mempool_id)`: the segments of pool `id` (`DEFAULT`: every segment); none if
    /// torch has no such pool.
    pub fn pool_segments(&self, id: MempoolId) -> Vec<SegmentInfo> {
        let s = self.lock();
        if id.is_default() {
            return s.segments();
        }
        match s.private.owner(id) {
            Some(owner) => s.pool_segment_infos(owner),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
#[path = "mempool_tests.rs"]
mod tests;
