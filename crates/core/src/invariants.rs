//! The O(n) consistency check, run after every operation by the property tests (and by every
//! public operation with the feature `check-invariants`). It recounts everything from the blocks themselves and compares:
//!
//! - blocks of a segment tile it: `b.next.ptr == b.ptr + b.size`, links are symmetric, and
//!   neighbours share stream, pool and segment;
//! - no two neighbours are both free in the same mapping state (they would have merged);
//! - the free set holds exactly the free mapped blocks, under their current key; the unmapped
//!   set exactly the unmapped blocks; the address map exactly the allocated blocks;
//! - reserved bytes = classic segment bytes + mapped expandable pages = `total_allocated_memory`;
//! - in an expandable segment, a page has a physical handle iff mapped blocks cover it, and
//!   the blocks of the segment tile its whole reservation;
//! - every statistic's `current` equals its recount.

use std::collections::BTreeSet;

use cachalot_device::Device;

use crate::block::BlockId;
use crate::pool::{addr_key, size_key};
use crate::state::State;

impl<D: Device> State<D> {
    /// Checks every invariant; returns a description of the first one broken.
    pub fn check_invariants(&self) -> Result<(), String> {
        let live = self.blocks.live_ids();
        let mut free_expected = BTreeSet::new();
        let mut unmapped_expected = BTreeSet::new();
        // [all, small, large] recounts
        let mut allocation = [0i128; 2];
        let mut allocated_bytes = [0i128; 2];
        let mut active = [0i128; 2];
        let mut active_bytes = [0i128; 2];
        let mut requested = [0i128; 2];
        let mut segments = [0i128; 2];
        let mut reserved = [0i128; 2];
        let mut inactive_split = [0i128; 2];
        let mut inactive_split_bytes = [0i128; 2];
        let is_free = |id: BlockId| {
            let b = &self.blocks[id];
            !b.allocated && b.event_count == 0 && !b.has_stream_uses
        };
        let live_set: BTreeSet<BlockId> = live.iter().copied().collect();
        for (&id, uses) in &self.stream_uses {
            if !live_set.contains(&id) || !self.blocks[id].has_stream_uses || uses.is_empty() {
                return Err("recorded stream uses of a block that is gone or not marked".into());
            }
            if !self.blocks[id].allocated {
                return Err(format!(
                    "block {:#x}: stream uses recorded but not allocated",
                    self.blocks[id].ptr
                ));
            }
        }
        for &id in &live {
            let b = &self.blocks[id];
            if b.has_stream_uses != self.stream_uses.contains_key(&id) {
                return Err(format!(
                    "block {:#x}: stream-use mark and table disagree",
                    b.ptr
                ));
            }
            let k = usize::from(!b.pool.is_small());
            if let Some(n) = b.next {
                let nb = &self.blocks[n];
                if nb.prev != Some(id) {
                    return Err(format!("block {:#x}: next.prev does not point back", b.ptr));
                }
                if nb.ptr != b.ptr + b.size {
                    return Err(format!(
                        "block {:#x}+{}: next starts at {:#x}",
                        b.ptr, b.size, nb.ptr
                    ));
                }
                if nb.stream != b.stream || nb.pool != b.pool || nb.expandable != b.expandable {
                    return Err(format!(
                        "block {:#x}: neighbour from another segment",
                        b.ptr
                    ));
                }
                if is_free(id) && is_free(n) && b.mapped == nb.mapped {
                    return Err(format!(
                        "blocks {:#x} and {:#x} are free neighbours",
                        b.ptr, nb.ptr
                    ));
                }
            }
            if let Some(p) = b.prev
                && self.blocks[p].next != Some(id)
            {
                return Err(format!("block {:#x}: prev.next does not point back", b.ptr));
            }
            if b.size == 0 {
                return Err(format!("block {:#x} has size 0", b.ptr));
            }
            if !b.mapped {
                if !b.is_expandable() || b.allocated {
                    return Err(format!(
                        "block {:#x}: unmapped but not a free expandable block",
                        b.ptr
                    ));
                }
                unmapped_expected.insert((b.pool.owner, b.pool.is_small(), addr_key(b), id));
                continue;
            }
            if b.allocated {
                allocation[k] += 1;
                allocated_bytes[k] += i128::from(b.size);
                if self.allocated.get(&b.ptr) != Some(&id) {
                    return Err(format!(
                        "allocated block {:#x} missing from the address map",
                        b.ptr
                    ));
                }
            }
            if b.allocated || b.event_count > 0 {
                active[k] += 1;
                active_bytes[k] += i128::from(b.size);
                requested[k] += i128::from(b.requested_size);
            } else if is_free(id) {
                free_expected.insert((
                    b.pool.owner,
                    b.pool.is_small(),
                    b.stream.0,
                    size_key(b),
                    id,
                ));
                if b.is_split() && !b.is_expandable() {
                    inactive_split[k] += 1;
                    inactive_split_bytes[k] += i128::from(b.size);
                }
            }
            if b.is_expandable() {
                reserved[k] += i128::from(b.size);
            } else if !b.is_split() || b.prev.is_none() {
                let mut total = 0;
                let mut cur = Some(id);
                while let Some(c) = cur {
                    total += self.blocks[c].size;
                    cur = self.blocks[c].next;
                }
                segments[k] += 1;
                reserved[k] += i128::from(total);
            }
        }
        let mut free_actual = BTreeSet::new();
        let mut unmapped_actual = BTreeSet::new();
        let private = self.private.all().flat_map(|(o, p)| {
            [&p.small, &p.large, &p.ghost_small, &p.ghost_large].map(|set| (o, set))
        });
        for (owner, pool) in [(0, &self.small), (0, &self.large)]
            .into_iter()
            .chain(private)
        {
            for (stream, key, id) in pool.free_entries() {
                let b = &self.blocks[id];
                if size_key(b) != key || b.stream.0 != stream {
                    return Err(format!("free set key {key:?} on stream {stream} is stale"));
                }
                free_actual.insert((owner, pool.kind.is_small(), stream, key, id));
            }
            for (&key, &id) in &pool.unmapped {
                if addr_key(&self.blocks[id]) != key {
                    return Err(format!("unmapped set key {key:?} is stale"));
                }
                unmapped_actual.insert((owner, pool.kind.is_small(), key, id));
            }
        }
        if free_actual != free_expected {
            return Err(format!(
                "free sets hold {} blocks, {} blocks are free",
                free_actual.len(),
                free_expected.len()
            ));
        }
        if unmapped_actual != unmapped_expected {
            return Err("unmapped sets differ from the unmapped blocks".into());
        }
        if self.allocated.len() as i128 != allocation[0] + allocation[1] {
            return Err("address map holds blocks that are not allocated".into());
        }
        let s = &self.stats;
        let checks: [(&str, &crate::stats::StatArray, [i128; 2]); 8] = [
            ("allocation", &s.allocation, allocation),
            ("allocated_bytes", &s.allocated_bytes, allocated_bytes),
            ("active", &s.active, active),
            ("active_bytes", &s.active_bytes, active_bytes),
            ("requested_bytes", &s.requested_bytes, requested),
            ("segment", &s.segment, segments),
            ("inactive_split", &s.inactive_split, inactive_split),
            (
                "inactive_split_bytes",
                &s.inactive_split_bytes,
                inactive_split_bytes,
            ),
        ];
        // torch's counters are `int64_t`; past that range (devices of 2^63 bytes and more)
        // the statistics saturate, and one that ever did is not recounted.
        let in_range = |v: i128| v <= i128::from(i64::MAX);
        let saturated = |a: &crate::stats::StatArray| {
            a.0.iter()
                .any(|s| s.peak == i64::MAX || s.allocated == i64::MAX)
        };
        for (name, arr, [small, large]) in checks {
            let got = [arr.0[0].current, arr.0[1].current, arr.0[2].current].map(i128::from);
            let want = [small + large, small, large];
            if in_range(want[0]) && !saturated(arr) && got != want {
                return Err(format!("{name}: stats say {got:?}, recount gives {want:?}"));
            }
        }
        let expandable_mapped: u64 = self
            .expandable
            .iter()
            .flatten()
            .map(|seg| seg.mapped_bytes())
            .sum();
        let classic_and_mapped = reserved[0] + reserved[1];
        let reserved_stat = s.reserved_bytes.0[0].current;
        if (in_range(classic_and_mapped)
            && !saturated(&s.reserved_bytes)
            && i128::from(reserved_stat) != classic_and_mapped)
            || classic_and_mapped != i128::from(self.total_allocated_memory)
        {
            return Err(format!(
                "reserved: stats {reserved_stat}, blocks {classic_and_mapped}, total_allocated_memory {}",
                self.total_allocated_memory
            ));
        }
        let expandable_blocks_mapped: u128 = live
            .iter()
            .map(|&id| &self.blocks[id])
            .filter(|b| b.is_expandable() && b.mapped)
            .map(|b| u128::from(b.size))
            .sum();
        if expandable_blocks_mapped != u128::from(expandable_mapped) {
            return Err(format!(
                "expandable: mapped blocks cover {expandable_blocks_mapped} bytes, pages hold {expandable_mapped}"
            ));
        }
        self.check_expandable_pages()?;
        self.check_pools(&live)?;
        Ok(())
    }
}

impl<D: Device> State<D> {
    /// Each live expandable segment: its blocks tile the reservation from its base, and a page
    /// holds a physical handle iff a mapped block covers it.
    fn check_expandable_pages(&self) -> Result<(), String> {
        for (index, seg) in self.expandable.iter().enumerate() {
            let Some(seg) = seg else { continue };
            let heads: Vec<BlockId> = self
                .blocks
                .live_ids()
                .into_iter()
                .filter(|&id| {
                    let b = &self.blocks[id];
                    b.expandable as usize == index && b.prev.is_none()
                })
                .collect();
            let [head] = heads[..] else {
                return Err(format!(
                    "expandable segment {index} has {} head blocks",
                    heads.len()
                ));
            };
            let mut at = seg.ptr;
            let mut cur = Some(head);
            while let Some(id) = cur {
                let b = &self.blocks[id];
                if b.ptr != at {
                    return Err(format!(
                        "expandable segment {index}: gap before {:#x}",
                        b.ptr
                    ));
                }
                if !b.mapped
                    && (!(b.ptr - seg.ptr).is_multiple_of(seg.page)
                        || !b.size.is_multiple_of(seg.page))
                {
                    return Err(format!("unmapped block {:#x} is not page-aligned", b.ptr));
                }
                let first = (b.ptr - seg.ptr) / seg.page;
                let last = (b.ptr - seg.ptr + b.size).div_ceil(seg.page);
                // Pages past `handles` were never mapped: only those below it are looked at,
                // so the check costs the pages used, not the whole reservation (millions of
                // pages on a simulated device of terabytes).
                let known = seg.handles.len() as u64;
                if b.mapped && last > known {
                    return Err(format!(
                        "expandable segment {index}: page {} mapped=false under a block with mapped=true",
                        known.max(first)
                    ));
                }
                for page in first..last.min(known) {
                    let has = seg.handles.get(page as usize).is_some_and(Option::is_some);
                    if has != b.mapped {
                        return Err(format!(
                            "expandable segment {index}: page {page} mapped={has} under a block with mapped={}",
                            b.mapped
                        ));
                    }
                }
                at = b.ptr + b.size;
                cur = b.next;
            }
            if at != seg.ptr + seg.size() {
                return Err(format!(
                    "expandable segment {index}: blocks end at {at:#x}, not at the reservation's end"
                ));
            }
        }
        Ok(())
    }
}

impl<D: Device> State<D> {
    /// The pool invariants: every block belongs to a live pool (the free-set recount in
    /// `invariants.rs` then puts it in exactly that pool's sets); use counts are not negative,
    /// a pool is freeable iff its count is 0, an open pool is live and referenced; each pool's
    /// segment count and reserved bytes match a recount, and the default pools' and private
    /// pools' reserved bytes add up to the total.
    pub(crate) fn check_pools(&self, live: &[BlockId]) -> Result<(), String> {
        // Statistics are `int64_t`: past 2^63 bytes they saturate, and are not recounted.
        let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let saturated = self
            .stats
            .reserved_bytes
            .0
            .iter()
            .any(|s| s.peak == i64::MAX || s.allocated == i64::MAX);
        let n = self.private.pools.len();
        let mut segments = vec![0i64; n + 1];
        let mut expandable = vec![false; n + 1];
        let mut reserved = vec![[0i64; 2]; n + 1];
        for &id in live {
            let b = &self.blocks[id];
            let owner = b.pool.owner as usize;
            if owner > n || (owner > 0 && self.private.pools[owner - 1].is_none()) {
                return Err(format!(
                    "block {:#x} belongs to pool {owner}, which is gone",
                    b.ptr
                ));
            }
            let k = usize::from(!b.pool.is_small());
            let head = b.prev.is_none();
            if b.is_expandable() {
                expandable[owner] = true;
                if b.mapped {
                    reserved[owner][k] = reserved[owner][k].saturating_add(bytes(b.size));
                }
            } else if head {
                segments[owner] += 1;
                let mut cur = Some(id);
                while let Some(c) = cur {
                    reserved[owner][k] =
                        reserved[owner][k].saturating_add(bytes(self.blocks[c].size));
                    cur = self.blocks[c].next;
                }
            }
        }
        for (owner, p) in self.private.all() {
            let want = reserved[owner as usize];
            if !saturated && p.reserved != want {
                return Err(format!(
                    "pool {}: holds {:?} bytes, recount {want:?}",
                    p.id, p.reserved
                ));
            }
        }
        for (owner, p) in self.private.live() {
            if p.use_count < 0 {
                return Err(format!("pool {}: use count {}", p.id, p.use_count));
            }
            if (p.use_count == 0) != self.private.is_freeable(p.id) {
                return Err(format!(
                    "pool {}: use count {} but freeable={}",
                    p.id,
                    p.use_count,
                    self.private.is_freeable(p.id)
                ));
            }
            if self.private.owner(p.id) != Some(owner) {
                return Err(format!("pool {}: id map points elsewhere", p.id));
            }
            if !expandable[owner as usize] && p.cuda_malloc_count != segments[owner as usize] {
                return Err(format!(
                    "pool {}: counts {} segments, holds {}",
                    p.id, p.cuda_malloc_count, segments[owner as usize]
                ));
            }
        }
        for id in self.private.open_ids() {
            let Some(o) = self.private.owner(id) else {
                return Err(format!("open pool {id} does not exist"));
            };
            if self.private.get(o).use_count < 1 {
                return Err(format!("open pool {id} holds no reference"));
            }
        }
        let private_total: i64 = self
            .stats
            .reserved_bytes_by_private_pools
            .iter()
            .map(|(_, a)| a.0[0].current)
            .fold(0, i64::saturating_add);
        let default_total = reserved[0][0].saturating_add(reserved[0][1]);
        if !saturated
            && default_total.saturating_add(private_total)
                != self.stats.reserved_bytes.all().current
        {
            return Err(format!(
                "reserved {} != default pools {default_total} + private pools {private_total}",
                self.stats.reserved_bytes.all().current
            ));
        }
        Ok(())
    }
}
