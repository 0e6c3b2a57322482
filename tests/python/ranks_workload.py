"""A small distributed training job for the multi-rank capture tests: DDP, FSDP2
(`fully_shard`) or DeepSpeed ZeRO-2/3 (torch's AdamW) over NCCL, started by torchrun (RANK/LOCAL_RANK set) or by
`torch.multiprocessing.spawn` (`--spawn N`). Two AdamW steps of a 3-layer MLP.

Each rank writes torch's own allocator statistics at its end to `--stats DIR/rankR.json`
(what the test compares the capture's per-rank prediction with); `--crash-rank R` makes rank R
raise after its first step; `--hang` makes every rank sleep (for the signal tests);
`--subgroups` makes two process groups of half the ranks each (as HSDP's replica groups)."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.cuda.set_device(rank % torch.cuda.device_count())
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("nccl", rank=rank, world_size=world)
    else:
        dist.init_process_group("nccl")
    rank = dist.get_rank()
    if args.subgroups:  # two halves, as HSDP's replica groups: every rank makes both
        half = dist.get_world_size() // 2
        groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, 2 * half)))]
        dist.all_reduce(torch.ones(8, device="cuda"), group=groups[rank // half])
    torch.manual_seed(0)
    width = args.width
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, width),
    ).cuda()
    if args.mode.startswith("zero"):
        pass  # deepspeed.initialize wraps it below
    elif args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    if args.mode.startswith("zero"):  # DeepSpeed ZeRO with torch's optimizer (no built ops)
        import deepspeed

        config = {
            "train_micro_batch_size_per_gpu": args.batch,
            "zero_optimization": {"stage": int(args.mode[4:])},
        }
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    else:
        engine, opt = None, torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(2):
        x = torch.randn(args.batch, width, device="cuda")
        if engine is not None:
            engine.backward(engine(x).square().mean())
            engine.step()
        else:
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step == 0 and rank == args.crash_rank:
            raise RuntimeError(f"rank {rank} crashed on purpose")
        if args.hang:
            open(os.path.join(args.hang, f"ready{rank}"), "w").close()
            time.sleep(600)
    torch.cuda.synchronize()
    if args.stats:
        s = torch.cuda.memory_stats()
        with open(os.path.join(args.stats, f"rank{rank}.json"), "w") as f:
            json.dump(
                {
                    "peak_allocated": s["allocated_bytes.all.peak"],
                    "peak_reserved": s["reserved_bytes.all.peak"],
                    "device_count": torch.cuda.device_count(),
                    "device": torch.cuda.current_device(),
                    "world": dist.get_world_size(),
                },
                f,
            )
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("ddp", "fsdp", "zero2", "zero3"), default="ddp")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--stats")
    ap.add_argument("--crash-rank", type=int, default=-1)
    ap.add_argument("--hang")
    ap.add_argument("--subgroups", action="store_true")
    ap.add_argument("--spawn", type=int, default=0)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--local_rank", "--local-rank", type=int)  # deepspeed's launcher passes it
    args = ap.parse_args()
    if args.spawn:
        import torch.multiprocessing as mp

        mp.spawn(train, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
