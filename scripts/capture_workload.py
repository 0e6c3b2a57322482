#!/usr/bin/env python
"""One ground-truth case of shared/fakegpu/train_snapshots.py as a plain user script.

    cachalot capture -- python scripts/capture_workload.py gpt2_fp32 [--steps 3]

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
    "FAKEGPU_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fakegpu")
)
sys.path.insert(0, os.path.abspath(FAKEGPU))


def train(case: str, steps: int) -> None:
    import torch
    import train_snapshots as ts

    name, prec = case.rsplit("_", 1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model, cfg = ts.build(name)
    model.train()
    batch_cpu = ts.make_batch(name, cfg, gen)
    model.to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        batch = {k: v.to("cuda") for k, v in batch_cpu.items()}
        if prec == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = ts.loss_of(name, model, batch)
        else:
            loss = ts.loss_of(name, model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, batch


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


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "case", help="<model>_<fp32|bf16> (gpt2, llama, bert, vit_b_16, resnet50) or gpt2_generate"
    )
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    if args.case == "gpt2_generate":
        generate()
    else:
        train(args.case, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
