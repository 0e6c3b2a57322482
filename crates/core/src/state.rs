//! `State`: all mutable data of one device's allocator. Functions that take `&mut State` run
//! with the device lock held (the facade in `lib.rs` owns the lock).

use std::collections::{BTreeMap, VecDeque};

use cachalot_device::{Device, EventId, StreamId};
use rustc_hash::FxHashMap;

use crate::block::{Arena, Block, BlockId, PoolKind};
use crate::config::AllocConf;
use crate::expandable::ExpandableSegment;
use crate::history::{History, TraceAction};
use crate::mempool::PrivatePools;
use crate::oom::OomCause;
use crate::pool::BlockPool;
use crate::pool_id::PoolRef;
use crate::ska_order::SkaOrder;
use crate::stats::DeviceStats;
use crate::tally::HotStats;

/// One device's caching allocator state.
pub(crate) struct State<D> {
    pub conf: AllocConf,
    pub device: D,
    pub device_index: u32,
    pub blocks: Arena,
    pub small: BlockPool,
    pub large: BlockPool,
    /// Private pools (MemPool, CUDA graphs) and the routing to them.
    pub private: PrivatePools,
    /// Allocated blocks by address: exactly the blocks handed out and not yet freed.
    pub allocated: FxHashMap<u64, BlockId>,
    /// The streams `record_stream` named for an allocated block, other than its own: exactly
    /// the blocks whose `has_stream_uses` is set.
    pub stream_uses: FxHashMap<BlockId, Vec<StreamId>>,
    /// Outstanding events per stream, oldest first (`cuda_events`).
    pub events: BTreeMap<StreamId, VecDeque<(EventId, BlockId)>>,
    /// The streams of `events` in the order torch walks its `ska::flat_hash_map` of them
    /// (`crate::streams`): the order in which completed events free their blocks.
    pub(crate) event_order: SkaOrder<StreamId>,
    /// Expandable segments, by index (a block's `expandable` field); `None` once released.
    pub expandable: Vec<Option<ExpandableSegment>>,
    /// Bytes obtained from the device (`total_allocated_memory`).
    pub total_allocated_memory: u64,
    /// The per-process limit (`allowed_memory_maximum`) when a fraction below 1 is set.
    pub allowed_memory_maximum: Option<u64>,
    /// Device capacity, read once at construction.
    pub device_total: u64,
    /// How close the run came to its fraction limit and GC threshold (`crate::bounds`).
    pub limits: crate::bounds::LimitFacts,
    /// The statistics. The seven that malloc and free change are counted in `hot` and are
    /// stale here: read them through [`State::sync_stats`].
    pub stats: DeviceStats,
    /// `allocation`, `allocated_bytes`, `active`, `active_bytes`, `requested_bytes`,
    /// `inactive_split` and `inactive_split_bytes` as the hot path counts them.
    pub hot: HotStats,
    /// True until a freed block first waits on stream events. Until then every change to the
    /// `allocation` and `allocated_bytes` statistics is the same change to `active` and
    /// `active_bytes` (a block is active iff allocated), so only the former are counted and
    /// [`State::sync_stats`] copies them over.
    pub active_mirrors_allocation: bool,
    pub history: Option<History>,
    /// Creation number for the next segment (torch's `registration_counter_global`).
    pub next_segment_id: u32,
    /// Why the request being served found no memory, for its out-of-memory message; reset at
    /// the start of every `malloc`.
    pub oom_cause: OomCause,
}

impl<D: Device> State<D> {
    pub fn new(
        conf: AllocConf,
        mut device: D,
        device_index: u32,
    ) -> Result<Self, crate::AllocError> {
        let info = device.mem_get_info()?;
        let stats = DeviceStats {
            max_split_size: if conf.max_split_size == u64::MAX {
                -1
            } else {
                conf.max_split_size as i64
            },
            ..DeviceStats::default()
        };
        let mut state = State {
            conf,
            device,
            device_index,
            blocks: Arena::default(),
            small: BlockPool::new(PoolKind::Small),
            large: BlockPool::new(PoolKind::Large),
            private: PrivatePools::default(),
            allocated: FxHashMap::default(),
            stream_uses: FxHashMap::default(),
            events: BTreeMap::new(),
            event_order: SkaOrder::default(),
            expandable: Vec::new(),
            total_allocated_memory: 0,
            allowed_memory_maximum: None,
            device_total: info.total,
            limits: crate::bounds::LimitFacts::new(info.total),
            stats,
            hot: HotStats::default(),
            active_mirrors_allocation: true,
            history: None,
            next_segment_id: 0,
            oom_cause: OomCause::DeviceFull,
        };
        let fraction = state.conf.per_process_memory_fraction;
        state.set_memory_fraction(fraction);
        Ok(state)
    }

    /// `setMemoryFraction`: a fraction below 1 sets a limit; 1 clears it. torch 2.15 rounds
    /// the product to the nearest byte, halves away from zero (the oracle: 0.25 × (4k + 3)
    /// bytes allows k + 1, 0.5 × (2k + 1) allows k + 1).
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        self.allowed_memory_maximum = crate::bounds::allowed_maximum(fraction, self.device_total);
    }

    /// Brings the seven hot-path statistics in `stats` up to date (see [`State::hot`] and
    /// [`State::active_mirrors_allocation`]).
    pub fn sync_stats(&mut self) {
        let (h, s) = (&self.hot, &mut self.stats);
        s.allocation = h.allocation.to_array();
        s.allocated_bytes = h.allocated_bytes.to_array();
        (s.active, s.active_bytes) = if self.active_mirrors_allocation {
            (s.allocation, s.allocated_bytes)
        } else {
            (h.active.to_array(), h.active_bytes.to_array())
        };
        s.requested_bytes = h.requested_bytes.to_array();
        s.inactive_split = h.inactive_split.to_array();
        s.inactive_split_bytes = h.inactive_split_bytes.to_array();
    }

    /// From now on `active` and `active_bytes` are counted on their own: a block is about to
    /// stay active after its allocation ends.
    #[cold]
    pub fn unmirror_active(&mut self) {
        if self.active_mirrors_allocation {
            self.hot.active = self.hot.allocation;
            self.hot.active_bytes = self.hot.allocated_bytes;
            self.active_mirrors_allocation = false;
        }
    }

    /// `reset_peak_memory_stats`.
    pub fn reset_peak_stats(&mut self) {
        self.stats.reset_peak();
        self.hot.reset_peak();
    }

    /// `reset_accumulated_memory_stats`.
    pub fn reset_accumulated_stats(&mut self) {
        self.stats.reset_accumulated();
        self.hot.reset_accumulated();
    }

    /// Whether the garbage collector runs (a threshold and a fraction limit are both set).
    #[inline]
    pub fn gc_enabled(&self) -> bool {
        self.allowed_memory_maximum.is_some() && self.conf.garbage_collection_threshold > 0.0
    }

    /// Puts a free mapped block into its pool's free set.
    #[inline]
    pub fn insert_free(&mut self, id: BlockId) {
        let pool = self.blocks[id].pool;
        let set = match (pool.owner, pool.kind) {
            (0, PoolKind::Small) => &mut self.small,
            (0, PoolKind::Large) => &mut self.large,
            (o, PoolKind::Small) => &mut self.private.get_mut(o).small,
            (o, PoolKind::Large) => &mut self.private.get_mut(o).large,
        };
        set.insert(id, &mut self.blocks[id]);
    }

    /// Removes a free mapped block from its pool's free set.
    #[inline]
    pub fn remove_free(&mut self, id: BlockId) -> bool {
        let pool = self.blocks[id].pool;
        let (set, blocks) = self.pool_and_blocks(pool);
        set.remove(id, &blocks[id]) || self.remove_ghost(id)
    }

    /// Appends a history entry when recording is on.
    #[inline]
    pub fn record(&mut self, action: TraceAction, addr: u64, size: u64, stream: StreamId) {
        if let Some(h) = &mut self.history {
            h.push(action, addr, size, stream);
        }
    }

    /// Takes the next segment creation number.
    pub fn take_segment_id(&mut self) -> u32 {
        let torch = self.conf.torch;
        // Up to 2.11 ties in the free sets go by address alone: every segment is number 0.
        if !torch.orders_ties_by_segment_age() && !torch.orders_ties_by_block_age() {
            return 0;
        }
        let id = self.next_segment_id;
        self.next_segment_id = self.next_segment_id.wrapping_add(1);
        id
    }

    /// The tie-break number of a block cut from one numbered `of`: the same number, or on
    /// torch 2.12 (which numbers every block as it is made) the next one.
    pub fn piece_number(&mut self, of: u32) -> u32 {
        if self.conf.torch.orders_ties_by_block_age() {
            self.take_segment_id()
        } else {
            of
        }
    }

    /// A fresh block, not linked, not in any set, of the segment numbered `segment_id`.
    pub fn new_block(
        &mut self,
        ptr: u64,
        size: u64,
        stream: StreamId,
        pool: PoolRef,
        segment_id: u32,
    ) -> BlockId {
        self.blocks
            .insert(Block::fresh(ptr, size, stream, pool, segment_id))
    }
}
