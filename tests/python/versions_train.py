"""A small training job for the torch-version tests (tests/python/test_versions_*.py): a
two-block transformer language model with AdamW under bf16 autocast, three steps, then an
evaluation pass under no_grad. Only torch, so it runs on every release from 2.4 on. With
VERSIONS_TRAIN_STATS=FILE it writes torch's `memory_stats()` at the end to FILE (JSON)."""

import json
import os

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, vocab=8192, d=512, heads=8, layers=2, ctx=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    torch.manual_seed(0)
    model = Model().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        idx = torch.randint(0, 8192, (8, 256), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(idx).flatten(0, 1).float(), idx.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        model(torch.randint(0, 8192, (16, 256), device="cuda"))
    torch.cuda.synchronize()
    if os.environ.get("VERSIONS_TRAIN_STATS"):
        with open(os.environ["VERSIONS_TRAIN_STATS"], "w") as f:
            json.dump({"torch": torch.__version__, "stats": torch.cuda.memory_stats()}, f)


if __name__ == "__main__":
    main()
