"""The one builder of cachalot's first-use C/C++ libraries (cachalot.capture.build): the whole
capture runtime and the graph-pool hooks compile with -Wall -Wextra -Werror against torch's
own NVIDIA headers (so CI builds them with warnings as errors; the runtime's -Werror build is
cached, as capture's is, and built again whenever anything it is built from changes), and the
cache folder a build fills is complete or absent."""

from __future__ import annotations

import hashlib
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from cachalot.capture import build
from conftest import PACKAGE_ROOT, TORCH_PYTHON, package_env


def _torch_layout() -> build.TorchLayout:
    """torch's layout in the torch venv, or a skip saying why the headers are not there."""
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON} (scripts/python_env.sh --torch makes it)")
    try:
        t = build.find_torch(str(TORCH_PYTHON))
    except build.BuildError as e:
        pytest.skip(f"torch is not installed for {TORCH_PYTHON}: {e}")
    if not (t.cuda_include / "cuda.h").exists() or not (t.cudnn_include / "cudnn.h").exists():
        pytest.skip(f"torch {t.version} comes without its NVIDIA headers (a CPU or ROCm build)")
    return t


def _compilers() -> str:
    """The C and C++ compilers' own version lines (what decides which warnings there are)."""
    tools = (build.tool("g++", "CXX"), build.tool("gcc", "CC"))
    return "\n".join(build.run([t, "--version"], f"{t} --version") for t in tools)


def test_the_whole_runtime_builds_with_warnings_as_errors():
    """Built into the cache under a key of everything the build reads (the sources and this
    builder, the torch build, the compilers' versions), like the runtime capture builds: a
    run with the same inputs finds the build they passed, one with any input changed builds
    again, and a build that fails at a warning caches nothing."""
    t = _torch_layout()
    key = hashlib.sha256(f"{build.build_key(t)}\n{_compilers()}".encode()).hexdigest()[:16]
    out = build.cached(
        "capture-runtime-werror",
        key,
        lambda d: all((d / lib).exists() for lib in build.LIBRARIES),
        lambda d: build.build_runtime(t, d, werror=True),
    )
    for lib in build.LIBRARIES:
        so = out / lib
        assert so.stat().st_size > 0, lib
        # Each library exports what the capture binds to it, so the link did what it should.
        nm = ["nm", "-D", "--defined-only", str(so)]
        syms = subprocess.run(nm, check=True, capture_output=True, text=True)
        prefix = {
            "libnvidia-ml.so.1": " nvml",
            "libcuda.so.1": " cuInit",
            "libnccl.so.2": " ncclAllReduce",
        }
        prefix = prefix.get(lib, " cu")
        assert prefix in syms.stdout, lib


def test_a_warning_is_an_error_under_werror(tmp_path, monkeypatch):
    """-Werror reaches the compiler: a source with an unused variable fails to build, with the
    compiler's message in the error, and the folder a cached build would fill stays absent."""
    t = _torch_layout()
    src = tmp_path / "runtime"
    src.mkdir()
    for f in build.RUNTIME_SRC.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    first = src / "fake_cudart.cpp"  # the first source the build compiles
    first.write_text(first.read_text() + '\nextern "C" int fk_warn() { int unused; return 0; }\n')
    monkeypatch.setattr(build, "RUNTIME_SRC", src)
    monkeypatch.setenv("CACHALOT_CACHE", str(tmp_path / "cache"))

    def make(out):
        build.build_runtime(t, out, werror=True)

    with pytest.raises(build.BuildError, match="unused variable"):
        build.cached("capture-runtime", "k", lambda d: (d / "libcudart.so.13").exists(), make)
    assert not (tmp_path / "cache" / "capture-runtime" / "k").exists()
    assert not list((tmp_path / "cache" / "capture-runtime").glob(".build-*"))


def test_the_graph_pool_hooks_build_with_warnings_as_errors(tmp_path):
    _torch_layout()
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from cachalot import graph_pools
        graph_pools.compile_to(Path({str(tmp_path / "hooks.so")!r}), werror=True)
        """
    )
    p = subprocess.run(
        [str(TORCH_PYTHON), "-c", code],
        env=package_env(),
        cwd=PACKAGE_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    nm = ["nm", "-D", str(tmp_path / "hooks.so")]
    syms = subprocess.run(nm, check=True, capture_output=True, text=True)
    assert "cachalot_graph_pools_bind" in syms.stdout


def test_rocm_and_releases_before_2_4_are_refused_in_one_line(tmp_path):
    """The refusals name the build and the supported range (the version table's, in Rust)."""
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    for version, says in (
        ("2.3.1+cu121", "outside the releases cachalot knows; give a release from 2.4 to 2.15"),
        ("2.5.1+rocm6.2", "is a ROCm build; cachalot capture simulates NVIDIA's CUDA"),
    ):
        with pytest.raises(build.BuildError) as e:
            build.cuda_major(build.TorchLayout(tmp_path, version))
        msg = str(e.value)
        assert version in msg and says in msg and build.SUPPORTED in msg and "\n" not in msg


def test_a_missing_nvidia_header_names_the_package_to_install(tmp_path):
    """A CUDA 12 torch whose cuDNN wheel is gone: the error names nvidia-cudnn-cu12."""
    py29 = os.environ.get(
        "CACHALOT_TORCH29_PYTHON", str(Path.home() / ".cache/cachalot-torch29/bin/python")
    )
    if not Path(py29).exists():
        pytest.skip(f"no torch 2.9 environment at {py29} (scripts/python_env.sh --torch)")
    site = build.find_torch(py29).site_packages
    real = site / "torch" / "lib" / "libtorch_cuda.so"
    if not real.exists():
        pytest.skip(f"no torch 2.9 CUDA 12 build at {site} (scripts/python_env.sh --torch)")
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    (tmp_path / "torch" / "lib" / "libtorch_cuda.so").symlink_to(real)
    for wheel in ("cuda_runtime", "cublas", "nccl"):  # everything but cudnn
        (tmp_path / "nvidia" / wheel).mkdir(parents=True)
        (tmp_path / "nvidia" / wheel / "include").symlink_to(site / "nvidia" / wheel / "include")
    t = build.TorchLayout(tmp_path, "2.9.1+cu128")
    assert build.cuda_major(t) == 12
    with pytest.raises(
        build.BuildError, match=r"cudnn\.h is in none of .*install nvidia-cudnn-cu12"
    ):
        build.build_runtime(t, tmp_path / "out")
    assert not (tmp_path / "out").exists()
