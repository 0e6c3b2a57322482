"""`cachalot capture [-o TRACE] [--gpu NAME] -- COMMAND…` (python, torchrun, accelerate launch…)

Runs the user's command on the capture runtime (a CUDA stack that computes nothing, looking
like the named GPU, as many of them as the job uses, with a simulated NCCL), records the
allocation stream torch's caching allocator receives in every process that uses CUDA (each
rank of a distributed job), and answers per rank and for the job: peak allocated, peak
reserved under the current config, whether it fits, the config that makes it fit, the
smallest GPU it fits (`ranks`).

Every process the command starts is on the runtime (LD_PRELOAD) and runs the one injection
mechanism `cachalot record` uses too (`cachalot/_boot/sitecustomize.py` → `_boot.start`); the
launcher itself is only run. The command is handled as `cachalot record` handles it
(`cachalot._run`): signals are forwarded and given time, processes left behind are ended, the
temporary folder is removed whatever happens, and the exit status says what happened
(EXIT_STATUSES, printed by `--help`).
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
from . import _env, analysis, build, cover, gpus, ranks, values_bounds
from .compile import env as compile_env
from .compile import summary_line as compile_line

_BOOT = Path(__file__).resolve().parents[1] / "_boot"  # sitecustomize.py, record's too

# The runtime enforces no limit during a capture: the stream is recorded
# whole, and out-of-memory is decided afterwards by replaying it at the GPU's
# size. The program is still told the GPU's memory size (FAKE_CUDA_TOTAL).
CAPTURE_CAPACITY = "1T"

# The verdict's statuses (fits, does not fit, tight) are decided in Rust (analysis.EXIT_*).
FITS, DOES_NOT_FIT, USAGE, PROGRAM_FAILED, TIMED_OUT = 0, 1, 2, 3, 124
TIGHT = analysis.EXIT_TIGHT
EXIT_STATUSES = f"""exit status:
  {FITS}  the program ran and its peak fits the GPU, with the memory outside torch at its highest
  {DOES_NOT_FIT}  the program ran and does not fit (a CI gate reads this)
  {TIGHT}  the program ran and fits only within the uncertainty of the memory outside torch
  {USAGE}  no answer from cachalot: a bad option, a missing script, an unusable output path,
     a program that never used CUDA, a runtime that cannot be built
  {PROGRAM_FAILED}  the program itself failed, or one of its ranks did (its own status is
     `exit_code` in --json); the answer, if printed, covers the run up to there
  {TIMED_OUT}  the program ran past --timeout and was ended (a rank waiting for one that is gone?)
  126/127  the command cannot be started / was not found
  128+N  interrupted by signal N (130 Ctrl-C, 143 SIGTERM), or the program was killed by it

--json prints only the JSON on stdout; the program's own stdout then goes to stderr."""

# Options of the interpreter that take a value (`python -X dev`, `-W error`); the others
# (-u, -B, -O, -E, -I, -s, -S, -b, -q, -v, -d, -P, -R) stand alone.
_PY_OPTIONS_WITH_VALUE = ("-X", "-W")


def _is_python(cmd: str) -> bool:
    name = os.path.basename(cmd)
    return name.startswith("python") or name == "py"


# Launcher options that say how many processes (one per GPU) a node runs: torchrun and
# torch.distributed.run, accelerate launch, deepspeed.
_NPROC_OPTIONS = (
    "--nproc_per_node",
    "--nproc-per-node",
    "--num_processes",
    "--num-processes",
    "--num_gpus",
    "--num-gpus",
)


def launcher_devices(command: list[str]) -> int | None:
    """The number of GPUs a launcher's options ask for (`--nproc_per_node 4`), if any: read
    up to the script, so that the script's own options are not taken for the launcher's."""
    for i, a in enumerate(command):
        if a.endswith(".py") and i > 0:
            break
        for opt in _NPROC_OPTIONS:
            if a == opt and i + 1 < len(command):
                value = command[i + 1]
            elif a.startswith(opt + "="):
                value = a.split("=", 1)[1]
            else:
                continue
            if value.isdigit() and int(value) > 0:
                return int(value)
    return None


def interpreter(command: list[str]) -> str:
    """The Python interpreter that runs `command`: the command itself, or the one named by
    the `#!` line of a launcher script (torchrun, accelerate), else this one."""
    found = shutil.which(command[0]) or command[0]
    if _is_python(command[0]):
        return found
    try:
        with open(found, "rb") as f:
            first = f.readline(512).decode(errors="replace")
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "env" and len(words) > 1:
            words = words[1:]
        if words and _is_python(words[0]):
            return shutil.which(words[0]) or words[0]
    return sys.executable


def runtime_env(runtime: Path, gpu: gpus.Gpu, devices: int = 1) -> dict[str, str]:
    """Environment variables that put a process on the capture runtime as `devices` GPUs like `gpu`."""
    preload = ":".join(str(runtime / lib) for lib in build.runtime_libraries(runtime))
    old = os.environ.get("LD_PRELOAD")
    env = {
        "LD_PRELOAD": preload + (":" + old if old else ""),
        # what a real node with `devices` GPUs shows every process
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(devices))),
        "FAKE_CUDA_DEVICE_COUNT": str(devices),
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
    ap.add_argument(
        "--devices",
        type=int,
        metavar="N",
        help="GPUs the node shows (default: the launcher's --nproc_per_node / --num_processes "
        "/ --num_gpus, else 1); for a script that starts its ranks itself (mp.spawn)",
    )
    ap.add_argument(
        "--world-size",
        type=int,
        metavar="N",
        help="the job's ranks, when more than run here: only --ranks are executed, each seeing "
        "a job of N ranks (default: the launcher's --nproc_per_node x --nnodes, all executed "
        "unless it spans several nodes)",
    )
    ap.add_argument(
        "--ranks",
        metavar="R,R…",
        help="the ranks of the job to execute (with rank 0); the others are answered by the "
        "executed rank below them, by symmetry (default: 0 and the last)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="end the program (SIGTERM, then SIGKILL) if it runs longer: a job whose ranks "
        "wait for each other forever ends with a message instead of hanging (default: none)",
    )
    ap.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="-- python train.py ARGS… (or torchrun …, python -m torch.distributed.run …, "
        "accelerate launch …)",
    )
    args = ap.parse_args(argv)
    if args.gpu == "list":  # the table, nothing to run
        return args
    if args.devices is not None and not 1 <= args.devices <= 1024:
        ap.error(f"--devices {args.devices}: expected a number of GPUs from 1 to 1024")
    if args.world_size is not None and not 1 <= args.world_size <= 1 << 20:
        ap.error(f"--world-size {args.world_size}: expected a number of ranks from 1 to {1 << 20}")
    if args.timeout is not None and not args.timeout > 0:
        ap.error(f"--timeout {args.timeout}: expected a number of seconds above 0")
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
    if _is_python(cmd[0]):
        why = _python_usage(cmd)
        if why:
            return _fail(why)
    try:
        job_cover, cmd = _cover(args, cmd)
    except cover.CoverError as e:
        return _fail(str(e))
    devices = job_cover.per_node if job_cover else (args.devices or launcher_devices(cmd) or 1)
    native = _recorder.native()
    try:
        if args.output == "-":
            raise native.CachalotError("-o -: the trace is a file; give a file name")
        if args.output.endswith(os.sep) or os.path.isdir(args.output):
            # a folder for the ranks' traces (rankR.pickle), made if it is not there
            os.makedirs(args.output, exist_ok=True)
            native.check_output(os.path.join(args.output, "rank0.pickle"))
        else:
            native.check_output(args.output)
    except OSError as e:
        return _fail(f"-o {args.output}: {e.strerror}")
    except native.CachalotError as e:
        return _fail(str(e))
    try:
        runtime = build.ensure_runtime(interpreter(cmd))
    except build.BuildError as e:
        return _fail(str(e))

    work = Path(tempfile.mkdtemp(prefix="cachalot-capture-"))
    try:
        return _capture(args, gpu, reserve, cmd, devices, runtime, work, job_cover)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _python_usage(cmd: list[str]) -> str | None:
    """What is wrong with `python [OPTIONS] SCRIPT|-m MOD|-c CODE`, checked before it runs."""
    _, program = split_python(cmd[1:])
    if not program:
        return "nothing to run after `python`: give a script, -m MODULE or -c CODE"
    if program[0] in ("-m", "-c") and len(program) < 2:
        return f"{program[0]} needs an argument"
    if program[0] not in ("-m", "-c", "-") and not os.path.isfile(program[0]):
        return (
            f"can't open file {os.path.abspath(program[0])!r}: [Errno 2] No such file or directory"
        )
    return None


def _cover(args, cmd: list[str]) -> tuple[cover.Cover | None, list[str]]:
    """The job's ranks and the ones executed, when not all are (`--world-size`, `--ranks`,
    or a launcher's several nodes), and the command that runs only those (cover.py)."""
    world, per_node = cover.launcher_world(cmd)
    kind, _ = cover.launcher(cmd)
    if args.world_size is None and args.ranks is None and (world is None or world == per_node):
        return None, cmd  # one node: every rank runs, as the launcher says
    n = args.world_size or world
    if n is None:
        raise cover.CoverError(
            "--ranks: how many ranks has the job? Give --world-size N (or the launcher's "
            "--nproc_per_node / --nnodes)"
        )
    if kind is None:
        per_node = args.devices or n  # mp.spawn: one node shows them all, unless --devices
    elif args.devices:
        per_node = args.devices
    elif per_node is None:
        per_node = n
    if n % per_node:
        raise cover.CoverError(
            f"--world-size {n} is not a whole number of nodes of {per_node} GPUs "
            "(the launcher's per-node count, or --devices)"
        )
    ranks = cover.parse_ranks(args.ranks, n)
    if len(ranks) == n and args.world_size is None and world == per_node:
        return None, cmd
    job = cover.Cover(n, per_node, ranks)
    return job, cover.rewrite(cmd, len(ranks))


def _capture(args, gpu, reserve, cmd, devices, runtime, work, job_cover=None) -> int:
    procs = work / "procs"
    procs.mkdir()
    env = dict(os.environ, **runtime_env(runtime, gpu, devices))
    if job_cover is not None:
        env.update(job_cover.env())
    env[_env.ENV_DIR], env[_env.ENV_NCCL_LOG] = str(procs), str(work / "nccl.jsonl")
    (work / "nccl-share").mkdir()  # the simulated NCCL's broadcasts of known bytes
    env[_env.ENV_NCCL_SHARE] = str(work / "nccl-share")
    for name in ("CACHALOT_RECORD_OUT", "CACHALOT_RECORD_FIRST_PID"):  # an outer record's
        env.pop(name, None)
    # Every Python process of the command imports this cachalot and its sitecustomize.
    (work / "path").mkdir()
    (work / "path" / "cachalot").symlink_to(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(work / "path"), str(_BOOT), env.get("PYTHONPATH")])
    )
    try:
        done = _run.run(
            cmd, env, stdout=sys.stderr.fileno() if args.json else None, timeout=args.timeout
        )
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        return _fail(
            f"{cmd[0]}: {'command not found' if missing else e.strerror}", 127 if missing else 126
        )
    if done.left_behind:
        _fail(f"ended {done.left_behind} process(es) the program left running")
    if done.interrupted:
        _fail(
            f"interrupted ({_run.signal_name(done.interrupted)}); the program was given the "
            "signal and time to finish; no answer"
        )
        return done.status
    job = ranks.gather(procs, work / "nccl.jsonl")
    for line in job.failures():
        _fail(line)
    if done.timed_out:
        return _fail(
            f"the program did not finish within --timeout {args.timeout:g} s and was ended "
            "(ranks waiting for one that is gone, or for a collective that never comes?); no answer",
            TIMED_OUT,
        )
    if done.killed_by:
        return _fail(f"the program was killed by {_run.signal_name(done.killed_by)}", done.status)
    if not job.procs:
        return _fail(
            f"the program ended (exit {done.status}) before the capture could write its result"
            + ("" if done.status else " (it never imported torch)"),
            done.status if done.status == USAGE else (PROGRAM_FAILED if done.status else USAGE),
        )
    foreign = [p for p in job.procs if p.get("other_allocator")]
    if foreign:
        return _fail(
            f"the program switched torch to another allocator ({foreign[0]['other_allocator']}, e.g. "
            "cachalot.torch.use()): capture predicts torch's own caching allocator; remove that "
            "call (or make it conditional) for the capture"
        )
    if not job.cuda:
        if done.status or job.errors():
            return _fail(
                f"the program failed (exit {done.status}) before it used CUDA", PROGRAM_FAILED
            )
        return _fail("the program never used CUDA; nothing to predict", USAGE)
    if job_cover is not None:
        wrong = ranks.wrong_world(job, job_cover)
        if wrong:
            return _fail("; ".join(wrong))
    try:
        answer = ranks.predict(job, gpu, args.output, reserve, work, job_cover)
    except (analysis.AnalysisError, native_error()) as e:
        return _fail(str(e))
    failed = bool(done.status or job.errors())
    # an assumed MoE routing that steered reads: the worst case's run too (values_bounds)
    routing = (
        None
        if failed
        else values_bounds.bounds(job, answer, cmd, env, work, gpu, reserve, args.timeout)
    )
    if args.json:
        d = answer.to_json(torch=job.torch, exit_code=done.status)
        d["compile"] = job.cuda[0].get("compile")  # what torch.compile did (compile.py)
        d["routing"] = routing
        print(json.dumps(d, indent=1))
    else:
        print(
            f"\ncachalot capture: {' '.join(args.command)} as {gpu.name} (simulated, torch "
            f"{job.torch}), {job.seconds:.1f} s",
            file=sys.stderr,
        )
        compiled = job.cuda[0].get("compile") or {}
        if compiled.get("graphs_compiled"):
            print(compile_line(compiled), file=sys.stderr)
        print(answer.report())
        if routing:
            print(values_bounds.report(routing))
    if failed:
        first = next(iter(job.errors()), f"exit {done.status}")
        _fail(f"the program failed ({first}); the answer covers the run up to there")
        return PROGRAM_FAILED
    return answer.exit_status


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


def write_device_info(
    output: str,
    gpu: gpus.Gpu,
    index: int = 0,
    torch_version: str | None = None,
    cuda_version: str | None = None,
) -> None:
    """`STEM.device.json` beside a trace written to a regular file, as `cachalot record`
    writes it: `cachalot tune --gpu` then knows which GPU the trace was captured as, and
    which device of the node it was (a rank's own, `index`); `tune`, `replay` and `compare`
    make the decisions of the torch release that ran (`torch_version`, torch.__version__ of
    the captured process, with its `torch.version.cuda` as `cuda_version`)."""
    if os.path.isfile(output):
        conf = _recorder.native().env_conf()  # as torch reads it, in Rust
        described = gpus.device_info(gpu, conf)
        for d in described["devices"]:
            d["index"] = index
        if torch_version:
            described["torch_version"] = torch_version
        if cuda_version:
            described["cuda_version"] = cuda_version
        info = json.dumps(described, indent=1).encode()
        _recorder.native().write_output(_recorder.info_path(output), info)


if __name__ == "__main__":
    sys.exit(main())
