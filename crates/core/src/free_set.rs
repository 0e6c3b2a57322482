//! The free set of one pool: torch 2.15's single set ordered by (stream, size, segment
//! creation number, address) — `BlockComparatorSizeCounterAddress` — stored so that the
//! operations the allocator makes on every request cost a few dozen instructions.
//!
//! ```text
//!   FreeSet ── stream id ──► StreamSet (one per stream; a short list, or a hash past 8)
//!   StreamSet: 976 size classes (exact below 16 bytes, then 16 per power of two), in size order
//!              bitmap of non-empty classes (16 words + a summary word) to skip empty ones
//!   class:     one sorted vector of entries (most hold none or one); past 128 entries,
//!              sorted chunks of at most 64 (a two-level list, cheap to keep sorted when a
//!              class holds thousands)
//!   entry:     (size, segment creation number, address, block id), 24 bytes
//! ```
//!
//! Classes partition sizes in increasing order, so walking the classes and each class's
//! sorted entries in order walks the stream in torch's order: a search returns the block
//! torch's `lower_bound` does. A search yields a [`Slot`]; removing at it needs no second
//! search. An emptied class keeps its vector's capacity, so refilling it does not allocate
//! and an insert into an empty class is a store and a bitmap bit.

use rustc_hash::FxHashMap;

use crate::block::BlockId;

/// Free-set key within one stream: (size, segment creation number, address).
pub(crate) type SizeKey = (u64, u32, u64);

/// Entries a class holds in one vector before it is cut into chunks (fewer in unit tests,
/// so that classes are cut often).
const FLAT_MAX: usize = if cfg!(test) { 6 } else { 128 };
/// Entries per chunk of a chunked class before the chunk splits in two.
const CHUNK: usize = if cfg!(test) { 4 } else { 64 };
/// A chunk this short after a removal merges with its successor if both fit in one.
const CHUNK_LOW: usize = CHUNK / 4;
/// Number of size classes: 16 exact classes, then 16 per power of two from 16 to 2^63.
const CLASSES: usize = 976;
/// Words in the class bitmap.
const WORDS: usize = CLASSES.div_ceil(64);
/// Streams kept in a short list before an index by hash is built.
const LINEAR_STREAMS: usize = 8;

/// The size class of `size`: sizes below 16 have their own class; above, each power of two
/// is cut in 16 equal parts. Monotonic in `size`.
#[inline]
fn class_of(size: u64) -> usize {
    if size < 16 {
        return size as usize;
    }
    let e = 63 - size.leading_zeros() as usize; // ≥ 4
    let sub = ((size >> (e - 4)) & 15) as usize;
    (e - 3) * 16 + sub
}

/// One free block as the set stores it.
#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    ptr: u64,
    segment_id: u32,
    id: BlockId,
}

impl Entry {
    #[inline]
    fn key(&self) -> SizeKey {
        (self.size, self.segment_id, self.ptr)
    }
}

/// Where an entry lies in its [`FreeSet`], as returned by a search; valid until the set
/// changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    set: u32,
    chunk: u32,
    class: u16,
    index: u16,
}

/// What [`FreeSet::take_first_at_or_after`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum First {
    /// The block, removed from the set.
    Taken(BlockId),
    /// The block, refused and left in the set at the slot.
    Kept(Slot, BlockId),
}

/// The entries of one size class, sorted: one vector, or (past [`FLAT_MAX`] entries) sorted
/// chunks, which stay chunked.
#[derive(Debug, Clone)]
enum Class {
    Flat(Vec<Entry>),
    Chunked(Vec<Vec<Entry>>),
}

impl Default for Class {
    fn default() -> Self {
        Class::Flat(Vec::new())
    }
}

impl Class {
    /// Chunk `ci` (the vector itself for a flat class); empty past the end.
    #[inline]
    fn chunk(&self, ci: usize) -> &[Entry] {
        match self {
            Class::Flat(v) if ci == 0 => v,
            Class::Flat(_) => &[],
            Class::Chunked(chunks) => chunks.get(ci).map_or(&[], Vec::as_slice),
        }
    }

    /// The number of chunks (1 for a flat class).
    #[inline]
    fn chunks(&self) -> usize {
        match self {
            Class::Flat(_) => 1,
            Class::Chunked(chunks) => chunks.len(),
        }
    }

    /// The position of the first entry not less than `key`: (chunk, index); the index may be
    /// one past the end of the last chunk.
    #[inline]
    fn lower_bound(&self, key: SizeKey) -> (usize, usize) {
        match self {
            Class::Flat(v) => (0, v.partition_point(|x| x.key() < key)),
            Class::Chunked(chunks) => chunked_lower_bound(chunks, key),
        }
    }

    /// The position of the first entry of at least `size` bytes, if the class has one.
    #[inline]
    fn first_at_or_after(&self, size: u64) -> Option<(usize, usize)> {
        match self {
            Class::Flat(v) => match v.last() {
                Some(last) if last.size >= size => Some((0, v.partition_point(|e| e.size < size))),
                _ => None,
            },
            Class::Chunked(chunks) => {
                let (ci, i) = chunked_lower_bound(chunks, (size, 0, 0));
                (i < chunks[ci].len()).then_some((ci, i))
            }
        }
    }

    /// Inserts `e` in order; returns whether the class was empty.
    #[inline]
    fn insert(&mut self, e: Entry) -> bool {
        match self {
            Class::Flat(v) if v.is_empty() => {
                // The usual case: a store.
                v.push(e);
                true
            }
            Class::Flat(v) => {
                let key = e.key();
                let i = v.partition_point(|x| x.key() < key);
                debug_assert!(
                    v.get(i).is_none_or(|x| x.key() != key),
                    "block already in the free set"
                );
                v.insert(i, e);
                if v.len() > FLAT_MAX {
                    self.cut();
                }
                false
            }
            Class::Chunked(chunks) => insert_chunked(chunks, e),
        }
    }

    /// Cuts an over-full flat class into chunks of half a chunk each.
    #[cold]
    #[inline(never)]
    fn cut(&mut self) {
        if let Class::Flat(v) = self {
            let chunks = v.chunks(CHUNK / 2).map(<[Entry]>::to_vec).collect();
            *self = Class::Chunked(chunks);
        }
    }

    /// Removes entry `i` of chunk `ci`; returns its block and whether the class is now empty.
    #[inline(always)]
    fn remove_at(&mut self, ci: usize, i: usize) -> (BlockId, bool) {
        match self {
            Class::Flat(v) => (take(v, i).id, v.is_empty()),
            Class::Chunked(chunks) => {
                let (e, empty) = remove_chunked(chunks, ci, i);
                (e.id, empty)
            }
        }
    }
}

/// Removes and returns entry `i` of a sorted vector. The last entry is popped: `Vec::remove`
/// calls `memmove` even when nothing follows it, and most classes hold one entry.
#[inline(always)]
fn take(v: &mut Vec<Entry>, i: usize) -> Entry {
    if i + 1 == v.len() {
        v.pop().expect("an entry at i")
    } else {
        v.remove(i)
    }
}

/// The position of the first entry not less than `key` in a chunked class: (chunk, index);
/// the index may be one past the end of the last chunk.
#[inline]
fn chunked_lower_bound(chunks: &[Vec<Entry>], key: SizeKey) -> (usize, usize) {
    let mut ci = chunks.partition_point(|ch| ch.last().is_some_and(|e| e.key() < key));
    if ci == chunks.len() {
        ci -= 1;
    }
    (ci, chunks[ci].partition_point(|e| e.key() < key))
}

/// Inserts `e` into a chunked class, in order; returns whether the class was empty.
#[cold]
#[inline(never)]
fn insert_chunked(chunks: &mut Vec<Vec<Entry>>, e: Entry) -> bool {
    let key = e.key();
    let was_empty = chunks.len() == 1 && chunks[0].is_empty();
    let (ci, i) = chunked_lower_bound(chunks, key);
    let chunk = &mut chunks[ci];
    debug_assert!(
        chunk.get(i).is_none_or(|x| x.key() != key),
        "block already in the free set"
    );
    chunk.insert(i, e);
    if chunk.len() > CHUNK {
        let upper = chunk.split_off(CHUNK / 2);
        chunks.insert(ci + 1, upper);
    }
    was_empty
}

/// Removes entry `i` of chunk `ci` of a chunked class; returns it and whether the class is
/// now empty. A chunk left short merges with its successor if both fit in one; an empty
/// chunk goes, except the class's last.
#[cold]
#[inline(never)]
fn remove_chunked(chunks: &mut Vec<Vec<Entry>>, ci: usize, i: usize) -> (Entry, bool) {
    let chunk = &mut chunks[ci];
    let e = take(chunk, i);
    let n = chunk.len();
    if n == 0 && chunks.len() > 1 {
        chunks.remove(ci);
    } else if n < CHUNK_LOW && ci + 1 < chunks.len() && n + chunks[ci + 1].len() <= CHUNK {
        let next = chunks.remove(ci + 1);
        chunks[ci].extend_from_slice(&next);
    }
    (e, chunks.len() == 1 && chunks[0].is_empty())
}

/// The free blocks of one stream, in size classes.
#[derive(Debug, Clone)]
struct StreamSet {
    /// Bit `c` set iff class `c` holds an entry.
    bitmap: [u64; WORDS],
    /// Bit `w` set iff `bitmap[w]` is non-zero.
    summary: u32,
    /// Classes by number, grown up to the largest class used.
    classes: Vec<Class>,
}

impl StreamSet {
    fn new() -> Self {
        StreamSet {
            bitmap: [0; WORDS],
            summary: 0,
            classes: Vec::new(),
        }
    }

    /// Chunk `ci` of class `c` (empty past the classes grown so far).
    #[inline]
    fn chunk(&self, c: usize, ci: usize) -> &[Entry] {
        self.classes.get(c).map_or(&[], |class| class.chunk(ci))
    }

    #[inline]
    fn mark(&mut self, c: usize) {
        self.bitmap[c / 64] |= 1 << (c % 64);
        self.summary |= 1 << (c / 64);
    }

    #[inline]
    fn unmark(&mut self, c: usize) {
        let w = c / 64;
        self.bitmap[w] &= !(1 << (c % 64));
        if self.bitmap[w] == 0 {
            self.summary &= !(1 << w);
        }
    }

    /// The first non-empty class at or after `c`.
    #[inline]
    fn next_class(&self, c: usize) -> Option<usize> {
        if c >= CLASSES {
            return None;
        }
        let w = c / 64;
        let bits = self.bitmap[w] & (!0u64 << (c % 64));
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        let words = self.summary & (!0u32 << (w + 1));
        if words == 0 {
            return None;
        }
        let w = words.trailing_zeros() as usize;
        Some(w * 64 + self.bitmap[w].trailing_zeros() as usize)
    }

    /// The last non-empty class at or before `c`.
    #[inline]
    fn prev_class(&self, c: usize) -> Option<usize> {
        let w = c / 64;
        let bits = self.bitmap[w] & (!0u64 >> (63 - c % 64));
        if bits != 0 {
            return Some(w * 64 + 63 - bits.leading_zeros() as usize);
        }
        let words = self.summary & ((1u32 << w) - 1);
        if words == 0 {
            return None;
        }
        let w = 31 - words.leading_zeros() as usize;
        Some(w * 64 + 63 - self.bitmap[w].leading_zeros() as usize)
    }

    #[inline]
    fn insert(&mut self, e: Entry) {
        let c = class_of(e.size);
        if c >= self.classes.len() {
            self.grow_classes(c);
        }
        if self.classes[c].insert(e) {
            self.mark(c);
        }
    }

    /// Adds empty classes up to class `c`.
    #[cold]
    #[inline(never)]
    fn grow_classes(&mut self, c: usize) {
        self.classes.resize_with(c + 1, Class::default);
    }

    /// Removes entry `i` of chunk `ci` of class `c`; returns its block.
    #[inline(always)]
    fn remove_at(&mut self, c: usize, ci: usize, i: usize) -> BlockId {
        let (id, now_empty) = self.classes[c].remove_at(ci, i);
        if now_empty {
            self.unmark(c);
        }
        id
    }

    /// Removes the entry with `key` and block `id`; returns whether it was there.
    #[inline]
    fn remove(&mut self, key: SizeKey, id: BlockId) -> bool {
        let c = class_of(key.0);
        let Some(class) = self.classes.get_mut(c) else {
            return false;
        };
        let Class::Flat(v) = class else {
            return self.remove_chunked(c, key, id);
        };
        let i = if v.len() == 1 {
            0
        } else {
            v.partition_point(|x| x.key() < key)
        };
        match v.get(i) {
            Some(e) if e.id == id && e.key() == key => {}
            _ => return false,
        }
        take(v, i);
        if v.is_empty() {
            self.unmark(c);
        }
        true
    }

    /// [`StreamSet::remove`] from the chunked class `c`.
    #[cold]
    #[inline(never)]
    fn remove_chunked(&mut self, c: usize, key: SizeKey, id: BlockId) -> bool {
        let class = &self.classes[c];
        let (ci, i) = class.lower_bound(key);
        match class.chunk(ci).get(i) {
            Some(e) if e.id == id && e.key() == key => {
                self.remove_at(c, ci, i);
                true
            }
            _ => false,
        }
    }

    /// The position of the first entry of at least `size` bytes, if any: (class, chunk,
    /// index).
    #[inline]
    fn first_at_or_after(&self, size: u64) -> Option<(usize, usize, usize)> {
        let c = class_of(size);
        if let Some((ci, i)) = self.classes.get(c).and_then(|k| k.first_at_or_after(size)) {
            return Some((c, ci, i));
        }
        self.next_class(c + 1).map(|c| (c, 0, 0))
    }

    /// The best fit for `size` bytes, removed if `accept` takes its block (the set's index
    /// `s` goes into the slot of one kept).
    #[inline(always)]
    fn take_first(
        &mut self,
        s: u32,
        size: u64,
        accept: impl FnOnce(BlockId) -> bool,
    ) -> Option<First> {
        let (c, ci, i) = self.first_at_or_after(size)?;
        let id = self.chunk(c, ci).get(i)?.id;
        if !accept(id) {
            let slot = Slot {
                set: s,
                class: c as u16,
                chunk: ci as u32,
                index: i as u16,
            };
            return Some(First::Kept(slot, id));
        }
        self.remove_at(c, ci, i);
        Some(First::Taken(id))
    }

    /// The position just after the last entry of fewer than `size` bytes: (class, chunk,
    /// index) where the index counts the entries before it in that chunk.
    fn end_before(&self, size: u64) -> Option<(usize, usize, usize)> {
        let c = class_of(size);
        if let Some(class) = self.classes.get(c) {
            let (ci, i) = class.lower_bound((size, 0, 0));
            if i > 0 || ci > 0 {
                return Some((c, ci, i));
            }
        }
        let c = self.prev_class(c.checked_sub(1)?)?;
        let class = &self.classes[c];
        let ci = class.chunks() - 1;
        Some((c, ci, class.chunk(ci).len()))
    }
}

/// Every free block of one pool, in torch's order.
#[derive(Debug, Default, Clone)]
pub(crate) struct FreeSet {
    /// Stream ids, parallel to `sets`, in order of first use.
    streams: Vec<u64>,
    sets: Vec<StreamSet>,
    /// Index into `sets` by stream id, once there are more than [`LINEAR_STREAMS`].
    index: FxHashMap<u64, u32>,
    /// Indices into `sets`, by increasing stream id (torch's outermost key).
    order: Vec<u32>,
}

impl FreeSet {
    /// The set of `stream`, if it has had a free block.
    #[inline]
    fn find(&self, stream: u64) -> Option<u32> {
        if self.streams.len() <= LINEAR_STREAMS {
            self.streams
                .iter()
                .position(|&s| s == stream)
                .map(|i| i as u32)
        } else {
            self.index.get(&stream).copied()
        }
    }

    #[inline]
    fn find_or_add(&mut self, stream: u64) -> u32 {
        match self.find(stream) {
            Some(i) => i,
            None => self.add_stream(stream),
        }
    }

    /// Adds an empty set for `stream`; returns its index.
    #[cold]
    #[inline(never)]
    fn add_stream(&mut self, stream: u64) -> u32 {
        let i = self.sets.len() as u32;
        self.streams.push(stream);
        self.sets.push(StreamSet::new());
        if self.streams.len() > LINEAR_STREAMS {
            if self.index.is_empty() {
                self.index
                    .extend(self.streams.iter().enumerate().map(|(i, &s)| (s, i as u32)));
            } else {
                self.index.insert(stream, i);
            }
        }
        let at = self
            .order
            .partition_point(|&j| self.streams[j as usize] < stream);
        self.order.insert(at, i);
        i
    }

    /// Adds a free block.
    #[inline]
    pub fn insert(&mut self, stream: u64, key: SizeKey, id: BlockId) {
        let s = self.find_or_add(stream);
        self.sets[s as usize].insert(Entry {
            size: key.0,
            segment_id: key.1,
            ptr: key.2,
            id,
        });
    }

    /// Removes the block `id` stored under `key`; returns whether it was there.
    #[inline]
    pub fn remove(&mut self, stream: u64, key: SizeKey, id: BlockId) -> bool {
        match self.find(stream) {
            Some(s) => self.sets[s as usize].remove(key, id),
            None => false,
        }
    }

    /// Removes the block a search found at `slot` (the set unchanged since); returns its id.
    #[inline]
    pub fn remove_at(&mut self, slot: Slot) -> BlockId {
        self.sets[slot.set as usize].remove_at(
            slot.class as usize,
            slot.chunk as usize,
            slot.index as usize,
        )
    }

    /// The best fit for `size` bytes on `stream`, removed if `accept` takes its block: one
    /// search, no second one to remove what it found.
    #[inline(always)]
    pub fn take_first_at_or_after(
        &mut self,
        stream: u64,
        size: u64,
        accept: impl FnOnce(BlockId) -> bool,
    ) -> Option<First> {
        let s = self.find(stream)?;
        self.sets[s as usize].take_first(s, size, accept)
    }

    /// The free blocks of `stream` of at least `size` bytes, best fit first (torch's
    /// `lower_bound` on (stream, size), limited to the stream).
    #[inline]
    pub fn at_or_after(&self, stream: u64, size: u64) -> Forward<'_> {
        let found = self.find(stream).and_then(|s| {
            let set = &self.sets[s as usize];
            set.first_at_or_after(size).map(|pos| (s, set, pos))
        });
        match found {
            Some((s, set, (c, ci, i))) => Forward {
                set: Some(set),
                s,
                c,
                ci,
                i,
            },
            None => Forward {
                set: None,
                s: 0,
                c: 0,
                ci: 0,
                i: 0,
            },
        }
    }

    /// The free blocks of `stream` smaller than `size` bytes, largest first.
    pub fn before(&self, stream: u64, size: u64) -> Backward<'_> {
        let found = self.find(stream).and_then(|s| {
            let set = &self.sets[s as usize];
            set.end_before(size).map(|pos| (set, pos))
        });
        match found {
            Some((set, (c, ci, i))) => Backward {
                set: Some(set),
                c,
                ci,
                i,
            },
            None => Backward {
                set: None,
                c: 0,
                ci: 0,
                i: 0,
            },
        }
    }

    /// Every entry in torch's order: by stream id, then best fit.
    pub fn entries(&self) -> impl Iterator<Item = (u64, SizeKey, BlockId)> + '_ {
        self.order.iter().flat_map(move |&s| {
            let stream = self.streams[s as usize];
            self.sets[s as usize]
                .classes
                .iter()
                .flat_map(|class| (0..class.chunks()).flat_map(move |ci| class.chunk(ci)))
                .map(move |e| (stream, e.key(), e.id))
        })
    }
}

/// Walks one stream's free blocks upward from a search position.
pub(crate) struct Forward<'a> {
    set: Option<&'a StreamSet>,
    s: u32,
    c: usize,
    ci: usize,
    i: usize,
}

impl<'a> Iterator for Forward<'a> {
    type Item = (Slot, &'a BlockId);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let set = self.set?;
        loop {
            if let Some(e) = set.chunk(self.c, self.ci).get(self.i) {
                let slot = Slot {
                    set: self.s,
                    class: self.c as u16,
                    chunk: self.ci as u32,
                    index: self.i as u16,
                };
                self.i += 1;
                return Some((slot, &e.id));
            }
            if self.ci + 1 < set.classes[self.c].chunks() {
                self.ci += 1;
                self.i = 0;
                continue;
            }
            match set.next_class(self.c + 1) {
                Some(c) => {
                    self.c = c;
                    self.ci = 0;
                    self.i = 0;
                }
                None => {
                    self.set = None;
                    return None;
                }
            }
        }
    }
}

/// Walks one stream's free blocks downward from a search position.
pub(crate) struct Backward<'a> {
    set: Option<&'a StreamSet>,
    c: usize,
    ci: usize,
    /// Entries of chunk `ci` still to yield, counted from its start.
    i: usize,
}

impl<'a> Iterator for Backward<'a> {
    type Item = (SizeKey, &'a BlockId);

    fn next(&mut self) -> Option<Self::Item> {
        let set = self.set?;
        loop {
            if self.i > 0 {
                self.i -= 1;
                let e = &set.chunk(self.c, self.ci)[self.i];
                return Some((e.key(), &e.id));
            }
            if self.ci > 0 {
                self.ci -= 1;
                self.i = set.chunk(self.c, self.ci).len();
                continue;
            }
            match self.c.checked_sub(1).and_then(|c| set.prev_class(c)) {
                Some(c) => {
                    let class = &set.classes[c];
                    self.c = c;
                    self.ci = class.chunks() - 1;
                    self.i = class.chunk(self.ci).len();
                }
                None => {
                    self.set = None;
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
