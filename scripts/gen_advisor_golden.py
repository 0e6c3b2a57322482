#!/usr/bin/env python3
"""Generate tests/fixtures/advisor/: torch 2.15's own allocator (the oracle) on the configurations
that `cachalot tune` ranks, so the advisor's recommendations are checked against real PyTorch.

For every trace of tests/fixtures/golden/index.json, at its "tight" capacity (the smallest
64 MiB multiple on which the default has no OOM, per the golden results):

1. run `cachalot tune TRACE --capacity C --json` and take its ranking (the best few), the
   default and the common advice;
2. replay each of those configurations through shared/oracle/oracle at the same capacity;
3. check, on the oracle's numbers, that the recommendation has no OOM where any of them has
   none, that it is never worse than the default on the ranking (OOMs, retries, estimated
   device-call time, peak reserved), and that every number cachalot printed equals the oracle's;
4. write tests/fixtures/advisor/<trace>.json (the oracle's numbers; no paths, no timings).

crates/advisor/tests/oracle_advice.rs re-runs the search and checks it against these files,
without the oracle. Rerun this script when the search space or the cost model changes:

    CACHALOT_ORACLE_CACHE=~/.cache/cachalot-oracle scripts/gen_advisor_golden.py

Options: --oracle PATH (default ../shared/oracle/oracle), --cachalot PATH (default: build
target/release/cachalot), --only SUBSTRING.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
OUT = FIXTURES / "advisor"

# The fields compared, as (fixture name, cachalot --json name, function of the oracle JSON).
FIELDS = [
    ("num_ooms", "num_ooms", lambda o: o["ooms"]["count"]),
    ("num_alloc_retries", "num_alloc_retries", lambda o: o["num_alloc_retries"]),
    ("num_device_alloc", "num_device_alloc", lambda o: o["num_device_alloc"]),
    ("num_device_free", "num_device_free", lambda o: o["num_device_free"]),
    ("peak_allocated", "peak_allocated", lambda o: o["peak"]["allocated_bytes"]),
    ("peak_reserved", "peak_reserved", lambda o: o["peak"]["reserved_bytes"]),
    ("peak_segments", "peak_segments", lambda o: o["peak"]["segments"]),
    ("cudaMalloc", "cudaMalloc", lambda o: o["fake_device"]["cudaMalloc"]),
    ("cudaMalloc_failed", "cudaMalloc_failed", lambda o: o["fake_device"]["cudaMalloc_failed"]),
    ("cudaFree", "cudaFree", lambda o: o["fake_device"]["cudaFree"]),
    ("cuMemMap", "cuMemMap", lambda o: o["fake_device"]["cuMemMap"]),
    ("cuMemUnmap", "cuMemUnmap", lambda o: o["fake_device"]["cuMemUnmap"]),
    (
        "cuMemAddressReserve",
        "cuMemAddressReserve",
        lambda o: o["fake_device"]["cuMemAddressReserve"],
    ),
    (
        "num_sync_all_streams",
        "num_sync_all_streams",
        lambda o: o["device_stats"]["num_sync_all_streams"],
    ),
    (
        "reserved_bytes_allocated",
        "reserved_bytes_allocated",
        lambda o: o["device_stats"]["reserved_bytes"]["all"]["allocated"],
    ),
]

# The default cost model (crates/advisor/src/cost.rs), µs.
COST = {
    "cuda_malloc_us": 50.0,
    "cuda_malloc_failed_us": 50.0,
    "reserve_per_gib_us": 200.0,
    "cuda_free_us": 100.0,
    "page_map_us": 20.0,
    "page_unmap_us": 20.0,
    "address_reserve_us": 5.0,
    "synchronize_us": 500.0,
}


def cost_us(n):
    c = COST
    return (
        c["cuda_malloc_us"] * n["cudaMalloc"]
        + c["cuda_malloc_failed_us"] * n["cudaMalloc_failed"]
        + c["reserve_per_gib_us"] * (n["reserved_bytes_allocated"] / float(1 << 30))
        + c["cuda_free_us"] * n["cudaFree"]
        + c["page_map_us"] * n["cuMemMap"]
        + c["page_unmap_us"] * n["cuMemUnmap"]
        + c["address_reserve_us"] * n["cuMemAddressReserve"]
        + c["synchronize_us"] * n["num_sync_all_streams"]
    )


# Device-call times within the same step of this many µs are a tie (crates/advisor/src/measure.rs,
# COST_TIE_US); lower peak reserved then decides.
COST_TIE_US = 10_000.0


def key(n):
    c = cost_us(n)
    return (n["num_ooms"], n["num_alloc_retries"], int(c // COST_TIE_US), n["peak_reserved"], c)


def run_oracle(oracle, trace, capacity, conf):
    env = dict(os.environ)
    env.setdefault("CACHALOT_ORACLE_CACHE", str(Path.home() / ".cache" / "cachalot-oracle"))
    env["FAKE_CUDA_CAPACITY"] = str(capacity)
    env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    env.pop("PYTORCH_ALLOC_CONF", None)
    out = subprocess.run(
        [str(oracle), "--max-oom-messages", "1", str(trace)],
        check=False,  # the exit status is read below
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(f"oracle failed on {trace} with {conf!r}: {out.stderr.strip()}")
    o = json.loads(out.stdout)
    return {name: get(o) for name, _, get in FIELDS}


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--oracle", default=str(ROOT.parent / "shared" / "oracle" / "oracle"))
    ap.add_argument("--cachalot", default=None)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    cachalot = args.cachalot
    if cachalot is None:
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "cachalot-cli"], cwd=ROOT, check=True
        )
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        cachalot = str(target / "release" / "cachalot")
    index = json.loads((FIXTURES / "golden" / "index.json").read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    for name, entry in index.items():
        if args.only not in name:
            continue
        trace = FIXTURES / "traces" / f"{name}.csv.gz"
        capacity = entry["scenarios"]["tight"]["FAKE_CUDA_CAPACITY"]
        out = subprocess.run(
            [cachalot, "tune", str(trace), "--capacity", str(capacity), "--json", "--quiet"],
            check=False,  # the exit status is read below
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            sys.exit(f"cachalot tune failed on {name}: {out.stderr.strip()}")
        tuned = json.loads(out.stdout)
        roles = {}
        printed = {}
        for i, e in enumerate(tuned["ranking"]):
            roles.setdefault(e["PYTORCH_CUDA_ALLOC_CONF"], []).append(f"rank {i + 1}")
            printed[e["PYTORCH_CUDA_ALLOC_CONF"]] = e["result"]
        roles.setdefault(tuned["default"]["PYTORCH_CUDA_ALLOC_CONF"], []).append("default")
        printed[tuned["default"]["PYTORCH_CUDA_ALLOC_CONF"]] = tuned["default"]["result"]
        for a in tuned["advice"]:
            roles.setdefault(a["PYTORCH_CUDA_ALLOC_CONF"], []).append("common advice")
            printed[a["PYTORCH_CUDA_ALLOC_CONF"]] = a["result"]
        configs = []
        for conf, role in roles.items():
            oracle = run_oracle(args.oracle, trace, capacity, conf)
            ours = {name_: printed[conf][field] for name_, field, _ in FIELDS}
            if ours != oracle:
                diff = {k: (ours[k], oracle[k]) for k in oracle if ours[k] != oracle[k]}
                sys.exit(
                    f"{name} {conf!r}: cachalot differs from the oracle (cachalot, oracle): {diff}"
                )
            configs.append({"PYTORCH_CUDA_ALLOC_CONF": conf, "roles": role, "oracle": oracle})
        rec = tuned["best"]
        by = {c["PYTORCH_CUDA_ALLOC_CONF"]: c["oracle"] for c in configs}
        if any(c["num_ooms"] == 0 for c in by.values()) and by[rec]["num_ooms"] != 0:
            sys.exit(
                f"{name}: the recommendation {rec!r} runs out of memory in torch where another does not"
            )
        if key(by[rec]) > key(by[""]):
            sys.exit(f"{name}: the recommendation {rec!r} ranks below the default in torch")
        fixture = {
            "trace": f"{name}.csv.gz",
            "capacity": capacity,
            "recommended": rec,
            "cost_model": COST,
            "configs": configs,
        }
        (OUT / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
        d = by[""]
        print(
            f"{name}: recommend {rec or '(default)'!r}: OOMs {by[rec]['num_ooms']} (default {d['num_ooms']}), "
            f"retries {by[rec]['num_alloc_retries']} (default {d['num_alloc_retries']}); "
            f"{len(configs)} configurations replayed by the oracle"
        )


if __name__ == "__main__":
    main()
