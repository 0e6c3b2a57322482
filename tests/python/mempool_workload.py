"""One MemPool program run with torch's own `torch.cuda.MemPool()` or with cachalot as the
pool's allocator (`--pool cachalot`: `MemPool(cachalot.torch.mempool_allocator().allocator())`),
torch's allocator being the process's in both. After every step it records torch's
`memory_stats()`, `memory_reserved()`/`memory_allocated()`, the snapshot's segments with their
addresses made relative (the two runs take memory from different places), and with cachalot
what cachalot's statistics say torch holds from it. test_mempool.py runs it both ways on the
fake GPU and compares.

    mempool_workload.py --pool torch|cachalot OUT.json
    mempool_workload.py --pool torch|cachalot --oom OUT.json   # a pool segment that does not fit
"""

import argparse
import json

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--pool", choices=["torch", "cachalot"], required=True)
ap.add_argument("--oom", action="store_true")
ap.add_argument("out")
args = ap.parse_args()

if args.pool == "cachalot":
    import cachalot.torch as ct

    def new_pool():
        return torch.cuda.MemPool(ct.mempool_allocator(device="sim").allocator())
else:

    def new_pool():
        return torch.cuda.MemPool()


MiB = 1 << 20
steps = []


def segments():
    """The snapshot's segments, addresses relative to their segment, in a stable order."""
    out = []
    for s in torch.cuda.memory._snapshot()["segments"]:
        blocks = [
            (b["address"] - s["address"], b["size"], b["requested_size"], b["state"])
            for b in s["blocks"]
        ]
        fields = {k: v for k, v in s.items() if k not in ("address", "blocks", "frames")}
        out.append({"fields": fields, "blocks": blocks})
    return sorted(out, key=lambda s: json.dumps(s, sort_keys=True))


def step(name, pool_id):
    torch.cuda.synchronize()
    segs = segments()
    held = [s for s in segs if tuple(s["fields"]["segment_pool_id"]) == pool_id]
    entry = {
        "step": name,
        "stats": dict(torch.cuda.memory_stats()),
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "segments": segs,
        "pool_held": {
            "bytes": sum(s["fields"]["total_size"] for s in held),
            "segments": len(held),
        },
    }
    if args.pool == "cachalot":
        c = ct.mempool_allocator_stats()
        entry["cachalot"] = {
            "bytes": c["reserved_bytes.all.current"],
            "allocated_bytes": c["allocated_bytes.all.current"],
            "segments": c["segment.all.current"],
            "device_allocs": c["num_device_alloc"],
            "device_frees": c["num_device_free"],
        }
    steps.append(entry)


def program():
    pool = new_pool()
    pid = tuple(pool.id)
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")  # a 20 MiB segment
        b = torch.empty(1000, device="cuda")  # a 2 MiB segment
        c = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")  # its own 30 MiB
    step("allocated in the pool", pid)
    d = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")  # the default pool
    step("allocated outside", pid)
    del a  # freed outside the with-block
    with torch.cuda.use_mem_pool(pool):
        e = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")  # splits a's free block
        f = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        del e  # freed inside it
    step("freed inside and outside", pid)
    side = torch.cuda.Stream()
    with torch.cuda.use_mem_pool(pool):
        g = torch.empty(12 * MiB, dtype=torch.uint8, device="cuda")
    g.record_stream(side)
    del g  # stays in use until the side stream's event is seen
    step("record_stream", pid)
    torch.cuda.empty_cache()  # the pool is referenced: its segments stay
    step("empty_cache", pid)
    del c, f
    torch.cuda.empty_cache()
    step("pool tensors freed, empty_cache", pid)
    del pool  # b is still alive in it
    torch.cuda.empty_cache()
    step("del pool, empty_cache", pid)
    del b
    step("last pool tensor freed", pid)
    torch.cuda.empty_cache()
    step("empty_cache after del pool", pid)
    del d
    torch.cuda.empty_cache()
    step("end", pid)


def oom_program():
    """The pool's device has 64 MiB (its own, or cachalot's simulated one)."""
    pool = new_pool()
    pid = tuple(pool.id)
    result = {}
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
        try:
            torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
            result = {"type": None, "message": "no exception"}
        except torch.OutOfMemoryError as err:
            result = {"type": type(err).__name__, "message": str(err)}
        step("out of memory", pid)
        del x
        y = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")  # the freed block
        result["recovered"] = y.data_ptr() != 0
        step("recovered", pid)
        del y
    del pool
    torch.cuda.empty_cache()
    step("end", pid)
    return result


oom = oom_program() if args.oom else None
if not args.oom:
    program()
with open(args.out, "w") as f:
    json.dump({"steps": steps, "oom": oom}, f)
