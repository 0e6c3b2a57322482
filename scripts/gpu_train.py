#!/usr/bin/env python3
"""One small PyTorch training run on GPU 0, with torch's own CUDA allocator or with cachalot's
library, reporting what the allocator did. Used by scripts/gpu_check.sh, which runs it once per
allocator under the same PYTORCH_CUDA_ALLOC_CONF.

usage: gpu_train.py --allocator torch|cachalot [--lib libcachalot_capi.so] [--steps N] [--json OUT]

The model is a small Transformer encoder trained with AdamW on batches whose sequence length
varies every step (so the allocator sees many sizes, as in real training). Each run is a fresh
process: the allocator must be chosen before CUDA allocates anything.

Reported (one JSON object, on stdout and in --json):
  peak_reserved      the allocator's peak reserved bytes (torch: max_memory_reserved();
                     cachalot: reserved_bytes.all.peak from its own statistics)
  peak_allocated     the same for allocated bytes
  num_device_alloc   device allocations (cudaMalloc + expandable-segment maps; 0 is what
                     torch reports for backend:cudaMallocAsync)
  num_device_free    device frees
  driver_peak_used   peak of (total - free) from cudaMemGetInfo after each step: what the GPU
                     really had in use, whoever's accounting, context included
  step_ms_median     median step time after warm-up (synchronized), and step_ms_p90
  final_loss         the loss of the last step (same seed: both allocators must agree)
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--allocator", choices=["torch", "cachalot"], required=True)
    ap.add_argument("--lib", help="libcachalot_capi.so (for --allocator cachalot)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", help="also write the result here")
    return ap.parse_args()


def install_cachalot(torch, path):
    """The three lines of crates/capi/examples/use_from_torch.py, plus the optional hooks."""
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_malloc", "cachalot_free")
    lib = ctypes.CDLL(path)
    hooks = alloc.allocator()
    for setter, fn in [
        ("set_init_fn", "cachalot_init"),
        ("set_reset_fn", "cachalot_reset"),
        ("set_memory_fraction_fn", "cachalot_set_memory_fraction"),
        ("set_record_stream_fn", "cachalot_record_stream"),
    ]:
        if hasattr(hooks, setter):
            getattr(hooks, setter)(ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    lib.cachalot_memory_stats_json.restype = ctypes.c_char_p
    lib.cachalot_memory_stats_json.argtypes = [ctypes.c_int]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    lib.cachalot_backend.restype = ctypes.c_char_p
    return lib


def cachalot_stats(lib):
    raw = lib.cachalot_memory_stats_json(0)
    if raw is None:
        raise RuntimeError("cachalot: " + lib.cachalot_last_error().decode())
    return json.loads(raw)


def main():
    args = parse_args()
    import torch

    lib = None
    if args.allocator == "cachalot":
        if not args.lib or not os.path.exists(args.lib):
            sys.exit(f"--lib {args.lib}: libcachalot_capi.so not found")
        lib = install_cachalot(torch, os.path.abspath(args.lib))
    if not torch.cuda.is_available():
        sys.exit("torch.cuda.is_available() is False: no GPU for this run")

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", 0)
    d_model, vocab = 512, 8192
    layer = torch.nn.TransformerEncoderLayer(d_model, 8, 2048, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, d_model),
        torch.nn.TransformerEncoder(layer, 4),
        torch.nn.Linear(d_model, vocab),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    times, used_peak, loss_value = [], 0, float("nan")
    for step in range(args.warmup + args.steps):
        seq = 64 + int(torch.randint(0, 448, (1,), generator=gen))  # 64..511 tokens
        batch = 16 + (step % 3) * 8
        tokens = torch.randint(0, vocab, (batch, seq), generator=gen).to(dev, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()  # synchronizes
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt * 1000)
        free, total = torch.cuda.mem_get_info(0)
        used_peak = max(used_peak, total - free)
        del logits, loss, tokens

    if lib is None:
        s = torch.cuda.memory_stats(0)
        backend = torch.cuda.get_allocator_backend()
    else:
        s = cachalot_stats(lib)
        backend = "cachalot/" + lib.cachalot_backend().decode()
    result = {
        "allocator": args.allocator,
        "backend": backend,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "steps": args.steps,
        "peak_reserved": s.get("reserved_bytes.all.peak", 0),
        "peak_allocated": s.get("allocated_bytes.all.peak", 0),
        "num_device_alloc": s.get("num_device_alloc", 0),
        "num_device_free": s.get("num_device_free", 0),
        "num_alloc_retries": s.get("num_alloc_retries", 0),
        "driver_peak_used": used_peak,
        "step_ms_median": statistics.median(times),
        "step_ms_p90": sorted(times)[int(0.9 * (len(times) - 1))],
        "final_loss": loss_value,
    }
    # empty_cache must reach the allocator (cachalot: through the reset hook).
    del model, opt
    torch.cuda.empty_cache()
    after = torch.cuda.memory_stats(0) if lib is None else cachalot_stats(lib)
    result["reserved_after_empty_cache"] = after.get("reserved_bytes.all.current", 0)
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
