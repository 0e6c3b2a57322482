#!/usr/bin/env python3
"""Generate tests/fixtures/snapshots/own/: small torch 2.15 snapshots of the kinds users bring,
recorded by real PyTorch on the fake GPU (../shared/fakegpu), for the advisor's tests.

- mlp-full.pickle.gz: a small MLP trained for 3 steps on a large device, history from the
  start (the complete workload);
- mlp-oom.pickle.gz: the same program on a device too small for it
  (FAKE_CUDA_CAPACITY=CAP_OOM): the first out-of-memory raises, the program catches it and
  dumps the snapshot, as an OOM handler does;
- mlp-ring.pickle.gz: the same program on the large device with a ring buffer
  (_record_memory_history(max_entries=RING)): the window starts mid-run;
- mlp-oom-expandable.pickle.gz: as mlp-oom, under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.

Run from the repository root:

    PYTHON=~/.cache/cachalot-torch/bin/python ../shared/fakegpu/run.sh scripts/gen_snapshot_fixtures.py

(or with `--child MODE OUT` it runs one program; the parent starts one child per file, each with
its own device size and configuration.)
"""

import sys
from pathlib import Path

import snapshot_fixture

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "snapshots" / "own"
CAP_OOM = "160M"
RING = 300


def program(mode: str, out: str) -> None:
    import torch

    torch.manual_seed(0)
    kw = {"max_entries": RING} if mode == "ring" else {}
    # No stack frames: they make the files large and the advisor does not read them.
    torch.cuda.memory._record_memory_history(context=None, **kw)
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    try:
        for step in range(3):
            x = torch.randn(512 * (step + 1), 1024, device=dev)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, loss
    except torch.OutOfMemoryError as e:
        print(f"{mode}: out of memory: {str(e)[:120]}", file=sys.stderr)
    torch.cuda.synchronize()
    snapshot_fixture.dump_gz(torch, Path(out))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        program(sys.argv[2], sys.argv[3])
        return
    OUT.mkdir(parents=True, exist_ok=True)
    runs = [
        ("full", "mlp-full.pickle.gz", {"FAKE_CUDA_CAPACITY": "80G"}),
        ("oom", "mlp-oom.pickle.gz", {"FAKE_CUDA_CAPACITY": CAP_OOM}),
        (
            "oom",
            "mlp-oom-expandable.pickle.gz",
            {"FAKE_CUDA_CAPACITY": CAP_OOM, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        ),
        ("ring", "mlp-ring.pickle.gz", {"FAKE_CUDA_CAPACITY": "80G"}),
    ]
    for mode, name, env in runs:
        snapshot_fixture.run_child(__file__, [mode, str(OUT / name)], env)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
