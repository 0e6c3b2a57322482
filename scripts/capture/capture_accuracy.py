#!/usr/bin/env python
"""How close `cachalot capture` comes to real PyTorch: the full-size comparison.

    python scripts/capture/capture_accuracy.py OUT [--cases gpt2_fp32,…] [--python VENV/bin/python]

For every case of shared/fakegpu/train_snapshots.py (GPT-2, Llama with GQA,
BERT, ViT-B/16, ResNet-50 in fp32 and bf16 autocast, 3 AdamW steps; GPT-2
generate with a KV cache):

* measured: real torch 2.15 on the team's fake GPU (shared/fakegpu/run.sh
  train_snapshots.py), once with the default allocator config and once with
  expandable_segments:True: torch's own memory_stats() peaks. The true
  minimum capacity is the smallest multiple of 64 MiB on which torch's own
  allocator (shared/oracle) runs that measured stream without OOM.
* predicted: `cachalot capture --json -- python scripts/capture/capture_workload.py
  CASE` (the same workload as a plain script, on the runtime the package
  ships), and cachalot's replay of the captured trace with
  expandable_segments:True.

It writes OUT/accuracy.{json,md} and exits 1 if a rule is broken: peak
allocated within 1 %, peak reserved within 2 % (both configs), minimum
capacity within 2 % and never more than 64 MiB under the true need.

On a machine with a GPU, `--real` takes the measured side from a real run
(train_snapshots.py without the fake stack) instead; the rules are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("CACHALOT_SHARED", REPO.parent / "shared"))
FAKEGPU = SHARED / "fakegpu"
ORACLE = SHARED / "oracle" / "oracle"
CASES = [
    f"{m}_{p}" for m in ("gpt2", "llama", "bert", "vit_b_16", "resnet50") for p in ("fp32", "bf16")
]
CASES.append("gpt2_generate")
# Settings the issue does not name, measured by the workload itself on the fake GPU.
EXTRA = [
    "gpt2_bf16+fused",
    "gpt2_fp32+accum2",
    "llama_bf16+ckpt",
    "gpt2_fp32+stream",
    "bert_fp32+keepgrad",
]
STEP = 64 << 20
EXPANDABLE = "expandable_segments:True"
GiB = float(1 << 30)


def cli() -> list[str]:
    """The `cachalot` command: CACHALOT_BIN, else this checkout's newest build (scripts/test.sh
    builds with the ci profile), else the installed package's console script."""
    if os.environ.get("CACHALOT_BIN"):
        return [os.environ["CACHALOT_BIN"]]
    built = [REPO / "target" / b / "cachalot" for b in ("ci", "release", "debug")]
    built = [p for p in built if p.exists()]
    if built:
        return [str(max(built, key=lambda p: p.stat().st_mtime))]
    try:
        import cachalot._native  # noqa: F401 (is the package with its native module importable?)
    except ImportError:
        raise SystemExit(
            "build the CLI first (cargo build --release -p cachalot-cli), or install cachalot"
        ) from None
    return [sys.executable, "-m", "cachalot"]


def measure(case: str, out: Path, python: str, conf: str | None, real: bool) -> dict:
    """torch's own peaks for `case` on the fake GPU (or a real one)."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHON=python)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    runner = [python] if real else [str(FAKEGPU / "run.sh")]
    if "+" in case:  # settings train_snapshots.py has no case for: the workload measures itself
        workload = REPO / "scripts" / "capture_workload.py"
        cmd = [*runner, str(workload), case, "--truth", str(out)]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads((out / f"{case}.json").read_text())
    subprocess.run(
        [
            *runner,
            str(FAKEGPU / "train_snapshots.py"),
            str(out),
            "--cases",
            case,
            "--stacks",
            "python",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((out / f"{case}.json").read_text())


def capture(case: str, out: Path, python: str) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    t0 = time.perf_counter()
    p = subprocess.run(
        [
            python,
            "-c",
            "import sys; from cachalot.capture import main; sys.exit(main())",
            "-o",
            str(out / f"{case}.pickle"),
            "--json",
            "--",
            python,
            str(REPO / "scripts" / "capture_workload.py"),
            case,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode != 0:
        raise SystemExit(f"capture of {case} failed:\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def replay_peak_reserved(trace: str, conf: str) -> int:
    p = subprocess.run(
        [*cli(), "replay", trace, "--capacity", str(1 << 40), "--conf", conf, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(p.stdout)["peak"]["reserved_bytes"])


def oracle_fits(csv: Path, capacity: int) -> bool:
    env = dict(os.environ, FAKE_CUDA_CAPACITY=str(capacity))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    p = subprocess.run(
        [str(ORACLE), str(csv)], capture_output=True, text=True, env=env, check=False
    )
    if p.returncode not in (0, 1):
        raise SystemExit(f"oracle failed on {csv}: {p.stderr[-500:]}")
    return json.loads(p.stdout)["num_ooms"] == 0


def true_min_capacity(snapshot: Path, peak_reserved: int) -> int:
    """Smallest multiple of 64 MiB on which torch's own allocator runs the measured stream."""
    csv = snapshot.with_suffix(".csv")
    subprocess.run([*cli(), "convert", str(snapshot), str(csv)], check=True, capture_output=True)
    hi = -(-peak_reserved // STEP) * STEP + STEP
    while not oracle_fits(csv, hi):
        hi *= 2
    lo = 0
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // STEP * STEP
        if mid <= lo:
            break
        if oracle_fits(csv, mid):
            hi = mid
        else:
            lo = mid
    return hi


def err(pred: int, meas: int) -> float:
    return 100.0 * (pred - meas) / meas if meas else 0.0


def row(case: str, out: Path, python: str, real: bool) -> dict:
    truth = measure(case, out / "measured", python, None, real)
    truth_exp = measure(case, out / "measured-expandable", python, EXPANDABLE, real)
    cap = capture(case, out / "captured", python)
    r = {
        "case": case,
        "alloc_pred": cap["peak_allocated"],
        "alloc_meas": truth["peaks"]["allocated_peak"],
        "res_pred": cap["peak_reserved"],
        "res_meas": truth["peaks"]["reserved_peak"],
        "res_exp_pred": replay_peak_reserved(cap["trace"], EXPANDABLE),
        "res_exp_meas": truth_exp["peaks"]["reserved_peak"],
        "min_pred": cap["min_capacity"],
        "min_true": true_min_capacity(
            out / "measured" / f"{case}.pickle", truth["peaks"]["reserved_peak"]
        ),
        "events_pred": cap["events"],
        "capture_s": cap["seconds"],
        "capture_wall_s": cap["wall_s"],
        "warnings": cap["warnings"],
    }
    r["ok"] = (
        abs(err(r["alloc_pred"], r["alloc_meas"])) <= 1.0
        and abs(err(r["res_pred"], r["res_meas"])) <= 2.0
        and abs(err(r["res_exp_pred"], r["res_exp_meas"])) <= 2.0
        and abs(err(r["min_pred"], r["min_true"])) <= 2.0
        and r["min_pred"] >= r["min_true"] - STEP
    )
    return r


def table(rows: list[dict]) -> str:
    def g(b):
        return f"{b / GiB:.3f}"

    head = (
        "| case | peak allocated GiB pred / meas (err) | peak reserved GiB, default: pred / meas (err) | "
        "peak reserved GiB, expandable: pred / meas (err) | min capacity GiB pred / true (diff MiB) | "
        "capture s | rules |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {g(r['alloc_pred'])} / {g(r['alloc_meas'])} ({err(r['alloc_pred'], r['alloc_meas']):+.2f} %) "
            f"| {g(r['res_pred'])} / {g(r['res_meas'])} ({err(r['res_pred'], r['res_meas']):+.2f} %) "
            f"| {g(r['res_exp_pred'])} / {g(r['res_exp_meas'])} ({err(r['res_exp_pred'], r['res_exp_meas']):+.2f} %) "
            f"| {g(r['min_pred'])} / {g(r['min_true'])} ({(r['min_pred'] - r['min_true']) / (1 << 20):+.0f}) "
            f"| {r['capture_s']:.1f} | {'ok' if r['ok'] else 'BROKEN'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out")
    ap.add_argument(
        "--cases",
        default="named",
        help="named (the issue's 11 cases), extra (fused AdamW, accumulation, checkpointing, a side "
        "stream, kept gradients), all, or a comma list",
    )
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/cachalot-torch/bin/python"))
    ap.add_argument(
        "--real",
        action="store_true",
        help="measure on this machine's real GPU instead of the fake one",
    )
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    groups = {"named": CASES, "extra": EXTRA, "all": CASES + EXTRA}
    for case in groups.get(args.cases) or args.cases.split(","):
        r = row(case, out, args.python, args.real)
        print(
            f"{case}: {'ok' if r['ok'] else 'BROKEN'}  {json.dumps({k: v for k, v in r.items() if k != 'warnings'})}",
            flush=True,
        )
        rows.append(r)
    (out / "accuracy.json").write_text(json.dumps(rows, indent=1))
    md = table(rows)
    (out / "accuracy.md").write_text(md + "\n")
    print(md)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
