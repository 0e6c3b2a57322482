"""Private-pool routing as torch drives it (CUDA-graph capture and the pool calls
torch.compile's cudagraph trees make), with torch's own allocator or with cachalot's and its
graph-pool hooks (`--allocator`). After every step it records torch's `memory_stats()`, the
segments (pool id, sizes, small or large, side stream or not) and, under cachalot, the use
count of every pool the program named. test_graph_pools.py runs it both ways on the fake GPU
and compares.

    graph_pools_workload.py --allocator torch|cachalot OUT.json
"""

import json
import threading

import torch

from pool_workload import Workload

probe = Workload(__doc__)


MiB = 1 << 20
side = torch.cuda.Stream()
pools = {}  # name -> pool id
steps = []
errors = {}


def step(name):
    counts = {n: probe.use_count(p) for n, p in pools.items()}
    steps.append(probe.step(name, use_counts=counts, open_filters=probe.open_filters()))


def mib(n, stream=None):
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        return torch.empty(n * MiB, dtype=torch.uint8, device="cuda")


def on_default(n):
    return mib(n, torch.cuda.default_stream())


keep = [torch.empty(1000, device="cuda")]
step("start")

# A pool for one stream (torch._C._cuda_beginAllocateCurrentStreamToPool: torch's filter
# compares the stream), the calls torch.compile's cudagraph trees make around warm-up.
pools["stream"] = torch.cuda.graph_pool_handle()
with torch.cuda.stream(side):
    torch._C._cuda_beginAllocateCurrentStreamToPool(0, pools["stream"])
    a, b = mib(5), torch.empty(1000, device="cuda")
    c = on_default(5)
step("stream pool: side stream in the pool, default stream not")
torch._C._cuda_endAllocateToPool(0, pools["stream"])
d = mib(5, side)
step("ended: the side stream back in the default pool")
del a, b, c, d
torch.cuda.empty_cache()
step("freed, empty_cache: the referenced pool keeps its segments")
torch._C._cuda_releasePool(0, pools["stream"])
step("released: the segments stay until empty_cache")
torch.cuda.empty_cache()
step("empty_cache after release: the pool's segments go")

# A pool for one thread (_cuda_beginAllocateCurrentThreadToPool: torch's filter compares
# the thread): another thread's allocations stay outside.
pools["thread"] = torch.cuda.graph_pool_handle()
torch._C._cuda_beginAllocateCurrentThreadToPool(0, pools["thread"])
e = mib(7)
other = []
t = threading.Thread(target=lambda: other.append(mib(3)))
t.start()
t.join()
torch._C._cuda_endAllocateToPool(0, pools["thread"])
step("thread pool: this thread in the pool, the other thread not")
torch._C._cuda_releasePool(0, pools["thread"])
del e
other.clear()
torch.cuda.empty_cache()
step("thread pool released and emptied")

# Two pools open at once: the one begun last wins for the streams both accept.
pools["all"], pools["inner"] = torch.cuda.graph_pool_handle(), torch.cuda.graph_pool_handle()
torch._C._cuda_beginAllocateToPool(0, pools["all"])
with torch.cuda.stream(side):
    torch._C._cuda_beginAllocateCurrentStreamToPool(0, pools["inner"])
    g = mib(9)
h = on_default(9)
step("nested: side stream in the inner pool, default stream in the outer")
torch._C._cuda_endAllocateToPool(0, pools["inner"])
torch._C._cuda_endAllocateToPool(0, pools["all"])
for p in ("inner", "all"):
    torch._C._cuda_releasePool(0, pools[p])
del g, h
torch.cuda.empty_cache()
step("nested pools released and emptied")

# CUDA-graph capture: capture_begin begins routing to a new graph pool, then asks the
# driver to begin capturing, which the fake GPU refuses.
pools["graph"] = (1, 0)  # the first graph's pool: torch numbers them (1, 0), (2, 0), ...
graph = torch.cuda.CUDAGraph()
with torch.cuda.stream(side):
    try:
        graph.capture_begin()
    except Exception as err:  # noqa: BLE001 - the error is the result
        errors["capture_begin"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    k = mib(11)  # the stream is not capturing: torch's capture filter keeps it outside
step("capture_begin failed at the driver: the graph pool is open")
del graph  # reset(): endAllocateToPool, then releasePool
step("graph deleted: its pool ended and released")
del k
torch.cuda.empty_cache()
step("graph pool emptied")

# The same through torch.cuda.graph, sharing a pool from graph_pool_handle().
pools["shared"] = torch.cuda.graph_pool_handle()
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph, pool=pools["shared"], stream=side):
        pass
except Exception as err:  # noqa: BLE001
    errors["torch.cuda.graph"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
step("torch.cuda.graph(pool=handle) failed at the driver")
del graph
torch.cuda.empty_cache()
step("shared-pool graph deleted and emptied")

with open(probe.args.out, "w") as f:
    json.dump({"steps": steps, "errors": errors, "pools": pools}, f, indent=1)
