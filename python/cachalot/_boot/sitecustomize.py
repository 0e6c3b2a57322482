"""Loaded by `cachalot record` into the script's interpreter (PYTHONPATH): when the script
imports torch, memory history recording starts; at exit the snapshot is written (also after a
SIGTERM, which then ends the script through `SystemExit(143)`; a Ctrl-C while the snapshot is
being written does not cut it short). Any other `sitecustomize` on the path still runs.
Settings come from CACHALOT_RECORD_* variables.

Every Python process the program starts inherits this: the first one recorded writes the
snapshot at CACHALOT_RECORD_OUT, each other one (a rank of `torch.multiprocessing.spawn` or
torchrun) its own `NAME.rankR.pickle` / `NAME.pidP.pickle` (see `_recorder.process_path`).
"""

import atexit
import importlib.abc
import importlib.util
import os
import signal
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_recorder():
    spec = importlib.util.spec_from_file_location(
        "_cachalot_recorder", os.path.join(os.path.dirname(_HERE), "_recorder.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _start(torch):
    r = _load_recorder()
    env = os.environ
    out = env["CACHALOT_RECORD_OUT"]
    if env.get("CACHALOT_RECORD_FIRST_PID", str(os.getpid())) != str(os.getpid()):
        out = r.process_path(out)
    recorder = r.Recorder(
        out,
        max_entries=int(env.get("CACHALOT_RECORD_MAX_ENTRIES", r.DEFAULT_MAX_ENTRIES)),
        context=env.get("CACHALOT_RECORD_CONTEXT", "all"),
        stacks=env.get("CACHALOT_RECORD_STACKS", "python"),
    )
    recorder.start(torch)
    r.exit_on_sigterm()

    def finish():
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread
            previous = None
        try:
            recorder.stop()
        except Exception as e:  # noqa: BLE001 - exiting: report, do not raise
            print(f"cachalot record: could not write the snapshot: {e}", file=sys.stderr)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    atexit.register(finish)


class _WhenTorchIsImported(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _start(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("CACHALOT_RECORD_OUT"):
    # The first recorded process claims the -o name; the processes it starts inherit this.
    os.environ.setdefault("CACHALOT_RECORD_FIRST_PID", str(os.getpid()))
    sys.meta_path.insert(0, _WhenTorchIsImported())


def _chain():
    # Run the sitecustomize this one shadows, if there is one further down the path.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    me = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        # The import system takes the module back out of sys.modules when this file ends.
        if me is not None:
            sys.modules.setdefault("sitecustomize", me)


_chain()
