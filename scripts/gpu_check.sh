#!/usr/bin/env bash
# gpu_check.sh - check cachalot on a real GPU in about 6 minutes, and compare it with torch's
# own allocator on a small PyTorch training loop.
#
#   scripts/gpu_check.sh                    on the GPU machine
#   scripts/gpu_check.sh --prepare [DIR]    on any build machine: release-build what the check
#                                           runs into DIR (default target/gpu-bundle), so that
#                                           the GPU machine needs no Rust toolchain
#
# Steps (each bounded by `timeout`, the whole run by GPU_CHECK_BUDGET_S):
#   1. the machine: GPU (nvidia-smi), python3, torch with CUDA; what is missing is said
#   2. the CUDA tests (crates/cuda/tests/gpu.rs, among them driver misuse as errors naming the
#      call and the code) with CACHALOT_REQUIRE_GPU=1: a skip is a failure; the same file's run
#      on the simulated driver is CI's (skipped here)
#      then cudarc: the kernel example (crates/api/examples/cudarc_kernel.rs: a PTX kernel on a
#      cachalot buffer, every element checked) and the typed-buffer tests
#      (crates/api/tests/cudarc_types.rs); CI runs those tests on the simulated driver too
#   3. the Rust example (crates/api/examples/training_loop.rs) on GPU 0 under each configuration
#   4. scripts/gpu_train.py twice per configuration, same PYTORCH_CUDA_ALLOC_CONF: torch's
#      allocator, then cachalot's library through torch.cuda.memory.CUDAPluggableAllocator
#   5. a table: peak reserved, device allocations, step time and final loss for both
#   6. the Python package (from the bundle, the checkout, or built with maturin): an OOM under
#      cachalot.torch raises torch.OutOfMemoryError with torch's message and the next
#      allocation works (scripts/gpu_python_check.py oom, beside native-oom); `cachalot
#      record` on a short training run writes a snapshot and prints a `cachalot tune` command
#      that runs
#   7. the PyTorch tests' workload (tests/python/torch_workload.py, what test_torch.py runs on
#      the simulated driver) under each configuration: cachalot.torch.use(device="cuda")
#      against torch's own allocator, every memory_stats key after every step, the OOMs and
#      the recovery, and cachalot's device-call log against its statistics
#      (scripts/gpu_python_check.py workload)
#
# Not run here, and why: the comparison of the CUDA device's call log with the simulated
# device's (the workload's kernels cannot run on the GPU at simulated addresses; CI runs it on
# the simulated driver), and the C library's u64 test with CACHALOT_DEVICE=cuda (its streams
# are plain numbers, which the real driver would take for pointers; CI runs it on the
# simulated driver).
#
# Where the binaries come from: $CACHALOT_BUNDLE (or target/gpu-bundle) if it holds them,
# else `cargo` builds them here (release; about a minute on 16 cores).
#
# Settings (environment):
#   PYTORCH_CUDA_ALLOC_CONF  if set, the only configuration compared; otherwise three:
#                            "" (defaults), "expandable_segments:True", "backend:cudaMallocAsync"
#   GPU_CHECK_STEPS          measured training steps per run (default 30, after 5 warm-up)
#   GPU_CHECK_BUDGET_S       stop starting new steps after this many seconds (default 360)
#   PYTHON                   the Python with torch (default python3)
#   GPU_CHECK_FORCE=1        run even where no GPU is visible (to test this script)
#   OUT                      where results go (default target/gpu-check-out): results.jsonl,
#                            summary.txt and one log per step
#
# Exit status: 0 everything passed; 1 a check failed; 2 this machine cannot run the check
# (no GPU, no torch with CUDA, no binaries and no cargo), with the reason on stderr.

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${CACHALOT_BUNDLE:-$ROOT/target/gpu-bundle}"
PY="${PYTHON:-python3}"
STEPS="${GPU_CHECK_STEPS:-30}"
BUDGET="${GPU_CHECK_BUDGET_S:-360}"
START=$SECONDS

say() { printf '[gpu_check %3ds] %s\n' "$((SECONDS - START))" "$*"; }
die() { say "CANNOT RUN: $*" >&2; exit 2; }

# --- build a bundle (on a build machine) ---------------------------------------------------
if [[ "${1:-}" == "--prepare" ]]; then
  DEST="${2:-$BUNDLE}"
  command -v cargo >/dev/null || die "--prepare needs cargo"
  mkdir -p "$DEST"
  cd "$ROOT"
  cargo build --release -p cachalot-capi || exit 1
  cargo build --release -p cachalot --example training_loop --example cudarc_kernel || exit 1
  # test_binary PACKAGE TEST: the path of that integration test's executable, built here.
  test_binary() {
    cargo test --release -p "$1" --test "$2" --no-run --message-format=json | "$PY" -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
  }
  tests_bin=$(test_binary cachalot-cuda gpu) && [[ -n "$tests_bin" ]] || exit 1
  cudarc_bin=$(test_binary cachalot cudarc_types) && [[ -n "$cudarc_bin" ]] || exit 1
  # The Python package, unpacked (PYTHONPATH=$DEST/python): needs maturin (scripts/python_env.sh).
  MATURIN="${MATURIN:-$HOME/.cache/cachalot-torch/bin/maturin}"
  if [[ -x "$MATURIN" ]] && "$MATURIN" build --release -o "$DEST/wheels"; then
    rm -rf "$DEST/python" && "$PY" -m zipfile -e "$(ls -t "$DEST"/wheels/cachalot-*.whl | head -n 1)" "$DEST/python"
  else
    say "no maturin at $MATURIN: the bundle has no Python package (step 6 will build or skip)"
  fi
  cp target/release/libcachalot_capi.so "$DEST/"
  cp target/release/examples/training_loop "$DEST/"
  cp "$tests_bin" "$DEST/cuda-gpu-tests"
  cp target/release/examples/cudarc_kernel "$DEST/"
  cp "$cudarc_bin" "$DEST/cudarc-tests"
  command -v strip >/dev/null && strip --strip-debug "$DEST"/libcachalot_capi.so "$DEST"/training_loop \
    "$DEST"/cuda-gpu-tests "$DEST"/cudarc_kernel "$DEST"/cudarc-tests
  say "bundle ready in $DEST:"; ls -l "$DEST"
  exit 0
fi

OUT="${OUT:-$ROOT/target/gpu-check-out}"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"; : > "$RESULTS"
SUMMARY="$OUT/summary.txt"; : > "$SUMMARY"
FAILED=0
note() { say "$*"; echo "$*" >> "$SUMMARY"; }
fail() { note "FAIL: $*"; FAILED=1; }
left() { echo $((BUDGET - (SECONDS - START))); }
# run NAME SECONDS CMD...: bounded by the step limit and the budget, logged to $OUT/NAME.log
run() {
  local name=$1 limit=$2; shift 2
  local remaining; remaining=$(left)
  if (( remaining < 15 )); then note "SKIPPED $name: time budget (${BUDGET}s) used up"; return 3; fi
  (( limit > remaining )) && limit=$remaining
  say "$name (at most ${limit}s) ..."
  if command -v timeout >/dev/null; then
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  else
    "$@" > "$OUT/$name.log" 2>&1
  fi
  local rc=$?
  (( rc == 124 || rc == 137 )) && say "$name: timed out after ${limit}s"
  return $rc
}

# --- 1. the machine -------------------------------------------------------------------------
note "cachalot GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s"
if command -v nvidia-smi >/dev/null; then
  note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
else
  note "nvidia-smi not found (continuing: the driver library may still be there)"
fi
if ! command -v nvidia-smi >/dev/null && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
  [[ "${GPU_CHECK_FORCE:-0}" == 1 ]] || die "no GPU here: neither nvidia-smi nor libcuda.so (GPU_CHECK_FORCE=1 runs anyway)"
  note "no GPU here; continuing because GPU_CHECK_FORCE=1 (the GPU steps will fail)"
fi
TORCH_OK=1
if ! command -v "$PY" >/dev/null; then
  note "no $PY: the PyTorch comparison will not run"; TORCH_OK=0
elif ! TORCH_INFO=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), hasattr(torch.cuda.memory, "CUDAPluggableAllocator"))' 2>&1); then
  note "torch cannot be imported by $PY (nothing is installed by this script): ${TORCH_INFO##*$'\n'}"; TORCH_OK=0
else
  read -r tv tcuda tavail tplug <<< "$TORCH_INFO"
  note "torch $tv (CUDA $tcuda), cuda available: $tavail, CUDAPluggableAllocator: $tplug"
  [[ "$tavail" == "True" && "$tplug" == "True" ]] || { note "torch cannot use a GPU allocator here"; TORCH_OK=0; }
fi

# --- binaries -------------------------------------------------------------------------------
LIB="" ; EXAMPLE="" ; TESTS="" ; KERNEL="" ; CUDARC_TESTS=""
if [[ -f "$BUNDLE/libcachalot_capi.so" && -x "$BUNDLE/training_loop" && -x "$BUNDLE/cuda-gpu-tests" ]]; then
  LIB="$BUNDLE/libcachalot_capi.so"; EXAMPLE="$BUNDLE/training_loop"; TESTS="$BUNDLE/cuda-gpu-tests"
  [[ -x "$BUNDLE/cudarc_kernel" ]] && KERNEL="$BUNDLE/cudarc_kernel"
  [[ -x "$BUNDLE/cudarc-tests" ]] && CUDARC_TESTS="$BUNDLE/cudarc-tests"
  note "binaries: prebuilt bundle $BUNDLE"
elif command -v cargo >/dev/null; then
  if run build 240 bash -c "cd '$ROOT' && cargo build --release -p cachalot-capi && cargo build --release -p cachalot --example training_loop --example cudarc_kernel"; then
    LIB="$ROOT/target/release/libcachalot_capi.so"; EXAMPLE="$ROOT/target/release/examples/training_loop"
    KERNEL="$ROOT/target/release/examples/cudarc_kernel"
    note "binaries: built with cargo"
  else
    fail "cargo build (see $OUT/build.log)"
  fi
else
  die "no bundle in $BUNDLE and no cargo: run 'scripts/gpu_check.sh --prepare' on a build machine and carry target/gpu-bundle"
fi

# --- 2. the CUDA tests ------------------------------------------------------------------------
if [[ -n "$TESTS" ]]; then
  run cuda-tests 120 env CACHALOT_REQUIRE_GPU=1 "$TESTS" --test-threads=1 --nocapture \
    --skip every_test_on_the_simulated_driver
else
  run cuda-tests 200 bash -c "cd '$ROOT' && CACHALOT_REQUIRE_GPU=1 cargo test --release -p cachalot-cuda --test gpu -- --test-threads=1 --nocapture --skip every_test_on_the_simulated_driver"
fi
rc=$?
if (( rc == 0 )); then note "CUDA tests: $(grep -E '^test result' "$OUT/cuda-tests.log" | tail -n 1)"
elif (( rc != 3 )); then fail "CUDA tests (exit $rc; see $OUT/cuda-tests.log)"; grep -E 'panicked|SKIPPED|FAILED' "$OUT/cuda-tests.log" | head -n 10; fi

# --- 2b. cudarc: the kernel example and the typed-buffer tests ---------------------------------
if [[ -n "$KERNEL" ]]; then
  run cudarc-kernel 60 "$KERNEL"; rc=$?
  if (( rc == 0 )) && grep -q ": 0 of [0-9]* elements wrong" "$OUT/cudarc-kernel.log"; then
    note "cudarc kernel: $(grep '^kernel' "$OUT/cudarc-kernel.log")"
  elif (( rc == 0 )); then fail "cudarc kernel example did not run on a GPU: $(head -n 1 "$OUT/cudarc-kernel.log")"
  elif (( rc != 3 )); then fail "cudarc kernel example (exit $rc): $(tail -n 2 "$OUT/cudarc-kernel.log" | tr '\n' ' ')"; fi
fi
if [[ -n "$CUDARC_TESTS" ]]; then
  run cudarc-tests 60 "$CUDARC_TESTS" --test-threads=1 --nocapture --skip the_tests_above_on_the_simulated_driver
else
  run cudarc-tests 200 bash -c "cd '$ROOT' && cargo test --release -p cachalot --test cudarc_types -- --test-threads=1 --nocapture --skip the_tests_above_on_the_simulated_driver"
fi
rc=$?
if (( rc == 0 )) && ! grep -q SKIPPED "$OUT/cudarc-tests.log"; then note "cudarc tests: $(grep -E '^test result' "$OUT/cudarc-tests.log" | tail -n 1)"
elif (( rc == 0 )); then fail "cudarc tests skipped: $(grep -m1 SKIPPED "$OUT/cudarc-tests.log")"
elif (( rc != 3 )); then fail "cudarc tests (exit $rc; see $OUT/cudarc-tests.log)"; fi

# --- configurations -----------------------------------------------------------------------------
if [[ -n "${PYTORCH_CUDA_ALLOC_CONF+set}" ]]; then
  CONFS=("$PYTORCH_CUDA_ALLOC_CONF")
else
  CONFS=("" "expandable_segments:True" "backend:cudaMallocAsync")
fi

# --- 3. the Rust example ----------------------------------------------------------------------------
if [[ -n "$EXAMPLE" ]]; then
  i=0
  for conf in "${CONFS[@]}"; do
    i=$((i + 1))
    run "rust-example-$i" 60 env PYTORCH_CUDA_ALLOC_CONF="$conf" "$EXAMPLE"; rc=$?
    if (( rc == 0 )) && grep -q "wrote and read back" "$OUT/rust-example-$i.log"; then
      note "Rust example [${conf:-defaults}]: $(grep '^backend' "$OUT/rust-example-$i.log")"
    elif (( rc == 0 )); then
      fail "Rust example [${conf:-defaults}] found no GPU and ran on the simulator: $(grep -m1 'running on' "$OUT/rust-example-$i.log")"
    elif (( rc != 3 )); then
      fail "Rust example [${conf:-defaults}] (exit $rc, see $OUT/rust-example-$i.log)"
    fi
  done
fi

# --- 4. PyTorch: torch's allocator vs cachalot's library ------------------------------------------
if (( TORCH_OK )) && [[ -n "$LIB" ]]; then
  i=0
  for conf in "${CONFS[@]}"; do
    i=$((i + 1))
    for which in torch cachalot; do
      run "train-$i-$which" 90 env PYTORCH_CUDA_ALLOC_CONF="$conf" \
        "$PY" "$ROOT/scripts/gpu_train.py" --allocator "$which" --lib "$LIB" --steps "$STEPS" \
        --json "$OUT/train-$i-$which.json"
      rc=$?
      if (( rc == 0 )); then cat "$OUT/train-$i-$which.json" >> "$RESULTS"
      elif (( rc != 3 )); then fail "training [$which, ${conf:-defaults}] (exit $rc): $(tail -n 3 "$OUT/train-$i-$which.log" | tr '\n' ' ')"; fi
    done
  done
  # --- 5. the comparison ----------------------------------------------------------------------------
  "$PY" - "$RESULTS" <<'EOF' | tee -a "$SUMMARY"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    print("no training run finished"); sys.exit(0)
mib = lambda b: f"{b / 2**20:,.0f} MiB"
print(f"\n{'configuration':<26} {'allocator':<26} {'peak reserved':>14} {'driver peak':>12} "
      f"{'device allocs':>13} {'step ms (p50/p90)':>18} {'final loss':>10}")
for r in rows:
    print(f"{(r['PYTORCH_CUDA_ALLOC_CONF'] or 'defaults'):<26} {r['backend']:<26} "
          f"{mib(r['peak_reserved']):>14} {mib(r['driver_peak_used']):>12} "
          f"{r['num_device_alloc']:>13} {r['step_ms_median']:>8.1f} /{r['step_ms_p90']:>7.1f} "
          f"{r['final_loss']:>10.4f}")
by_conf = {}
for r in rows:
    by_conf.setdefault(r["PYTORCH_CUDA_ALLOC_CONF"], {})[r["allocator"]] = r
bad = 0
for conf, pair in by_conf.items():
    if len(pair) < 2:
        continue
    t, c = pair["torch"], pair["cachalot"]
    same_loss = abs(t["final_loss"] - c["final_loss"]) <= 1e-3 * max(1.0, abs(t["final_loss"]))
    print(f"[{conf or 'defaults'}] peak reserved cachalot/torch = "
          f"{c['peak_reserved'] / max(t['peak_reserved'], 1):.3f}, step time ratio = "
          f"{c['step_ms_median'] / t['step_ms_median']:.2f}, same final loss: {same_loss}")
    bad |= not same_loss
print("MISMATCH: the two allocators trained to different losses" if bad else "")
sys.exit(1 if bad else 0)
EOF
  (( $? == 0 )) || fail "the final losses differ between the allocators"
else
  note "PyTorch comparison not run (see above)"
fi

# --- 6. the Python package: OOM raises, record -----------------------------------------------
PYPKG=""
if [[ -d "$BUNDLE/python/cachalot" ]]; then
  PYPKG="$BUNDLE/python"
elif [[ -f "$ROOT/python/cachalot/_native.abi3.so" ]]; then
  PYPKG="$ROOT/python"
elif command -v maturin >/dev/null && command -v cargo >/dev/null; then
  if run wheel 240 bash -c "cd '$ROOT' && maturin build --release -o target/wheels && '$PY' -m zipfile -e \$(ls -t target/wheels/cachalot-*.whl | head -n 1) target/gpu-python"; then
    PYPKG="$ROOT/target/gpu-python"
  else
    fail "building the wheel (see $OUT/wheel.log)"
  fi
fi
if (( TORCH_OK )) && [[ -n "$PYPKG" ]]; then
  for case in native-oom oom; do
    run "python-$case" 90 env PYTHONPATH="$PYPKG" "$PY" "$ROOT/scripts/gpu_python_check.py" "$case"; rc=$?
    if (( rc == 0 )); then note "Python $case: $(tail -n 1 "$OUT/python-$case.log")"
    elif (( rc != 3 )); then fail "Python $case (exit $rc): $(tail -n 3 "$OUT/python-$case.log" | tr '\n' ' ')"; fi
  done
  "$PY" - "$OUT/python-native-oom.log" "$OUT/python-oom.log" <<'EOF' | tee -a "$SUMMARY"
import json, sys
try:
    t, c = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:])
except Exception as e:  # a case did not finish: said above
    print(f"OOM message comparison not possible: {e}"); sys.exit(0)
print("OOM message (up to the device numbers) identical to torch's:", t.get("message") == c.get("message"))
EOF
  mkdir -p "$OUT/record"
  run python-record 150 env PYTHONPATH="$PYPKG" "$PY" "$ROOT/scripts/gpu_python_check.py" record "$OUT/record"; rc=$?
  if (( rc == 0 )); then note "cachalot record: $(tail -n 1 "$OUT/python-record.log")"
  elif (( rc != 3 )); then fail "cachalot record (exit $rc): $(tail -n 3 "$OUT/python-record.log" | tr '\n' ' ')"; fi
else
  note "Python package checks not run (no usable torch, or no package: run --prepare with maturin)"
fi

# --- 7. the PyTorch tests' workload: cachalot's CUDA device against torch's allocator ---------
if (( TORCH_OK )) && [[ -n "$PYPKG" ]]; then
  i=0
  for conf in "${CONFS[@]}"; do
    i=$((i + 1))
    mkdir -p "$OUT/workload-$i"
    run "workload-$i" 120 env PYTHONPATH="$PYPKG" PYTORCH_CUDA_ALLOC_CONF="$conf" \
      "$PY" "$ROOT/scripts/gpu_python_check.py" workload "$OUT/workload-$i"; rc=$?
    if (( rc == 0 )); then note "PyTorch workload [${conf:-defaults}]: $(tail -n 1 "$OUT/workload-$i.log")"
    elif (( rc != 3 )); then fail "PyTorch workload [${conf:-defaults}] (exit $rc): $(tail -n 3 "$OUT/workload-$i.log" | tr '\n' ' ')"; fi
  done
else
  note "PyTorch workload not run (no usable torch, or no Python package)"
fi

note "results: $RESULTS; logs: $OUT; total $((SECONDS - START))s"
if (( FAILED )); then note "GPU CHECK FAILED"; exit 1; fi
if (( ! TORCH_OK )); then note "GPU CHECK INCOMPLETE: no usable torch"; exit 2; fi
note "GPU CHECK PASSED"
