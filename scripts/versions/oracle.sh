#!/usr/bin/env bash
# Builds torch X.Y's own CUDA caching allocator on the simulated device: the judge of what an
# older release decides, as shared/oracle is for 2.15 (same replayer, same fake runtime, same
# trace format and JSON). Usage:
#
#   scripts/versions/oracle.sh X.Y            # build once (one torch wheel, ~0.3-0.9 GB download)
#   scripts/versions/oracle.sh X.Y --check    # exit 0 when built and up to date
#   scripts/versions/oracle.sh --ci           # CI: every release not yet built (see below)
#   ~/.cache/cachalot-oracle-X.Y/oracle [shared/oracle options] TRACE.csv
#
# What it does: `pip download --no-deps` of torch X.Y's wheel (the patch release in
# releases.sh), keeping only libc10.so, libc10_cuda.so and the c10 headers; the CUDA runtime
# headers of the major that wheel links (nvidia-cuda-runtime-cu12 at the version the wheel
# requires, or nvidia-cuda-runtime 13.2 for CUDA 13 wheels) and the two crt headers of
# nvidia-cuda-crt 13.2. The wheels are deleted after unpacking. The sources are shared/oracle's
# (read-only there), adapted by oracle_compat.py to the release's c10 and CUDA major; the fake
# libcudart gets that major's soname and symbol version (libcudart.so.12 for CUDA 12 wheels).
#
# The cache is CACHE_DIR/cachalot-oracle-X.Y with CACHE_DIR = $CACHALOT_ORACLE_VERSIONS or
# ~/.cache; nothing is written elsewhere (never under shared/). Environment: PYTHON (a python
# with pip; default ~/.cache/cachalot-torch/bin/python, else python3), ORACLE_PIP_ARGS (extra
# pip download arguments, e.g. "--no-index --find-links DIR" for local wheels), CXX, CC, OPT,
# CACHALOT_SHARED (default: shared/ beside the checkout).
#
# Exit status: 0 built (or already built), 3 when a download fails (the registry cannot be
# reached, the release is gone: not this script's fault), 1 on any other failure (a tool is
# missing, the sources do not compile, the smoke test fails). `--ci` builds every release of
# releases.sh in turn (the newest only where shared/oracle is not set up, as that one is the
# newest's judge), prints one "ci: SKIP" line for a release whose download failed and exits 1
# only if a build failed otherwise; with everything built it does nothing and says so.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PROG="oracle.sh"
say() { printf '%s\n' "$*"; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
# shellcheck source=releases.sh
source "$HERE/releases.sh"

[[ $# -ge 1 ]] || die "usage: $PROG X.Y [--check] | --ci   (X.Y one of: ${VERSIONS[*]%.*})"
if [[ "$1" == --ci ]]; then
  SHARED="${CACHALOT_SHARED:-$ROOT/../shared}"
  if [[ ! -f "$SHARED/oracle/src/oracle/torch_oracle.cpp" ]]; then
    say "ci: SKIP torch oracles: no oracle sources at $SHARED/oracle/src (set CACHALOT_SHARED); their tests skip"
    exit 0
  fi
  failed=0
  for full in "${VERSIONS[@]}"; do
    line="${full%.*}"
    if [[ "$full" == "${VERSIONS[-1]}" ]] && "$SHARED/oracle/setup.sh" --check >/dev/null 2>&1; then
      continue  # shared/oracle is this release's judge
    fi
    "$0" "$line" --check 2>/dev/null && continue
    t=$SECONDS
    rc=0
    "$0" "$line" >/dev/null || rc=$?
    case $rc in
      0) say "ci: torch $line oracle built in $((SECONDS - t)) s" ;;
      3) say "ci: SKIP torch $line oracle: its wheels could not be downloaded (pip's message above); its tests skip" ;;
      *) say "ci: torch $line oracle: the build failed (above)"; failed=1 ;;
    esac
  done
  say "ci: torch oracles: $(for full in "${VERSIONS[@]}"; do "$0" "${full%.*}" --check 2>/dev/null && printf '%s ' "${full%.*}"; done)built"
  exit "$failed"
fi
LINE="$1"
MODE="${2:-build}"
FULL="$(release_of "$LINE")"
[[ -n "$FULL" ]] || die "torch $LINE: not a release line this table covers; give one of: $(printf '%s ' "${VERSIONS[@]%.*}")"
[[ "$MODE" == build || "$MODE" == --check ]] || die "unknown option $MODE (only --check)"
SHARED="${CACHALOT_SHARED:-$ROOT/../shared}"
SRC="$SHARED/oracle/src"
[[ -f "$SRC/oracle/torch_oracle.cpp" ]] || die "no oracle sources at $SRC (set CACHALOT_SHARED)"
CACHE="$(readlink -m "${CACHALOT_ORACLE_VERSIONS:-${HOME:?}/.cache}/cachalot-oracle-$LINE")"
CRT_VERSION=13.2.86
CUDART13_VERSION=13.2.86

# What a build depends on: the shared sources, the compat rewrites, this script.
build_key() {
  { (cd "$SRC" && sha256sum oracle/torch_oracle.cpp fake_cudart/*); sha256sum "$HERE/oracle_compat.py" "$HERE/oracle.sh"; } |
    sed 's/ .*\// /' | sha256sum | cut -c1-16
}
KEY="$(build_key)"

if [[ "$MODE" == --check ]]; then
  if [[ -x "$CACHE/bin/torch_oracle" && "$(cat "$CACHE/bin/.build-key" 2>/dev/null)" == "$KEY" ]]; then
    exit 0
  fi
  say "torch $LINE oracle: not built (or older than its sources) in $CACHE; run: $0 $LINE" >&2
  exit 1
fi
if [[ -x "$CACHE/bin/torch_oracle" && "$(cat "$CACHE/bin/.build-key" 2>/dev/null)" == "$KEY" ]]; then
  say "torch $LINE oracle: already built in $CACHE; nothing to do."
  exit 0
fi

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  PYTHON=python3
  [[ -x "$HOME/.cache/cachalot-torch/bin/python" ]] && PYTHON="$HOME/.cache/cachalot-torch/bin/python"
fi
CXX="${CXX:-g++}"
CC="${CC:-gcc}"
OPT="${OPT:--O2}"
for t in "$CXX" "$CC" nm sha256sum; do
  command -v "$t" >/dev/null 2>&1 || die "'$t' not found (apt-get install g++ binutils coreutils)"
done
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' does not work (set PYTHON=...)"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
PIP_TAGS=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

DL="$CACHE/.download"
NEW="$CACHE/.new"
rm -rf "$DL" "$NEW"
trap 'rm -rf "$DL" "$NEW"' EXIT
mkdir -p "$DL" "$NEW"
fetch() {  # pip download --no-deps of one requirement into $DL
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download -q --no-deps --no-cache-dir --disable-pip-version-check "${PIP_TAGS[@]}" \
    -d "$DL" "$1" ${ORACLE_PIP_ARGS:-} || {
    printf '%s: error: pip download %s failed (see pip above)\n' "$PROG" "$1" >&2
    exit 3
  }
}
unpack() {  # WHEEL DEST PREFIX=>DIR...: the members under each PREFIX, into DEST/DIR
  "$PYTHON" - "$@" <<'PY'
import os, shutil, sys, zipfile
wheel, dest, pairs = sys.argv[1], sys.argv[2], [p.split("=>", 1) for p in sys.argv[3:]]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        n = info.filename
        if n.endswith("/") or ".." in n.split("/"):
            continue
        for src, dst in pairs:
            if n == src or (src.endswith("/") and n.startswith(src)):
                out = os.path.join(dest, dst, n[len(src):]) if src.endswith("/") else os.path.join(dest, dst)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with z.open(info) as fi, open(out, "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                break
PY
}

if [[ "$(sed -n 1p "$CACHE/MANIFEST" 2>/dev/null)" == "torch $FULL "* && -f "$CACHE/cudart_real_exports.txt" ]]; then
  say "torch $LINE oracle: torch $FULL's files already in $CACHE (no download)"
  DEPS="$CACHE"
  MAJOR="$(sed -n 's/^torch [^ ]* (CUDA \([0-9]*\)).*/\1/p' "$CACHE/MANIFEST")"
else
DEPS="$NEW"
say "torch $LINE oracle: downloading torch $FULL (no dependencies) into $CACHE"
fetch "torch==$FULL"
TORCH_WHL="$(ls "$DL"/torch-"$FULL"*.whl | head -n1)"
unpack "$TORCH_WHL" "$NEW" "torch/lib/libc10.so=>torch/lib/libc10.so" \
  "torch/lib/libc10_cuda.so=>torch/lib/libc10_cuda.so" "torch/include/c10/=>torch/include/c10/" \
  "torch/include/torch/headeronly/=>torch/include/torch/headeronly/" \
  "torch-$FULL.dist-info/METADATA=>torch/METADATA"
rm -f "$TORCH_WHL"
[[ -f "$NEW/torch/lib/libc10_cuda.so" ]] || die "torch $FULL's wheel has no torch/lib/libc10_cuda.so"
MAJOR="$(nm -D --undefined-only "$NEW/torch/lib/libc10_cuda.so" | sed -n 's/.*@libcudart\.so\.\([0-9]*\)$/\1/p' | sort -u | tr '\n' ' ' | xargs)"
[[ "$MAJOR" == 12 || "$MAJOR" == 13 ]] || die "torch $FULL's libc10_cuda.so links libcudart.so.${MAJOR:-?}; only CUDA 12 and 13 are known"
if [[ "$MAJOR" == 12 ]]; then
  RT_VERSION="$(sed -n 's/^Requires-Dist: nvidia-cuda-runtime-cu12 *(\{0,1\}==\([0-9.]*\).*/\1/p' "$NEW/torch/METADATA" | sed -n 1p)"
  [[ -n "$RT_VERSION" ]] || die "torch $FULL's METADATA names no nvidia-cuda-runtime-cu12 version"
  RT_REQ="nvidia-cuda-runtime-cu12==$RT_VERSION"
  RT_DIR="nvidia/cuda_runtime"
else
  RT_VERSION="$CUDART13_VERSION"
  RT_REQ="nvidia-cuda-runtime==$RT_VERSION"
  RT_DIR="nvidia/cu13"
fi
say "torch $LINE oracle: CUDA $MAJOR wheel; downloading $RT_REQ and nvidia-cuda-crt==$CRT_VERSION (headers)"
fetch "$RT_REQ"
fetch "nvidia-cuda-crt==$CRT_VERSION"
unpack "$(ls "$DL"/nvidia_cuda_runtime*.whl | head -n1)" "$NEW" "$RT_DIR/include/=>cuda/include/" \
  "$RT_DIR/lib/libcudart.so.$MAJOR=>.tmp/libcudart.so.$MAJOR"
unpack "$(ls "$DL"/nvidia_cuda_crt*.whl | head -n1)" "$NEW" \
  "nvidia/cu13/include/crt/host_defines.h=>cuda/include/crt/host_defines.h" \
  "nvidia/cu13/include/crt/host_config.h=>cuda/include/crt/host_config.h"
nm -D --defined-only "$NEW/.tmp/libcudart.so.$MAJOR" | awk '$2=="T" {print $3}' | sed 's/@.*//' | sort -u \
  > "$NEW/cudart_real_exports.txt"
rm -rf "$NEW/.tmp" "$DL"
printf 'torch %s (CUDA %s), %s, nvidia-cuda-crt %s\n' "$FULL" "$MAJOR" "$RT_REQ" "$CRT_VERSION" > "$NEW/MANIFEST"
fi

say "torch $LINE oracle: building (sources: $SRC, adapted by oracle_compat.py)"
B="$NEW/build"
mkdir -p "$B" "$NEW/bin"
"$PYTHON" "$HERE/oracle_compat.py" "$SRC" "$B/src" "$MAJOR"
INC=(-I"$DEPS/torch/include" -I"$DEPS/cuda/include" -I"$B/src/fake_cudart")
# Wheels before 2.7 were built with the old C++ string ABI: the replayer must match it.
ABI=()
# (c10's own symbols tell; the libstdc++ parts linked into libc10 carry __cxx11 either way)
[[ "$(nm -D --defined-only "$DEPS/torch/lib/libc10.so" | grep '3c10' | grep -c __cxx11 || true)" -gt 0 ]] ||
  ABI=(-D_GLIBCXX_USE_CXX11_ABI=0)
"$CXX" $OPT -fPIC -std=c++17 -w "${INC[@]}" -c "$B/src/fake_cudart/fake_cudart.cpp" -o "$B/fake_cudart.o" &
pid=$!
# torch's CUDA wheels are compiled with PYTORCH_C10_DRIVER_API_SUPPORTED; without it the inline
# CUDAAllocatorConfig::expandable_segments() of older headers (2.4's) warns "not supported on
# this platform" and reports false to the replayer while the library's allocator expands.
"$CXX" $OPT -std=c++20 -w "${ABI[@]}" -DPYTORCH_C10_DRIVER_API_SUPPORTED "${INC[@]}" \
  -c "$B/src/oracle/torch_oracle.cpp" -o "$B/torch_oracle.o" ||
  die "torch_oracle.cpp does not compile against torch $FULL's headers (compiler output above)"
wait "$pid" || die "fake_cudart.cpp does not compile against CUDA $MAJOR's headers (compiler output above)"
# Runtime entry points c10 imports or the real runtime exports that the fake lacks: stubs
# returning cudaErrorNotSupported, as shared/oracle/setup.sh makes them.
{
  for so in "$DEPS/torch/lib/libc10.so" "$DEPS/torch/lib/libc10_cuda.so"; do
    nm -D --undefined-only "$so" | awk '{print $NF}' | grep "@libcudart\.so\.$MAJOR\$" | sed 's/@.*//' || true
  done
  cat "$DEPS/cudart_real_exports.txt"
} | grep -E '^(cuda|__cuda)' | sort -u > "$B/wanted.txt"
nm --defined-only "$B/fake_cudart.o" | awk '$2=="T" {print $3}' | grep -E '^(cuda|__cuda)' | sort -u > "$B/have.txt"
{
  echo "int fakecuda_unimplemented(const char* name);"
  comm -23 "$B/wanted.txt" "$B/have.txt" | while read -r s; do
    echo "int $s(void) { return fakecuda_unimplemented(\"$s\"); }"
  done
} > "$B/stubs.c"
"$CC" $OPT -fPIC -w -c "$B/stubs.c" -o "$B/stubs.o"
"$CXX" -shared -o "$NEW/bin/libcudart.so.$MAJOR" "$B/fake_cudart.o" "$B/stubs.o" \
  -Wl,-soname,"libcudart.so.$MAJOR" -Wl,--version-script="$B/src/fake_cudart/libcudart.map" -Wl,-z,defs -lpthread
"$CC" $OPT -fPIC -shared -w -o "$NEW/bin/libnvidia-ml.so.1" "$B/src/fake_cudart/fake_nvml.c" -Wl,-soname,libnvidia-ml.so.1
# Up to 2.7, c10 reaches the driver API (expandable segments, and its out-of-memory path) by
# dlopen("libcuda.so.1") and dlsym of each cu* name it lists, not through the runtime's
# cudaGetDriverEntryPoint: a fake libcuda.so.1 forwards each of those names to the fake
# runtime's entry point. Every such driver function takes at most six integer or pointer
# arguments and returns an int, so a six-register forwarder passes them through unchanged on
# x86-64 (System V: rdi, rsi, rdx, rcx, r8, r9). c10 opens it with RTLD_NOLOAD (in torch,
# the runtime has loaded it by then), so the replayer links it.
if grep -q 'libcuda\.so\.1' "$DEPS/torch/lib/libc10_cuda.so"; then
  {
    echo "/* generated by scripts/versions/oracle.sh: libcuda.so.1 over the fake runtime */"
    echo "typedef unsigned long w;"
    echo "int cudaGetDriverEntryPoint(const char*, void**, unsigned long long, void*);"
    echo "static int fwd(const char* n, void** slot) {"
    echo "  if (!*slot && cudaGetDriverEntryPoint(n, slot, 0, 0) != 0) *slot = 0;"
    echo "  return *slot != 0;"
    echo "}"
    strings "$DEPS/torch/lib/libc10_cuda.so" | grep -E '^cu[A-Z][A-Za-z0-9_]+$' | sort -u | while read -r f; do
      echo "int $f(w a, w b, w c, w d, w e, w f) { static void* p; if (!fwd(\"$f\", &p)) return 801;"
      echo "  return ((int (*)(w, w, w, w, w, w))p)(a, b, c, d, e, f); }"
    done
  } > "$B/libcuda.c"
  "$CC" $OPT -fPIC -shared -w -o "$NEW/bin/libcuda.so.1" "$B/libcuda.c" -Wl,-soname,libcuda.so.1 \
    "$NEW/bin/libcudart.so.$MAJOR"
fi
LIBCUDA=()
[[ -f "$NEW/bin/libcuda.so.1" ]] && LIBCUDA=("$NEW/bin/libcuda.so.1")
"$CXX" $OPT -o "$NEW/bin/torch_oracle" "$B/torch_oracle.o" \
  -Wl,--no-as-needed "$NEW/bin/libcudart.so.$MAJOR" "$NEW/bin/libnvidia-ml.so.1" "${LIBCUDA[@]}" \
  -L"$DEPS/torch/lib" -lc10_cuda -lc10 -Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN:$ORIGIN/../torch/lib' -lpthread
rm -rf "$B"
cat > "$NEW/oracle" <<'SH'
#!/usr/bin/env bash
# torch's own allocator of this release on the simulated device (scripts/versions/oracle.sh).
HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
export LD_LIBRARY_PATH="$HERE/bin:$HERE/torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$HERE/bin/torch_oracle" "$@"
SH
chmod +x "$NEW/oracle"
smoke="$NEW/smoke.csv"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,1,0\n1,1,deallocate,0x1,1,0\n' > "$smoke"
out="$(env -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF LD_LIBRARY_PATH="$NEW/bin:$DEPS/torch/lib" \
       "$NEW/bin/torch_oracle" "$smoke" 2>&1)" ||
  die "the new torch $LINE oracle does not run: $out"
[[ "$out" == *'"reserved_bytes":2097152'* ]] || die "torch $LINE oracle smoke test: unexpected result $out"
rm -f "$smoke"
printf '%s\n' "$KEY" > "$NEW/bin/.build-key"
# Swap in the finished build; a failed or interrupted run leaves the old one in place.
if [[ "$DEPS" == "$NEW" ]]; then
  rm -rf "$CACHE/bin" "$CACHE/torch" "$CACHE/cuda"
  mv "$NEW/torch" "$NEW/cuda" "$NEW/cudart_real_exports.txt" "$CACHE/"
  mv "$NEW/MANIFEST" "$CACHE/MANIFEST"
fi
rm -rf "$CACHE/bin"
mv "$NEW/bin" "$NEW/oracle" "$CACHE/"
rm -rf "$NEW"
trap - EXIT
say "torch $LINE oracle: built ($(du -sh "$CACHE" | cut -f1)); run: $CACHE/oracle TRACE.csv"
