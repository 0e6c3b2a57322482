#!/usr/bin/env python3
"""Generate tests/fixtures/golden-async: what torch 2.15 does with backend:cudaMallocAsync and
with PYTORCH_NO_CUDA_MEMORY_CACHING=1 on every fixture trace, according to the oracle.

usage: scripts/gen_async_golden.py [--oracle PATH] [--only SUBSTRING]

Needs the oracle set up once (`../shared/oracle/setup.sh`; set CACHALOT_ORACLE_CACHE if its
cache is not the default). Reads tests/fixtures/golden/index.json for the traces and the
capacity of each trace's `oom` scenario, and writes, per trace and scenario:

  golden-async/<trace>/<scenario>.json   the oracle's JSON without `trace` and `timing`, plus
                                         `segments_rows` and `segments_sha256` (of the whole
                                         --segments CSV text, header included)
  golden-async/<trace>/<scenario>.segments.csv.gz
                                         the --segments log itself, when it compresses to at
                                         most 64 KiB (the digest covers the others)
  golden-async/index.json                the scenarios, their settings and headline numbers

Scenarios:
  async        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, 80 GiB
  async-oom    the same on the capacity of the trace's `oom` golden scenario (OOMs happen)
  no-caching   PYTORCH_NO_CUDA_MEMORY_CACHING=1, 80 GiB

The output is deterministic (gzip without timestamps, sorted keys in index.json), so running
it twice changes nothing. crates/replay/tests/golden.rs (direct_backends_match_the_oracle) replays the same scenarios through
cachalot and requires identical results.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "golden-async")
DEFAULT_ORACLE = os.path.join(ROOT, "..", "shared", "oracle", "oracle")
GIB80 = 80 << 30
LOG_LIMIT = 64 << 10


def scenarios(entry):
    oom_capacity = entry["scenarios"]["oom"]["FAKE_CUDA_CAPACITY"]
    return {
        "async": {
            "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
            "PYTORCH_NO_CUDA_MEMORY_CACHING": False,
            "FAKE_CUDA_CAPACITY": GIB80,
        },
        "async-oom": {
            "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
            "PYTORCH_NO_CUDA_MEMORY_CACHING": False,
            "FAKE_CUDA_CAPACITY": oom_capacity,
        },
        "no-caching": {
            "PYTORCH_CUDA_ALLOC_CONF": "",
            "PYTORCH_NO_CUDA_MEMORY_CACHING": True,
            "FAKE_CUDA_CAPACITY": GIB80,
        },
    }


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as f:
        f.write(data)
    return buf.getvalue()


def run_oracle(oracle, trace, sc):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
    }
    env["PYTORCH_CUDA_ALLOC_CONF"] = sc["PYTORCH_CUDA_ALLOC_CONF"]
    env["FAKE_CUDA_CAPACITY"] = str(sc["FAKE_CUDA_CAPACITY"])
    if sc["PYTORCH_NO_CUDA_MEMORY_CACHING"]:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    with tempfile.TemporaryDirectory() as d:
        seg = os.path.join(d, "seg.csv")
        r = subprocess.run(
            [oracle, "--segments", seg, trace], check=False, env=env, capture_output=True
        )
        if r.returncode not in (0, 3):
            sys.exit(
                f"oracle failed on {trace} ({sc}): exit {r.returncode}\n"
                f"{r.stderr.decode(errors='replace')}"
            )
        with open(seg, "rb") as f:
            log = f.read()
    return json.loads(r.stdout), log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle", default=os.environ.get("CACHALOT_ORACLE", DEFAULT_ORACLE))
    ap.add_argument("--only", default="", help="only traces whose name contains this")
    args = ap.parse_args()
    with open(os.path.join(FIXTURES, "golden", "index.json")) as f:
        golden = json.load(f)
    index_path = os.path.join(OUT, "index.json")
    index = {}
    if args.only and os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    for name, entry in sorted(golden.items()):
        if args.only not in name:
            continue
        trace_rel = entry["trace"]  # relative to tests/fixtures, e.g. traces/x.csv.gz
        trace = os.path.join(FIXTURES, trace_rel)
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        out_sc = {}
        for sc_name, sc in scenarios(entry).items():
            result, log = run_oracle(args.oracle, trace, sc)
            result.pop("trace", None)
            result.pop("timing", None)
            result["segments_rows"] = log.count(b"\n") - 1
            result["segments_sha256"] = hashlib.sha256(log).hexdigest()
            base = os.path.join(OUT, name, sc_name)
            with open(base + ".json", "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
            packed = gzip_bytes(log)
            log_path = base + ".segments.csv.gz"
            has_log = len(packed) <= LOG_LIMIT
            if has_log:
                with open(log_path, "wb") as f:
                    f.write(packed)
            elif os.path.exists(log_path):
                os.remove(log_path)
            out_sc[sc_name] = dict(
                sc,
                segments_log=has_log,
                num_ooms=result["ooms"]["count"],
                peak_reserved=result["peak"]["reserved_bytes"],
                fatal_error=result.get("fatal_error") is not None,
            )
            print(
                f"{name}/{sc_name}: {result['segments_rows']} device calls, "
                f"{result['ooms']['count']} OOMs{'' if has_log else ' (digest only)'}"
            )
        index[name] = {"trace": trace_rel, "scenarios": out_sc}
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
