"""The TorchFunctionMode of `values`: every torch call runs as is, then, when its CUDA inputs
are all known, once more on their CPU shadows.

Per call: flatten the arguments; run the real call (unchanged, so the allocation stream is the
program's); if every CUDA tensor among the inputs has a known value, nothing in the call is
random or uninitialized, and nothing is larger than `values.MAX_ELEMENTS`, evaluate the same
function on the CPU with the shadows in place of the CUDA tensors and every CUDA device
argument made the CPU. The results' CUDA tensors get the CPU results as their values; CUDA
inputs the call changed in place get their CPU counterparts'. A read (``item``, ``bool``,
``tolist``, ``cpu``, ``to`` a CPU device, a copy into a CPU tensor) returns the CPU result.

Ops whose output shape depends on data (``nonzero`` and what builds on it) get their count from
the CPU inputs *first*: the count they read from their own device buffer is armed in the
runtime (`fakecuda_shadow_answer_next`), so the real op allocates and returns what a GPU would.
An op over unknown data that reads one known one-element input (``weight[expert_idx]``) gets
that element's bytes armed the same way.

``topk`` over unknown scores gets assumed indices (the routing assumption of `values`); results
of ops over assumed values that cannot be evaluated are marked as depending on the assumption
(``values.tainted``) and their reads counted.
"""

from __future__ import annotations

import ctypes
import struct

from .values import _NOT_FIXED, MAX_ELEMENTS, _to_cpu_device, _version


def make_mode(values):
    torch = values.torch
    from torch.overrides import TorchFunctionMode

    T = torch.Tensor
    reads_funcs = {
        T.item,
        T.__bool__,
        T.tolist,
        T.__int__,
        T.__float__,
        T.__index__,
        T.__complex__,
        T.cpu,
        T.numpy,
        T.__array__,
    }
    # printing reads too, but its text names the device: those reads stay unanswered
    printing = {T.__repr__, T.__format__, T.__str__}
    # nonzero and the ops that call it on the device for their output size
    nonzero_funcs = {torch.nonzero, T.nonzero, torch.argwhere, T.argwhere, torch.nonzero_static}
    where_funcs = {torch.where, T.where}
    index_funcs = {T.__getitem__, T.__setitem__, T.index_put_, T.index_put, torch.index_put}
    topk_funcs = {torch.topk, T.topk}
    cuda_funcs = {T.cuda, T.pin_memory}  # on the CPU: a copy
    flatten, unflatten = values._flatten, values._unflatten
    compiling = torch.compiler.is_compiling

    def not_fixed(func) -> bool:
        if func in printing:
            return True
        name = getattr(func, "__name__", "") or ""
        return any(s in name for s in _NOT_FIXED)

    def cpu_leaf(x, shadows, users):
        if isinstance(x, torch.Tensor):
            if x.device.type == "cuda":
                return shadows[id(x)]
            if x.device.type == "cpu":
                users.add(x.untyped_storage().data_ptr())
            return x
        return _to_cpu_device(torch, x)

    def evaluate(func, cleaves, spec):
        """func on the CPU over the inputs' CPU leaves `cleaves`: a 1-tuple of its result, or
        None when it cannot run there. An in-place op changes the shadows themselves."""
        args, kwargs = unflatten(cleaves, spec)
        if func is T.to:
            args = tuple(
                "cpu" if isinstance(a, int) and not isinstance(a, bool) else a for a in args
            )
        call = (lambda t, *a, **k: t.clone()) if func in cuda_funcs else func
        try:
            with torch.no_grad():
                out = call(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not evaluable on the CPU: the value stays unknown
            return None
        return (out,)

    def own(cpu, users):
        """A CPU result that is the user's tensor (``.to("cuda")`` of it) is copied."""
        if isinstance(cpu, torch.Tensor) and cpu.untyped_storage().data_ptr() in users:
            return cpu.clone()
        return cpu

    def arm(count: int):
        """torch 2.15's nonzero (and masked_select, boolean indexing, where(mask)) reads its
        count as one int32 from the device (measured on the capture runtime)."""
        data = struct.pack("<i", count)
        buf = ctypes.create_string_buffer(data, len(data))
        values._answer_next(buf, len(data))
        return buf

    def arm_bytes(cpu):
        """Arms the bytes of a one-element value for a read of it inside an op."""
        data = bytes(cpu.detach().reshape(1).contiguous().view(torch.uint8).tolist())
        buf = ctypes.create_string_buffer(data, len(data))
        values._answer_next(buf, len(data))
        return buf

    def nonzero_count(func, cargs, ckwargs):
        """How many elements the nonzero inside this call finds on the CPU, or None."""
        if func in nonzero_funcs or (func in where_funcs and len(cargs) == 1 and not ckwargs):
            x = cargs[0]
            return int(torch.count_nonzero(x)) if isinstance(x, torch.Tensor) else None
        if func in index_funcs and len(cargs) >= 2:
            idx = cargs[1] if not isinstance(cargs[1], tuple | list) else None
            if isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8):
                return int(torch.count_nonzero(idx))
        if func in (torch.masked_select, T.masked_select) and len(cargs) >= 2:
            x, m = cargs[0], cargs[1]
            return int(
                torch.count_nonzero(torch.broadcast_to(m, torch.broadcast_shapes(x.shape, m.shape)))
            )
        return None

    class ValuesMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if compiling():  # Dynamo traces modes: let it see the call only (outputs unknown)
                return func(*args, **kwargs)
            leaves, spec = flatten((args, kwargs))
            cuda_in = [x for x in leaves if isinstance(x, torch.Tensor) and x.device.type == "cuda"]
            known = [values.lookup(x) for x in cuda_in]
            fixed = all(k is not None for k in known) and not not_fixed(func)
            if fixed and any(
                x.numel() > MAX_ELEMENTS for x in leaves if isinstance(x, torch.Tensor)
            ):
                fixed = False
            if not fixed:
                # one known one-element input (an index: weight[expert_idx]) that the op reads
                one = [(x, k) for x, k in zip(cuda_in, known, strict=True) if k and x.numel() == 1]
                buf = arm_bytes(one[0][1].cpu) if len(one) == 1 else None
                reads, start = values.reads, None
                unread = reads.unanswered_total() if reads is not None else 0
                if buf is not None and reads is not None:
                    start = reads.begin_answer()
                try:
                    out = func(*args, **kwargs)
                finally:
                    if buf is not None:
                        values._answer_next(None, 0)
                        if reads is not None and reads.end_answer(start):
                            k = one[0][1]
                            (values.assumed if k.assumed else values.computed)[values.site()] += 1
                if func in topk_funcs and cuda_in:
                    assume_topk(out, args, kwargs)
                elif cuda_in and any(
                    (k is not None and k.assumed) or x in values.tainted
                    for x, k in zip(cuda_in, known, strict=True)
                ):
                    taint(out, unread)
                return out
            shadows = {id(x): k.cpu for x, k in zip(cuda_in, known, strict=True)}
            assumed = next((k.assumed for k in known if k.assumed), None)
            before = [_version(x) for x in cuda_in]
            users = set()  # storages of the user's CPU tensors among the inputs
            cleaves = [cpu_leaf(x, shadows, users) for x in leaves]
            count = None
            if cuda_in and _shape_from_data(func):
                try:
                    count = nonzero_count(func, *unflatten(cleaves, spec))
                except Exception:  # noqa: BLE001 - a call the real op will reject too
                    count = None
            reads = values.reads
            is_read = func in reads_funcs or (func is T.to and _to_host(torch, args, kwargs))
            answered, start = 0, None
            if reads is not None:
                start = reads.begin_answer()
            buf = arm(count) if count is not None else None
            try:
                out = func(*args, **kwargs)
            finally:
                if buf is not None:
                    values._answer_next(None, 4)
                if reads is not None:
                    answered = reads.end_answer(start)
            if count is None and not cuda_in:  # a factory: only its CUDA results matter
                oleaves = [x for x in flatten(out)[0] if _cuda(torch, x)]
                if not oleaves or any(x.numel() > MAX_ELEMENTS for x in oleaves):
                    return out
            oleaves = flatten(out)[0]
            changed = [x for x, v in zip(cuda_in, before, strict=True) if _version(x) != v]
            ocuda = [x for x in oleaves if _cuda(torch, x)]
            if not (ocuda or changed or is_read or answered):
                return out  # metadata (shape, dtype, data_ptr): the real answer is right
            if any(x.numel() > MAX_ELEMENTS for x in ocuda):
                for x in ocuda:
                    values.known.pop(x, None)
                return out
            ev = evaluate(func, cleaves, spec)
            if ev is None:
                if answered and reads is not None:
                    reads.unanswered[values.site()] += 1
                if assumed or any(x in values.tainted for x in cuda_in):
                    taint(out, None)
                    if answered:
                        values.tainted_reads[values.site()] += 1
                return out
            cout = ev[0]  # None for __setitem__, which changes its first argument
            cl, cspec = flatten(cout)
            if len(cl) == len(oleaves):
                for real, cpu in zip(oleaves, cl, strict=True):
                    if _cuda(torch, real):
                        values.record(real, own(cpu, users), assumed)
            for x in changed:
                cpu = cleaves[next(i for i, y in enumerate(leaves) if y is x)]
                values.record(x, cpu, assumed)
            if count is not None and (
                len(cl) != len(oleaves)
                or any(
                    tuple(r.shape) != tuple(c.shape)
                    for r, c in zip(oleaves, cl, strict=True)
                    if isinstance(c, torch.Tensor)
                )
            ):
                values.shape_misses[values.site()] += 1
            if answered or is_read:
                (values.assumed if assumed else values.computed)[values.site()] += 1
            if is_read:
                return unflatten([own(c, users) for c in cl], cspec)
            return out

    def taint(out, unread):
        """The CUDA results of a call over values that depend on an assumption but could not
        be computed (an in-place op returns the tensor it changed): they depend on it too,
        unknown; reads the call made are counted as such."""
        for x in flatten(out)[0]:
            if _cuda(torch, x) and values.lookup(x) is None:
                values.tainted[x] = True
        reads = values.reads
        if unread is not None and reads is not None:
            n = reads.unanswered_total() - unread
            if n:
                values.tainted_reads[values.site()] += n

    def assume_topk(out, args, kwargs):
        """Indices for a topk over unknown scores, by the routing assumption."""
        try:
            idx, x = out[1], args[0]
            k = int(args[1] if len(args) > 1 else kwargs["k"])
            dim = int(args[2] if len(args) > 2 else kwargs.get("dim", -1))
        except (TypeError, IndexError, KeyError, ValueError):
            return
        if not _cuda(torch, idx) or idx.numel() > MAX_ELEMENTS or x.dim() == 0:
            return
        dim %= x.dim()
        n = x.shape[dim]
        if k < 1 or k > n:
            return
        moved = [s for i, s in enumerate(idx.shape) if i != dim] + [k]
        rows = idx.numel() // k
        j = torch.arange(k, dtype=torch.int64)
        if values.routing == "worst":
            cpu = j.expand(rows, k)
        else:
            cpu = (torch.arange(rows, dtype=torch.int64).unsqueeze(1) * k + j) % n
        cpu = cpu.reshape(moved).movedim(-1, dim).to(idx.dtype).contiguous()
        values.record(idx, cpu, values.routing)
        values.assumptions[values.site()] += 1

    return ValuesMode()


def _cuda(torch, x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cuda"


def _shape_from_data(func) -> bool:
    name = getattr(func, "__name__", "") or ""
    return name in (
        "nonzero",
        "argwhere",
        "where",
        "__getitem__",
        "__setitem__",
        "index_put_",
        "index_put",
        "masked_select",
    )


def _to_host(torch, args, kwargs) -> bool:
    """Whether a ``Tensor.to`` call copies to the CPU."""
    dev = kwargs.get("device")
    for a in args[1:]:
        if isinstance(a, str | torch.device):
            dev = a
    if dev is None:
        return False
    return torch.device(dev).type == "cpu"
