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

# The libraries the capture preloads, in the order they must be loaded.
LIBRARIES = (
    "libcudart.so.13",
    "libnvidia-ml.so.1",
    "libcuda.so.1",
    "libcublasLt.so.13",
    "libcublas.so.13",
    "libcudnn.so.9",
    "libnccl.so.2",
)

# Torch wheels whose CUDA sonames the runtime provides. Other builds (CUDA 12
# wheels, ROCm) link other sonames and are refused with this list.
SUPPORTED = "torch 2.15 CUDA 13 wheels (e.g. 2.15.0+cu132); tested: 2.15.0+cu132"


class BuildError(RuntimeError):
    """The runtime could not be built; the message says what is missing."""


@dataclass(frozen=True)
class TorchLayout:
    """Where the user's torch and the NVIDIA headers it was built with live."""

    site_packages: Path
    version: str

    @property
    def torch_dir(self) -> Path:
        return self.site_packages / "torch"

    @property
    def cuda_include(self) -> Path:
        return self.site_packages / "nvidia" / "cu13" / "include"

    @property
    def cuda_lib(self) -> Path:
        return self.site_packages / "nvidia" / "cu13" / "lib"

    @property
    def cudnn_include(self) -> Path:
        return self.site_packages / "nvidia" / "cudnn" / "include"

    @property
    def cudnn_lib(self) -> Path:
        return self.site_packages / "nvidia" / "cudnn" / "lib"

    @property
    def nccl_include(self) -> Path:
        return self.site_packages / "nvidia" / "nccl" / "include"

    @property
    def nccl_lib(self) -> Path:
        return self.site_packages / "nvidia" / "nccl" / "lib"


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


def _check_layout(t: TorchLayout) -> Path:
    """Check that torch links the sonames we fake; return the crt/ include dir."""
    cuda_so = t.torch_dir / "lib" / "libtorch_cuda.so"
    if not cuda_so.exists():
        raise BuildError(
            f"torch {t.version} at {t.torch_dir} has no libtorch_cuda.so (a CPU-only build): "
            f"capture needs a CUDA build of torch, {SUPPORTED}"
        )
    needed = run([_tool("readelf"), "-d", str(cuda_so)], "readelf")
    if "libcudart.so.13" not in needed:
        sonames = (
            ", ".join(sorted(set(re.findall(r"\[(libcudart[^\]]*)\]", needed)))) or "no libcudart"
        )
        raise BuildError(
            f"torch {t.version} links {sonames}; cachalot capture supports {SUPPORTED}"
        )
    for f in (
        t.cuda_include / "cuda_runtime_api.h",
        t.cuda_include / "cuda.h",
        t.cuda_include / "cublas_api.h",
        t.cuda_include / "cublasLt.h",
        t.cudnn_include / "cudnn.h",
        t.nccl_include / "nccl.h",
    ):
        if not f.exists():
            raise BuildError(
                f"missing {f}: the NVIDIA wheels torch {t.version} depends on are not complete"
            )
    crt = crt_include(t.site_packages)
    if crt is None:
        raise BuildError(CRT_MISSING)
    return crt


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
    crt = _check_layout(t)
    _Builder(t, crt, out, werror).build_all()


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
        cache_root().name, key, lambda d: all((d / lib).exists() for lib in LIBRARIES), make
    )


class _Builder:
    def __init__(self, t: TorchLayout, crt: Path, out: Path, werror: bool = False):
        self.t, self.out = t, out
        self.warn = [*WARNINGS, *(["-Werror"] if werror else [])]
        self.cxx, self.cc = _tool("g++", "CXX"), _tool("gcc", "CC")
        self.nm = _tool("nm")
        shim = out / "crt_shim"
        shim.mkdir()
        (shim / "crt").symlink_to(crt / "crt")
        self.inc = [
            f"-I{t.cuda_include}",
            f"-I{t.cudnn_include}",
            "-idirafter",
            str(shim),
            f"-I{RUNTIME_SRC}",
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
        # 1. libcudart.so.13, with the driver API c10 reaches via cudaGetDriverEntryPointByVersion.
        cudart_objs = []
        for part in LIBRARY_PARTS["cudart"]:
            self.compile(s / f"{part}.cpp", o / f"{part}.o")
            cudart_objs.append(o / f"{part}.o")
        want = {
            n
            for n in self.torch_imports("libcudart.so.13")
            | self.real_exports(t.cuda_lib / "libcudart.so.13")
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
        self.link(
            "libcudart.so.13",
            [*cudart_objs, o / "cudart_stubs.o"],
            [f"-Wl,--version-script={s / 'libcudart.map'}", "-Wl,-z,defs"],
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
                str(o / "libcudart.so.13"),
                "-Wl,-rpath,$ORIGIN",
            ],
            "building libcuda.so.1",
        )
        # 4-6. cuBLASLt, cuBLAS, cuDNN: hand-written fakes plus generated stubs.
        for tag, soname, real, regex, ret in (
            ("cublasLt", "libcublasLt.so.13", t.cuda_lib / "libcublasLt.so.13", r"^cublasLt", 0),
            (
                "cublas",
                "libcublas.so.13",
                t.cuda_lib / "libcublas.so.13",
                r"^cublas[^L]|^cublasL[^t]",
                0,
            ),
            (
                "cudnn",
                "libcudnn.so.9",
                t.cudnn_lib / "libcudnn.so.9",
                r"^cudnn",
                3000,
            ),  # NOT_SUPPORTED
        ):
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
            t.nccl_lib / "libnccl.so.2",
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
                str(o / "libcudart.so.13"),
                "-Wl,-rpath,$ORIGIN",
                "-Wl,-z,defs",
            ],
        )
        for f in o.glob("*.o"):
            f.unlink()


def main() -> int:
    try:
        print(ensure_runtime())
    except BuildError as e:
        print(f"cachalot capture: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
