//! Tests of how the environment is read: which variable each pass takes, `CACHALOT_ALLOC_CONF`
//! on top, and the no-caching variables. Expected values are the oracle's.

use super::*;

#[test]
fn environment_precedence() {
    let (c, _, src) = from_env(env(&[("PYTORCH_ALLOC_CONF", "expandable_segments:True")])).unwrap();
    assert!(c.expandable_segments);
    assert_eq!(src.to_string(), "PYTORCH_ALLOC_CONF");
    let both = [
        ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
        ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100"),
    ];
    let (c, w, src) = from_env(env(&both)).unwrap();
    assert_eq!(
        (c.max_split_size, c.expandable_segments),
        (100 * MIB, false)
    );
    assert_eq!(c.last_allocator_settings, "max_split_size_mb:100");
    assert_eq!(
        src.to_string(),
        "PYTORCH_CUDA_ALLOC_CONF; ignored: PYTORCH_ALLOC_CONF"
    );
    assert!(w.iter().any(|w| w.var == "PYTORCH_ALLOC_CONF"));
    // An empty value counts as set.
    let (c, _, _) = from_env(env(&[
        ("PYTORCH_ALLOC_CONF", "bad:1"),
        ("PYTORCH_CUDA_ALLOC_CONF", ""),
    ]))
    .unwrap();
    assert_eq!(c, AllocConf::default());
    let e = from_env(env(&[
        ("PYTORCH_ALLOC_CONF", ""),
        ("PYTORCH_CUDA_ALLOC_CONF", "bad:1"),
    ]))
    .unwrap_err();
    assert_eq!(
        (e.var, e.torch_message().as_str()),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "Unrecognized key 'bad' in CUDA allocator config."
        )
    );
    let (c, _, src) = from_env(env(&[])).unwrap();
    assert_eq!(
        (c, src.to_string()),
        (
            AllocConf::default(),
            "defaults (no allocator variable set)".into()
        )
    );
}

#[test]
fn hip_variable_feeds_only_the_generic_pass() {
    let vars = [
        ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"),
        (
            "PYTORCH_ALLOC_CONF",
            "max_split_size_mb:100,release_lock_on_cudamalloc:True",
        ),
    ];
    let (c, _, src) = from_env(env(&vars)).unwrap();
    assert!(c.expandable_segments && c.release_lock_on_cudamalloc);
    assert_eq!(
        (c.max_split_size, c.last_allocator_settings.as_str()),
        (u64::MAX, "expandable_segments:True")
    );
    assert_eq!(
        src.to_string(),
        "PYTORCH_HIP_ALLOC_CONF (generic keys) + PYTORCH_ALLOC_CONF (CUDA keys and backend)"
    );
    let (c, _, _) = from_env(env(&[(
        "PYTORCH_HIP_ALLOC_CONF",
        "backend:cudaMallocAsync",
    )]))
    .unwrap();
    assert_eq!(c.backend, Backend::Native);
    let (c, _, _) = from_env(env(&[(
        "PYTORCH_HIP_ALLOC_CONF",
        "release_lock_on_cudamalloc:true",
    )]))
    .unwrap();
    assert!(!c.release_lock_on_cudamalloc);
    let vars = [
        ("PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:100"),
        ("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync"),
    ];
    let (c, _, _) = from_env(env(&vars)).unwrap();
    assert_eq!(
        (c.backend, c.max_split_size),
        (Backend::CudaMallocAsync, 100 * MIB)
    );
    let e = from_env(env(&[("PYTORCH_HIP_ALLOC_CONF", "bad:1")])).unwrap_err();
    assert_eq!(
        (e.var, e.torch_message().as_str()),
        (
            "PYTORCH_HIP_ALLOC_CONF",
            "Unrecognized key 'bad' in Accelerator allocator config."
        )
    );
    let e = from_env(env(&[(
        "PYTORCH_HIP_ALLOC_CONF",
        "roundup_power2_divisions:[",
    )]))
    .unwrap_err();
    assert_eq!(
        e.torch_message(),
        "i < tokenizer.size() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/c10/core/AllocatorConfig.cpp\":213, please report a bug to PyTorch. Expected closing bracket ']' in ConfigTokenizer but reached end of config"
    );
    assert!(!e.aborts_at_load());
    let e = from_env(env(&[(
        "PYTORCH_HIP_ALLOC_CONF",
        "roundup_power2_divisions:",
    )]))
    .unwrap_err();
    assert_eq!(e.torch_message(), OOB54);
}

#[test]
fn cachalot_variable() {
    let (c, _) = parse_cachalot(
        "research_after_flush:True,expandable_oversize_exempt:True,max_split_size_mb:64",
    )
    .unwrap();
    assert!(c.cachalot.research_after_flush && c.cachalot.expandable_oversize_exempt);
    assert_eq!(c.max_split_size, 64 * MIB);
    assert_eq!(
        parse_cachalot("research_after_flush:yes").unwrap_err().var,
        "CACHALOT_ALLOC_CONF"
    );
    let vars = [
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "max_split_size_mb:128,roundup_power2_divisions:4",
        ),
        (
            "CACHALOT_ALLOC_CONF",
            "research_after_flush:True,garbage_collection_threshold:0.5",
        ),
    ];
    let (c, _, src) = from_env(env(&vars)).unwrap();
    assert!(c.cachalot.research_after_flush);
    assert_eq!(
        (
            c.max_split_size,
            c.roundup_power2_divisions,
            c.garbage_collection_threshold
        ),
        (128 * MIB, [4; 16], 0.5)
    );
    assert_eq!(
        c.last_allocator_settings,
        "max_split_size_mb:128,roundup_power2_divisions:4"
    );
    assert_eq!(
        src.to_string(),
        "PYTORCH_CUDA_ALLOC_CONF + CACHALOT_ALLOC_CONF"
    );
    let e = from_env(env(&[(
        "PYTORCH_CUDA_ALLOC_CONF",
        "research_after_flush:True",
    )]))
    .unwrap_err();
    assert!(e.reason.contains("CACHALOT_ALLOC_CONF"));
}

type NoCachingCase = (
    Option<&'static str>,
    Option<&'static str>,
    bool,
    &'static [&'static str],
);

/// `PYTORCH_NO_CUDA_MEMORY_CACHING` / `PYTORCH_NO_HIP_MEMORY_CACHING` as the oracle read them
/// (torch 2.15, `shared/oracle/oracle` on a trace that reuses a cached block: one device
/// allocation with caching, one per request without): (CUDA value, HIP value, caching off,
/// variables torch warned about).
#[rustfmt::skip]
const NO_CACHING: &[NoCachingCase] = &[
    (None, None, false, &[]),
    (Some("1"), None, true, &[]),
    (Some("0"), None, false, &[]),
    (Some("true"), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some("True"), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some("TRUE"), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some(" 1"), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some("1 "), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some(""), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some("01"), None, false, &[NO_CUDA_CACHING_VAR]),
    (Some("yes"), None, false, &[NO_CUDA_CACHING_VAR]),
    (None, Some("1"), true, &[]),
    (None, Some("true"), false, &[NO_HIP_CACHING_VAR]),
    (Some("0"), Some("1"), true, &[]),
    (Some("1"), Some("0"), true, &[]),
    (Some("1"), Some("yes"), true, &[NO_HIP_CACHING_VAR]),
    (Some("yes"), Some("no"), false, &[NO_CUDA_CACHING_VAR, NO_HIP_CACHING_VAR]),
    (Some("yes"), Some("1"), true, &[NO_CUDA_CACHING_VAR]),
    (Some("0"), Some("yes"), false, &[NO_HIP_CACHING_VAR]),
];

#[test]
fn no_caching_variables_are_read_as_torch_reads_them() {
    for &(cuda, hip, off, warned) in NO_CACHING {
        let mut vars = Vec::new();
        vars.extend(cuda.map(|v| (NO_CUDA_CACHING_VAR, v)));
        vars.extend(hip.map(|v| (NO_HIP_CACHING_VAR, v)));
        let s = Settings::from_env_with(env(&vars)).unwrap();
        let case = format!("{cuda:?} {hip:?}");
        assert_eq!(s.backend() == Backend::Uncached, off, "{case}");
        assert_eq!(s.source.no_caching.is_some(), off, "{case}");
        let torch: Vec<&str> = s.warnings.iter().map(|w| w.var).collect();
        assert_eq!(torch, warned, "{case}");
        for w in &s.warnings {
            let text = w.torch_text.as_deref().unwrap();
            assert_eq!(
                text,
                format!(
                    "Ignoring invalid value for boolean flag {}: {}valid values are 0 or 1.",
                    w.var, w.entry
                ),
            );
            assert!(w.to_string().contains("caching stays on"), "{w}");
        }
    }
}

#[test]
fn no_caching_is_ignored_with_cuda_malloc_async() {
    // The oracle reports allocator_name cudaMallocAsync with PYTORCH_NO_CUDA_MEMORY_CACHING=1.
    for var in [NO_CUDA_CACHING_VAR, NO_HIP_CACHING_VAR] {
        let s = Settings::from_env_with(env(&[
            (var, "1"),
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ]))
        .unwrap();
        assert_eq!(s.backend(), Backend::CudaMallocAsync);
        assert_eq!(s.source.no_caching, None);
    }
    let s = Settings::from_env_with(env(&[(NO_CUDA_CACHING_VAR, "1")])).unwrap();
    assert_eq!(s.conf.backend.name(), "native");
    assert!(
        s.source
            .to_string()
            .ends_with("PYTORCH_NO_CUDA_MEMORY_CACHING=1"),
        "{}",
        s.source
    );
    // The configuration string stays what PYTORCH_CUDA_ALLOC_CONF can say.
    assert_eq!(
        s.conf.to_pytorch_string(),
        AllocConf::default().to_pytorch_string()
    );
}

#[test]
fn overrides_stand_in_for_their_variables() {
    let get = env(&[
        ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"),
        ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
        ("CACHALOT_ALLOC_CONF", "research_after_flush:True"),
    ]);
    let over = Overrides {
        pytorch: Some("max_split_size_mb:128"),
        cachalot: None,
    };
    let s = Settings::resolve(&get, over).unwrap();
    assert_eq!(s.conf.max_split_size, 128 << 20);
    assert!(
        !s.conf.expandable_segments,
        "the PyTorch variables are not read"
    );
    assert!(
        s.conf.cachalot.research_after_flush,
        "CACHALOT_ALLOC_CONF still applies"
    );
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.source.value(CUDA_VAR), Some("max_split_size_mb:128"));
    assert_eq!(s.source.value(ALLOC_VAR), None);
    assert_eq!(
        s.source.to_string(),
        "the given configuration + CACHALOT_ALLOC_CONF"
    );
    let over = Overrides {
        pytorch: None,
        cachalot: Some("expandable_oversize_exempt:True"),
    };
    let s = Settings::resolve(&get, over).unwrap();
    assert_eq!(s.conf.max_split_size, 64 << 20);
    assert!(s.conf.cachalot.expandable_oversize_exempt && !s.conf.cachalot.research_after_flush);
    assert_eq!(
        s.source.value(CACHALOT_VAR),
        Some("expandable_oversize_exempt:True")
    );
    assert_eq!(s.source.value(ALLOC_VAR), Some("expandable_segments:True"));
    assert_eq!(s.source.ignored, [ALLOC_VAR]);
    let e = Settings::resolve(
        &get,
        Overrides {
            pytorch: Some("nope:1"),
            cachalot: None,
        },
    );
    assert!(e.unwrap_err().to_string().contains("'nope:1'"));
}
