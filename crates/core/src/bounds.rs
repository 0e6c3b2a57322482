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
/// `None`: it might be served (or the backend is not the caching allocator).
///
/// - A size that rounding would take past 2^64 is an out-of-memory error before anything is
///   touched, with no retry.
/// - Otherwise every block that could serve it (a free block, a new segment, mapped
///   expandable pages) holds at least `size` bytes of device memory, so a `size` above the
///   capacity is never served: the cache search finds nothing and every `alloc_block` fails,
///   so malloc walks its whole ladder and the last step, `alloc_block` as a retry, counts one
///   retry. The exception is `throw_on_cudamalloc_oom`, which can stop the ladder at its
///   first step; there no retry is promised.
pub fn doomed_request(size: u64, capacity: u64, conf: &AllocConf) -> Option<Doomed> {
    if conf.backend != Backend::Native {
        return None;
    }
    if crate::size::request_sizes(size, conf).is_none() {
        return Some(Doomed {
            ooms: 1,
            retries: 0,
        });
    }
    (size > capacity).then_some(Doomed {
        ooms: 1,
        retries: u64::from(!conf.throw_on_cudamalloc_oom),
    })
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
