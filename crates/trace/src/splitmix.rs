//! The one pseudo-random generator of synthetic traces (`cachalot bench`'s generated
//! workloads, the random traces the oracle tests replay): SplitMix64 (Steele, Lea and
//! Flood, "Fast splittable pseudorandom number generators", 2014), with the constants of its
//! published reference code. Deterministic on every platform, so a seed names a trace.

/// A SplitMix64 generator; the seed is the initial state.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator whose sequence `seed` names.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Below `n` (`n` > 0; by remainder, so very slightly uneven for large `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty), each equally likely.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Log-uniform in [lo, hi) (`lo` > 0): as many sizes from 1 to 2 KiB as from 1 to 2 MiB.
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        (l + self.unit() * (h - l)).exp() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of the reference implementation for seed 1234567.
        let mut r = SplitMix64::new(1234567);
        let want = [
            6457827717110365317,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn ranges_hold() {
        let mut r = SplitMix64::new(7);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            let s = r.log_uniform(512, 1 << 20);
            assert!((512..1 << 20).contains(&s), "{s}");
            assert!([3, 5].contains(&r.pick(&[3, 5])));
        }
        assert!(!r.chance(0));
        assert!(r.chance(100));
    }
}
