#!/usr/bin/env bash
# Sets up, outside the clone, what the Python tests need, reusing whatever is already there:
#   a virtual environment ($CACHALOT_VENV, default ~/.cache/cachalot-torch) with maturin,
#   pytest, pytest-xdist, ruff and mypy (its stubtest checks cachalot/_native.pyi);
#   with --torch: torch 2.15.0 (+ transformers, torchvision) in it, the fake GPU stack of
#   ../shared/fakegpu built into $FAKEGPU_BUILD (default ~/.cache/cachalot-fakegpu), and torch
#   2.9.1 (PyPI's CUDA 12.8 wheel) in a second venv ($CACHALOT_TORCH29_VENV, default
#   ~/.cache/cachalot-torch29), whose own parser judges `tune --torch 2.9`, and torch 2.13.0
#   (CUDA 13.0) in a third ($CACHALOT_TORCH213_VENV, default ~/.cache/cachalot-torch213): capture,
#   use() and record run on each (tests/python/test_versions_*.py); accelerate and DeepSpeed,
#   the launchers the multi-GPU capture tests run.
# Where torch cannot be installed it says why and goes on: those tests then skip, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${CACHALOT_VENV:-$HOME/.cache/cachalot-torch}"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
  python3 -m venv "$VENV" || { echo "python_env: cannot create a venv at $VENV" >&2; exit 1; }
fi
# pytest 9.2 keeps a test's node id where pytest-xdist 3.8 no longer changes it, so `--dist
# loadgroup` ignores every xdist_group (each worker then runs a module's shared workload again):
# below 9.2 until xdist follows (tests/python/test_xdist_groups.py fails when groups are lost).
PYTEST_SPEC="pytest>=8,<9.2"
"$PY" -c 'import pytest, sys; sys.exit(tuple(map(int, pytest.__version__.split(".")[:2])) >= (9, 2))' \
  2>/dev/null || "$PY" -m pip install -q "$PYTEST_SPEC" || echo "python_env: cannot install $PYTEST_SPEC" >&2
missing=()
for tool in maturin pytest ruff mypy; do
  "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$tool') is None)" \
    2>/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  "$PY" -m pip install -q "${missing[@]}" || { echo "python_env: cannot install ${missing[*]}" >&2; exit 1; }
fi
# pytest-xdist: scripts/test.sh runs pytest on every core (without it, on one)
"$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('xdist') is None)" 2>/dev/null \
  || "$PY" -m pip install -q pytest-xdist || echo "python_env: cannot install pytest-xdist; pytest runs on one core" >&2
if [[ "${1:-}" == "--torch" ]]; then
  if ! "$PY" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.15.0")' 2>/dev/null; then
    echo "python_env: installing torch 2.15.0, transformers, torchvision into $VENV (once)"
    "$PY" -m pip install -q torch==2.15.0 transformers torchvision \
      || echo "python_env: SKIP torch: could not install torch==2.15.0; the PyTorch tests will skip"
  fi
  FAKEGPU="${CACHALOT_FAKEGPU:-../shared/fakegpu}"
  B="${FAKEGPU_BUILD:-$HOME/.cache/cachalot-fakegpu}"
  if [[ ! -e "$B/libcudart.so.13" ]]; then
    if [[ -x "$FAKEGPU/build.sh" ]] && "$PY" -c 'import torch' 2>/dev/null; then
      PYTHON="$PY" FAKEGPU_BUILD="$B" "$FAKEGPU/build.sh" >/dev/null \
        || echo "python_env: SKIP fake GPU: $FAKEGPU/build.sh failed; the PyTorch tests will skip"
    else
      echo "python_env: SKIP fake GPU: no $FAKEGPU/build.sh or no torch; the PyTorch tests will skip"
    fi
  fi
fi
if [[ "${1:-}" == "--torch" ]] && "$PY" -c 'import torch' 2>/dev/null; then
  # the launchers multi-GPU capture is tested under (tests/python/test_capture_ranks.py)
  for pkg in accelerate deepspeed; do
    "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$pkg') is None)" 2>/dev/null \
      || { "$PY" -m pip install -q setuptools wheel && "$PY" -m pip install -q --no-build-isolation "$pkg"; } \
      || echo "python_env: SKIP $pkg: could not install it; its capture tests will skip"
  done
fi
# The older releases capture and the version tests run on (tests/python/test_versions_*.py,
# test_torch_versions.py), each in its own venv: VERSION VENV-VARIABLE DEFAULT-FOLDER.
older_torch() {
  local version="$1" venv="$2"
  if ! "$venv/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$version'))" 2>/dev/null; then
    echo "python_env: installing torch $version into $venv (once)"
    { [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"; } && "$venv/bin/python" -m pip install -q "torch==$version" \
      || echo "python_env: SKIP torch $version: could not install it into $venv; its version tests will skip"
  fi
}
if [[ "${1:-}" == "--torch" ]]; then
  older_torch 2.9.1 "${CACHALOT_TORCH29_VENV:-$HOME/.cache/cachalot-torch29}"   # CUDA 12.8 wheels
  older_torch 2.13.0 "${CACHALOT_TORCH213_VENV:-$HOME/.cache/cachalot-torch213}" # CUDA 13.0 wheels
fi
echo "$PY"
