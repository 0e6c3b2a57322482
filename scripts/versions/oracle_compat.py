"""Adapts the 2.15 oracle's sources (shared/oracle/src) to an older torch release and CUDA major.

`scripts/versions/oracle.sh` builds torch X.Y's own allocator on the simulated device from the
same two programs as shared/oracle: the replayer `torch_oracle.cpp` and the fake CUDA runtime
`fake_cudart.cpp`. Their text was written against torch 2.15's c10 headers and CUDA 13's
runtime headers; older releases lack a few members and functions (the p2p cache, the
`AcceleratorAllocatorConfig` of 2.9, `num_oom_rejections`, pool use counts, `markCaptureBegin`)
and CUDA 12 declares three runtime functions with other parameters. This script copies the
sources into the build folder and rewrites exactly those places into forms that compile on
either side (C++20 `requires` tests inside generic lambdas, `__has_include`), so that one text
serves every release: what a release has is used, what it lacks is left out of the report or
refused with a message when a trace needs it. Each rewrite must match once; a source that has
changed stops the build with the snippet that was not found.

Usage: oracle_compat.py SRC_DIR OUT_DIR CUDA_MAJOR
"""

import pathlib
import sys

ORACLE = [
    # The p2p cache moved into c10 in 2.10; before, the allocator needs no such call.
    (
        "#include <c10/cuda/PeerToPeerAccess.h>\n",
        "#if __has_include(<c10/cuda/PeerToPeerAccess.h>)\n"
        "#include <c10/cuda/PeerToPeerAccess.h>\n#define ORACLE_HAS_P2P 1\n#endif\n",
    ),
    (
        "#include <c10/core/AllocatorConfig.h>\n",
        "#if __has_include(<c10/core/AllocatorConfig.h>)\n"
        "#include <c10/core/AllocatorConfig.h>\n#define ORACLE_HAS_AAC 1\n#endif\n",
    ),
    (
        "    c10::cuda::detail::init_p2p_access_cache(device_count);\n",
        "#ifdef ORACLE_HAS_P2P\n    c10::cuda::detail::init_p2p_access_cache(device_count);\n#endif\n",
    ),
    # The statistics types: their namespaces moved (2.6/2.7); name them by what returns them.
    (
        "namespace CCA = c10::cuda::CUDACachingAllocator;\n",
        "namespace CCA = c10::cuda::CUDACachingAllocator;\n"
        "// MempoolId_t was c10::cuda's before 2.9: c10::X finds c10::cuda::X only where c10 has none.\n"
        "namespace c10 {\nnamespace oracle_compat {\nusing namespace c10::cuda;\n}\nusing namespace oracle_compat;\n}  // namespace c10\n"
        "using OracleDS = decltype(std::declval<CCA::CUDAAllocator&>().getDeviceStats(0));\n"
        "using OracleStatArray = decltype(OracleDS{}.allocation);\n"
        "using OracleStat = std::remove_cvref_t<decltype(OracleDS{}.allocation[0])>;\n",
    ),
    ("J stat_json(const c10::CachingAllocator::Stat& s)", "J stat_json(const OracleStat& s)"),
    (
        "J statarray_json(const c10::CachingAllocator::StatArray& a)",
        "J statarray_json(const OracleStatArray& a)",
    ),
    (
        "J device_stats_json(const c10::CachingDeviceAllocator::DeviceStats& d)",
        "J device_stats_json(const OracleDS& d)",
    ),
    (
        "J summary_json(const c10::CachingDeviceAllocator::DeviceStats& d, bool peak)",
        "J summary_json(const OracleDS& d, bool peak)",
    ),
    (
        "auto v = [&](const c10::CachingAllocator::StatArray& a)",
        "auto v = [&](const OracleStatArray& a)",
    ),
    (
        "                       const c10::CachingDeviceAllocator::DeviceStats& ds) {",
        "                       const OracleDS& ds) {",
    ),
    (
        "  c10::CachingDeviceAllocator::DeviceStats ds = alloc->getDeviceStats(0);",
        "  OracleDS ds = alloc->getDeviceStats(0);",
    ),
    # Statistics a release may not keep: left out of its report.
    (
        '  j.num("num_oom_rejections", d.num_oom_rejections);\n',
        "  [&](const auto& x) {\n"
        '    if constexpr (requires { x.num_oom_rejections; }) j.num("num_oom_rejections", x.num_oom_rejections);\n'
        "  }(d);\n",
    ),
    (
        '  j.num("max_split_size", d.max_split_size);\n'
        '  j.num("private_pools", static_cast<int64_t>(d.reserved_bytes_by_private_pools.size()));\n',
        "  [&](const auto& x) {\n"
        '    if constexpr (requires { x.max_split_size; }) j.num("max_split_size", x.max_split_size);\n'
        "    if constexpr (requires { x.reserved_bytes_by_private_pools; })\n"
        '      j.num("private_pools", static_cast<int64_t>(x.reserved_bytes_by_private_pools.size()));\n'
        "  }(d);\n",
    ),
    (
        '      j.num("use_count", alloc->getPoolUseCount(0, pd.id));\n',
        "      [&](auto* a) {\n"
        "        if constexpr (requires { a->getPoolUseCount(0, pd.id); })\n"
        '          j.num("use_count", a->getPoolUseCount(0, pd.id));\n'
        "        else\n"
        '          j.add("use_count", "null");\n'
        "      }(alloc);\n",
    ),
    (
        "    auto it = ds.reserved_bytes_by_private_pools.find(pd.id);\n"
        "    if (it != ds.reserved_bytes_by_private_pools.end())\n"
        '      j.obj("reserved_bytes", statarray_json(it->second));\n'
        "    else\n"
        '      j.add("reserved_bytes", "null");\n',
        "    [&](const auto& x) {\n"
        "      if constexpr (requires { x.reserved_bytes_by_private_pools; }) {\n"
        "        auto it = x.reserved_bytes_by_private_pools.find(pd.id);\n"
        "        if (it != x.reserved_bytes_by_private_pools.end())\n"
        '          j.obj("reserved_bytes", statarray_json(it->second));\n'
        "        else\n"
        '          j.add("reserved_bytes", "null");\n'
        "      }\n"
        "    }(ds);\n",
    ),
    (
        "      CCA::SnapshotInfo snap = alloc->snapshot(pd.id, false);\n",
        "      CCA::SnapshotInfo snap = [&](auto* a) {\n"
        "        if constexpr (requires { a->snapshot(pd.id, false); }) return a->snapshot(pd.id, false);\n"
        "        else if constexpr (requires { a->snapshot(pd.id); }) return a->snapshot(pd.id);\n"
        "        else return a->snapshot();\n"
        "      }(alloc);\n",
    ),
    # Pool calls a release may not have; a trace that needs one is refused (exit 3).
    (
        "        (void)alloc->getPoolUseCount(dev, id);\n",
        "        [&](auto* a) {\n"
        "          if constexpr (requires { a->getPoolUseCount(dev, id); }) (void)a->getPoolUseCount(dev, id);\n"
        '          else TORCH_CHECK(false, "this torch release has no getPoolUseCount (pool_begin)");\n'
        "        }(alloc);\n",
    ),
    (
        "      if (!exists) alloc->createOrIncrefPool(dev, id);",
        "      if (!exists) [&](auto* a) {\n"
        "        if constexpr (requires { a->createOrIncrefPool(dev, id); }) a->createOrIncrefPool(dev, id);\n"
        "      }(alloc);",
    ),
    (
        "      alloc->markCaptureBegin(dev);\n",
        "      [&](auto* a) {\n"
        "        if constexpr (requires { a->markCaptureBegin(dev); }) a->markCaptureBegin(dev);\n"
        "      }(alloc);\n",
    ),
    (
        "      alloc->markCaptureEnd(dev);\n",
        "      [&](auto* a) {\n"
        "        if constexpr (requires { a->markCaptureEnd(dev); }) a->markCaptureEnd(dev);\n"
        "      }(alloc);\n",
    ),
    (
        "      alloc->emptyCache(op.slot ? tr.pools[op.slot - 1].id : c10::MempoolId_t{0, 0});\n",
        "      [&](auto* a) {\n"
        "        const c10::MempoolId_t id = op.slot ? tr.pools[op.slot - 1].id : c10::MempoolId_t{0, 0};\n"
        "        if constexpr (requires { a->emptyCache(id); }) a->emptyCache(id);\n"
        "        else {\n"
        '          TORCH_CHECK(!op.slot, "this torch release empties only the whole cache (empty_cache P)");\n'
        "          a->emptyCache();\n"
        "        }\n"
        "      }(alloc);\n",
    ),
    (
        "      alloc->emptyCache({0, 0});\n",
        "      [&](auto* a) {\n"
        "        if constexpr (requires { a->emptyCache(c10::MempoolId_t{0, 0}); }) a->emptyCache({0, 0});\n"
        "        else a->emptyCache();\n"
        "      }(alloc);\n",
    ),
    # The settings: read through 2.9's AcceleratorAllocatorConfig where there is one, else
    # through CUDAAllocatorConfig; a setting the release does not have is not reported.
    (
        "    using AAC = c10::CachingAllocator::AcceleratorAllocatorConfig;\n",
        "#ifdef ORACLE_HAS_AAC\n"
        "    using AAC = c10::CachingAllocator::AcceleratorAllocatorConfig;\n"
        "#else\n"
        "    using AAC = CCA::CUDAAllocatorConfig;\n"
        "#endif\n",
    ),
    (
        '    cfg.unum("max_non_split_rounding_size", AAC::max_non_split_rounding_size());\n'
        '    cfg.unum("large_segment_size", AAC::large_segment_size());\n',
        "    [&]<class A>(A*) {\n"
        "      if constexpr (requires { A::max_non_split_rounding_size(); })\n"
        '        cfg.unum("max_non_split_rounding_size", A::max_non_split_rounding_size());\n'
        "      if constexpr (requires { A::large_segment_size(); })\n"
        '        cfg.unum("large_segment_size", A::large_segment_size());\n'
        "    }(static_cast<AAC*>(nullptr));\n",
    ),
    (
        '    cfg.dbl("per_process_memory_fraction", CAC::per_process_memory_fraction());\n'
        '    cfg.boolean("throw_on_cudamalloc_oom", CAC::throw_on_cudamalloc_oom());\n',
        "    [&]<class C>(C*) {\n"
        "      if constexpr (requires { C::per_process_memory_fraction(); })\n"
        '        cfg.dbl("per_process_memory_fraction", C::per_process_memory_fraction());\n'
        "      if constexpr (requires { C::throw_on_cudamalloc_oom(); })\n"
        '        cfg.boolean("throw_on_cudamalloc_oom", C::throw_on_cudamalloc_oom());\n'
        "    }(static_cast<CAC*>(nullptr));\n",
    ),
    (
        '    cfg.str("last_allocator_settings", AAC::last_allocator_settings());\n',
        "    [&]<class A>(A*) {\n"
        "      if constexpr (requires { A::last_allocator_settings(); })\n"
        '        cfg.str("last_allocator_settings", A::last_allocator_settings());\n'
        "    }(static_cast<AAC*>(nullptr));\n",
    ),
]

# CUDA 12's runtime headers: no NUMA ids in cudaDeviceProp, and the capture-info and
# graph-dependency functions without edge data (torch imports cudaStreamGetCaptureInfo_v2).
CUDART_12 = [
    (
        "  prop->hostNumaId = -1;\n  prop->deviceNumaId = -1;\n",
        "#if CUDART_VERSION >= 12090\n  prop->hostNumaId = -1;\n  prop->deviceNumaId = -1;\n#endif\n",
    ),
    (
        "                                     const cudaGraphNode_t** dependencies_out,\n"
        "                                     const cudaGraphEdgeData** edgeData_out,\n"
        "                                     size_t* numDependencies_out) {\n",
        "                                     const cudaGraphNode_t** dependencies_out,\n"
        "                                     size_t* numDependencies_out) {\n",
    ),
    ("  if (edgeData_out) *edgeData_out = nullptr;\n", ""),
    (
        "cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*,\n"
        "                                         size_t* pNumDependencies) {\n",
        "cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*,\n"
        "                                         size_t* pNumDependencies) {\n",
    ),
]


def rewrite(text: str, name: str, patches: list[tuple[str, str]]) -> str:
    for old, new in patches:
        n = text.count(old)
        if n != 1:
            sys.exit(f"oracle_compat: {name}: expected one copy of this text, found {n}:\n{old}")
        text = text.replace(old, new)
    return text


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in ("12", "13"):
        sys.exit("usage: oracle_compat.py SRC_DIR OUT_DIR CUDA_MAJOR(12|13)")
    src, out, cuda = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    (out / "oracle").mkdir(parents=True, exist_ok=True)
    (out / "fake_cudart").mkdir(parents=True, exist_ok=True)
    oracle = (src / "oracle/torch_oracle.cpp").read_text()
    oracle = "#include <type_traits>\n#include <utility>\n" + rewrite(
        oracle, "torch_oracle.cpp", ORACLE
    )
    (out / "oracle/torch_oracle.cpp").write_text(oracle)
    for f in ("fake_nvml.c", "fakecuda_ext.h"):
        (out / "fake_cudart" / f).write_text((src / "fake_cudart" / f).read_text())
    fake = (src / "fake_cudart/fake_cudart.cpp").read_text()
    if cuda == "12":
        fake = rewrite(fake, "fake_cudart.cpp", CUDART_12)
    (out / "fake_cudart/fake_cudart.cpp").write_text(fake)
    mapping = (src / "fake_cudart/libcudart.map").read_text()
    (out / "fake_cudart/libcudart.map").write_text(
        rewrite(mapping, "libcudart.map", [("libcudart.so.13 {", f"libcudart.so.{cuda} {{")])
    )


if __name__ == "__main__":
    main()
