#!/usr/bin/env python3
"""Use cachalot as PyTorch's CUDA allocator, and read its statistics.

    cargo build --release -p cachalot-capi          # builds target/release/libcachalot_capi.so
    python3 crates/capi/examples/use_from_torch.py [path/to/libcachalot_capi.so]

The three lines that switch PyTorch to cachalot (before anything is allocated on the GPU):

    import torch
    alloc = torch.cuda.memory.CUDAPluggableAllocator("libcachalot_capi.so", "cachalot_malloc", "cachalot_free")
    torch.cuda.memory.change_current_allocator(alloc)

cachalot then reads PYTORCH_CUDA_ALLOC_CONF (and CACHALOT_ALLOC_CONF) exactly as torch 2.15
does. Under a pluggable allocator torch.cuda.memory_stats() raises, so cachalot's statistics,
summary and snapshot are read from the library itself with ctypes (memory_stats() below).
The optional hooks make torch.cuda.empty_cache(), set_per_process_memory_fraction() and
Tensor.record_stream() reach cachalot (use_cachalot() below sets them).

`--selftest` exercises the same ctypes calls without torch or a GPU, on cachalot's simulated
device (CACHALOT_DEVICE=sim). Where torch is not installed or sees no CUDA GPU, the script
says so and runs the self-test instead.
"""

import ctypes
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIB = os.path.join(HERE, "..", "..", "..", "target", "release", "libcachalot_capi.so")


def load(path):
    """The library through ctypes, with the prototypes of include/cachalot.h."""
    lib = ctypes.CDLL(path)
    lib.cachalot_malloc.restype = ctypes.c_void_p
    lib.cachalot_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.cachalot_free.restype = None
    lib.cachalot_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    for name in ("cachalot_memory_stats_json", "cachalot_memory_summary"):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_int]
    lib.cachalot_dump_snapshot.restype = ctypes.c_int
    lib.cachalot_dump_snapshot.argtypes = [ctypes.c_char_p]
    lib.cachalot_record_history.restype = ctypes.c_int
    lib.cachalot_record_history.argtypes = [ctypes.c_size_t]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    lib.cachalot_backend.restype = ctypes.c_char_p
    lib.cachalot_unknown_frees.restype = ctypes.c_uint64
    lib.cachalot_reset_peak_stats.argtypes = [ctypes.c_int]
    return lib


def memory_stats(lib, device=0):
    """torch.cuda.memory_stats(device), from cachalot: {"allocated_bytes.all.current": ..., ...}."""
    raw = lib.cachalot_memory_stats_json(device)
    if raw is None:
        raise RuntimeError(lib.cachalot_last_error().decode())
    return json.loads(raw)


def use_cachalot(path):
    """Makes cachalot PyTorch's CUDA allocator; returns the library for reading its stats."""
    import torch

    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_malloc", "cachalot_free")
    lib = load(path)  # the same library: dlopen returns the handle torch already opened
    hooks = alloc.allocator()
    for setter, fn in [
        ("set_init_fn", "cachalot_init"),
        ("set_reset_fn", "cachalot_reset"),
        ("set_memory_fraction_fn", "cachalot_set_memory_fraction"),
        ("set_record_stream_fn", "cachalot_record_stream"),
    ]:
        if hasattr(hooks, setter):  # all four exist in torch >= 2.1
            getattr(hooks, setter)(ctypes.cast(getattr(lib, fn), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    return lib


def show(lib, label):
    s = memory_stats(lib)
    print(
        f"{label}: allocated {s['allocated_bytes.all.current']:,} B, "
        f"reserved {s['reserved_bytes.all.current']:,} B "
        f"(peak {s['reserved_bytes.all.peak']:,} B), "
        f"{s['num_device_alloc']} device allocations"
    )
    return s


def with_torch(path):
    import torch

    lib = use_cachalot(path)
    print("cachalot backend:", lib.cachalot_backend().decode())
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(5):
        loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    show(lib, "after 5 steps")
    print(lib.cachalot_memory_summary(0).decode())
    del model, opt, loss
    torch.cuda.empty_cache()  # reaches cachalot through the reset hook
    show(lib, "after empty_cache")


def selftest(path):
    """The ctypes calls above, on the simulated device: no torch, no GPU."""
    os.environ["CACHALOT_DEVICE"] = "sim"  # read by the library at its first call
    lib = load(path)
    lib.cachalot_init(1)
    assert lib.cachalot_record_history(10000) == 0
    stream = ctypes.c_void_p(0x7)
    ptrs = [lib.cachalot_malloc(n << 20, 0, stream) for n in (1, 3, 5, 12)]
    assert all(ptrs), lib.cachalot_last_error()
    s = show(lib, "4 allocations")
    assert s["allocation.all.current"] == 4
    assert s["allocated_bytes.all.current"] == (1 + 3 + 5 + 12) << 20
    for p, n in zip(ptrs, (1, 3, 5, 12)):
        lib.cachalot_free(p, n << 20, 0, stream)
    lib.cachalot_free(ctypes.c_void_p(0xDEAD000), 16, 0, stream)  # reported, not fatal
    assert lib.cachalot_unknown_frees() == 1
    assert "Allocated memory" in lib.cachalot_memory_summary(0).decode()
    snap = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cachalot-selftest-{os.getpid()}.pickle")
    assert lib.cachalot_dump_snapshot(snap.encode()) == 0, lib.cachalot_last_error()
    import pickle

    with open(snap, "rb") as f:
        d = pickle.load(f)
    os.remove(snap)
    assert len(d["device_traces"][0]) >= 8, d["device_traces"]
    lib.cachalot_reset()
    s = show(lib, "after reset")
    assert s["reserved_bytes.all.current"] == 0
    print(
        "SELFTEST OK",
        json.dumps(
            {k: s[k] for k in ("allocation.all.allocated", "num_device_alloc", "num_device_free")}
        ),
    )


def no_gpu():
    """Why torch cannot train on a GPU here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():  # counts devices; allocates nothing
        return f"torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is False)"
    return None


def main():
    args = [a for a in sys.argv[1:] if a != "--selftest"]
    path = os.path.abspath(args[0] if args else DEFAULT_LIB)
    if not os.path.exists(path):
        sys.exit(f"{path} not found: run `cargo build --release -p cachalot-capi` first")
    if "--selftest" in sys.argv:
        selftest(path)
        return
    why = no_gpu()
    if why is None:
        with_torch(path)
        return
    print(
        f"{why}: running the self-test instead (--selftest: the same ctypes calls on "
        "cachalot's simulated device, without torch); the training loop needs a GPU"
    )
    selftest(path)


if __name__ == "__main__":
    main()
