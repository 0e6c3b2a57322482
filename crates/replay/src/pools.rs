//! Replaying the private-pool rows (`pool_begin`, `pool_end`, `graph_begin`, `graph_end`,
//! `pool_release`), `empty_cache` and `record_stream`, with the calls the oracle makes for each
//! (its README, "Private pools, `empty_cache` and `record_stream`"), and the per-pool part of
//! the report.
//!
//! - `pool_begin`: `createOrIncrefPool` if the pool does not exist, then `beginAllocateToPool`;
//!   `pool_end`: `endAllocateToPool`, then `releasePool` (torch's `use_mem_pool` does both).
//! - `graph_begin`: `beginAllocateToPool`, then `markCaptureBegin`; `graph_end`:
//!   `markCaptureEnd`, then `endAllocateToPool`. Capture is simulated: no stream really
//!   captures, so routing is by stream, and the capture tracker only counts open captures.
//! - Misuse stops the replay with torch's message, as the oracle does.

use cachalot_core::{
    AllocConf, AllocError, Backend, CachingAllocator, MempoolId, PoolError, SegmentInfo, StatArray,
    StreamFilter, StreamId,
};
use cachalot_sim::{SimConfig, SimDevice};

use crate::load::{LoadedTrace, PoolOp};
use crate::target::Target;

/// What one pool of the trace holds at the end (the oracle's `pools[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolReport {
    /// The number in the trace.
    pub number: u64,
    /// A CUDA-graph pool rather than a MemPool.
    pub graph: bool,
    /// Its `MempoolId_t`.
    pub id: MempoolId,
    /// `getPoolUseCount` at the end; `None` if torch has no such pool.
    pub use_count: Option<i32>,
    /// Its entry of `reserved_bytes_by_private_pools`, if it ever had a segment.
    pub reserved: Option<StatArray>,
    /// Its segments at the end (`snapshot(id)`).
    pub segments: Vec<SegmentInfo>,
}

/// Replay state of the pool rows.
#[derive(Default)]
pub(crate) struct PoolReplay {
    /// Open captures, as torch's capture tracker counts them.
    active_captures: u32,
    /// `backend:cudaMallocAsync`'s one capture flag (`capture_underway`).
    async_capture: bool,
    /// The pool whose use count torch had already changed when it raised (see
    /// [`PoolError::torch_use_count_delta`]).
    adjust: Option<(MempoolId, i32)>,
    /// Without caching (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`) torch still runs the pool calls
    /// through its caching allocator, which then never holds a block: this one keeps those
    /// pools (use counts, misuse, forgetting) and is never asked for memory.
    uncached_pools: Option<CachingAllocator<SimDevice>>,
    /// The `num_sync_all_streams` of `empty_cache` of one pool in `uncached_pools` (the
    /// whole-cache form is counted by the backend itself).
    uncached_syncs: i64,
}

/// The `MempoolId_t` of trace pool `index`.
pub(crate) fn pool_id(trace: &LoadedTrace, index: u32) -> MempoolId {
    let p = trace.pools[index as usize];
    if p.graph {
        MempoolId::graph(p.number)
    } else {
        MempoolId::mempool(p.number)
    }
}

fn filter(stream: Option<u32>, ignore_streams: bool) -> StreamFilter {
    match stream {
        None => StreamFilter::All,
        Some(_) if ignore_streams => StreamFilter::Stream(StreamId::DEFAULT),
        Some(s) => StreamFilter::Stream(StreamId(u64::from(s))),
    }
}

impl PoolReplay {
    /// Replays one row; an error stops the replay (misuse: torch's message).
    pub fn apply(
        &mut self,
        alloc: &Target,
        trace: &LoadedTrace,
        op: PoolOp,
        ptrs: &[u64],
        ignore_streams: bool,
    ) -> Result<(), AllocError> {
        let r = match alloc.caching() {
            Some(a) => self.apply_caching(a, trace, op, ptrs, ignore_streams),
            None if alloc.backend() == Backend::Uncached => {
                self.apply_uncached(alloc, trace, op, ignore_streams)
            }
            None => self.apply_direct(alloc, op, ptrs, ignore_streams),
        };
        if let Err(AllocError::Pool(
            e @ (PoolError::AlreadyRecording(id) | PoolError::ReleasedTooOften(id)),
        )) = &r
        {
            self.adjust = Some((*id, e.torch_use_count_delta()));
        }
        r
    }

    /// `markCaptureEnd`: torch's capture tracker.
    fn mark_capture_end(&mut self) -> Result<(), AllocError> {
        if self.active_captures == 0 {
            return Err(PoolError::NoActiveCapture.into());
        }
        self.active_captures -= 1;
        Ok(())
    }

    fn apply_caching(
        &mut self,
        a: &CachingAllocator<SimDevice>,
        trace: &LoadedTrace,
        op: PoolOp,
        ptrs: &[u64],
        ignore_streams: bool,
    ) -> Result<(), AllocError> {
        match op {
            PoolOp::PoolBegin { pool, stream } => {
                let id = pool_id(trace, pool);
                if a.pool_use_count(id).is_none() {
                    a.create_or_incref_pool(id)?;
                }
                a.begin_allocate_to_pool(id, filter(stream, ignore_streams))?
            }
            PoolOp::PoolEnd { pool } => {
                let id = pool_id(trace, pool);
                a.end_allocate_to_pool(id)?;
                a.release_pool(id)?
            }
            PoolOp::GraphBegin { pool, stream } => {
                let id = pool_id(trace, pool);
                a.begin_allocate_to_pool(id, filter(stream, ignore_streams))?;
                self.active_captures += 1;
            }
            PoolOp::GraphEnd { pool } => {
                self.mark_capture_end()?;
                a.end_allocate_to_pool(pool_id(trace, pool))?
            }
            PoolOp::PoolRelease { pool } => a.release_pool(pool_id(trace, pool))?,
            PoolOp::EmptyCache { pool: None } => a.empty_cache()?,
            PoolOp::EmptyCache { pool: Some(p) } => a.empty_cache_pool(pool_id(trace, p))?,
            PoolOp::RecordStream { slot, stream } => {
                let ptr = ptrs[slot as usize];
                if ptr != 0 && !ignore_streams {
                    a.record_stream(ptr, StreamId(u64::from(stream)))?
                }
            }
        }
        Ok(())
    }

    /// Without caching: the pool rows reach torch's caching allocator, which holds no
    /// memory; `empty_cache` also reaches the backend, and `record_stream` does nothing.
    fn apply_uncached(
        &mut self,
        alloc: &Target,
        trace: &LoadedTrace,
        op: PoolOp,
        ignore_streams: bool,
    ) -> Result<(), AllocError> {
        if self.uncached_pools.is_none() {
            let sim = SimDevice::new(SimConfig::with_capacity(0));
            self.uncached_pools = Some(CachingAllocator::new(AllocConf::default(), sim)?);
        }
        let Some(pools) = self.uncached_pools.take() else {
            unreachable!("made above")
        };
        let syncs = |a: &CachingAllocator<SimDevice>| a.stats().num_sync_all_streams;
        let before = syncs(&pools);
        let r = match op {
            PoolOp::EmptyCache { pool: None } => {
                alloc.empty_cache().and_then(|()| pools.empty_cache())
            }
            PoolOp::RecordStream { .. } => Ok(()),
            _ => self.apply_caching(&pools, trace, op, &[], ignore_streams),
        };
        if matches!(op, PoolOp::EmptyCache { pool: Some(_) }) {
            self.uncached_syncs += syncs(&pools) - before;
        }
        self.uncached_pools = Some(pools);
        r
    }

    /// The `num_sync_all_streams` the pool rows made that the backend's statistics do not
    /// count (without caching, `empty_cache` of one pool).
    pub fn extra_syncs(&self) -> i64 {
        self.uncached_syncs
    }

    /// `backend:cudaMallocAsync` keeps no private pools: it refuses to make one
    /// (`pool_begin`), allows one capture at a time, and ignores releases and `empty_cache` of
    /// a pool.
    fn apply_direct(
        &mut self,
        alloc: &Target,
        op: PoolOp,
        ptrs: &[u64],
        ignore_streams: bool,
    ) -> Result<(), AllocError> {
        match op {
            PoolOp::PoolBegin { .. } => Err(PoolError::Unsupported.into()),
            PoolOp::GraphBegin { .. } if self.async_capture => {
                Err(PoolError::AsyncCaptureUnderway.into())
            }
            PoolOp::GraphBegin { .. } => {
                self.async_capture = true;
                Ok(())
            }
            PoolOp::GraphEnd { .. } | PoolOp::PoolEnd { .. } if !self.async_capture => {
                Err(PoolError::AsyncNoCapture.into())
            }
            PoolOp::GraphEnd { .. } | PoolOp::PoolEnd { .. } => {
                self.async_capture = false;
                Ok(())
            }
            PoolOp::EmptyCache { pool: None } => alloc.empty_cache(),
            PoolOp::RecordStream { slot, stream } => {
                let ptr = ptrs[slot as usize];
                if ptr != 0 && !ignore_streams {
                    alloc.record_stream(ptr, StreamId(u64::from(stream)))?;
                }
                Ok(())
            }
            PoolOp::PoolRelease { .. } | PoolOp::EmptyCache { pool: Some(_) } => Ok(()),
        }
    }

    /// The per-pool report of every pool the trace names.
    pub fn report(&self, alloc: &Target, trace: &LoadedTrace) -> Vec<PoolReport> {
        let stats = alloc.stats().unwrap_or_default();
        (0..trace.pools.len() as u32)
            .map(|i| {
                let id = pool_id(trace, i);
                let p = trace.pools[i as usize];
                let caching = alloc.caching().or(self.uncached_pools.as_ref());
                let mut use_count = caching.and_then(|a| a.pool_use_count(id));
                if let (Some(c), Some((aid, delta))) = (use_count.as_mut(), self.adjust)
                    && aid == id
                {
                    *c += delta;
                }
                PoolReport {
                    number: p.number,
                    graph: p.graph,
                    id,
                    use_count,
                    reserved: stats
                        .reserved_bytes_by_private_pools
                        .iter()
                        .find(|(k, _)| *k == id)
                        .map(|(_, a)| *a),
                    segments: caching.map(|a| a.pool_segments(id)).unwrap_or_default(),
                }
            })
            .collect()
    }
}
