//! The configuration keys as a table ([`KEYS`]), and the ways back from an [`AllocConf`] to
//! text: [`AllocConf::describe`] (one line per key) and [`AllocConf::to_pytorch_string`].

use super::{AllocConf, Backend, MIB, ReserveSpec};

/// One configuration key: what it is called, its unit, its default and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key as written in the configuration string.
    pub name: &'static str,
    /// Other spellings torch accepts for the same option (the ROCm names).
    pub aliases: &'static [&'static str],
    /// The unit or form of the value.
    pub unit: &'static str,
    /// The default, as text.
    pub default: &'static str,
    /// What the option does, in one line.
    pub doc: &'static str,
    /// Accepted only in `CACHALOT_ALLOC_CONF` (torch has no such key).
    pub cachalot_only: bool,
    /// A PyTorch 1.13 key that torch ≥ 2.0 rejects; cachalot accepts it with a warning.
    pub legacy: bool,
}

const fn key(
    name: &'static str,
    unit: &'static str,
    default: &'static str,
    doc: &'static str,
) -> KeyDoc {
    KeyDoc { name, aliases: &[], unit, default, doc, cachalot_only: false, legacy: false }
}

/// Every key cachalot understands, in the order `describe` and `to_pytorch_string` use.
pub const KEYS: &[KeyDoc] = &[
    key("backend", "name", "native", "allocator implementation: native (the caching allocator) or cudaMallocAsync (the driver's pool)"),
    key("max_split_size_mb", "MiB", "unlimited", "blocks at least this big are never split and only serve requests at least this big (>= large_segment_size_mb)"),
    key("max_non_split_rounding_mb", "MiB", "large_segment_size_mb (20)", "how much bigger than an oversize request a cached oversize block may be and still be handed out whole"),
    key("large_segment_size_mb", "MiB", "20", "segment size for 1-10 MiB requests and page size of large-pool expandable segments (> 10)"),
    key("roundup_power2_divisions", "N or [MiB:N,...,>:N]", "0 (off)", "round requests up to 1/N steps between powers of two, per size interval starting at MiB"),
    KeyDoc { legacy: true, ..key("roundup_bypass_threshold_mb", "MiB", "unlimited", "PyTorch 1.13: requests above this skip power-of-two rounding (torch >= 2.0 rejects the key)") },
    key("garbage_collection_threshold", "fraction (0, 1)", "0 (off)", "free old cached segments once reserved memory passes this share of the memory-fraction limit (needs a fraction < 1)"),
    key("expandable_segments", "True/False", "False", "grow segments by mapping more pages instead of allocating new segments"),
    KeyDoc { aliases: &["release_lock_on_hipmalloc"], ..key("release_lock_on_cudamalloc", "True/False", "False", "release the allocator lock while cudaMalloc runs") },
    key("per_process_memory_fraction", "fraction [0, 1]", "1", "cap reserved memory at this fraction of the device's memory"),
    key("throw_on_cudamalloc_oom", "True/False", "False", "with a fraction below 1, reject requests that would pass it before calling cudaMalloc"),
    key("expandable_segments_reserve", "fraction or <n>G", "1.125 x device memory", "virtual address space reserved for each expandable segment"),
    key("expandable_segments_reserve_by_class", "[class:reserve,...]", "none", "per stream-class reserve, overriding expandable_segments_reserve"),
    key("graph_capture_record_stream_reuse", "True/False", "False", "during CUDA-graph capture, reuse blocks freed with cross-stream uses by graph topology"),
    KeyDoc { aliases: &["pinned_use_hip_host_register"], ..key("pinned_use_cuda_host_register", "True/False", "False", "host allocator: pin with malloc + cudaHostRegister instead of cudaHostAlloc") },
    key("pinned_num_register_threads", "threads", "1", "host allocator: threads that pre-fault pages for cudaHostRegister (power of two <= 128)"),
    key("pinned_use_background_threads", "True/False", "False", "host allocator: process events on a background thread"),
    key("pinned_reserve_segment_size_mb", "MiB", "0 (off)", "host allocator: pre-reserve a pinned segment of this size for small requests"),
    key("pinned_max_round_threshold_mb", "MiB", "unlimited", "host allocator: requests above this skip power-of-two rounding"),
    key("pinned_max_cached_size_mb", "MiB", "unlimited", "host allocator: blocks above this are freed instead of cached"),
    key("pinned_free_catch_all", "True/False", "False", "host allocator: catch-all free behaviour (recorded only)"),
    KeyDoc { cachalot_only: true, ..key("expandable_oversize_exempt", "True/False", "False", "cachalot: max_split_size_mb rules do not apply to expandable blocks (torch #123548)") },
    KeyDoc { cachalot_only: true, ..key("research_after_flush", "True/False", "False", "cachalot: search the cache again after the last-resort flush before allocating (torch #189504)") },
];

/// `roundup_power2_divisions` as torch syntax that parses back to exactly `d`; `None` when
/// every slot is 0 (the default).
pub(crate) fn divisions_value(d: &[u64; 16]) -> Option<String> {
    if d.iter().all(|v| *v == 0) {
        return None;
    }
    if d.iter().all(|v| *v == d[0]) {
        return Some(if d[0].is_power_of_two() { d[0].to_string() } else { format!("[32768:{}]", d[0]) });
    }
    // The first entry also fills the slots below it; `>` fills from the slot after the last
    // entry; slots nobody names stay 0.
    let lead = d.iter().take_while(|v| **v == d[0]).count() - 1;
    let tail = 16 - d.iter().rev().take_while(|v| **v == d[15]).count();
    let mut parts: Vec<String> = (lead..tail).map(|s| format!("{}:{}", 1u64 << s, d[s])).collect();
    if tail < 16 && d[15] != 0 {
        parts.push(format!(">:{}", d[15]));
    }
    Some(format!("[{}]", parts.join(",")))
}

fn mib(bytes: u64) -> String {
    if bytes % MIB == 0 { (bytes / MIB).to_string() } else { format!("{bytes}B") }
}

fn unlimited_mib(bytes: u64) -> String {
    if bytes == u64::MAX { "unlimited".into() } else { mib(bytes) }
}

fn flag(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

fn reserve(s: ReserveSpec) -> String {
    match s {
        ReserveSpec::Fraction(f) => format!("{f}"),
        ReserveSpec::GiB(g) => format!("{g}G"),
    }
}

impl AllocConf {
    /// Whether `garbage_collection_threshold` is active: a threshold above 0 and a memory
    /// fraction below 1 (torch 2.15 treats a fraction of exactly 1.0 as no limit, so GC stays
    /// off; the oracle confirms it).
    pub fn gc_enabled(&self) -> bool {
        self.garbage_collection_threshold > 0.0 && self.per_process_memory_fraction < 1.0
    }

    /// `roundup_power2_divisions` with the legacy `roundup_bypass_threshold_mb` folded in:
    /// 0 in every slot whose interval starts at or above the threshold. The same rounding as
    /// the bypass when the threshold is 0 or a power-of-two MiB from 2 to 32768.
    pub fn effective_divisions(&self) -> [u64; 16] {
        let mut d = self.roundup_power2_divisions;
        if self.roundup_bypass_threshold != u64::MAX {
            let t = self.roundup_bypass_threshold;
            for (slot, v) in d.iter_mut().enumerate() {
                let start = if slot == 0 { 0 } else { MIB << slot };
                if start >= t {
                    *v = 0;
                }
            }
        }
        d
    }

    /// The value of `key` in torch syntax, or `None` if it has its default.
    fn torch_value(&self, key: &str) -> Option<String> {
        let some = |b: bool, v: String| b.then_some(v);
        match key {
            "backend" => some(self.backend != Backend::Native, self.backend.name().into()),
            "max_split_size_mb" => some(self.max_split_size != u64::MAX, (self.max_split_size / MIB).to_string()),
            "max_non_split_rounding_mb" => some(
                self.max_non_split_rounding_size != self.large_segment_size,
                (self.max_non_split_rounding_size / MIB).to_string(),
            ),
            "large_segment_size_mb" => some(self.large_segment_size != 20 * MIB, (self.large_segment_size / MIB).to_string()),
            "roundup_power2_divisions" => divisions_value(&self.effective_divisions()),
            "garbage_collection_threshold" => some(self.garbage_collection_threshold != 0.0, format!("{}", self.garbage_collection_threshold)),
            "expandable_segments" => some(self.expandable_segments, flag(true)),
            "release_lock_on_cudamalloc" => some(self.release_lock_on_cudamalloc, flag(true)),
            "per_process_memory_fraction" => some(self.per_process_memory_fraction != 1.0, format!("{}", self.per_process_memory_fraction)),
            "throw_on_cudamalloc_oom" => some(self.throw_on_cudamalloc_oom, flag(true)),
            "expandable_segments_reserve" => self.expandable_segments_reserve.map(reserve),
            "expandable_segments_reserve_by_class" => {
                let by = &self.expandable_segments_reserve_by_class;
                let items: Vec<String> = by.iter().map(|(c, s)| format!("{c}:{}", reserve(*s))).collect();
                some(!by.is_empty(), format!("[{}]", items.join(",")))
            }
            "graph_capture_record_stream_reuse" => some(self.graph_capture_record_stream_reuse, flag(true)),
            "pinned_use_cuda_host_register" => some(self.pinned_use_cuda_host_register, flag(true)),
            "pinned_num_register_threads" => some(self.pinned_num_register_threads != 1, self.pinned_num_register_threads.to_string()),
            "pinned_use_background_threads" => some(self.pinned_use_background_threads, flag(true)),
            "pinned_reserve_segment_size_mb" => some(self.pinned_reserve_segment_size_mb != 0, self.pinned_reserve_segment_size_mb.to_string()),
            "pinned_max_round_threshold_mb" => some(self.pinned_max_round_threshold != u64::MAX, (self.pinned_max_round_threshold / MIB).to_string()),
            "pinned_max_cached_size_mb" => some(self.pinned_max_cached_size != u64::MAX, (self.pinned_max_cached_size / MIB).to_string()),
            "pinned_free_catch_all" => some(self.pinned_free_catch_all, flag(true)),
            _ => None,
        }
    }

    /// A canonical `PYTORCH_CUDA_ALLOC_CONF` string naming every option that differs from its
    /// default, in [`KEYS`] order. torch 2.15 accepts it and `parse_pytorch` reads it back to
    /// this configuration. Two exceptions: cachalot's own options are left out (they belong in
    /// `CACHALOT_ALLOC_CONF`), and a legacy `roundup_bypass_threshold_mb` is written as its
    /// torch ≥ 2.0 equivalent, a `roundup_power2_divisions` list (see
    /// [`AllocConf::effective_divisions`]).
    pub fn to_pytorch_string(&self) -> String {
        let parts: Vec<String> = KEYS
            .iter()
            .filter(|k| !k.cachalot_only && !k.legacy)
            .filter_map(|k| self.torch_value(k.name).map(|v| format!("{}:{v}", k.name)))
            .collect();
        parts.join(",")
    }

    /// One line per key of [`KEYS`]: (key, value, default, meaning). Values are written in the
    /// key's unit (MiB for `*_mb` keys).
    pub fn describe(&self) -> Vec<(String, String, String, &'static str)> {
        KEYS.iter()
            .map(|k| {
                let value = match k.name {
                    "backend" => self.backend.name().to_string(),
                    "max_split_size_mb" => unlimited_mib(self.max_split_size),
                    "max_non_split_rounding_mb" => mib(self.max_non_split_rounding_size),
                    "large_segment_size_mb" => mib(self.large_segment_size),
                    "roundup_power2_divisions" => divisions_value(&self.roundup_power2_divisions).unwrap_or_else(|| "0".into()),
                    "roundup_bypass_threshold_mb" => unlimited_mib(self.roundup_bypass_threshold),
                    "garbage_collection_threshold" => format!("{}", self.garbage_collection_threshold),
                    "expandable_segments" => flag(self.expandable_segments),
                    "release_lock_on_cudamalloc" => flag(self.release_lock_on_cudamalloc),
                    "per_process_memory_fraction" => format!("{}", self.per_process_memory_fraction),
                    "throw_on_cudamalloc_oom" => flag(self.throw_on_cudamalloc_oom),
                    "expandable_segments_reserve" => self.expandable_segments_reserve.map_or_else(|| "default".into(), reserve),
                    "expandable_segments_reserve_by_class" => self.torch_value(k.name).unwrap_or_else(|| "none".into()),
                    "graph_capture_record_stream_reuse" => flag(self.graph_capture_record_stream_reuse),
                    "pinned_use_cuda_host_register" => flag(self.pinned_use_cuda_host_register),
                    "pinned_num_register_threads" => self.pinned_num_register_threads.to_string(),
                    "pinned_use_background_threads" => flag(self.pinned_use_background_threads),
                    "pinned_reserve_segment_size_mb" => self.pinned_reserve_segment_size_mb.to_string(),
                    "pinned_max_round_threshold_mb" => unlimited_mib(self.pinned_max_round_threshold),
                    "pinned_max_cached_size_mb" => unlimited_mib(self.pinned_max_cached_size),
                    "pinned_free_catch_all" => flag(self.pinned_free_catch_all),
                    "expandable_oversize_exempt" => flag(self.cachalot.expandable_oversize_exempt),
                    "research_after_flush" => flag(self.cachalot.research_after_flush),
                    _ => String::new(),
                };
                (k.name.to_string(), value, k.default.to_string(), k.doc)
            })
            .collect()
    }
}
