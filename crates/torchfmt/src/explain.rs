//! Why an allocation ran out of memory, in numbers.
//!
//! torch's message says how much is allocated and how much is "reserved but unallocated".
//! [`explain_oom`] takes the segments at the failure (a snapshot taken there, or cachalot's
//! allocator stopped there) and splits the free cached memory by the reason it could not
//! serve the request, following the allocator's search (spec §4.1):
//!
//! - a block on another stream is never reused (the free set is per stream);
//! - a block of the other pool kind is never used (requests ≤ 1 MiB go to the small pool);
//! - in the right pool and stream, a block smaller than the rounded request does not fit;
//! - a block big enough can still be refused by the oversize rules of `max_split_size_mb`
//!   (an oversize block for a normal request, or one `max_non_split_rounding_mb` or more
//!   bigger than an oversize request);
//! - what is left would fit (after a real OOM only when the final cache flush freed it and
//!   torch did not search again, torch issue #189504).
//!
//! Which option would have avoided the failure is a replay question; `cachalot-replay`
//! answers it by replaying the trace with each candidate.

use std::fmt::{self, Write as _};

use cachalot_core::size::{allocation_size, is_small, refuses_oversize};
use cachalot_core::{AllocConf, BlockState, MempoolId, TraceAction, format_size};

use crate::model::{Segment, Snapshot};

/// The failed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomRequest {
    /// Device ordinal.
    pub device: u32,
    /// The request after rounding (the `oom` trace entry's `size`).
    pub rounded: u64,
    /// The stream, as torch writes it.
    pub stream: u64,
    /// Free device memory at the failure (`device_free`).
    pub device_free: u64,
    /// The pool the request was routed to (the `oom` entry's `pool_id`), when known; free
    /// blocks of other pools cannot serve it.
    pub pool: Option<MempoolId>,
}

/// Free cached memory of one pool kind and stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeByStream {
    /// Small pool or large.
    pub is_small: bool,
    /// The stream.
    pub stream: u64,
    /// The largest free block.
    pub largest: u64,
    /// All free bytes.
    pub total: u64,
    /// Number of free blocks.
    pub blocks: u64,
}

/// The reading of one out-of-memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomExplanation {
    /// The request.
    pub request: OomRequest,
    /// Whether it went to the small pool.
    pub small_pool: bool,
    /// The segment size the allocator tried to obtain ("Tried to allocate").
    pub alloc_size: u64,
    /// Bytes reserved from the device (all segments).
    pub reserved: u64,
    /// Segments.
    pub segments: u64,
    /// Bytes allocated to users.
    pub allocated: u64,
    /// Bytes freed by users but waiting on stream events.
    pub pending_free: u64,
    /// Free cached bytes (reserved − allocated − pending).
    pub free_cached: u64,
    /// Free bytes in whole free segments (what `empty_cache` could return).
    pub releasable: u64,
    /// Free bytes on other streams.
    pub other_stream: u64,
    /// Free bytes in the other pool kind.
    pub other_pool: u64,
    /// Free bytes in segments of other pools than the request's (a private pool's blocks
    /// serve only its own requests, and the default pools' none of a private pool's); not
    /// counted in the rows below it, nor as releasable (a pool still referenced keeps them
    /// through `empty_cache`, and the out-of-memory retry already freed released ones).
    pub other_pools: u64,
    /// Free bytes in the request's pool and stream, in blocks smaller than the request.
    pub too_small: u64,
    /// Free bytes in blocks large enough but refused by the oversize rules.
    pub refused_oversize: u64,
    /// Free bytes in blocks that would have served the request.
    pub would_fit: u64,
    /// The largest free block per pool kind and stream (large pool first, then by stream).
    pub free_by_stream: Vec<FreeByStream>,
    /// `max_split_size` in force, if set.
    pub max_split_size: Option<u64>,
    /// Whether the segments read are those at the failure (a verdict is drawn only then).
    pub at_failure: bool,
}

/// The device memory the allocator could use when history entry `at` (an `oom`) was
/// recorded: the free device memory then, plus what the allocator had reserved then (at the
/// snapshot, less what was obtained after the entry, plus what was returned after it).
pub fn capacity_at_oom(snap: &Snapshot, device: u32, at: usize) -> Option<u64> {
    let entries = &snap.device_traces.get(device as usize)?.entries;
    let oom = entries.get(at).filter(|e| e.action == TraceAction::Oom)?;
    // Wide sums: a snapshot built in memory is not checked as a file read is.
    let mut reserved_then: i128 = snap
        .device_segments(device)
        .map(|s| i128::from(s.total_size))
        .sum();
    for e in &entries[at + 1..] {
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => reserved_then -= e.size as i128,
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => reserved_then += e.size as i128,
            _ => {}
        }
    }
    u64::try_from(reserved_then.max(0) + oom.addr as i128).ok()
}

/// What a snapshot records about one device's run: the configuration, the out-of-memory
/// errors and where, and the memory at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The device.
    pub device: u32,
    /// `allocator_settings.PYTORCH_CUDA_ALLOC_CONF`, when the snapshot has settings.
    pub alloc_conf: Option<String>,
    /// `oom` entries in the history.
    pub ooms: u64,
    /// History index of the first and the last `oom` entry.
    pub oom_entries: Option<(usize, usize)>,
    /// The device memory at the last out-of-memory ([`capacity_at_oom`]).
    pub capacity: Option<u64>,
    /// Bytes in allocated blocks at the snapshot.
    pub allocated: u64,
    /// Bytes reserved (all segments) at the snapshot.
    pub reserved: u64,
    /// Requested bytes of the active blocks at the snapshot.
    pub requested: u64,
    /// The same for each private pool with segments at the snapshot, by pool id.
    pub pools: Vec<PoolMemory>,
}

/// What one private pool holds at a snapshot (its segments' `segment_pool_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolMemory {
    /// The pool.
    pub pool: MempoolId,
    /// Its segments.
    pub segments: u64,
    /// Bytes in allocated blocks.
    pub allocated: u64,
    /// Bytes reserved.
    pub reserved: u64,
    /// Requested bytes of the active blocks.
    pub requested: u64,
}

impl Recorded {
    /// Reads what device `device`'s part of `snap` records.
    pub fn of(snap: &Snapshot, device: u32) -> Recorded {
        let entries = snap
            .device_traces
            .get(device as usize)
            .map_or(&[][..], |t| &t.entries[..]);
        let is_oom = |e: &&crate::model::TraceEvent| e.action == TraceAction::Oom;
        let first = entries.iter().position(|e| is_oom(&e));
        let last = entries.iter().rposition(|e| is_oom(&e));
        let (mut allocated, mut reserved, mut requested) = (0u64, 0u64, 0u64);
        let mut pools: Vec<PoolMemory> = Vec::new();
        for s in snap.device_segments(device) {
            allocated = allocated.saturating_add(s.allocated_size);
            reserved = reserved.saturating_add(s.total_size);
            requested = requested.saturating_add(s.requested_size);
            if s.pool.is_default() {
                continue;
            }
            let i = match pools.binary_search_by_key(&s.pool, |p| p.pool) {
                Ok(i) => i,
                Err(i) => {
                    pools.insert(
                        i,
                        PoolMemory {
                            pool: s.pool,
                            segments: 0,
                            allocated: 0,
                            reserved: 0,
                            requested: 0,
                        },
                    );
                    i
                }
            };
            let p = &mut pools[i];
            p.segments += 1;
            p.allocated = p.allocated.saturating_add(s.allocated_size);
            p.reserved = p.reserved.saturating_add(s.total_size);
            p.requested = p.requested.saturating_add(s.requested_size);
        }
        Recorded {
            device,
            alloc_conf: snap
                .allocator_settings
                .as_ref()
                .map(|a| a.alloc_conf.clone()),
            ooms: entries.iter().filter(is_oom).count() as u64,
            oom_entries: first.zip(last),
            capacity: last.and_then(|at| capacity_at_oom(snap, device, at)),
            allocated,
            reserved,
            requested,
            pools,
        }
    }
}

/// Reads the failure of `request` against `segments` (those of the request's device) under
/// configuration `conf`.
pub fn explain_oom<'s>(
    segments: impl IntoIterator<Item = &'s Segment>,
    request: OomRequest,
    conf: &AllocConf,
) -> OomExplanation {
    let small_pool = is_small(request.rounded);
    let mut x = OomExplanation {
        request,
        small_pool,
        // A hostile snapshot can name a request whose segment size overflows: say "the most
        // there is" rather than wrap to 0.
        alloc_size: allocation_size(request.rounded, conf).unwrap_or(u64::MAX),
        reserved: 0,
        segments: 0,
        allocated: 0,
        pending_free: 0,
        free_cached: 0,
        releasable: 0,
        other_stream: 0,
        other_pool: 0,
        other_pools: 0,
        too_small: 0,
        refused_oversize: 0,
        would_fit: 0,
        free_by_stream: Vec::new(),
        max_split_size: (conf.max_split_size != u64::MAX).then_some(conf.max_split_size),
        at_failure: true,
    };
    for s in segments {
        if s.device != request.device {
            continue;
        }
        x.segments = x.segments.saturating_add(1);
        x.reserved = x.reserved.saturating_add(s.total_size);
        x.allocated = x.allocated.saturating_add(s.allocated_size);
        let whole_free = s.blocks.len() == 1 && s.blocks[0].state == BlockState::Inactive;
        for b in &s.blocks {
            match b.state {
                BlockState::ActiveAllocated => continue,
                BlockState::ActivePendingFree => {
                    x.pending_free = x.pending_free.saturating_add(b.size);
                    continue;
                }
                BlockState::Inactive => {}
            }
            x.free_cached = x.free_cached.saturating_add(b.size);
            if request.pool.is_some_and(|p| p != s.pool) {
                x.other_pools = x.other_pools.saturating_add(b.size);
                continue;
            }
            if whole_free && !s.is_expandable {
                x.releasable = x.releasable.saturating_add(b.size);
            }
            match x
                .free_by_stream
                .iter_mut()
                .find(|f| f.is_small == s.is_small && f.stream == s.stream)
            {
                Some(f) => {
                    f.largest = f.largest.max(b.size);
                    f.total = f.total.saturating_add(b.size);
                    f.blocks = f.blocks.saturating_add(1);
                }
                None => x.free_by_stream.push(FreeByStream {
                    is_small: s.is_small,
                    stream: s.stream,
                    largest: b.size,
                    total: b.size,
                    blocks: 1,
                }),
            }
            if s.is_small != small_pool {
                x.other_pool = x.other_pool.saturating_add(b.size);
            } else if s.stream != request.stream {
                x.other_stream = x.other_stream.saturating_add(b.size);
            } else if b.size < request.rounded {
                x.too_small = x.too_small.saturating_add(b.size);
            } else if refuses_oversize(conf, request.rounded, b.size, s.is_expandable) {
                x.refused_oversize = x.refused_oversize.saturating_add(b.size);
            } else {
                x.would_fit = x.would_fit.saturating_add(b.size);
            }
        }
    }
    x.free_by_stream
        .sort_by_key(|f| (f.is_small, f.stream, u64::MAX - f.largest));
    x
}

impl OomExplanation {
    /// Free cached bytes the request's pool has.
    pub fn usable_cached(&self) -> u64 {
        self.free_cached.saturating_sub(self.other_pools)
    }

    /// Reserved bytes no allocation uses (free cached plus pending frees), torch's
    /// "reserved by PyTorch but unallocated".
    pub fn reserved_unallocated(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }

    /// One sentence: what kind of failure this is.
    pub fn verdict(&self) -> String {
        let need = self.alloc_size;
        if self.would_fit > 0 {
            format!(
                "{} of free cached blocks would have fit: the final cache flush freed them \
                 and the allocator did not search again (torch issue #189504); retrying the \
                 allocation succeeds",
                format_size(self.would_fit)
            )
        } else if self.refused_oversize >= self.request.rounded {
            format!(
                "max_split_size_mb refused {} of free blocks large enough for the request; \
                 a larger max_split_size_mb (or none) would have served it",
                format_size(self.refused_oversize)
            )
        } else if self
            .usable_cached()
            .saturating_add(self.request.device_free)
            >= need
        {
            format!(
                "fragmentation: {} was free (cache {} + device {}), more than the {} needed, \
                 but not in one usable piece",
                format_size(
                    self.usable_cached()
                        .saturating_add(self.request.device_free)
                ),
                format_size(self.usable_cached()),
                format_size(self.request.device_free),
                format_size(need)
            )
        } else if self.other_pools > 0
            && self.free_cached.saturating_add(self.request.device_free) >= need
        {
            format!(
                "private pools: {} of the free cache was in other pools than the request's, \
                 which only their own requests can use; with it the {} needed would have \
                 been there (a pool gives its memory back only once released: `del pool`, a \
                 graph's reset)",
                format_size(self.other_pools),
                format_size(need)
            )
        } else {
            format!(
                "not enough memory: only {} was free in the cache and on the device for a \
                 {} segment; fragmentation alone does not explain it (the program holds {} \
                 allocated)",
                format_size(self.free_cached.saturating_add(self.request.device_free)),
                format_size(need),
                format_size(self.allocated)
            )
        }
    }
}

fn pool_name(small: bool) -> &'static str {
    if small { "small pool" } else { "large pool" }
}

impl fmt::Display for OomExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.request;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "out of memory on device {}: a request of {} (rounded) on stream {} in the {} \
             needed a new {} segment; the device had {} free",
            r.device,
            format_size(r.rounded),
            r.stream,
            pool_name(self.small_pool),
            format_size(self.alloc_size),
            format_size(r.device_free)
        );
        let row = |s: &mut String, label: &str, v: u64| {
            let _ = writeln!(s, "  {label:<44} {:>12}", format_size(v));
        };
        row(
            &mut s,
            &format!("reserved ({} segments)", self.segments),
            self.reserved,
        );
        row(&mut s, "allocated", self.allocated);
        row(
            &mut s,
            "reserved but unallocated",
            self.reserved_unallocated(),
        );
        row(&mut s, "  waiting on stream events", self.pending_free);
        row(&mut s, "  free in the cache", self.free_cached);
        if self.other_pools > 0 {
            row(
                &mut s,
                "    in other pools (not the request's)",
                self.other_pools,
            );
        }
        row(&mut s, "    on other streams", self.other_stream);
        row(
            &mut s,
            &format!("    in the {}", pool_name(!self.small_pool)),
            self.other_pool,
        );
        row(&mut s, "    too small for the request", self.too_small);
        let ms = match self.max_split_size {
            Some(ms) => format!("    refused by max_split_size_mb ({})", format_size(ms)),
            None => "    refused by max_split_size_mb (unset)".into(),
        };
        row(&mut s, &ms, self.refused_oversize);
        row(&mut s, "    would fit", self.would_fit);
        row(
            &mut s,
            "  in whole free segments (releasable)",
            self.releasable,
        );
        if !self.free_by_stream.is_empty() {
            let _ = writeln!(s, "  largest free block per pool and stream:");
            for b in &self.free_by_stream {
                let _ = writeln!(
                    s,
                    "    {}, stream {:<14} {:>12} (of {} in {} free blocks)",
                    pool_name(b.is_small),
                    b.stream,
                    format_size(b.largest),
                    format_size(b.total),
                    b.blocks
                );
            }
        }
        if self.at_failure {
            let _ = writeln!(s, "  why: {}", self.verdict());
        } else {
            let _ = writeln!(
                s,
                "  why: not known from these segments: they are the snapshot's, taken after \
                 the out-of-memory, not those at the failure (replaying the history rebuilds \
                 them)"
            );
        }
        f.write_str(&s)
    }
}
