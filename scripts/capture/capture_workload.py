#!/usr/bin/env python
"""One ground-truth case of shared/fakegpu/train_snapshots.py as a plain user script.

    cachalot capture -- python scripts/capture/capture_workload.py gpt2_fp32 [--steps 3]

The same models, shapes and loop as train_snapshots.py (its builders are
imported, so the two cannot drift apart), without anything that script adds
for measuring (memory history, snapshot, counters): what a user would run.
Generation runs without that script's host-read oracle; the capture answers
generate()'s host reads itself.
"""

from __future__ import annotations

import argparse
import os
import sys

FAKEGPU = os.environ.get(
    "FAKEGPU_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "fakegpu")
)
sys.path.insert(0, os.path.abspath(FAKEGPU))


def train(case: str, steps: int) -> None:
    """`case` is <model>_<precision>[+option…]; options are settings train_snapshots.py does not
    cover: fused (AdamW fused=True), accumN (N backward passes per optimizer step), ckpt
    (activation checkpointing, HF models), stream (the batch copied on a side stream), keepgrad
    (zero_grad(set_to_none=False))."""
    import torch
    import train_snapshots as ts

    base, *opts = case.split("+")
    name, prec = base.rsplit("_", 1)
    accum = next((int(o[5:]) for o in opts if o.startswith("accum")), 1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model, cfg = ts.build(name)
    model.train()
    if "ckpt" in opts:
        model.gradient_checkpointing_enable()
    batch_cpu = ts.make_batch(name, cfg, gen)
    model.to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused="fused" in opts or None)
    side = torch.cuda.Stream() if "stream" in opts else None
    for _ in range(steps):
        for _ in range(accum):
            if side is not None:
                with torch.cuda.stream(side):
                    batch = {k: v.to("cuda", non_blocking=True) for k, v in batch_cpu.items()}
                torch.cuda.current_stream().wait_stream(side)
                for v in batch.values():
                    v.record_stream(torch.cuda.current_stream())
            else:
                batch = {k: v.to("cuda") for k, v in batch_cpu.items()}
            if prec == "bf16":
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = ts.loss_of(name, model, batch)
            else:
                loss = ts.loss_of(name, model, batch)
            (loss / accum).backward()
            del loss, batch
        opt.step()
        opt.zero_grad(set_to_none="keepgrad" not in opts)


def generate() -> None:
    import torch
    import train_snapshots as ts
    import transformers as tf

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = tf.GPT2Config()
    model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    model.generation_config.do_sample = False
    model.to("cuda")
    for n in ts.GEN["prompt_lens"]:
        ids = torch.randint(0, cfg.vocab_size, (1, n), generator=gen)
        with torch.no_grad():
            out = model.generate(
                ids.to("cuda"),
                attention_mask=torch.ones_like(ids).to("cuda"),
                max_new_tokens=ts.GEN["max_new_tokens"],
                do_sample=False,
                use_cache=True,
            )
        if out.shape != (1, n + ts.GEN["max_new_tokens"]):
            raise SystemExit(f"generate stopped early: {tuple(out.shape)}")
        del out


def truth_begin() -> None:
    """--truth: what train_snapshots.py does to measure (history on, then peaks and snapshot)."""
    import torch

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=4_000_000, stacks="python")


def truth_end(out: str, case: str) -> None:
    import json

    import torch

    st = torch.cuda.memory_stats()
    os.makedirs(out, exist_ok=True)
    torch.cuda.memory._dump_snapshot(os.path.join(out, f"{case}.pickle"))
    peaks = {
        "allocated_peak": st["allocated_bytes.all.peak"],
        "reserved_peak": st["reserved_bytes.all.peak"],
    }
    with open(os.path.join(out, f"{case}.json"), "w") as f:
        json.dump({"case": case, "peaks": peaks}, f)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "case", help="<model>_<fp32|bf16> (gpt2, llama, bert, vit_b_16, resnet50) or gpt2_generate"
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--truth", metavar="DIR", help="measure (on the fake or a real GPU) into DIR")
    args = ap.parse_args()
    if args.truth:
        truth_begin()
    if args.case == "gpt2_generate":
        generate()
    else:
        train(args.case, args.steps)
    if args.truth:
        truth_end(args.truth, args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
