//! What a request does whatever the cache holds: facts about the malloc path that hold
//! before a replay runs, for those who want to bound its numbers (the advisor cuts a replay
//! short once its running numbers, plus what is certain to come, can no longer win).
//!
//! They restate `malloc.rs`, so they live here in the core, next to it, and
//! `crates/advisor/tests/bounds.rs` checks them against full replays.

use crate::config::{AllocConf, Backend};

/// What a request that cannot be served on the device adds to a replay's numbers for
/// certain: lower bounds, counted when it is replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Doomed {
    /// Out-of-memory errors (`num_ooms`).
    pub ooms: u64,
    /// Retries (`num_alloc_retries`) at least.
    pub retries: u64,
}

/// Whether a request of `size` bytes fails with out-of-memory on a device of `capacity`
/// bytes under `conf` whatever the cache and the device hold, and what it then counts.
/// `None`: it might be served, or no bound is given (the backend is not the caching
/// allocator, or the request is not above the capacity: a cheap test first, since a replay's
/// bound asks it of every request).
///
/// - A size above the capacity that rounding would take past 2^64 is an out-of-memory error
///   before anything is touched, with no retry.
/// - Otherwise every block that could serve it (a free block, a new segment, mapped
///   expandable pages) holds at least `size` bytes of device memory, so a `size` above the
///   capacity is never served: the cache search finds nothing and every `alloc_block` fails,
///   so malloc walks its whole ladder and the last step, `alloc_block` as a retry, counts one
///   retry. The exception is `throw_on_cudamalloc_oom`, which can stop the ladder at its
///   first step; there no retry is promised.
#[inline]
pub fn doomed_request(size: u64, capacity: u64, conf: &AllocConf) -> Option<Doomed> {
    if size <= capacity || conf.backend != Backend::Native {
        return None;
    }
    if crate::size::request_sizes(size, conf).is_none() {
        return Some(Doomed {
            ooms: 1,
            retries: 0,
        });
    }
    Some(Doomed {
        ooms: 1,
        retries: u64::from(!conf.throw_on_cudamalloc_oom),
    })
}

/// `allowed_memory_maximum` for a `per_process_memory_fraction` on a device of `total`
/// bytes: a fraction below 1 sets a limit, rounded to the nearest byte, halves away from
/// zero (torch 2.15; the oracle: 0.25 × (4k + 3) bytes allows k + 1); 1 sets none.
pub fn allowed_maximum(fraction: f64, total: u64) -> Option<u64> {
    (fraction < 1.0).then(|| (fraction * total as f64).round() as u64)
}

/// The reserved bytes above which garbage collection frees blocks, for a
/// `garbage_collection_threshold` under the limit `allowed` (truncated, as torch 2.15).
pub(crate) fn gc_threshold(threshold: f64, allowed: u64) -> u64 {
    (threshold * allowed as f64) as u64
}

/// How close a run of the caching allocator came to its per-process limit and its garbage
/// collection threshold, so that a run under another fraction or threshold can be known to
/// make the same decisions without being replayed ([`LimitFacts::alike`]).
///
/// The fraction's only effect is the check in `alloc_block` (refused when reserved memory
/// plus the new segment would pass the limit), and the threshold's only effect is garbage
/// collection at a cache miss, which frees nothing while reserved memory is at or below the
/// threshold. So two runs that differ only in these settings decide alike as long as every
/// check has the same outcome under both and garbage collection frees nothing in either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitFacts {
    /// The device's capacity.
    device_total: u64,
    /// The largest `reserved + segment size` an `alloc_block` asked for that the limit let
    /// through (every one, without a limit); 0 when none.
    max_passed: u64,
    /// The smallest one the limit refused; `u64::MAX` when none was.
    min_refused: u64,
    /// The most memory reserved at a cache miss, where garbage collection looks.
    max_reserved_at_miss: u64,
    /// Garbage collection found reserved memory above its threshold, or the limit or the
    /// configuration was changed during the run: these facts vouch for no other run.
    disturbed: bool,
}

impl LimitFacts {
    /// Nothing seen yet, on a device of `device_total` bytes.
    pub(crate) fn new(device_total: u64) -> Self {
        LimitFacts {
            device_total,
            max_passed: 0,
            min_refused: u64::MAX,
            max_reserved_at_miss: 0,
            disturbed: false,
        }
    }

    /// The check of `alloc_block`: whether the limit refuses a segment that would take
    /// reserved memory to `reserved_after` bytes. Recorded.
    #[inline]
    pub(crate) fn refuses(&mut self, reserved_after: u64, allowed: Option<u64>) -> bool {
        let refused = allowed.is_some_and(|a| reserved_after > a);
        if refused {
            self.min_refused = self.min_refused.min(reserved_after);
        } else {
            self.max_passed = self.max_passed.max(reserved_after);
        }
        refused
    }

    /// A cache miss with `reserved` bytes reserved.
    #[inline]
    pub(crate) fn miss(&mut self, reserved: u64) {
        self.max_reserved_at_miss = self.max_reserved_at_miss.max(reserved);
    }

    /// Garbage collection found reserved memory above its threshold, or the limit or the
    /// configuration changed.
    pub(crate) fn disturb(&mut self) {
        self.disturbed = true;
    }

    /// The facts of several runs on the same device (the parts of one workload): what holds
    /// for the result holds for each of them.
    pub fn merge(&self, other: &LimitFacts) -> LimitFacts {
        LimitFacts {
            device_total: self.device_total,
            max_passed: self.max_passed.max(other.max_passed),
            min_refused: self.min_refused.min(other.min_refused),
            max_reserved_at_miss: self.max_reserved_at_miss.max(other.max_reserved_at_miss),
            disturbed: self.disturbed || other.disturbed || self.device_total != other.device_total,
        }
    }

    /// Whether a run under `other` makes exactly the decisions (device calls, statistics,
    /// errors) that the run these facts come from made under `conf`: the two differ at most
    /// in `per_process_memory_fraction` and `garbage_collection_threshold`, garbage
    /// collection freed nothing here (and nothing was changed during the run), every `alloc_block` check would have had the same
    /// outcome under `other`'s limit, and `other`'s garbage collection, if on, would have
    /// found reserved memory at or below its threshold at every miss. Only for the caching
    /// allocator, and with `throw_on_cudamalloc_oom` off (it depends on there being no
    /// limit).
    pub fn alike(&self, conf: &AllocConf, other: &AllocConf) -> bool {
        let same_otherwise = AllocConf {
            per_process_memory_fraction: conf.per_process_memory_fraction,
            garbage_collection_threshold: conf.garbage_collection_threshold,
            last_allocator_settings: conf.last_allocator_settings.clone(),
            ..other.clone()
        } == *conf;
        if !same_otherwise
            || conf.backend != Backend::Native
            || conf.throw_on_cudamalloc_oom
            || self.disturbed
        {
            return false;
        }
        let allowed = allowed_maximum(other.per_process_memory_fraction, self.device_total);
        let checks_alike = match allowed {
            None => self.min_refused == u64::MAX,
            Some(a) => self.max_passed <= a && a < self.min_refused,
        };
        let gc_idle = match allowed {
            Some(a) if other.garbage_collection_threshold > 0.0 => {
                self.max_reserved_at_miss <= gc_threshold(other.garbage_collection_threshold, a)
            }
            _ => true,
        };
        checks_alike && gc_idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_above_the_device_or_past_rounding_are_doomed() {
        let conf = AllocConf::default();
        let gib = 1u64 << 30;
        assert_eq!(doomed_request(gib, 2 * gib, &conf), None);
        assert_eq!(doomed_request(2 * gib, 2 * gib, &conf), None);
        assert_eq!(
            doomed_request(2 * gib + 1, 2 * gib, &conf),
            Some(Doomed {
                ooms: 1,
                retries: 1
            })
        );
        assert_eq!(
            doomed_request(u64::MAX, 2 * gib, &conf),
            Some(Doomed {
                ooms: 1,
                retries: 0
            })
        );
        let throwing = AllocConf {
            throw_on_cudamalloc_oom: true,
            ..AllocConf::default()
        };
        assert_eq!(
            doomed_request(3 * gib, 2 * gib, &throwing).map(|d| d.retries),
            Some(0)
        );
        let async_backend = AllocConf {
            backend: Backend::CudaMallocAsync,
            ..AllocConf::default()
        };
        assert_eq!(doomed_request(3 * gib, 2 * gib, &async_backend), None);
    }
}
