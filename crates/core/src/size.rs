//! Size classes and rounding: how a request becomes a block size, a pool and a segment size.
//!
//! - A request is rounded to a multiple of [`MIN_BLOCK_SIZE`] (512 B), or to a power-of-two
//!   subdivision when `roundup_power2_divisions` asks for it ([`round_size`]).
//! - Rounded sizes up to [`SMALL_SIZE`] (1 MiB, inclusive) go to the small pool, the rest to the
//!   large pool.
//! - A cache miss asks the device for a segment of [`allocation_size`]: 2 MiB for the small
//!   pool, the large segment size (20 MiB) for requests under [`MIN_LARGE_ALLOC`], else the
//!   request rounded up to 2 MiB.

use crate::config::{AllocConf, MIB};

/// Every block is a multiple of this many bytes (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest rounded request served by the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = MIB;
/// Segment size of the small pool, and its expandable page size (`kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// Requests below this get a whole large segment (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Requests of at least [`MIN_LARGE_ALLOC`] get segments rounded up to this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 * MIB;
/// Large-pool remainders must be bigger than this to be split off (`kSmallSize`).
pub const MAX_UNSPLIT_REMAINDER: u64 = MIB;

/// Whether the `max_split_size_mb` rules refuse a free block of `block` bytes for a request
/// rounded to `size` bytes (`get_free_block`): a normal request never takes an oversize block,
/// and an oversize request takes one only if it is less than `max_non_split_rounding_mb`
/// bigger. With `expandable_oversize_exempt` (cachalot's opt-in), expandable blocks are never
/// refused.
pub fn refuses_oversize(conf: &AllocConf, size: u64, block: u64, expandable: bool) -> bool {
    if expandable && conf.cachalot.expandable_oversize_exempt {
        return false;
    }
    let max_split = conf.max_split_size;
    (size < max_split && block >= max_split)
        || (size >= max_split && block >= size.saturating_add(conf.max_non_split_rounding_size))
}

/// Which `roundup_power2_divisions` slot covers `size`: slot *i* is [2^i MiB, 2^(i+1) MiB),
/// slot 0 also covers everything smaller and slot 15 everything bigger.
pub fn division_slot(size: u64) -> usize {
    let log = 63 - size.max(1).leading_zeros() as u64;
    (log.saturating_sub(20)).min(15) as usize
}

/// Rounds `size` up to the next of `divisions` equal steps between two powers of two; `None`
/// when that is past `u64::MAX`.
fn roundup_power2_next_division(size: u64, divisions: u64) -> Option<u64> {
    if size.is_power_of_two() {
        return Some(size);
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor.checked_mul(2);
    }
    let rounded_down = size & !(step - 1);
    if rounded_down == size {
        Some(size)
    } else {
        rounded_down.checked_add(step)
    }
}

/// `x` rounded up to a multiple of `m`, or `None` when that does not fit in a `u64`.
pub fn checked_round_up(x: u64, m: u64) -> Option<u64> {
    x.div_ceil(m).checked_mul(m)
}

/// The block size for a request of `size` bytes (`round_size`), or `None` when rounding goes
/// past `u64::MAX` (torch 2.15 wraps around there; cachalot reports an out-of-memory).
pub fn round_size(size: u64, conf: &AllocConf) -> Option<u64> {
    if size < MIN_BLOCK_SIZE {
        return Some(MIN_BLOCK_SIZE);
    }
    let divisions = conf.roundup_power2_divisions[division_slot(size)];
    if divisions > 1
        && size > MIN_BLOCK_SIZE.saturating_mul(divisions)
        && size <= conf.roundup_bypass_threshold
    {
        roundup_power2_next_division(size, divisions)
    } else {
        checked_round_up(size, MIN_BLOCK_SIZE)
    }
}

/// Whether a rounded size is served by the small pool.
#[inline]
pub fn is_small(rounded: u64) -> bool {
    rounded <= SMALL_SIZE
}

/// The size of a new segment for a rounded request (`get_allocation_size`), or `None` when
/// rounding up to [`ROUND_LARGE`] goes past `u64::MAX`.
pub fn allocation_size(rounded: u64, conf: &AllocConf) -> Option<u64> {
    if rounded <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if rounded < MIN_LARGE_ALLOC {
        Some(conf.large_segment_size)
    } else {
        checked_round_up(rounded, ROUND_LARGE)
    }
}

/// The block size and segment size of a request, or `None` when either overflows.
pub fn request_sizes(size: u64, conf: &AllocConf) -> Option<(u64, u64)> {
    let rounded = round_size(size, conf)?;
    Some((rounded, allocation_size(rounded, conf)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_size_ok(size: u64, c: &AllocConf) -> u64 {
        round_size(size, c).expect("no overflow")
    }

    fn conf_div(d: u64) -> AllocConf {
        AllocConf {
            roundup_power2_divisions: [d; 16],
            ..AllocConf::default()
        }
    }

    #[test]
    fn default_rounding_is_512_bytes() {
        let c = AllocConf::default();
        assert_eq!(round_size_ok(1, &c), 512);
        assert_eq!(round_size_ok(512, &c), 512);
        assert_eq!(round_size_ok(513, &c), 1024);
        assert_eq!(round_size_ok(13 * MIB + 1, &c), 13 * MIB + 512);
    }

    #[test]
    fn power2_divisions_match_the_spec_examples() {
        let c = conf_div(4);
        assert_eq!(round_size_ok(1000, &c), 1024);
        assert_eq!(round_size_ok(1200, &c), 1536);
        assert_eq!(round_size_ok(2049, &c), 2560);
        assert_eq!(round_size_ok(5000, &c), 5120);
        assert_eq!(round_size_ok(1025 * MIB, &c), 1280 * MIB);
        assert_eq!(round_size_ok(5 * MIB + 1, &c), 6 * MIB);
    }

    #[test]
    fn bypass_threshold_skips_power2_rounding_above_it() {
        let mut c = conf_div(4);
        c.roundup_bypass_threshold = 100 * MIB;
        assert_eq!(round_size_ok(5 * MIB + 1, &c), 6 * MIB);
        assert_eq!(round_size_ok(1025 * MIB, &c), 1025 * MIB);
    }

    #[test]
    fn segment_sizes_follow_the_three_classes() {
        let c = AllocConf::default();
        let seg = |r| allocation_size(r, &c).unwrap();
        assert_eq!(seg(512), 2 * MIB);
        assert_eq!(seg(MIB), 2 * MIB);
        assert_eq!(seg(MIB + 512), 20 * MIB);
        assert_eq!(seg(10 * MIB - 512), 20 * MIB);
        assert_eq!(seg(10 * MIB), 10 * MIB);
        assert_eq!(seg(13 * MIB + 512), 14 * MIB);
    }

    #[test]
    fn slots_cover_one_mib_to_thirty_two_gib() {
        assert_eq!(division_slot(1), 0);
        assert_eq!(division_slot(2 * MIB - 1), 0);
        assert_eq!(division_slot(2 * MIB), 1);
        assert_eq!(division_slot(256 * MIB), 8);
        assert_eq!(division_slot(u64::MAX), 15);
    }

    /// Issue #10, crash 1: with `roundup_power2_divisions:2`, 2^63 + 2^62 + 1 rounded to
    /// `rounded_down + step` = 2^64, which wrapped to a 0-byte block.
    #[test]
    fn rounding_past_u64_max_is_none_not_zero() {
        assert_eq!(round_size(13_835_058_055_282_163_713, &conf_div(2)), None);
        assert_eq!(round_size(u64::MAX, &AllocConf::default()), None);
        assert_eq!(round_size(u64::MAX - 510, &AllocConf::default()), None);
        assert_eq!(
            round_size(u64::MAX - 511, &AllocConf::default()),
            Some(u64::MAX - 511)
        );
    }

    /// torch 2.15's own arithmetic holds up to 2^64 - 2 MiB (the oracle makes two failing
    /// `cudaMalloc` calls there); one byte more and the segment size wraps.
    #[test]
    fn segment_size_overflow_boundary_is_two_mib_below_u64_max() {
        let c = AllocConf::default();
        let last = u64::MAX - 2 * MIB + 1;
        assert_eq!(request_sizes(last, &c), Some((last, last)));
        assert_eq!(request_sizes(last + 1, &c), None);
    }

    #[test]
    fn no_size_panics_or_wraps() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for d in [0, 2, 3, 4, 8, 64] {
            let c = conf_div(d);
            for k in 0..4000u64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let size = if k % 2 == 0 {
                    rng
                } else {
                    u64::MAX - (rng >> (k % 64))
                };
                if let Some((rounded, seg)) = request_sizes(size, &c) {
                    assert!(rounded >= size && seg >= rounded, "{size}: {rounded} {seg}");
                }
            }
        }
    }
}
