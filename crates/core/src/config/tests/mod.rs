//! Tests of the configuration parser. Expected values are what torch 2.15 did with the same
//! string in the oracle (`shared/oracle/oracle`: `config_effective` on success, the stderr
//! message and exit status on failure; fields the oracle does not print were read with a
//! small C++ probe linked against the same `libc10*.so`), unless a test says it checks a
//! cachalot addition.

use std::collections::HashMap;

use super::*;
use crate::config::{AllocConf, Backend, CachalotOptions, KEYS, MIB, ReserveSpec};

/// 17592186044415 MiB: torch's clamp of every `*_mb` size (`SIZE_MAX / 1 MiB`, times 1 MiB).
const CLAMPED: u64 = 18_446_744_073_708_503_040;
const OOB54: &str = "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":54, please report a bug to PyTorch. Index out of bounds in ConfigTokenizer";
const OOB123: &str = "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":123, please report a bug to PyTorch. Index out of bounds in ConfigTokenizer";
const UNCLOSED: &str = "i < config_.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.h\":114, please report a bug to PyTorch. Expected closing bracket ']' in ConfigTokenizer but reached end of config";
const SPLIT20: &str = "CachingAllocator option max_split_size_mb too small, must be >= 20";
const GC: &str = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)";
const FRACTION: &str = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]";
const DIV: &str = "For roundups, the divisions has to be power of 2 ";
const DIV0: &str = "For roundups, the divisions has to be power of 2 or 0 to disable roundup ";
const INTERVAL: &str = "For roundups, the intervals have to be power of 2 ";
const LARGE: &str = "CachingAllocator option large_segment_size_mb must be > 10 MB";
const BACKEND: &str = "Unknown allocator backend, options are native and cudaMallocAsync";
const V: &str = "c10::ValueError";
const E: &str = "c10::Error";

/// (string, exception, torch's message, aborts at load time), all from the oracle.
#[rustfmt::skip]
const REJECTED: &[(&str, &str, &str, bool)] = &[
    ("max_split_size_mb:19", V, SPLIT20, false),
    ("max_split_size_mb:0x30", V, SPLIT20, false),
    ("max_split_size_mb:-0", V, SPLIT20, false),
    ("max_split_size_mb:1e3", V, SPLIT20, false),
    ("max_split_size_mb:abc", "std::invalid_argument", "stoull", false),
    ("max_split_size_mb:18446744073709551616", "std::out_of_range", "stoull", false),
    ("max_split_size_mb:", E, OOB123, true),
    ("max_split_size_mb", E, OOB123, true),
    (",", E, OOB123, true),
    (":", E, OOB123, true),
    ("[", E, OOB123, true),
    ("]", E, OOB123, true),
    (",,", E, OOB123, true),
    ("backend", E, OOB123, true),
    ("expandable_segments:True,,", E, OOB123, true),
    ("max_split_size_mb:100 expandable_segments:True", E, OOB123, true),
    ("backend:", E, OOB54, true),
    (",max_split_size_mb:100", V, "Unrecognized key ',' in CUDA allocator config.", false),
    ("max_split_size_mb:100,,expandable_segments:True", V, "Unrecognized key ',' in CUDA allocator config.", false),
    ("expandable_segments:true", V, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'", false),
    ("expandable_segments:1", V, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'", false),
    ("graph_capture_record_stream_reuse:yes", V, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'", false),
    ("throw_on_cudamalloc_oom:true", V, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'", false),
    ("pinned_free_catch_all:1", V, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '1'", false),
    ("roundup_power2_divisions:0", V, DIV, false),
    ("roundup_power2_divisions:3", V, DIV, false),
    ("roundup_power2_divisions:-1", V, DIV, false),
    ("roundup_power2_divisions:[3:2]", V, INTERVAL, false),
    ("roundup_power2_divisions:[0:4]", V, INTERVAL, false),
    ("roundup_power2_divisions:[256:3]", V, DIV0, false),
    ("roundup_power2_divisions:[3:3]", V, DIV0, false),
    ("roundup_power2_divisions:[abc:3]", V, DIV0, false),
    ("roundup_power2_divisions:[>:3]", V, DIV0, false),
    ("roundup_power2_divisions:[>:abc]", "std::invalid_argument", "stoull", false),
    ("roundup_power2_divisions:[256:2,,>:4]", "std::invalid_argument", "stoull", false),
    ("roundup_power2_divisions:[256:2>:4]", E, OOB123, false),
    ("roundup_power2_divisions:[", E, UNCLOSED, true),
    ("roundup_power2_divisions:[256:2", E, UNCLOSED, true),
    ("roundup_power2_divisions:[256:2,", E, UNCLOSED, true),
    ("garbage_collection_threshold:0", V, GC, false),
    ("garbage_collection_threshold:1", V, GC, false),
    ("garbage_collection_threshold:nan", V, GC, false),
    ("garbage_collection_threshold:inf", V, GC, false),
    ("garbage_collection_threshold:-0.1", V, GC, false),
    ("garbage_collection_threshold:0e-400", V, GC, false),
    ("garbage_collection_threshold:abc", "std::invalid_argument", "stod", false),
    ("garbage_collection_threshold:1e-400", "std::out_of_range", "stod", false),
    ("garbage_collection_threshold:1e-310", "std::out_of_range", "stod", false),
    ("garbage_collection_threshold:4.9e-324", "std::out_of_range", "stod", false),
    ("per_process_memory_fraction:1.5", V, FRACTION, false),
    ("per_process_memory_fraction:-0.1", V, FRACTION, false),
    ("per_process_memory_fraction:nan", V, FRACTION, false),
    ("per_process_memory_fraction:INF", V, FRACTION, false),
    ("per_process_memory_fraction:infinity", V, FRACTION, false),
    ("per_process_memory_fraction:nan(123)", V, FRACTION, false),
    ("per_process_memory_fraction:1e400", "std::out_of_range", "stod", false),
    ("per_process_memory_fraction:1e-320", "std::out_of_range", "stod", false),
    ("per_process_memory_fraction:0x1p-1075", "std::out_of_range", "stod", false),
    ("per_process_memory_fraction:2.2250738585072012e-308", "std::out_of_range", "stod", false),
    ("per_process_memory_fraction:.", "std::invalid_argument", "stod", false),
    ("large_segment_size_mb:10", V, LARGE, false),
    ("max_split_size_mb:10,large_segment_size_mb:5", V, LARGE, false),
    ("roundup_power2_divisions:[>:2,large_segment_size_mb:4]", V, LARGE, false),
    ("large_segment_size_mb:64,max_split_size_mb:32", V, "CachingAllocator option max_split_size_mb too small, must be >= 64", false),
    ("max_split_size_mb:32,large_segment_size_mb:64", V, "CachingAllocator option max_split_size_mb too small, must be >= 64", false),
    ("large_segment_size_mb:64,max_non_split_rounding_mb:32", V, "CachingAllocator option max_non_split_rounding_mb too small, must be >= 64", false),
    ("max_split_size_mb:large_segment_size_mb", E, OOB123, false),
    ("max_non_split_rounding_mb:19", V, "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20", false),
    ("backend:foo", V, BACKEND, false),
    ("backend:hipMallocAsync", V, BACKEND, false),
    ("backend:Native", V, BACKEND, false),
    ("backend:native,backend:cudaMallocAsync", E, "tokenizer[i] == get()->name() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp\":64, please report a bug to PyTorch. Allocator backend parsed at runtime != allocator backend parsed at load time, cudaMallocAsync != native", false),
    ("backend:cudaMallocAsync,backend:native", E, "tokenizer[i] == get()->name() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/cuda/CUDAAllocatorConfig.cpp\":64, please report a bug to PyTorch. Allocator backend parsed at runtime != allocator backend parsed at load time, native != cudaMallocAsync", false),
    // Which error torch reports first: the CUDA pass, then the generic one.
    ("max_split_size_mb:10,backend:foo", V, BACKEND, false),
    ("no_such_key:1,max_split_size_mb:10", V, "Unrecognized key 'no_such_key' in CUDA allocator config.", false),
    ("expandable_segments:true,release_lock_on_cudamalloc:true", V, "Expected 'True' or 'False' at index 6 in ConfigTokenizer but got 'true'", false),
    ("max_split_size_mb:10,expandable_segments:true", V, SPLIT20, false),
    // ... except with cudaMallocAsync, where the generic pass runs first.
    ("backend:cudaMallocAsync,no_such:1", V, "Unrecognized key 'no_such' in Accelerator allocator config.", false),
    ("backend:cudaMallocAsync,max_split_size_mb:10,no_such:1", V, SPLIT20, false),
    ("pinned_num_register_threads:3", V, "Number of register threads has to be power of 2, got 3", false),
    ("pinned_num_register_threads:0", V, "Number of register threads has to be power of 2, got 0", false),
    ("pinned_num_register_threads:-1", V, "Number of register threads has to be power of 2, got 18446744073709551615", false),
    ("pinned_num_register_threads:256", V, "Number of register threads should be less than or equal to 128, got 256", false),
    ("pinned_reserve_segment_size_mb:0", V, "Pinned reserve segment size has to be greater than 0", false),
    ("expandable_segments_reserve:[0.5]", V, "Unrecognized key ']' in CUDA allocator config.", false),
    ("expandable_segments_reserve_by_class:[a]", E, OOB54, false),
    ("expandable_segments_reserve_by_class:[a:0.5,,b:1]", E, OOB54, false),
    ("expandable_segments_reserve_by_class:[:0.5]", E, OOB123, false),
    ("expandable_segments_reserve_by_class:0.5", E, OOB123, false),
    ("expandable_segments_reserve_by_class:[large_segment_size_mb:0.5]", V, LARGE, false),
    ("expandable_segments_reserve_by_class:[a:0.5", E, UNCLOSED, true),
    ("no_such_key:1", V, "Unrecognized key 'no_such_key' in CUDA allocator config.", false),
    ("max_split_size:100", V, "Unrecognized key 'max_split_size' in CUDA allocator config.", false),
    ("MAX_SPLIT_SIZE_MB:100", V, "Unrecognized key 'MAX_SPLIT_SIZE_MB' in CUDA allocator config.", false),
    ("expandable_segments_handle_type:posix_fd", V, "Unrecognized key 'expandable_segments_handle_type' in CUDA allocator config.", false),
    ("pinned_max_register_threads:8", V, "Unrecognized key 'pinned_max_register_threads' in CUDA allocator config.", false),
    ("é:1", V, "Unrecognized key 'é' in CUDA allocator config.", false),
];

#[test]
fn rejected_strings_give_torchs_exact_error() {
    for &(s, exception, message, aborts) in REJECTED {
        let e = parse_pytorch(s).expect_err(s);
        assert_eq!(e.torch_message(), message, "{s:?}");
        assert_eq!(
            (e.torch_exception(), e.aborts_at_load()),
            (exception, aborts),
            "{s:?}"
        );
        assert_eq!(e.var, "PYTORCH_CUDA_ALLOC_CONF");
    }
}

fn ok(s: &str) -> AllocConf {
    parse_pytorch(s)
        .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
        .0
}

fn warnings(s: &str) -> Vec<Warning> {
    parse_pytorch(s)
        .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
        .1
}

/// (string, max_split_size, max_non_split_rounding_size, large_segment_size), from the oracle.
#[rustfmt::skip]
const SIZES: &[(&str, u64, u64, u64)] = &[
    ("", u64::MAX, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:20", 20 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:+30", 30 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb: 30", 30 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:30.9", 30 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:100abc", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:100é", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:-1", CLAMPED, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:18446744073709551615", CLAMPED, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:17592186044416", CLAMPED, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:100,max_split_size_mb:200", 200 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb,100", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:100,", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:1 00", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_split_size_mb:1\t00", 100 * MIB, 20 * MIB, 20 * MIB),
    ("max_non_split_rounding_mb:20", u64::MAX, 20 * MIB, 20 * MIB),
    ("max_non_split_rounding_mb:-1", u64::MAX, CLAMPED, 20 * MIB),
    ("large_segment_size_mb:11", u64::MAX, 11 * MIB, 11 * MIB),
    ("large_segment_size_mb:64", u64::MAX, 64 * MIB, 64 * MIB),
    ("large_segment_size_mb,64", u64::MAX, 64 * MIB, 64 * MIB),
    ("large_segment_size_mb:11x", u64::MAX, 11 * MIB, 11 * MIB),
    ("large_segment_size_mb:-1", u64::MAX, CLAMPED, CLAMPED),
    ("large_segment_size_mb:64,large_segment_size_mb:32", u64::MAX, 32 * MIB, 32 * MIB),
    ("large_segment_size_mb:11,max_split_size_mb:11", 11 * MIB, 11 * MIB, 11 * MIB),
    ("large_segment_size_mb:-1,max_split_size_mb:-1", CLAMPED, CLAMPED, CLAMPED),
    ("max_non_split_rounding_mb:100,large_segment_size_mb:64", u64::MAX, 100 * MIB, 64 * MIB),
    ("large_segment_size_mb:64,max_non_split_rounding_mb:100", u64::MAX, 100 * MIB, 64 * MIB),
    // Read from any token position, even inside another key's list.
    ("expandable_segments_reserve_by_class:[large_segment_size_mb:32]", u64::MAX, 32 * MIB, 32 * MIB),
    ("large_segment_size_mb:64,expandable_segments_reserve_by_class:[large_segment_size_mb:32]", u64::MAX, 32 * MIB, 32 * MIB),
    ("expandable_segments_reserve_by_class:[large_segment_size_mb:32],large_segment_size_mb:20", u64::MAX, 20 * MIB, 20 * MIB),
    // The generic pass skips the whole list, so max_split_size_mb:10 is never checked.
    ("expandable_segments_reserve:[,max_split_size_mb:10]", u64::MAX, 20 * MIB, 20 * MIB),
    ("backend:cudaMallocAsync,max_split_size_mb:100", 100 * MIB, 20 * MIB, 20 * MIB),
];

#[test]
fn sizes_match_the_oracle() {
    for &(s, split, non_split, large) in SIZES {
        let c = ok(s);
        let got = (
            c.max_split_size,
            c.max_non_split_rounding_size,
            c.large_segment_size,
        );
        assert_eq!(got, (split, non_split, large), "{s:?}");
        assert_eq!(c.last_allocator_settings, s);
    }
}

/// (string after `roundup_power2_divisions:`, the 16 slots), from the oracle.
#[rustfmt::skip]
const DIVISIONS: &[(&str, [u64; 16])] = &[
    ("1", [1; 16]),
    ("4", [4; 16]),
    ("9223372036854775808", [1 << 63; 16]),
    ("[256:1,512:2,1024:4,>:8]", [1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8]),
    ("[>:4]", [0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]),
    ("[]", [0; 16]),
    ("[256:0]", [0; 16]),
    ("[1:4]", [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ("[65536:4]", [4; 16]),
    ("[32768:4,>:2]", [4; 16]),
    ("[64:8,16:2]", [8, 8, 8, 8, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ("[256,2]", [2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0]),
    ("[256:2]]", [2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0]),
    ("[>:4,256:2]", [2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4]),
    ("[256:2,>:4,>:8]", [2, 2, 2, 2, 2, 2, 2, 2, 2, 8, 8, 8, 8, 8, 8, 8]),
    ("4,roundup_power2_divisions:[256:2]", [2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4]),
    ("4]", [4; 16]),
];

#[test]
fn roundup_power2_divisions_match_the_oracle() {
    for (s, slots) in DIVISIONS {
        assert_eq!(
            ok(&format!("roundup_power2_divisions:{s}")).roundup_power2_divisions,
            *slots,
            "{s}"
        );
    }
    let gap = warnings("roundup_power2_divisions:[64:8,256:4]");
    assert!(
        gap.iter()
            .any(|w| w.message.contains("starting at 128 MiB are not listed")),
        "{gap:?}"
    );
}

/// (string, garbage_collection_threshold, per_process_memory_fraction), from the oracle.
#[rustfmt::skip]
const FLOATS: &[(&str, f64, f64)] = &[
    ("garbage_collection_threshold:0.5", 0.5, 1.0),
    ("garbage_collection_threshold:.5", 0.5, 1.0),
    ("garbage_collection_threshold:5e-1", 0.5, 1.0),
    ("garbage_collection_threshold:0x0.8p0", 0.5, 1.0),
    ("garbage_collection_threshold:0.5abc", 0.5, 1.0),
    ("garbage_collection_threshold:0.1234567", 0.1234567, 1.0),
    ("garbage_collection_threshold:2.2250738585072014e-308", f64::MIN_POSITIVE, 1.0),
    ("garbage_collection_threshold:0x0.fffffffffffff8p0", 1.0 - f64::EPSILON / 2.0, 1.0),
    ("per_process_memory_fraction:0", 0.0, 0.0),
    ("per_process_memory_fraction:-0", 0.0, 0.0),
    ("per_process_memory_fraction:1", 0.0, 1.0),
    ("per_process_memory_fraction:1e", 0.0, 1.0),
    ("per_process_memory_fraction:1e+", 0.0, 1.0),
    ("per_process_memory_fraction:0x", 0.0, 0.0),
    ("per_process_memory_fraction:0x.", 0.0, 0.0),
    ("per_process_memory_fraction:0x1p-1", 0.0, 0.5),
    ("per_process_memory_fraction:0x1.8p-1", 0.0, 0.75),
    ("per_process_memory_fraction:+.5", 0.0, 0.5),
    ("per_process_memory_fraction:0.5x", 0.0, 0.5),
    ("per_process_memory_fraction:0x1p-1074", 0.0, 5e-324), // an exact subnormal: no ERANGE
    ("per_process_memory_fraction:2.2250738585072013e-308", 0.0, f64::MIN_POSITIVE),
    ("per_process_memory_fraction:0x0.ffffffffffffffffffp0", 0.0, 1.0),
    ("per_process_memory_fraction:0.0000000000000000000000000000000000000000000000000000000001e57", 0.0, 0.1),
];

#[test]
fn thresholds_and_fractions_match_the_oracle() {
    for &(s, gc, fraction) in FLOATS {
        let c = ok(s);
        assert_eq!(
            (
                c.garbage_collection_threshold,
                c.per_process_memory_fraction
            ),
            (gc, fraction),
            "{s}"
        );
    }
}

#[test]
fn booleans_are_exactly_true_or_false() {
    assert!(ok("expandable_segments:True").expandable_segments);
    assert!(!ok("expandable_segments:True,expandable_segments:False").expandable_segments);
    let c = ok(
        "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True,\
                graph_capture_record_stream_reuse:True,pinned_use_background_threads:True,\
                pinned_free_catch_all:True,throw_on_cudamalloc_oom:True",
    );
    assert!(c.release_lock_on_cudamalloc && c.pinned_use_cuda_host_register);
    assert!(c.graph_capture_record_stream_reuse && c.pinned_use_background_threads);
    assert!(c.pinned_free_catch_all && c.throw_on_cudamalloc_oom);
    let c = ok("max_split_size_mb:100:expandable_segments:True");
    assert_eq!((c.max_split_size, c.expandable_segments), (100 * MIB, true));
}

#[test]
fn error_display_quotes_the_entry_and_says_what_is_valid() {
    let e = |s: &str| parse_pytorch(s).unwrap_err().to_string();
    assert_eq!(
        e("max_split_size_mb:10"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry 'max_split_size_mb:10': max_split_size_mb must be at least 20 (MiB)"
    );
    assert_eq!(
        e("large_segment_size_mb:32,max_split_size_mb:20"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry 'max_split_size_mb:20': max_split_size_mb must be at least 32 (= large_segment_size_mb) (MiB)"
    );
    assert_eq!(
        e("max_split_size_mb:"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry 'max_split_size_mb:': 'max_split_size_mb' is missing its value: write max_split_size_mb:<value>"
    );
    assert_eq!(
        e("expandable_segments:true"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry 'expandable_segments:true': expandable_segments must be True or False (capitalised), got 'true'"
    );
    assert_eq!(
        e("backend:foo"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry 'backend:foo': backend must be native or cudaMallocAsync, got 'foo'"
    );
    assert_eq!(
        e(",x:1"),
        "error in PYTORCH_CUDA_ALLOC_CONF entry ',': stray ',': entries are key:value pairs separated by ','"
    );
    // Slips get the fix that was meant: ':' between key and value, ',' between options.
    assert!(
        e("max_split_size_mb=128").contains(
            "'max_split_size_mb=128': use ':' between a key and its value, not '=' (write max_split_size_mb:128)"
        ),
        "{}",
        e("max_split_size_mb=128")
    );
    let semi = e("expandable_segments:True;max_split_size_mb:128");
    assert!(
        semi.contains(
            "options are separated by ',', not ';' (write expandable_segments:True,max_split_size_mb:128)"
        ),
        "{semi}"
    );
    let unknown = e("no_such_key:1");
    assert!(unknown.starts_with("error in PYTORCH_CUDA_ALLOC_CONF entry 'no_such_key:1': unknown key 'no_such_key'; valid keys: backend, max_split_size_mb,"), "{unknown}");
    assert!(!unknown.contains("research_after_flush"));
    assert!(e("max_split_size:100").contains("did you mean max_split_size_mb?"));
    assert!(e("research_after_flush:True").contains("set it in CACHALOT_ALLOC_CONF"));
    assert!(e("roundup_power2_divisions:[256:2").contains("has no closing ']'"));
}

#[test]
fn junk_that_torch_accepts_comes_with_a_warning() {
    let first = |s: &str| {
        warnings(s)
            .first()
            .map(|w| w.message.clone())
            .unwrap_or_default()
    };
    assert!(first("max_split_size_mb:100abc").contains("read as 100"));
    assert_eq!(
        warnings("max_split_size_mb:100abc")[0].entry,
        "max_split_size_mb:100abc"
    );
    let w = warnings("max_split_size_mb:-1");
    assert!(
        w.iter().any(|w| w.message.contains("wraps negative")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.message.contains("clamped to 17592186044415 MiB")),
        "{w:?}"
    );
    assert!(first("max_split_size_mb,100").contains("expected ':'"));
    assert!(first("max_split_size_mb:100:expandable_segments:True").contains("expected ','"));
    assert!(first("max_split_size_mb:1 00").contains("read as '100'"));
    assert!(
        first("garbage_collection_threshold:0.5abc,per_process_memory_fraction:0.5")
            .contains("read as 0.5")
    );
    assert!(first("max_split_size_mb:100,max_split_size_mb:200").contains("the last one wins"));
    assert!(warnings("max_split_size_mb:128,expandable_segments:True").is_empty());
}

#[test]
fn legacy_roundup_bypass_threshold_is_accepted_with_advice() {
    let (c, w) =
        parse_pytorch("roundup_power2_divisions:4,roundup_bypass_threshold_mb:256").unwrap();
    assert_eq!(
        (c.roundup_bypass_threshold, c.roundup_power2_divisions),
        (256 * MIB, [4; 16])
    );
    let msg = &w
        .iter()
        .find(|w| w.entry == "roundup_bypass_threshold_mb:256")
        .unwrap()
        .message;
    assert!(msg.contains("PyTorch >= 2.0 rejects"), "{msg}");
    assert!(
        msg.contains("roundup_power2_divisions:[128:4] instead (exactly"),
        "{msg}"
    );
    assert_eq!(
        c.effective_divisions(),
        [4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(c.to_pytorch_string(), "roundup_power2_divisions:[128:4]");
    let (c, w) =
        parse_pytorch("roundup_power2_divisions:4,roundup_bypass_threshold_mb:100").unwrap();
    assert_eq!(
        c.effective_divisions(),
        [4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert!(w.iter().any(|w| w.message.contains("approximately")));
}

#[test]
fn gc_needs_a_fraction_below_one() {
    // Oracle (1 GiB device, 600 + 100 MiB, free 600, ask 700): with fraction 1.0 the GC did not
    // run and the allocation needed a retry; with 0.99 or 0.9999999999 the GC freed the block.
    assert!(!ok("garbage_collection_threshold:0.5").gc_enabled());
    assert!(!ok("garbage_collection_threshold:0.5,per_process_memory_fraction:1.0").gc_enabled());
    assert!(ok("garbage_collection_threshold:0.5,per_process_memory_fraction:0.99").gc_enabled());
    assert!(
        ok("garbage_collection_threshold:0.5,per_process_memory_fraction:0.9999999999")
            .gc_enabled()
    );
    assert!(!ok("per_process_memory_fraction:0.5").gc_enabled());
    let w = warnings("garbage_collection_threshold:0.5");
    assert!(w.iter().any(|w| w.message.contains("no effect")), "{w:?}");
}

#[test]
fn backend_and_its_warnings() {
    assert_eq!(ok("backend:native").backend, Backend::Native);
    assert_eq!(
        ok("backend:cudaMallocAsync,backend:cudaMallocAsync").backend,
        Backend::CudaMallocAsync
    );
    let (c, w) = parse_pytorch("backend:cudaMallocAsync,max_split_size_mb:100").unwrap();
    assert_eq!(c.backend, Backend::CudaMallocAsync);
    assert!(
        w.iter().all(|w| w.torch_text.is_none()),
        "torch does not warn here: {w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.message.contains("ignores max_split_size_mb")),
        "{w:?}"
    );
    let (_, w) = parse_pytorch("release_lock_on_cudamalloc:True,backend:cudaMallocAsync").unwrap();
    let torch = "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and garbage_collect_threshold.";
    assert_eq!(
        w.iter()
            .filter_map(|w| w.torch_text.as_deref())
            .collect::<Vec<_>>(),
        [torch]
    );
}

#[test]
fn pinned_keys() {
    let c = ok(
        "pinned_num_register_threads:128,pinned_reserve_segment_size_mb:-1,\
                pinned_max_round_threshold_mb:5,pinned_max_cached_size_mb:-1",
    );
    assert_eq!(
        (
            c.pinned_num_register_threads,
            c.pinned_reserve_segment_size_mb
        ),
        (128, u64::MAX)
    );
    assert_eq!(
        (c.pinned_max_round_threshold, c.pinned_max_cached_size),
        (5 * MIB, CLAMPED)
    );
    assert_eq!(
        ok("pinned_max_round_threshold_mb:0").pinned_max_round_threshold,
        0
    );
    let torch = "pinned_max_round_threshold_mb (17592186044415) > pinned_max_cached_size_mb (4). The cache size limit takes precedence: allocations above pinned_max_cached_size_mb are never rounded up.";
    let w = warnings("pinned_max_round_threshold_mb:-1,pinned_max_cached_size_mb:4");
    assert!(
        w.iter().any(|w| w.torch_text.as_deref() == Some(torch)),
        "{w:?}"
    );
    assert!(warnings("pinned_max_round_threshold_mb:4,pinned_max_cached_size_mb:4").is_empty());
    assert!(warnings("pinned_max_cached_size_mb:4").is_empty());
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
    assert_eq!(
        r("0.5,expandable_segments_reserve:bad"),
        Some(ReserveSpec::Fraction(0.5))
    );
    for bad in [
        "40M", "-1", "0", "abc", "inf", "nan", "0x1p-1", "1e400", "G", "0G", "1GG", "-1G", "infG",
        "1e400G",
    ] {
        let (c, w) = parse_pytorch(&format!("expandable_segments_reserve:{bad}")).unwrap();
        assert_eq!(c.expandable_segments_reserve, None, "{bad}");
        let torch = format!(
            "Ignoring invalid expandable-segment reserve value '{bad}' in PYTORCH_CUDA_ALLOC_CONF (expected a positive, finite fraction like 0.5 or an absolute size like 40G); using default."
        );
        assert_eq!(w[0].torch_text.as_deref(), Some(torch.as_str()), "{bad}");
    }
    // Probe on an 80 GiB device: 0.5 → 40 GiB, 1.5G → 1.5 GiB, 1e30G saturates.
    assert_eq!(ReserveSpec::Fraction(0.5).resolve_bytes(80 << 30), 40 << 30);
    assert_eq!(ReserveSpec::GiB(1.5).resolve_bytes(80 << 30), 1_610_612_736);
    assert_eq!(ReserveSpec::GiB(1e30).resolve_bytes(80 << 30), u64::MAX);
    assert_eq!(
        ReserveSpec::Fraction(0.3333333333333).resolve_bytes(80 << 30),
        28_633_115_306
    );
    let w = warnings("expandable_segments_reserve:1e-310");
    assert!(
        w.iter()
            .any(|w| w.message.contains("smaller than one 20 MiB page"))
    );
}

#[test]
fn expandable_segments_reserve_by_class() {
    let by = |s: &str| {
        ok(&format!("expandable_segments_reserve_by_class:{s}"))
            .expandable_segments_reserve_by_class
    };
    let f = |n: &str, v: f64| (n.to_string(), ReserveSpec::Fraction(v));
    let two_g = ("b".to_string(), ReserveSpec::GiB(2.0));
    assert_eq!(by("[a:0.5,b:2G]"), vec![f("a", 0.5), two_g.clone()]);
    assert_eq!(by("[a:0.5,b:2G,a:0.25]"), vec![f("a", 0.25), two_g]);
    assert_eq!(by("[a:0.5,a:bad]"), vec![f("a", 0.5)]);
    assert_eq!(by("[a:0.5,]"), vec![f("a", 0.5)]);
    assert_eq!(by("[]"), vec![]);
    assert_eq!(
        by("[a:0.5],expandable_segments_reserve_by_class:[b:0.5]"),
        vec![f("b", 0.5)]
    );
}

#[test]
fn apply_cachalot_changes_only_named_keys() {
    let before = ok("max_split_size_mb:128,expandable_segments:True");
    let mut c = before.clone();
    apply_cachalot(&mut c, "expandable_oversize_exempt:True").unwrap();
    let exempt = CachalotOptions {
        expandable_oversize_exempt: true,
        ..Default::default()
    };
    assert_eq!(
        c,
        AllocConf {
            cachalot: exempt,
            ..before.clone()
        }
    );
    let mut c = before.clone();
    assert!(apply_cachalot(&mut c, "expandable_oversize_exempt:maybe").is_err());
    assert_eq!(c, before);
    apply_cachalot(&mut c, "large_segment_size_mb:64").unwrap();
    assert_eq!(
        (
            c.large_segment_size,
            c.max_non_split_rounding_size,
            c.max_split_size
        ),
        (64 * MIB, 64 * MIB, 128 * MIB)
    );
    let mut c = before.clone();
    let e = apply_cachalot(&mut c, "large_segment_size_mb:256").unwrap_err();
    assert_eq!(
        e.reason,
        "max_split_size_mb (128 MiB) must be at least large_segment_size_mb (256 MiB)"
    );
    assert_eq!(
        e.torch_message(),
        "CachingAllocator option max_split_size_mb too small, must be >= 256"
    );
    assert_eq!(c, before);
}

#[test]
fn to_pytorch_string_is_canonical_and_round_trips() {
    let c = ok(
        "per_process_memory_fraction:0.9, expandable_segments:True,garbage_collection_threshold:0.6,\
                roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_split_size_mb:128",
    );
    assert_eq!(
        c.to_pytorch_string(),
        "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],garbage_collection_threshold:0.6,expandable_segments:True,per_process_memory_fraction:0.9"
    );
    assert_eq!(AllocConf::default().to_pytorch_string(), "");
    #[rustfmt::skip]
    let sources = [
        "roundup_power2_divisions:[64:8,16:2]", "roundup_power2_divisions:[>:4]", "roundup_power2_divisions:[1:4]",
        "roundup_power2_divisions:[2:2,4:4,>:0]", "large_segment_size_mb:64,max_non_split_rounding_mb:100",
        "large_segment_size_mb:-1,max_split_size_mb:-1",
        "backend:cudaMallocAsync,per_process_memory_fraction:-0,throw_on_cudamalloc_oom:True",
        "expandable_segments_reserve:1e-310,expandable_segments_reserve_by_class:[a:0.5,b:2G,a:1e30G]",
        "pinned_num_register_threads:64,pinned_reserve_segment_size_mb:-1,pinned_max_round_threshold_mb:0,pinned_max_cached_size_mb:4",
        "pinned_use_hip_host_register:True,release_lock_on_hipmalloc:True,pinned_free_catch_all:True,graph_capture_record_stream_reuse:True,pinned_use_background_threads:True",
        "garbage_collection_threshold:2.2250738585072014e-308",
        "expandable_segments_reserve_by_class:[large_segment_size_mb:32],large_segment_size_mb:20",
        "large_segment_size_mb:-1,expandable_segments_reserve_by_class:[large_segment_size_mb:32]",
    ];
    for src in sources {
        let c = ok(src);
        let again = ok(&c.to_pytorch_string());
        assert_eq!(
            AllocConf {
                last_allocator_settings: src.into(),
                ..again
            },
            c,
            "{src}"
        );
    }
}

#[test]
fn never_panics_and_accepted_strings_round_trip() {
    #[rustfmt::skip]
    let nasty = [
        "", ",", ":", "[", "]", "[[", "]]", ":::", ",,,", "[:,]", "key", "é:ü", "\u{0}", "max_split_size_mb:\u{7f}",
        "max_split_size_mb:99999999999999999999999999", "garbage_collection_threshold:1e999999999999999999",
        "garbage_collection_threshold:0x1p-99999999999999999999", "roundup_power2_divisions:[>:>:>]",
        "roundup_power2_divisions:[18446744073709551615:1]", "expandable_segments_reserve_by_class:[[:[]",
    ];
    #[rustfmt::skip]
    let alphabet = [
        ",", ":", "[", "]", " ", "\t", ">", "-", "1", "0", "4", "256", "True", "true", "x", "é", "0x", "e", ".", "G",
        "max_split_size_mb", "roundup_power2_divisions", "backend", "cudaMallocAsync", "large_segment_size_mb",
        "expandable_segments_reserve_by_class", "expandable_segments_reserve", "garbage_collection_threshold",
        "research_after_flush", "per_process_memory_fraction", "pinned_num_register_threads", "roundup_bypass_threshold_mb",
    ];
    let mut inputs: Vec<String> = nasty.iter().map(|s| s.to_string()).collect();
    inputs.push(format!(
        "per_process_memory_fraction:0.{}22250738585072012",
        "0".repeat(300)
    ));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..4000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let pick =
            |k: u64| alphabet[((seed >> (k * 5)) as usize + k as usize * 7) % alphabet.len()];
        inputs.push((0..seed % 12).map(pick).collect());
    }
    let strip = |c: &AllocConf| AllocConf {
        last_allocator_settings: String::new(),
        cachalot: Default::default(),
        ..c.clone()
    };
    for s in &inputs {
        for r in [parse_pytorch(s), parse_cachalot(s)] {
            match r {
                Ok((c, _)) => {
                    let text = c.to_pytorch_string();
                    let again = parse_pytorch(&text)
                        .unwrap_or_else(|e| panic!("{s:?} -> {text:?}: {e}"))
                        .0;
                    if c.roundup_bypass_threshold == u64::MAX {
                        assert_eq!(strip(&again), strip(&c), "{s:?} -> {text:?}");
                    }
                    assert_eq!(c.describe().len(), KEYS.len());
                }
                Err(e) => assert!(!e.to_string().is_empty() && !e.torch_message().is_empty()),
            }
        }
        let _ = apply_cachalot(&mut AllocConf::default(), s);
        let _ = from_env(env(&[
            ("PYTORCH_HIP_ALLOC_CONF", s),
            ("PYTORCH_ALLOC_CONF", s),
            ("CACHALOT_ALLOC_CONF", s),
        ]));
    }
}

/// A stand-in for the process environment.
fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let m: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

mod environment;
