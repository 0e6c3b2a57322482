//! Lowest-address first fit over a set of maximal free intervals, coalesced on give-back.

use std::collections::BTreeMap;

/// Free intervals `start → length`; no two touch.
#[derive(Debug, Clone)]
pub(crate) struct FreeRanges {
    free: BTreeMap<u64, u64>,
}

impl FreeRanges {
    /// One free interval `[base, base + len)`.
    pub fn new(base: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(base, len);
        FreeRanges { free }
    }

    /// Takes `size` bytes at the lowest address aligned to `align` that fits.
    pub fn take(&mut self, size: u64, align: u64) -> Option<u64> {
        let (s, len, a) = self.free.iter().find_map(|(&s, &len)| {
            let a = s.div_ceil(align) * align;
            (a.checked_add(size)? <= s + len).then_some((s, len, a))
        })?;
        self.free.remove(&s);
        if a > s {
            self.free.insert(s, a - s);
        }
        if a + size < s + len {
            self.free.insert(a + size, s + len - a - size);
        }
        Some(a)
    }

    /// Returns `[ptr, ptr + size)`, merging with the neighbours it touches.
    pub fn give_back(&mut self, ptr: u64, size: u64) {
        let mut start = ptr;
        let mut len = size;
        if let Some((&ps, &pl)) = self.free.range(..ptr).next_back()
            && ps + pl == ptr
        {
            self.free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(nl) = self.free.remove(&(ptr + size)) {
            len += nl;
        }
        self.free.insert(start, len);
    }
}
