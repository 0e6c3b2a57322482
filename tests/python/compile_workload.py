"""A tiny nanoGPT-style training run under torch.compile, for tests/python/test_compile.py.

Run under `cachalot capture`: two steps of a 2-layer GPT (causal self-attention through SDPA,
GELU MLP, tied embeddings) compiled with `torch.compile(model, mode=MODE)`, bf16 autocast,
fused AdamW. At the end it writes, to $COMPILE_OUT, what torch's own allocator measured in
this compiled run (peaks allocated/reserved), what Inductor did (graphs compiled, Triton
kernels generated) and what the capture runtime saw (Triton modules loaded, kernels launched).
"""

import ctypes
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

MODE = os.environ.get("COMPILE_MODE", "default")
STEPS = int(os.environ.get("COMPILE_STEPS", "2"))
D, HEADS, LAYERS, SEQ, VOCAB, BATCH = 128, 4, 2, 64, 512, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


torch.manual_seed(0)
model = GPT().to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
step = torch.compile(model, mode=MODE)
data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
for _ in range(STEPS):
    x, y = data[:, :-1].to("cuda"), data[:, 1:].to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, x, y
torch.cuda.synchronize()

from torch._dynamo.utils import counters  # noqa: E402 (after the run it reports on)

modules, launches, graph_launches = ctypes.c_uint64(), ctypes.c_uint64(), 0
try:
    rt = ctypes.CDLL("libcudart.so.13")
    rt.fakecuda_module_counters(ctypes.byref(modules), ctypes.byref(launches))
    rt.fakecuda_graph_launches.restype = ctypes.c_uint64
    graph_launches = rt.fakecuda_graph_launches()
except AttributeError:
    print("compile_workload: not on the capture runtime", file=sys.stderr)
out = {
    "allocated": torch.cuda.max_memory_allocated(),
    "reserved": torch.cuda.max_memory_reserved(),
    "graphs": counters["stats"]["unique_graphs"],
    "modules_loaded": modules.value,
    "launches": launches.value,
    "graph_launches": graph_launches,
    "cudagraph_skips": sum(counters["inductor"][k] for k in counters["inductor"] if "skip" in k),
}
with open(os.environ["COMPILE_OUT"], "w") as f:
    json.dump(out, f)
