"""cachalot as PyTorch's CUDA allocator, and torch's memory tools read from it.

    import cachalot.torch
    cachalot.torch.use("expandable_segments:True")    # before the first CUDA allocation
    ...                                               # your PyTorch code, unchanged
    cachalot.torch.memory_stats()                     # torch's keys, from cachalot

Under a pluggable allocator torch's own `torch.cuda.memory_stats()` and friends raise
("CUDAPluggableAllocator does not yet support ..."); the functions here have their
signatures and results. The allocator is the C interface of cachalot's native module (the same
shared object as the rest of the package). Out-of-memory raises `torch.OutOfMemoryError` with
torch's message, as with torch's own allocator.

torch 2.15 also refuses `torch.cuda.MemPool()` under a pluggable allocator ("pluggable does not
yet support createOrIncrefPool"). A program with MemPools keeps torch's own allocator and gives
cachalot's memory to the pools instead:

    pool = torch.cuda.MemPool(cachalot.torch.mempool_allocator().allocator())
    with torch.cuda.use_mem_pool(pool): ...           # torch caches and splits in the pool
    cachalot.torch.mempool_allocator_stats()          # what torch holds from cachalot

Errors are `cachalot.CachalotError`s: a bad argument (a device index that is not a device, a
filename with a NUL byte) is an `ArgumentError`, also a `ValueError`; what the allocator cannot
do in this state (use() after CUDA started, the library failing) is an `AllocatorError`, also a
`RuntimeError`. Out of memory stays torch's `torch.OutOfMemoryError`.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import pickle
import tempfile
import threading
from typing import Any

import torch as _torch

from cachalot import _native
from cachalot._native import ArgumentError, CachalotError

__all__ = [
    "AllocatorError",
    "ArgumentError",
    "dump_snapshot",
    "enable_graph_pools",
    "is_used",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "mempool_allocator",
    "mempool_allocator_stats",
    "record_memory_history",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "snapshot",
    "use",
]

_lock = threading.Lock()
_used: dict[str, Any] = {}
_allocator: list[Any] = []  # the CUDAPluggableAllocator use() made
_mempool: dict[str, Any] = {}
_DEVICES = ("cuda", "sim")
_HISTORY = (None, "state", "all")


class AllocatorError(CachalotError, RuntimeError):
    """What cachalot's allocator cannot do now (the call is valid, the state or the library
    refuses it); the message says why."""


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(_native.__file__)  # the handle Python already holds
    for name in (
        "cachalot_memory_stats_json",
        "cachalot_memory_summary",
        "cachalot_segment_stats_json",
    ):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_int]
    lib.cachalot_dump_snapshot.restype = ctypes.c_int
    lib.cachalot_dump_snapshot.argtypes = [ctypes.c_char_p]
    lib.cachalot_record_history.restype = ctypes.c_int
    lib.cachalot_record_history.argtypes = [ctypes.c_size_t]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    lib.cachalot_backend.restype = ctypes.c_char_p
    lib.cachalot_device_kind.restype = ctypes.c_char_p
    lib.cachalot_register_stream.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    lib.cachalot_register_stream.restype = None
    for name in (
        "cachalot_reset_peak_stats",
        "cachalot_reset_accumulated_stats",
        "cachalot_segment_reset_peak_stats",
    ):
        getattr(lib, name).argtypes = [ctypes.c_int]
        getattr(lib, name).restype = None
    return lib


_lib = _library()


def _error() -> str:
    return (_lib.cachalot_last_error() or b"").decode(errors="replace")


def _device_kind(device: Any) -> str:
    if device not in _DEVICES:
        raise ArgumentError(f"device={device!r}: expected one of {', '.join(_DEVICES)}")
    return device


def use(conf: str | None = None, device: str = "cuda") -> None:
    """Makes cachalot PyTorch's CUDA allocator. Call it before the first CUDA allocation.

    conf: a PYTORCH_CUDA_ALLOC_CONF string (None: the environment, read as torch reads it).
    device: "cuda" (the GPUs, through the CUDA driver) or "sim" (cachalot's simulated GPU;
    its size from CACHALOT_SIM_CAPACITY, e.g. "80G"; for tests without a GPU).
    A bad configuration raises here (cachalot.ConfigError); a driver that cannot be used
    raises at the first allocation, with the reason."""
    _device_kind(device)
    if conf is not None and not isinstance(conf, str):
        raise ArgumentError(f"conf={conf!r}: expected a PYTORCH_CUDA_ALLOC_CONF string or None")
    with _lock:
        if _used:
            if _used == {"conf": conf, "device": device}:
                return
            raise AllocatorError(
                f"cachalot.torch.use() was already called with {_used}; the allocator cannot "
                "change once in use"
            )
        if _mempool:
            raise AllocatorError(
                "mempool_allocator() gave cachalot's memory to torch's MemPools, which torch 2.15 "
                "refuses under a pluggable process allocator; use() cannot follow it"
            )
        if _torch.cuda.is_initialized():
            raise AllocatorError(
                "cachalot.torch.use() must be called before the first CUDA allocation: CUDA is "
                "already initialized in this process, and torch cannot swap an allocator that "
                "is in use. Call it at the start of the program (or use `cachalot record`)."
            )
        if conf is not None:
            # Checked now, with torch's message for what torch rejects.
            _native.parse_config(conf)
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
        os.environ["CACHALOT_DEVICE"] = device
        path = _native.__file__
        alloc = _torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_malloc", "cachalot_free")
        hooks = alloc.allocator()
        for setter, fn in [
            ("set_init_fn", "cachalot_init"),
            ("set_reset_fn", "cachalot_reset"),
            ("set_memory_fraction_fn", "cachalot_set_memory_fraction"),
            ("set_record_stream_fn", "cachalot_record_stream"),
        ]:
            getattr(hooks, setter)(ctypes.cast(getattr(_lib, fn), ctypes.c_void_p).value)
        _torch.cuda.memory.change_current_allocator(alloc)
        _allocator.append(alloc)
        _register_streams()
        # Starts the library now, so that a bad environment is reported here, once.
        if _lib.cachalot_backend() is None:
            raise AllocatorError(f"cachalot could not start: {_error()}")
        _used.update(conf=conf, device=device)


_registering = threading.local()


def _register_stream(s: Any) -> None:
    """Tells the library which c10 stream the handle of `s` is, and the same for the other
    streams of its pool (torch hands them out round-robin, also to C++ code that never goes
    through Python): torch orders the blocks that completed events give back by that identity
    (crates/core/src/streams.rs)."""
    if getattr(_registering, "on", False):
        return
    _registering.on = True
    try:
        sid, dev = int(s.stream_id), int(s.device_index)
        _lib.cachalot_register_stream(s.cuda_stream, dev, sid)
        # A pool stream's id: index << 5 | priority type << 1 | 1 (0: default, even: external).
        if sid & 1 and 0 < (sid >> 1) & 0xF < 0xF:
            for index in range(32):
                sibling = (sid & 0x1F) | index << 5
                if sibling == sid:
                    continue
                t = _torch.cuda.Stream(stream_id=sibling, device_index=dev, device_type=1)
                if t.cuda_stream:
                    _lib.cachalot_register_stream(t.cuda_stream, dev, sibling)
    except (RuntimeError, ValueError, TypeError, AttributeError):
        pass  # not a stream torch can describe: it counts as an external stream
    finally:
        _registering.on = False


def _register_streams() -> None:
    """Registers each torch.cuda.Stream as it is made ([`_register_stream`])."""
    cls = _torch.cuda.Stream
    original = cls.__new__

    def __new__(klass, *args, **kwargs):
        s = original(klass, *args, **kwargs)
        _register_stream(s)
        return s

    cls.__new__ = staticmethod(__new__)


def enable_graph_pools(allocator: Any = None, library: str | None = None) -> None:
    """Routes torch's private-pool calls to cachalot's pools: CUDA-graph capture
    (`torch.cuda.graph`, `CUDAGraph.capture_begin(pool=...)`), `torch.cuda.graph_pool_handle`
    pools and torch.compile's cudagraph trees. Without it a pluggable allocator ignores them
    and a capture's allocations land in the ordinary pools.

    allocator: the torch.cuda.memory.CUDAPluggableAllocator that loads cachalot (None: the one
    use() made). library: the cachalot C library it loads (None: this package's native
    module; a libcachalot_capi.so path otherwise). Compiles a small C++ file against torch's
    headers the first time (a C++ compiler is needed; cachalot.graph_pools.GraphPoolsError
    says what is missing)."""
    from cachalot import graph_pools

    if allocator is None:
        if not _allocator:
            raise AllocatorError(
                "enable_graph_pools(): call cachalot.torch.use() first, or pass the "
                "CUDAPluggableAllocator that loads cachalot"
            )
        allocator = _allocator[0]
    hooks = allocator.allocator() if hasattr(allocator, "allocator") else allocator
    graph_pools.enable(hooks, library or _native.__file__)


def mempool_allocator(device: str = "cuda") -> Any:
    """cachalot as the allocator of `torch.cuda.MemPool`s: a CUDAPluggableAllocator whose
    `.allocator()` goes to `torch.cuda.MemPool(...)`. torch's own allocator stays the process's
    and caches and splits in the pool as usual; each segment it asks for is one device
    allocation of exactly that size from cachalot, given back to the device as soon as torch
    frees it (`empty_cache()` after `del pool`), never cached twice. Out of memory is torch's
    to raise (`torch.OutOfMemoryError`, after torch freed its cache and retried).

    device: as in `use()` ("cuda", or "sim" for cachalot's simulated GPU). The same object is
    returned each time. Not with `use()`: torch refuses MemPools under a pluggable process
    allocator."""
    _device_kind(device)
    with _lock:
        if _used:
            raise AllocatorError(
                "cachalot.torch.use() made cachalot the process's allocator, and torch 2.15 "
                'refuses torch.cuda.MemPool() under a pluggable allocator ("pluggable does not '
                "yet support createOrIncrefPool\"). For MemPools keep torch's own allocator and "
                "pass mempool_allocator().allocator() to torch.cuda.MemPool instead of use()."
            )
        if _mempool:
            if _mempool["device"] != device:
                raise AllocatorError(
                    f"mempool_allocator() was already called with device={_mempool['device']!r}"
                )
            return _mempool["allocator"]
        # Read by the library when it starts (here, unless something started it before).
        os.environ["CACHALOT_DEVICE"] = device
        kind = _lib.cachalot_device_kind()
        if kind is None:
            raise AllocatorError(f"cachalot could not start: {_error()}")
        if kind.decode() != device:
            raise AllocatorError(
                f"cachalot's library already started with device={kind.decode()!r} in this "
                f"process; it cannot also serve device={device!r}"
            )
        alloc = _torch.cuda.memory.CUDAPluggableAllocator(
            _native.__file__, "cachalot_segment_malloc", "cachalot_segment_free"
        )
        _mempool.update(device=device, allocator=alloc)
        return alloc


def mempool_allocator_stats(device: Any = None) -> dict[str, Any]:
    """What torch holds from `mempool_allocator()` on `device`, with `memory_stats()`'s keys:
    each segment torch has is one allocation and one segment of its size (small pool if at
    most 2 MiB), so `reserved_bytes.all.current` is the bytes of all MemPool segments torch
    holds from cachalot; `num_device_alloc`/`num_device_free` count the device calls."""
    raw = _lib.cachalot_segment_stats_json(_index(device))
    if raw is None:
        raise AllocatorError(_error())
    return collections.OrderedDict(sorted(json.loads(raw).items()))


def is_used() -> bool:
    """Whether `use()` made cachalot PyTorch's allocator in this process."""
    return bool(_used)


def _index(device: Any = None) -> int:
    """The CUDA device index `device` means (None: the current device), as torch reads it;
    ArgumentError for anything that is not one of this process's devices."""
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        try:
            d = _torch.device(device)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ArgumentError(f"device={device!r}: not a device ({e})") from None
        if d.type != "cuda":
            raise ArgumentError(f"device={device!r}: expected a cuda device, but got: {d}")
        if d.index is None:
            return _torch.cuda.current_device()
        index = d.index
    count = _torch.cuda.device_count()
    if not 0 <= index < count:
        valid = f"0..{count - 1}" if count else "none: torch sees no CUDA device"
        raise ArgumentError(f"device={device!r}: not a CUDA device index (valid: {valid})")
    return index


_ABSENT: list[frozenset[str]] = []  # the stats keys this torch lacks, once known


def _absent_stats() -> frozenset[str]:
    """The statistics of torch 2.15 that the running torch's `memory_stats()` has not (the
    version table's, in Rust): each the first part of keys; none for a release the table does
    not know."""
    if not _ABSENT:
        try:
            absent = _native.torch_stats_absent(str(_torch.__version__))
        except ArgumentError:
            absent = []
        _ABSENT.append(frozenset(absent))
    return _ABSENT[0]


def memory_stats(device: Any = None) -> dict[str, Any]:
    """`torch.cuda.memory_stats(device)`: the flat keys, sorted, as an OrderedDict; the keys
    of the torch that runs (2.9 has no ``num_oom_rejections``, 2.12 no
    ``reserved_bytes_by_private_pools.*``)."""
    raw = _lib.cachalot_memory_stats_json(_index(device))
    if raw is None:
        raise AllocatorError(_error())
    absent = _absent_stats()
    return collections.OrderedDict(
        sorted(i for i in json.loads(raw).items() if i[0].split(".", 1)[0] not in absent)
    )


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    _lib.cachalot_reset_peak_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _lib.cachalot_reset_accumulated_stats(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """`torch.cuda.memory_summary(device)`: torch's table (always the full one)."""
    raw = _lib.cachalot_memory_summary(_index(device))
    if raw is None:
        raise AllocatorError(_error())
    return raw.decode()


def record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = 2**63 - 1,
    device: Any = None,
) -> None:
    """`torch.cuda.memory._record_memory_history`: history on every device (cachalot keeps
    no stack traces: `context` and `stacks` are accepted and not used); None stops it."""
    if enabled not in _HISTORY:
        raise ArgumentError(f"enabled={enabled!r}: expected one of {_HISTORY}")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 0:
        raise ArgumentError(f"max_entries={max_entries!r}: expected a non-negative integer")
    if device is not None:
        _index(device)
    entries = 0 if enabled is None else min(max_entries, 2**63 - 1)
    if _lib.cachalot_record_history(entries) != 0:
        raise AllocatorError(_error())


def dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """`torch.cuda.memory._dump_snapshot(filename)`: a pickle memory_viz opens."""
    try:
        path = os.fsencode(filename)
    except TypeError:
        raise ArgumentError(
            f"filename={filename!r}: expected a path (str, bytes or os.PathLike)"
        ) from None
    if b"\0" in path:
        # The C call would see only what comes before it, and write there.
        raise ArgumentError(f"filename={filename!r}: a path cannot contain a NUL byte")
    if not path:
        raise ArgumentError("filename='': expected the path of the file to write")
    rc = _lib.cachalot_dump_snapshot(path)
    if rc != 0:
        raise AllocatorError(_error())


def snapshot() -> dict[str, Any]:
    """`torch.cuda.memory._snapshot()`: segments and history of every device."""
    fd, tmp = tempfile.mkstemp(prefix="cachalot-", suffix=".pickle")
    os.close(fd)
    try:
        dump_snapshot(tmp)
        with open(tmp, "rb") as f:
            return pickle.load(f)
    finally:
        os.unlink(tmp)


def memory_snapshot() -> list[dict[str, Any]]:
    """`torch.cuda.memory_snapshot()`: the segments."""
    return snapshot()["segments"]
