#!/usr/bin/env python3
"""Record the oracle's answer for every case in tests/fixtures/reproducers/index.json.

usage: scripts/record_reproducers.py [NAME ...]

For each case NAME (trace NAME.csv) it runs ../shared/oracle/oracle with the case's capacity,
PYTORCH_CUDA_ALLOC_CONF, no-caching variables and --ignore-streams, and writes
NAME.oracle.json (the oracle's JSON without its timing, plus "exit_status") and
NAME.segments.csv (its --segments file). crates/replay/tests/reproducers.rs replays the same
cases through cachalot and compares.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DIR = os.path.join(ROOT, "tests", "fixtures", "reproducers")
ORACLE = os.environ.get("CACHALOT_ORACLE", os.path.join(ROOT, "..", "shared", "oracle", "oracle"))


def record(name, case):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTORCH_ALLOC_CONF",
            "PYTORCH_NO_CUDA_MEMORY_CACHING",
            "PYTORCH_NO_HIP_MEMORY_CACHING",
        )
    }
    env["FAKE_CUDA_CAPACITY"] = str(case["capacity"])
    env["PYTORCH_CUDA_ALLOC_CONF"] = case["conf"]
    for var in ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING"):
        if var in case:
            env[var] = case[var]
    with tempfile.TemporaryDirectory() as d:
        seg = os.path.join(d, "seg.csv")
        cmd = [ORACLE] + (["--ignore-streams"] if case.get("ignore_streams") else [])
        r = subprocess.run(
            cmd + ["--segments", seg, os.path.join(DIR, name + ".csv")],
            check=False,  # the exit status is read below
            env=env,
            capture_output=True,
            text=True,
        )
        if r.returncode not in (0, 2, 3):
            raise SystemExit(f"{name}: oracle exit {r.returncode}: {r.stderr}")
        out = json.loads(r.stdout) if r.returncode != 2 else {}
        out.pop("timing", None)
        out.pop("trace", None)
        out["exit_status"] = r.returncode
        with open(os.path.join(DIR, name + ".oracle.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        with open(seg) as src, open(os.path.join(DIR, name + ".segments.csv"), "w") as dst:
            dst.write(src.read())
    print(f"{name}: exit {r.returncode}")


def main():
    with open(os.path.join(DIR, "index.json")) as f:
        index = json.load(f)
    for name, case in index.items():
        if len(sys.argv) == 1 or name in sys.argv[1:]:
            record(name, case)


if __name__ == "__main__":
    main()
