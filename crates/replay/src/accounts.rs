//! The pool accounts themselves, and what a replay keeps of them as it runs: each pool's
//! share of the memory at one point ([`PoolAccount`], read by [`account`] from the
//! allocator's segments and pools), where the peaks were ([`PeakTracker`]), and the engine's
//! per-row observer ([`Accounting`]). A leaf below the engine: it knows the allocator and the
//! trace, not the replay, so the engine calls it and [`crate::pool_account`], which replays
//! to take accounts at the peaks, calls the engine. The words are those of
//! [`crate::pool_account`].

use cachalot_core::{BlockState, CachingAllocator, MempoolId, PoolInfo, SegmentInfo, size};
use cachalot_sim::SimDevice;

use crate::load::LoadedTrace;
use crate::target::Target;

/// Where a pool stands with `empty_cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolStatus {
    /// The default pools: their whole free segments are released.
    Default,
    /// Allocations are being routed to it (`use_mem_pool` or a capture is open).
    Open(i32),
    /// Referenced (use count above 0) and not open: kept by `empty_cache`.
    Referenced(i32),
    /// Use count 0: its whole free segments go at the next `empty_cache`.
    Released,
    /// torch no longer knows the pool (it forgot it with blocks of it still alive); its
    /// memory is never freed.
    Forgotten,
}

impl PoolStatus {
    fn of(info: Option<&PoolInfo>) -> Self {
        match info {
            None => PoolStatus::Forgotten,
            Some(p) if p.use_count <= 0 => PoolStatus::Released,
            Some(p) if p.open => PoolStatus::Open(p.use_count),
            Some(p) => PoolStatus::Referenced(p.use_count),
        }
    }

    /// Whether `empty_cache` frees this pool's whole free segments.
    pub fn releases(self) -> bool {
        matches!(self, PoolStatus::Default | PoolStatus::Released)
    }

    /// For people: `open, use count 2`.
    pub fn describe(self) -> String {
        match self {
            PoolStatus::Default => "default".into(),
            PoolStatus::Open(n) => format!("open, use count {n}"),
            PoolStatus::Referenced(n) => format!("referenced, use count {n}"),
            PoolStatus::Released => "released (use count 0)".into(),
            PoolStatus::Forgotten => "forgotten by torch".into(),
        }
    }

    /// For programs: `default`, `open`, `referenced`, `released`, `forgotten`.
    pub fn name(self) -> &'static str {
        match self {
            PoolStatus::Default => "default",
            PoolStatus::Open(_) => "open",
            PoolStatus::Referenced(_) => "referenced",
            PoolStatus::Released => "released",
            PoolStatus::Forgotten => "forgotten",
        }
    }

    /// The use count (`None` for the default pools and a forgotten pool).
    pub fn use_count(self) -> Option<i32> {
        match self {
            PoolStatus::Open(n) | PoolStatus::Referenced(n) => Some(n),
            PoolStatus::Released => Some(0),
            PoolStatus::Default | PoolStatus::Forgotten => None,
        }
    }
}

/// One pool's share of the memory at one point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolShare {
    /// Its id (`(0, 0)` for the default pools).
    pub id: MempoolId,
    /// A CUDA graph's pool.
    pub graph: bool,
    /// Where it stands with `empty_cache`.
    pub status: PoolStatus,
    /// Its segments (mapped ranges, for expandable segments).
    pub segments: usize,
    /// Reserved bytes (the sum of its segments).
    pub reserved: u64,
    /// Bytes of live blocks.
    pub live: u64,
    /// Free bytes `empty_cache` would give back now.
    pub releasable: u64,
    /// Free bytes it would keep because they share a segment or page with a live block.
    pub kept_next_to_live: u64,
    /// Free bytes it would keep because the pool is referenced.
    pub kept_referenced: u64,
}

impl PoolShare {
    fn new(id: MempoolId, graph: bool, status: PoolStatus) -> Self {
        PoolShare {
            id,
            graph,
            status,
            segments: 0,
            reserved: 0,
            live: 0,
            releasable: 0,
            kept_next_to_live: 0,
            kept_referenced: 0,
        }
    }

    /// Reserved bytes that are not live.
    pub fn free(&self) -> u64 {
        self.reserved - self.live
    }

    /// For people: `the default pools`, `graph pool (1, 0)`, `MemPool (0, 2)`.
    pub fn name(&self) -> String {
        if self.id.is_default() {
            "the default pools".into()
        } else if self.graph {
            format!("graph pool {}", self.id)
        } else {
            format!("MemPool {}", self.id)
        }
    }

    fn add(&mut self, seg: &SegmentInfo, page: u64) {
        let free = seg.total_size - seg.allocated_size;
        self.segments += 1;
        self.reserved += seg.total_size;
        self.live += seg.allocated_size;
        match self.status {
            PoolStatus::Default | PoolStatus::Released => {
                let gives = releasable(seg, page);
                self.releasable += gives;
                self.kept_next_to_live += free - gives;
            }
            PoolStatus::Forgotten => self.kept_next_to_live += free,
            PoolStatus::Open(_) | PoolStatus::Referenced(_) => self.kept_referenced += free,
        }
    }
}

/// The bytes of `seg` that `empty_cache` frees once every event is synchronized: the whole
/// segment when no block in it is live; for a mapped range of an expandable segment, the whole
/// pages inside each run of blocks that are not live (after the events, each run is one free
/// block). A mapped range starts on a page boundary of its reservation.
fn releasable(seg: &SegmentInfo, page: u64) -> u64 {
    let live = |b: &&cachalot_core::BlockInfo| b.state == BlockState::ActiveAllocated;
    if !seg.is_expandable {
        return if seg.blocks.iter().any(|b| live(&b)) {
            0
        } else {
            seg.total_size
        };
    }
    let whole_pages =
        |begin: u64, end: u64| (end / page).saturating_sub(begin.div_ceil(page)) * page;
    let mut total = 0;
    let mut offset = 0;
    let mut run: Option<u64> = None;
    for b in &seg.blocks {
        if live(&b) {
            if let Some(start) = run.take() {
                total += whole_pages(start, offset);
            }
        } else if run.is_none() {
            run = Some(offset);
        }
        offset += b.size;
    }
    if let Some(start) = run {
        total += whole_pages(start, offset);
    }
    total
}

/// Every pool's share at one point of a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAccount {
    /// The operation after which it was taken (the last one replayed, at the end).
    pub op_index: usize,
    /// Its trace line.
    pub line: u64,
    /// The default pools first, then the private pools in the order the trace names them,
    /// then any other (a pool the trace does not name).
    pub pools: Vec<PoolShare>,
}

impl PoolAccount {
    fn sum(&self, f: impl Fn(&PoolShare) -> u64) -> u64 {
        self.pools.iter().map(f).sum()
    }

    /// Reserved bytes, all pools.
    pub fn reserved(&self) -> u64 {
        self.sum(|p| p.reserved)
    }

    /// Live bytes, all pools.
    pub fn live(&self) -> u64 {
        self.sum(|p| p.live)
    }

    /// What `empty_cache` would give back now.
    pub fn releasable(&self) -> u64 {
        self.sum(|p| p.releasable)
    }

    /// Free bytes `empty_cache` would keep because they share a segment with a live block.
    pub fn kept_next_to_live(&self) -> u64 {
        self.sum(|p| p.kept_next_to_live)
    }

    /// Free bytes `empty_cache` would keep because their pool is referenced.
    pub fn kept_referenced(&self) -> u64 {
        self.sum(|p| p.kept_referenced)
    }

    /// The private pools' shares.
    pub fn private(&self) -> impl Iterator<Item = &PoolShare> {
        self.pools.iter().filter(|p| !p.id.is_default())
    }
}

/// The account of `a` now. `trace` names the pools (their kinds and order).
pub fn account(
    a: &CachingAllocator<SimDevice>,
    trace: &LoadedTrace,
    op_index: usize,
) -> PoolAccount {
    let infos = a.pools();
    let large_page = a.config().large_segment_size;
    let mut pools = vec![PoolShare::new(
        MempoolId::DEFAULT,
        false,
        PoolStatus::Default,
    )];
    for p in &trace.pools {
        let id = if p.graph {
            MempoolId::graph(p.number)
        } else {
            MempoolId::mempool(p.number)
        };
        let status = PoolStatus::of(infos.iter().find(|i| i.id == id));
        pools.push(PoolShare::new(id, p.graph, status));
    }
    for seg in a.segments() {
        let i = match pools.iter().position(|p| p.id == seg.pool_id) {
            Some(i) => i,
            None => {
                let info = infos.iter().find(|i| i.id == seg.pool_id);
                let graph = seg.pool_id.first != 0;
                pools.push(PoolShare::new(seg.pool_id, graph, PoolStatus::of(info)));
                pools.len() - 1
            }
        };
        let page = if seg.is_small {
            size::SMALL_BUFFER
        } else {
            large_page
        };
        pools[i].add(&seg, page);
    }
    let line = trace.ops.get(op_index).map_or(0, |op| op.line());
    PoolAccount {
        op_index,
        line,
        pools,
    }
}

/// Where the peaks of a replay were: the first operation after which reserved (and
/// allocated) memory reached its peak, and the default pools' own peak of reserved bytes.
/// The peaks of a caching allocator are reached at the end of a row (memory only grows at a
/// successful allocation, and nothing in that allocation frees memory after it), so looking
/// after each row finds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeakTracker {
    /// Peak reserved bytes, and the operation that first reached it.
    pub reserved: (i64, Option<usize>),
    /// Peak allocated bytes, and the operation that first reached it.
    pub allocated: (i64, Option<usize>),
    /// Peak of the default pools' reserved bytes (all reserved bytes less the private pools').
    pub default_reserved: i64,
}

impl PeakTracker {
    /// After operation `i`, with the statistics then.
    #[inline]
    pub fn after_row(&mut self, i: usize, s: &cachalot_core::DeviceStats) {
        let reserved = s.reserved_bytes.all().current;
        let allocated = s.allocated_bytes.all().current;
        if reserved > self.reserved.0 {
            self.reserved = (reserved, Some(i));
        }
        if allocated > self.allocated.0 {
            self.allocated = (allocated, Some(i));
        }
        let private: i64 = s
            .reserved_bytes_by_private_pools
            .iter()
            .map(|(_, a)| a.all().current)
            .sum();
        self.default_reserved = self.default_reserved.max(reserved - private);
    }
}

/// What a replay with [`crate::ReplayOptions::pool_peaks`] found: where the peaks were and the
/// account at the end. Only the caching allocator has pools; the direct backends report none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolTracking {
    /// Where the peaks were.
    pub peaks: PeakTracker,
    /// The account where the replay ended.
    pub end: PoolAccount,
}

/// The engine's part: the tracker and the accounts asked for, while a replay runs.
#[derive(Debug, Default)]
pub(crate) struct Accounting {
    pub peaks: Option<PeakTracker>,
    /// Operation indices still to take an account after, in order.
    pub at: Vec<usize>,
    pub next: usize,
    pub taken: Vec<PoolAccount>,
}

impl Accounting {
    /// What a replay with [`crate::ReplayOptions::pool_peaks`] (`pool_peaks`) and
    /// [`crate::ReplayOptions::accounts_at`] (`at`) keeps; `None` when it asks for nothing
    /// (the replay then does no work for it).
    pub fn of(pool_peaks: bool, at: &[usize]) -> Option<Box<Self>> {
        (pool_peaks || !at.is_empty()).then(|| {
            Box::new(Accounting {
                peaks: pool_peaks.then(PeakTracker::default),
                at: at.to_vec(),
                ..Accounting::default()
            })
        })
    }

    /// After operation `i`: tracks the peaks, takes an account if one is due; returns whether
    /// every account asked for has been taken.
    pub fn after_row(&mut self, i: usize, alloc: &Target, trace: &LoadedTrace) -> bool {
        if let Some(p) = &mut self.peaks {
            alloc.with_stats(|s| p.after_row(i, s));
        }
        if self.at.get(self.next) == Some(&i) {
            self.next += 1;
            if let Some(a) = alloc.caching() {
                self.taken.push(account(a, trace, i));
            }
            return self.next == self.at.len() && self.peaks.is_none();
        }
        false
    }

    /// The tracking result at the end of the replay (after the last operation replayed,
    /// `last`).
    pub fn finish(
        &mut self,
        alloc: &Target,
        trace: &LoadedTrace,
        last: usize,
    ) -> Option<PoolTracking> {
        let peaks = self.peaks.take()?;
        let a = alloc.caching()?;
        Some(PoolTracking {
            peaks,
            end: account(a, trace, last),
        })
    }
}
