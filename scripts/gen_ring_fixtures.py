#!/usr/bin/env python3
"""Generate ring-buffer snapshots for the reconstruction check (issue #9), recorded by real
PyTorch on the fake GPU (../shared/fakegpu) with _record_memory_history(max_entries=N):

- tf-ring.pickle.gz: a 4-layer transformer encoder, AdamW, 6 steps of varying batch and
  length, the last 400 entries;
- cnn-ring.pickle.gz: a small CNN, SGD with momentum, 5 steps of varying batch, a side stream
  and an empty_cache after the third step, the last 200 entries.

Run from the repository root:

    PYTHON=~/.cache/cachalot-torch/bin/python ../shared/fakegpu/run.sh scripts/gen_ring_fixtures.py
"""

import sys
from pathlib import Path

import snapshot_fixture

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "snapshots" / "own"


def transformer(torch, dev):
    layer = torch.nn.TransformerEncoderLayer(
        d_model=512, nhead=8, dim_feedforward=2048, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, num_layers=4).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(6):
        x = torch.randn(8 + 4 * (step % 3), 128 * (1 + step % 4), 512, device=dev)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss


def cnn(torch, dev):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(128, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    side = torch.cuda.Stream()
    for step in range(5):
        x = torch.randn(16 * (1 + step % 3), 3, 64, 64, device=dev)
        with torch.cuda.stream(side):
            y = torch.randn(1 << 20, device=dev)
        loss = model(x).logsumexp(1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        del x, loss, y
        if step == 2:
            torch.cuda.empty_cache()


RUNS = {"tf-ring.pickle.gz": (transformer, 400), "cnn-ring.pickle.gz": (cnn, 200)}


def child(name: str) -> None:
    import torch

    torch.manual_seed(0)
    run, entries = RUNS[name]
    torch.cuda.memory._record_memory_history(context=None, max_entries=entries)
    run(torch, "cuda")
    torch.cuda.synchronize()
    snapshot_fixture.dump_gz(torch, OUT / name)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        snapshot_fixture.run_child(__file__, [name], {"FAKE_CUDA_CAPACITY": "80G"})
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
