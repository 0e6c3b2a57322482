//! Statistics as `torch.cuda.memory_stats()` reports them.
//!
//! A [`Stat`] is PyTorch's four-number counter: `current`, its `peak`, and the cumulative
//! `allocated` (sum of increases) and `freed` (sum of decreases). A [`StatArray`] holds one per
//! [`StatType`]: the aggregate ("all") and the pool kind of the block concerned.

/// One counter: the value now, its maximum, and cumulative increases and decreases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: i64,
    /// The largest `current` since the last peak reset.
    pub peak: i64,
    /// Sum of all increases since the last accumulated reset.
    pub allocated: i64,
    /// Sum of all decreases since the last accumulated reset.
    pub freed: i64,
}

impl Stat {
    /// Adds `n`, raising the peak if needed. torch's counters are `int64_t`; past its range
    /// (devices of 2^63 bytes and more) they saturate here instead of wrapping.
    #[inline]
    pub fn increase(&mut self, n: u64) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.current = self.current.saturating_add(n);
        self.allocated = self.allocated.saturating_add(n);
        if self.current > self.peak {
            self.peak = self.current;
        }
    }
    /// Subtracts `n`.
    #[inline]
    pub fn decrease(&mut self, n: u64) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.current = self.current.saturating_sub(n);
        self.freed = self.freed.saturating_add(n);
    }
    /// Adds a signed delta (used for the net change of a merge).
    #[inline]
    pub fn apply(&mut self, delta: i64) {
        if delta >= 0 {
            self.increase(delta as u64)
        } else {
            self.decrease(delta.unsigned_abs())
        }
    }
    /// `reset_accumulated`: forget cumulative increases and decreases.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
    /// `reset_peak`: the peak becomes the current value.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// Which entry of a [`StatArray`]: the aggregate, or one pool kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatType {
    /// "all".
    Aggregate = 0,
    /// "small_pool": blocks of at most 1 MiB.
    SmallPool = 1,
    /// "large_pool".
    LargePool = 2,
}

impl StatType {
    /// The three types in torch's order, with their `memory_stats` names.
    pub const ALL: [(StatType, &'static str); 3] = [
        (StatType::Aggregate, "all"),
        (StatType::SmallPool, "small_pool"),
        (StatType::LargePool, "large_pool"),
    ];
    /// The pool kind for a block in the small (`true`) or large pool.
    #[inline]
    pub fn pool(is_small: bool) -> StatType {
        if is_small {
            StatType::SmallPool
        } else {
            StatType::LargePool
        }
    }
}

/// A [`Stat`] per [`StatType`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray(pub [Stat; 3]);

impl StatArray {
    /// Increases the aggregate and the pool kind.
    #[inline]
    pub fn increase(&mut self, is_small: bool, n: u64) {
        self.0[0].increase(n);
        self.0[StatType::pool(is_small) as usize].increase(n);
    }
    /// Decreases the aggregate and the pool kind.
    #[inline]
    pub fn decrease(&mut self, is_small: bool, n: u64) {
        self.0[0].decrease(n);
        self.0[StatType::pool(is_small) as usize].decrease(n);
    }
    /// Applies a signed delta to the aggregate and the pool kind.
    #[inline]
    pub fn apply(&mut self, is_small: bool, delta: i64) {
        self.0[0].apply(delta);
        self.0[StatType::pool(is_small) as usize].apply(delta);
    }
    /// The entry for `t`.
    pub fn get(&self, t: StatType) -> &Stat {
        &self.0[t as usize]
    }
    /// The aggregate ("all") entry.
    pub fn all(&self) -> &Stat {
        &self.0[0]
    }
    fn each(&mut self, f: impl Fn(&mut Stat)) {
        self.0.iter_mut().for_each(f)
    }
}

/// Everything `torch.cuda.memory_stats()` reports for the native backend (PyTorch's
/// `DeviceStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Live user allocations.
    pub allocation: StatArray,
    /// Segments obtained with `cudaMalloc` (expandable segments are not counted).
    pub segment: StatArray,
    /// Blocks allocated or waiting on stream events.
    pub active: StatArray,
    /// Free blocks that are fragments of a partly used segment (not expandable).
    pub inactive_split: StatArray,
    /// Bytes handed to users, at block size.
    pub allocated_bytes: StatArray,
    /// Bytes obtained from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks ("non-releasable").
    pub inactive_split_bytes: StatArray,
    /// Sizes as requested, unrounded, of active blocks.
    pub requested_bytes: StatArray,
    /// Retries after a full cache flush.
    pub num_alloc_retries: i64,
    /// Out-of-memory errors raised.
    pub num_ooms: i64,
    /// Live allocations of at least `max_split_size`.
    pub oversize_allocations: Stat,
    /// Live segments of at least `max_split_size`.
    pub oversize_segments: Stat,
    /// Calls to `synchronize_and_free_events`.
    pub num_sync_all_streams: i64,
    /// Device allocations: `cudaMalloc`s and expandable-segment growths.
    pub num_device_alloc: i64,
    /// Device frees: `cudaFree`s and expandable-segment shrinks.
    pub num_device_free: i64,
    /// Allocations rejected up front by `throw_on_cudamalloc_oom`.
    pub num_oom_rejections: i64,
    /// `max_split_size` when the allocator was built; -1 = unlimited.
    pub max_split_size: i64,
    /// Reserved bytes of each private pool (`reserved_bytes_by_private_pools`), in order of
    /// each pool's first segment; an entry stays after its pool is forgotten.
    pub reserved_bytes_by_private_pools: Vec<(crate::pool_id::MempoolId, StatArray)>,
}

impl DeviceStats {
    /// The nine arrays with their `memory_stats` names, in torch's order.
    pub fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `reset_accumulated_memory_stats`.
    pub fn reset_accumulated(&mut self) {
        for a in self.arrays_mut() {
            a.each(Stat::reset_accumulated);
        }
        for (_, a) in &mut self.reserved_bytes_by_private_pools {
            a.each(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.num_oom_rejections = 0;
    }

    /// `reset_peak_memory_stats`.
    pub fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.each(Stat::reset_peak);
        }
        for (_, a) in &mut self.reserved_bytes_by_private_pools {
            a.each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }
}
