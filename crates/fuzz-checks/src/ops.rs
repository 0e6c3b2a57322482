//! Random allocator call sequences, through [`MemoryResource`] (every backend), on the
//! simulated device, with the properties checked after every call:
//!
//! - the caching allocator's invariants hold (`check_invariants`: tiling, links, free sets,
//!   every statistic recounted);
//! - a successful allocation of `n` bytes is a range `[p, p + n)` that fits in 64 bits and
//!   overlaps no live allocation (no aliasing, whatever the size or the capacity);
//! - a call that fails for a reason other than memory (an unknown pointer, a bad fraction)
//!   leaves the allocator exactly as it was: statistics, segments and blocks, device usage;
//! - a failed allocation never changes what is allocated (torch's retry ladder may still
//!   flush the cache and count the failure, as torch does).

use std::collections::BTreeMap;

use cachalot_core::{AllocConf, AllocError, Backend, MemoryResource, StreamId};
use cachalot_sim::{SimConfig, SimDevice};

const MIB: u64 = 1 << 20;

/// One allocator call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `malloc(size)` on stream number `stream`.
    Malloc {
        /// Bytes.
        size: u64,
        /// Stream number (0 = default).
        stream: u8,
    },
    /// Free the live allocation picked by `pick` (modulo their number); with none live, or
    /// when `bogus`, a pointer that is not an allocation (it must be refused).
    Free {
        /// Which live allocation.
        pick: u16,
        /// Free an address inside it instead of its start.
        bogus: bool,
    },
    /// `record_stream` of a live allocation on stream number `stream`.
    RecordStream {
        /// Which live allocation.
        pick: u16,
        /// Stream number.
        stream: u8,
    },
    /// `empty_cache()`.
    EmptyCache,
    /// `set_memory_fraction(percent / 100)`; above 100 is invalid and must be refused.
    SetFraction {
        /// The fraction in percent.
        percent: u8,
    },
}

/// The configurations a fuzz input picks from (its first byte).
pub const CONFIGS: &[&str] = &[
    "",
    "expandable_segments:True",
    "max_split_size_mb:21",
    "roundup_power2_divisions:2",
    "roundup_power2_divisions:[1:2,2:8,>:4]",
    "garbage_collection_threshold:0.5,per_process_memory_fraction:0.8",
    "throw_on_cudamalloc_oom:True",
    "expandable_segments:True,expandable_segments_reserve:0.01",
    "expandable_segments:True,max_split_size_mb:40",
    "large_segment_size_mb:11,expandable_segments:True",
    "backend:cudaMallocAsync",
    "<uncached>",
    "expandable_segments:True,expandable_segments_reserve:0.5",
];

/// The capacities a fuzz input picks from (its second byte), across the whole `u64` range.
pub const CAPACITIES: &[u64] = &[
    2 * MIB,
    100 * MIB,
    1 << 30,
    80 << 30,
    16 << 40,
    1 << 61,
    1 << 63,
    u64::MAX,
];

/// The configuration named by `CONFIGS[i]`.
pub fn conf_at(i: usize) -> AllocConf {
    match CONFIGS[i % CONFIGS.len()] {
        "<uncached>" => AllocConf {
            backend: Backend::Uncached,
            ..AllocConf::default()
        },
        s => {
            cachalot_core::config::parse_pytorch(s)
                .expect("a valid config")
                .0
        }
    }
}

/// A request size from 8 bytes: mostly ordinary sizes, often ones near the top of the range.
fn size_from(raw: u64) -> u64 {
    match raw >> 61 {
        0..=2 => raw % (2 * MIB),
        3..=4 => raw % (200 * MIB),
        5 => raw % (1 << 40),
        6 => u64::MAX - (raw % (8 * MIB)),
        _ => raw,
    }
}

/// Decodes fuzz bytes: (config index, capacity, calls). Byte 0 picks [`CONFIGS`], byte 1
/// [`CAPACITIES`]; then each call is a tag byte (low 3 bits: 0–2 malloc of a biased size,
/// 3 malloc of the exact size, 4–5 free, 6 record_stream, 7 empty_cache or set_fraction; the
/// top 3 bits: the stream) and its big-endian argument (8 bytes of size, 2 of pick, 1 of
/// percent).
pub fn decode_ops(data: &[u8]) -> (usize, u64, Vec<Op>) {
    let conf = data.first().copied().unwrap_or(0) as usize;
    let cap = CAPACITIES[data.get(1).copied().unwrap_or(0) as usize % CAPACITIES.len()];
    let mut ops = Vec::new();
    let mut rest = data.get(2..).unwrap_or(&[]);
    while let [tag, tail @ ..] = rest {
        let take = |n: usize| -> (u64, &[u8]) {
            let n = n.min(tail.len());
            let mut v = 0u64;
            for &b in &tail[..n] {
                v = v << 8 | u64::from(b);
            }
            (v, &tail[n..])
        };
        let (op, next) = match tag % 8 {
            0..=3 => {
                let (raw, next) = take(8);
                // Tag 3 takes the size as written (reproducers); the others bias it.
                let size = if tag % 8 == 3 { raw } else { size_from(raw) };
                let op = Op::Malloc {
                    size,
                    stream: tag >> 5,
                };
                (op, next)
            }
            4 | 5 => {
                let (pick, next) = take(2);
                let op = Op::Free {
                    pick: pick as u16,
                    bogus: tag >> 7 == 1,
                };
                (op, next)
            }
            6 => {
                let (pick, next) = take(2);
                let op = Op::RecordStream {
                    pick: pick as u16,
                    stream: tag >> 5,
                };
                (op, next)
            }
            _ if tag >> 6 == 0 => (Op::EmptyCache, tail),
            _ => {
                let (p, next) = take(1);
                (Op::SetFraction { percent: p as u8 }, next)
            }
        };
        ops.push(op);
        rest = next;
    }
    (conf, cap, ops)
}

/// Everything a failed call must leave as it was.
fn fingerprint(a: &MemoryResource<SimDevice>) -> String {
    format!(
        "{:?}\n{:?}\n{}",
        a.stats(),
        a.segments().ok(),
        a.with_device(|d| d.phys_used())
    )
}

fn allocated(a: &MemoryResource<SimDevice>) -> (i64, u64) {
    let s = a.stats().unwrap_or_default();
    (s.allocation.all().current, a.with_device(|d| d.phys_used()))
}

fn check(a: &MemoryResource<SimDevice>, what: &str) {
    if let Some(c) = a.caching()
        && let Err(e) = c.check_invariants()
    {
        panic!("after {what}: invariant broken: {e}");
    }
}

/// Runs `ops` on a fresh allocator of configuration `conf` and a device of `capacity` bytes,
/// checking the properties of this module after every call.
pub fn run_ops(conf: AllocConf, capacity: u64, ops: &[Op]) {
    let device = SimDevice::new(SimConfig::with_capacity(capacity));
    let Ok(a) = MemoryResource::new(conf, device, 0) else {
        return;
    };
    // Live allocations: start -> (end, size).
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    let stream = |s: u8| StreamId(u64::from(s) * 0x10);
    for (i, op) in ops.iter().enumerate() {
        let what = format!("call {i} ({op:?})");
        let before = fingerprint(&a);
        let result = match *op {
            Op::Malloc { size, stream: s } => {
                let count_before = allocated(&a).0;
                match a.malloc(size, stream(s)) {
                    Ok(p) => {
                        if size == 0 {
                            assert_eq!(p, 0, "{what}: a zero-size allocation has no pointer");
                        } else {
                            let end = p.checked_add(size).unwrap_or_else(|| {
                                panic!("{what}: [{p:#x}, +{size}) wraps around")
                            });
                            assert_ne!(p, 0, "{what}: null pointer");
                            if let Some((&q, &qend)) = live.range(..end).next_back() {
                                assert!(
                                    qend <= p,
                                    "{what}: [{p:#x}, {end:#x}) overlaps [{q:#x}, {qend:#x})"
                                );
                            }
                            live.insert(p, end);
                        }
                        Ok(())
                    }
                    Err(e) => {
                        assert_eq!(
                            allocated(&a).0,
                            count_before,
                            "{what}: a failed allocation changed the allocations"
                        );
                        Err(e)
                    }
                }
            }
            Op::Free { pick, bogus } => {
                let target = live.keys().nth(pick as usize % live.len().max(1)).copied();
                match (target, bogus) {
                    (Some(p), false) => {
                        let r = a.free(p);
                        assert!(r.is_ok(), "{what}: freeing a live allocation failed: {r:?}");
                        live.remove(&p);
                        Ok(())
                    }
                    (t, _) => {
                        let p = t.map_or(0xdead_0000, |p| p + 1);
                        let r = a.free(p);
                        assert!(
                            r.is_err(),
                            "{what}: freeing {p:#x}, not an allocation, succeeded"
                        );
                        r
                    }
                }
            }
            Op::RecordStream { pick, stream: s } => {
                match live.keys().nth(pick as usize % live.len().max(1)) {
                    Some(&p) => a.record_stream(p, stream(s)),
                    None => {
                        let r = a.record_stream(0xbad0_0000, stream(s));
                        assert!(
                            r.is_err(),
                            "{what}: record_stream of no allocation succeeded"
                        );
                        r
                    }
                }
            }
            Op::EmptyCache => a.empty_cache(),
            Op::SetFraction { percent } => {
                let r = a.set_memory_fraction(f64::from(percent) / 100.0);
                assert_eq!(r.is_err(), percent > 100, "{what}: {r:?}");
                r
            }
        };
        check(&a, &what);
        if let Err(e) = result {
            let memory = e.is_out_of_memory() || matches!(e, AllocError::Device(_));
            if !memory {
                assert_eq!(
                    fingerprint(&a),
                    before,
                    "{what}: the failed call ({e}) changed the allocator"
                );
            }
        }
    }
}

/// The fuzz target: decodes `data` ([`decode_ops`]) and runs it ([`run_ops`]).
pub fn allocator_ops(data: &[u8]) {
    let (conf, capacity, ops) = decode_ops(data);
    run_ops(conf_at(conf), capacity, &ops);
}
