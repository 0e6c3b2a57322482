#!/usr/bin/env python3
"""Generate snapshots with private-pool segments (issue #15), recorded by real PyTorch 2.15 on
the fake GPU (../shared/fakegpu), into tests/fixtures/snapshots/pools:

- mempool-full.pickle.gz: the whole history of a program that allocates in the default pools,
  in a torch.cuda.MemPool through use_mem_pool (large and small blocks, frees inside and
  outside the `with`, a side stream inside it, a second pool nested in the first and then
  deleted), calls empty_cache, and uses a CUDA-graph-kind pool ((n, 0), see below);
- mempool-ring.pickle.gz: a loop of steps that each allocate in the default pools and in two
  MemPools, one of which is deleted and made anew every other step, recorded with
  max_entries=60 (a ring buffer: its window starts mid-run with pool blocks live);
- mempool-expandable.pickle.gz: mempool-full's program under expandable_segments:True;
- mempool-oom.pickle.gz: on a 200 MiB device, a MemPool keeps 60 MiB of freed blocks while
  the default pools fill up, and a default-pool request then runs out of memory (torch's
  message counts the pool's free memory as "allocated in private pools").

CUDA-graph capture is not emulated on the fake GPU (cudaStreamBeginCapture fails with
"operation not supported"), so the graph pool is made with the calls capture makes to the
allocator: a pool made by torch itself (torch._C._MemPool with is_user_created=False: id
(n, 0)), torch._C._cuda_beginAllocateCurrentThreadToPool, torch._C._cuda_endAllocateToPool
(capture_end does not release the pool: the graph holds it), and torch._C._cuda_releasePool
(CUDAGraph.reset()).

Run from the repository root:

    PYTHON=~/.cache/cachalot-torch/bin/python ../shared/fakegpu/run.sh scripts/gen_pool_snapshots.py
"""

import sys
from pathlib import Path

import snapshot_fixture

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "snapshots" / "pools"
MIB = 1 << 20


def empty(torch, n, **kw):
    return torch.empty(n, dtype=torch.uint8, device="cuda", **kw)


def full(torch):
    keep = [empty(torch, 3 * MIB), empty(torch, 300_000)]
    dropped = empty(torch, 9 * MIB)
    pool = torch.cuda.MemPool()
    side = torch.cuda.Stream()
    with torch.cuda.use_mem_pool(pool):
        a = empty(torch, 5 * MIB)
        b = empty(torch, 1000)
        c = empty(torch, 7 * MIB)
        del dropped  # a default-pool block freed while the pool routes
        with torch.cuda.stream(side):
            d = empty(torch, 4 * MIB)  # the thread's allocations go to the pool on any stream
        inner = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(inner):
            e = empty(torch, 6 * MIB)
            f = empty(torch, 2000)
        g = empty(torch, 2 * MIB)  # back in the outer pool
        del a
        h = empty(torch, 3 * MIB)  # into the outer pool's hole
    del b, c, e, f
    torch.cuda.current_stream().wait_stream(side)
    del d
    x = empty(torch, 6 * MIB)  # default pools: the pools' free blocks are not used
    del inner  # releasePool + emptyCache(inner): its segments go back
    torch.cuda.empty_cache()  # the default pools' free segments go; the live pool's stay
    with torch.cuda.use_mem_pool(pool):
        y = empty(torch, 7 * MIB)  # reuses the pool's cached block
    graph = torch._C._MemPool(None, False, False, False)
    torch._C._cuda_beginAllocateCurrentThreadToPool(0, graph.id)
    s = empty(torch, 8 * MIB)
    t = empty(torch, 500)
    del s
    torch._C._cuda_endAllocateToPool(0, graph.id)
    z = empty(torch, 1 * MIB)
    del t
    torch._C._cuda_releasePool(0, graph.id)  # CUDAGraph.reset()
    del graph
    torch.cuda.empty_cache()
    w = empty(torch, 12 * MIB)
    return keep, g, h, x, y, z, w, pool


def ring(torch):
    held = []
    pool = torch.cuda.MemPool()
    other = torch.cuda.MemPool()
    for step in range(8):
        base = empty(torch, (2 + step % 3) * MIB)
        with torch.cuda.use_mem_pool(pool):
            p = [empty(torch, (1 + (step * 3) % 5) * MIB), empty(torch, 4096 * (1 + step))]
        with torch.cuda.use_mem_pool(other):
            o = empty(torch, (5 + step % 2) * MIB)
        held.append(p[step % 2])
        if len(held) > 3:
            held.pop(0)
        del p, base
        if step % 2 == 1:
            del o
            other = None
            torch.cuda.empty_cache()
            other = torch.cuda.MemPool()
        else:
            held.append(o)
    return held, pool, other


def oom(torch):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        cached = [empty(torch, 30 * MIB) for _ in range(2)]
        kept = empty(torch, 10 * MIB)
    del cached  # free in the pool: no request outside it can use them
    held = []
    try:
        for _ in range(8):
            held.append(empty(torch, 24 * MIB))
    except torch.OutOfMemoryError as e:
        print(f"out of memory: {str(e)[:160]}", file=sys.stderr)
    return held, kept, pool


RUNS = {
    "mempool-full.pickle.gz": (full, 100_000, ""),
    "mempool-ring.pickle.gz": (ring, 60, ""),
    "mempool-expandable.pickle.gz": (full, 100_000, "expandable_segments:True"),
    "mempool-oom.pickle.gz": (oom, 100_000, ""),
}

CAPACITY = {"mempool-oom.pickle.gz": "200M"}


def child(name: str) -> None:
    import torch

    run, entries, _ = RUNS[name]
    torch.cuda.memory._record_memory_history(context=None, max_entries=entries)
    alive = run(torch)
    torch.cuda.synchronize()
    snapshot_fixture.dump_gz(torch, OUT / name)
    del alive


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (_, _, conf) in RUNS.items():
        env = {"FAKE_CUDA_CAPACITY": CAPACITY.get(name, "80G")}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        snapshot_fixture.run_child(__file__, [name], env)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
