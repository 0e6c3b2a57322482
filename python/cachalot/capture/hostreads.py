"""Host reads of device data during a capture.

Nothing is computed under the capture runtime, so every device-to-host copy
gives zeros. Where the program's control flow or a tensor's shape depends on
such a value (``nonzero``, ``masked_select``, ``unique``, ``if x.item(): …``,
a loop until a condition on the GPU holds), the captured stream may differ
from a real run. This module

* counts every device-to-host copy and names the source line that made it
  (the first frame outside torch), so the report can warn about it,
* starts `values`, which computes on the CPU every value fixed by host data (a padded
  batch's attention mask, the stop flag of ``MaxLengthCriteria``) so that reads of those get a
  GPU's answer, and assumes MoE routing (docs/values.md); and
* answers the few reads of *unknown* values at call sites it knows: Hugging
  Face ``generate()``'s stop check (no EOS token: done when the sequence
  reaches ``max_length``), "is the attention mask all ones?" and "are token
  ids negative?". These rules are our rendering of the
  ones ``shared/fakegpu/fakegpu_util.py`` uses for its ground truth runs.
  In a distributed job, DDP's check that every rank holds the same parameters
  (``torch.distributed._verify_params_across_processes``) gathers shapes that
  read back as zeros: the check runs, with its device memory, and its "the
  ranks differ" verdict is dropped (the ranks of one program agree).

The answers patch ``Tensor.__bool__`` and ``Tensor.item`` only; that changes
no allocation (a dispatch mode would: measured by the fakegpu authors, +144
allocations over two GPT-2 steps).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import linecache
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

from ._loaded import runtime_cudart

_D2H_CB = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_void_p)

# (file suffix, source text at the read, answer or callable(frame) -> answer)
_HF_GEN = "transformers/generation/utils.py"
_HF_MASK = "transformers/masking_utils.py"


class _Generation(threading.local):
    max_length: int | None = None  # of the stopping criteria the decoding loop called last


_GENERATION = _Generation()
_STOPPING = "transformers.generation.stopping_criteria"


def _watch_stopping_criteria(module) -> None:
    """Remember max_length each time generate()'s loop calls its StoppingCriteriaList.

    Reading it from the loop's frame instead would be wrong: `frame.f_locals` keeps a
    snapshot of the frame's locals alive (tensors of the last step among them), which the
    allocator then sees as live memory.
    """
    cls = module.StoppingCriteriaList
    if getattr(cls.__call__, "_cachalot", False):
        return
    orig = cls.__call__

    def __call__(self, *args, **kwargs):
        _GENERATION.max_length = self.max_length
        return orig(self, *args, **kwargs)

    __call__._cachalot = True
    cls.__call__ = __call__


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `hook(module)` right after `name` is first imported (no import is forced)."""

    def __init__(self, name, hook):
        self.name, self.hook = name, hook

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        hook = self.hook

        def exec_module(module):
            run(module)
            hook(module)

        spec.loader.exec_module = exec_module
        return spec


def _hf_stop(frame):
    """generate()'s "all sequences finished?": without an EOS hit, when `length` reaches max_length.

    `length` is StopCheck's argument (a short-lived frame); max_length is the one the loop's
    stopping criteria just used. An EOS token that a real run may sample earlier cannot be
    known here: this answers with the longest generation.
    """
    length = frame.f_locals.get("length")
    if length is None or _GENERATION.max_length is None:
        return None  # unknown: the read gives the runtime's zero
    return length >= _GENERATION.max_length


RULES = [
    (_HF_GEN, "unfinished_sequences.max() == 0", _hf_stop),
    (_HF_GEN, '(model_kwargs["attention_mask"] == 1).all()', True),
    (_HF_GEN, "(encoder_input_ids < 0).any()", False),
    (_HF_MASK, "fast_all(padding_mask", True),
]

# What each rule's answer assumes, and what the other answer would change (for the warning).
ASSUMED = {
    "unfinished_sequences.max() == 0": (
        "no sequence has sampled an EOS token, so generate() runs to max_length (the longest "
        "generation, the largest KV cache); a sampled EOS would stop it sooner"
    ),
    '(model_kwargs["attention_mask"] == 1).all()': (
        "the attention mask is all ones (no padding), so generate() drops it and takes the "
        "unpadded path; a padded batch keeps the mask and builds a 4-D attention mask, which "
        "takes more memory: with left-padded prompts this under-predicts"
    ),
    "(encoder_input_ids < 0).any()": "no token id is negative (valid input); nothing changes",
    "fast_all(padding_mask": (
        "the padding mask has no padding, so attention runs causal without a mask tensor; "
        "with padding a 4-D mask (batch x 1 x query x key) is built per layer call"
    ),
}


def _user_frame(f):
    """The first frame outside torch and this package (torch.nn counts as user code)."""
    while f is not None:
        fn = f.f_code.co_filename
        inside_torch = "/torch/" in fn and "/torch/nn/" not in fn
        if not (inside_torch or fn == __file__ or "/cachalot/capture/" in fn):
            return f
        f = f.f_back
    return None


def _source(f) -> str:
    fn = f.f_code.co_filename
    text = linecache.getline(fn, f.f_lineno)
    try:  # the whole instruction when it spans several lines
        pos = list(f.f_code.co_positions())[f.f_lasti // 2]
        if pos[0] and pos[1] and pos[1] >= pos[0]:
            text = "".join(linecache.getline(fn, i) for i in range(pos[0], pos[1] + 1))
    except (AttributeError, IndexError, ValueError):
        pass
    return " ".join(text.split())


def _site(f) -> str:
    if f is None:
        return "<no Python frame>"
    fn = f.f_code.co_filename.split("site-packages/")[-1]
    return f"{fn}:{f.f_lineno}: {_source(f)[:160]}"


@dataclass
class HostReads:
    """Sites that read device data, and the reads answered by a rule."""

    unanswered: Counter = field(default_factory=Counter)
    answered: Counter = field(default_factory=Counter)
    bytes_read: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _answering: int = 0
    _answered_d2h: int = 0  # device-to-host copies made while answering
    values: object = None  # the known values (`values.Values`), when tracked

    def begin_answer(self) -> int:
        """The device reads from here to `end_answer` are answered (by `values`)."""
        with self._lock:
            self._answering += 1
            return self._answered_d2h

    def end_answer(self, start: int) -> int:
        """How many device reads were made since `begin_answer` returned `start`."""
        with self._lock:
            self._answering -= 1
            return self._answered_d2h - start

    def install(self, torch) -> None:
        lib = runtime_cudart()
        setter = getattr(lib, "fakecuda_set_d2h_callback", None)
        if setter is None:
            return  # not under the capture runtime: nothing to watch
        self._cb = _D2H_CB(self._on_d2h)  # kept alive as long as the runtime may call it
        setter.argtypes = [_D2H_CB, ctypes.c_void_p]
        setter(self._cb, None)
        self._patch(torch)
        self._patch_distributed(torch)
        from .values import Values

        values = Values(torch, self)
        if values.install():
            self.values = values
        if _STOPPING in sys.modules:
            _watch_stopping_criteria(sys.modules[_STOPPING])
        else:
            sys.meta_path.insert(0, _AfterImport(_STOPPING, _watch_stopping_criteria))

    def _on_d2h(self, nbytes, _user) -> None:
        with self._lock:
            self.bytes_read += int(nbytes)
            if self._answering:
                self._answered_d2h += 1
                return
        try:
            frame = sys._getframe(1)
        except ValueError:  # a thread with no Python frames (autograd's device threads)
            frame = None
        site = _site(_user_frame(frame))
        with self._lock:
            self.unanswered[site] += 1

    def _patch(self, torch) -> None:
        T = torch.Tensor
        orig_bool, orig_item = T.__bool__, T.item
        reads = self

        def answer(t, real):
            if reads.values is not None and reads.values.is_known(t):
                return real(t)  # computed from known values (`values`), not by a rule
            f = _user_frame(sys._getframe(2))
            if f is not None:
                fn = f.f_code.co_filename
                src = _source(f)
                for suffix, code, value in RULES:
                    if fn.endswith(suffix) and code in src:
                        v = value(f) if callable(value) else value
                        if v is None:
                            break
                        reads.answered[f"{suffix}: {code}"] += 1
                        with reads._lock:
                            reads._answering += 1
                        try:
                            real(t)  # the device read still happens, as on a GPU
                        finally:
                            with reads._lock:
                                reads._answering -= 1
                        return v
            return real(t)

        def __bool__(t):
            return bool(answer(t, orig_bool)) if t.is_cuda else orig_bool(t)

        def item(t):
            return answer(t, orig_item) if t.is_cuda else orig_item(t)

        T.__bool__, T.item = __bool__, item

    def _patch_distributed(self, torch) -> None:
        dist = getattr(torch, "distributed", None)
        orig = getattr(dist, "_verify_params_across_processes", None)
        if orig is None:
            return
        reads = self
        rule = "torch.distributed: DDP's check that every rank has the same parameters"

        def verify(*args, **kwargs):
            with reads._lock:
                reads._answering += 1
            try:
                return orig(*args, **kwargs)
            except RuntimeError as e:
                if "DDP expects same model across all ranks" not in str(e):
                    raise
                reads.answered[rule] += 1
                return None
            finally:
                with reads._lock:
                    reads._answering -= 1

        dist._verify_params_across_processes = verify

    def unanswered_total(self) -> int:
        return sum(self.unanswered.values())

    def values_summary(self) -> dict | None:
        """What `values` computed and assumed (None when values are not tracked)."""
        return self.values.summary() if self.values is not None else None

    def warnings(self) -> list[str]:
        out = self.values.warnings() if self.values is not None else []
        for rule, n in self.answered.items():
            code = rule.split(": ", 1)[-1]
            out.append(
                f"answered {n} host reads of device data at a known call site, {rule}, "
                f"assuming {ASSUMED.get(code, 'the value a typical run gives')}"
            )
        for site, n in self.unanswered.most_common(20):
            out.append(
                f"device data read on the host {n}x (the capture computes nothing, the value read was 0; "
                f"if it steers control flow or a shape, the stream after it may differ): {site}"
            )
        if len(self.unanswered) > 20:
            out.append(f"… and {len(self.unanswered) - 20} more sites that read device data")
        return out
