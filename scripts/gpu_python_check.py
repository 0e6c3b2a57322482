#!/usr/bin/env python3
"""The Python package on a real GPU (step 6 of scripts/gpu_check.sh).

    gpu_python_check.py oom        cachalot.torch.use(): an allocation larger than the GPU raises
                                   torch.OutOfMemoryError with torch's message, the next one works
    gpu_python_check.py native-oom the same request under torch's own allocator (for the message)
    gpu_python_check.py record DIR `cachalot record` on a short training run; the snapshot, the
                                   printed `cachalot tune` command, and that command run
    gpu_python_check.py workload DIR  tests/python/torch_workload.py (test_torch.py's workload)
                                   under torch's allocator and under cachalot.torch.use(
                                   device="cuda"), PYTORCH_CUDA_ALLOC_CONF as set: every
                                   memory_stats key equal after every step, the same OOMs
                                   (messages up to the free memory they quote), recovery; and
                                   cachalot's device-call log (CACHALOT_DEVICE_LOG) agrees with
                                   its statistics

Prints one JSON line per case; exit 0 when the case held.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def oom(native: bool) -> int:
    import torch

    if not native:
        import cachalot.torch as ct

        ct.use(device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    out = {"case": "native-oom" if native else "oom", "raised": None}
    try:
        x = torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda")
        out["data_ptr"] = x.data_ptr()
    except torch.OutOfMemoryError as e:
        out["raised"] = type(e).__name__
        out["message"] = str(e).split(" GPU 0 has")[0]
    after = torch.empty(1 << 20, device="cuda")
    out["recovered"] = after.data_ptr() != 0
    del keep
    print(json.dumps(out))
    return 0 if out["raised"] == "OutOfMemoryError" and out["recovered"] else 1


def record(folder: str) -> int:
    snap = os.path.join(folder, "snap.pickle")
    train = [
        sys.executable,
        os.path.join(HERE, "gpu_train.py"),
        "--allocator",
        "torch",
        "--steps",
        "3",
    ]
    p = subprocess.run(
        [sys.executable, "-m", "cachalot", "record", "-o", snap, "--", *train],
        capture_output=True,
        text=True,
        check=False,
    )
    tune = [
        line.strip() for line in p.stdout.splitlines() if line.strip().startswith("cachalot tune ")
    ]
    out = {
        "case": "record",
        "exit": p.returncode,
        "snapshot": os.path.exists(snap),
        "tune_command": tune[0] if tune else None,
    }
    if tune:
        t = subprocess.run(
            [sys.executable, "-m", "cachalot", *tune[0].split()[1:], "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        out["tune_exit"] = t.returncode
        out["tune_said"] = next(
            (x for x in t.stdout.splitlines() if "PYTORCH_CUDA_ALLOC_CONF" in x or "unset" in x),
            t.stderr[-200:],
        )
    print(json.dumps(out))
    ok = p.returncode == 0 and out["snapshot"] and tune and out.get("tune_exit") in (0, 1)
    return 0 if ok else 1


def workload(folder: str) -> int:
    """test_torch.py's comparison on the GPU. The call-log comparison with cachalot's simulated
    device (test_torch.py, on the simulated driver) cannot run here: the workload's kernels
    would run on the GPU at the simulated device's addresses. What the log can show here is
    that it holds the device calls the statistics count."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
    from torch_workload import call_rows, differences, log_against_stats

    results = {}
    for allocator in ("torch", "cachalot"):
        out = os.path.join(folder, f"workload-{allocator}.json")
        log = os.path.join(folder, f"workload-{allocator}-calls.csv")
        env = dict(os.environ)
        if allocator == "cachalot":
            if os.path.exists(log):
                os.unlink(log)  # our own file from an earlier run; the library never overwrites
            env["CACHALOT_DEVICE_LOG"] = log
        script = os.path.join(os.path.dirname(HERE), "tests", "python", "torch_workload.py")
        p = subprocess.run(
            [sys.executable, script, "--allocator", allocator, "--device", "cuda", out],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            print(json.dumps({"case": "workload", "failed": allocator, "stderr": p.stderr[-2000:]}))
            return 1
        with open(out) as f:
            results[allocator] = json.load(f)
    diff = differences(results["cachalot"], results["torch"], oom_message_until=" GPU 0 has")
    with open(os.path.join(folder, "workload-cachalot-calls.csv")) as f:
        log = f.read().splitlines()
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if conf == "":  # the caching backend's calls are what its statistics count
        disagrees = log_against_stats(log, results["cachalot"]["steps"][-1]["stats"])
        diff += [f"device-call log: {disagrees}"] if disagrees else []
    steps, calls = len(results["torch"]["steps"]), len(call_rows(log))
    print(json.dumps({"case": "workload", "steps": steps, "calls": calls, "differences": diff}))
    return 0 if not diff else 1


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "record":
        sys.exit(record(sys.argv[2]))
    if case == "workload":
        sys.exit(workload(sys.argv[2]))
    sys.exit(oom(native=case == "native-oom"))
