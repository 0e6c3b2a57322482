"""Device values the host can know, computed on the CPU, so host reads get a GPU's answer.

Kernels compute nothing under the capture runtime, so a host read of device data gives 0. But
many values the program reads are fixed by what it copied to the device itself: an attention
mask from a padded batch, position ids, ``torch.ones``/``arange``/``full``, a stop flag built
with ``torch.full(…, cur_len >= max_length)``, and everything computed from those only. This
module keeps a CPU copy ("shadow") of every CUDA tensor whose value is known that way and
evaluates on the CPU each op whose CUDA inputs are all known, so that

* a read of a known tensor (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, a copy into
  a CPU tensor) returns the value a GPU computes, and
* an op whose output *shape* depends on known data (``nonzero``, ``torch.where(mask)``,
  indexing with a boolean mask, ``masked_select``) gets the right size: the runtime answers
  the count the op reads from its own device buffer with the CPU's count
  (``fakecuda_shadow_answer_next`` in ``runtime/cudart_shadow.cpp``).

The real op still runs on the capture runtime first, unchanged, so the allocation stream is
the program's own; the CPU evaluation only adds the answers. It is a ``TorchFunctionMode``,
which sits above autograd and dispatch (a dispatch mode would change the allocation stream:
the fakegpu authors measured +144 allocations over two GPT-2 steps).

A value is *unknown* once anything depends on weights, activations or randomness (the GPU's
RNG is not torch's CPU generator), once the tensor is changed by an op this module did not see
(its version counter moved), or when it is large (``MAX_ELEMENTS``: the CPU work stays
bounded). Reads of unknown values keep the runtime's 0 and are reported by ``hostreads``.

One class of unknown values steers memory by design: the expert ids a Mixture-of-Experts router
picks with ``topk`` over scores from weights. For those the indices that ``topk`` returns from
unknown scores are *assumed* (``ROUTING``): ``balanced`` gives each of the n candidates the same
number of picks (row r takes (r·k + j) mod n), ``worst`` makes every row pick the first k (the
top-k experts get every token). Values computed from an assumption carry its name, reads of them
are reported with it, and ``cachalot capture`` runs the program once per assumption
(``values_bounds``).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import os
import sys
from collections import Counter

from ._loaded import runtime_cudart

MAX_ELEMENTS = 1 << 22  # a tensor larger than this (inputs or outputs) is not evaluated
ROUTING_ENV = "CACHALOT_VALUES_ROUTING"
ENABLE_ENV = "CACHALOT_VALUES"  # 0: no value tracking (every read gives the runtime's 0)
ROUTING = {
    "balanced": "each of the n experts is picked by tokens x top_k / n tokens (row r picks "
    "(r*k + j) mod n, j < k)",
    "worst": "every token picks the same top_k experts (the first k): they get every token",
}

# Ops whose result is not fixed by their inputs' values: random, or uninitialized memory.
_NOT_FIXED = (
    "rand",
    "normal",
    "bernoulli",
    "multinomial",
    "dropout",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "random_",
    "poisson",
    "rrelu",
    "empty",
    "set_",
    "record_stream",
    "pin_memory",
    "share_memory",
)

# torch.distributed's functions that write into tensors they are given
_COLLECTIVES = (
    "broadcast",
    "all_reduce",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_coalesced",
    "all_reduce_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "scatter",
    "gather",
    "recv",
    "irecv",
    "send",
    "isend",
    "batch_isend_irecv",
    "broadcast_object_list",
    "scatter_object_list",
)


def _is_cuda_tensor(torch, x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cuda"


def _to_cpu_device(torch, x):
    """A device argument for the CPU evaluation: every CUDA device becomes the CPU."""
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("cpu")
    if isinstance(x, str) and (x == "cuda" or x.startswith("cuda:")):
        return "cpu"
    return x


_OWN_FRAMES = ("/cachalot/capture/values_mode.py", "/cachalot/capture/values.py")


def _clean(frames: list) -> list:
    """A stack as it would be without the mode: its own frame, torch's
    ``handle_torch_function`` below it and the caller's frame that the call re-entered."""
    out, i = [], 0
    while i < len(frames):
        f = frames[i]
        if not f.get("filename", "").endswith(_OWN_FRAMES):
            out.append(f)
            i += 1
            continue
        i += 1
        nxt = frames[i] if i < len(frames) else {}
        if nxt.get("name") == "handle_torch_function":
            i += 1
            outer = frames[i] if i < len(frames) else {}
            inner = out[-1] if out else {}
            if (outer.get("filename"), outer.get("name")) == (
                inner.get("filename"),
                inner.get("name"),
            ):
                i += 1  # the same function, entered again from handle_torch_function
    return out


def clean_frames(snap: dict) -> dict:
    """Removes the value tracking's frames from the Python stacks of a memory snapshot (in
    place; returned), so that its allocation sites are the program's."""
    for trace in snap.get("device_traces", []):
        for e in trace:
            if e.get("frames"):
                e["frames"] = _clean(e["frames"])
    for seg in snap.get("segments", []):
        for b in seg.get("blocks", []):
            if b.get("frames"):
                b["frames"] = _clean(b["frames"])
    return snap


_EVAL_FRAME = "torch._dynamo.eval_frame"


def _skip_in_dynamo() -> None:
    """Dynamo's frame hook never compiles this machinery's own frames (it would, where a
    compiled frame falls back to eager under the mode, and report them as failed compiles);
    tracing still inlines the mode, whose first line hands a compiled call straight on.

    Run once Dynamo is imported (``_after_import``): importing it only for this would cost
    every captured process about a second of CPU (Dynamo and what it imports: Inductor,
    sympy, FSDP), where a program that never compiles never imports it."""
    import types

    from . import hostreads, values_mode

    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:  # a torch without Dynamo: nothing to skip
        return
    seen = set()

    def codes(c):
        if c in seen:
            return
        seen.add(c)
        skip_code(c)
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                codes(k)

    for mod in (sys.modules[__name__], values_mode, hostreads):
        for obj in vars(mod).values():
            for f in [obj, *vars(obj).values()] if isinstance(obj, type) else [obj]:
                if isinstance(f, types.FunctionType) and f.__module__ == mod.__name__:
                    codes(f.__code__)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then()` right after the module `name` is first executed, in the thread that
    imports it: a finder first on ``sys.meta_path`` that takes itself off at that import, asks
    the other finders for the module, and wraps its loader's ``exec_module`` (the module, its
    loader and its spec stay the ones Python made)."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec and spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, then = loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then()

        loader.exec_module = exec_module
        return spec


def _after_import(name: str, then) -> None:
    """`then()` now if the module `name` is imported, else right after its import."""
    if name in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


class _Known:
    __slots__ = ("assumed", "cpu", "version")

    def __init__(self, version, cpu, assumed):
        self.version, self.cpu, self.assumed = version, cpu, assumed


def _version(t):
    try:
        return t._version
    except RuntimeError:  # an inference-mode tensor has no version counter
        return -1


class Values:
    """The known values of one process's CUDA tensors, and what reading them answered."""

    def __init__(self, torch, reads=None, routing: str | None = None):
        from torch.utils._pytree import tree_flatten, tree_unflatten
        from torch.utils.weak import WeakIdKeyDictionary

        self.torch, self.reads = torch, reads
        self.routing = routing or os.environ.get(ROUTING_ENV) or "balanced"
        if self.routing not in ROUTING:
            raise ValueError(
                f"{ROUTING_ENV}={self.routing!r}: valid assumptions are {', '.join(ROUTING)}"
            )
        self._flatten, self._unflatten = tree_flatten, tree_unflatten
        self.known = WeakIdKeyDictionary()
        self.computed: Counter = Counter()  # read sites answered from known values
        self.assumed: Counter = Counter()  # read sites answered from assumed values
        self.assumptions: Counter = Counter()  # sites whose unknown value was assumed
        self.shape_misses: Counter = Counter()  # data-dependent shapes the runtime missed
        self.tainted = WeakIdKeyDictionary()  # unknown tensors that depend on an assumption
        self.tainted_reads: Counter = Counter()  # read sites of those (they read 0)
        self._answer_next = None
        self._mode = None

    # -- set-up ---------------------------------------------------------------------------

    def install(self) -> bool:
        """Start tracking in this thread (the one that imported torch); False when not under
        the capture runtime (a real GPU computes its own values)."""
        if os.environ.get(ENABLE_ENV, "1") == "0":
            return False
        lib = runtime_cudart()
        fn = getattr(lib, "fakecuda_shadow_answer_next", None) if lib is not None else None
        if fn is None:
            return False
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_uint64
        self._answer_next = fn
        from .values_mode import make_mode

        self._mode = make_mode(self)
        self._watch_collectives()
        _after_import(_EVAL_FRAME, _skip_in_dynamo)
        self._mode.__enter__()
        return True

    def _watch_collectives(self) -> None:
        """A collective writes its tensors outside the mode's view and without moving their
        version counters (the simulated NCCL hands the root's known bytes to the runtime): the
        tensors a collective is given stop being known here, and a read then gets the runtime's
        bytes."""
        torch = self.torch
        try:
            import torch.distributed as dist
            import torch.distributed.distributed_c10d as c10d
        except ImportError:
            return
        if not dist.is_available():
            return
        values = self

        def forget(x):
            if isinstance(x, list | tuple):
                for y in x:
                    forget(y)
            elif isinstance(x, torch.Tensor):
                values.known.pop(x, None)
            elif hasattr(x, "tensor"):  # a P2POp of batch_isend_irecv
                forget(getattr(x, "tensor", None))

        def wrap(fn):
            def collective(*args, **kwargs):
                if torch.compiler.is_compiling():  # Dynamo sees the collective itself
                    return fn(*args, **kwargs)
                forget(args)
                forget(list(kwargs.values()))
                return fn(*args, **kwargs)

            collective.__wrapped__ = fn
            collective._cachalot_values = True
            collective.__name__ = getattr(fn, "__name__", "collective")
            return collective

        for name in _COLLECTIVES:
            fn = getattr(c10d, name, None)
            if fn is None or getattr(fn, "_cachalot_values", False):
                continue
            w = wrap(fn)
            setattr(c10d, name, w)
            if getattr(dist, name, None) is fn:
                setattr(dist, name, w)

    # -- known values ---------------------------------------------------------------------

    def lookup(self, t) -> _Known | None:
        """The known value of CUDA tensor `t`, or None."""
        k = self.known.get(t)
        if k is None:
            return None
        if k.version != _version(t):  # changed by an op not seen here
            del self.known[t]
            return None
        return k

    def is_known(self, t) -> bool:
        return self.lookup(t) is not None

    def record(self, t, cpu, assumed=None) -> None:
        torch = self.torch
        if (
            not isinstance(cpu, torch.Tensor)
            or cpu.device.type != "cpu"
            or tuple(cpu.shape) != tuple(t.shape)
            or cpu.dtype != t.dtype
            or t.numel() > MAX_ELEMENTS
        ):
            self.known.pop(t, None)
            return
        self.known[t] = _Known(_version(t), cpu.detach(), assumed)

    def site(self) -> str:
        from .hostreads import _site, _user_frame

        return _site(_user_frame(sys._getframe(2)))

    def warnings(self) -> list[str]:
        out = []
        n = sum(self.computed.values())
        if n:
            sites = ", ".join(s for s, _ in self.computed.most_common(3))
            out.append(
                f"computed {n} host reads of device data on the CPU from values the host knows "
                f"(no assumption; e.g. {sites})"
            )
        for site, count in self.assumptions.most_common(10):
            out.append(
                f"assumed the expert routing ({self.routing}: {ROUTING[self.routing]}) for "
                f"{count} topk calls over unknown scores at {site}; see the report's expert "
                "routing lines"
            )
        n = sum(self.assumed.values())
        if n:
            sites = "; ".join(s for s, _ in self.assumed.most_common(3))
            out.append(
                f"answered {n} host reads at {len(self.assumed)} sites from values computed from "
                f"the assumed routing ({self.routing}), e.g. {sites}"
            )
        for site, count in self.tainted_reads.most_common(10):
            out.append(
                f"device data that depends on the assumed routing was read {count}x but could not "
                f"be computed (the value read was 0): {site}"
            )
        for site, count in self.shape_misses.most_common(10):
            out.append(
                f"a data-dependent shape could not be answered {count}x though its inputs are "
                f"known (the value read was 0): {site}"
            )
        return out

    def summary(self) -> dict:
        return {
            "routing": self.routing,
            "routing_assumed": sum(self.assumptions.values()),
            "routing_sites": dict(self.assumptions),
            "computed_reads": sum(self.computed.values()),
            "assumed_reads": dict(self.assumed),
            "dependent_unknown_reads": dict(self.tainted_reads),
            "shape_misses": dict(self.shape_misses),
        }
