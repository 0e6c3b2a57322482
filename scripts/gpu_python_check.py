#!/usr/bin/env python3
"""The Python package on a real GPU (step 6 of scripts/gpu_check.sh).

    gpu_python_check.py oom        cachalot.torch.use(): an allocation larger than the GPU raises
                                   torch.OutOfMemoryError with torch's message, the next one works
    gpu_python_check.py native-oom the same request under torch's own allocator (for the message)
    gpu_python_check.py record DIR `cachalot record` on a short training run; the snapshot, the
                                   printed `cachalot tune` command, and that command run

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


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "record":
        sys.exit(record(sys.argv[2]))
    sys.exit(oom(native=case == "native-oom"))
