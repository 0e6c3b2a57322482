"""A tiny Mixtral-shaped MoE training step (tests/python/test_values.py).

Random init from a config, the eager experts loop (`experts_implementation="eager"`: one
``torch.where`` of the expert mask per expert hit, so the expert batch sizes are shapes the host
reads), a forward and a backward over 4 x 128 tokens. The router's choice depends on weights, so
under `cachalot capture` it is assumed: balanced, and the worst case in a second run.
"""

import torch
import transformers as tf

cfg = tf.MixtralConfig(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=8,
    num_experts_per_tok=2,
    vocab_size=1024,
    max_position_embeddings=512,
)
torch.manual_seed(0)
model = tf.AutoModelForCausalLM.from_config(cfg, experts_implementation="eager").to("cuda")
ids = torch.randint(0, cfg.vocab_size, (4, 128)).to("cuda")
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
