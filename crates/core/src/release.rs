//! Giving memory back to the device: the full cache flush (`empty_cache` and the last rung of
//! the retry ladder), the targeted release of oversize blocks, and the garbage collector.
//!
//! Only whole free segments can go back (`release_block`); a free block that is a piece of a
//! partly used segment stays ("non-releasable"). Free expandable blocks are unmapped page by
//! page instead.

use cachalot_device::Device;

use crate::block::BlockId;
use crate::history::TraceAction;
use crate::malloc::Params;
use crate::oom::AllocError;
use crate::pool_id::{MempoolId, PoolRef};
use crate::state::State;

impl<D: Device> State<D> {
    /// Waits for outstanding events, then returns every whole free segment to the device and
    /// unmaps the free pages of expandable segments (`release_cached_blocks`).
    pub(crate) fn release_cached_blocks(&mut self) -> Result<(), AllocError> {
        self.release_cached(MempoolId::DEFAULT)
    }

    /// Frees the whole free segments of one pool and unmaps its free expandable pages
    /// (`release_blocks`).
    pub(crate) fn release_blocks(&mut self, pool: PoolRef) -> Result<(), AllocError> {
        let candidates: Vec<BlockId> = self.pool(pool).free_ids().collect();
        let mut to_unmap = Vec::new();
        for id in candidates {
            let b = &self.blocks[id];
            if b.is_expandable() {
                to_unmap.push(id);
            } else if !b.is_split() {
                self.release_block(id)?;
            }
        }
        for id in to_unmap {
            let id = self.unmap_block(id)?;
            if !self.blocks[id].is_split() {
                self.release_expandable_segment(id)?;
            }
        }
        Ok(())
    }

    /// Returns one whole free segment to the device (`release_block`).
    pub(crate) fn release_block(&mut self, id: BlockId) -> Result<(), AllocError> {
        let (ptr, size, stream, pool) = {
            let b = &self.blocks[id];
            debug_assert!(!b.is_expandable() && !b.is_split() && !b.allocated);
            (b.ptr, b.size, b.stream, b.pool)
        };
        let small = pool.is_small();
        self.stats.num_device_free += 1;
        self.record(TraceAction::SegmentFree, ptr, size, stream);
        self.device.free(ptr, size)?;
        self.total_allocated_memory -= size;
        self.stats.segment.decrease(small, 1);
        self.stats.reserved_bytes.decrease(small, size);
        self.pool_reserved(pool, size, false);
        self.pool_segment_count(pool, -1)?;
        if size >= self.conf.max_split_size {
            self.stats.oversize_segments.decrease(1);
        }
        let removed = self.remove_free(id);
        debug_assert!(removed);
        self.blocks.remove(id);
        Ok(())
    }

    /// Frees cached oversize blocks of the request's stream until the request could fit
    /// (`release_available_cached_blocks`). Does nothing without `max_split_size_mb`.
    ///
    /// Only whole classic segments are released. torch 2.15 skips expandable blocks here too;
    /// it would also `cudaFree` a *split* oversize block, which can exist only after
    /// expandable segments were switched on at runtime over classic segments (expandable mode
    /// splits any remainder) — freeing the segment under its live neighbours. cachalot skips
    /// such blocks instead.
    pub(crate) fn release_available_cached_blocks(
        &mut self,
        p: &Params,
    ) -> Result<bool, AllocError> {
        let max_split = self.conf.max_split_size;
        if max_split == u64::MAX {
            return Ok(false);
        }
        let key_size = p.size.max(max_split);
        let pool = self.pool(p.pool);
        let single = pool
            .at_or_after(p.stream, key_size)
            .next()
            .map(|(_, &id)| id);
        if let Some(id) = single {
            let b = &self.blocks[id];
            if releasable(b) {
                self.release_block(id)?;
                return Ok(true);
            }
        }
        // No single block is big enough: free oversize blocks of this stream, largest first.
        let mut victims = Vec::new();
        let mut planned = 0u64;
        for (_, &id) in pool.before(p.stream, key_size) {
            let b = &self.blocks[id];
            if planned >= key_size || b.size < max_split {
                break;
            }
            if releasable(b) {
                planned += b.size;
                victims.push(id);
            }
        }
        for id in victims {
            self.release_block(id)?;
        }
        Ok(planned >= key_size)
    }

    /// Frees whole cached large segments that have gone unused for longer than average, until
    /// reserved memory is back under the threshold (`garbage_collect_cached_blocks`).
    pub(crate) fn garbage_collect_cached_blocks(&mut self) -> Result<(), AllocError> {
        let Some(allowed) = self.allowed_memory_maximum else {
            return Ok(());
        };
        let gc_threshold =
            crate::bounds::gc_threshold(self.conf.garbage_collection_threshold, allowed);
        if self.total_allocated_memory <= gc_threshold {
            return Ok(());
        }
        self.limits.disturb();
        let target = self.total_allocated_memory - gc_threshold;
        let clock = self.large.get_free_blocks_call_count;
        let age = |b: &crate::block::Block| clock - b.gc_count_base;
        let mut total_age: u64 = 0;
        let mut count: u64 = 0;
        for id in self.large.free_ids() {
            let b = &self.blocks[id];
            if !b.is_split() && !b.is_expandable() {
                total_age += age(b);
                count += 1;
            }
        }
        if count == 0 {
            return Ok(());
        }
        let mut reclaimed = 0u64;
        let mut freed_any = true;
        while reclaimed < target && freed_any && count > 0 {
            let threshold = total_age as f64 / count as f64;
            freed_any = false;
            let pass: Vec<BlockId> = self
                .large
                .free_ids()
                .filter(|&id| {
                    let b = &self.blocks[id];
                    !b.is_split() && !b.is_expandable() && age(b) as f64 >= threshold
                })
                .collect();
            for id in pass {
                let b = &self.blocks[id];
                freed_any = true;
                reclaimed += b.size;
                total_age -= age(b);
                count -= 1;
                self.release_block(id)?;
            }
        }
        Ok(())
    }
}

/// Whether `release_available_cached_blocks` may return this free block to the device.
fn releasable(b: &crate::block::Block) -> bool {
    !b.is_expandable() && !b.is_split()
}
