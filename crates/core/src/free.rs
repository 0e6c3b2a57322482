//! The free path and cross-stream lifetimes.
//!
//! `free` takes a block from its user at once (the `allocation` and `allocated_bytes` stats
//! drop immediately). If other streams used the block (`record_stream`), an event is recorded
//! on each and the block stays *active* until all of them complete; otherwise it goes straight
//! back to its pool (`free_block`), merging with free neighbours in its segment.

use cachalot_device::{Device, StreamId};

use crate::block::BlockId;
use crate::history::TraceAction;
use crate::oom::AllocError;
use crate::state::State;
use crate::streams::stream_hash;

impl<D: Device> State<D> {
    /// Takes back the allocation at `ptr`.
    pub fn free(&mut self, ptr: u64) -> Result<(), AllocError> {
        let Some(id) = self.allocated.remove(&ptr) else {
            return Err(AllocError::InvalidPointer { ptr });
        };
        let (small, size, requested, stream, has_uses) = {
            let b = &mut self.blocks[id];
            b.allocated = false;
            (
                b.pool.is_small(),
                b.size,
                b.requested_size,
                b.stream,
                b.has_stream_uses,
            )
        };
        if has_uses && self.active_mirrors_allocation {
            self.unmirror_active();
        }
        self.hot.allocation.decrease(small, 1);
        self.hot.allocated_bytes.decrease(small, size);
        self.record(TraceAction::FreeRequested, ptr, requested, stream);
        if size >= self.conf.max_split_size {
            self.stats.oversize_allocations.decrease(1);
        }
        if has_uses {
            self.insert_events(id)?;
        } else {
            self.free_block(id);
        }
        Ok(())
    }

    /// Marks the allocation at `ptr` as used by `stream` too (`record_stream`): its memory is
    /// not reused until the work queued on `stream` at free time has completed.
    pub fn record_stream(&mut self, ptr: u64, stream: StreamId) -> Result<(), AllocError> {
        let Some(&id) = self.allocated.get(&ptr) else {
            return Err(AllocError::InvalidPointer { ptr });
        };
        let b = &mut self.blocks[id];
        if stream != b.stream {
            b.has_stream_uses = true;
            let uses = self.stream_uses.entry(id).or_default();
            if !uses.contains(&stream) {
                uses.push(stream);
            }
        }
        Ok(())
    }

    /// Records one event per stream that used the block (`insert_events`).
    fn insert_events(&mut self, id: BlockId) -> Result<(), AllocError> {
        self.blocks[id].has_stream_uses = false;
        let uses = self.stream_uses.remove(&id).unwrap_or_default();
        for s in uses {
            let ev = self.device.record_event(s)?;
            self.blocks[id].event_count += 1;
            let queue = self.events.entry(s).or_default();
            if queue.is_empty() {
                // `cuda_events[stream]` inserts the stream into torch's table.
                self.event_order.insert(s, &stream_hash);
            }
            queue.push_back((ev, id));
        }
        Ok(())
    }

    /// Retires completed events, oldest first per stream (`process_events`).
    pub(crate) fn process_events(&mut self) -> Result<(), AllocError> {
        if self.events.is_empty() {
            return Ok(());
        }
        // torch's table order; erasing a stream while walking it visits the rest in the
        // order they had (backward-shift deletion moves later slots into the current one).
        for s in self.event_streams() {
            let Some(mut queue) = self.events.remove(&s) else {
                continue;
            };
            let mut failed = None;
            while let Some(&(ev, id)) = queue.front() {
                match self.device.query_event(ev) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
                queue.pop_front();
                self.event_done(id);
            }
            self.put_back_events(s, queue);
            if let Some(e) = failed {
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// The streams with outstanding events, in torch's `cuda_events` order.
    pub(crate) fn event_streams(&self) -> Vec<StreamId> {
        self.event_order.iter().collect()
    }

    /// Puts a stream's remaining events back, or takes the stream out of the table when none
    /// remain (`cuda_events.erase`).
    pub(crate) fn put_back_events(
        &mut self,
        s: StreamId,
        queue: std::collections::VecDeque<(cachalot_device::EventId, BlockId)>,
    ) {
        if queue.is_empty() {
            self.event_order.remove(s);
        } else {
            self.events.insert(s, queue);
        }
    }

    /// Waits for every outstanding event (`synchronize_and_free_events`), stream by stream in
    /// torch's table order.
    pub(crate) fn synchronize_and_free_events(&mut self) -> Result<(), AllocError> {
        self.stats.num_sync_all_streams += 1;
        for s in self.event_streams() {
            let Some(mut queue) = self.events.remove(&s) else {
                continue;
            };
            while let Some(&(ev, id)) = queue.front() {
                if let Err(e) = self.device.synchronize_event(ev) {
                    self.put_back_events(s, queue);
                    return Err(e.into());
                }
                queue.pop_front();
                self.event_done(id);
            }
            self.put_back_events(s, queue);
        }
        Ok(())
    }

    pub(crate) fn event_done(&mut self, id: BlockId) {
        let b = &mut self.blocks[id];
        b.event_count -= 1;
        if b.event_count == 0 {
            self.free_block(id);
        }
    }

    /// Returns a block to its pool, merging with free neighbours (`free_block`).
    pub(crate) fn free_block(&mut self, id: BlockId) {
        let (ptr, requested, stream, original_size, small, prev, next) = {
            let b = &self.blocks[id];
            debug_assert!(!b.allocated && b.event_count == 0 && !b.has_stream_uses);
            let small = b.pool.is_small();
            (
                b.ptr,
                b.requested_size,
                b.stream,
                b.size,
                small,
                b.prev,
                b.next,
            )
        };
        self.record(TraceAction::FreeCompleted, ptr, requested, stream);
        let (mut merged, mut subsumed) = (0u64, 0u64);
        for candidate in [prev, next] {
            let bytes = self.try_merge_blocks(id, candidate);
            if bytes > 0 {
                // Both neighbours lie in the block's segment: their sum fits in a u64.
                merged += 1;
                subsumed += bytes;
            }
        }
        self.insert_free(id);
        let b = &self.blocks[id];
        let (split, expandable) = (b.is_split(), b.is_expandable());
        let s = &mut self.hot;
        if !expandable {
            // torch applies the net change of the merges and of the block itself, each
            // statistic once, as an increase or a decrease by its sign. A block left split
            // counts with its merged size, which is its own size plus what it absorbed: the
            // net in bytes is its own size, an increase. A block that became a whole segment
            // again takes its absorbed neighbours out, a decrease.
            if split {
                s.inactive_split_bytes.increase(small, original_size);
                match merged {
                    0 => s.inactive_split.increase(small, 1),
                    2 => s.inactive_split.decrease(small, 1),
                    _ => {}
                }
            } else if merged > 0 {
                s.inactive_split_bytes.decrease(small, subsumed);
                s.inactive_split.decrease(small, merged);
            }
        }
        if !self.active_mirrors_allocation {
            s.active.decrease(small, 1);
            s.active_bytes.decrease(small, original_size);
        }
        s.requested_bytes.decrease(small, requested);
    }

    /// Absorbs `src` into `dst` if `src` is a free neighbour in the same mapping state;
    /// returns the bytes absorbed (`try_merge_blocks`). The test is inlined (most neighbours
    /// are allocated or absent), the merge is not.
    #[inline(always)]
    pub(crate) fn try_merge_blocks(&mut self, dst: BlockId, src: Option<BlockId>) -> u64 {
        let Some(src) = src else { return 0 };
        let s = &self.blocks[src];
        if s.allocated
            || s.event_count > 0
            || s.has_stream_uses
            || s.mapped != self.blocks[dst].mapped
        {
            return 0;
        }
        self.merge_blocks(dst, src)
    }

    /// Absorbs the free neighbour `src` into `dst`; returns the bytes absorbed.
    #[inline(never)]
    fn merge_blocks(&mut self, dst: BlockId, src: BlockId) -> u64 {
        let s = self.blocks[src];
        if s.mapped {
            let removed = self.remove_free(src);
            debug_assert!(removed, "free neighbour missing from the free set");
        } else {
            self.remove_unmapped(src);
        }
        let d = &mut self.blocks[dst];
        d.size += s.size;
        if d.prev == Some(src) {
            d.ptr = s.ptr;
            d.prev = s.prev;
            if let Some(p) = s.prev {
                self.blocks[p].next = Some(dst);
            }
        } else {
            d.next = s.next;
            if let Some(n) = s.next {
                self.blocks[n].prev = Some(dst);
            }
        }
        self.blocks.remove(src);
        s.size
    }
}

#[cfg(test)]
mod tests {
    use cachalot_device::StreamId;
    use cachalot_sim::{SimConfig, SimDevice};

    use crate::{AllocConf, CachingAllocator};

    /// `active` and `active_bytes` read as `allocation` and `allocated_bytes` until a freed
    /// block waits on another stream's work; from then on they are counted on their own, from
    /// the values (peaks included) they had.
    #[test]
    fn active_follows_allocation_until_a_freed_block_waits_on_a_stream() {
        let sim = SimDevice::new(SimConfig::default());
        let a = CachingAllocator::new(AllocConf::default(), sim).unwrap();
        let p = a.malloc(1 << 20, StreamId::DEFAULT).unwrap();
        let q = a.malloc(3 << 20, StreamId::DEFAULT).unwrap();
        a.free(q).unwrap();
        let s = a.stats();
        assert_eq!(
            (s.active, s.active_bytes),
            (s.allocation, s.allocated_bytes)
        );
        assert_eq!(s.active.all().peak, 2);
        a.record_stream(p, StreamId(7)).unwrap();
        a.free(p).unwrap();
        let s = a.stats();
        assert_eq!(s.allocation.all().current, 0);
        assert_eq!(s.active.all().current, 1, "the block waits on stream 7");
        assert_eq!(s.active_bytes.all().current, 1 << 20);
        assert_eq!(s.active.all().peak, 2);
        assert_eq!(s.active_bytes.all().peak, s.allocated_bytes.all().peak);
        assert_eq!(s.active.all().freed, 1);
        a.check_invariants().unwrap();
    }
}
