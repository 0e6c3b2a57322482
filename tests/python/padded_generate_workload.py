"""A left-padded batch through Hugging Face generate() (tests/python/test_values.py).

Eight prompts of 64…1024 tokens, left-padded to the longest, a small GPT-2 with SDPA, greedy,
no EOS (so a GPU also generates exactly max_new_tokens). Under `cachalot capture` the host reads
of the padded attention mask must get the GPU's answers from the values the capture computes.
With CAPTURE_TRUTH_OUT set it runs on shared/fakegpu (real torch 2.15) as the judge: its reads
are answered by fakegpu_util.HostReadOracle with what a GPU computes for this batch (the mask
has padding, the stop check is the length), and it writes torch's own peaks.
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

LENGTHS = [64, 200, 330, 470, 600, 740, 880, 1024]
NEW = 12
torch.manual_seed(0)
cfg = tf.GPT2Config(
    n_layer=2,
    n_embd=256,
    n_head=4,
    n_positions=2048,
    vocab_size=8192,
    bos_token_id=1,
    eos_token_id=2,
)
model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to("cuda").eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = 0

width = max(LENGTHS)
ids = torch.zeros(len(LENGTHS), width, dtype=torch.long)
mask = torch.zeros(len(LENGTHS), width, dtype=torch.long)
for row, n in enumerate(LENGTHS):  # left padding, as a tokenizer with padding_side="left"
    ids[row, width - n :] = torch.randint(1, cfg.vocab_size, (n,))
    mask[row, width - n :] = 1
batch = {"input_ids": ids.to("cuda"), "attention_mask": mask.to("cuda")}


def run():
    with torch.no_grad():
        return model.generate(**batch, max_new_tokens=NEW, do_sample=False)


if TRUTH:
    padded = not bool(mask.all())  # what a GPU computes for these reads of the mask
    M = "transformers/masking_utils.py"
    G = "transformers/generation/utils.py"
    rules = [
        (G, "return bool(unfinished_sequences.max() == 0)",
         lambda f: f.f_locals["length"] >= width + NEW),
        (G, 'and (model_kwargs["attention_mask"] == 1).all()', not padded),
        (G, "not (encoder_input_ids < 0).any()", False),
        (G, "torch.any(attention_mask[:, -1] == 0).item()", False),  # no right padding
        (M, "fast_all(padding_mask", not padded),
        (M, "padding_mask.all()", not padded),
        (M, "fast_all(attention_mask)", not padded),
        (M, "attention_mask.all()", not padded),
    ]  # fmt: skip
    oracle = fu.HostReadOracle(rules)
    with oracle:
        out = run()
    assert not oracle.unknown, f"reads the judge does not answer: {oracle.unknown}"
else:
    out = run()
assert out.shape == (len(LENGTHS), width + NEW), out.shape

if TRUTH:
    st = torch.cuda.memory_stats()
    with open(os.path.join(TRUTH, "truth.json"), "w") as f:
        json.dump(
            {
                "allocated": st["allocated_bytes.all.peak"],
                "reserved": st["reserved_bytes.all.peak"],
                "answered": oracle.answered,
            },
            f,
        )
