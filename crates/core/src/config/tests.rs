//! Tests of the configuration parser. Expected values are what torch 2.15 did for the same
//! string in the oracle (`shared/oracle/oracle`: `config_effective` on success, the stderr
//! message on failure), unless a test says it checks a cachalot addition.

use std::collections::HashMap;

use super::*;
use crate::config::{AllocConf, Backend, KEYS, MIB, ReserveSpec};

/// 17592186044415 MiB: torch's clamp of every `*_mb` size (`SIZE_MAX / 1 MiB`, times 1 MiB).
const CLAMPED: u64 = 18_446_744_073_708_503_040;

fn ok(s: &str) -> AllocConf {
    match parse_pytorch(s) {
        Ok((c, _)) => c,
        Err(e) => panic!("{s:?} should parse: {e}"),
    }
}

fn warnings(s: &str) -> Vec<Warning> {
    parse_pytorch(s).map(|(_, w)| w).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn err(s: &str) -> ConfigError {
    match parse_pytorch(s) {
        Ok((c, _)) => panic!("{s:?} should be rejected, got {c:?}"),
        Err(e) => e,
    }
}

/// Asserts torch's message and exception type, and whether torch aborts at load time.
fn rejects(s: &str, exception: &str, message: &str, aborts: bool) {
    let e = err(s);
    assert_eq!(e.torch_message(), message, "{s:?}");
    assert_eq!(e.torch_exception(), exception, "{s:?}");
    assert_eq!(e.aborts_at_load(), aborts, "{s:?}");
}

fn oob(line: u32) -> String {
    format!(
        "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":{line}, please report a bug to PyTorch. Index out of bounds in ConfigTokenizer"
    )
}

#[test]
fn empty_and_whitespace_strings_are_the_defaults() {
    for s in ["", " ", "\t"] {
        let c = ok(s);
        assert_eq!(AllocConf { last_allocator_settings: String::new(), ..c.clone() }, AllocConf::default());
        assert_eq!(c.last_allocator_settings, s);
    }
}

#[test]
fn max_split_size_mb_values() {
    assert_eq!(ok("max_split_size_mb:20").max_split_size, 20 * MIB);
    assert_eq!(ok("max_split_size_mb:+30").max_split_size, 30 * MIB);
    assert_eq!(ok("max_split_size_mb: 30").max_split_size, 30 * MIB);
    assert_eq!(ok("max_split_size_mb:30.9").max_split_size, 30 * MIB);
    assert_eq!(ok("max_split_size_mb:100abc").max_split_size, 100 * MIB);
    assert_eq!(ok("max_split_size_mb:-1").max_split_size, CLAMPED);
    assert_eq!(ok("max_split_size_mb:18446744073709551615").max_split_size, CLAMPED);
    assert_eq!(ok("max_split_size_mb:17592186044416").max_split_size, CLAMPED);
    assert_eq!(ok("max_split_size_mb:100,max_split_size_mb:200").max_split_size, 200 * MIB);
    let small = "CachingAllocator option max_split_size_mb too small, must be >= 20";
    for s in ["max_split_size_mb:19", "max_split_size_mb:0x30", "max_split_size_mb:-0", "max_split_size_mb:1e3"] {
        rejects(s, "c10::ValueError", small, false);
    }
    rejects("max_split_size_mb:abc", "std::invalid_argument", "stoull", false);
    rejects("max_split_size_mb:18446744073709551616", "std::out_of_range", "stoull", false);
}

#[test]
fn junk_that_torch_accepts_comes_with_a_warning() {
    let w = warnings("max_split_size_mb:100abc");
    assert!(w[0].message.contains("read as 100"), "{w:?}");
    assert_eq!(w[0].entry, "max_split_size_mb:100abc");
    let w = warnings("max_split_size_mb:-1");
    assert!(w.iter().any(|w| w.message.contains("wraps negative")), "{w:?}");
    assert!(w.iter().any(|w| w.message.contains("clamped to 17592186044415 MiB")), "{w:?}");
    let w = warnings("max_split_size_mb,100");
    assert!(w[0].message.contains("expected ':'"), "{w:?}");
    let w = warnings("garbage_collection_threshold:0.5abc,per_process_memory_fraction:0.5");
    assert!(w[0].message.contains("read as 0.5"), "{w:?}");
    assert!(warnings("max_split_size_mb:128,expandable_segments:True").is_empty());
}

#[test]
fn a_missing_value_aborts_torch_at_load_time() {
    for s in ["max_split_size_mb:", "max_split_size_mb", ",", ":", "[", "]", ",,", "backend", "expandable_segments:True,,"] {
        rejects(s, "c10::Error", &oob(123), true);
    }
    rejects("backend:", "c10::Error", &oob(54), true);
    // No ',' between entries: the space vanishes and "100expandable_segments" is one token.
    rejects("max_split_size_mb:100 expandable_segments:True", "c10::Error", &oob(123), true);
    let e = err("max_split_size_mb:");
    assert_eq!(e.to_string(), "error in PYTORCH_CUDA_ALLOC_CONF entry 'max_split_size_mb:': 'max_split_size_mb' is missing its value: write max_split_size_mb:<value>");
}

#[test]
fn booleans_are_exactly_true_or_false() {
    assert!(ok("expandable_segments:True").expandable_segments);
    assert!(!ok("expandable_segments:True,expandable_segments:False").expandable_segments);
    for v in ["true", "1"] {
        let msg = format!("Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '{v}'");
        rejects(&format!("expandable_segments:{v}"), "c10::ValueError", &msg, false);
    }
    for k in ["graph_capture_record_stream_reuse", "pinned_use_background_threads", "pinned_free_catch_all", "throw_on_cudamalloc_oom"] {
        let msg = "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'";
        rejects(&format!("{k}:yes"), "c10::ValueError", msg, false);
    }
    let c = ok("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True,graph_capture_record_stream_reuse:True,pinned_use_background_threads:True,pinned_free_catch_all:True,throw_on_cudamalloc_oom:True");
    assert!(c.release_lock_on_cudamalloc && c.pinned_use_cuda_host_register && c.graph_capture_record_stream_reuse);
    assert!(c.pinned_use_background_threads && c.pinned_free_catch_all && c.throw_on_cudamalloc_oom);
    let e = err("expandable_segments:true");
    assert_eq!(e.to_string(), "error in PYTORCH_CUDA_ALLOC_CONF entry 'expandable_segments:true': expandable_segments must be True or False (capitalised), got 'true'");
}

#[test]
fn separators_are_not_checked() {
    assert_eq!(ok("max_split_size_mb,100").max_split_size, 100 * MIB);
    let c = ok("max_split_size_mb:100:expandable_segments:True");
    assert_eq!((c.max_split_size, c.expandable_segments), (100 * MIB, true));
    assert_eq!(ok("max_split_size_mb:100,").max_split_size, 100 * MIB);
    assert_eq!(ok("max_split_size_mb:1 00").max_split_size, 100 * MIB);
    assert_eq!(ok("max_split_size_mb:1\t00").max_split_size, 100 * MIB);
    assert!(warnings("max_split_size_mb:1 00").iter().any(|w| w.message.contains("read as '100'")));
    let stray = "Unrecognized key ',' in CUDA allocator config.";
    rejects(",max_split_size_mb:100", "c10::ValueError", stray, false);
    rejects("max_split_size_mb:100,,expandable_segments:True", "c10::ValueError", stray, false);
}

#[test]
fn unknown_keys() {
    for k in ["no_such_key", "max_split_size", "MAX_SPLIT_SIZE_MB", "expandable_segments_handle_type", "pinned_max_register_threads", "é"] {
        let msg = format!("Unrecognized key '{k}' in CUDA allocator config.");
        rejects(&format!("{k}:1"), "c10::ValueError", &msg, false);
    }
    let e = err("no_such_key:1");
    assert!(e.to_string().starts_with("error in PYTORCH_CUDA_ALLOC_CONF entry 'no_such_key:1': unknown key 'no_such_key'; valid keys: backend, max_split_size_mb,"));
    assert!(!e.reason.contains("research_after_flush"));
    assert!(err("max_split_size:100").reason.contains("did you mean max_split_size_mb?"));
    assert!(err("research_after_flush:True").reason.contains("CACHALOT_ALLOC_CONF"));
}

#[test]
fn legacy_roundup_bypass_threshold_is_accepted_with_advice() {
    let (c, w) = parse_pytorch("roundup_power2_divisions:4,roundup_bypass_threshold_mb:256").unwrap();
    assert_eq!(c.roundup_bypass_threshold, 256 * MIB);
    assert_eq!(c.roundup_power2_divisions, [4; 16]);
    let msg = &w.iter().find(|w| w.entry == "roundup_bypass_threshold_mb:256").unwrap().message;
    assert!(msg.contains("PyTorch >= 2.0 rejects"), "{msg}");
    assert!(msg.contains("roundup_power2_divisions:[128:4] instead (exactly"), "{msg}");
    assert_eq!(c.effective_divisions(), [4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(c.to_pytorch_string(), "roundup_power2_divisions:[128:4]");
}

#[test]
fn roundup_power2_divisions_single_value() {
    assert_eq!(ok("roundup_power2_divisions:1").roundup_power2_divisions, [1; 16]);
    assert_eq!(ok("roundup_power2_divisions:4").roundup_power2_divisions, [4; 16]);
    assert_eq!(ok("roundup_power2_divisions:9223372036854775808").roundup_power2_divisions, [1 << 63; 16]);
    let msg = "For roundups, the divisions has to be power of 2 ";
    for v in ["0", "3", "-1"] {
        rejects(&format!("roundup_power2_divisions:{v}"), "c10::ValueError", msg, false);
    }
}

#[test]
fn roundup_power2_divisions_lists() {
    let d = |s: &str| ok(&format!("roundup_power2_divisions:{s}")).roundup_power2_divisions;
    let v = |a: &[u64]| -> [u64; 16] { a.try_into().unwrap() };
    assert_eq!(d("[256:1,512:2,1024:4,>:8]"), v(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8]));
    assert_eq!(d("[>:4]"), v(&[0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]));
    assert_eq!(d("[]"), [0; 16]);
    assert_eq!(d("[256:0]"), [0; 16]);
    assert_eq!(d("[1:4]"), v(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(d("[65536:4]"), [4; 16]);
    assert_eq!(d("[32768:4,>:2]"), [4; 16]);
    assert_eq!(d("[64:8,16:2]"), v(&[8, 8, 8, 8, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(d("[256,2]"), v(&[2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(d("[256:2]]"), d("[256,2]"));
    assert_eq!(d("[>:4,256:2]"), v(&[2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4]));
    assert_eq!(d("[256:2,>:4,>:8]"), v(&[2, 2, 2, 2, 2, 2, 2, 2, 2, 8, 8, 8, 8, 8, 8, 8]));
    assert_eq!(d("4,roundup_power2_divisions:[256:2]"), d("[>:4,256:2]"));
    let gap = warnings("roundup_power2_divisions:[64:8,256:4]");
    assert!(gap.iter().any(|w| w.message.contains("starting at 128 MiB are not listed")), "{gap:?}");
}

#[test]
fn roundup_power2_divisions_list_errors() {
    let div = "For roundups, the divisions has to be power of 2 or 0 to disable roundup ";
    let interval = "For roundups, the intervals have to be power of 2 ";
    let r = |s: &str| format!("roundup_power2_divisions:{s}");
    rejects(&r("[3:2]"), "c10::ValueError", interval, false);
    rejects(&r("[0:4]"), "c10::ValueError", interval, false);
    rejects(&r("[256:3]"), "c10::ValueError", div, false);
    rejects(&r("[3:3]"), "c10::ValueError", div, false);
    rejects(&r("[abc:3]"), "c10::ValueError", div, false);
    rejects(&r("[>:3]"), "c10::ValueError", div, false);
    rejects(&r("[>:abc]"), "std::invalid_argument", "stoull", false);
    rejects(&r("[256:2,,>:4]"), "std::invalid_argument", "stoull", false);
    rejects(&r("[256:2>:4]"), "c10::Error", &oob(123), false);
    let unclosed = "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":114, please report a bug to PyTorch. Expected closing bracket ']' in ConfigTokenizer but reached end of config";
    for s in ["[", "[256:2", "[256:2,"] {
        rejects(&r(s), "c10::Error", unclosed, true);
    }
}

#[test]
fn garbage_collection_threshold_values() {
    let gc = |s: &str| ok(&format!("garbage_collection_threshold:{s}")).garbage_collection_threshold;
    for s in ["0.5", ".5", "5e-1", "0x0.8p0", "0.5abc"] {
        assert_eq!(gc(s), 0.5, "{s}");
    }
    assert_eq!(gc("0.1234567"), 0.1234567);
    assert_eq!(gc("2.2250738585072014e-308"), f64::MIN_POSITIVE);
    let bad = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
    for s in ["0", "1", "nan", "inf", "-0.1", "0e-400"] {
        rejects(&format!("garbage_collection_threshold:{s}"), "c10::ValueError", bad, false);
    }
    rejects("garbage_collection_threshold:abc", "std::invalid_argument", "stod", false);
    for s in ["1e-400", "1e-310", "4.9e-324"] {
        rejects(&format!("garbage_collection_threshold:{s}"), "std::out_of_range", "stod", false);
    }
}

#[test]
fn per_process_memory_fraction_values() {
    let f = |s: &str| ok(&format!("per_process_memory_fraction:{s}")).per_process_memory_fraction;
    assert_eq!(f("0"), 0.0);
    assert_eq!(f("-0"), 0.0);
    assert_eq!(f("1"), 1.0);
    assert_eq!(f("1e"), 1.0);
    assert_eq!(f("0x"), 0.0);
    assert_eq!(f("0x1p-1"), 0.5);
    assert_eq!(f("0x1.8p-1"), 0.75);
    assert_eq!(f("0x1p-1074"), 5e-324); // an exact subnormal: no ERANGE
    assert_eq!(f("2.2250738585072013e-308"), f64::MIN_POSITIVE);
    let bad = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]";
    for s in ["1.5", "-0.1", "nan", "INF", "infinity", "nan(123)"] {
        rejects(&format!("per_process_memory_fraction:{s}"), "c10::ValueError", bad, false);
    }
    for s in ["1e400", "1e-320", "0x1p-1075", "2.2250738585072012e-308"] {
        rejects(&format!("per_process_memory_fraction:{s}"), "std::out_of_range", "stod", false);
    }
    rejects("per_process_memory_fraction:.", "std::invalid_argument", "stod", false);
}

#[test]
fn gc_needs_a_fraction_below_one() {
    // Oracle: with fraction 1.0 the GC never ran (an extra retry happened); 0.99 ran it.
    assert!(!ok("garbage_collection_threshold:0.5").gc_enabled());
    assert!(!ok("garbage_collection_threshold:0.5,per_process_memory_fraction:1.0").gc_enabled());
    assert!(ok("garbage_collection_threshold:0.5,per_process_memory_fraction:0.99").gc_enabled());
    assert!(ok("garbage_collection_threshold:0.5,per_process_memory_fraction:0.9999999999").gc_enabled());
    assert!(!ok("per_process_memory_fraction:0.5").gc_enabled());
    let w = warnings("garbage_collection_threshold:0.5");
    assert!(w.iter().any(|w| w.message.contains("no effect")), "{w:?}");
}

#[test]
fn large_segment_size_mb() {
    let c = ok("large_segment_size_mb:64");
    assert_eq!((c.large_segment_size, c.max_non_split_rounding_size), (64 * MIB, 64 * MIB));
    assert_eq!(ok("large_segment_size_mb:11").large_segment_size, 11 * MIB);
    assert_eq!(ok("large_segment_size_mb,64").large_segment_size, 64 * MIB);
    let c = ok("large_segment_size_mb:-1");
    assert_eq!((c.large_segment_size, c.max_non_split_rounding_size), (CLAMPED, CLAMPED));
    assert_eq!(ok("large_segment_size_mb:64,large_segment_size_mb:32").large_segment_size, 32 * MIB);
    assert_eq!(ok("large_segment_size_mb:11,max_split_size_mb:11").max_split_size, 11 * MIB);
    // Read from any token position, even inside another key's list.
    let c = ok("expandable_segments_reserve_by_class:[large_segment_size_mb:32]");
    assert_eq!((c.large_segment_size, c.max_non_split_rounding_size), (32 * MIB, 32 * MIB));
    let c = ok("large_segment_size_mb:64,expandable_segments_reserve_by_class:[large_segment_size_mb:32]");
    assert_eq!(c.large_segment_size, 32 * MIB);
    for s in ["max_non_split_rounding_mb:100,large_segment_size_mb:64", "large_segment_size_mb:64,max_non_split_rounding_mb:100"] {
        let c = ok(s);
        assert_eq!((c.large_segment_size, c.max_non_split_rounding_size), (64 * MIB, 100 * MIB));
    }
    let small = "CachingAllocator option large_segment_size_mb must be > 10 MB";
    rejects("large_segment_size_mb:10", "c10::ValueError", small, false);
    rejects("max_split_size_mb:10,large_segment_size_mb:5", "c10::ValueError", small, false);
    rejects("roundup_power2_divisions:[>:2,large_segment_size_mb:4]", "c10::ValueError", small, false);
    let split = "CachingAllocator option max_split_size_mb too small, must be >= 64";
    rejects("large_segment_size_mb:64,max_split_size_mb:32", "c10::ValueError", split, false);
    rejects("max_split_size_mb:32,large_segment_size_mb:64", "c10::ValueError", split, false);
    let ns = "CachingAllocator option max_non_split_rounding_mb too small, must be >= 64";
    rejects("large_segment_size_mb:64,max_non_split_rounding_mb:32", "c10::ValueError", ns, false);
    let e = err("large_segment_size_mb:32,max_split_size_mb:20");
    assert_eq!(e.reason, "max_split_size_mb must be at least 32 (= large_segment_size_mb) (MiB)");
    rejects("max_split_size_mb:large_segment_size_mb", "c10::Error", &oob(123), false);
}

#[test]
fn max_non_split_rounding_mb() {
    assert_eq!(ok("max_non_split_rounding_mb:20").max_non_split_rounding_size, 20 * MIB);
    assert_eq!(ok("max_non_split_rounding_mb:-1").max_non_split_rounding_size, CLAMPED);
    let small = "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20";
    rejects("max_non_split_rounding_mb:19", "c10::ValueError", small, false);
    rejects("max_non_split_rounding_mb:0", "c10::ValueError", small, false);
}

#[test]
fn backend() {
    assert_eq!(ok("backend:native").backend, Backend::Native);
    let (c, w) = parse_pytorch("backend:cudaMallocAsync,max_split_size_mb:100").unwrap();
    assert_eq!((c.backend, c.max_split_size), (Backend::CudaMallocAsync, 100 * MIB));
    assert!(w.iter().all(|w| w.torch_text.is_none()), "torch does not warn here: {w:?}");
    assert!(w.iter().any(|w| w.message.contains("ignores max_split_size_mb")), "{w:?}");
    let (_, w) = parse_pytorch("release_lock_on_cudamalloc:True,backend:cudaMallocAsync").unwrap();
    let torch = "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and garbage_collect_threshold.";
    assert_eq!(w.iter().filter_map(|w| w.torch_text.as_deref()).collect::<Vec<_>>(), [torch]);
    let unknown = "Unknown allocator backend, options are native and cudaMallocAsync";
    for v in ["foo", "hipMallocAsync", "Native"] {
        rejects(&format!("backend:{v}"), "c10::ValueError", unknown, false);
    }
    let mismatch = |a: &str, b: &str| format!("tokenizer[i] == get()->name() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp\":64, please report a bug to PyTorch. Allocator backend parsed at runtime != allocator backend parsed at load time, {a} != {b}");
    rejects("backend:native,backend:cudaMallocAsync", "c10::Error", &mismatch("cudaMallocAsync", "native"), false);
    rejects("backend:cudaMallocAsync,backend:native", "c10::Error", &mismatch("native", "cudaMallocAsync"), false);
    assert_eq!(ok("backend:cudaMallocAsync,backend:cudaMallocAsync").backend, Backend::CudaMallocAsync);
}

#[test]
fn which_error_torch_reports_first() {
    let unknown_backend = "Unknown allocator backend, options are native and cudaMallocAsync";
    rejects("max_split_size_mb:10,backend:foo", "c10::ValueError", unknown_backend, false);
    rejects("no_such_key:1,max_split_size_mb:10", "c10::ValueError", "Unrecognized key 'no_such_key' in CUDA allocator config.", false);
    let bool6 = "Expected 'True' or 'False' at index 6 in ConfigTokenizer but got 'true'";
    rejects("expandable_segments:true,release_lock_on_cudamalloc:true", "c10::ValueError", bool6, false);
    rejects("max_split_size_mb:10,expandable_segments:true", "c10::ValueError", "CachingAllocator option max_split_size_mb too small, must be >= 20", false);
    // With cudaMallocAsync torch runs its generic pass first.
    rejects("backend:cudaMallocAsync,no_such:1", "c10::ValueError", "Unrecognized key 'no_such' in Accelerator allocator config.", false);
    rejects("backend:cudaMallocAsync,max_split_size_mb:10,no_such:1", "c10::ValueError", "CachingAllocator option max_split_size_mb too small, must be >= 20", false);
}

#[test]
fn pinned_keys() {
    let c = ok("pinned_num_register_threads:128,pinned_reserve_segment_size_mb:-1,pinned_max_round_threshold_mb:5,pinned_max_cached_size_mb:-1");
    assert_eq!(c.pinned_num_register_threads, 128);
    assert_eq!(c.pinned_reserve_segment_size_mb, u64::MAX);
    assert_eq!(c.pinned_max_round_threshold, 5 * MIB);
    assert_eq!(c.pinned_max_cached_size, CLAMPED);
    assert_eq!(ok("pinned_max_round_threshold_mb:0").pinned_max_round_threshold, 0);
    let pow2 = |n: &str| format!("Number of register threads has to be power of 2, got {n}");
    rejects("pinned_num_register_threads:3", "c10::ValueError", &pow2("3"), false);
    rejects("pinned_num_register_threads:0", "c10::ValueError", &pow2("0"), false);
    rejects("pinned_num_register_threads:-1", "c10::ValueError", &pow2("18446744073709551615"), false);
    let max = "Number of register threads should be less than or equal to 128, got 256";
    rejects("pinned_num_register_threads:256", "c10::ValueError", max, false);
    rejects("pinned_reserve_segment_size_mb:0", "c10::ValueError", "Pinned reserve segment size has to be greater than 0", false);
    let torch = "pinned_max_round_threshold_mb (17592186044415) > pinned_max_cached_size_mb (4). The cache size limit takes precedence: allocations above pinned_max_cached_size_mb are never rounded up.";
    let w = warnings("pinned_max_round_threshold_mb:-1,pinned_max_cached_size_mb:4");
    assert!(w.iter().any(|w| w.torch_text.as_deref() == Some(torch)), "{w:?}");
    assert!(warnings("pinned_max_round_threshold_mb:4,pinned_max_cached_size_mb:4").is_empty());
}

#[test]
fn expandable_segments_reserve() {
    let r = |s: &str| ok(&format!("expandable_segments_reserve:{s}")).expandable_segments_reserve;
    assert_eq!(r("0.5"), Some(ReserveSpec::Fraction(0.5)));
    assert_eq!(r("2"), Some(ReserveSpec::Fraction(2.0)));
    assert_eq!(r("40G"), Some(ReserveSpec::GiB(40.0)));
    assert_eq!(r("2g"), Some(ReserveSpec::GiB(2.0)));
    assert_eq!(r("1e3G"), Some(ReserveSpec::GiB(1000.0)));
    assert_eq!(r("1e-310"), Some(ReserveSpec::Fraction(1e-310)));
    for bad in ["40M", "-1", "0", "abc", "inf", "nan", "0x1p-1", "1e400", "G", "0G", "1GG", "-1G", "infG", "1e400G"] {
        let (c, w) = parse_pytorch(&format!("expandable_segments_reserve:{bad}")).unwrap();
        assert_eq!(c.expandable_segments_reserve, None, "{bad}");
        let torch = format!("Ignoring invalid expandable-segment reserve value '{bad}' in PYTORCH_CUDA_ALLOC_CONF (expected a positive, finite fraction like 0.5 or an absolute size like 40G); using default.");
        assert_eq!(w[0].torch_text.as_deref(), Some(torch.as_str()), "{bad}");
    }
    assert_eq!(r("0.5,expandable_segments_reserve:bad"), Some(ReserveSpec::Fraction(0.5)));
    // Oracle probe (80 GiB device): 0.5 → 40 GiB, 1.5G → 1.5 GiB, 1e30G saturates.
    assert_eq!(ReserveSpec::Fraction(0.5).resolve_bytes(80 << 30), 40 << 30);
    assert_eq!(ReserveSpec::GiB(1.5).resolve_bytes(80 << 30), 1_610_612_736);
    assert_eq!(ReserveSpec::GiB(1e30).resolve_bytes(80 << 30), u64::MAX);
    assert_eq!(ReserveSpec::Fraction(0.3333333333333).resolve_bytes(80 << 30), 28_633_115_306);
    assert!(warnings("expandable_segments_reserve:1e-310").iter().any(|w| w.message.contains("smaller than one 20 MiB page")));
    // `[` is taken as the value, then `]` is a key.
    rejects("expandable_segments_reserve:[0.5]", "c10::ValueError", "Unrecognized key ']' in CUDA allocator config.", false);
    // The generic pass skips the whole list, so max_split_size_mb:10 is never checked.
    assert_eq!(ok("expandable_segments_reserve:[,max_split_size_mb:10]").max_split_size, u64::MAX);
}

#[test]
fn expandable_segments_reserve_by_class() {
    let by = |s: &str| ok(&format!("expandable_segments_reserve_by_class:{s}")).expandable_segments_reserve_by_class;
    let f = |n: &str, v: f64| (n.to_string(), ReserveSpec::Fraction(v));
    assert_eq!(by("[a:0.5,b:2G]"), vec![f("a", 0.5), ("b".into(), ReserveSpec::GiB(2.0))]);
    assert_eq!(by("[a:0.5,b:2G,a:0.25]"), vec![f("a", 0.25), ("b".into(), ReserveSpec::GiB(2.0))]);
    assert_eq!(by("[a:0.5,a:bad]"), vec![f("a", 0.5)]);
    assert_eq!(by("[a:0.5,]"), vec![f("a", 0.5)]);
    assert_eq!(by("[]"), vec![]);
    assert_eq!(by("[a:0.5],expandable_segments_reserve_by_class:[b:0.5]"), vec![f("b", 0.5)]);
    let r = |s: &str| format!("expandable_segments_reserve_by_class:{s}");
    rejects(&r("[a]"), "c10::Error", &oob(54), false);
    rejects(&r("[a:0.5,,b:1]"), "c10::Error", &oob(54), false);
    rejects(&r("[:0.5]"), "c10::Error", &oob(123), false);
    rejects(&r("0.5"), "c10::Error", &oob(123), false);
    rejects(&r("[a:0.5"), "c10::Error", "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":114, please report a bug to PyTorch. Expected closing bracket ']' in ConfigTokenizer but reached end of config", true);
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| m.get(k).cloned()
}

#[test]
fn environment_precedence() {
    let (c, _, src) = from_env(env(&[("PYTORCH_ALLOC_CONF", "expandable_segments:True")])).unwrap();
    assert!(c.expandable_segments);
    assert_eq!(src.to_string(), "PYTORCH_ALLOC_CONF");
    let both = [("PYTORCH_ALLOC_CONF", "expandable_segments:True"), ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100")];
    let (c, w, src) = from_env(env(&both)).unwrap();
    assert_eq!((c.max_split_size, c.expandable_segments), (100 * MIB, false));
    assert_eq!(c.last_allocator_settings, "max_split_size_mb:100");
    assert_eq!(src.ignored, ["PYTORCH_ALLOC_CONF"]);
    assert!(w.iter().any(|w| w.var == "PYTORCH_ALLOC_CONF"));
    // An empty value counts as set.
    let (c, _, _) = from_env(env(&[("PYTORCH_ALLOC_CONF", "bad:1"), ("PYTORCH_CUDA_ALLOC_CONF", "")])).unwrap();
    assert_eq!(c, AllocConf::default());
    let e = from_env(env(&[("PYTORCH_ALLOC_CONF", ""), ("PYTORCH_CUDA_ALLOC_CONF", "bad:1")])).unwrap_err();
    assert_eq!((e.var, e.torch_message().as_str()), ("PYTORCH_CUDA_ALLOC_CONF", "Unrecognized key 'bad' in CUDA allocator config."));
    let (c, _, src) = from_env(env(&[])).unwrap();
    assert_eq!((c, src.to_string()), (AllocConf::default(), "defaults (no allocator variable set)".to_string()));
}

#[test]
fn hip_variable_feeds_only_the_generic_pass() {
    let vars = [("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"), ("PYTORCH_ALLOC_CONF", "max_split_size_mb:100,release_lock_on_cudamalloc:True")];
    let (c, _, src) = from_env(env(&vars)).unwrap();
    assert!(c.expandable_segments && c.release_lock_on_cudamalloc);
    assert_eq!(c.max_split_size, u64::MAX);
    assert_eq!(c.last_allocator_settings, "expandable_segments:True");
    assert_eq!(src.to_string(), "PYTORCH_HIP_ALLOC_CONF (generic keys) + PYTORCH_ALLOC_CONF (CUDA keys and backend)");
    let (c, _, _) = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "backend:cudaMallocAsync")])).unwrap();
    assert_eq!(c.backend, Backend::Native);
    let (c, _, _) = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "release_lock_on_cudamalloc:true")])).unwrap();
    assert!(!c.release_lock_on_cudamalloc);
    let (c, _, _) = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:100"), ("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync")])).unwrap();
    assert_eq!((c.backend, c.max_split_size), (Backend::CudaMallocAsync, 100 * MIB));
    let e = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "bad:1")])).unwrap_err();
    assert_eq!((e.var, e.torch_message().as_str()), ("PYTORCH_HIP_ALLOC_CONF", "Unrecognized key 'bad' in Accelerator allocator config."));
    let e = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "roundup_power2_divisions:[")])).unwrap_err();
    assert!(e.torch_message().contains("AllocatorConfig.cpp\":213") && !e.aborts_at_load());
}

#[test]
fn cachalot_variable() {
    let (c, _) = parse_cachalot("research_after_flush:True,expandable_oversize_exempt:True,max_split_size_mb:64").unwrap();
    assert!(c.cachalot.research_after_flush && c.cachalot.expandable_oversize_exempt);
    assert_eq!(c.max_split_size, 64 * MIB);
    let e = parse_cachalot("research_after_flush:yes").unwrap_err();
    assert_eq!(e.var, "CACHALOT_ALLOC_CONF");
    let vars = [("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,roundup_power2_divisions:4"), ("CACHALOT_ALLOC_CONF", "research_after_flush:True,garbage_collection_threshold:0.5")];
    let (c, _, src) = from_env(env(&vars)).unwrap();
    assert!(c.cachalot.research_after_flush);
    assert_eq!((c.max_split_size, c.roundup_power2_divisions, c.garbage_collection_threshold), (128 * MIB, [4; 16], 0.5));
    assert_eq!(c.last_allocator_settings, "max_split_size_mb:128,roundup_power2_divisions:4");
    assert_eq!(src.to_string(), "PYTORCH_CUDA_ALLOC_CONF + CACHALOT_ALLOC_CONF");
    let e = from_env(env(&[("PYTORCH_CUDA_ALLOC_CONF", "research_after_flush:True")])).unwrap_err();
    assert!(e.reason.contains("CACHALOT_ALLOC_CONF"));
}

#[test]
fn apply_cachalot_changes_only_named_keys() {
    let mut c = ok("max_split_size_mb:128,expandable_segments:True");
    let before = c.clone();
    apply_cachalot(&mut c, "expandable_oversize_exempt:True").unwrap();
    assert_eq!(c, AllocConf { cachalot: super::super::CachalotOptions { expandable_oversize_exempt: true, ..Default::default() }, ..before.clone() });
    let mut c2 = before.clone();
    assert!(apply_cachalot(&mut c2, "expandable_oversize_exempt:maybe").is_err());
    assert_eq!(c2, before);
    let mut c3 = before.clone();
    apply_cachalot(&mut c3, "large_segment_size_mb:64").unwrap();
    assert_eq!((c3.large_segment_size, c3.max_non_split_rounding_size, c3.max_split_size), (64 * MIB, 64 * MIB, 128 * MIB));
    let mut c4 = before.clone();
    let e = apply_cachalot(&mut c4, "large_segment_size_mb:256").unwrap_err();
    assert_eq!(e.reason, "max_split_size_mb (128 MiB) must be at least large_segment_size_mb (256 MiB)");
    assert_eq!(c4, before);
}

#[test]
fn to_pytorch_string_is_canonical_and_round_trips() {
    let c = ok("per_process_memory_fraction:0.9, expandable_segments:True,garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_split_size_mb:128");
    let s = c.to_pytorch_string();
    assert_eq!(s, "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],garbage_collection_threshold:0.6,expandable_segments:True,per_process_memory_fraction:0.9");
    assert_eq!(AllocConf::default().to_pytorch_string(), "");
    for src in [
        "roundup_power2_divisions:[64:8,16:2]",
        "roundup_power2_divisions:[>:4]",
        "roundup_power2_divisions:[1:4]",
        "roundup_power2_divisions:[2:2,4:4,>:0]",
        "large_segment_size_mb:64,max_non_split_rounding_mb:100",
        "large_segment_size_mb:-1,max_split_size_mb:-1",
        "backend:cudaMallocAsync,per_process_memory_fraction:-0,throw_on_cudamalloc_oom:True",
        "expandable_segments_reserve:1e-310,expandable_segments_reserve_by_class:[a:0.5,b:2G,a:1e30G]",
        "pinned_num_register_threads:64,pinned_reserve_segment_size_mb:-1,pinned_max_round_threshold_mb:0,pinned_max_cached_size_mb:4",
        "pinned_use_hip_host_register:True,release_lock_on_hipmalloc:True,pinned_free_catch_all:True,graph_capture_record_stream_reuse:True,pinned_use_background_threads:True",
        "garbage_collection_threshold:2.2250738585072014e-308",
    ] {
        let c = ok(src);
        let again = ok(&c.to_pytorch_string());
        assert_eq!(AllocConf { last_allocator_settings: String::new(), ..again }, AllocConf { last_allocator_settings: String::new(), ..c }, "{src}");
    }
}

#[test]
fn describe_has_one_line_per_key() {
    let c = ok("max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],expandable_segments_reserve:40G");
    let d = c.describe();
    assert_eq!(d.len(), KEYS.len());
    let line = |k: &str| d.iter().find(|l| l.0 == k).unwrap().clone();
    assert_eq!((line("max_split_size_mb").1, line("max_split_size_mb").2), ("128".into(), "unlimited".into()));
    assert_eq!(line("roundup_power2_divisions").1, "[256:1,>:4]");
    assert_eq!(line("expandable_segments_reserve").1, "40G");
    assert_eq!(line("backend").1, "native");
    assert_eq!(line("research_after_flush").1, "False");
    assert!(d.iter().all(|l| !l.1.is_empty() && !l.3.is_empty()));
}

#[test]
fn keys_table_matches_the_parser() {
    let mut table: Vec<&str> = KEYS.iter().flat_map(|k| std::iter::once(k.name).chain(k.aliases.iter().copied())).collect();
    let mut parser: Vec<&str> = GENERIC_KEYS.iter().chain(CUDA_KEYS.iter()).chain(CACHALOT_KEYS.iter()).copied().chain([LEGACY_KEY]).collect();
    table.sort_unstable();
    parser.sort_unstable();
    assert_eq!(table, parser);
    for k in KEYS {
        assert_eq!(k.cachalot_only, CACHALOT_KEYS.contains(&k.name), "{}", k.name);
        assert_eq!(k.legacy, k.name == LEGACY_KEY, "{}", k.name);
    }
}

#[test]
fn number_readers() {
    assert_eq!(stoull("-1").unwrap(), (u64::MAX, 2, true));
    assert_eq!(stoull("-18446744073709551615").unwrap().0, 1);
    assert_eq!(stoull("0x30").unwrap(), (0, 1, false));
    assert!(matches!(stoull("-18446744073709551616"), Err(Fault::OutOfRange("stoull"))));
    assert!(matches!(stoull("+-1"), Err(Fault::InvalidArgument("stoull"))));
    assert_eq!(stod("0x1.8p1").unwrap(), (3.0, 7));
    assert_eq!(stod("0xA").unwrap(), (10.0, 3));
    assert_eq!(stod("1e+").unwrap(), (1.0, 1));
    assert_eq!(stod("nan(abc").unwrap().1, 3);
    assert_eq!(stod("-0x1p-1").unwrap().0, -0.5);
    assert_eq!(stod("0x1.fffffffffffff8p0").unwrap().0, 2.0); // ties to even
    assert!(matches!(stod("0x1p1024"), Err(Fault::OutOfRange("stod"))));
    assert_eq!(reserve_spec("+.5g"), Some(ReserveSpec::GiB(0.5)));
    assert_eq!(reserve_spec("5."), Some(ReserveSpec::Fraction(5.0)));
    assert_eq!(reserve_spec("1e"), None);
}

#[test]
fn never_panics() {
    let nasty = [
        "", ",", ":", "[", "]", "[[", "]]", ":::", ",,,", "[:,]", "key", "é:ü", "\u{0}", "max_split_size_mb:\u{7f}",
        "max_split_size_mb:99999999999999999999999999", "garbage_collection_threshold:1e999999999999999999",
        "garbage_collection_threshold:0x1p-99999999999999999999", "per_process_memory_fraction:0.000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000022250738585072012",
        "roundup_power2_divisions:[>:>:>]", "roundup_power2_divisions:[18446744073709551615:1]", "expandable_segments_reserve_by_class:[[:[]",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let alphabet: Vec<&str> = vec![
        ",", ":", "[", "]", " ", "\t", ">", "-", "1", "0", "4", "256", "True", "true", "x", "é", "0x", "e", ".",
        "max_split_size_mb", "roundup_power2_divisions", "backend", "cudaMallocAsync", "large_segment_size_mb",
        "expandable_segments_reserve_by_class", "expandable_segments_reserve", "garbage_collection_threshold", "research_after_flush",
        "per_process_memory_fraction", "pinned_num_register_threads", "roundup_bypass_threshold_mb", "G",
    ];
    let mut inputs: Vec<String> = nasty.iter().map(|s| s.to_string()).collect();
    for _ in 0..4000 {
        let mut s = String::new();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        for k in 0..(seed % 12) {
            s.push_str(alphabet[((seed >> (k * 5)) as usize + k as usize * 7) % alphabet.len()]);
        }
        inputs.push(s);
    }
    for s in &inputs {
        for r in [parse_pytorch(s), parse_cachalot(s)] {
            match r {
                Ok((c, _)) => {
                    let text = c.to_pytorch_string();
                    let again = parse_pytorch(&text).unwrap_or_else(|e| panic!("{s:?} -> {text:?}: {e}")).0;
                    if c.roundup_bypass_threshold == u64::MAX {
                        let strip = |c: &AllocConf| AllocConf { last_allocator_settings: String::new(), cachalot: Default::default(), ..c.clone() };
                        assert_eq!(strip(&again), strip(&c), "{s:?} -> {text:?}");
                    }
                    assert_eq!(c.describe().len(), KEYS.len());
                }
                Err(e) => assert!(!e.to_string().is_empty() && !e.torch_message().is_empty()),
            }
        }
        let mut c = AllocConf::default();
        let _ = apply_cachalot(&mut c, s);
        let _ = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", s), ("PYTORCH_ALLOC_CONF", s), ("CACHALOT_ALLOC_CONF", s)]));
    }
}
