#!/usr/bin/env python3
"""Benchmark of `cachalot capture --world-size 64`: a Llama-7B-shaped model trained with FSDP2
on 64 GPUs (8 nodes of 8 H100s), answered per rank on this machine with no GPU.

Run as the benchmark (not a test; the numbers go in docs/capture.md):

    scripts/bench/llama7b_fsdp64.py [--python ~/.cache/cachalot-torch/bin/python]

which runs, under `/usr/bin/time -v`,

    cachalot capture --json --world-size 64 -- torchrun --nproc_per_node 8 --nnodes 8 \\
        llama7b_fsdp64.py --train

and prints the wall time, the peak resident memory of the largest process (`time -v`) and of
all the job's processes together (sampled), and each executed rank's answer next to what
torch's own allocator measured on that rank. `--world-size 8 --per-node 8` runs the same
job on one node, to see the shards grow.

With `--train` it is the training script each rank runs: the model (transformers'
`LlamaConfig` of Llama-2-7B: 32 layers, 4096 hidden, 11008 MLP, 32000 vocabulary) is built on
the meta device (no weights anywhere), each decoder layer and the root `fully_shard`ed with
bf16 parameters and fp32 reductions, materialised on the device (`to_empty`) and initialised
there at random; then one AdamW step on a batch of 1 x 2048 random tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def train() -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    config = LlamaConfig(  # Llama-2-7B's shape
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(0.0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (1, 2048), device="cuda")
    model(input_ids=tokens, labels=tokens).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and every process below it, now."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/statm") as f:
                pages = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parent[int(entry)] = int(stat[stat.rfind(")") + 2 :].split()[1])
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += [c for c, pp in parent.items() if pp == pid]
    return total


def bench(python: str, world: int, per_node: int) -> int:
    torchrun = str(Path(python).parent / "torchrun")
    cmd = [
        "/usr/bin/time", "-v", sys.executable, "-m", "cachalot", "capture", "--json",
        "--world-size", str(world), "--", torchrun, "--nproc_per_node", str(per_node),
        "--nnodes", str(world // per_node), "--master_port", str(_port()), __file__, "--train",
    ]  # fmt: skip
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_total = [0]

    def sample() -> None:
        while p.poll() is None:
            peak_total[0] = max(peak_total[0], _tree_rss(p.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = p.communicate()
    wall = time.monotonic() - start
    sampler.join()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    print(f"--world-size {world} ({world // per_node} nodes of {per_node}): exit {p.returncode}, "
          f"wall {wall:.1f} s, peak RSS of the largest process "
          f"{int(rss.group(1)) / 1024 if rss else float('nan'):.0f} MiB, of all processes "
          f"together {peak_total[0] / 2**20:.0f} MiB (sampled every 0.2 s)")  # fmt: skip
    if p.returncode not in (0, 1, 4):
        print(stderr[-4000:])
        return 1
    answer = json.loads(stdout)
    for r in answer["ranks"]:
        if r["executed"]:
            print(f"rank {r['rank']}: peak allocated {r['peak_allocated'] / 2**30:.2f} GiB, "
                  f"reserved {r['peak_reserved'] / 2**30:.2f} GiB, fits {r['fits']}, "
                  f"covers {sum(1 for c in answer['ranks'] if c['covered_by'] == r['rank'])} "
                  f"ranks; torch measured {r['torch_stats']['allocated_bytes.all.peak'] / 2**30:.2f}"
                  f" / {r['torch_stats']['reserved_bytes.all.peak'] / 2**30:.2f} GiB")  # fmt: skip
    print(f"job: {answer['verdict']} on {answer['gpu']}, seconds in the ranks {answer['seconds']}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", action="store_true", help="be the rank's training script")
    ap.add_argument("--python", default=str(Path.home() / ".cache/cachalot-torch/bin/python"))
    ap.add_argument("--world-size", type=int, default=64)
    ap.add_argument("--per-node", type=int, default=8)
    args = ap.parse_args()
    if args.train:
        train()
        return 0
    return bench(args.python, args.world_size, args.per_node)


if __name__ == "__main__":
    sys.exit(main())
