"""What the graph-pool workloads share (graph_pools_workload.py, graph_capture_workload.py):
`--allocator torch|cachalot` and `OUT`, and what each step reads: torch's `memory_stats()`,
the segments (pool id, sizes, small or large, side stream or not) and, under cachalot with
its graph-pool hooks, a pool's use count and how many pools the hooks hold open."""

import argparse
import ctypes

import torch


class Workload:
    def __init__(self, doc):
        ap = argparse.ArgumentParser(description=doc)
        ap.add_argument("--allocator", choices=["torch", "cachalot"], required=True)
        ap.add_argument("out")
        self.args = ap.parse_args()
        self.cachalot = self.args.allocator == "cachalot"
        if self.cachalot:
            import cachalot.torch as ct
            from cachalot import _native, graph_pools

            ct.use(device="sim")
            ct.enable_graph_pools()
            self.stats, self._segments = ct.memory_stats, ct.memory_snapshot
            self._lib = ctypes.CDLL(_native.__file__)
            self._lib.cachalot_pool_use_count.argtypes = [ctypes.c_int] + [ctypes.c_uint64] * 2
            self._hooks = ctypes.CDLL(str(graph_pools.build()))
        else:
            self.stats, self._segments = torch.cuda.memory_stats, torch.cuda.memory_snapshot

    def step(self, name, **more):
        """What one step records: its name, memory_stats, the segments, and `more`."""
        torch.cuda.synchronize()
        return {"step": name, "stats": dict(self.stats()), "segments": self.segments(), **more}

    def segments(self):
        return sorted(
            (
                list(s["segment_pool_id"]),
                s["total_size"],
                s["allocated_size"],
                s["segment_type"],
                s["stream"] != 0,
            )
            for s in self._segments()
        )

    def use_count(self, pool):
        """cachalot's use count of `pool` (-1: no such pool); None under torch's allocator."""
        return self._lib.cachalot_pool_use_count(0, *pool) if self.cachalot else None

    def open_filters(self):
        """The pools the hooks hold torch's filter for; None under torch's allocator."""
        return self._hooks.cachalot_graph_pools_open() if self.cachalot else None
