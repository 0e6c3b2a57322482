#!/usr/bin/env python3
"""Counts and byte totals of torch memory snapshots, as Python reads them.

Writes the expected numbers that crates/torchfmt/tests/readers.rs compares cachalot's snapshot
readers against. Usage:

    python3 crates/torchfmt/scripts/snapshot_counts.py tests/fixtures/pickle/*.pickle.gz \
        tests/fixtures/snapshots/*.json.gz > tests/fixtures/snapshots/expected_counts.json

Only the standard library: `pickle` for pickles, `json` for the JSON form, `gzip` when the file
is compressed. The replay rules are those of shared/traces/README.md: alloc -> allocate,
free_completed -> free, frees of blocks allocated before the window dropped, streams renumbered
in order of first appearance.
"""
import collections
import gzip
import json
import os
import pickle
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:1] == b"\x80":
        return pickle.loads(data)
    return json.loads(data)


def replay_counts(trace):
    live, streams = set(), {}
    allocs = frees = dropped = alloc_bytes = 0
    for e in trace:
        a = e["action"]
        if a in ("alloc", "free_completed"):
            streams.setdefault(e["stream"], len(streams))
        if a == "alloc":
            live.add(e["addr"])
            allocs += 1
            alloc_bytes += e["size"]
        elif a == "free_completed":
            if e["addr"] in live:
                live.discard(e["addr"])
                frees += 1
            else:
                dropped += 1
    return {
        "allocs": allocs,
        "frees": frees,
        "dropped_frees": dropped,
        "streams": len(streams),
        "alloc_bytes": alloc_bytes,
    }


def counts(snap):
    segs = snap["segments"]
    out = {
        "segments": len(segs),
        "blocks": sum(len(s["blocks"]) for s in segs),
        "total_size": sum(s["total_size"] for s in segs),
        "allocated_size": sum(s["allocated_size"] for s in segs),
        "active_size": sum(s["active_size"] for s in segs),
        "requested_size": sum(s["requested_size"] for s in segs),
        "devices": [],
    }
    for dev, trace in enumerate(snap["device_traces"]):
        actions = collections.defaultdict(lambda: {"count": 0, "bytes": 0})
        for e in trace:
            actions[e["action"]]["count"] += 1
            actions[e["action"]]["bytes"] += e["size"]
        out["devices"].append(
            {
                "device": dev,
                "entries": len(trace),
                "actions": dict(sorted(actions.items())),
                "replay": replay_counts(trace),
            }
        )
    return out


result = {os.path.basename(p): counts(load(p)) for p in sys.argv[1:]}
json.dump(result, sys.stdout, indent=1, sort_keys=True)
print()
