"""Real CUDA-graph capture (torch.cuda.graph, a second graph sharing the first one's pool,
replay, deletion) with torch's own allocator or with cachalot's and its graph-pool hooks
(`--allocator`). Needs capture_emulation.c preloaded ahead of the fake GPU, whose own runtime
refuses cudaStreamBeginCapture. After every step it records torch's `memory_stats()`, the
segments and, under cachalot, the graph pool's use count; test_graph_pools.py compares.

    graph_capture_workload.py --allocator torch|cachalot OUT.json
"""

import argparse
import ctypes
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--allocator", choices=["torch", "cachalot"], required=True)
ap.add_argument("out")
args = ap.parse_args()

if args.allocator == "cachalot":
    import cachalot.torch as ct
    from cachalot import _native

    ct.use(device="sim")
    ct.enable_graph_pools()
    stats, segments = ct.memory_stats, ct.memory_snapshot
    lib = ctypes.CDLL(_native.__file__)
    lib.cachalot_pool_use_count.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]

    def use_count(pool):
        return lib.cachalot_pool_use_count(0, *pool)
else:
    stats, segments = torch.cuda.memory_stats, torch.cuda.memory_snapshot

    def use_count(pool):
        return None


MiB = 1 << 20
steps = []


def step(name):
    torch.cuda.synchronize()
    segs = sorted(
        (list(s["segment_pool_id"]), s["total_size"], s["allocated_size"], s["segment_type"])
        for s in segments()
    )
    steps.append(
        {
            "step": name,
            "stats": dict(stats()),
            "segments": segs,
            "graph_pool_use_count": use_count((1, 0)),
        }
    )


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

with open(args.out, "w") as f:
    json.dump({"steps": steps, "pool": list(pool)}, f, indent=1)
