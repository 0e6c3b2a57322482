//! Which torch release reads a configuration how: the keys each of torch 2.4 … 2.15 accepts in
//! `PYTORCH_CUDA_ALLOC_CONF`, the values the older parsers reject, and the kinds of
//! configuration whose allocator decisions changed between releases.
//!
//! Everything else in `config` is torch 2.15's reading. This file answers the question an
//! older user has: "will *my* torch accept this line, and mean what 2.15 means by it?"
//! The table was read off each release's own `libc10.so`/`libc10_cuda.so` (the key names its
//! parser compares against, and its error texts) and checked with torch 2.9.1's and 2.15.0's
//! own parsers (`torch.cuda.memory._set_allocator_settings`); `docs/torch-versions.md` says how
//! to check a new release.

use std::fmt;
use std::str::FromStr;

/// A torch release line, `major.minor` (patch releases do not change the allocator's
/// configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TorchVersion {
    /// `2` in 2.9.
    pub major: u32,
    /// `9` in 2.9.
    pub minor: u32,
}

const fn v(major: u32, minor: u32) -> TorchVersion {
    TorchVersion { major, minor }
}

impl TorchVersion {
    /// The release whose allocator cachalot reproduces (and the default everywhere).
    pub const NEWEST: TorchVersion = v(2, 15);
    /// The oldest release whose configuration keys this table knows.
    pub const OLDEST: TorchVersion = v(2, 4);

    /// Whether this release reads `PYTORCH_ALLOC_CONF` (older ones read only
    /// `PYTORCH_CUDA_ALLOC_CONF`).
    pub fn reads_alloc_conf_var(self) -> bool {
        self >= v(2, 9)
    }

    /// Whether this release's parser knows `key` (an alias counts as its key).
    pub fn accepts_key(self, key: &str) -> bool {
        key_since(key).is_some_and(|since| self >= since)
    }

    /// The smallest `max_split_size_mb` / `max_non_split_rounding_mb` this release accepts.
    pub fn min_split_mb(self) -> u64 {
        if self >= v(2, 10) { 20 } else { 21 }
    }

    /// What `conf` (a `PYTORCH_CUDA_ALLOC_CONF` string torch 2.15 accepts) means to this
    /// release: the entries it would reject, and the ones it reads with other decisions than
    /// 2.15. Empty: this release accepts the line and makes 2.15's decisions for it.
    pub fn check(self, conf: &str) -> Vec<VersionNote> {
        let entries = entries(conf);
        let mut notes = Vec::new();
        for (key, value) in &entries {
            if !self.accepts_key(key) {
                notes.push(VersionNote::UnknownKey {
                    key: key.to_string(),
                    since: key_since(key),
                });
            } else if matches!(*key, "max_split_size_mb" | "max_non_split_rounding_mb")
                && value
                    .parse::<u64>()
                    .is_ok_and(|mb| mb < self.min_split_mb())
            {
                notes.push(VersionNote::Rejected {
                    entry: format!("{key}:{value}"),
                    rule: format!("torch {self} needs at least {} MiB", self.min_split_mb()),
                });
            }
        }
        let has = |k: &str| entries.iter().any(|(key, _)| *key == k);
        let expandable = entries
            .iter()
            .any(|(k, val)| *k == "expandable_segments" && val.eq_ignore_ascii_case("true"));
        for d in DIFFERENCES {
            let applies = match d.kind {
                Difference::ExpandableWithSplitOrGc => {
                    expandable && (has("max_split_size_mb") || has("garbage_collection_threshold"))
                }
                Difference::RoundupOpenInterval => entries
                    .iter()
                    .any(|(k, val)| *k == "roundup_power2_divisions" && val.contains('>')),
                Difference::GcWithoutFractionKey => has("garbage_collection_threshold"),
            };
            if applies && self <= d.until {
                notes.push(VersionNote::Differs {
                    what: d.what,
                    until: d.until,
                    replayed: d.replayed,
                });
            }
        }
        notes
    }

    /// Whether a `roundup_power2_divisions` list's `>` entry fills from the interval after the
    /// last one given (2.10+), rather than from that interval itself, overwriting its value
    /// (≤ 2.9: `[256:1,512:2,1024:4,>:8]` rounds 1–2 GiB requests to 8 divisions, not 4).
    /// torch 2.9 parses the line twice: its generic `AcceleratorAllocatorConfig` the new way
    /// (what `_get_allocator_settings` shows), its CUDA allocator's own pass the old way, and
    /// the allocator rounds by the latter (its oracle, `gpt2-train/roundup-list`).
    pub fn roundup_open_after_last(self) -> bool {
        self >= v(2, 10)
    }

    /// Whether the free sets break ties between blocks of one size by the age of their
    /// segments, then address (2.13+, `BlockComparatorSizeCounterAddress`), rather than by
    /// address alone (≤ 2.11) or by the age of each block (2.12,
    /// [`TorchVersion::orders_ties_by_block_age`]).
    /// Found with each release's oracle: the order shows in which of several equal blocks a
    /// request gets and in the order of the `cudaFree`s of a cache flush.
    pub fn orders_ties_by_segment_age(self) -> bool {
        self >= v(2, 13)
    }

    /// Whether the free sets break ties between blocks of one size by when each block was
    /// made, then address (2.12 only): every block takes the next number when it is created
    /// (a new segment's first block, the front piece a split hands out, the pieces an
    /// expandable segment's map or unmap cuts off), while a split's remainder and a merged
    /// block keep the number they had. Found with 2.12's oracle: on a 58-row single-stream
    /// trace shrunk from `random-4streams` it packs into one small segment where 2.11 and 2.13
    /// need two, and this rule gives 2.12's segment log on the golden traces.
    pub fn orders_ties_by_block_age(self) -> bool {
        self == v(2, 12)
    }

    /// The advice torch appends to an out-of-memory message (after "reserved by PyTorch but
    /// unallocated."), read off each release's own messages.
    pub fn oom_advice(self, expandable_segments: bool) -> &'static str {
        if self <= v(2, 9) {
            return " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
        }
        if self == v(2, 10) {
            return " If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
        }
        match (expandable_segments, self >= v(2, 14), self >= v(2, 15)) {
            (true, _, true) => {
                " expandable_segments is enabled. If instead the process is running out of virtual address space (VSZ), expandable segments may be over-reserving VA (each segment reserves ~9/8 of device memory, times the number of streams); reduce it via PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve / expandable_segments_reserve_by_class."
            }
            (true, true, false) => "",
            _ => {
                " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
            }
        }
    }

    /// Every release line the table covers, oldest first.
    pub fn all() -> impl Iterator<Item = TorchVersion> {
        (Self::OLDEST.minor..=Self::NEWEST.minor).map(|m| v(2, m))
    }
}

impl fmt::Display for TorchVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A torch version that could not be read, or one outside the table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "torch version {input:?}: {why}; give a release from {oldest} to {newest}, \
     as torch prints it (`2.9`, `2.9.1`, `2.9.1+cu128`)",
    oldest = TorchVersion::OLDEST,
    newest = TorchVersion::NEWEST
)]
pub struct VersionError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl FromStr for TorchVersion {
    type Err = VersionError;

    /// Reads `2.9`, `2.9.1`, `2.9.1+cu128`, `2.10.0a0+git1234` (what `torch.__version__`
    /// holds).
    fn from_str(s: &str) -> Result<Self, VersionError> {
        let err = |why| VersionError {
            input: s.to_string(),
            why,
        };
        let release = s.trim().split('+').next().unwrap_or("");
        let mut parts = release.split('.');
        let number = |p: Option<&str>| {
            let digits: String = p
                .unwrap_or("")
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u32>().ok()
        };
        let (Some(major), Some(minor)) = (number(parts.next()), number(parts.next())) else {
            return Err(err("not a version (major.minor)"));
        };
        let found = v(major, minor);
        if found < TorchVersion::OLDEST || found > TorchVersion::NEWEST {
            return Err(err("outside the releases cachalot knows"));
        }
        Ok(found)
    }
}

/// How a release reads one entry differently from torch 2.15.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionNote {
    /// The release rejects the key ("Unrecognized CachingAllocator option").
    UnknownKey {
        /// The key.
        key: String,
        /// The first release that accepts it (None: no torch release does).
        since: Option<TorchVersion>,
    },
    /// The release rejects the value.
    Rejected {
        /// `key:value`.
        entry: String,
        /// What that release needs.
        rule: String,
    },
    /// The release accepts the line but its allocator decides differently for it.
    Differs {
        /// What differs.
        what: &'static str,
        /// The last release that differs from 2.15.
        until: TorchVersion,
        /// Whether cachalot replays that release's decision ([`DifferenceRow::replayed`]).
        replayed: bool,
    },
}

impl VersionNote {
    /// Whether the release refuses the line (as opposed to reading it differently).
    pub fn is_rejection(&self) -> bool {
        !matches!(self, VersionNote::Differs { .. })
    }

    /// Whether the replay makes the release's own decision here: the release accepts the
    /// line and reads it otherwise than 2.15, as cachalot replays it (`AllocConf::for_torch`).
    /// Every other note means a replay's numbers are not the release's.
    pub fn is_replayed(&self) -> bool {
        matches!(self, VersionNote::Differs { replayed: true, .. })
    }
}

impl fmt::Display for VersionNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionNote::UnknownKey {
                key,
                since: Some(s),
            } => write!(f, "`{key}` is rejected before torch {s}"),
            VersionNote::UnknownKey { key, since: None } => {
                write!(f, "`{key}` is not a torch key")
            }
            VersionNote::Rejected { entry, rule } => write!(f, "`{entry}` is rejected: {rule}"),
            VersionNote::Differs { what, until, .. } => {
                write!(f, "up to torch {until}, {what}")
            }
        }
    }
}

/// The first release whose parser accepts each key (aliases included).
const KEY_SINCE: &[(&str, TorchVersion)] = &[
    ("backend", v(2, 4)),
    ("max_split_size_mb", v(2, 4)),
    ("roundup_power2_divisions", v(2, 4)),
    ("garbage_collection_threshold", v(2, 4)),
    ("expandable_segments", v(2, 4)),
    ("release_lock_on_cudamalloc", v(2, 4)),
    ("release_lock_on_hipmalloc", v(2, 4)),
    ("pinned_use_cuda_host_register", v(2, 4)),
    ("pinned_use_hip_host_register", v(2, 4)),
    ("pinned_num_register_threads", v(2, 4)),
    ("max_non_split_rounding_mb", v(2, 6)),
    ("pinned_use_background_threads", v(2, 6)),
    ("graph_capture_record_stream_reuse", v(2, 9)),
    ("per_process_memory_fraction", v(2, 10)),
    ("pinned_reserve_segment_size_mb", v(2, 10)),
    ("large_segment_size_mb", v(2, 11)),
    ("throw_on_cudamalloc_oom", v(2, 12)),
    ("pinned_free_catch_all", v(2, 12)),
    ("expandable_segments_reserve", v(2, 15)),
    ("expandable_segments_reserve_by_class", v(2, 15)),
    ("pinned_max_cached_size_mb", v(2, 13)),
    ("pinned_max_round_threshold_mb", v(2, 13)),
];

/// The `torch.cuda.memory_stats()` statistics that came after 2.4, with the first release that
/// has each (the `DeviceStats` fields of each release's `c10/core/CachingDeviceAllocator.h`).
/// A name covers its key and the keys under it (`reserved_bytes_by_private_pools.1_0.all.peak`).
const STAT_SINCE: &[(&str, TorchVersion)] = &[
    ("num_oom_rejections", v(2, 12)),
    ("reserved_bytes_by_private_pools", v(2, 13)),
];

impl TorchVersion {
    /// The statistics of torch 2.15's `memory_stats()` that this release's does not have: each
    /// name is a key, or the first part of keys (`name.…`).
    pub fn stats_absent(self) -> Vec<&'static str> {
        STAT_SINCE
            .iter()
            .filter(|&&(_, since)| self < since)
            .map(|&(key, _)| key)
            .collect()
    }
}

fn key_since(key: &str) -> Option<TorchVersion> {
    KEY_SINCE.iter().find(|(k, _)| *k == key).map(|&(_, s)| s)
}

/// A kind of configuration whose decisions changed between releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// `expandable_segments:True` together with `max_split_size_mb` or garbage collection.
    ExpandableWithSplitOrGc,
    /// A `roundup_power2_divisions` list with the open `>` interval.
    RoundupOpenInterval,
    /// `garbage_collection_threshold`, which before `per_process_memory_fraction` became a key
    /// acts only when the program itself calls `torch.cuda.set_per_process_memory_fraction`.
    GcWithoutFractionKey,
}

/// One row of [`DIFFERENCES`].
#[derive(Clone, Copy, Debug)]
pub struct DifferenceRow {
    /// Which configurations.
    pub kind: Difference,
    /// The last release that decides differently from 2.15.
    pub until: TorchVersion,
    /// What differs, for people.
    pub what: &'static str,
    /// Whether cachalot replays that release's decision (`replay --torch`, checked against
    /// its oracle); `tune` keeps every row out of its search for the releases concerned.
    pub replayed: bool,
}

/// The decision changes across 2.4 … 2.15 that a configuration line can run into, each
/// found with that release's own allocator (`scripts/versions/oracle.sh`). Changes that every
/// line meets are [`TorchVersion`]'s methods (`orders_ties_by_segment_age`, `oom_advice`).
/// `replay --torch` replays the rows marked `replayed`; `tune` for an older release leaves
/// all of them out of its search and says so when the user's own line has one.
pub const DIFFERENCES: &[DifferenceRow] = &[
    DifferenceRow {
        kind: Difference::ExpandableWithSplitOrGc,
        until: v(2, 4),
        what: "expandable segments combined with max_split_size_mb stop the program: torch 2.4 \
               fails an internal assert (`!block->expandable_segment_`) when it would release \
               an oversize expandable block",
        replayed: false,
    },
    DifferenceRow {
        kind: Difference::RoundupOpenInterval,
        until: v(2, 9),
        what: "a roundup_power2_divisions list's `>` entry fills from the last interval given, \
               overwriting its value",
        replayed: true,
    },
    DifferenceRow {
        kind: Difference::GcWithoutFractionKey,
        until: v(2, 9),
        what: "garbage_collection_threshold acts only if the program calls \
               torch.cuda.set_per_process_memory_fraction (per_process_memory_fraction is not a key)",
        replayed: true,
    },
];

/// The `key:value` entries of a configuration line, at the top level (a bracketed list is
/// one value).
fn entries(conf: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    let bytes = conf.as_bytes();
    for i in 0..=bytes.len() {
        let c = bytes.get(i).copied();
        match c {
            Some(b'[') => depth += 1,
            Some(b']') => depth = depth.saturating_sub(1),
            Some(b',') | None if depth == 0 => {
                let entry = conf[start..i].trim();
                if !entry.is_empty() {
                    let (k, val) = entry.split_once(':').unwrap_or((entry, ""));
                    out.push((k.trim(), val.trim()));
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TorchVersion {
        s.parse().unwrap()
    }

    #[test]
    fn reads_what_torch_prints() {
        assert_eq!(t("2.9"), v(2, 9));
        assert_eq!(t("2.9.1+cu128"), v(2, 9));
        assert_eq!(t(" 2.10.0a0+git1234 "), v(2, 10));
        for bad in ["", "2", "two.nine", "1.13.1", "2.16", "3.0"] {
            let e = bad.parse::<TorchVersion>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("2.4 to 2.15"), "{e}");
        }
    }

    #[test]
    fn every_torch_key_has_a_release() {
        for k in super::super::KEYS
            .iter()
            .filter(|k| !k.cachalot_only && !k.legacy)
        {
            for name in std::iter::once(k.name).chain(k.aliases.iter().copied()) {
                assert!(
                    key_since(name).is_some(),
                    "{name} has no release in KEY_SINCE"
                );
                assert!(TorchVersion::NEWEST.accepts_key(name), "{name}");
            }
        }
    }

    #[test]
    fn older_releases_reject_newer_keys() {
        let line = "expandable_segments:True,garbage_collection_threshold:0.6,per_process_memory_fraction:0.99";
        let notes = t("2.9").check(line);
        assert!(notes.iter().any(|n| n.is_rejection()
            && n.to_string() == "`per_process_memory_fraction` is rejected before torch 2.10"));
        assert!(t("2.10").check(line).iter().all(|n| !n.is_rejection()));
        assert!(t("2.15").check(line).is_empty());
    }

    #[test]
    fn split_minimum_moved_in_2_10() {
        assert!(t("2.9").check("max_split_size_mb:20")[0].is_rejection());
        assert!(t("2.10").check("max_split_size_mb:20").is_empty());
        assert!(t("2.4").check("max_split_size_mb:21").is_empty());
    }

    #[test]
    fn lists_are_one_entry() {
        let e = entries("roundup_power2_divisions:[256:1,>:8], expandable_segments:True");
        assert_eq!(
            e,
            [
                ("roundup_power2_divisions", "[256:1,>:8]"),
                ("expandable_segments", "True")
            ]
        );
        let notes = t("2.9").check("roundup_power2_divisions:[256:1,>:8]");
        assert!(matches!(notes[..], [VersionNote::Differs { .. }]));
        assert!(
            t("2.10")
                .check("roundup_power2_divisions:[256:1,>:8]")
                .is_empty()
        );
    }
}
