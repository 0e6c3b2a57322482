//! Allocator configuration: the meaning of `PYTORCH_CUDA_ALLOC_CONF` (torch 2.15) plus
//! cachalot's own opt-in keys from `CACHALOT_ALLOC_CONF`.
//!
//! A configuration is parsed once into an immutable [`AllocConf`] that each allocator owns, so
//! many configurations can run side by side in one process (the advisor does).

//!
//! Files, in the order a string flows through them: [`keys`](KeyDoc) (the key table and
//! torch's number readers), `tokenizer` (torch's `ConfigTokenizer`), `walker` (one pass's index
//! arithmetic and bookkeeping), `passes` (torch's load-time scan and its two passes, and the
//! public parse functions), `environment` (which variables torch reads, the no-caching
//! variables, and [`Settings::resolve`], the one place the process environment becomes a configuration),
//! `errors` ([`ConfigError`], [`Warning`]), `versions` (what torch 2.4 … 2.14 accept and
//! decide differently: [`TorchVersion`]).

mod environment;
mod errors;
mod keys;
mod passes;
mod tokenizer;
mod versions;
mod walker;

pub use environment::{
    ALLOC_VAR, CACHALOT_VAR, CUDA_VAR, EnvSource, HIP_VAR, NO_CUDA_CACHING_VAR, NO_HIP_CACHING_VAR,
    Overrides, Settings, from_env,
};
pub use errors::{ConfigError, Warning};
pub use keys::{KEYS, KeyDoc, Pass, lookup};
pub use passes::{apply_cachalot, parse_cachalot, parse_pytorch};
pub use versions::{
    DIFFERENCES, Difference, DifferenceRow, TorchVersion, VersionError, VersionNote,
};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// Which allocator implementation serves requests: the `backend` key, and the no-caching
/// variables on top of it. The one notion of "backend" in cachalot; the replay, the Rust API
/// and the C library all dispatch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    /// PyTorch's caching allocator (`backend:native`, the default).
    #[default]
    Native,
    /// The driver's stream-ordered pool (`backend:cudaMallocAsync`).
    CudaMallocAsync,
    /// No caching: `cudaMalloc`/`cudaFree` per request (`backend:native` with
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING=1`). Never parsed from a configuration string: only
    /// [`Settings::resolve`] sets it.
    Uncached,
}

impl Backend {
    /// The name torch reports (`torch.cuda.get_allocator_backend()`; without caching it is
    /// still "native").
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native | Backend::Uncached => "native",
            Backend::CudaMallocAsync => "cudaMallocAsync",
        }
    }

    /// The name torch reports ([`Backend::name`]).
    pub fn torch_name(self) -> &'static str {
        self.name()
    }

    /// Whether this is torch's caching allocator.
    pub fn caches(self) -> bool {
        self == Backend::Native
    }
}

/// An expandable-segment virtual-address reserve (`expandable_segments_reserve` and the
/// values of `expandable_segments_reserve_by_class`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReserveSpec {
    /// A fraction of the device's total memory (`0.5`); any positive finite value.
    Fraction(f64),
    /// An absolute size in GiB (`40G` or `40g`).
    GiB(f64),
}

impl ReserveSpec {
    /// The reserve in bytes for a device of `total` bytes, saturating at `u64::MAX` as torch
    /// does (the allocator then caps it at the full 1.125 × `total` reserve).
    pub fn resolve_bytes(self, total: u64) -> u64 {
        let bytes = match self {
            ReserveSpec::Fraction(f) => f * total as f64,
            ReserveSpec::GiB(g) => g * (1u64 << 30) as f64,
        };
        // `as` saturates (and maps NaN to 0), which is what torch's explicit check does.
        bytes as u64
    }
}

/// A validated allocator configuration. Field defaults are torch 2.15's.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    /// `backend`; [`Backend::Uncached`] only from [`Settings::resolve`] (the no-caching
    /// variables).
    pub backend: Backend,
    /// `max_split_size_mb` in bytes; `u64::MAX` = unlimited (the default). Blocks of at least
    /// this size are "oversize": never split, reused only by requests of at least this size.
    pub max_split_size: u64,
    /// `max_non_split_rounding_mb` in bytes: how much bigger than an oversize request a cached
    /// oversize block may be and still be handed out whole. Default 20 MiB.
    pub max_non_split_rounding_size: u64,
    /// `large_segment_size_mb` in bytes: segment size for 1–10 MiB requests and the page size
    /// of large-pool expandable segments. Default 20 MiB.
    pub large_segment_size: u64,
    /// `roundup_power2_divisions`: 16 slots; slot *i* covers requests in [2^i MiB, 2^(i+1) MiB),
    /// slot 0 also everything below 1 MiB, slot 15 everything above. 0 or 1 = no power-of-two
    /// rounding.
    pub roundup_power2_divisions: [u64; 16],
    /// Legacy `roundup_bypass_threshold_mb` (PyTorch 1.13) in bytes: requests above it skip
    /// power-of-two rounding. `u64::MAX` = off. torch ≥ 2.0 rejects the key; cachalot accepts
    /// it with a warning.
    pub roundup_bypass_threshold: u64,
    /// `garbage_collection_threshold`, 0 = off. Needs a memory fraction below 1.
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `release_lock_on_cudamalloc`.
    pub release_lock_on_cudamalloc: bool,
    /// `per_process_memory_fraction` in [0, 1]; 1 = the whole device.
    pub per_process_memory_fraction: f64,
    /// `throw_on_cudamalloc_oom`.
    pub throw_on_cudamalloc_oom: bool,
    /// `pinned_use_cuda_host_register` (host allocator only; recorded, no effect here).
    pub pinned_use_cuda_host_register: bool,
    /// `pinned_num_register_threads` (host allocator only).
    pub pinned_num_register_threads: u64,
    /// `pinned_use_background_threads` (host allocator only).
    pub pinned_use_background_threads: bool,
    /// `pinned_reserve_segment_size_mb` in MiB (host allocator only).
    pub pinned_reserve_segment_size_mb: u64,
    /// `graph_capture_record_stream_reuse` (CUDA graphs only; recorded).
    pub graph_capture_record_stream_reuse: bool,
    /// `pinned_max_round_threshold_mb` in bytes (host allocator only); `u64::MAX` = unset.
    pub pinned_max_round_threshold: u64,
    /// `pinned_max_cached_size_mb` in bytes (host allocator only); `u64::MAX` = unset.
    pub pinned_max_cached_size: u64,
    /// `pinned_free_catch_all` (host allocator only; recorded).
    pub pinned_free_catch_all: bool,
    /// `expandable_segments_reserve`: virtual-address reserve of each expandable segment.
    /// `None` = torch's historical 1.125 × device memory.
    pub expandable_segments_reserve: Option<ReserveSpec>,
    /// `expandable_segments_reserve_by_class`: per stream-class reserves, in first-seen order
    /// (a repeated class keeps its place and takes the later value).
    pub expandable_segments_reserve_by_class: Vec<(String, ReserveSpec)>,
    /// The raw string this configuration was parsed from (`last_allocator_settings`).
    pub last_allocator_settings: String,
    /// cachalot's own opt-in behaviour (from `CACHALOT_ALLOC_CONF`).
    pub cachalot: CachalotOptions,
    /// The torch release whose decisions the allocator makes where releases differ (see
    /// [`TorchVersion`]); [`TorchVersion::NEWEST`] unless [`AllocConf::for_torch`] set it.
    pub torch: TorchVersion,
}

/// Behaviour that differs from torch 2.15 on purpose. Every field defaults to torch's
/// behaviour; each is set only through `CACHALOT_ALLOC_CONF`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CachalotOptions {
    /// `expandable_oversize_exempt:True`: with expandable segments, the `max_split_size_mb`
    /// oversize rules do not apply to expandable blocks (torch issue #123548: reserved memory
    /// grows without bound when both are set).
    pub expandable_oversize_exempt: bool,
    /// `research_after_flush:True`: after the last-resort cache flush, search the cache again
    /// before allocating (torch issue #189504: a spurious OOM when a block freed by the flush
    /// would fit).
    pub research_after_flush: bool,
}

impl Default for AllocConf {
    fn default() -> Self {
        AllocConf {
            backend: Backend::Native,
            max_split_size: u64::MAX,
            max_non_split_rounding_size: 20 * MIB,
            large_segment_size: 20 * MIB,
            roundup_power2_divisions: [0; 16],
            roundup_bypass_threshold: u64::MAX,
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            per_process_memory_fraction: 1.0,
            throw_on_cudamalloc_oom: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            pinned_reserve_segment_size_mb: 0,
            graph_capture_record_stream_reuse: false,
            pinned_max_round_threshold: u64::MAX,
            pinned_max_cached_size: u64::MAX,
            pinned_free_catch_all: false,
            expandable_segments_reserve: None,
            expandable_segments_reserve_by_class: Vec::new(),
            last_allocator_settings: String::new(),
            cachalot: CachalotOptions::default(),
            torch: TorchVersion::NEWEST,
        }
    }
}

impl AllocConf {
    /// This configuration as torch `torch` reads and applies it: the release's own decisions
    /// where releases differ, and its own reading of a `roundup_power2_divisions` list with
    /// `>` (the `PYTORCH_CUDA_ALLOC_CONF` string is read again for that one key).
    pub fn for_torch(mut self, torch: TorchVersion) -> AllocConf {
        self.torch = torch;
        if !torch.roundup_open_after_last()
            && self.last_allocator_settings.contains('>')
            && let Ok((again, _)) = passes::parse_pytorch_as(&self.last_allocator_settings, torch)
        {
            self.roundup_power2_divisions = again.roundup_power2_divisions;
        }
        self
    }
}

#[cfg(test)]
mod tests;
