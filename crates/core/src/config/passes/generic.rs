//! torch's generic pass (`AcceleratorAllocatorConfig::parseArgs`): the size, rounding,
//! garbage-collection and expandable keys, the pinned keys it owns, the legacy key, and (in
//! `CACHALOT_ALLOC_CONF`) cachalot's own keys.

use crate::config::errors::{Fault, Warning};
use crate::config::keys::{self, LEGACY_KEY, Pass};
use crate::config::walker::{Mode, R, Walk, is_known, unknown_key};
use crate::config::{AllocConf, MIB};

/// `large_segment_size_mb : value`; returns the value's index.
fn large_segment(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    let v = w.mib_entry(i)?;
    if v <= 10 {
        let torch = "CachingAllocator option large_segment_size_mb must be > 10 MB";
        return Err(w.reject(
            i + 2,
            torch,
            "large_segment_size_mb must be greater than 10 (MiB)",
        ));
    }
    c.large_segment_size = v * MIB;
    Ok(i + 2)
}

/// `max_split_size_mb` / `max_non_split_rounding_mb`: at least `large_segment_size_mb`; bytes.
fn bounded_mib(w: &mut Walk, c: &AllocConf, i: usize) -> R<u64> {
    let (key, v) = (w.key_text(), w.size_entry(i)?);
    let min = c.large_segment_size / MIB;
    if v < min {
        let torch = format!("CachingAllocator option {key} too small, must be >= {min}");
        let of = if min == 20 {
            ""
        } else {
            " (= large_segment_size_mb)"
        };
        return Err(w.reject(
            i + 2,
            torch,
            format!("{key} must be at least {min}{of} (MiB)"),
        ));
    }
    Ok(w.clamp_mib(i + 2, v)? * MIB)
}

/// The generic pass (`AcceleratorAllocatorConfig::parseArgs`). `reset` = torch's behaviour of
/// resetting the options it owns at every parse; `false` for `CACHALOT_ALLOC_CONF` on top.
pub(super) fn generic_pass(w: &mut Walk, c: &mut AllocConf, reset: bool) -> R<()> {
    if reset {
        c.max_split_size = u64::MAX;
        c.roundup_power2_divisions = [0; 16];
        c.garbage_collection_threshold = 0.0;
        c.large_segment_size = 20 * MIB;
    }
    let mut named_large = false;
    for i in 0..w.t.len() {
        if w.t.text(i) == "large_segment_size_mb" {
            w.key = i;
            large_segment(w, c, i)?;
            named_large = true;
        }
    }
    if reset || named_large {
        c.max_non_split_rounding_size = c.large_segment_size;
    }
    let mut i = 0;
    while i < w.t.len() {
        w.key = i;
        let key = w.t.text(i);
        // The legacy key and cachalot's keys belong to this pass too.
        let owner = keys::lookup(key).is_some_and(|k| k.pass == Pass::Generic);
        let cachalot = w.mode == Mode::Cachalot;
        i = match key {
            // Read by the pre-pass above; the main loop only steps over it.
            "large_segment_size_mb" => w.skip_key(i)?,
            "max_split_size_mb" => {
                c.max_split_size = bounded_mib(w, c, i)?;
                i + 2
            }
            "max_non_split_rounding_mb" => {
                c.max_non_split_rounding_size = bounded_mib(w, c, i)?;
                i + 2
            }
            "garbage_collection_threshold" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(v > 0.0 && v < 1.0) {
                    let torch = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
                    let why = format!(
                        "{key} must be strictly between 0 and 1, got '{}'",
                        w.t.text(i + 2)
                    );
                    return Err(w.reject(i + 2, torch, why));
                }
                c.garbage_collection_threshold = v;
                i + 2
            }
            "roundup_power2_divisions" => roundup(w, c, i)?,
            "expandable_segments" => w.bool_entry(i, &mut c.expandable_segments)?,
            "pinned_use_background_threads" => {
                w.bool_entry(i, &mut c.pinned_use_background_threads)?
            }
            "pinned_max_round_threshold_mb" => {
                c.pinned_max_round_threshold = w.mib_entry(i)? * MIB;
                i + 2
            }
            "pinned_max_cached_size_mb" => {
                c.pinned_max_cached_size = w.mib_entry(i)? * MIB;
                i + 2
            }
            LEGACY_KEY => {
                c.roundup_bypass_threshold = w.mib_entry(i)? * MIB;
                i + 2
            }
            "expandable_oversize_exempt" if cachalot => {
                w.bool_entry(i, &mut c.cachalot.expandable_oversize_exempt)?
            }
            "research_after_flush" if cachalot => {
                w.bool_entry(i, &mut c.cachalot.research_after_flush)?
            }
            _ if !is_known(key, w.mode) => return Err(unknown_key(w, i, "Accelerator")),
            _ => w.skip_key(i)?,
        };
        i = w.next(i, owner)?;
    }
    let (round, cached) = (c.pinned_max_round_threshold, c.pinned_max_cached_size);
    if round != u64::MAX && cached != u64::MAX && round > cached {
        let torch = format!(
            "pinned_max_round_threshold_mb ({}) > pinned_max_cached_size_mb ({}). The cache size \
             limit takes precedence: allocations above pinned_max_cached_size_mb are never \
             rounded up.",
            round / MIB,
            cached / MIB
        );
        let warning = Warning::new(w.var, "", torch.clone());
        w.warns.push(Warning {
            torch_text: Some(torch),
            ..warning
        });
    }
    Ok(())
}

/// `roundup_power2_divisions : N` or `: [MiB:N, ..., >:N]`; returns the last index used.
fn roundup(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    w.sep(i + 1, ":")?;
    let mut i = i + 2;
    // torch ≤ 2.8 fills a `>` entry from the last interval given, overwriting its value.
    let open_after = usize::from(c.torch.roundup_open_after_last());
    let divs = &mut c.roundup_power2_divisions;
    if w.get(i)? != "[" {
        let v = w.size_t(i)?;
        if !v.is_power_of_two() {
            let torch = "For roundups, the divisions has to be power of 2 ";
            let why = format!(
                "roundup_power2_divisions must be a power of two (1, 2, 4, 8, ...) or a \
                 [MiB:N,...,>:N] list, got {v}"
            );
            return Err(w.reject(i, torch, why));
        }
        *divs = [v; 16];
        return Ok(i);
    }
    let (mut first, mut last_index, mut touched) = (true, 0usize, [false; 16]);
    loop {
        i += 1;
        if i >= w.t.len() || w.t.text(i) == "]" {
            break;
        }
        let key_at = i;
        w.sep(i + 1, ":")?;
        i += 2;
        let v = w.size_t(i)?;
        if v != 0 && !v.is_power_of_two() {
            let torch = "For roundups, the divisions has to be power of 2 or 0 to disable roundup ";
            let why = format!(
                "roundup_power2_divisions list values must be 0 or a power of two, got {v}"
            );
            return Err(w.reject(i, torch, why));
        }
        if w.t.text(key_at) == ">" {
            if first {
                let msg = "'>' before any interval fills from the 2 MiB interval up: requests \
                           below 2 MiB keep slot 0 (0 = no rounding)";
                w.warn(i, msg, None);
            }
            let from = last_index + open_after;
            divs[from..].fill(v);
            touched[from..].fill(true);
        } else {
            let boundary = w.size_t(key_at)?;
            if !boundary.is_power_of_two() {
                let torch = "For roundups, the intervals have to be power of 2 ";
                let why = format!(
                    "roundup_power2_divisions list keys must be powers of two (MiB) or '>', got '{}'",
                    w.t.text(key_at)
                );
                return Err(w.reject(i, torch, why));
            }
            let index = (63 - boundary.leading_zeros() as usize).min(15);
            if first {
                divs[..index].fill(v);
                touched[..index].fill(true);
                first = false;
            }
            divs[index] = v;
            touched[index] = true;
            last_index = index;
        }
        if w.get(i + 1)? != "]" {
            w.sep(i + 1, ",")?;
            i += 1;
        }
    }
    if i >= w.t.len() {
        let file = "/__w/pytorch/pytorch/c10/core/AllocatorConfig.cpp";
        let f = Fault::unclosed("i < tokenizer.size()", file, 213);
        return Err(w.fail(
            i,
            f,
            "the list of 'roundup_power2_divisions' has no closing ']'",
        ));
    }
    let last = touched.iter().rposition(|t| *t).unwrap_or(0);
    let gaps: Vec<String> = (0..last)
        .filter(|s| !touched[*s])
        .map(|s| format!("{} MiB", 1u64 << s))
        .collect();
    if !gaps.is_empty() {
        let msg = format!(
            "the intervals starting at {} are not listed; torch does not fill gaps, so they get \
             no power-of-two rounding",
            gaps.join(", ")
        );
        w.warn(i, msg, None);
    }
    Ok(i)
}
