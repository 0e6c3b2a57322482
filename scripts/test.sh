#!/usr/bin/env bash
# All tests, Rust and Python (the README's test command; .ci/run calls it):
#   1. every Rust test in the ci profile (release less LTO, see Cargo.toml and
#      docs/development.md; the wheel below reuses every crate it compiles): cargo nextest
#      where it is installed, else cargo test;
#   2. the Python package: the wheel built with maturin, its native module put in place
#      under python/cachalot/, ruff, then pytest tests/python on every core (pytest-xdist);
#   3. the wheel installed in a fresh venv with no Rust toolchain on PATH, running
#      `cachalot tune --capacity 24G`.
# The venv with maturin/pytest/ruff is set up outside the clone (scripts/python_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# each part's wall time, printed as it ends (docs/development.md's table is made of these)
t0=$SECONDS
took() { echo "test.sh: $1: $((SECONDS - t0)) s"; t0=$SECONDS; }
# cargo-nextest runs the test binaries side by side (cargo test runs them one after another, so
# one core idles while a long binary such as torch_versions.rs finishes): 124 s instead of 213 s
# on 2 cores. Each test is its own process there; a passing test's output is shown at the end so
# that its SKIPPED lines stay in the log. The doc tests are cargo test's alone. Without nextest,
# cargo test runs them all.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --cargo-profile ci --no-fail-fast \
    --status-level fail --final-status-level slow --success-output final
  cargo test --workspace --profile ci --doc
  took "cargo nextest run + cargo test --doc, --profile ci (build and run)"
else
  cargo test --workspace --profile ci
  took "cargo test --workspace --profile ci (build and run)"
fi

PY="$(scripts/python_env.sh | tail -n 1)"
BIN="$(dirname "$PY")"
rm -f target/wheels/cachalot-*.whl
"$BIN/maturin" build --profile ci -o target/wheels
WHEEL="$(ls target/wheels/cachalot-*.whl)"
echo "wheel: $WHEEL ($(du -k "$WHEEL" | cut -f1) KiB)"
"$PY" -m zipfile -e "$WHEEL" target/wheel-unpacked
cp target/wheel-unpacked/cachalot/_native.abi3.so python/cachalot/_native.abi3.so
took "the wheel (maturin build --profile ci)"

"$BIN/ruff" check python tests/python scripts
"$BIN/ruff" format --check python tests/python scripts
took "ruff"
# pytest on every core (pytest-xdist, from python_env.sh; CACHALOT_TEST_WORKERS overrides, 1 runs
# in this process): tests that share a module's workload stay on one worker (loadgroup, the
# groups are set in tests/python/conftest.py), the slow ones start first.
WORKERS="${CACHALOT_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
XDIST=()
if [[ "$WORKERS" -gt 1 ]] && "$PY" -c 'import xdist' 2>/dev/null; then
  XDIST=(-n "$WORKERS" --dist loadgroup)
fi
status=0
PYTHONPATH="$PWD/python" "$PY" -m pytest tests/python -ra --durations=15 "${XDIST[@]}" || status=$?
# 5: no test collected (cannot happen with tests/python present, but is not a failure).
took "pytest tests/python (${XDIST[1]:-1} workers)"
if [[ $status -ne 0 && $status -ne 5 ]]; then exit $status; fi

FRESH="$(mktemp -d)"
trap 'rm -rf "$FRESH"' EXIT
python3 -m venv "$FRESH/venv"
"$FRESH/venv/bin/pip" install -q --no-index "$WHEEL"
env -i HOME="$HOME" PATH="$FRESH/venv/bin:/usr/bin:/bin" bash -c '
  if command -v cargo >/dev/null || command -v rustc >/dev/null; then
    echo "fresh venv: a Rust toolchain is on PATH"; exit 1
  fi
  cd / && cachalot tune --capacity 24G -q'
echo "fresh venv: the wheel installs and cachalot tune --capacity 24G runs without Rust"
took "the wheel in a fresh venv"
