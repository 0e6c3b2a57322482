//! The seven statistics that every `malloc` and `free` changes (`allocation`,
//! `allocated_bytes`, `active`, `active_bytes`, `requested_bytes`, `inactive_split`,
//! `inactive_split_bytes`), kept in a form that is cheap to update and turned into torch's
//! four numbers per [`Stat`] only when someone reads them.
//!
//! A [`Tally`] holds, per pool kind (small, large), the exact `current` and its `peak` as
//! `u64`, the sum of increases (`allocated`) as `u128`, and the aggregate's peak. The rest is
//! derived:
//!
//! - a pool's `freed` is `allocated − current + base`, `base` being `current` at the last
//!   `reset_accumulated` (every decrease lowers `current` by what it adds to `freed`);
//! - the aggregate's `current`, `allocated` and `freed` are the sums of the two pools' (torch
//!   changes the aggregate by exactly what it changes the pool by).
//!
//! So a decrease is one subtraction, and an increase three additions and two comparisons,
//! where [`Stat`] took two saturating operations per entry and a decrease touched two entries.
//!
//! Why these widths are exact: each of the seven counts blocks or bytes of one device's
//! memory (live allocations, active or inactive blocks, their bytes, the bytes requested for
//! them), so the aggregate's true value, and with it each pool's, its peak and the sum of the
//! two, lies in `0 ..= u64::MAX` after every update (a merge applies its net change as one
//! update). The sums of increases grow without that bound, but by less
//! than 2^64 per update over fewer than 2^63 updates: below 2^127. Past the `int64_t` range of
//! torch's counters (devices of 2^63 bytes and more) the values read out saturate, computed
//! from the exact ones.

use crate::stats::{Stat, StatArray};

/// `v` as torch's `int64_t` counter, saturated at its range.
#[inline]
fn clamp64(v: u128) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Raises `peak` to `value` if that is higher. A peak is rarely passed once a workload has
/// warmed up, so this is a compare and a branch taken seldom, not a select and a store on
/// every increase.
#[inline(always)]
fn raise(peak: &mut u64, value: u64) {
    if value > *peak {
        set(peak, value);
    }
}

#[cold]
#[inline(never)]
fn set(peak: &mut u64, value: u64) {
    *peak = value;
}

/// One pool kind's counter.
#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    current: u64,
    peak: u64,
    /// Sum of increases since the last `reset_accumulated`.
    allocated: u128,
    /// `current` at the last `reset_accumulated`.
    base: u64,
}

impl Counter {
    /// Sum of decreases since the last `reset_accumulated` (never negative: `current` is
    /// `base` plus the increases less the decreases).
    #[inline]
    fn freed(&self) -> u128 {
        (self.allocated + u128::from(self.base)).wrapping_sub(u128::from(self.current))
    }
}

/// A [`StatArray`] as malloc and free update it (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    /// Small pool, large pool.
    pools: [Counter; 2],
    /// The aggregate's peak.
    all_peak: u64,
}

impl Tally {
    /// Adds `n` to the pool kind and the aggregate, raising their peaks.
    #[inline]
    pub fn increase(&mut self, is_small: bool, n: u64) {
        let p = &mut self.pools[usize::from(!is_small)];
        p.current = p.current.wrapping_add(n);
        p.allocated = p.allocated.wrapping_add(u128::from(n));
        raise(&mut p.peak, p.current);
        let all = self.all_current();
        raise(&mut self.all_peak, all);
    }

    /// Subtracts `n` from the pool kind (and so from the aggregate).
    #[inline]
    pub fn decrease(&mut self, is_small: bool, n: u64) {
        let p = &mut self.pools[usize::from(!is_small)];
        p.current = p.current.wrapping_sub(n);
    }

    /// The aggregate's current value.
    #[inline]
    pub fn all_current(&self) -> u64 {
        self.pools[0].current.wrapping_add(self.pools[1].current)
    }

    /// `reset_peak`: each peak becomes its current value.
    pub fn reset_peak(&mut self) {
        for p in &mut self.pools {
            p.peak = p.current;
        }
        self.all_peak = self.all_current();
    }

    /// `reset_accumulated`: forget the sums of increases and decreases.
    pub fn reset_accumulated(&mut self) {
        for p in &mut self.pools {
            p.allocated = 0;
            p.base = p.current;
        }
    }

    /// The counters as torch reports them: aggregate, small pool, large pool.
    pub fn to_array(self) -> StatArray {
        let stat = |current: u64, peak: u64, allocated: u128, freed: u128| Stat {
            current: clamp64(u128::from(current)),
            peak: clamp64(u128::from(peak)),
            allocated: clamp64(allocated),
            freed: clamp64(freed),
        };
        let [s, l] = self.pools;
        StatArray([
            stat(
                self.all_current(),
                self.all_peak,
                s.allocated + l.allocated,
                s.freed() + l.freed(),
            ),
            stat(s.current, s.peak, s.allocated, s.freed()),
            stat(l.current, l.peak, l.allocated, l.freed()),
        ])
    }
}

/// The seven statistics of the hot path.
#[derive(Clone, Debug, Default)]
pub(crate) struct HotStats {
    pub allocation: Tally,
    pub allocated_bytes: Tally,
    pub active: Tally,
    pub active_bytes: Tally,
    pub requested_bytes: Tally,
    pub inactive_split: Tally,
    pub inactive_split_bytes: Tally,
}

impl HotStats {
    fn each(&mut self, f: impl Fn(&mut Tally)) {
        for t in [
            &mut self.allocation,
            &mut self.allocated_bytes,
            &mut self.active,
            &mut self.active_bytes,
            &mut self.requested_bytes,
            &mut self.inactive_split,
            &mut self.inactive_split_bytes,
        ] {
            f(t);
        }
    }

    /// `reset_peak_memory_stats` for these seven.
    pub fn reset_peak(&mut self) {
        self.each(Tally::reset_peak);
    }

    /// `reset_accumulated_memory_stats` for these seven.
    pub fn reset_accumulated(&mut self) {
        self.each(Tally::reset_accumulated);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Increase(bool, u64),
        /// A decrease by this share (per mille) of the pool's current value: counters never
        /// go below zero.
        Decrease(bool, u64),
        ResetPeak,
        ResetAccumulated,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<bool>(), 0u64..1 << 40).prop_map(|(s, n)| Op::Increase(s, n)),
            3 => (any::<bool>(), 0u64..=1000).prop_map(|(s, n)| Op::Decrease(s, n)),
            1 => Just(Op::ResetPeak),
            1 => Just(Op::ResetAccumulated),
        ]
    }

    proptest! {
        /// Within torch's int64 range a tally reads exactly as a `StatArray` updated the
        /// same way.
        #[test]
        fn reads_as_a_stat_array(ops in proptest::collection::vec(op(), 0..300)) {
            let mut tally = Tally::default();
            let mut array = StatArray::default();
            for op in ops {
                let now = |a: &StatArray, s: bool| a.0[if s { 1 } else { 2 }].current as u64;
                match op {
                    Op::Increase(s, n) => {
                        tally.increase(s, n);
                        array.increase(s, n);
                    }
                    Op::Decrease(s, share) => {
                        let n = now(&array, s) / 1000 * share;
                        tally.decrease(s, n);
                        array.decrease(s, n);
                    }
                    Op::ResetPeak => {
                        tally.reset_peak();
                        array.0.iter_mut().for_each(Stat::reset_peak);
                    }
                    Op::ResetAccumulated => {
                        tally.reset_accumulated();
                        array.0.iter_mut().for_each(Stat::reset_accumulated);
                    }
                }
                prop_assert_eq!(tally.to_array(), array);
            }
        }
    }

    /// Past 2^63 the numbers read out saturate and never wrap, up to a device of 2^64 − 1
    /// bytes, and the sums of increases keep counting past 2^64.
    #[test]
    fn saturates_past_int64() {
        let mut t = Tally::default();
        t.increase(false, 1 << 63);
        t.increase(true, (1 << 63) - 1);
        let a = t.to_array();
        assert_eq!(a.all().current, i64::MAX);
        assert_eq!(a.all().peak, i64::MAX);
        assert_eq!(a.0[2].allocated, i64::MAX);
        assert_eq!(a.0[1].current, i64::MAX);
        t.decrease(false, 1 << 63);
        t.decrease(true, (1 << 63) - 1);
        let a = t.to_array();
        assert_eq!(a.all().current, 0);
        assert_eq!(a.all().freed, i64::MAX);
        assert_eq!(a.all().peak, i64::MAX);
        for _ in 0..3 {
            t.increase(false, u64::MAX);
            t.decrease(false, u64::MAX);
        }
        t.increase(false, 7);
        let l = t.to_array().0[2];
        assert_eq!((l.current, l.allocated, l.freed), (7, i64::MAX, i64::MAX));
        t.reset_accumulated();
        t.decrease(false, 5);
        let l = t.to_array().0[2];
        assert_eq!((l.current, l.allocated, l.freed), (2, 0, 5));
    }
}
