"""`cachalot capture [-o TRACE] [--gpu NAME] -- python train.py ARGS…`

Runs the user's program on the capture runtime (a CUDA stack that computes
nothing, looking like the named GPU), records the allocation stream torch's
caching allocator receives, and answers: peak allocated, peak reserved under
the current config, whether it fits, the config that makes it fit, the
smallest GPU it fits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _env, analysis, build, gpus

# The runtime enforces no limit during a capture: the stream is recorded
# whole, and out-of-memory is decided afterwards by replaying it at the GPU's
# size. The program is still told the GPU's memory size (FAKE_CUDA_TOTAL).
CAPTURE_CAPACITY = "1T"


def _is_python(cmd: str) -> bool:
    name = os.path.basename(cmd)
    return name.startswith("python") or name == "py"


def runtime_env(runtime: Path, gpu: gpus.Gpu) -> dict[str, str]:
    """Environment variables that put a process on the capture runtime as `gpu`."""
    preload = ":".join(str(runtime / lib) for lib in build.LIBRARIES)
    old = os.environ.get("LD_PRELOAD")
    env = {
        "LD_PRELOAD": preload + (":" + old if old else ""),
        "CUDA_VISIBLE_DEVICES": "0",  # the runtime has one device
        "FAKE_CUDA_CAPACITY": CAPTURE_CAPACITY,
        "TORCH_COMPILE_DISABLE": "1",  # Triton kernels cannot load here; see _boot
        _env.ENV_ACTIVE: gpu.key,
    }
    env.update(gpu.env())
    return env


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="cachalot capture",
        description="Predict a PyTorch program's GPU memory without a GPU: run it on a simulated CUDA "
        "runtime that computes nothing, record the allocation stream, replay it.",
        epilog=f"GPUs: {', '.join(g.key for g in gpus.GPUS)}. Supported torch: {build.SUPPORTED}.",
    )
    ap.add_argument(
        "-o",
        "--output",
        default="cachalot-capture.pickle",
        help="where to write the trace: a torch snapshot pickle, or RMM CSV if it ends in .csv "
        "(default: %(default)s)",
    )
    ap.add_argument("--gpu", default="h100", help="the GPU to predict for (default: %(default)s)")
    ap.add_argument(
        "--reserve",
        default="0",
        help="memory to keep out of the allocator's reach: CUDA context and library handles, "
        "which a capture cannot see (e.g. 512M; default 0)",
    )
    ap.add_argument("--json", action="store_true", help="print the answer as JSON")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ARGS…")
    args = ap.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        ap.error(
            "nothing to run: give the program after --, e.g. cachalot capture -- python train.py"
        )
    return args


def _bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMGT" and t else t
    try:
        value = int(float(num) * mult)
    except ValueError:
        raise SystemExit(
            f"cachalot capture: --reserve {text!r} is not a size (bytes, or 512M, 1G)"
        ) from None
    if value < 0:
        raise SystemExit(f"cachalot capture: --reserve {text!r} is negative")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        gpu = gpus.lookup(args.gpu)
    except gpus.UnknownGpu as e:
        print(f"cachalot capture: {e}", file=sys.stderr)
        return 2
    reserve = _bytes(args.reserve)
    cmd = list(args.command)
    if not _is_python(cmd[0]):
        print(
            f"cachalot capture: {cmd[0]!r} is not a Python interpreter; run `cachalot capture -- python "
            "SCRIPT …` (or `python -m MODULE`, `python -c CODE`)",
            file=sys.stderr,
        )
        return 2
    python = shutil.which(cmd[0]) or cmd[0]
    try:
        runtime = build.ensure_runtime(python)
    except build.BuildError as e:
        print(f"cachalot capture: {e}", file=sys.stderr)
        return 1

    work = Path(tempfile.mkdtemp(prefix="cachalot-capture-"))
    try:
        snap, meta_path = work / "snapshot.pickle", work / "meta.json"
        env = dict(os.environ, **runtime_env(runtime, gpu))
        env[_env.ENV_SNAPSHOT], env[_env.ENV_META] = str(snap), str(meta_path)
        # The child imports this cachalot, and nothing else from our environment.
        (work / "path").mkdir()
        (work / "path" / "cachalot").symlink_to(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = str(work / "path") + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        child = subprocess.run(
            [python, "-m", "cachalot.capture._boot", *cmd[1:]], env=env, check=False
        )
        if not meta_path.exists():
            print(
                f"cachalot capture: the program ended (exit {child.returncode}) before the capture could "
                "write its result",
                file=sys.stderr,
            )
            return child.returncode or 1
        meta = json.loads(meta_path.read_text())
        if not meta["used_cuda"]:
            print(
                "cachalot capture: the program never used CUDA; nothing to predict", file=sys.stderr
            )
            return child.returncode or 1
        out = write_trace(snap, args.output)
        pred = analysis.predict(
            out, gpu, reserve=reserve, warnings=meta["warnings"], torch_stats=meta["torch_stats"]
        )
    except analysis.AnalysisError as e:
        print(f"cachalot capture: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                dict(
                    pred.to_dict(),
                    torch=meta["torch"],
                    exit_code=child.returncode,
                    seconds=meta["seconds"],
                ),
                indent=1,
            )
        )
    else:
        print(
            f"\ncachalot capture: {' '.join(cmd)} as {gpu.name} (simulated, torch {meta['torch']}), "
            f"{meta['seconds']:.1f} s",
            file=sys.stderr,
        )
        print(pred.report())
    if meta.get("error"):
        print(
            f"cachalot capture: the program failed ({meta['error'].splitlines()[0][:300]}); the answer covers "
            "the run up to there",
            file=sys.stderr,
        )
    return child.returncode


def write_trace(snapshot: Path, output: str) -> str:
    """Put the captured snapshot at `output` (atomically); CSV through `cachalot convert`."""
    dest = Path(output)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    if dest.suffix == ".csv":
        p = subprocess.run(
            analysis.engine() + ["convert", str(snapshot), str(tmp)],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            raise analysis.AnalysisError(
                f"converting the capture to CSV failed: {p.stderr.strip()[-1000:]}"
            )
    else:
        shutil.copyfile(snapshot, tmp)
    os.replace(tmp, dest)
    return str(dest)


if __name__ == "__main__":
    sys.exit(main())
