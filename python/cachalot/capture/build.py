"""The one builder of cachalot's first-use C/C++ libraries, and the capture runtime it builds.

Two libraries are compiled on the user's machine, once, into cachalot's cache folder (keyed by
their sources and the torch build, built under a lock into a temporary folder that is renamed
into place whole, so concurrent first uses build once and a failed build leaves nothing):

- the capture runtime, ``runtime/`` (a CUDA stack that computes nothing: libcudart, libcuda,
  libnvidia-ml, cuBLAS, cuBLASLt, cuDNN and NCCL), compiled against the headers of the NVIDIA wheels
  the user's torch already depends on. Nothing NVIDIA ships is linked or copied: the real
  libraries are read with ``nm -D`` only, for the names of the symbols they export, so that
  every name torch may bind to exists in the fake;
- the graph-pool hooks, ``graph_pools.cpp`` (``cachalot.graph_pools`` gives its flags).

Everything is compiled with ``-Wall -Wextra``; ``build_runtime(..., werror=True)`` (a test
runs it) adds ``-Werror``. A missing compiler or header is one error naming what to install.

The runtime's steps follow the team's ``shared/fakegpu/build.sh``; this is our Python
rendering of them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

RUNTIME_SRC = Path(__file__).with_name("runtime")
# The sources (runtime/NAME.cpp) of the libraries written in more than one file; the others
# are runtime/fake_TAG.cpp alone.
LIBRARY_PARTS = {
    "cudart": [
        "fake_cudart",
        "cudart_state",
        "cudart_shadow",
        "cudart_driver",
        "cudart_driver_device",
    ],
    "cudnn": ["fake_cudnn", "cudnn_backend"],
}
# torch.compile: Triton's modules and launches, CUDA graph capture (reduce-overhead)
LIBRARY_PARTS["cudart"] += ["cudart_modules", "cudart_graphs"]

# The CUDA majors whose wheels the runtime stands in for: the sonames and symbol version nodes of
# cudart, cuBLAS and cuBLASLt carry the major (libcudart.so.12, cudaMalloc@libcudart.so.12).
CUDA_MAJORS = (13, 12)


def libraries(major: int) -> tuple[str, ...]:
    """The libraries of a runtime for CUDA `major`'s wheels, in the order they must be loaded."""
    return (
        f"libcudart.so.{major}",
        "libnvidia-ml.so.1",
        "libcuda.so.1",
        f"libcublasLt.so.{major}",
        f"libcublas.so.{major}",
        "libcudnn.so.9",
        "libnccl.so.2",
    )


# A CUDA 13 runtime's libraries (the torch 2.15 wheels'); `runtime_libraries` reads a built one's.
LIBRARIES = libraries(13)


def runtime_libraries(runtime: Path) -> tuple[str, ...]:
    """The libraries of the runtime built into `runtime`, whichever CUDA major it serves (the
    CUDA 13 names when the folder holds none)."""
    for major in CUDA_MAJORS:
        if (runtime / f"libcudart.so.{major}").exists():
            return libraries(major)
    return LIBRARIES


# What the runtime is built for, and what it was tested on (tests/python/test_versions_*.py);
# the torch releases are the version table's (crates/core/src/config/versions.rs).
SUPPORTED = (
    "torch 2.4 … 2.15 CUDA builds on CUDA 12 or CUDA 13 wheels (tested: 2.15.0+cu132, "
    "2.13.0+cu130, 2.9.1+cu128)"
)


class BuildError(RuntimeError):
    """The runtime could not be built; the message says what is missing."""


# The headers the runtime compiles against and the NVIDIA package that brings each, by CUDA
# major: CUDA 13 wheels put the toolkit in one folder (nvidia/cu13), CUDA 12 wheels one folder
# per library (nvidia/cuda_runtime, nvidia/cublas, ...).
HEADERS = (
    ("cuda_runtime_api.h", "nvidia-cuda-runtime-cu{major}"),
    ("cuda.h", "nvidia-cuda-runtime-cu{major}"),
    ("cublas_api.h", "nvidia-cublas-cu{major}"),
    ("cublasLt.h", "nvidia-cublas-cu{major}"),
    ("cudnn.h", "nvidia-cudnn-cu{major}"),
    ("nccl.h", "nvidia-nccl-cu{major}"),
)


@dataclass(frozen=True)
class TorchLayout:
    """Where the user's torch and the NVIDIA headers and libraries it was built with live."""

    site_packages: Path
    version: str

    @property
    def torch_dir(self) -> Path:
        return self.site_packages / "torch"

    def _nvidia(self, sub: str) -> list[Path]:
        """nvidia/*/`sub` folders of the wheels, CUDA 13's one-folder toolkit first."""
        base = self.site_packages / "nvidia"
        found = sorted(base.glob(f"*/{sub}")) if base.is_dir() else []
        return sorted(found, key=lambda d: not re.fullmatch(r"cu\d+", d.parent.name))

    def header_dir(self, header: str) -> Path | None:
        """The include folder of torch's NVIDIA wheels that holds `header`, if any."""
        return next((d for d in self._nvidia("include") if (d / header).exists()), None)

    def library(self, soname: str) -> Path:
        """The real library `soname` among torch's NVIDIA wheels (its exports are read, never
        linked); a path that does not exist when the wheel is absent."""
        found = next((d / soname for d in self._nvidia("lib") if (d / soname).exists()), None)
        return found or self.site_packages / "nvidia" / "lib" / soname

    @property
    def include_dirs(self) -> list[Path]:
        """The include folders holding the runtime's headers, each once, in HEADERS order."""
        dirs: list[Path] = []
        for header, _ in HEADERS:
            d = self.header_dir(header)
            if d is not None and d not in dirs:
                dirs.append(d)
        return dirs

    @property
    def cuda_include(self) -> Path:
        return self.header_dir("cuda.h") or self.site_packages / "nvidia" / "cu13" / "include"

    @property
    def cudnn_include(self) -> Path:
        return self.header_dir("cudnn.h") or self.site_packages / "nvidia" / "cudnn" / "include"

    @property
    def nccl_include(self) -> Path:
        return self.header_dir("nccl.h") or self.site_packages / "nvidia" / "nccl" / "include"


def find_torch(python: str | None = None) -> TorchLayout:
    """Locate torch for `python` (default: this interpreter) without importing it."""
    probe = (
        "import importlib.util, os, re\n"
        "s = importlib.util.find_spec('torch')\n"
        "d = os.path.dirname(s.origin) if s and s.origin else ''\n"
        "v = ''\n"
        "p = os.path.join(d, 'version.py')\n"
        "if os.path.exists(p):\n"
        '    m = re.search(r"__version__\\s*=\\s*[\'\\"]([^\'\\"]+)", open(p).read())\n'
        "    v = m.group(1) if m else ''\n"
        "print(d); print(v)\n"
    )
    exe = python or sys.executable
    try:
        out = subprocess.run([exe, "-c", probe], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"cannot run {exe!r} to find torch: {e}") from e
    lines = [*out.splitlines(), "", ""]
    torch_dir, version = lines[0].strip(), lines[1].strip()
    if not torch_dir:
        raise BuildError(
            f"{exe} cannot find the torch package; install torch in that environment ({SUPPORTED})"
        )
    return TorchLayout(Path(torch_dir).parent, version)


# What to install for each tool the builds run.
_TOOLS = {
    "g++": "a C++17 compiler (g++; set CXX to use another)",
    "gcc": "a C compiler (gcc; set CC to use another)",
    "nm": "binutils (nm, readelf)",
    "readelf": "binutils (nm, readelf)",
}

# Warnings every build turns on (the sources compile clean under them with -Werror).
WARNINGS = ("-Wall", "-Wextra")


def tool(
    name: str, env_var: str | None = None, chosen: str | None = None, what: str | None = None
) -> str:
    """The path of tool `name` (or of `chosen`, or of $`env_var`), else a BuildError naming
    `what` (default: the tool's package) to install."""
    chosen = chosen or (os.environ.get(env_var, name) if env_var else name)
    path = shutil.which(chosen)
    if not path:
        raise BuildError(
            f"cachalot compiles its C/C++ libraries once, at first use, and needs "
            f"{what or _TOOLS.get(name, name)}: {chosen!r} was not found on PATH "
            "(Debian/Ubuntu: apt-get install build-essential)"
        )
    return path


_tool = tool


def run(cmd: list[str], what: str) -> str:
    """Runs one build step; a failure is a BuildError quoting the command and its output."""
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-15:]
        raise BuildError(
            f"{what} failed (exit {p.returncode}): {' '.join(cmd[:3])} …\n" + "\n".join(tail)
        )
    return p.stdout


@dataclass(frozen=True)
class CudaBuild:
    """What the runtime is built against for one torch: its CUDA major and crt/ folder."""

    major: int
    crt: Path


def cuda_major(t: TorchLayout) -> int:
    """The CUDA major torch `t` was built for (the libcudart.so.N its libtorch_cuda.so links),
    or a BuildError with one line saying why this build cannot be captured."""
    lib = t.torch_dir / "lib"
    if (lib / "libtorch_hip.so").exists() or "rocm" in t.version:
        raise BuildError(
            f"torch {t.version} is a ROCm build; cachalot capture simulates NVIDIA's CUDA "
            f"libraries and supports {SUPPORTED}"
        )
    _check_release(t)
    cuda_so = lib / "libtorch_cuda.so"
    if not cuda_so.exists():
        raise BuildError(
            f"torch {t.version} at {t.torch_dir} has no libtorch_cuda.so (a CPU-only build): "
            f"capture needs a CUDA build of torch, {SUPPORTED}"
        )
    needed = run([_tool("readelf"), "-d", str(cuda_so)], "readelf")
    for major in CUDA_MAJORS:
        if f"[libcudart.so.{major}]" in needed:
            return major
    sonames = ", ".join(sorted(set(re.findall(r"\[(libcudart[^\]]*)\]", needed)))) or "no libcudart"
    raise BuildError(f"torch {t.version} links {sonames}; cachalot capture supports {SUPPORTED}")


def _check_release(t: TorchLayout) -> None:
    """Refuses a torch release outside the version table (crates/core/src/config/versions.rs,
    reached through the native module). Run as a script from a checkout whose native module is
    not built yet (the Rust tests build the simulated driver before the wheel exists), the table
    is not at hand: the build goes on, saying that the release was not checked."""
    try:
        from cachalot import _native
    except ImportError:
        print(
            f"cachalot capture: torch {t.version} not checked against the supported releases "
            "(cachalot's native module is not built here)",
            file=sys.stderr,
        )
        return
    try:
        _native.torch_release(t.version)
    except ValueError as e:
        raise BuildError(f"{e}; cachalot capture supports {SUPPORTED}") from None


def _check_layout(t: TorchLayout) -> CudaBuild:
    """Check that torch links sonames we fake and that its wheels hold the headers we compile
    against; return what the build needs."""
    major = cuda_major(t)
    for header, package in HEADERS:
        if t.header_dir(header) is None:
            raise BuildError(
                f"{header} is in none of {t.site_packages / 'nvidia'}/*/include: the NVIDIA "
                f"wheels torch {t.version} depends on are incomplete; install "
                f"{package.format(major=major)} (or reinstall torch)"
            )
    crt = crt_include(t.site_packages)
    if crt is None:
        raise BuildError(CRT_MISSING)
    return CudaBuild(major, crt)


# cuda_runtime_api.h includes crt/host_defines.h, which the runtime wheel leaves out; the
# triton and nvcc wheels carry it.
CRT_MISSING = (
    "cuda_runtime_api.h needs crt/host_defines.h, found in neither the triton wheel nor "
    "nvidia-cuda-nvcc nor /usr/local/cuda; install triton (torch's own dependency) or nvidia-cuda-crt"
)


def crt_include(site_packages: Path) -> Path | None:
    """The include folder holding crt/host_defines.h for torch's CUDA headers, if any."""
    for cand in (
        site_packages / "nvidia" / "cu13" / "include",
        site_packages / "triton" / "backends" / "nvidia" / "include",
        site_packages / "nvidia" / "cuda_nvcc" / "include",
        site_packages / "nvidia" / "cu13" / "crt" / "include",
        Path("/usr/local/cuda/include"),
    ):
        if (cand / "crt" / "host_defines.h").exists():
            return cand
    return None


def driver_entry_points() -> set[str]:
    """The driver API names the fake cudart implements: its two tables of entry points,
    ``FK(name)`` in cudart_driver.cpp and ``FK("name", fn)`` in cudart_driver_device.cpp."""
    names = set()
    for part in ("cudart_driver", "cudart_driver_device", "cudart_modules"):
        text = (RUNTIME_SRC / f"{part}.cpp").read_text()
        names |= set(re.findall(r'\bFK\(\s*"?(cu[A-Z]\w*)', text))
        names |= set(re.findall(r'\{"(cu[A-Z]\w*)"', text))
    return names


def cache_base() -> Path:
    """cachalot's build cache: $CACHALOT_CACHE, else $XDG_CACHE_HOME/cachalot (~/.cache)."""
    return Path(
        os.environ.get("CACHALOT_CACHE")
        or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cachalot"
        )
    )


def cache_root() -> Path:
    return cache_base() / "capture-runtime"


def build_key(t: TorchLayout) -> str:
    """Changes when the sources, this builder or the torch build change."""
    h = hashlib.sha256()
    for f in [*sorted(RUNTIME_SRC.iterdir()), Path(__file__)]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    cuda_so = t.torch_dir / "lib" / "libtorch_cuda.so"
    st = cuda_so.stat() if cuda_so.exists() else None
    h.update(f"{t.site_packages}|{t.version}|{st and st.st_size}|{st and st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def cached(
    kind: str, key: str, ready: Callable[[Path], bool], make: Callable[[Path], None]
) -> Path:
    """The folder ``cache_base()/kind/key`` once ``ready`` says it is complete; if it is not,
    ``make(tmp)`` builds into an empty temporary folder beside it, under a lock (concurrent
    first uses build once), which is then renamed into place whole: a build is complete or
    absent, never half-written, and a failed one leaves nothing behind."""
    out = cache_base() / kind / key
    if ready(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(out):
            return out
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
        try:
            make(tmp)
            if out.exists():
                shutil.rmtree(out)
            os.rename(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def build_runtime(t: TorchLayout, out: Path, werror: bool = False) -> None:
    """Builds the whole capture runtime for torch `t` into the empty folder `out`, with
    ``-Wall -Wextra`` (and ``-Werror`` if asked)."""
    _Builder(t, _check_layout(t), out, werror).build_all()


def ensure_runtime(python: str | None = None, quiet: bool = False) -> Path:
    """Return the folder holding the built runtime for `python`'s torch, building it if needed."""
    t = find_torch(python)
    key = build_key(t)

    def make(tmp: Path) -> None:
        if not quiet:
            print(
                f"cachalot capture: compiling the simulated CUDA runtime for torch {t.version} "
                f"(once, into {cache_root() / key}) …",
                file=sys.stderr,
                flush=True,
            )
        build_runtime(t, tmp)

    return cached(
        cache_root().name,
        key,
        lambda d: all((d / lib).exists() for lib in runtime_libraries(d)),
        make,
    )


class _Builder:
    def __init__(self, t: TorchLayout, cuda: CudaBuild, out: Path, werror: bool = False):
        self.t, self.out, self.major = t, out, cuda.major
        self.libs = libraries(cuda.major)
        crt = cuda.crt
        self.warn = [*WARNINGS, *(["-Werror"] if werror else [])]
        self.cxx, self.cc = _tool("g++", "CXX"), _tool("gcc", "CC")
        self.nm = _tool("nm")
        shim = out / "crt_shim"
        shim.mkdir()
        (shim / "crt").symlink_to(crt / "crt")
        # runtime/ first: its cuda_fp16.h, cuda_bf16.h and cuda_fp8.h stand in for NVIDIA's
        # (whose inline code needs CCCL's nv/target, which CUDA 12 wheels leave out).
        self.inc = [
            f"-I{RUNTIME_SRC}",
            *(f"-I{d}" for d in t.include_dirs),
            "-idirafter",
            str(shim),
        ]
        self.cxxflags = ["-O2", "-fPIC", "-std=c++17", *self.warn]

    def _nm(self, args: list[str], path: Path) -> list[str]:
        p = subprocess.run([self.nm, *args, str(path)], capture_output=True, text=True, check=False)
        return p.stdout.splitlines() if p.returncode == 0 else []

    def torch_imports(self, soname: str, unversioned: str | None = None) -> set[str]:
        """Names torch's libraries import from `soname` (e.g. cublasSgemm_v2@libcublas.so.13),
        and, with `unversioned` (a regex), the names matching it that carry no version (NCCL
        exports none, so torch's imports of it name no library)."""
        names = set()
        libs = list((self.t.torch_dir / "lib").glob("*.so")) + list(self.t.torch_dir.glob("_C*.so"))
        for so in libs:
            for line in self._nm(["-D", "--undefined-only"], so):
                sym = line.split()[-1]
                if sym.endswith("@" + soname):
                    names.add(sym.split("@")[0])
                elif unversioned and "@" not in sym and re.match(unversioned, sym):
                    names.add(sym)
        return names

    def real_exports(self, path: Path) -> set[str]:
        if not path.exists():
            return set()
        return {
            f[2].split("@")[0]
            for f in (ln.split() for ln in self._nm(["-D", "--defined-only"], path))
            if len(f) == 3 and f[1] == "T"
        }

    def defined(self, obj: Path) -> set[str]:
        return {
            f[2]
            for f in (ln.split() for ln in self._nm(["--defined-only"], obj))
            if len(f) == 3 and f[1] == "T"
        }

    def compile(
        self, src: Path, obj: Path, cxx: bool = True, include: list[str] | None = None
    ) -> None:
        if cxx:
            inc = [*self.inc, *(include or [])]
            cmd = [self.cxx, *self.cxxflags, *inc, "-c", str(src), "-o", str(obj)]
        else:
            cmd = [self.cc, "-O2", "-fPIC", *self.warn, "-c", str(src), "-o", str(obj)]
        run(cmd, f"compiling {src.name}")

    def version_script(self, node: str, pattern: str) -> Path:
        p = self.out / f"{node}.map"
        p.write_text(f"{node} {{\n  global:\n    {pattern};\n  local:\n    *;\n}};\n")
        return p

    def stubs(
        self,
        tag: str,
        soname: str,
        real: Path,
        regex: str,
        objs: list[Path],
        ret: int,
        unversioned: bool = False,
    ) -> Path:
        """Stubs returning `ret` for every name torch imports or the real library exports
        and none of `objs` defines."""
        imports = self.torch_imports(soname, regex if unversioned else None)
        want = {n for n in imports | self.real_exports(real) if re.search(regex, n)}
        missing = sorted(want - set().union(*map(self.defined, objs)))
        body = [
            f"// generated: entry points of {soname} with no hand-written fake.",
            f'#define FK_LIB "{tag}"',
            '#include "fk_common.h"',
            'extern "C" {',
        ]
        body += [
            f'__attribute__((visibility("default"))) int {s}(void) '
            f'{{ static fk::Counter* c = fk::counter("{s}", true); fk::count(c); return {ret}; }}'
            for s in missing
        ]
        body.append("}")
        src = self.out / f"{tag}_stubs.cpp"
        src.write_text("\n".join(body) + "\n")
        stub_obj = self.out / f"{tag}_stubs.o"
        self.compile(src, stub_obj)
        return stub_obj

    def link(self, name: str, objs: list[Path], extra: list[str]) -> None:
        run(
            [
                self.cxx,
                "-shared",
                "-o",
                str(self.out / name),
                *map(str, objs),
                f"-Wl,-soname,{name}",
                *extra,
                "-lpthread",
            ],
            f"linking {name}",
        )

    def build_all(self) -> None:
        o, s, t = self.out, RUNTIME_SRC, self.t
        cudart = self.libs[0]
        # 1. libcudart.so.N, with the driver API c10 reaches via cudaGetDriverEntryPointByVersion.
        cudart_objs = []
        for part in LIBRARY_PARTS["cudart"]:
            self.compile(s / f"{part}.cpp", o / f"{part}.o")
            cudart_objs.append(o / f"{part}.o")
        want = {
            n
            for n in self.torch_imports(cudart) | self.real_exports(t.library(cudart))
            if re.match(r"(cuda|__cuda)", n)
        }
        missing = sorted(want - set().union(*map(self.defined, cudart_objs)))
        stub_src = o / "cudart_stubs.c"
        stub_src.write_text(
            "int fakecuda_unimplemented(const char* name);\n"
            + "".join(
                f'int {n}(void) {{ return fakecuda_unimplemented("{n}"); }}\n' for n in missing
            )
        )
        self.compile(stub_src, o / "cudart_stubs.o", cxx=False)
        # exported under the version node torch's imports name (cudaMalloc@libcudart.so.N)
        vs = self.version_script(cudart, "cuda*;\n    __cuda*;\n    fakecuda_*")
        self.link(
            cudart,
            [*cudart_objs, o / "cudart_stubs.o"],
            [f"-Wl,--version-script={vs}", "-Wl,-z,defs"],
        )
        # 2. libnvidia-ml.so.1: c10 dlopens it, expandable segments need it.
        run(
            [
                self.cc,
                "-O2",
                "-fPIC",
                "-shared",
                *self.warn,
                "-o",
                str(o / "libnvidia-ml.so.1"),
                str(s / "fake_nvml.c"),
                "-Wl,-soname,libnvidia-ml.so.1",
            ],
            "building libnvidia-ml.so.1",
        )
        # 3. libcuda.so.1: trampolines into the fake cudart, for the driver symbols torch links
        # and every driver entry point the fake implements (cachalot's CUDA device calls them).
        wanted = {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuGetErrorName"}
        wanted |= driver_entry_points()
        for so in (t.torch_dir / "lib").glob("*.so"):
            dyn = subprocess.run(
                [_tool("readelf"), "-d", str(so)], capture_output=True, text=True, check=False
            ).stdout
            if "[libcuda.so.1]" in dyn:
                for line in self._nm(["-D", "--undefined-only"], so):
                    name = line.split()[-1].split("@")[0]
                    if re.match(r"cu[A-Z]", name):
                        wanted.add(name)
        names = sorted(wanted)
        tramp = [
            "void* fakecuda_driver_symbol(const char* name);",
            "static int fk_not_supported(void) { return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }",
        ]
        for n in names:
            tramp.append(f'__attribute__((visibility("hidden"))) void* fkp_{n};')
            tramp.append(
                f'__asm__(".globl {n}\\n.type {n},@function\\n{n}:\\n  jmp *fkp_{n}(%rip)\\n.size {n},.-{n}\\n");'
            )
        tramp.append("__attribute__((constructor)) static void fk_init(void) {")
        tramp += [
            f'  fkp_{n} = fakecuda_driver_symbol("{n}"); if (!fkp_{n}) fkp_{n} = (void*)&fk_not_supported;'
            for n in names
        ]
        tramp.append("}")
        (o / "fake_libcuda.c").write_text("\n".join(tramp) + "\n")
        run(
            [
                self.cc,
                "-O2",
                "-fPIC",
                "-shared",
                *self.warn,
                "-o",
                str(o / "libcuda.so.1"),
                str(o / "fake_libcuda.c"),
                "-Wl,-soname,libcuda.so.1",
                str(o / cudart),
                "-Wl,-rpath,$ORIGIN",
            ],
            "building libcuda.so.1",
        )
        # 4-6. cuBLASLt, cuBLAS, cuDNN: hand-written fakes plus generated stubs.
        cublas_lt, cublas = f"libcublasLt.so.{self.major}", f"libcublas.so.{self.major}"
        for tag, soname, regex, ret in (
            ("cublasLt", cublas_lt, r"^cublasLt", 0),
            ("cublas", cublas, r"^cublas[^L]|^cublasL[^t]", 0),
            ("cudnn", "libcudnn.so.9", r"^cudnn", 3000),  # NOT_SUPPORTED
        ):
            real = t.library(soname)
            objs = []
            for part in LIBRARY_PARTS.get(tag, [f"fake_{tag}"]):
                self.compile(s / f"{part}.cpp", o / f"{part}.o")
                objs.append(o / f"{part}.o")
            stub_obj = self.stubs(tag, soname, real, regex, objs, ret)
            vs = self.version_script(soname, f"{tag}*")
            self.link(
                soname,
                [*objs, stub_obj],
                [f"-Wl,--version-script={vs}", "-Wl,-Bsymbolic", "-Wl,-z,defs"],
            )
        # 7. libnccl.so.2: communicators with no network, collectives that complete at once
        # (fake_nccl.cpp), over the fake cudart; NCCL's exports carry no symbol version.
        self.compile(s / "fake_nccl.cpp", o / "fake_nccl.o", include=[f"-I{t.nccl_include}"])
        stub_obj = self.stubs(
            "nccl",
            "libnccl.so.2",
            t.library("libnccl.so.2"),
            r"^nccl",
            [o / "fake_nccl.o"],
            5,  # ncclInvalidUsage
            unversioned=True,
        )
        vs = o / "libnccl.map"  # an anonymous version node: exported as unversioned as NCCL's
        vs.write_text("{\n  global:\n    nccl*;\n  local:\n    *;\n};\n")
        self.link(
            "libnccl.so.2",
            [o / "fake_nccl.o", stub_obj],
            [
                f"-Wl,--version-script={vs}",
                "-Wl,-Bsymbolic",
                str(o / cudart),
                "-Wl,-rpath,$ORIGIN",
                "-Wl,-z,defs",
            ],
        )
        for f in o.glob("*.o"):
            f.unlink()


def main() -> int:
    # run as a script: the package this file belongs to, for its native module where built
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    try:
        print(ensure_runtime())
    except BuildError as e:
        print(f"cachalot capture: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
