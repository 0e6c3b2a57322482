//! Which pool each entry of a snapshot's history belongs to, and where a private pool was
//! given back.
//!
//! Words: the *default pools* are torch's small and large pools, `(0, 0)`; a *private pool*
//! is a `MemPool`'s `(0, n)` or a CUDA graph's `(n, 0)`. An entry's pool is its `pool_id`
//! (torch ≥ 2.12 writes one on every entry); without one (older torch) it is the pool of
//! the snapshot's segment that holds the entry's address, and the default pools when no
//! segment at the end holds it (a segment freed before the snapshot: its pool is not
//! known).
//!
//! A private pool gives memory back only once its use count is 0 (torch keeps it from
//! `empty_cache` and from the out-of-memory retry while it is referenced), and no request
//! is routed to it after that (torch refuses to allocate into a released pool). So the
//! first `segment_free` or `segment_unmap` of a pool after its last allocation in the
//! history is where the program dropped its last reference (`del pool`, a graph's
//! `reset()`) and that memory was given back: its *release point*. A pool with memory
//! given back before its last allocation (an out-of-memory retry inside the pool) is not
//! released there.

use cachalot_core::{BlockState, MempoolId, TraceAction};
use rustc_hash::FxHashMap;

use crate::SnapshotError;
use crate::model::{Segment, Snapshot, TraceEvent};

/// The pools of one device's history.
pub(crate) struct Routing {
    /// The device's segments at the snapshot, in address order.
    segments: Vec<(u64, u64, MempoolId)>,
    /// For each entry index, the private pools released just before it.
    releases: FxHashMap<usize, Vec<MempoolId>>,
}

impl Routing {
    /// The routing of device `device`'s history, or why the snapshot's pools do not agree
    /// with each other.
    pub(crate) fn new(
        snap: &Snapshot,
        device: u32,
        entries: &[TraceEvent],
    ) -> Result<Self, SnapshotError> {
        let mut segments: Vec<(u64, u64, MempoolId)> = snap
            .device_segments(device)
            .map(|s| (s.address, s.total_size, s.pool))
            .collect();
        segments.sort_unstable_by_key(|s| s.0);
        let mut r = Routing {
            segments,
            releases: FxHashMap::default(),
        };
        r.check_live_blocks(snap, device, entries)?;
        r.find_releases(entries);
        Ok(r)
    }

    /// The pool of the snapshot's segment holding `addr`, if any.
    fn segment_pool(&self, addr: u64) -> Option<MempoolId> {
        let i = self
            .segments
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        let (start, size, pool) = self.segments[i];
        (addr - start < size).then_some(pool)
    }

    /// The pool of a history entry.
    pub(crate) fn pool_of(&self, e: &TraceEvent) -> MempoolId {
        match e.pool {
            Some(p) => p,
            None if e.action == TraceAction::Oom => MempoolId::DEFAULT,
            None => self.segment_pool(e.addr).unwrap_or_default(),
        }
    }

    /// The private pools released just before entry `i`.
    pub(crate) fn released_before(&self, i: usize) -> &[MempoolId] {
        self.releases.get(&i).map_or(&[], Vec::as_slice)
    }

    /// Every block the history allocates that is still allocated at the snapshot must sit in
    /// a segment of the pool its entry names.
    fn check_live_blocks(
        &self,
        snap: &Snapshot,
        device: u32,
        entries: &[TraceEvent],
    ) -> Result<(), SnapshotError> {
        let mut last_alloc: FxHashMap<u64, usize> = FxHashMap::default();
        for (i, e) in entries.iter().enumerate() {
            match e.action {
                TraceAction::Alloc => {
                    last_alloc.insert(e.addr, i);
                }
                TraceAction::FreeCompleted => {
                    last_alloc.remove(&e.addr);
                }
                _ => {}
            }
        }
        for s in snap.device_segments(device) {
            for b in &s.blocks {
                if b.state == BlockState::Inactive {
                    continue;
                }
                let Some(&i) = last_alloc.get(&b.address) else {
                    continue;
                };
                let named = entries[i].pool;
                if let Some(p) = named.filter(|p| *p != s.pool) {
                    return Err(mismatch(device, i, p, b.address, s));
                }
            }
        }
        Ok(())
    }

    fn find_releases(&mut self, entries: &[TraceEvent]) {
        let mut last_alloc: FxHashMap<MempoolId, usize> = FxHashMap::default();
        for (i, e) in entries.iter().enumerate() {
            if matches!(e.action, TraceAction::Alloc | TraceAction::Oom) {
                last_alloc.insert(self.pool_of(e), i);
            }
        }
        let mut released: FxHashMap<MempoolId, ()> = FxHashMap::default();
        for (i, e) in entries.iter().enumerate() {
            if !matches!(
                e.action,
                TraceAction::SegmentFree | TraceAction::SegmentUnmap
            ) {
                continue;
            }
            let pool = self.pool_of(e);
            let after_last = last_alloc.get(&pool).is_none_or(|&a| a < i);
            if !pool.is_default() && after_last && released.insert(pool, ()).is_none() {
                self.releases.entry(i).or_default().push(pool);
            }
        }
    }
}

fn mismatch(device: u32, i: usize, named: MempoolId, addr: u64, s: &Segment) -> SnapshotError {
    SnapshotError::Schema {
        path: format!("device_traces[{device}][{i}].pool_id"),
        message: format!(
            "the entry allocates {addr:#x} in pool {named}, but the snapshot's segment \
             {:#x} that holds that block belongs to pool {} (segment_pool_id): the history \
             and the segments disagree",
            s.address, s.pool
        ),
    }
}
