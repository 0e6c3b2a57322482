//! Expandable segments (`expandable_segments:True`).
//!
//! Instead of one `cudaMalloc` per segment, the allocator reserves one large virtual address
//! range per (stream, pool) — 1⅛ × device memory, so pages can be unmapped in the middle and
//! re-mapped at the end — and maps physical pages into it on demand: 2 MiB pages for the small
//! pool, `large_segment_size` (20 MiB) pages for the large pool. The range is modelled as a
//! chain of blocks like any segment, where the not-yet-mapped parts are *unmapped* blocks kept
//! in the pool's unmapped set.
//!
//! - Growth (`try_allocate_expandable_block`): find the lowest-address unmapped block of the
//!   stream that, together with the free block just before it, can hold the request; map the
//!   pages it needs (one `cuMemCreate` per page, then one `cuMemMap` per page). A page that
//!   cannot be created releases the pages created in the same step and the growth fails.
//! - Shrink (`unmap_block`, on `empty_cache` and on the last rung of the retry ladder): every
//!   page entirely inside a free block is unmapped and released; partial pages at either end
//!   stay as free mapped blocks. A reservation left with no mapped page is freed.
//! - Statistics: mapping and unmapping change `reserved_bytes` and count as device allocations
//!   and frees, but expandable memory never counts in `segment`, `oversize_segments` or
//!   `inactive_split*` — as in torch 2.15.

use cachalot_device::{Device, DeviceError, MemHandle};

use crate::block::BlockId;
use crate::history::TraceAction;
use crate::malloc::Params;
use crate::oom::{AllocError, OomCause};
use crate::pool::addr_key;
use crate::size::SMALL_BUFFER;
use crate::state::State;

/// One reserved address range and the physical pages mapped into it.
#[derive(Debug, Clone)]
pub(crate) struct ExpandableSegment {
    /// Start of the reservation.
    pub ptr: u64,
    /// Page size.
    pub page: u64,
    /// Number of pages the reservation can hold.
    pub max_pages: u64,
    /// The physical handle mapped at each page, for the pages seen so far.
    pub handles: Vec<Option<MemHandle>>,
}

impl ExpandableSegment {
    /// Bytes of address space reserved.
    pub fn size(&self) -> u64 {
        self.page * self.max_pages
    }
    /// Bytes mapped now.
    pub fn mapped_bytes(&self) -> u64 {
        self.handles.iter().flatten().count() as u64 * self.page
    }
    fn trim(&mut self) {
        while matches!(self.handles.last(), Some(None)) {
            self.handles.pop();
        }
    }
}

impl<D: Device> State<D> {
    /// The live expandable segment at `index` (blocks only point at live segments).
    fn segment(&self, index: usize) -> &ExpandableSegment {
        self.expandable[index]
            .as_ref()
            .expect("a block points at a released expandable segment")
    }

    fn segment_mut(&mut self, index: usize) -> &mut ExpandableSegment {
        self.expandable[index]
            .as_mut()
            .expect("a block points at a released expandable segment")
    }

    pub(crate) fn remove_unmapped(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let key = addr_key(b);
        let removed =
            self.pool_mut(b.pool).unmapped.remove(&key).is_some() || self.remove_ghost(id);
        debug_assert!(removed, "unmapped block missing from the unmapped set");
    }

    fn insert_unmapped(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        let key = addr_key(b);
        self.pool_mut(b.pool).unmapped.insert(key, id);
    }

    /// Whether a block could be part of a new allocation right now.
    fn allocatable(&self, id: Option<BlockId>) -> bool {
        id.is_some_and(|id| {
            let b = &self.blocks[id];
            !b.allocated && b.event_count == 0 && !b.has_stream_uses
        })
    }

    /// The lowest-address place on `stream` that can hold `p.size` bytes in an existing
    /// segment: a free block followed by free or unmapped blocks.
    fn find_expandable_block(&self, p: &Params) -> Option<BlockId> {
        let candidates = self
            .pool(p.pool)
            .unmapped
            .range((p.stream.0, 0)..)
            .take_while(|(k, _)| k.0 == p.stream.0)
            .map(|(_, &id)| id);
        for c in candidates {
            let mut c = c;
            if self.allocatable(self.blocks[c].prev) {
                c = self.blocks[c].prev.expect("checked above");
            }
            let mut bytes = 0u64;
            let mut b = Some(c);
            while bytes < p.size && self.allocatable(b) {
                let id = b.expect("allocatable implies present");
                bytes = bytes.saturating_add(self.blocks[id].size);
                b = self.blocks[id].next;
            }
            if bytes >= p.size {
                return Some(c);
            }
        }
        None
    }

    /// The bytes one new reservation asks for: 1⅛ × device memory, unless
    /// `expandable_segments_reserve` asks for less.
    fn reserve_wanted(&self) -> u64 {
        let full = self.device_total.saturating_add(self.device_total / 8);
        match self.conf.expandable_segments_reserve {
            Some(spec) => spec.resolve_bytes(self.device_total).min(full),
            None => full,
        }
    }

    /// Reserves a new segment for `p`'s stream and pool: one unmapped block.
    fn new_expandable_segment(&mut self, p: &Params) -> Result<BlockId, AllocError> {
        let page = if p.pool.is_small() {
            SMALL_BUFFER
        } else {
            self.conf.large_segment_size
        };
        let mut max_pages = self.reserve_wanted().div_ceil(page);
        if page.checked_mul(max_pages).is_none() {
            max_pages -= 1;
        }
        // torch checks the reservation with `C10_CUDA_DRIVER_CHECK`: running out of address
        // space is a fatal driver error, not an out-of-memory to retry.
        let ptr = self
            .device
            .address_reserve(page * max_pages)
            .map_err(|e| match e {
                DeviceError::OutOfMemory => DeviceError::Driver {
                    call: "cuMemAddressReserve",
                    message: "out of memory".into(),
                },
                e => e,
            })?;
        let seg = ExpandableSegment {
            ptr,
            page,
            max_pages,
            handles: Vec::new(),
        };
        let index = self.expandable.len() as u32;
        let size = seg.size();
        self.expandable.push(Some(seg));
        let segment_id = self.take_segment_id();
        let id = self.new_block(ptr, size, p.stream, p.pool, segment_id);
        let b = &mut self.blocks[id];
        b.mapped = false;
        b.expandable = index;
        self.insert_unmapped(id);
        Ok(id)
    }

    /// Grows (or re-fills) an expandable segment enough to hold `p.size` bytes and returns the
    /// free block that holds them, removed from the free set; `Ok(None)` when the device is out
    /// of memory, or when the request is bigger than a whole new segment (torch then frees the
    /// reservation at once: one allocation never spans two segments).
    pub(crate) fn try_allocate_expandable_block(
        &mut self,
        p: &Params,
    ) -> Result<Option<BlockId>, AllocError> {
        let mut candidate = match self.find_expandable_block(p) {
            Some(c) => c,
            None => {
                let id = self.new_expandable_segment(p)?;
                if self.blocks[id].size < p.size {
                    self.release_expandable_segment(id)?;
                    if self.conf.expandable_segments_reserve.is_some()
                        && p.alloc_size <= self.device_total
                    {
                        self.oom_cause = OomCause::ExceedsExpandableReserve {
                            reserve: self.reserve_wanted(),
                        };
                    }
                    return Ok(None);
                }
                id
            }
        };
        if !self.blocks[candidate].mapped {
            let want = self.blocks[candidate].size.min(p.size);
            if !self.map_block(candidate, want)? {
                return Ok(None);
            }
        }
        while self.blocks[candidate].size < p.size {
            let remaining = p.size - self.blocks[candidate].size;
            // The candidate search guarantees free or unmapped blocks follow up to `p.size`.
            let Some(next) = self.blocks[candidate].next else {
                return Ok(None);
            };
            let want = remaining.min(self.blocks[next].size);
            if !self.map_block(next, want)? {
                return Ok(None);
            }
            candidate = next;
        }
        let removed = self.remove_free(candidate);
        debug_assert!(removed);
        // torch counts one per successful growth, however many mappings it made (none, when
        // the oversize rules refused a free block that this search takes).
        self.pool_segment_count(p.pool, 1)?;
        Ok(Some(candidate))
    }

    /// Maps the pages covering the first `size` bytes of the unmapped block `id`; the block
    /// then joins its free neighbours. Returns false when the device is out of memory.
    fn map_block(&mut self, id: BlockId, size: u64) -> Result<bool, AllocError> {
        let (ptr, bsize, seg_index, stream, pool) = {
            let b = &self.blocks[id];
            debug_assert!(!b.mapped && size <= b.size);
            (b.ptr, b.size, b.expandable as usize, b.stream, b.pool)
        };
        let seg = self.segment_mut(seg_index);
        let begin = (ptr - seg.ptr) / seg.page;
        let end = (ptr - seg.ptr + size).div_ceil(seg.page);
        let page = seg.page;
        let seg_ptr = seg.ptr;
        if seg.handles.len() < end as usize {
            seg.handles.resize(end as usize, None);
        }
        for i in begin..end {
            match self.device.mem_create(page) {
                Ok(h) => self.segment_mut(seg_index).handles[i as usize] = Some(h),
                Err(DeviceError::OutOfMemory) => {
                    for j in begin..i {
                        let seg = self.segment_mut(seg_index);
                        let h = seg.handles[j as usize].take().expect("created above");
                        self.device.mem_release(h, page)?;
                    }
                    self.segment_mut(seg_index).trim();
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        for i in begin..end {
            let h = self.segment(seg_index).handles[i as usize].expect("created above");
            self.device.mem_map(seg_ptr + i * page, page, h)?;
        }
        let mapped = (end - begin) * page;
        self.remove_unmapped(id);
        self.blocks[id].mapped = true;
        if mapped < bsize {
            let seg_id = self.piece_number(self.blocks[id].segment_id);
            let rest = self.new_block(ptr + mapped, bsize - mapped, stream, pool, seg_id);
            let next = self.blocks[id].next;
            {
                let r = &mut self.blocks[rest];
                r.mapped = false;
                r.expandable = seg_index as u32;
                r.prev = Some(id);
                r.next = next;
            }
            if let Some(n) = next {
                self.blocks[n].prev = Some(rest);
            }
            self.blocks[id].next = Some(rest);
            self.blocks[id].size = mapped;
            self.insert_unmapped(rest);
        }
        let prev = self.blocks[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.blocks[id].next;
        self.try_merge_blocks(id, next);
        self.insert_free(id);
        self.total_allocated_memory += mapped;
        self.stats.reserved_bytes.increase(pool.is_small(), mapped);
        self.pool_reserved(pool, mapped, true);
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentMap, ptr, mapped, stream);
        Ok(true)
    }

    /// Unmaps every page entirely inside the free expandable block `id`; partial pages at the
    /// ends stay as free mapped blocks. Returns the (possibly merged) unmapped block, or `id`
    /// unchanged when no whole page was inside.
    pub(crate) fn unmap_block(&mut self, id: BlockId) -> Result<BlockId, AllocError> {
        let (ptr, bsize, seg_index, stream, pool) = {
            let b = &self.blocks[id];
            (b.ptr, b.size, b.expandable as usize, b.stream, b.pool)
        };
        let (seg_ptr, page) = {
            let seg = self.segment(seg_index);
            (seg.ptr, seg.page)
        };
        let begin = (ptr - seg_ptr).div_ceil(page);
        let end = (ptr - seg_ptr + bsize) / page;
        if begin >= end {
            return Ok(id);
        }
        self.device.synchronize_stream(stream)?;
        for i in begin..end {
            let h = self.segment_mut(seg_index).handles[i as usize]
                .take()
                .expect("a free mapped page has a handle");
            self.device.mem_unmap(seg_ptr + i * page, page, h)?;
            self.device.mem_release(h, page)?;
        }
        self.segment_mut(seg_index).trim();
        let unmapped_ptr = seg_ptr + begin * page;
        let unmapped_size = (end - begin) * page;
        let removed = self.remove_free(id);
        debug_assert!(removed);
        let before = unmapped_ptr - ptr;
        if before > 0 {
            let seg_id = self.piece_number(self.blocks[id].segment_id);
            let bf = self.new_block(ptr, before, stream, pool, seg_id);
            let prev = self.blocks[id].prev;
            self.blocks[bf].expandable = seg_index as u32;
            self.blocks[bf].prev = prev;
            self.blocks[bf].next = Some(id);
            if let Some(p) = prev {
                self.blocks[p].next = Some(bf);
            }
            self.blocks[id].prev = Some(bf);
            self.insert_free(bf);
        }
        let after = bsize - (before + unmapped_size);
        if after > 0 {
            let seg_id = self.piece_number(self.blocks[id].segment_id);
            let af = self.new_block(unmapped_ptr + unmapped_size, after, stream, pool, seg_id);
            let next = self.blocks[id].next;
            self.blocks[af].expandable = seg_index as u32;
            self.blocks[af].prev = Some(id);
            self.blocks[af].next = next;
            if let Some(n) = next {
                self.blocks[n].prev = Some(af);
            }
            self.blocks[id].next = Some(af);
            self.insert_free(af);
        }
        {
            let b = &mut self.blocks[id];
            b.ptr = unmapped_ptr;
            b.size = unmapped_size;
            b.mapped = false;
        }
        let prev = self.blocks[id].prev;
        self.try_merge_blocks(id, prev);
        let next = self.blocks[id].next;
        self.try_merge_blocks(id, next);
        self.insert_unmapped(id);
        self.total_allocated_memory -= unmapped_size;
        self.stats
            .reserved_bytes
            .decrease(pool.is_small(), unmapped_size);
        self.pool_reserved(pool, unmapped_size, false);
        self.pool_segment_count(pool, -1)?;
        self.stats.num_device_free += 1;
        self.record(
            TraceAction::SegmentUnmap,
            unmapped_ptr,
            unmapped_size,
            stream,
        );
        Ok(id)
    }

    /// Frees the reservation of a segment that is one unmapped block again.
    pub(crate) fn release_expandable_segment(&mut self, id: BlockId) -> Result<(), AllocError> {
        let seg_index = self.blocks[id].expandable as usize;
        debug_assert!(!self.blocks[id].mapped);
        let seg = self.expandable[seg_index]
            .take()
            .expect("a block points at a released expandable segment");
        debug_assert_eq!(self.blocks[id].size, seg.size());
        self.remove_unmapped(id);
        self.blocks.remove(id);
        self.device.address_free(seg.ptr, seg.size())?;
        Ok(())
    }
}
