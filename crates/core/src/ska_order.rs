//! The iteration order of c10's `ska::flat_hash_map`, for the one map whose order torch's
//! behaviour shows: `graph_pools_freeable`, which `release_cached_blocks` walks to free the
//! released pools' segments. The order of those `cudaFree`s is the order of this table.
//!
//! The table is Malte Skarupke's `sherwood_v3_table` as shipped in `c10/util/flat_hash_map.h`:
//! open addressing with Robin Hood insertion, Fibonacci hashing (`index = (k × 2^64/φ) >>
//! shift`), a maximum load factor of ½, power-of-two bucket counts, a probe limit of
//! `max(4, log2(buckets))` slots past a key's home, and backward-shift deletion. Keys are
//! hashed with `MempoolIdHash`: the pool id's first member if set, else its second. Only the
//! order is modelled: the set holds the keys, and iterating yields them slot by slot.

/// Fibonacci hashing's multiplier (2^64 / φ).
const FIBONACCI: u64 = 11_400_714_819_323_198_485;
/// The least probe limit (`detailv3::min_lookups`).
const MIN_LOOKUPS: u32 = 4;

/// One slot: empty, or a key and its distance from its home slot.
type Slot<K> = Option<(u32, K)>;

/// A set of keys in `ska::flat_hash_map`'s slot order.
#[derive(Clone, Debug)]
pub(crate) struct SkaOrder<K> {
    /// `buckets + max_lookups - 1` usable slots (the last one of torch's array is its end
    /// marker and holds nothing).
    slots: Vec<Slot<K>>,
    /// Bucket count: 0 for the empty default table, else a power of two.
    buckets: u64,
    max_lookups: u32,
    len: usize,
}

impl<K> Default for SkaOrder<K> {
    fn default() -> Self {
        SkaOrder {
            slots: Vec::new(),
            buckets: 0,
            max_lookups: MIN_LOOKUPS - 1,
            len: 0,
        }
    }
}

impl<K: Copy + PartialEq> SkaOrder<K> {
    fn home(&self, hash: u64) -> usize {
        let shift = 64 - self.buckets.trailing_zeros();
        (FIBONACCI.wrapping_mul(hash) >> shift) as usize
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: K) -> bool {
        self.slots.iter().flatten().any(|&(_, k)| k == key)
    }

    /// The keys in slot order: the order torch iterates the map in.
    pub fn iter(&self) -> impl Iterator<Item = K> + '_ {
        self.slots.iter().flatten().map(|&(_, k)| k)
    }

    /// Inserts `key` (hashed to `hash`); returns false if it was there.
    pub fn insert(&mut self, key: K, hash: &impl Fn(K) -> u64) -> bool {
        if self.buckets == 0 {
            self.grow(hash);
        }
        let mut i = self.home(hash(key));
        let mut dist = 0;
        while let Some(Some((d, k))) = self.slots.get(i) {
            if *d < dist {
                break;
            }
            if *k == key {
                return false;
            }
            i += 1;
            dist += 1;
        }
        self.insert_new(dist, i, key, hash);
        true
    }

    /// `emplace_new_key`: places `key`, `dist` slots past its home at slot `i`.
    fn insert_new(&mut self, mut dist: u32, mut i: usize, key: K, hash: &impl Fn(K) -> u64) {
        if i >= self.slots.len()
            || dist == self.max_lookups
            || (self.len + 1) as f64 > self.buckets as f64 * 0.5
        {
            self.grow(hash);
            self.insert(key, hash);
            return;
        }
        let Some((d0, k0)) = self.slots[i] else {
            self.slots[i] = Some((dist, key));
            self.len += 1;
            return;
        };
        // Robin Hood: the new key takes the slot, the one it displaces moves on.
        let result = i;
        self.slots[i] = Some((dist, key));
        let mut carried = k0;
        dist = d0 + 1;
        i += 1;
        loop {
            match self.slots.get(i).copied() {
                None => {
                    // Ran into the end marker: torch grows here too.
                    let (_, placed) = self.slots[result].expect("just placed");
                    self.slots[result] = Some((0, carried));
                    self.grow(hash);
                    self.insert(placed, hash);
                    return;
                }
                Some(None) => {
                    self.slots[i] = Some((dist, carried));
                    self.len += 1;
                    return;
                }
                Some(Some((d, k))) if d < dist => {
                    self.slots[i] = Some((dist, carried));
                    carried = k;
                    dist = d + 1;
                }
                Some(Some(_)) => {
                    dist += 1;
                    if dist == self.max_lookups {
                        // Put the carried key where the new one went and grow with the new one.
                        let (d, placed) = self.slots[result].expect("just placed");
                        self.slots[result] = Some((d, carried));
                        self.grow(hash);
                        self.insert(placed, hash);
                        return;
                    }
                }
            }
            i += 1;
        }
    }

    /// Removes `key`, shifting the keys after it back (`erase`).
    pub fn remove(&mut self, key: K) -> bool {
        let Some(mut i) = self
            .slots
            .iter()
            .position(|s| s.is_some_and(|(_, k)| k == key))
        else {
            return false;
        };
        self.slots[i] = None;
        self.len -= 1;
        while let Some(&Some((d, k))) = self.slots.get(i + 1) {
            if d == 0 {
                break;
            }
            self.slots[i] = Some((d - 1, k));
            self.slots[i + 1] = None;
            i += 1;
        }
        true
    }

    /// `grow`: doubles the bucket count (4 at least) and re-inserts the keys in slot order.
    fn grow(&mut self, hash: &impl Fn(K) -> u64) {
        let want = (2 * self.buckets)
            .max(4)
            .max((self.len as f64 / 0.5).ceil() as u64);
        let buckets = want.next_power_of_two().max(2);
        if buckets == self.buckets {
            return;
        }
        let max_lookups = MIN_LOOKUPS.max(buckets.trailing_zeros());
        let old = std::mem::replace(
            &mut self.slots,
            vec![None; (buckets + u64::from(max_lookups) - 1) as usize],
        );
        self.buckets = buckets;
        self.max_lookups = max_lookups;
        self.len = 0;
        for (_, k) in old.into_iter().flatten() {
            self.insert(k, hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(inserts: &[u64], removes: &[u64]) -> Vec<u64> {
        let mut s = SkaOrder::default();
        for &k in inserts {
            assert!(s.insert(k, &|k| k));
        }
        for &k in removes {
            assert!(s.remove(k));
        }
        s.iter().collect()
    }

    #[test]
    fn order_matches_what_torch_showed() {
        // Pools released in the order 3, 1, 2, 5, 4 were freed by one empty_cache in the
        // order 5, 2, 4, 1, 3 (oracle, torch 2.15).
        assert_eq!(order(&[3, 1, 2, 5, 4], &[]), [5, 2, 4, 1, 3]);
    }

    #[test]
    fn keys_survive_growth_and_removal() {
        let keys: Vec<u64> = (1..=200).collect();
        let mut s = SkaOrder::default();
        for &k in &keys {
            s.insert(k, &|k| k);
        }
        assert!(!s.insert(7, &|k| k));
        for k in (1..=200).step_by(3) {
            assert!(s.remove(k));
        }
        let mut got: Vec<u64> = s.iter().collect();
        got.sort_unstable();
        let want: Vec<u64> = keys.into_iter().filter(|k| (k - 1) % 3 != 0).collect();
        assert_eq!(got, want);
        assert!(!s.contains(1) && s.contains(2));
    }
}
