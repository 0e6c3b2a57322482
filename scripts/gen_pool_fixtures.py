#!/usr/bin/env python3
"""Writes tests/fixtures/pools: every oracle example trace that uses the private-pool,
empty_cache or record_stream rows, and cachalot's own such traces (tests/fixtures/pool_traces,
not in ../shared), replayed by the oracle (torch 2.15's allocator) under several
configurations and capacities. crates/replay/tests/pool_fixtures.rs compares cachalot
with these outputs.

    scripts/gen_pool_fixtures.py [ORACLE_DIR]   (default: ../shared/oracle)

Per trace T and scenario S: T.csv (the trace), T/S.json (the oracle's JSON without timing)
and T/S.segments.csv (its --segments log). index.json lists the scenarios with their
environment.
"""

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE_DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "oracle")
OUT = os.path.join(ROOT, "tests", "fixtures", "pools")
NEW_ROWS = (
    "pool_begin",
    "pool_end",
    "graph_begin",
    "graph_end",
    "pool_release",
    "empty_cache",
    "record_stream",
)
MIB = 1 << 20
# The keys the fixture test compares (the rest says how the run was set up, or is timing).
KEPT = (
    "trace_stats",
    "events",
    "peak",
    "final",
    "num_device_alloc",
    "num_device_free",
    "num_alloc_retries",
    "num_ooms",
    "ooms",
    "device_stats",
    "pools",
    "fake_device",
    "cudaMemGetInfo_at_end",
    "fatal_error",
)
SCENARIOS = {
    "default": ("", 80 << 30),
    "expandable": ("expandable_segments:True", 80 << 30),
    "max_split": ("max_split_size_mb:20", 80 << 30),
    "gc": ("garbage_collection_threshold:0.5,per_process_memory_fraction:0.6", 100 * MIB),
    "small": ("", 100 * MIB),
    "small_expandable": ("expandable_segments:True", 100 * MIB),
    "tiny": ("", 30 * MIB),
    "async": ("backend:cudaMallocAsync", 80 << 30),
    "uncached": ("", 80 << 30),
}
# Scenarios run with PYTORCH_NO_CUDA_MEMORY_CACHING=1.
UNCACHED = {"uncached"}


def main():
    sources = [
        os.path.join(ORACLE_DIR, "tests", "traces"),
        os.path.join(ROOT, "tests", "fixtures", "pool_traces"),
    ]
    oracle = os.path.join(ORACLE_DIR, "oracle")
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    index = {}
    names = sorted((name, d) for d in sources for name in os.listdir(d))
    for name, traces_dir in names:
        if not name.endswith(".csv"):
            continue
        with open(os.path.join(traces_dir, name)) as f:
            text = f.read()
        actions = {
            line.split(",")[2].strip().lower()
            for line in text.splitlines()[1:]
            if line.count(",") >= 2
        }
        if not actions & set(NEW_ROWS):
            continue
        stem = name[:-4]
        shutil.copy(os.path.join(traces_dir, name), os.path.join(OUT, name))
        os.makedirs(os.path.join(OUT, stem))
        scenarios = {}
        for scenario, (conf, capacity) in SCENARIOS.items():
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf, FAKE_CUDA_CAPACITY=str(capacity))
            env.pop("PYTORCH_ALLOC_CONF", None)
            env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
            if scenario in UNCACHED:
                env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
            seg = os.path.join(OUT, stem, scenario + ".segments.csv")
            p = subprocess.run(
                [oracle, "--segments", seg, os.path.join(OUT, name)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if p.returncode == 65:
                os.remove(seg) if os.path.exists(seg) else None
                scenarios[scenario] = {
                    "PYTORCH_CUDA_ALLOC_CONF": conf,
                    "FAKE_CUDA_CAPACITY": capacity,
                    "exit": 65,
                    "stderr": p.stderr.strip(),
                }
                continue
            if p.returncode not in (0, 3):
                sys.exit(f"{name} {scenario}: oracle exit {p.returncode}: {p.stderr}")
            full = json.loads(p.stdout)
            out = {k: full[k] for k in KEPT if k in full}
            with open(os.path.join(OUT, stem, scenario + ".json"), "w") as f:
                json.dump(out, f, separators=(",", ":"))
                f.write("\n")
            scenarios[scenario] = {
                "PYTORCH_CUDA_ALLOC_CONF": conf,
                "FAKE_CUDA_CAPACITY": capacity,
                "exit": p.returncode,
            }
            if scenario in UNCACHED:
                scenarios[scenario]["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        index[stem] = scenarios
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(index)} traces, {sum(len(s) for s in index.values())} scenarios in {OUT}")


if __name__ == "__main__":
    main()
