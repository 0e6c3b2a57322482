"""One workload run with torch's own allocator or with cachalot's (`--allocator`), recording
torch's `memory_stats()` after every step, the out-of-memory errors (type and message) and
whether the next allocation works. test_torch.py runs it both ways on the fake GPU and compares.

    torch_workload.py --allocator torch|cachalot [--device sim|cuda] OUT.json

--device is cachalot's device (`cachalot.torch.use(device=...)`): its simulated GPU, or the
CUDA driver (on the simulated driver of the capture runtime in the tests). The allocator's
configuration comes from PYTORCH_CUDA_ALLOC_CONF, read by torch and cachalot alike.
"""

import argparse
import json
import os
import threading
from pathlib import Path

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--allocator", choices=["torch", "cachalot"], required=True)
ap.add_argument("--device", choices=["sim", "cuda"], default="sim")
ap.add_argument("out")
args = ap.parse_args()

if args.allocator == "cachalot":
    import cachalot.torch as ct

    ct.use(device=args.device)
    stats = ct.memory_stats
else:
    stats = torch.cuda.memory_stats

steps = []
ooms = []


def step(name):
    torch.cuda.synchronize()
    steps.append({"step": name, "stats": dict(stats())})


def expect_oom(name, fn):
    try:
        fn()
    except torch.OutOfMemoryError as e:
        ooms.append({"step": name, "type": type(e).__name__, "message": str(e)})
    else:
        ooms.append({"step": name, "type": None, "message": "no exception"})
    # Recovery: the next allocation works.
    t = torch.empty(4096, device="cuda")
    ooms[-1]["recovered"] = t.data_ptr() != 0
    del t
    step(name)


MiB = 1 << 20
keep = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (512, 4096, 1 * MiB, 3 * MiB)]
step("small and large")
keep += [torch.empty(n * MiB, dtype=torch.uint8, device="cuda") for n in (7, 15, 25, 100)]
del keep[1], keep[3]
step("frees")

model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))
model = model.cuda()
opt = torch.optim.AdamW(model.parameters())
for i in range(2):
    model(torch.randn(64, 512, device="cuda")).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step(f"train step {i}")

side = torch.cuda.Stream()
with torch.cuda.stream(side):
    on_side = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
shared = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")
shared.record_stream(side)
del shared
step("record_stream")
with torch.cuda.stream(side):
    del on_side
    again = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
del again
step("second stream")

del keep
torch.cuda.empty_cache()
step("empty_cache")

expect_oom("too big", lambda: torch.empty(1 << 40, dtype=torch.uint8, device="cuda"))
torch.cuda.set_per_process_memory_fraction(0.25)
expect_oom("memory fraction", lambda: torch.empty(30 << 30, dtype=torch.uint8, device="cuda"))
torch.cuda.set_per_process_memory_fraction(1.0)


def worker(n):
    for i in range(20):
        t = torch.empty((i % 5 + 1) * MiB + n, dtype=torch.uint8, device="cuda")
        del t


# How many device calls the runtime has logged before the threads (their order depends on the
# interleaving), where it logs them (FAKE_CUDA_LOG of the capture runtime).
log = os.environ.get("FAKE_CUDA_LOG")
calls_before_threads = len(Path(log).read_text().splitlines()) if log else None
threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
step("threads")
del model, opt
torch.cuda.empty_cache()
step("end")

with open(args.out, "w") as f:
    json.dump({"steps": steps, "ooms": ooms, "calls_before_threads": calls_before_threads}, f)
