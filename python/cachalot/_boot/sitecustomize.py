"""The one injection mechanism of `cachalot record` and `cachalot capture`: loaded into every
Python interpreter the command starts (PYTHONPATH, inherited by each child: a launcher such as
torchrun, the ranks it starts, `torch.multiprocessing.spawn`'s workers). Nothing happens until
the process imports torch; then:

- under `cachalot record` (CACHALOT_RECORD_* variables) memory history recording starts; at
  exit the snapshot is written (also after a SIGTERM, which then ends the script through
  `SystemExit(143)`; a Ctrl-C while the snapshot is being written does not cut it short). The
  first recorded process writes the snapshot at CACHALOT_RECORD_OUT, each other one (a rank)
  its own `NAME.rankR.pickle` / `NAME.pidP.pickle` (see `_recorder.process_path`);
- under `cachalot capture` (CACHALOT_CAPTURE_DIR; the capture runtime is preloaded through
  LD_PRELOAD, inherited too) `cachalot.capture._boot` starts a capture session in the process:
  each process that uses CUDA writes its own trace and result into that folder, a process that
  never does (the launcher) writes only a note that it ran.

Any other `sitecustomize` on the path still runs.
"""

import importlib.abc
import importlib.util
import os
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
    r.at_exit(recorder.stop, "cachalot record: could not write the snapshot")


def _start_capture(torch):
    from cachalot.capture import _boot  # the capture puts this cachalot on PYTHONPATH

    _boot.start(torch)


class _WhenTorchIsImported(importlib.abc.MetaPathFinder):
    def __init__(self, start):
        self.start = start

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module
        start = self.start

        def exec_module(module):
            loader_exec(module)
            start(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("CACHALOT_CAPTURE_DIR"):
    if os.environ.get("CACHALOT_COVER"):  # a job larger than the machine: this rank's place in it
        from cachalot.capture import cover

        cover.remap_env()
    sys.meta_path.insert(0, _WhenTorchIsImported(_start_capture))
elif os.environ.get("CACHALOT_RECORD_OUT"):
    # The first recorded process claims the -o name; the processes it starts inherit this.
    os.environ.setdefault("CACHALOT_RECORD_FIRST_PID", str(os.getpid()))
    sys.meta_path.insert(0, _WhenTorchIsImported(_start))


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
