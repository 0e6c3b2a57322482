"""Run on the fake GPU (`PYTHON=~/.cache/cachalot-torch/bin/python ../shared/fakegpu/run.sh
scripts/pools_torch_probe.py native|LIB.so`, with `CACHALOT_DEVICE=sim` for the library). Runs the same MemPool / use_mem_pool / empty_cache / del pool / record_stream program under
torch's native allocator (argv[1] == "native") or cachalot's library (argv[1] == path), and
prints the statistics torch reports."""
import json
import sys

import torch

mode = sys.argv[1]
if mode != "native":
    alloc = torch.cuda.memory.CUDAPluggableAllocator(mode, "cachalot_malloc", "cachalot_free")
    torch.cuda.memory.change_current_allocator(alloc)
out = {}
def stat(tag):
    try:
        s = torch.cuda.memory_stats()
        out[tag] = {k: s.get(k) for k in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                                          "active_bytes.all.current")}
    except RuntimeError as e:
        out[tag] = f"memory_stats: {type(e).__name__}: {str(e).splitlines()[0]}"
try:
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    stat("in_pool")
    del x
    torch.cuda.empty_cache()
    stat("after_empty_cache")
    del pool
    stat("after_del_pool")
except RuntimeError as e:
    out["mempool_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
side = torch.cuda.Stream()
y = torch.empty(12 << 20, dtype=torch.uint8, device="cuda")
y.record_stream(side)
del y
stat("after_record_stream_free")
torch.cuda.empty_cache()
stat("after_empty_cache_2")
print(json.dumps(out))
