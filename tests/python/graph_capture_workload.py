"""Real CUDA-graph capture (torch.cuda.graph, a second graph sharing the first one's pool,
replay, deletion) with torch's own allocator or with cachalot's and its graph-pool hooks
(`--allocator`). Needs capture_emulation.c preloaded ahead of the fake GPU, whose own runtime
refuses cudaStreamBeginCapture. After every step it records torch's `memory_stats()`, the
segments and, under cachalot, the graph pool's use count; test_graph_pools.py compares.

    graph_capture_workload.py --allocator torch|cachalot OUT.json
"""

import json

import torch

from pool_workload import Workload

probe = Workload(__doc__)


MiB = 1 << 20
steps = []


def step(name):
    steps.append(probe.step(name, graph_pool_use_count=probe.use_count((1, 0))))


x = torch.ones(1 << 20, device="cuda")
step("static input")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x * 2 + 1
    z = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    tmp = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    del tmp  # freed during capture: stays in the graph's pool
pool = g.pool()
step("captured")
g.replay()
outside = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
step("replayed; an allocation after capture stays outside the pool")
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2, pool=pool):
    w = y * 3
step("a second graph captured into the first one's pool")
del y, z, w, outside
torch.cuda.empty_cache()
step("outputs freed, empty_cache: the pool is still referenced")
del g
step("first graph deleted")
del g2
step("second graph deleted")
torch.cuda.empty_cache()
step("empty_cache: the pool's segments go")

with open(probe.args.out, "w") as f:
    json.dump({"steps": steps, "pool": list(pool)}, f, indent=1)
