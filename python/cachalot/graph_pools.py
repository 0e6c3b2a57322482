"""torch's private-pool hooks (CUDA-graph capture) bound to cachalot's allocator.

torch's `CUDAPluggableAllocator` sends `beginAllocateToPool`, `endAllocateToPool` and
`releasePool` (what `torch.cuda.graph` capture, `torch.cuda.graph_pool_handle` pools and
torch.compile's cudagraph trees call) to three optional hooks; unset, they do nothing and every
allocation of a capture lands in the ordinary pools. The hooks have C++ types, so they are the
functions of `graph_pools.cpp`, compiled once per torch build against its own headers (the
compile checks the hook types) into cachalot's cache folder, never into the package, by the
one builder of cachalot's first-use libraries (`cachalot.capture.build`: its cache, lock,
warnings and errors).

torch.utils.cpp_extension gives the compiler, include and library folders and the C++ ABI
flag; its `load()` itself is not used because it needs ninja, which torch does not install.
"""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import Any

from cachalot.capture import build as builder

SOURCE = Path(__file__).with_name("graph_pools.cpp")
LIBRARY = "libcachalot_graph_pools.so"
KIND = "graph-pools"  # its folder in cachalot's cache
HOOKS = (
    ("set_begin_allocate_to_pool", "cachalot_graph_pools_begin"),
    ("set_end_allocate_to_pool_fn", "cachalot_graph_pools_end"),
    ("set_release_pool", "cachalot_graph_pools_release"),
)
_C_FUNCTIONS = (
    "cachalot_begin_allocate_to_pool",
    "cachalot_end_allocate_to_pool",
    "cachalot_release_pool",
    "cachalot_last_error",
)


class GraphPoolsError(builder.BuildError):
    """The hooks could not be built or set; the message says what is missing."""


def _needs(what: str) -> GraphPoolsError:
    return GraphPoolsError(
        "cachalot.torch.enable_graph_pools() compiles a small C++ file against torch's headers "
        f"once (into {builder.cache_base() / KIND}) and needs {what}"
    )


def _flags(werror: bool = False) -> tuple[str, list[str]]:
    """The compiler and its arguments, from torch.utils.cpp_extension and torch's wheels."""
    import torch
    from torch.utils import cpp_extension

    try:
        cxx = builder.tool(
            "g++",
            chosen=cpp_extension.get_cxx_compiler(),
            what="a C++20 compiler",
        )
    except builder.BuildError as e:
        raise GraphPoolsError(str(e)) from None
    includes = cpp_extension.include_paths()
    header = Path(includes[0]) / "torch" / "csrc" / "cuda" / "CUDAPluggableAllocator.h"
    if not header.exists():
        raise _needs(f"torch's C++ headers, and {header} is missing (a CUDA build of torch has it)")
    site = Path(torch.__file__).resolve().parents[1]
    cuda = [
        d
        for d in (
            site / "nvidia" / "cu13" / "include",
            site / "nvidia" / "cuda_runtime" / "include",
            Path(cpp_extension.CUDA_HOME or "/usr/local/cuda") / "include",
        )
        if (d / "cuda_runtime_api.h").exists()
    ]
    if not cuda:
        raise _needs(
            "the CUDA runtime headers torch was built with (cuda_runtime_api.h), found in neither "
            f"{site / 'nvidia'} nor CUDA_HOME"
        )
    crt = builder.crt_include(site)
    if crt is None and not (cuda[0] / "crt" / "host_defines.h").exists():
        raise _needs(builder.CRT_MISSING)
    args = ["-std=c++20", "-O2", "-fPIC", "-shared", *builder.WARNINGS]
    if werror:
        args.append("-Werror")
    args.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    # torch's and CUDA's headers are system headers: the warnings are about our file.
    for d in [*includes, cuda[0]]:
        args += ["-isystem", str(d)]
    if crt is not None:
        args += ["-idirafter", str(crt)]  # crt/ only: cuda[0] comes first for the rest
    for d in cpp_extension.library_paths():
        args += [f"-L{d}", f"-Wl,-rpath,{d}"]
    return cxx, args


def _key(cxx: str, args: list[str]) -> str:
    import torch

    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update("\0".join([torch.__version__, cxx, *args]).encode())
    return h.hexdigest()[:16]


def compile_to(out: Path, werror: bool = False) -> None:
    """Compiles graph_pools.cpp into the library `out`; a failure is a GraphPoolsError quoting
    the compiler's output."""
    cxx, args = _flags(werror)
    try:
        builder.run([cxx, *args, str(SOURCE), "-o", str(out), "-lc10"], f"compiling {SOURCE.name}")
    except builder.BuildError as e:
        raise GraphPoolsError(str(e)) from None


def build() -> Path:
    """The compiled hooks for the torch in this process, built if missing."""
    cxx, args = _flags()
    folder = builder.cached(
        KIND, _key(cxx, args), lambda d: (d / LIBRARY).exists(), lambda d: compile_to(d / LIBRARY)
    )
    return folder / LIBRARY


def _address(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def enable(hooks: Any, library: str) -> ctypes.CDLL:
    """Sets the three pool hooks of `hooks` (torch._C._CUDAPluggableAllocator) to call the
    cachalot C library at `library`; returns the loaded hooks library."""
    missing = [setter for setter, _ in HOOKS if not hasattr(hooks, setter)]
    if missing:
        raise GraphPoolsError(
            f"{type(hooks).__name__} has no {', '.join(missing)}: expected the object a "
            "torch.cuda.memory.CUDAPluggableAllocator's allocator() returns (torch ≥ 2.3)"
        )
    lib = ctypes.CDLL(library)
    absent = [n for n in _C_FUNCTIONS if not hasattr(lib, n)]
    if absent:
        raise GraphPoolsError(
            f"{library} does not export {', '.join(absent)}: not a cachalot C library with "
            "private pools"
        )
    shim = ctypes.CDLL(str(build()))
    shim.cachalot_graph_pools_bind.argtypes = [ctypes.c_void_p] * 4
    shim.cachalot_graph_pools_bind.restype = ctypes.c_int
    shim.cachalot_graph_pools_open.restype = ctypes.c_int
    if shim.cachalot_graph_pools_bind(*(_address(lib, n) for n in _C_FUNCTIONS)) != 0:
        raise GraphPoolsError(
            f"the graph-pool hooks are already bound to another cachalot library than {library}; "
            "one process has one allocator"
        )
    for setter, fn in HOOKS:
        getattr(hooks, setter)(_address(shim, fn))
    return shim
