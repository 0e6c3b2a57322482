//! The allocation path, in torch 2.15's order:
//!
//! 1. retire completed stream events (`process_events`);
//! 2. round the request, pick the pool, compute the segment size;
//! 3. best fit in the pool's free set, honouring the oversize rules (`get_free_block`);
//! 4. on a miss: garbage-collect if enabled, then ask the device (`alloc_block`); failing that,
//!    release oversize cached blocks and retry (`release_available_cached_blocks`); failing
//!    that, flush the whole cache and retry once more (counted in `num_alloc_retries`);
//! 5. still nothing: out of memory, with the numbers;
//! 6. split the found block if the remainder is worth keeping (`should_split`) and hand out
//!    the front part (`alloc_found_block`).

use cachalot_device::{Device, DeviceError, StreamId};

use crate::block::{Block, BlockId};
use crate::history::TraceAction;
use crate::oom::{AllocError, OomCause, OomReport};
use crate::pool::First;
use crate::pool_id::PoolRef;
use crate::size::{self, MAX_UNSPLIT_REMAINDER, MIN_BLOCK_SIZE};
use crate::state::State;

/// What one request is looking for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub stream: StreamId,
    /// The free sets it searches and a new segment joins (default or private).
    pub pool: PoolRef,
    /// The rounded size.
    pub size: u64,
    /// The segment size a cache miss asks the device for.
    pub alloc_size: u64,
}

impl<D: Device> State<D> {
    /// Serves a request of `orig_size` bytes on `stream`; returns the block's address.
    pub fn malloc(&mut self, orig_size: u64, stream: StreamId) -> Result<u64, AllocError> {
        self.process_events()?;
        self.oom_cause = OomCause::DeviceFull;
        let Some((size, alloc_size)) = size::request_sizes(orig_size, &self.conf) else {
            // torch 2.15 wraps around here; nothing is touched and the request is an OOM.
            self.oom_cause = OomCause::SizeOverflow;
            let p = Params {
                stream,
                pool: PoolRef::default_pool(crate::block::PoolKind::Large),
                size: orig_size,
                alloc_size: orig_size,
            };
            return Err(self.out_of_memory(&p, orig_size));
        };
        let p = Params {
            stream,
            pool: self.route(size, stream),
            size,
            alloc_size,
        };
        let mut found = self.get_free_block(&p);
        if found.is_none() {
            self.limits.miss(self.total_allocated_memory);
            if self.gc_enabled() {
                self.garbage_collect_cached_blocks()?;
            }
            found = self.alloc_block(&p, false)?;
            if self.oom_cause == OomCause::PreemptiveRejection {
                return Err(self.out_of_memory(&p, orig_size));
            }
            if found.is_none() && self.release_available_cached_blocks(&p)? {
                found = self.alloc_block(&p, false)?;
            }
            if found.is_none() {
                self.release_cached_blocks()?;
                if self.conf.cachalot.research_after_flush {
                    found = self.get_free_block(&p);
                }
                if found.is_none() {
                    found = self.alloc_block(&p, true)?;
                }
            }
        }
        let Some(block) = found else {
            return Err(self.out_of_memory(&p, orig_size));
        };
        let split = self.should_split(block, p.size);
        Ok(self.alloc_found_block(block, &p, orig_size, split))
    }

    /// Best fit in the pool's free set (`get_free_block`); removes and returns the block.
    pub(crate) fn get_free_block(&mut self, p: &Params) -> Option<BlockId> {
        let gc = self.gc_enabled();
        let expandable_on = self.conf.expandable_segments;
        let (pool, blocks, conf) = self.pool_blocks_conf(p.pool);
        if gc {
            pool.get_free_blocks_call_count += 1;
        }
        // The usual case: the best fit is a classic block, taken or refused whole.
        let first = pool.take_first_at_or_after(p.stream, p.size, |id| {
            let b = &blocks[id];
            !b.is_expandable() && !crate::size::refuses_oversize(conf, p.size, b.size, false)
        })?;
        let (mut slot, mut id) = match first {
            First::Taken(id) => return Some(id),
            First::Kept(slot, id) => (slot, id),
        };
        if blocks[id].is_expandable() {
            // The rest of the walk, after the first block.
            let mut it = pool.at_or_after(p.stream, p.size).skip(1);
            if expandable_on {
                // Best fit by the size a block could grow to: prefer a tighter candidate over
                // the free tail of a segment that can still map more pages.
                let expandable_size = |b: BlockId| {
                    let blk = &blocks[b];
                    blk.size
                        + match blk.next {
                            Some(n) if !blocks[n].mapped => blocks[n].size,
                            _ => 0,
                        }
                };
                for (next_slot, &next) in it {
                    if !blocks[id].is_expandable() || expandable_size(next) >= expandable_size(id) {
                        break;
                    }
                    (id, slot) = (next, next_slot);
                }
            } else {
                // Expandable segments were switched off after some were made: only classic
                // blocks may serve new requests.
                (slot, id) = it
                    .find(|&(_, &n)| !blocks[n].is_expandable())
                    .map(|(s, &n)| (s, n))?;
            }
        }
        let b = &blocks[id];
        if crate::size::refuses_oversize(conf, p.size, b.size, b.is_expandable()) {
            return None;
        }
        let removed = pool.remove_at(slot);
        debug_assert_eq!(removed, id);
        Some(id)
    }

    /// Obtains new memory for `p` (`alloc_block`). `Ok(None)` means out of memory.
    pub(crate) fn alloc_block(
        &mut self,
        p: &Params,
        is_retry: bool,
    ) -> Result<Option<BlockId>, AllocError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        let reserved_after = self.total_allocated_memory.saturating_add(p.alloc_size);
        let refused = self
            .limits
            .refuses(reserved_after, self.allowed_memory_maximum);
        match self.allowed_memory_maximum {
            Some(_) if refused => return Ok(None),
            // torch 2.15 checks `throw_on_cudamalloc_oom` only where no fraction is set, against
            // the whole device (the oracle: a fraction of 0.999 takes the ordinary path).
            None if self.conf.throw_on_cudamalloc_oom && reserved_after > self.device_total => {
                self.oom_cause = OomCause::PreemptiveRejection;
                return Ok(None);
            }
            _ => {}
        }
        if self.conf.expandable_segments {
            return self.try_allocate_expandable_block(p);
        }
        let ptr = match self.device.malloc(p.alloc_size) {
            Ok(ptr) => ptr,
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = p.alloc_size;
        self.total_allocated_memory += size;
        let segment_id = self.take_segment_id();
        let id = self.new_block(ptr, size, p.stream, p.pool, segment_id);
        let small = p.pool.is_small();
        self.stats.segment.increase(small, 1);
        self.stats.reserved_bytes.increase(small, size);
        self.pool_reserved(p.pool, size, true);
        self.pool_segment_count(p.pool, 1)?;
        if size >= self.conf.max_split_size {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentAlloc, ptr, size, p.stream);
        Ok(Some(id))
    }

    /// Whether the rest of `block` after `size` bytes becomes a free block of its own.
    pub(crate) fn should_split(&self, block: BlockId, size: u64) -> bool {
        let b = &self.blocks[block];
        let remaining = b.size - size;
        if b.pool.is_small() || self.conf.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.conf.max_split_size && remaining > MAX_UNSPLIT_REMAINDER
        }
    }

    /// Hands out the front `p.size` bytes of `id` (or all of it), updating the statistics.
    pub(crate) fn alloc_found_block(
        &mut self,
        id: BlockId,
        p: &Params,
        orig_size: u64,
        split: bool,
    ) -> u64 {
        let small = p.pool.is_small();
        let b = &self.blocks[id];
        let already_split = b.is_split();
        let expandable = b.is_expandable();
        let (user, ptr, bsize, stream) = if split {
            // The original block becomes the remainder; a new block takes the front, handed
            // out as it is made.
            let (ptr, prev, exp, seg) = (b.ptr, b.prev, b.expandable, b.segment_id);
            let seg = self.piece_number(seg);
            let user = self.blocks.insert(Block {
                requested_size: orig_size,
                allocated: true,
                prev,
                next: Some(id),
                expandable: exp,
                ..Block::fresh(ptr, p.size, p.stream, p.pool, seg)
            });
            if let Some(prev) = prev {
                self.blocks[prev].next = Some(user);
            }
            let rem = &mut self.blocks[id];
            rem.prev = Some(user);
            rem.ptr += p.size;
            rem.size -= p.size;
            let rem_size = rem.size;
            self.insert_free(id);
            if !expandable {
                if already_split {
                    self.hot.inactive_split_bytes.decrease(small, p.size);
                } else {
                    self.hot.inactive_split_bytes.increase(small, rem_size);
                    self.hot.inactive_split.increase(small, 1);
                }
            }
            (user, ptr, p.size, p.stream)
        } else {
            let (ptr, bsize, stream) = (b.ptr, b.size, b.stream);
            if already_split && !expandable {
                self.hot.inactive_split_bytes.decrease(small, bsize);
                self.hot.inactive_split.decrease(small, 1);
            }
            let b = &mut self.blocks[id];
            b.allocated = true;
            b.requested_size = orig_size;
            (id, ptr, bsize, stream)
        };
        self.record(TraceAction::Alloc, ptr, orig_size, stream);
        self.allocated.insert(ptr, user);
        let h = &mut self.hot;
        h.allocation.increase(small, 1);
        h.allocated_bytes.increase(small, bsize);
        if !self.active_mirrors_allocation {
            h.active.increase(small, 1);
            h.active_bytes.increase(small, bsize);
        }
        h.requested_bytes.increase(small, orig_size);
        if bsize >= self.conf.max_split_size {
            self.stats.oversize_allocations.increase(1);
        }
        ptr
    }

    /// Builds the out-of-memory error and counts it.
    fn out_of_memory(&mut self, p: &Params, orig_size: u64) -> AllocError {
        let info = match self.device.mem_get_info() {
            Ok(i) => i,
            Err(e) => return e.into(),
        };
        if self.oom_cause == OomCause::PreemptiveRejection {
            self.stats.num_oom_rejections += 1;
        } else {
            self.stats.num_ooms += 1;
            if let Some(h) = &mut self.history {
                h.push_oom(p.size, p.stream, info.free);
            }
        }
        AllocError::OutOfMemory(Box::new(OomReport {
            device: self.device_index,
            stream: p.stream,
            requested: orig_size,
            rounded: p.size,
            alloc_size: p.alloc_size,
            device_total: info.total,
            device_free: info.free,
            allocated: self.hot.allocated_bytes.to_array().all().current as u64,
            reserved: self.stats.reserved_bytes.all().current as u64,
            allowed: self.allowed_memory_maximum,
            expandable_segments: self.conf.expandable_segments,
            cause: self.oom_cause,
            private_pool_cached: self.private_pool_cached(),
            pool: self.owner_id(p.pool.owner),
            torch: self.conf.torch,
        }))
    }
}
