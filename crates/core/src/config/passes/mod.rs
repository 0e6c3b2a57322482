//! Reading `PYTORCH_CUDA_ALLOC_CONF` exactly as torch 2.15 does, and cachalot's
//! `CACHALOT_ALLOC_CONF` on top of it.
//!
//! torch 2.15 reads one string three times, and this module repeats all three passes, because
//! they disagree on odd input and the first one to fail decides the error:
//!
//! 1. **load time** (`libc10_cuda.so` static initialiser): walks `key : value ,` triples looking
//!    for `backend`. Anything it trips over aborts the process (`terminate called ...`).
//! 2. **CUDA pass** (`CUDAAllocatorConfig::parseArgs`): owns `backend`, `release_lock_*`,
//!    `per_process_memory_fraction`, `throw_on_cudamalloc_oom`, `expandable_segments_reserve*`,
//!    `graph_capture_*` and the `pinned_*` keys except the three below; rejects unknown keys.
//! 3. **generic pass** (`AcceleratorAllocatorConfig::parseArgs`): owns `max_split_size_mb`,
//!    `max_non_split_rounding_mb`, `large_segment_size_mb` (read first, from any position),
//!    `roundup_power2_divisions`, `garbage_collection_threshold`, `expandable_segments`,
//!    `pinned_use_background_threads`, `pinned_max_round_threshold_mb`, `pinned_max_cached_size_mb`.
//!
//! Each pass skips the other's keys with `skipKey` (one token, or a whole `[...]` list). With the
//! native backend the CUDA pass runs before the generic one; with `backend:cudaMallocAsync` the
//! generic pass runs first (that is the order the oracle shows).
//!
//! Findings from the oracle (`shared/oracle`, torch 2.15.0; fields it does not print were read
//! with a C++ probe linked against the same libraries). About 20 000 generated strings were
//! compared with the oracle (acceptance, every `config_effective` field, exception type, message,
//! torch's warnings, and that `to_pytorch_string` reads back the same) with no difference left.
//!
//! | topic | spec (§1, §17.4) | oracle |
//! |---|---|---|
//! | env precedence | main-2026: CUDA → HIP → ALLOC, first set wins | generic pass: CUDA → HIP → ALLOC; CUDA pass and load-time backend: CUDA → ALLOC (HIP is ignored there on a CUDA build). An empty value counts as set |
//! | error order | not stated | load time, then CUDA pass, then generic pass; generic first with `cudaMallocAsync`, whose unknown-key text is "... in Accelerator allocator config." |
//! | missing value (`max_split_size_mb:`) | INTERNAL ASSERT "Index out of bounds" | the load-time scan hits it first: the process aborts (`terminate`, exit 134) |
//! | unclosed `[` | "Expected closing bracket" | same text, from `skipKey` at load time (abort) |
//! | whitespace | all `isspace` dropped | also *inside* words: `1 00` = 100; `a:1 b:2` glues `1b` and aborts |
//! | `max_split_size_mb` bound | `>= 20` | `>= large_segment_size_mb`; clamped to 17592186044415 MiB, so `-1` (wraps) = 18446744073708503040 B |
//! | `large_segment_size_mb` | `> 10`, parsed first | read from *any* token position, even inside another key's list (last one wins); resets `max_non_split_rounding_mb` to it |
//! | `max_non_split_rounding_mb` | `>= 20` | `>= large_segment_size_mb` |
//! | pinned keys | `pinned_max_*` only named | `pinned_max_round_threshold_mb`, `pinned_max_cached_size_mb`, `pinned_free_catch_all` are keys, unbounded; torch warns when round > cached |
//! | `expandable_segments_reserve` | fraction or `<n>G` | the whole token as a decimal (no hex, `inf`, `nan`; subnormal ok), > 0; a bad value only warns and keeps the old one; `[` is taken as the value |
//! | `..._reserve_by_class` | list | each occurrence replaces the map; a repeated class takes the later value |
//! | cudaMallocAsync warning | any non-backend key | only CUDA-pass keys trigger it (`max_split_size_mb` does not) |
//! | two `backend` entries | not stated | different values: "parsed at runtime != ... at load time" assertion |
//! | roundup list checks | not stated | the division is checked before the key: `[abc:3]` reports the division |
//! | GC and fraction 1.0 | ≈2.10+: 1.0 = no limit | confirmed: GC stays off at 1.0, runs at 0.9999999999 |
//! | `stod` | prefix parse | also hex floats and `inf`/`nan`; `out_of_range` on overflow and on results tiny after rounding (`2.2250738585072012e-308` rejected, `...13e-308` accepted, exact `0x1p-1074` accepted) |
//!
//! One known gap: a decimal that is *exactly* a subnormal (hundreds of digits) is treated as
//! inexact, so rejected where glibc would accept it.

mod cuda;
mod generic;

use cuda::cuda_pass;
use generic::generic_pass;

use super::environment::{CACHALOT_VAR, CUDA_VAR};
use super::errors::{ConfigError, Fault, Warning};
use super::keys::{self, LEGACY_KEY, Pass, divisions_value};
use super::tokenizer::Tokens;
use super::walker::{Failure, Mode, R, Seen, Walk};
use super::{AllocConf, Backend, KEYS, MIB};

/// The load-time backend scan. `Some` when a `backend` key was found.
fn load_time(w: &mut Walk) -> R<Option<Backend>> {
    let mut i = 0;
    while i < w.t.len() {
        w.key = i;
        if w.t.text(i) == "backend" {
            w.index(i + 1)?;
            let async_ = w.get(i + 2)? == "cudaMallocAsync";
            return Ok(Some(if async_ {
                Backend::CudaMallocAsync
            } else {
                Backend::Native
            }));
        }
        i = w.skip_key(i)? + 2;
    }
    Ok(None)
}

/// The variable and string for torch's generic pass and for its CUDA pass.
pub(super) type Source<'a> = Option<(&'static str, &'a str)>;

fn finish(f: Failure, w: &mut Walk, at_load: bool) -> ConfigError {
    w.key = f.key;
    let entry = w.entry(f.at);
    ConfigError {
        var: w.var,
        entry,
        reason: f.reason,
        fault: Box::new(f.fault),
        at_load,
    }
}

/// The whole torch 2.15 sequence on `conf`: the load-time scan, then the two passes in
/// torch's order. `reset` = torch's semantics; `false` applies a string on top. On error
/// `conf` is unchanged.
pub(super) fn run(
    conf: &mut AllocConf,
    generic: Source,
    cuda: Source,
    mode: Mode,
    reset: bool,
) -> Result<Vec<Warning>, ConfigError> {
    let (gt, ct) = (
        generic.map(|(v, s)| (v, Tokens::new(s))),
        cuda.map(|(v, s)| (v, Tokens::new(s))),
    );
    let mut cw = ct.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    let mut gw = gt.as_ref().map(|(v, t)| Walk::new(t, v, mode));
    let mut named = None;
    if let Some(w) = cw.as_mut() {
        named = load_time(w).map_err(|f| finish(f, w, true))?;
    }
    let load = named.unwrap_or(if reset { Backend::Native } else { conf.backend });
    let mut c = conf.clone();
    for step in 0..2 {
        if (step == 0) == (load != Backend::CudaMallocAsync) {
            if let Some(w) = cw.as_mut() {
                cuda_pass(w, &mut c, load).map_err(|f| finish(f, w, false))?;
            }
        } else if let Some(w) = gw.as_mut() {
            generic_pass(w, &mut c, reset).map_err(|f| finish(f, w, false))?;
        }
    }
    c.backend = load;
    let mut warns = Vec::new();
    for (var, t) in gt.iter().chain(&ct) {
        for tok in t.toks.iter().filter(|t| t.squeezed) {
            let raw = &t.src[tok.start..tok.end];
            let msg = format!(
                "whitespace inside '{raw}' is ignored: read as '{}'",
                tok.text
            );
            warns.push(Warning::new(var, raw, msg));
        }
    }
    let mut seen = Vec::new();
    for w in cw.into_iter().chain(gw) {
        warns.extend(w.warns);
        seen.extend(w.seen);
    }
    whole_config_warnings(&c, &seen, &mut warns);
    if !reset {
        check_combination(&c, &seen)?;
    }
    let mut unique: Vec<Warning> = Vec::new();
    for w in warns {
        if !unique.contains(&w) {
            unique.push(w);
        }
    }
    *conf = c;
    Ok(unique)
}

/// Remarks on the configuration as a whole, attached to the entry they are about.
fn whole_config_warnings(c: &AllocConf, seen: &Seen, warns: &mut Vec<Warning>) {
    let mut push = |key: &str, message: String| {
        if let Some((_, entry, var)) = seen.iter().rev().find(|(k, _, _)| k == key) {
            warns.push(Warning::new(var, entry.clone(), message));
        }
    };
    if c.garbage_collection_threshold > 0.0 && c.per_process_memory_fraction >= 1.0 {
        let msg = "has no effect unless a memory fraction below 1 is set \
                   (per_process_memory_fraction or torch.cuda.set_per_process_memory_fraction)";
        push("garbage_collection_threshold", msg.into());
    }
    if c.backend == Backend::CudaMallocAsync {
        let ignored = KEYS
            .iter()
            .map(|k| k.name)
            .filter(|k| keys::is_pass_key(k, Pass::Generic) && !k.starts_with("pinned"));
        for key in ignored {
            push(
                key,
                format!("backend:cudaMallocAsync ignores {key}; torch does not warn about it"),
            );
        }
    }
    if c.roundup_bypass_threshold != u64::MAX {
        let t = c.roundup_bypass_threshold / MIB;
        let exact = t == 0 || (t.is_power_of_two() && (1..=15).contains(&t.trailing_zeros()));
        let list = divisions_value(&c.effective_divisions()).unwrap_or_else(|| "0".into());
        let how = match exact {
            true => "exactly",
            false => "approximately (exact only for 0 or a power-of-two MiB from 2 to 32768)",
        };
        let msg = format!(
            "PyTorch >= 2.0 rejects this PyTorch 1.13 key (Unrecognized key); cachalot accepts \
             it. In torch >= 2.0 write roundup_power2_divisions:{list} instead ({how} the same: \
             0 for the intervals above {t} MiB)"
        );
        push(LEGACY_KEY, msg);
    }
}

/// `CACHALOT_ALLOC_CONF` applied on top must still be a configuration torch would accept.
fn check_combination(c: &AllocConf, seen: &Seen) -> Result<(), ConfigError> {
    let min = c.large_segment_size / MIB;
    let sizes = [
        ("max_split_size_mb", c.max_split_size),
        ("max_non_split_rounding_mb", c.max_non_split_rounding_size),
    ];
    for (key, bytes) in sizes {
        if bytes != u64::MAX && bytes < c.large_segment_size {
            let blame = seen
                .iter()
                .rev()
                .find(|(k, _, _)| k == "large_segment_size_mb" || k == key);
            let (var, entry) =
                blame.map_or((CACHALOT_VAR, String::new()), |(_, e, v)| (*v, e.clone()));
            let fault = Fault::Value(format!(
                "CachingAllocator option {key} too small, must be >= {min}"
            ));
            let reason = format!(
                "{key} ({} MiB) must be at least large_segment_size_mb ({min} MiB)",
                bytes / MIB
            );
            return Err(ConfigError {
                var,
                entry,
                reason,
                fault: Box::new(fault),
                at_load: false,
            });
        }
    }
    Ok(())
}

/// Parses a `PYTORCH_CUDA_ALLOC_CONF` string the way torch 2.15 does, starting from the
/// defaults. Accepts exactly what torch accepts, plus the PyTorch 1.13 key
/// `roundup_bypass_threshold_mb` (with a warning); the warnings also say how junk was read.
pub fn parse_pytorch(s: &str) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    parse_as(s, CUDA_VAR, Mode::Pytorch)
}

/// Parses a `CACHALOT_ALLOC_CONF` string on its own: the same grammar and keys as
/// [`parse_pytorch`] plus cachalot's `expandable_oversize_exempt` and `research_after_flush`.
pub fn parse_cachalot(s: &str) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    parse_as(s, CACHALOT_VAR, Mode::Cachalot)
}

/// [`parse_pytorch`] as torch `torch` parses the string (only the `>` of a
/// `roundup_power2_divisions` list reads differently across releases).
pub(crate) fn parse_pytorch_as(
    s: &str,
    torch: crate::config::TorchVersion,
) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    let mut conf = AllocConf {
        torch,
        ..AllocConf::default()
    };
    let warns = run(
        &mut conf,
        Some((CUDA_VAR, s)),
        Some((CUDA_VAR, s)),
        Mode::Pytorch,
        true,
    )?;
    conf.last_allocator_settings = s.to_string();
    Ok((conf, warns))
}

fn parse_as(
    s: &str,
    var: &'static str,
    mode: Mode,
) -> Result<(AllocConf, Vec<Warning>), ConfigError> {
    let mut conf = AllocConf::default();
    let warns = run(&mut conf, Some((var, s)), Some((var, s)), mode, true)?;
    conf.last_allocator_settings = s.to_string();
    Ok((conf, warns))
}

/// Applies a `CACHALOT_ALLOC_CONF` string on top of `conf`: only the keys it names change
/// (`large_segment_size_mb` also moves `max_non_split_rounding_mb` unless that is named too).
/// On error `conf` is left unchanged.
pub fn apply_cachalot(conf: &mut AllocConf, s: &str) -> Result<Vec<Warning>, ConfigError> {
    let src = Some((CACHALOT_VAR, s));
    run(conf, src, src, Mode::Cachalot, false)
}
