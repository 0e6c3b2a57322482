//! The snapshot model: what `torch.cuda.memory._snapshot()` returns, as Rust types.
//!
//! A [`Snapshot`] has the allocator's segments (each tiled by blocks) at the moment it was
//! taken, the recorded history per device (`device_traces`, oldest entry first) and the
//! allocator settings. It is what the pickle and JSON readers produce and what the pickle
//! writer consumes; [`Snapshot::from_allocator`] builds one from cachalot's allocator.
//!
//! Fields torch writes that carry no information here are not modelled: stack `frames`
//! (cachalot records none; the writer writes `[]`), `compile_context` (`"N/A"`),
//! `user_metadata` (`""`).
//!
//! Pools: a segment's `segment_pool_id` and an entry's `pool_id` are torch's `MempoolId_t`,
//! `(0, 0)` for the default pools, `(n, 0)` for a CUDA graph's pool, `(0, n)` for a
//! `MemPool`'s (the readers refuse any other pair). torch writes `pool_id` on entries since
//! 2.12 (pytorch#177717); older snapshots have only the segments' ids
//! ([`TraceEvent::pool`] is `None` there).
//!
//! What differs from a snapshot torch writes for the same replay (checked against
//! `shared/traces/pickle` by `tests/snapshot_pickle.rs`, where everything else is equal):
//!
//! - `time_us` is a virtual clock (the entry's position in the whole history, from 0), not
//!   wall-clock microseconds since the epoch;
//! - `stream` values are cachalot's stream numbers (0 = default, then 1, 2, … in order of
//!   first appearance in the trace), not raw `cudaStream_t` handles (the reference traces use
//!   the default stream only, where both are 0);
//! - `frames` are always empty (torch's are too when no stack context was recorded);
//! - `external_annotations`, `host_segments` and `host_traces` are always empty.

use cachalot_core::{AllocConf, BlockState, MempoolId, SegmentInfo, TraceAction, TraceEntry};

/// One memory snapshot: segments, per-device history, settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Segments of every device, sorted by address within each device.
    pub segments: Vec<Segment>,
    /// The history of each device (index = device ordinal), oldest entry first.
    pub device_traces: Vec<DeviceTrace>,
    /// `allocator_settings`, when the snapshot has them (torch ≥ 2.4).
    pub allocator_settings: Option<AllocatorSettings>,
}

/// The recorded history of one device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTrace {
    /// The entries with an action cachalot knows, oldest first.
    pub entries: Vec<TraceEvent>,
    /// Entries with other actions (e.g. torch main's `annotate`), skipped: (action, count).
    pub skipped: Vec<(String, u64)>,
}

/// One segment: a `cudaMalloc` region, or one contiguous mapped range of an expandable
/// segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Device ordinal.
    pub device: u32,
    /// Base address.
    pub address: u64,
    /// Sum of the block sizes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks (allocated or pending free).
    pub active_size: u64,
    /// Sum of the requested sizes of active blocks.
    pub requested_size: u64,
    /// The stream, as torch writes it (the raw `cudaStream_t` value; 0 = default stream).
    pub stream: u64,
    /// Small pool (`segment_type` "small") or large.
    pub is_small: bool,
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// The pool that owns it (`segment_pool_id`; [`MempoolId::DEFAULT`] when absent).
    pub pool: MempoolId,
    /// Blocks in address order.
    pub blocks: Vec<Block>,
}

/// One block of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Unrounded size of the current or last allocation (0 if never allocated).
    pub requested_size: u64,
    /// Allocated, pending free, or free.
    pub state: BlockState,
}

/// One history entry (`device_traces[d][i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub action: TraceAction,
    /// Block or segment address; for `oom` entries, the free device bytes (`device_free`).
    pub addr: u64,
    /// alloc / free_*: the requested size; segment_*: the segment or mapped size; oom: the
    /// rounded request; snapshot: the active bytes.
    pub size: u64,
    /// The stream, as torch writes it.
    pub stream: u64,
    /// `time_us`, when present.
    pub time_us: Option<i64>,
    /// The pool of the block or segment (`pool_id`), when the entry has one.
    pub pool: Option<MempoolId>,
}

/// `allocator_settings`: the configuration the allocator ran with, as torch reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF`: the last settings string parsed.
    pub alloc_conf: String,
    /// `max_split_size` in bytes, -1 when unlimited.
    pub max_split_size: i64,
    /// `garbage_collection_threshold`.
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `pinned_num_register_threads`.
    pub pinned_num_register_threads: i64,
    /// `release_lock_on_cudamalloc`.
    pub release_lock_on_cudamalloc: bool,
    /// `pinned_use_cuda_host_register`.
    pub pinned_use_cuda_host_register: bool,
    /// `graph_capture_record_stream_reuse`.
    pub graph_capture_record_stream_reuse: bool,
    /// `max_round_threshold` (pinned memory), -1 when unset.
    pub max_round_threshold: i64,
    /// `max_cached_size` (pinned memory), -1 when unset.
    pub max_cached_size: i64,
    /// `roundup_power2_divisions`: the divisions of the 16 intervals "1" … "32768" (MiB).
    pub roundup_power2_divisions: [u64; 16],
}

impl Default for AllocatorSettings {
    fn default() -> Self {
        AllocatorSettings::from_conf(&AllocConf::default())
    }
}

/// `u64::MAX` ("unset") as torch's -1; other values as themselves.
fn or_minus_one(v: u64) -> i64 {
    if v == u64::MAX {
        -1
    } else {
        i64::try_from(v).unwrap_or(i64::MAX)
    }
}

impl AllocatorSettings {
    /// The settings torch 2.15 reports for configuration `c`.
    pub fn from_conf(c: &AllocConf) -> Self {
        AllocatorSettings {
            alloc_conf: c.last_allocator_settings.clone(),
            max_split_size: or_minus_one(c.max_split_size),
            garbage_collection_threshold: c.garbage_collection_threshold,
            expandable_segments: c.expandable_segments,
            pinned_num_register_threads: i64::try_from(c.pinned_num_register_threads)
                .unwrap_or(i64::MAX),
            release_lock_on_cudamalloc: c.release_lock_on_cudamalloc,
            pinned_use_cuda_host_register: c.pinned_use_cuda_host_register,
            graph_capture_record_stream_reuse: c.graph_capture_record_stream_reuse,
            max_round_threshold: or_minus_one(c.pinned_max_round_threshold),
            max_cached_size: or_minus_one(c.pinned_max_cached_size),
            roundup_power2_divisions: c.roundup_power2_divisions,
        }
    }

    /// The names of the 16 `roundup_power2_divisions` intervals, as torch writes them.
    pub const INTERVALS: [&'static str; 16] = [
        "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192",
        "16384", "32768",
    ];
}

impl Segment {
    /// The segment as torch reports it, from cachalot's [`SegmentInfo`].
    pub fn from_info(s: &SegmentInfo, device: u32) -> Self {
        Segment {
            device,
            address: s.address,
            total_size: s.total_size,
            allocated_size: s.allocated_size,
            active_size: s.active_size,
            requested_size: s.requested_size,
            stream: s.stream.0,
            is_small: s.is_small,
            is_expandable: s.is_expandable,
            pool: s.pool_id,
            blocks: s
                .blocks
                .iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                })
                .collect(),
        }
    }
}

impl TraceEvent {
    /// The entry as torch reports it, without its pool (cachalot's history does not record
    /// it). `time_us` is cachalot's virtual clock: the entry's position in the whole history
    /// (see [`TraceEntry::seq`]).
    pub fn from_entry(e: &TraceEntry) -> Self {
        TraceEvent {
            action: e.action,
            addr: if e.action == TraceAction::Oom {
                e.device_free
            } else {
                e.addr
            },
            size: e.size,
            stream: e.stream.0,
            time_us: Some(i64::try_from(e.seq).unwrap_or(i64::MAX)),
            pool: None,
        }
    }
}

impl Snapshot {
    /// The snapshot of one device's allocator: its segments, its history (oldest first) and
    /// the settings of `conf`.
    pub fn from_allocator(
        segments: &[SegmentInfo],
        trace: &[TraceEntry],
        conf: &AllocConf,
        device: u32,
    ) -> Self {
        let mut device_traces = vec![DeviceTrace::default(); device as usize + 1];
        // cachalot's history does not record each entry's pool: an entry gets the pool of
        // the segment holding its address at the end (the default pools when none does),
        // which is what a reader infers for an entry without one.
        let mut by_address: Vec<(u64, u64, MempoolId)> = segments
            .iter()
            .map(|s| (s.address, s.total_size, s.pool_id))
            .collect();
        by_address.sort_unstable_by_key(|s| s.0);
        let pool_at = |addr: u64| {
            let i = by_address.partition_point(|s| s.0 <= addr).checked_sub(1)?;
            let (start, size, pool) = by_address[i];
            (addr - start < size).then_some(pool)
        };
        device_traces[device as usize].entries = trace
            .iter()
            .map(|e| TraceEvent {
                pool: Some(match e.action {
                    TraceAction::Oom | TraceAction::Snapshot => MempoolId::DEFAULT,
                    _ => pool_at(e.addr).unwrap_or_default(),
                }),
                ..TraceEvent::from_entry(e)
            })
            .collect();
        Snapshot {
            segments: segments
                .iter()
                .map(|s| Segment::from_info(s, device))
                .collect(),
            device_traces,
            allocator_settings: Some(AllocatorSettings::from_conf(conf)),
        }
    }

    /// Checks what every snapshot torch writes satisfies and turning it into a workload
    /// relies on: each segment and block ends inside the 64-bit address space, and each
    /// device's segments add up to at most `u64::MAX` bytes (total, allocated, active,
    /// requested). Else the field's path and what is wrong. The readers do not check it (they
    /// read back whatever the writer wrote); loading a snapshot as a workload does.
    pub fn check_sizes(&self) -> Result<(), (String, String)> {
        let past_end = |what: &str, addr: u64, size: u64| {
            format!(
                "{what} at {addr:#x} of {size} bytes ends past the 64-bit address space \
                 (address + size must be at most {:#x})",
                u64::MAX
            )
        };
        let mut sums: rustc_hash::FxHashMap<u32, [u64; 4]> = Default::default();
        for (i, s) in self.segments.iter().enumerate() {
            if s.address.checked_add(s.total_size).is_none() {
                return Err((
                    format!("segments[{i}].total_size"),
                    past_end("the segment", s.address, s.total_size),
                ));
            }
            for (j, b) in s.blocks.iter().enumerate() {
                if b.address.checked_add(b.size).is_none() {
                    return Err((
                        format!("segments[{i}].blocks[{j}].size"),
                        past_end("the block", b.address, b.size),
                    ));
                }
            }
            let sum = sums.entry(s.device).or_default();
            let fields = [
                ("total_size", s.total_size),
                ("allocated_size", s.allocated_size),
                ("active_size", s.active_size),
                ("requested_size", s.requested_size),
            ];
            for (k, (name, v)) in fields.into_iter().enumerate() {
                sum[k] = sum[k].checked_add(v).ok_or_else(|| {
                    (
                        format!("segments[{i}].{name}"),
                        format!(
                            "{v}: the {name} of device {}'s segments add up past {} bytes, \
                             more than any device holds",
                            s.device,
                            u64::MAX
                        ),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// The segments of device `device`.
    pub fn device_segments(&self, device: u32) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(move |s| s.device == device)
    }

    /// The devices whose history has at least one entry.
    pub fn devices_with_history(&self) -> Vec<u32> {
        (0..self.device_traces.len() as u32)
            .filter(|&d| !self.device_traces[d as usize].entries.is_empty())
            .collect()
    }
}

/// Checks a pair read as a pool id: torch makes `(0, 0)`, `(n, 0)` and `(0, n)` only.
pub fn pool_id(first: u64, second: u64) -> Result<MempoolId, String> {
    if first != 0 && second != 0 {
        return Err(format!(
            "({first}, {second}) is not a pool id torch makes: (0, 0) names the default \
             pools, (n, 0) a CUDA graph's pool, (0, n) a MemPool's"
        ));
    }
    Ok(MempoolId { first, second })
}

/// Parses a trace action name as torch writes it.
pub fn parse_action(name: &str) -> Option<TraceAction> {
    Some(match name {
        "alloc" => TraceAction::Alloc,
        "free_requested" => TraceAction::FreeRequested,
        "free_completed" => TraceAction::FreeCompleted,
        "segment_alloc" => TraceAction::SegmentAlloc,
        "segment_free" => TraceAction::SegmentFree,
        "segment_map" => TraceAction::SegmentMap,
        "segment_unmap" => TraceAction::SegmentUnmap,
        "snapshot" => TraceAction::Snapshot,
        "oom" => TraceAction::Oom,
        _ => return None,
    })
}

/// Parses a block state name as torch writes it (also the `_snapshot` docstring's
/// `active_awaiting_free`).
pub fn parse_state(name: &str) -> Option<BlockState> {
    Some(match name {
        "active_allocated" => BlockState::ActiveAllocated,
        "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
        "inactive" => BlockState::Inactive,
        _ => return None,
    })
}
