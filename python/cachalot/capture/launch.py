"""`cachalot capture [-o TRACE] [--gpu NAME] -- python train.py ARGS…`

Runs the user's program on the capture runtime (a CUDA stack that computes
nothing, looking like the named GPU), records the allocation stream torch's
caching allocator receives, and answers: peak allocated, peak reserved under
the current config, whether it fits, the config that makes it fit, the
smallest GPU it fits.

The process is handled as `cachalot record` handles it (`cachalot._run`): signals are forwarded
to the program and given time, the temporary folder is removed whatever happens, and the exit
status says what happened (EXIT_STATUSES, printed by `--help`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .. import _recorder, _run
from . import _env, analysis, build, gpus
from .compile import env as compile_env
from .compile import summary_line as compile_line

# The runtime enforces no limit during a capture: the stream is recorded
# whole, and out-of-memory is decided afterwards by replaying it at the GPU's
# size. The program is still told the GPU's memory size (FAKE_CUDA_TOTAL).
CAPTURE_CAPACITY = "1T"

# The verdict's statuses (fits, does not fit, tight) are decided in Rust (analysis.EXIT_*).
FITS, DOES_NOT_FIT, USAGE, PROGRAM_FAILED = 0, 1, 2, 3
TIGHT = analysis.EXIT_TIGHT
EXIT_STATUSES = f"""exit status:
  {FITS}  the program ran and its peak fits the GPU, with the memory outside torch at its highest
  {DOES_NOT_FIT}  the program ran and does not fit (a CI gate reads this)
  {TIGHT}  the program ran and fits only within the uncertainty of the memory outside torch
  {USAGE}  no answer from cachalot: a bad option, a missing script, an unusable output path,
     a program that never used CUDA, a runtime that cannot be built
  {PROGRAM_FAILED}  the program itself failed (its own status is `exit_code` in --json); the
     answer, if printed, covers the run up to there
  128+N  interrupted by signal N (130 Ctrl-C, 143 SIGTERM), or the program was killed by it

--json prints only the JSON on stdout; the program's own stdout then goes to stderr."""

# Options of the interpreter that take a value (`python -X dev`, `-W error`); the others
# (-u, -B, -O, -E, -I, -s, -S, -b, -q, -v, -d, -P, -R) stand alone.
_PY_OPTIONS_WITH_VALUE = ("-X", "-W")


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
        _env.ENV_ACTIVE: gpu.key,
    }
    env.update(gpu.env())
    env.update(compile_env(runtime))  # torch.compile: Triton finds the runtime's libcuda
    return env


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="cachalot capture",
        description="Predict a PyTorch program's GPU memory without a GPU: run it on a simulated CUDA "
        "runtime that computes nothing, record the allocation stream, replay it.",
        epilog=f"GPUs: {', '.join(g.key for g in gpus.GPUS)}. Supported torch: {build.SUPPORTED}."
        f"\n\n{EXIT_STATUSES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "-o",
        "--output",
        default="cachalot-capture.pickle",
        help="where to write the trace: a torch snapshot pickle, or RMM CSV if it ends in .csv "
        "(default: %(default)s)",
    )
    ap.add_argument(
        "--gpu",
        default="h100",
        help="the GPU to predict for; `--gpu list` prints the table (default: %(default)s)",
    )
    ap.add_argument(
        "--reserve",
        default=None,
        help="memory outside torch's allocator per process, an exact total replacing the "
        "model of the CUDA context, libraries and NCCL (e.g. 512M; default: the model)",
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print the answer as JSON, alone on stdout (the program's stdout goes to stderr)",
    )
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ARGS…")
    args = ap.parse_args(argv)
    if args.gpu == "list":  # the table, nothing to run
        return args
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        ap.error(
            "nothing to run: give the program after --, e.g. cachalot capture -- python train.py"
        )
    return args


def _size(text: str) -> int:
    """`--reserve`: a byte size, read by the one size reader (`_native.parse_size`)."""
    if text.strip() == "0":  # the default; the reader is for capacities, which are at least 1
        return 0
    native = _recorder.native()
    try:
        return int(native.parse_size(text))
    except Exception as e:  # noqa: BLE001 - ValueError or CachalotError: the reader's message
        raise ValueError(f"--reserve {text!r} is not a size ({e}); e.g. 512M, 1G, 0") from None


def split_python(args: list[str]) -> tuple[list[str], list[str]]:
    """`python`'s own options (`-u`, `-X dev`, `-W error`) and the rest (SCRIPT ARGS, `-m MOD
    ARGS` or `-c CODE ARGS`) of the arguments after `python`."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-m", "-c") or a == "-" or not a.startswith("-"):
            break
        if a == "--":
            return args[:i], args[i + 1 :]
        if a in _PY_OPTIONS_WITH_VALUE:
            i += 2
            continue
        i += 1
    return args[:i], args[i:]


def _fail(message: str, status: int = USAGE) -> int:
    print(f"cachalot capture: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    _recorder.exit_on_sigterm()  # so that the temporary folder goes also on SIGTERM
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.gpu == "list":
        print(gpus.table_text(), end="")
        return 0
    try:
        gpu = gpus.lookup(args.gpu)
    except gpus.UnknownGpu as e:
        return _fail(str(e))
    try:
        reserve = None if args.reserve is None else _size(args.reserve)
    except ValueError as e:
        return _fail(str(e))
    cmd = list(args.command)
    if not _is_python(cmd[0]):
        return _fail(
            f"{cmd[0]!r} is not a Python interpreter; run `cachalot capture -- python SCRIPT …` "
            "(or `python -m MODULE`, `python -c CODE`)"
        )
    py_options, program = split_python(cmd[1:])
    if not program:
        return _fail("nothing to run after `python`: give a script, -m MODULE or -c CODE")
    if program[0] in ("-m", "-c") and len(program) < 2:
        return _fail(f"{program[0]} needs an argument")
    if program[0] not in ("-m", "-c") and not os.path.isfile(program[0]):
        return _fail(
            f"can't open file {os.path.abspath(program[0])!r}: [Errno 2] No such file or directory"
        )
    native = _recorder.native()
    try:
        if args.output == "-":
            raise native.CachalotError("-o -: the trace is a file; give a file name")
        native.check_output(args.output)
    except native.CachalotError as e:
        return _fail(str(e))
    python = shutil.which(cmd[0]) or cmd[0]
    try:
        runtime = build.ensure_runtime(python)
    except build.BuildError as e:
        return _fail(str(e))

    work = Path(tempfile.mkdtemp(prefix="cachalot-capture-"))
    try:
        return _capture(args, gpu, reserve, python, py_options, program, runtime, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _capture(args, gpu, reserve, python, py_options, program, runtime, work) -> int:
    snap, meta_path = work / "snapshot.pickle", work / "meta.json"
    env = dict(os.environ, **runtime_env(runtime, gpu))
    env[_env.ENV_SNAPSHOT], env[_env.ENV_META] = str(snap), str(meta_path)
    # The child imports this cachalot, and nothing else from our environment.
    (work / "path").mkdir()
    (work / "path" / "cachalot").symlink_to(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = str(work / "path") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    child_cmd = [python, *py_options, "-m", "cachalot.capture._boot", *program]
    try:
        done = _run.run(child_cmd, env, stdout=sys.stderr.fileno() if args.json else None)
    except OSError as e:
        return _fail(f"{python}: {e.strerror}", 127 if isinstance(e, FileNotFoundError) else 126)
    if done.interrupted:
        _fail(
            f"interrupted ({_run.signal_name(done.interrupted)}); the program was given the "
            "signal and time to finish; no answer"
        )
        return done.status
    if done.killed_by:
        return _fail(f"the program was killed by {_run.signal_name(done.killed_by)}", done.status)
    if not meta_path.exists():
        return _fail(
            f"the program ended (exit {done.status}) before the capture could write its result",
            done.status if done.status == USAGE else PROGRAM_FAILED,
        )
    meta = json.loads(meta_path.read_text())
    if meta.get("other_allocator"):
        return _fail(
            f"the program switched torch to another allocator ({meta['other_allocator']}, e.g. "
            "cachalot.torch.use()): capture predicts torch's own caching allocator; remove that "
            "call (or make it conditional) for the capture"
        )
    if not meta["used_cuda"]:
        return _fail(
            "the program never used CUDA; nothing to predict",
            PROGRAM_FAILED if done.status else USAGE,
        )
    try:
        out = write_trace(snap, args.output, work)
        write_device_info(out, gpu)
        # A FIFO or device took the trace: the prediction reads the copy in `work`.
        pred = analysis.predict(
            out if os.path.isfile(out) else str(snap),
            gpu,
            reserve=reserve,
            warnings=meta["warnings"],
            torch_stats=meta["torch_stats"],
        )
    except (analysis.AnalysisError, native_error()) as e:
        return _fail(str(e))
    if args.json:
        d = dict(pred.to_dict(), torch=meta["torch"], exit_code=done.status)
        d["compile"] = meta.get("compile")  # what torch.compile did (compile.py)
        print(json.dumps(dict(d, seconds=meta["seconds"]), indent=1))
    else:
        print(
            f"\ncachalot capture: {' '.join(args.command)} as {gpu.name} (simulated, torch "
            f"{meta['torch']}), {meta['seconds']:.1f} s",
            file=sys.stderr,
        )
        if (meta.get("compile") or {}).get("graphs_compiled"):
            print(compile_line(meta["compile"]), file=sys.stderr)
        print(pred.report())
    if meta.get("error") or done.status:
        first = (meta.get("error") or f"exit {done.status}").splitlines()[0][:300]
        _fail(f"the program failed ({first}); the answer covers the run up to there")
        return PROGRAM_FAILED
    return pred.exit_status


def native_error() -> type[Exception]:
    return _recorder.native().CachalotError


def write_trace(snapshot: Path, output: str, work: Path) -> str:
    """Put the captured snapshot at `output` through cachalot's one writer (a regular file
    replaced only once complete; a FIFO or device written through); RMM CSV if it ends in
    .csv, converted in-process into `work` first."""
    native = _recorder.native()
    if Path(output).suffix == ".csv":
        csv = work / "trace.csv"
        native.convert(str(snapshot), str(csv))
        data = csv.read_bytes()
    else:
        data = snapshot.read_bytes()
    native.write_output(output, data)
    return output


def write_device_info(output: str, gpu: gpus.Gpu) -> None:
    """`STEM.device.json` beside a trace written to a regular file, as `cachalot record`
    writes it: `cachalot tune --gpu` then knows which GPU the trace was captured as."""
    if os.path.isfile(output):
        conf = _recorder.native().env_conf()  # as torch reads it, in Rust
        info = json.dumps(gpus.device_info(gpu, conf), indent=1).encode()
        _recorder.native().write_output(_recorder.info_path(output), info)


if __name__ == "__main__":
    sys.exit(main())
