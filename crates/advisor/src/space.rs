//! The search space: the `PYTORCH_CUDA_ALLOC_CONF` options torch 2.15 accepts that change how
//! device memory is cached, and the values tried for each.
//!
//! | dimension | values tried |
//! |---|---|
//! | `max_split_size_mb` | unset, 64, 128, 256, 512, 1024, 2048, 4096, 8192 — only those below twice the trace's largest request (without expandable segments larger ones never make a block oversize, so they behave as unset; with expandable segments a free block of a grown segment can reach them, and the search does not try them there) |
//! | `max_non_split_rounding_mb` | default (20), 64, 256, 1024 — only with `max_split_size_mb` set (it has no effect otherwise) and, like it, below twice the largest request |
//! | `roundup_power2_divisions` | off, 2, 4, 8, 16, and the lists `[256:1,512:2,1024:4,>:8]` (torch's documented example: round only large requests) and `[64:8,128:4,256:2,>:1]` (round small requests finely, large ones not at all) |
//! | `expandable_segments` | False, True |
//! | `garbage_collection_threshold` + `per_process_memory_fraction` | off, 0.6/0.95, 0.8/0.95, 0.6/0.99, 0.8/0.99 (GC works only with a fraction below 1, and the fraction caps reserved memory at that share of the device) |
//!
//! Every candidate is written as a string and parsed by the same parser that mirrors torch
//! 2.15's, so every recommendation is a string torch accepts. For an older torch release
//! ([`SearchSpace::for_release`]) the space keeps only what that release's parser accepts and
//! what cachalot replays as that release decides (`cachalot_core::config::versions`): no
//! `max_non_split_rounding_mb` before 2.6, no garbage collection with a fraction before 2.10
//! (`per_process_memory_fraction` is not a key there), and on 2.4 no expandable segments
//! together with `max_split_size_mb` or garbage collection (a decision not replayed). The `>`
//! rounding lists stay: up to 2.9 they are read otherwise, and replayed as read. Every
//! candidate of the space is made with [`SearchSpace::candidate`], so every replay of the
//! search makes that release's decisions.

use std::fmt;

use cachalot_core::AllocConf;
use cachalot_core::config::{TorchVersion, VersionNote, parse_pytorch};
use cachalot_core::size::request_sizes;
use cachalot_replay::TraceOp;

use crate::AdvisorError;

/// `max_split_size_mb` values tried, in MiB.
pub const MAX_SPLIT_MB: [u64; 8] = [64, 128, 256, 512, 1024, 2048, 4096, 8192];
/// `max_non_split_rounding_mb` values tried (with `max_split_size_mb`), in MiB.
pub const NON_SPLIT_MB: [u64; 3] = [64, 256, 1024];
/// `roundup_power2_divisions` single values tried.
pub const ROUNDUP_SINGLE: [u64; 4] = [2, 4, 8, 16];
/// `roundup_power2_divisions` lists tried.
pub const ROUNDUP_LISTS: [&str; 2] = ["[256:1,512:2,1024:4,>:8]", "[64:8,128:4,256:2,>:1]"];
/// (`garbage_collection_threshold`, `per_process_memory_fraction`) pairs tried.
pub const GC_CHOICES: [(&str, &str); 4] = [
    ("0.6", "0.95"),
    ("0.8", "0.95"),
    ("0.6", "0.99"),
    ("0.8", "0.99"),
];

/// A `roundup_power2_divisions` choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Roundup {
    /// Not set (no power-of-two rounding).
    #[default]
    Off,
    /// One number of divisions for every size.
    Single(u64),
    /// One of [`ROUNDUP_LISTS`], by index.
    List(usize),
}

/// One point of the search space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Settings {
    /// `max_split_size_mb`.
    pub max_split_mb: Option<u64>,
    /// `max_non_split_rounding_mb` (only with `max_split_mb`).
    pub non_split_mb: Option<u64>,
    /// `roundup_power2_divisions`.
    pub roundup: Roundup,
    /// `expandable_segments:True`.
    pub expandable: bool,
    /// Index into [`GC_CHOICES`].
    pub gc: Option<usize>,
}

impl Settings {
    /// The default configuration (nothing set).
    pub const DEFAULT: Settings = Settings {
        max_split_mb: None,
        non_split_mb: None,
        roundup: Roundup::Off,
        expandable: false,
        gc: None,
    };

    /// `max_split_size_mb:128`, the setting the popular advice demonstrates.
    pub const ADVICE_MAX_SPLIT: Settings = Settings {
        max_split_mb: Some(128),
        ..Settings::DEFAULT
    };

    /// `expandable_segments:True`, the other common advice.
    pub const ADVICE_EXPANDABLE: Settings = Settings {
        expandable: true,
        ..Settings::DEFAULT
    };

    /// The keys this sets, as `PYTORCH_CUDA_ALLOC_CONF` entries, in a fixed order.
    pub fn entries(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(m) = self.max_split_mb {
            v.push(format!("max_split_size_mb:{m}"));
        }
        if let Some(n) = self.non_split_mb {
            v.push(format!("max_non_split_rounding_mb:{n}"));
        }
        match self.roundup {
            Roundup::Off => {}
            Roundup::Single(d) => v.push(format!("roundup_power2_divisions:{d}")),
            Roundup::List(i) => v.push(format!("roundup_power2_divisions:{}", ROUNDUP_LISTS[i])),
        }
        if self.expandable {
            v.push("expandable_segments:True".into());
        }
        if let Some(g) = self.gc {
            let (t, f) = GC_CHOICES[g];
            v.push(format!("garbage_collection_threshold:{t}"));
            v.push(format!("per_process_memory_fraction:{f}"));
        }
        v
    }

    /// How many keys it sets (the tie-break prefers fewer).
    pub fn complexity(&self) -> usize {
        self.entries().len()
    }

    /// Whether torch would see the combination as meaningful (`max_non_split_rounding_mb`
    /// without `max_split_size_mb` changes nothing).
    pub fn is_canonical(&self) -> bool {
        self.non_split_mb.is_none() || self.max_split_mb.is_some()
    }
}

impl fmt::Display for Settings {
    /// The `PYTORCH_CUDA_ALLOC_CONF` string (empty for the default).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entries().join(","))
    }
}

/// A configuration to replay: from the search space, or given by the user.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Its place in the search space, if it has one.
    pub settings: Option<Settings>,
    /// The `PYTORCH_CUDA_ALLOC_CONF` string (empty = default).
    pub label: String,
    /// The parsed configuration.
    pub conf: AllocConf,
    /// Keys set (tie-break: fewer first).
    pub complexity: usize,
}

impl Candidate {
    /// A candidate from the search space.
    pub fn from_settings(s: Settings) -> Result<Self, AdvisorError> {
        let mut c = Candidate::parse(&s.to_string())?;
        c.settings = Some(s);
        Ok(c)
    }

    /// A candidate from a user's string, parsed as torch 2.15 parses `PYTORCH_CUDA_ALLOC_CONF`.
    pub fn parse(label: &str) -> Result<Self, AdvisorError> {
        let (conf, _warnings) = parse_pytorch(label).map_err(|e| AdvisorError::Config {
            conf: label.to_string(),
            message: e.to_string(),
        })?;
        let complexity = label.split(',').filter(|p| !p.trim().is_empty()).count();
        Ok(Candidate {
            settings: None,
            label: label.to_string(),
            conf,
            complexity,
        })
    }

    /// The label for people: the string, or "default".
    pub fn display_name(&self) -> &str {
        if self.label.is_empty() {
            "(default)"
        } else {
            &self.label
        }
    }

    /// The tie-break order: fewer keys, then the string.
    pub fn order_key(&self) -> (usize, &str) {
        (self.complexity, &self.label)
    }

    /// This candidate as torch `release` reads and decides it ([`AllocConf::for_torch`]):
    /// what every replay of it for that release uses.
    pub fn for_torch(mut self, release: TorchVersion) -> Self {
        self.conf = self.conf.for_torch(release);
        self
    }
}

/// The values worth trying for one trace.
#[derive(Clone, Debug)]
pub struct SearchSpace {
    /// `max_split_size_mb` values (MiB).
    pub max_split_mb: Vec<u64>,
    /// `max_non_split_rounding_mb` values (MiB).
    pub non_split_mb: Vec<u64>,
    /// `roundup_power2_divisions` choices (without `Off`).
    pub roundup: Vec<Roundup>,
    /// GC choices (indices into [`GC_CHOICES`]).
    pub gc: Vec<usize>,
    /// Whether expandable segments may be combined with `max_split_size_mb` or garbage
    /// collection (torch 2.4 decides those combinations otherwise than 2.15).
    pub expandable_combined: bool,
    /// The torch release whose decisions the candidates make ([`SearchSpace::candidate`]).
    pub release: TorchVersion,
}

/// One axis of the space, for coordinate moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// `max_split_size_mb` (setting it to unset also clears `max_non_split_rounding_mb`).
    MaxSplit,
    /// `max_non_split_rounding_mb`.
    NonSplit,
    /// `roundup_power2_divisions`.
    Roundup,
    /// `expandable_segments`.
    Expandable,
    /// Garbage collection with a memory fraction.
    Gc,
}

/// Every dimension.
pub const DIMS: [Dim; 5] = [
    Dim::MaxSplit,
    Dim::NonSplit,
    Dim::Roundup,
    Dim::Expandable,
    Dim::Gc,
];

impl SearchSpace {
    /// The space for `trace`: size thresholds above twice its largest request are dropped.
    pub fn for_trace(trace: &dyn crate::Workload) -> Self {
        let largest = trace_request_sizes(trace).max().unwrap_or(0);
        let limit = largest.saturating_mul(2);
        let keep = |mb: &u64| mb.saturating_mul(1 << 20) < limit;
        SearchSpace {
            max_split_mb: MAX_SPLIT_MB.iter().copied().filter(keep).collect(),
            non_split_mb: NON_SPLIT_MB.iter().copied().filter(keep).collect(),
            roundup: ROUNDUP_SINGLE
                .iter()
                .map(|&d| Roundup::Single(d))
                .chain((0..ROUNDUP_LISTS.len()).map(Roundup::List))
                .collect(),
            gc: (0..GC_CHOICES.len()).collect(),
            expandable_combined: true,
            release: TorchVersion::NEWEST,
        }
    }

    /// This space for torch `release`: without what it rejects or decides otherwise than
    /// cachalot replays (the module's header lists it), its candidates making its decisions;
    /// [`TorchVersion::NEWEST`] keeps it whole.
    pub fn for_release(mut self, release: TorchVersion) -> Self {
        self.release = release;
        // A reading that differs from 2.15's is fine where the replays make it.
        let probe = |conf: &str| release.check(conf).iter().all(VersionNote::is_replayed);
        if !probe("max_non_split_rounding_mb:64") {
            self.non_split_mb.clear();
        }
        if !probe("garbage_collection_threshold:0.6,per_process_memory_fraction:0.95") {
            self.gc.clear();
        }
        self.roundup.retain(|r| match r {
            Roundup::List(i) => probe(&format!("roundup_power2_divisions:{}", ROUNDUP_LISTS[*i])),
            _ => true,
        });
        self.expandable_combined = probe("expandable_segments:True,max_split_size_mb:64");
        self
    }

    /// The candidate at `s`, making this space's release's decisions: the one place the
    /// search makes candidates from points.
    pub fn candidate(&self, s: Settings) -> Result<Candidate, AdvisorError> {
        Candidate::from_settings(s).map(|c| c.for_torch(self.release))
    }

    /// Whether `s` is a point of this space (seeds from elsewhere are checked with it).
    pub fn allows(&self, s: &Settings) -> bool {
        s.is_canonical()
            && s.non_split_mb
                .is_none_or(|n| self.non_split_mb.contains(&n))
            && s.gc.is_none_or(|g| self.gc.contains(&g))
            && (s.roundup == Roundup::Off || self.roundup.contains(&s.roundup))
            && (self.expandable_combined
                || !(s.expandable && (s.max_split_mb.is_some() || s.gc.is_some())))
    }

    /// The values of one dimension, the "unset" one included.
    pub fn values(&self, dim: Dim, base: &Settings) -> Vec<Settings> {
        let mut out = Vec::new();
        match dim {
            Dim::MaxSplit => {
                out.push(Settings {
                    max_split_mb: None,
                    non_split_mb: None,
                    ..*base
                });
                for &m in &self.max_split_mb {
                    out.push(Settings {
                        max_split_mb: Some(m),
                        ..*base
                    });
                }
            }
            Dim::NonSplit => {
                if base.max_split_mb.is_some() {
                    out.push(Settings {
                        non_split_mb: None,
                        ..*base
                    });
                    for &n in &self.non_split_mb {
                        out.push(Settings {
                            non_split_mb: Some(n),
                            ..*base
                        });
                    }
                }
            }
            Dim::Roundup => {
                out.push(Settings {
                    roundup: Roundup::Off,
                    ..*base
                });
                for &r in &self.roundup {
                    out.push(Settings {
                        roundup: r,
                        ..*base
                    });
                }
            }
            Dim::Expandable => {
                for e in [false, true] {
                    out.push(Settings {
                        expandable: e,
                        ..*base
                    });
                }
            }
            Dim::Gc => {
                out.push(Settings { gc: None, ..*base });
                for &g in &self.gc {
                    out.push(Settings {
                        gc: Some(g),
                        ..*base
                    });
                }
            }
        }
        out.retain(|s| self.allows(s));
        out
    }

    /// The first round: the default, the common advice, and every option alone.
    pub fn singles(&self) -> Vec<Settings> {
        let mut v = vec![
            Settings::DEFAULT,
            Settings::ADVICE_MAX_SPLIT,
            Settings::ADVICE_EXPANDABLE,
        ];
        for dim in DIMS {
            v.extend(self.values(dim, &Settings::DEFAULT));
        }
        for &m in self.max_split_mb.iter().take(2) {
            let base = Settings {
                max_split_mb: Some(m),
                ..Settings::DEFAULT
            };
            v.extend(self.values(Dim::NonSplit, &base));
        }
        dedup(v)
    }

    /// Every combination of the given values per dimension.
    pub fn product(
        &self,
        max_split: &[Option<u64>],
        roundup: &[Roundup],
        expandable: &[bool],
        gc: &[Option<usize>],
    ) -> Vec<Settings> {
        let mut v = Vec::new();
        for &m in max_split {
            for &r in roundup {
                for &e in expandable {
                    for &g in gc {
                        v.push(Settings {
                            max_split_mb: m,
                            non_split_mb: None,
                            roundup: r,
                            expandable: e,
                            gc: g,
                        });
                    }
                }
            }
        }
        v.retain(|s| self.allows(s));
        dedup(v)
    }

    /// Every setting one coordinate move away from `base`.
    pub fn neighbours(&self, base: &Settings) -> Vec<Settings> {
        let mut v = Vec::new();
        for dim in DIMS {
            v.extend(self.values(dim, base));
        }
        dedup(v)
    }
}

/// Points of the search space that provably replay alike on one workload at one capacity
/// ("twins"): the search replays one of them and gives its numbers to the others. The proof
/// is from the trace alone, over what the allocator reads of each option:
///
/// - `roundup_power2_divisions` is read only where a request is rounded (`round_size`), so
///   two choices that round every request of the workload to the same block and segment
///   sizes replay alike; each choice stands for the first such one (unset first).
/// - `max_split_size_mb` (and `max_non_split_rounding_mb`, read only for requests of at
///   least `max_split_size_mb`) acts only on blocks or requests of at least that size: the
///   oversize refusals of the best fit, the no-split rule, the oversize release before a
///   retry, and the oversize statistics (which no ranking number reads). Without expandable
///   segments a block is never larger than its segment, and a segment is the segment size
///   of one request. So when every request whose segment size fits on the device (larger
///   ones can never get a segment) asks for a segment smaller than `max_split_size_mb`,
///   no block ever reaches it, no request served reaches it, and a request that does can
///   find no block and no oversize block to release under either setting: the option
///   replays as unset. With expandable segments blocks grow with their segment, and with
///   private pools the rule is not applied, so those keep their own replays.
///
/// `crates/advisor/tests/twins.rs` replays every twin in full on the fixtures and checks that
/// its numbers are its class's.
#[derive(Clone, Debug)]
pub struct Twins {
    /// Each `roundup_power2_divisions` choice and the first choice that rounds alike.
    roundup_alias: Vec<(Roundup, Roundup)>,
    /// For each choice that stands for others: the largest segment size a request can be
    /// given on the device (`None`: no request can get one).
    largest_segment: Vec<(Roundup, Option<u64>)>,
    /// Whether the `max_split_size_mb` rule applies (no pool rows in any part).
    split_rule: bool,
}

impl Twins {
    /// The twin classes of `space` on `trace` at `capacity` bytes.
    pub fn new(
        trace: &dyn crate::Workload,
        space: &SearchSpace,
        capacity: u64,
    ) -> Result<Self, AdvisorError> {
        let mut sizes: Vec<u64> = trace_request_sizes(trace).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut choices: Vec<(Roundup, AllocConf)> = Vec::new();
        for r in std::iter::once(Roundup::Off).chain(space.roundup.iter().copied()) {
            let s = Settings {
                roundup: r,
                ..Settings::DEFAULT
            };
            choices.push((r, space.candidate(s)?.conf));
        }
        let mut roundup_alias = Vec::new();
        let mut largest_segment = Vec::new();
        for (i, (r, conf)) in choices.iter().enumerate() {
            let alike = |other: &AllocConf| {
                sizes
                    .iter()
                    .all(|&size| request_sizes(size, conf) == request_sizes(size, other))
            };
            let alias = choices[..i]
                .iter()
                .find(|(a, other)| roundup_alias.contains(&(*a, *a)) && alike(other))
                .map_or(*r, |(a, _)| *a);
            roundup_alias.push((*r, alias));
            if alias == *r {
                let largest = sizes
                    .iter()
                    .filter_map(|&size| request_sizes(size, conf).map(|(_, segment)| segment))
                    .filter(|&segment| segment <= capacity)
                    .max();
                largest_segment.push((*r, largest));
            }
        }
        let split_rule = trace.parts().iter().all(|t| !t.stats.has_pool_rows);
        Ok(Twins {
            roundup_alias,
            largest_segment,
            split_rule,
        })
    }

    /// The point that stands for `s`'s class: `s` with its options that provably act like
    /// others (or like unset) replaced by those.
    pub fn class_of(&self, s: &Settings) -> Settings {
        let mut k = *s;
        if let Some(&(_, alias)) = self.roundup_alias.iter().find(|(r, _)| *r == s.roundup) {
            k.roundup = alias;
        }
        if let Some(m) = k.max_split_mb
            && self.split_rule
            && !k.expandable
        {
            let largest = self
                .largest_segment
                .iter()
                .find(|(r, _)| *r == k.roundup)
                .map(|&(_, l)| l);
            // `None` from the search: a choice not in the space keeps its own replay.
            if let Some(largest) = largest
                && largest.is_none_or(|l| l < m.saturating_mul(1 << 20))
            {
                k.max_split_mb = None;
                k.non_split_mb = None;
            }
        }
        k
    }
}

/// Removes repeats, keeping the first of each.
pub fn dedup(v: Vec<Settings>) -> Vec<Settings> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(*s)).collect()
}

/// The size of every allocation request of `trace`, in every part, in trace order.
fn trace_request_sizes(trace: &dyn crate::Workload) -> impl Iterator<Item = u64> + '_ {
    trace
        .parts()
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match *op {
            TraceOp::Alloc { size, .. } => Some(size),
            TraceOp::Free { .. } | TraceOp::Pool { .. } => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_a_string_torch_accepts() {
        let space = SearchSpace {
            max_split_mb: MAX_SPLIT_MB.to_vec(),
            non_split_mb: NON_SPLIT_MB.to_vec(),
            roundup: SearchSpace::for_trace(&cachalot_replay::LoadedTrace::default()).roundup,
            gc: (0..GC_CHOICES.len()).collect(),
            expandable_combined: true,
            release: TorchVersion::NEWEST,
        };
        let mut n = 0;
        for s in space.singles() {
            for t in space.neighbours(&s) {
                let c = Candidate::from_settings(t).unwrap();
                let back = Candidate::parse(&c.label).unwrap();
                assert_eq!(back.conf, c.conf);
                n += 1;
            }
        }
        assert!(n > 100);
    }

    #[test]
    fn strings_are_canonical() {
        let s = Settings {
            max_split_mb: Some(128),
            non_split_mb: Some(64),
            roundup: Roundup::List(0),
            expandable: true,
            gc: Some(1),
        };
        assert_eq!(
            s.to_string(),
            "max_split_size_mb:128,max_non_split_rounding_mb:64,\
             roundup_power2_divisions:[256:1,512:2,1024:4,>:8],expandable_segments:True,\
             garbage_collection_threshold:0.8,per_process_memory_fraction:0.95"
        );
        assert_eq!(s.complexity(), 6);
        assert_eq!(Settings::DEFAULT.to_string(), "");
        let c = Candidate::from_settings(s).unwrap();
        assert_eq!(c.conf.max_split_size, 128 << 20);
        assert!(c.conf.expandable_segments);
        assert!(c.conf.gc_enabled());
    }

    #[test]
    fn thresholds_above_the_largest_request_are_dropped() {
        let csv = format!(
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,{},0\n",
            300u64 << 20
        );
        let trace = cachalot_replay::load_bytes(csv.as_bytes()).unwrap();
        let space = SearchSpace::for_trace(&trace);
        assert_eq!(space.max_split_mb, vec![64, 128, 256, 512]);
        assert_eq!(space.non_split_mb, vec![64, 256]);
    }

    #[test]
    fn an_older_release_searches_only_what_it_accepts_and_what_is_replayed() {
        let release = |s: &str| s.parse::<TorchVersion>().unwrap();
        let csv = format!(
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,{},0\n",
            300u64 << 20
        );
        let whole = SearchSpace::for_trace(&cachalot_replay::load_bytes(csv.as_bytes()).unwrap());
        assert!(!whole.non_split_mb.is_empty());
        assert_eq!(whole.clone().for_release(TorchVersion::NEWEST).gc, whole.gc);
        // The `>` lists are read otherwise up to 2.9 and replayed as read, so they stay.
        for (r, gc, non_split, lists, combined) in [
            ("2.4", false, false, true, false),
            ("2.5", false, false, true, true),
            ("2.6", false, true, true, true),
            ("2.9", false, true, true, true),
            ("2.10", true, true, true, true),
        ] {
            let space = whole.clone().for_release(release(r));
            assert_eq!(!space.gc.is_empty(), gc, "{r}");
            assert_eq!(!space.non_split_mb.is_empty(), non_split, "{r}");
            assert_eq!(
                space.roundup.iter().any(|x| matches!(x, Roundup::List(_))),
                lists,
                "{r}"
            );
            assert_eq!(space.expandable_combined, combined, "{r}");
            // every point it can reach is a line that release accepts, and any decision of it
            // that differs from 2.15's is replayed; its candidates make that release's
            let mut read_otherwise = 0;
            for s in space.singles() {
                for t in space.neighbours(&s) {
                    let notes = release(r).check(&t.to_string());
                    assert!(
                        notes.iter().all(VersionNote::is_replayed),
                        "{r}: {t}: {notes:?}"
                    );
                    let c = space.candidate(t).unwrap();
                    assert_eq!(c.conf.torch, release(r));
                    let newest = Candidate::from_settings(t).unwrap().conf;
                    if c.conf.roundup_power2_divisions != newest.roundup_power2_divisions {
                        read_otherwise += 1;
                    }
                }
            }
            // up to 2.9 the lists round otherwise than 2.15 reads them
            assert_eq!(read_otherwise > 0, r != "2.10", "{r}");
        }
    }

    #[test]
    fn bad_strings_are_rejected_with_the_input() {
        let e = Candidate::parse("no_such_key:1").unwrap_err().to_string();
        assert!(e.contains("'no_such_key:1'"), "{e}");
    }
}
