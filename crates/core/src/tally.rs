//! The seven statistics that every `malloc` and `free` changes (`allocation`,
//! `allocated_bytes`, `active`, `active_bytes`, `requested_bytes`, `inactive_split`,
//! `inactive_split_bytes`), kept in a form that is cheap to update and turned into torch's
//! four numbers per [`Stat`] only when someone reads them.
//!
//! A [`Tally`] holds, per pool kind (small, large), the exact `current`, its `peak` and the
//! sum of increases (`allocated`) as `i128`, and the aggregate's peak. The rest is derived:
//!
//! - a pool's `freed` is `allocated − current + base`, `base` being `current` at the last
//!   `reset_accumulated` (every decrease lowers `current` by what it adds to `freed`);
//! - the aggregate's `current`, `allocated` and `freed` are the sums of the two pools' (torch
//!   changes the aggregate by exactly what it changes the pool by).
//!
//! So a decrease is one subtraction, and an increase three additions and two maxima, where
//! [`Stat`] took two saturating operations per entry and a decrease touched two entries.
//!
//! The arithmetic wraps explicitly and never does: every amount is below 2^64 and a process
//! makes fewer than 2^63 updates, so every value stays below 2^127 in magnitude. Past the
//! `int64_t` range of torch's counters (devices of 2^63 bytes and more) the values read out
//! saturate, computed from the exact ones.

use crate::stats::{Stat, StatArray};

/// `v` as torch's `int64_t` counter, saturated at its range.
#[inline]
fn clamp64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Raises `peak` to `value` if that is higher. A peak is rarely passed once a workload has
/// warmed up, so this is a compare and a branch taken seldom, not a select and two stores on
/// every increase.
#[inline(always)]
fn raise(peak: &mut i128, value: i128) {
    if value > *peak {
        set(peak, value);
    }
}

#[cold]
#[inline(never)]
fn set(peak: &mut i128, value: i128) {
    *peak = value;
}

/// One pool kind's counter.
#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    current: i128,
    peak: i128,
    /// Sum of increases since the last `reset_accumulated`.
    allocated: i128,
    /// `current` at the last `reset_accumulated`.
    base: i128,
}

impl Counter {
    #[inline]
    fn freed(&self) -> i128 {
        self.allocated
            .wrapping_sub(self.current)
            .wrapping_add(self.base)
    }
}

/// A [`StatArray`] as malloc and free update it (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    /// Small pool, large pool.
    pools: [Counter; 2],
    /// The aggregate's peak.
    all_peak: i128,
}

impl Tally {
    /// Adds `n` to the pool kind and the aggregate, raising their peaks.
    #[inline]
    pub fn increase(&mut self, is_small: bool, n: u64) {
        let n = i128::from(n);
        let p = &mut self.pools[usize::from(!is_small)];
        p.current = p.current.wrapping_add(n);
        p.allocated = p.allocated.wrapping_add(n);
        raise(&mut p.peak, p.current);
        let all = self.all_current();
        raise(&mut self.all_peak, all);
    }

    /// Subtracts `n` from the pool kind (and so from the aggregate).
    #[inline]
    pub fn decrease(&mut self, is_small: bool, n: u64) {
        let p = &mut self.pools[usize::from(!is_small)];
        p.current = p.current.wrapping_sub(i128::from(n));
    }

    /// Applies a signed change (the net change of a merge).
    #[inline]
    pub fn apply(&mut self, is_small: bool, delta: i128) {
        if delta >= 0 {
            let p = &mut self.pools[usize::from(!is_small)];
            p.current = p.current.wrapping_add(delta);
            p.allocated = p.allocated.wrapping_add(delta);
            raise(&mut p.peak, p.current);
            let all = self.all_current();
            raise(&mut self.all_peak, all);
        } else {
            let p = &mut self.pools[usize::from(!is_small)];
            p.current = p.current.wrapping_add(delta);
        }
    }

    /// The aggregate's current value.
    #[inline]
    pub fn all_current(&self) -> i128 {
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
        let stat = |current: i128, peak: i128, allocated: i128, freed: i128| Stat {
            current: clamp64(current),
            peak: clamp64(peak),
            allocated: clamp64(allocated),
            freed: clamp64(freed),
        };
        let [s, l] = self.pools;
        StatArray([
            stat(
                self.all_current(),
                self.all_peak,
                s.allocated.wrapping_add(l.allocated),
                s.freed().wrapping_add(l.freed()),
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
        Decrease(bool, u64),
        Apply(bool, i64),
        ResetPeak,
        ResetAccumulated,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<bool>(), 0u64..1 << 40).prop_map(|(s, n)| Op::Increase(s, n)),
            3 => (any::<bool>(), 0u64..1 << 40).prop_map(|(s, n)| Op::Decrease(s, n)),
            2 => (any::<bool>(), -(1i64 << 40)..1 << 40).prop_map(|(s, d)| Op::Apply(s, d)),
            1 => Just(Op::ResetPeak),
            1 => Just(Op::ResetAccumulated),
        ]
    }

    proptest! {
        /// Within torch's int64 range a tally reads exactly as a `StatArray` updated the
        /// same way (decreases may take a counter below zero: the bookkeeping is the same).
        #[test]
        fn reads_as_a_stat_array(ops in proptest::collection::vec(op(), 0..300)) {
            let mut tally = Tally::default();
            let mut array = StatArray::default();
            for op in ops {
                match op {
                    Op::Increase(s, n) => {
                        tally.increase(s, n);
                        array.increase(s, n);
                    }
                    Op::Decrease(s, n) => {
                        tally.decrease(s, n);
                        array.decrease(s, n);
                    }
                    Op::Apply(s, d) => {
                        tally.apply(s, i128::from(d));
                        array.apply(s, d);
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

    /// Past 2^63 the numbers read out saturate and never wrap.
    #[test]
    fn saturates_past_int64() {
        let mut t = Tally::default();
        t.increase(false, u64::MAX);
        t.increase(true, u64::MAX);
        let a = t.to_array();
        assert_eq!(a.all().current, i64::MAX);
        assert_eq!(a.all().peak, i64::MAX);
        assert_eq!(a.0[2].allocated, i64::MAX);
        t.decrease(false, u64::MAX);
        t.decrease(true, u64::MAX);
        let a = t.to_array();
        assert_eq!(a.all().current, 0);
        assert_eq!(a.all().freed, i64::MAX);
        assert_eq!(a.all().peak, i64::MAX);
    }
}
