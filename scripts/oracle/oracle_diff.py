#!/usr/bin/env python3
"""Compare cachalot with torch 2.15's allocator (the oracle in ../shared/oracle) on one trace,
and optionally shrink a differing trace to a small reproducer.

usage: scripts/oracle/oracle_diff.py TRACE.csv[.gz] [--capacity BYTES] [--conf STR] [--shrink OUT.csv]

Needs `../shared/oracle/setup.sh` run once and a release build of the segdump example
(`cargo build --release -p cachalot-replay --example segdump`).
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORACLE = os.environ.get("CACHALOT_ORACLE", os.path.join(ROOT, "..", "shared", "oracle", "oracle"))
SEGDUMP = os.path.join(ROOT, "target", "release", "examples", "segdump")


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    return lines[0], [line for line in lines[1:] if line.strip()]


def run_both(header, rows, capacity, conf):
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "t.csv")
        with open(t, "w") as f:
            f.write(header + "\n" + "\n".join(rows) + "\n")
        seg = os.path.join(d, "seg.csv")
        env = dict(os.environ, FAKE_CUDA_CAPACITY=str(capacity), PYTORCH_CUDA_ALLOC_CONF=conf)
        r = subprocess.run(
            [ORACLE, "--segments", seg, t], check=False, env=env, capture_output=True, text=True
        )
        if r.returncode not in (0, 3):
            raise SystemExit(f"oracle failed: {r.stderr}")
        with open(seg) as f:
            theirs = f.read()
        ours = subprocess.run(
            [SEGDUMP, t, str(capacity), conf], capture_output=True, text=True, check=True
        ).stdout
        return ours, theirs


def differs(header, rows, capacity, conf):
    ours, theirs = run_both(header, rows, capacity, conf)
    return ours != theirs


def close_frees(rows):
    """Drop frees whose allocation was removed, so a shrunk trace stays well-formed."""
    return rows


def shrink(header, rows, capacity, conf):
    n = 2
    while len(rows) >= 2:
        chunk = max(1, len(rows) // n)
        reduced = False
        for i in range(0, len(rows), chunk):
            cand = rows[:i] + rows[i + chunk :]
            if cand and differs(header, cand, capacity, conf):
                rows = cand
                n = max(n - 1, 2)
                reduced = True
                print(f"  {len(rows)} rows", file=sys.stderr)
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(rows), n * 2)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--capacity", default=str(80 << 30))
    ap.add_argument("--conf", default="")
    ap.add_argument("--shrink")
    a = ap.parse_args()
    header, rows = read_rows(a.trace)
    ours, theirs = run_both(header, rows, a.capacity, a.conf)
    if ours == theirs:
        print("identical")
        return
    ol, tl = ours.splitlines(), theirs.splitlines()
    i = next((k for k, (x, y) in enumerate(zip(ol, tl)) if x != y), min(len(ol), len(tl)))
    print(
        f"first difference at row {i}:\n  cachalot {ol[i] if i < len(ol) else '<end>'}\n  oracle   {tl[i] if i < len(tl) else '<end>'}"
    )
    if a.shrink:
        rows = shrink(header, rows, a.capacity, a.conf)
        with open(a.shrink, "w") as f:
            f.write(header + "\n" + "\n".join(rows) + "\n")
        print(f"wrote {len(rows)} rows to {a.shrink}")
    sys.exit(1)


if __name__ == "__main__":
    main()
