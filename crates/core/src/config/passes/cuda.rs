//! torch's CUDA pass (`CUDAAllocatorConfig::parseArgs`): `backend`, the `release_lock_*`,
//! fraction, OOM-throwing, expandable-reserve and graph keys, and the pinned keys it owns.

use crate::config::errors::{Fault, Warning};
use crate::config::keys::{Pass, is_pass_key, reserve_spec};
use crate::config::walker::{R, Walk, is_known, unknown_key};
use crate::config::{AllocConf, Backend, ReserveSpec};

const ASYNC_WARNING: &str = "backend:cudaMallocAsync ignores max_split_size_mb,\
roundup_power2_divisions, and garbage_collect_threshold.";

/// The CUDA pass (`CUDAAllocatorConfig::parseArgs`).
pub(super) fn cuda_pass(w: &mut Walk, c: &mut AllocConf, load: Backend) -> R<()> {
    let (mut used_async, mut native_specific, mut i) = (false, false, 0);
    while i < w.t.len() {
        w.key = i;
        let key = w.t.text(i);
        let owner = is_pass_key(key, Pass::Cuda);
        native_specific |= owner && key != "backend";
        i = match key {
            "backend" => {
                w.sep(i + 1, ":")?;
                let v = w.get(i + 2)?;
                if v != "native" && v != "cudaMallocAsync" {
                    let torch = "Unknown allocator backend, options are native and cudaMallocAsync";
                    let why = format!("backend must be native or cudaMallocAsync, got '{v}'");
                    return Err(w.reject(i + 2, torch, why));
                }
                used_async = v == "cudaMallocAsync";
                if v != load.name() {
                    let msg = format!(
                        "Allocator backend parsed at runtime != allocator backend parsed at load \
                         time, {v} != {}",
                        load.name()
                    );
                    let file = "/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp";
                    let cond = "tokenizer[i] == get()->name()";
                    let f = Fault::Assert {
                        cond,
                        file,
                        line: 64,
                        msg,
                    };
                    let why = format!(
                        "backend is given twice with different values: torch picks '{}' from the \
                         first one when it loads, then rejects '{v}'",
                        load.name()
                    );
                    return Err(w.fail(i + 2, f, why));
                }
                i + 2
            }
            "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                w.bool_entry(i, &mut c.release_lock_on_cudamalloc)?
            }
            "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                w.bool_entry(i, &mut c.pinned_use_cuda_host_register)?
            }
            "graph_capture_record_stream_reuse" => {
                w.bool_entry(i, &mut c.graph_capture_record_stream_reuse)?
            }
            "pinned_free_catch_all" => w.bool_entry(i, &mut c.pinned_free_catch_all)?,
            "throw_on_cudamalloc_oom" => w.bool_entry(i, &mut c.throw_on_cudamalloc_oom)?,
            "pinned_num_register_threads" => {
                let v = w.size_entry(i)?;
                let why = format!("{key} must be a power of two no greater than 128, got {v}");
                if !v.is_power_of_two() {
                    let torch = format!("Number of register threads has to be power of 2, got {v}");
                    return Err(w.reject(i + 2, torch, why));
                }
                if v > 128 {
                    let torch = format!(
                        "Number of register threads should be less than or equal to 128, got {v}"
                    );
                    return Err(w.reject(i + 2, torch, why));
                }
                c.pinned_num_register_threads = v;
                i + 2
            }
            "pinned_reserve_segment_size_mb" => {
                let v = w.size_entry(i)?;
                if v == 0 {
                    let torch = "Pinned reserve segment size has to be greater than 0";
                    return Err(w.reject(i + 2, torch, format!("{key} must be greater than 0")));
                }
                c.pinned_reserve_segment_size_mb = v;
                i + 2
            }
            "per_process_memory_fraction" => {
                w.sep(i + 1, ":")?;
                let v = w.double(i + 2)?;
                if !(0.0..=1.0).contains(&v) {
                    let torch = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]";
                    let why = format!("{key} must be in [0, 1], got '{}'", w.t.text(i + 2));
                    return Err(w.reject(i + 2, torch, why));
                }
                c.per_process_memory_fraction = v;
                i + 2
            }
            "expandable_segments_reserve" => {
                w.sep(i + 1, ":")?;
                let tok = w.get(i + 2)?;
                if let Some(s) = reserve_value(w, i + 2, tok) {
                    c.expandable_segments_reserve = Some(s);
                }
                i + 2
            }
            "expandable_segments_reserve_by_class" => reserve_by_class(w, c, i)?,
            _ if !is_known(key, w.mode) => return Err(unknown_key(w, i, "CUDA")),
            _ => w.skip_key(i)?,
        };
        i = w.next(i, owner)?;
    }
    if used_async && native_specific {
        let msg = "torch prints this whenever a CUDA-specific key (release_lock_on_cudamalloc, \
                   per_process_memory_fraction, pinned_*, ...) is combined with \
                   backend:cudaMallocAsync; the keys it names are not checked";
        let warning = Warning::new(w.var, "", msg);
        w.warns.push(Warning {
            torch_text: Some(ASYNC_WARNING.into()),
            ..warning
        });
    }
    Ok(())
}

/// Reads an expandable-segment reserve, warning as torch does when it is invalid (torch then
/// keeps the previous value) and when it is too small to be usable.
fn reserve_value(w: &mut Walk, i: usize, tok: &str) -> Option<ReserveSpec> {
    let Some(spec) = reserve_spec(tok) else {
        let torch = format!(
            "Ignoring invalid expandable-segment reserve value '{tok}' in PYTORCH_CUDA_ALLOC_CONF \
             (expected a positive, finite fraction like 0.5 or an absolute size like 40G); using \
             default."
        );
        let msg = format!(
            "'{tok}' is not a positive fraction (0.5) or size in GiB (40G); torch ignores it and \
             keeps the previous reserve"
        );
        w.warn(i, msg, Some(torch));
        return None;
    };
    let tiny = match spec {
        ReserveSpec::Fraction(f) => f < 1.0 / 4096.0,
        ReserveSpec::GiB(g) => g < 20.0 / 1024.0,
    };
    if tiny {
        let msg = "this reserve is smaller than one 20 MiB page (for a fraction: on an 80 GiB \
                   device); torch accepts it, then fails every expandable-segment allocation";
        w.warn(i, msg, None);
    }
    Some(spec)
}

/// `expandable_segments_reserve_by_class:[class:reserve,...]`; returns the index of `]`.
fn reserve_by_class(w: &mut Walk, c: &mut AllocConf, i: usize) -> R<usize> {
    w.sep(i + 1, ":")?;
    let mut i = i + 2;
    if w.index(i)? != "[" {
        w.warn(
            i,
            "expected '[' to open the list; torch reads on by position",
            None,
        );
    }
    let by = &mut c.expandable_segments_reserve_by_class;
    by.clear();
    i += 1;
    while w.index(i)? != "]" {
        let name = w.t.text(i).to_string();
        w.sep(i + 1, ":")?;
        i += 2;
        let tok = w.get(i)?;
        if let Some(s) = reserve_value(w, i, tok) {
            match by.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = s,
                None => by.push((name, s)),
            }
        }
        i += 1;
        if w.index(i)? == "," {
            i += 1;
        }
    }
    Ok(i)
}
