"""A small training + generation workload for tests/python/test_capture.py.

Run as a user script (under `cachalot capture`), or, with CAPTURE_TRUTH_OUT
set, on the team's fake GPU (shared/fakegpu/run.sh) as the ground truth: then
it records torch's memory history itself, answers generate()'s host reads with
shared/fakegpu's HostReadOracle, and writes torch's peaks and the snapshot.
"""

import json
import os
import sys

import torch
import transformers as tf

TRUTH = os.environ.get("CAPTURE_TRUTH_OUT")
if TRUTH:
    sys.path.insert(0, os.environ["FAKEGPU_DIR"])
    import fakegpu_util as fu

    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")

torch.manual_seed(0)
cfg = tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=256, vocab_size=8192)
model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, cfg.vocab_size, (4, 256))
for _step in range(2):  # bf16 autocast, AdamW (foreach), zero_grad(set_to_none=True)
    batch = ids.to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, batch

model.eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = None
prompt = torch.randint(0, cfg.vocab_size, (1, 32)).to("cuda")
reads = fu.HostReadOracle(fu.generate_rules(lambda: 32 + 8)) if TRUTH else None
with torch.no_grad():
    if reads:
        with reads:
            out = model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False
            )
    else:
        out = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False
        )
assert out.shape == (1, 40), out.shape  # the KV-cache loop ran its 8 steps

if TRUTH:
    st = torch.cuda.memory_stats()
    torch.cuda.memory._dump_snapshot(os.path.join(TRUTH, "truth.pickle"))
    with open(os.path.join(TRUTH, "truth.json"), "w") as f:
        json.dump(
            {
                "allocated": st["allocated_bytes.all.peak"],
                "reserved": st["reserved_bytes.all.peak"],
            },
            f,
        )
