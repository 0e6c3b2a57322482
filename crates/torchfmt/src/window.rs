//! The state at the start of a ring-buffer window, rebuilt from the snapshot.
//!
//! Words: the *window* is the part of a run the history kept
//! (`_record_memory_history(max_entries=N)` keeps the last N entries); the *start state* is
//! what the allocator held when the window begins: its segments, the blocks live in them,
//! and the free *gaps* between those blocks.
//!
//! The snapshot's end state and the window's entries determine the start state:
//!
//! - segments at the start: the snapshot's segments the window did not `segment_alloc`, and
//!   the segments the window `segment_free`s without having allocated them;
//! - blocks live at the start: those allocated at the snapshot that the window did not
//!   allocate, and those the window frees without having allocated them;
//! - their sizes: a block still live at the end has its size in the snapshot; a block the
//!   window frees has its requested size rounded as torch rounds it under the snapshot's
//!   configuration, plus the rest of the space before the next block when that rest is too
//!   small to have been split off (1 MiB or less in a large segment);
//! - gaps: the rest of each segment, one free block each (free neighbours merge).
//!
//! [`layout_steps`] turns the start state into requests that rebuild it exactly under the
//! snapshot's own configuration: each large segment is allocated whole and freed (a new
//! segment of its size), then cut in address order into *fillers* of its pieces' sizes (the
//! first filler of a small segment makes it); each live block's filler is freed and the
//! block's own request made into the hole it leaves; last, the gap fillers are freed. While
//! one segment is cut, every other segment is fully allocated, so best fit has one free
//! block to choose. Under another configuration these requests hand it the recorded
//! fragmentation, which it would not have had; see `EventOptions::window`.
//!
//! Private pools: each start segment and each live block has its pool (`crate::routing`),
//! a block must lie in a segment of its own pool, and each segment's requests are routed to
//! the segment's pool, so every pool starts with its own segments and gaps.

use cachalot_core::config::parse_pytorch;
use cachalot_core::size::{MAX_UNSPLIT_REMAINDER, SMALL_SIZE, allocation_size, round_size};
use cachalot_core::{AllocConf, BlockState, MempoolId, TraceAction};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{Snapshot, TraceEvent};
use crate::routing::Routing;

/// A block live at the start of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LiveBlock {
    /// Its address.
    pub addr: u64,
    /// Requested bytes.
    pub requested: u64,
    /// Its raw stream.
    pub stream: u64,
    /// Its block size, when the snapshot has it (still live at the end).
    pub size: Option<u64>,
    /// Its pool.
    pub pool: MempoolId,
}

/// Blocks live before the window: allocated at the snapshot but not by the window, and freed
/// by the window without being allocated by it; in address order.
pub(crate) fn live_before(
    snap: &Snapshot,
    device: u32,
    entries: &[TraceEvent],
    routing: &Routing,
) -> Vec<LiveBlock> {
    let mut live: FxHashSet<u64> = FxHashSet::default();
    let mut out = Vec::new();
    for e in entries {
        match e.action {
            TraceAction::Alloc => {
                live.insert(e.addr);
            }
            TraceAction::FreeCompleted if !live.remove(&e.addr) => out.push(LiveBlock {
                addr: e.addr,
                requested: e.size,
                stream: e.stream,
                size: None,
                pool: routing.pool_of(e),
            }),
            _ => {}
        }
    }
    for s in snap.device_segments(device) {
        for b in &s.blocks {
            if b.state == BlockState::ActiveAllocated && !live.contains(&b.address) {
                out.push(LiveBlock {
                    addr: b.address,
                    requested: b.requested_size,
                    stream: s.stream,
                    size: Some(b.size),
                    pool: s.pool,
                });
            }
        }
    }
    out.sort_unstable();
    out
}

/// One request of the rebuilt start state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Allocate `size` bytes on `stream` in `pool` as `id`: a live block (its address,
    /// requested bytes) when `live`, else a filler ([`filler_addr`]).
    Alloc {
        id: u64,
        size: u64,
        stream: u64,
        live: bool,
        pool: MempoolId,
    },
    /// Free `id` (a filler).
    Free { id: u64, stream: u64 },
}

/// The id of the `n`-th filler (`n` from 1): below the failed requests' ids
/// (`FailedRequest`), far above any device address.
pub(crate) fn filler_addr(n: u64) -> u64 {
    u64::MAX - (1 << 33) - n
}

/// Whether an id is a filler's.
pub(crate) fn is_filler(addr: u64) -> bool {
    let n = (u64::MAX - (1 << 33)).wrapping_sub(addr);
    (1..=1 << 32).contains(&n)
}

/// A segment at the start of the window.
#[derive(Clone, Copy, Debug)]
struct StartSegment {
    addr: u64,
    size: u64,
    stream: u64,
    pool: MempoolId,
}

/// The segments at the start of the window, in address order, or why they are not known.
fn start_segments(
    snap: &Snapshot,
    device: u32,
    entries: &[TraceEvent],
    routing: &Routing,
) -> Result<Vec<StartSegment>, String> {
    let mut made: FxHashSet<u64> = FxHashSet::default();
    let mut live: FxHashSet<u64> = FxHashSet::default();
    let mut out = Vec::new();
    for e in entries {
        match e.action {
            TraceAction::SegmentAlloc => {
                made.insert(e.addr);
                live.insert(e.addr);
            }
            TraceAction::SegmentFree if !live.remove(&e.addr) => out.push(StartSegment {
                addr: e.addr,
                size: e.size,
                stream: e.stream,
                pool: routing.pool_of(e),
            }),
            TraceAction::SegmentMap | TraceAction::SegmentUnmap => {
                return Err("the window maps or unmaps expandable segments".into());
            }
            _ => {}
        }
    }
    for s in snap.device_segments(device) {
        if s.is_expandable {
            return Err(format!("segment {:#x} is expandable", s.address));
        }
        if !made.contains(&s.address) {
            out.push(StartSegment {
                addr: s.address,
                size: s.total_size,
                stream: s.stream,
                pool: s.pool,
            });
        }
    }
    if let Some(s) = out.iter().find(|s| s.addr.checked_add(s.size).is_none()) {
        return Err(format!(
            "segment {:#x} of {} bytes ends past the 64-bit address space (address + size must be at most {:#x})",
            s.addr,
            s.size,
            u64::MAX
        ));
    }
    out.sort_unstable_by_key(|s| s.addr);
    Ok(out)
}

/// The snapshot's own configuration (torch's default when it is missing or unreadable).
fn snapshot_conf(snap: &Snapshot) -> AllocConf {
    snap.allocator_settings
        .as_ref()
        .and_then(|s| parse_pytorch(&s.alloc_conf).ok())
        .map(|(c, _)| c)
        .unwrap_or_default()
}

/// Cuts one segment into pieces in address order: (bytes, the live block there, if any).
fn pieces(
    seg: &StartSegment,
    blocks: &[LiveBlock],
    conf: &AllocConf,
) -> Result<Vec<(u64, Option<LiveBlock>)>, String> {
    let small = seg.size <= 2 * SMALL_SIZE;
    let end = seg.addr + seg.size;
    let mut out = Vec::new();
    let gap = |out: &mut Vec<(u64, Option<LiveBlock>)>, from: u64, to: u64| {
        let mut at = from;
        while at < to {
            // A filler of a small segment must stay a small request.
            let n = if small {
                (to - at).min(SMALL_SIZE)
            } else {
                to - at
            };
            out.push((n, None));
            at += n;
        }
    };
    let mut at = seg.addr;
    for (i, b) in blocks.iter().enumerate() {
        if b.addr < at {
            return Err(format!("block {:#x} overlaps the block before it", b.addr));
        }
        gap(&mut out, at, b.addr);
        let next = blocks.get(i + 1).map_or(end, |n| n.addr);
        let size = match b.size {
            Some(s) => s,
            None => {
                let rounded = round_size(b.requested, conf).unwrap_or(u64::MAX);
                let rest = next.saturating_sub(b.addr.saturating_add(rounded));
                if !small && rest <= MAX_UNSPLIT_REMAINDER {
                    rounded + rest
                } else {
                    rounded
                }
            }
        };
        at = match b.addr.checked_add(size) {
            Some(block_end) if block_end <= next => block_end,
            _ => return Err(format!("block {:#x} runs past the next block", b.addr)),
        };
        out.push((size, Some(*b)));
    }
    gap(&mut out, at, end);
    for &(n, _) in &out {
        let fits = round_size(n, conf) == Some(n) && (n <= SMALL_SIZE) == small;
        if !fits {
            return Err(format!(
                "a piece of {n} bytes of segment {:#x} cannot be requested as it is",
                seg.addr
            ));
        }
    }
    Ok(out)
}

/// The requests that rebuild the start state, or why it cannot be rebuilt.
pub(crate) fn layout_steps(
    snap: &Snapshot,
    device: u32,
    entries: &[TraceEvent],
    live: &[LiveBlock],
    routing: &Routing,
) -> Result<Vec<Step>, String> {
    let conf = snapshot_conf(snap);
    let segments = start_segments(snap, device, entries, routing)?;
    let mut by_segment: FxHashMap<usize, Vec<LiveBlock>> = FxHashMap::default();
    for b in live {
        let i = segments.partition_point(|s| s.addr <= b.addr);
        match i.checked_sub(1).map(|i| (i, &segments[i])) {
            Some((_, s)) if b.addr < s.addr + s.size && s.pool != b.pool => {
                return Err(format!(
                    "block {:#x} of pool {} lies in segment {:#x} of pool {}",
                    b.addr, b.pool, s.addr, s.pool
                ));
            }
            Some((i, s)) if b.addr < s.addr + s.size => by_segment.entry(i).or_default().push(*b),
            _ => return Err(format!("block {:#x} lies in no segment", b.addr)),
        }
    }
    let mut steps = Vec::new();
    let mut gaps = Vec::new();
    let mut fillers = 0u64;
    let mut filler = || {
        fillers += 1;
        filler_addr(fillers)
    };
    for (i, seg) in segments.iter().enumerate() {
        let blocks = by_segment.remove(&i).unwrap_or_default();
        let parts = pieces(seg, &blocks, &conf)?;
        let (stream, pool) = (seg.stream, seg.pool);
        if seg.size > 2 * SMALL_SIZE {
            let whole = round_size(seg.size, &conf).and_then(|r| allocation_size(r, &conf));
            if whole != Some(seg.size) {
                return Err(format!(
                    "segment {:#x} of {} bytes is not a size a request makes",
                    seg.addr, seg.size
                ));
            }
            let id = filler();
            steps.push(Step::Alloc {
                id,
                size: seg.size,
                stream,
                live: false,
                pool,
            });
            steps.push(Step::Free { id, stream });
        }
        let mut held = Vec::with_capacity(parts.len());
        for &(size, block) in &parts {
            let id = filler();
            steps.push(Step::Alloc {
                id,
                size,
                stream,
                live: false,
                pool,
            });
            held.push((id, block));
        }
        for (id, block) in held {
            match block {
                Some(b) => {
                    steps.push(Step::Free { id, stream });
                    steps.push(Step::Alloc {
                        id: b.addr,
                        size: b.requested,
                        stream,
                        live: true,
                        pool,
                    });
                }
                None => gaps.push((id, stream)),
            }
        }
    }
    steps.extend(
        gaps.into_iter()
            .map(|(id, stream)| Step::Free { id, stream }),
    );
    Ok(steps)
}

/// The history entries before which the allocator gave cached segments of the default
/// pools back: the first `segment_free` of each run of them that frees a default-pool
/// segment (`empty_cache`, or the cache freed before a `cudaMalloc` is retried). A run
/// that frees only private pools' segments is their release (`del pool`: `emptyCache` of
/// the pool), which the events make by the pools' own release points.
pub(crate) fn releases(entries: &[TraceEvent], routing: &Routing) -> FxHashSet<usize> {
    let mut out = FxHashSet::default();
    let mut run: Option<usize> = None;
    for (i, e) in entries.iter().enumerate() {
        if e.action != TraceAction::SegmentFree {
            run = None;
            continue;
        }
        let start = *run.get_or_insert(i);
        if routing.pool_of(e).is_default() {
            out.insert(start);
        }
    }
    out
}

/// How many segments the window starts with (0 when that is not known).
pub(crate) fn start_segment_count(
    snap: &Snapshot,
    device: u32,
    entries: &[TraceEvent],
    routing: &Routing,
) -> u64 {
    start_segments(snap, device, entries, routing).map_or(0, |s| s.len() as u64)
}
