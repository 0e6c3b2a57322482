"""The capture runtime's simulated CUDA driver (libcuda.so.1), called the way cachalot's CUDA
device (crates/cuda) calls it: it exports every entry point crates/cuda resolves, misuse
(unmapped ranges, wrong granularity, double release, a pop with nothing pushed) gets the real
driver's result code, never a crash, and what the driver's copies write they read back."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import pytest

from cachalot.capture import build
from conftest import REPO, TORCH_PYTHON


@pytest.fixture(scope="module")
def runtime():
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON} (scripts/python_env.sh --torch makes it)")
    try:
        return build.ensure_runtime(str(TORCH_PYTHON), quiet=True)
    except build.BuildError as e:
        pytest.skip(f"the capture runtime cannot be built here: {e}")


def crates_cuda_symbols() -> list[str]:
    """crates/cuda's SYMBOLS: every driver entry point it resolves."""
    text = (REPO / "crates" / "cuda" / "src" / "driver.rs").read_text()
    block = text[text.index("pub const SYMBOLS") :]
    block = block[: block.index("];")]
    return re.findall(r'"(cu\w+)"', block)


def test_the_driver_exports_every_entry_point_crates_cuda_resolves(runtime):
    names = crates_cuda_symbols()
    assert len(names) > 30 and "cuMemAllocFromPoolAsync" in names
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(runtime / "libcuda.so.1")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    assert not [n for n in names if n not in exported]


# Each call's result code, run in a child (the runtime reserves its address range at load).
MISUSE = textwrap.dedent(
    """
    import ctypes, json, sys
    cu = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")
    P, U64, SZ = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    r = {}
    def call(key, fn, *args):
        r[key] = getattr(cu, fn)(*args)
    call("init", "cuInit", 0)
    ctx, other = P(), P()
    call("pop_empty", "cuCtxPopCurrent_v2", ctypes.byref(other))
    call("retain", "cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
    call("retain_bad_device", "cuDevicePrimaryCtxRetain", ctypes.byref(other), 7)
    call("push", "cuCtxPushCurrent_v2", ctx)
    call("pop", "cuCtxPopCurrent_v2", ctypes.byref(other))
    r["popped_what_was_pushed"] = other.value == ctx.value
    call("push_foreign", "cuCtxPushCurrent_v2", P(0x1234))
    call("release", "cuDevicePrimaryCtxRelease_v2", 0)
    call("release_again", "cuDevicePrimaryCtxRelease_v2", 0)
    p = U64()
    call("alloc", "cuMemAlloc_v2", ctypes.byref(p), SZ(3 << 20))
    buf = ctypes.create_string_buffer(64)
    call("copy_in", "cuMemcpyDtoH_v2", buf, U64(p.value + 64), SZ(64))
    call("copy_past_end", "cuMemcpyDtoH_v2", buf, U64(p.value + (3 << 20) - 32), SZ(64))
    data = bytes(range(256)) * 40  # 10 KiB from an odd offset: three pages of the store
    src, back = ctypes.create_string_buffer(data, len(data)), ctypes.create_string_buffer(len(data))
    call("write", "cuMemcpyHtoD_v2", U64(p.value + 4000), src, SZ(len(data)))
    call("read_back", "cuMemcpyDtoH_v2", back, U64(p.value + 4000), SZ(len(data)))
    r["read_back_what_was_written"] = back.raw == data
    call("read_part", "cuMemcpyDtoH_v2", back, U64(p.value + 4096), SZ(100))
    r["read_part_matches"] = back.raw[:100] == data[96:196]
    call("memset", "cuMemsetD8Async", U64(p.value + 4000), ctypes.c_ubyte(7), SZ(16), P(0))
    call("read_async", "cuMemcpyDtoHAsync_v2", back, U64(p.value + 3990), SZ(32), P(0))
    r["memset_reads_back"] = back.raw[:32] == bytes(10) + bytes([7]) * 16 + data[16:22]
    call("memset_past_end", "cuMemsetD8", U64(p.value + (3 << 20) - 8), ctypes.c_ubyte(1), SZ(16))
    never = ctypes.create_string_buffer(bytes([255]) * 64, 64)
    call("read_unwritten", "cuMemcpyDtoH_v2", never, U64(p.value + (2 << 20)), SZ(64))
    r["unwritten_reads_zeros"] = never.raw == bytes(64)
    call("free", "cuMemFree_v2", p)
    call("free_again", "cuMemFree_v2", p)
    call("copy_freed", "cuMemcpyHtoD_v2", p, buf, SZ(64))
    prop = ctypes.create_string_buffer(64)
    g = SZ()
    call("granularity", "cuMemGetAllocationGranularity", ctypes.byref(g), prop, 0)
    r["granularity_value"] = g.value
    h, va = U64(), U64()
    call("create_odd_size", "cuMemCreate", ctypes.byref(h), SZ(g.value + 4096), prop, U64(0))
    call("create", "cuMemCreate", ctypes.byref(h), SZ(g.value), prop, U64(0))
    call("reserve", "cuMemAddressReserve", ctypes.byref(va), SZ(4 * g.value), SZ(0), U64(0),
         U64(0))
    call("map_misaligned", "cuMemMap", U64(va.value + 4096), SZ(g.value), SZ(0), h, U64(0))
    call("map_outside", "cuMemMap", U64(va.value + 4 * g.value), SZ(g.value), SZ(0), h, U64(0))
    call("access_unmapped", "cuMemSetAccess", va, SZ(g.value), prop, SZ(1))
    call("map", "cuMemMap", va, SZ(g.value), SZ(0), h, U64(0))
    call("access", "cuMemSetAccess", va, SZ(g.value), prop, SZ(1))
    call("unmap_unmapped", "cuMemUnmap", U64(va.value + g.value), SZ(g.value))
    call("unmap", "cuMemUnmap", va, SZ(g.value))
    call("release_handle", "cuMemRelease", h)
    call("release_handle_again", "cuMemRelease", h)
    call("free_reservation_wrong_size", "cuMemAddressFree", va, SZ(g.value))
    call("free_reservation", "cuMemAddressFree", va, SZ(4 * g.value))
    ev, pool = P(), P()
    call("event", "cuEventCreate", ctypes.byref(ev), 0)
    call("event_query", "cuEventQuery", ev)
    call("event_destroy", "cuEventDestroy_v2", ev)
    call("event_destroy_again", "cuEventDestroy_v2", ev)
    call("event_query_destroyed", "cuEventQuery", ev)
    call("pool", "cuDeviceGetDefaultMemPool", ctypes.byref(pool), 0)
    call("pool_alloc", "cuMemAllocFromPoolAsync", ctypes.byref(p), SZ(1 << 20), pool, P(0))
    used = U64()
    call("pool_used", "cuMemPoolGetAttribute", pool, 7, ctypes.byref(used))
    r["pool_used_value"] = used.value
    call("pool_set_high_nonzero", "cuMemPoolSetAttribute", pool, 8, ctypes.byref(U64(5)))
    call("pool_alloc_foreign", "cuMemAllocFromPoolAsync", ctypes.byref(p), SZ(512), P(8), P(0))
    call("pool_free", "cuMemFreeAsync", p, P(0))
    call("oom", "cuMemAlloc_v2", ctypes.byref(p), SZ(1 << 50))
    rt = ctypes.CDLL(sys.argv[1] + "/libcudart.so.13")
    r["runtime_last_error_after_driver_oom"] = rt.cudaGetLastError()
    name = ctypes.c_char_p()
    cu.cuGetErrorName(201, ctypes.byref(name))
    r["name_201"] = name.value.decode()
    print(json.dumps(r))
    """
)

SUCCESS, INVALID_VALUE, OOM, INVALID_DEVICE, INVALID_CONTEXT, INVALID_HANDLE = (
    0,
    1,
    2,
    101,
    201,
    400,
)


def test_misuse_gets_the_real_drivers_codes(runtime):
    p = subprocess.run(
        [str(TORCH_PYTHON), "-c", MISUSE, str(runtime)],
        env={"FAKE_CUDA_CAPACITY": "8G", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    expected = {
        "init": SUCCESS,
        "pop_empty": INVALID_CONTEXT,
        "retain": SUCCESS,
        "retain_bad_device": INVALID_DEVICE,
        "push": SUCCESS,
        "pop": SUCCESS,
        "popped_what_was_pushed": True,
        "push_foreign": INVALID_CONTEXT,
        "release": SUCCESS,
        "release_again": INVALID_CONTEXT,
        "alloc": SUCCESS,
        "copy_in": SUCCESS,
        "copy_past_end": INVALID_VALUE,
        "write": SUCCESS,
        "read_back": SUCCESS,
        "read_back_what_was_written": True,
        "read_part": SUCCESS,
        "read_part_matches": True,
        "unwritten_reads_zeros": True,
        "memset": SUCCESS,
        "read_async": SUCCESS,
        "memset_reads_back": True,
        "memset_past_end": INVALID_VALUE,
        "read_unwritten": SUCCESS,
        "free": SUCCESS,
        "free_again": INVALID_VALUE,
        "copy_freed": INVALID_VALUE,
        "granularity": SUCCESS,
        "granularity_value": 2 << 20,
        "create_odd_size": INVALID_VALUE,
        "create": SUCCESS,
        "reserve": SUCCESS,
        "map_misaligned": INVALID_VALUE,
        "map_outside": INVALID_VALUE,
        "access_unmapped": INVALID_VALUE,
        "map": SUCCESS,
        "access": SUCCESS,
        "unmap_unmapped": INVALID_VALUE,
        "unmap": SUCCESS,
        "release_handle": SUCCESS,
        "release_handle_again": INVALID_VALUE,
        "free_reservation_wrong_size": INVALID_VALUE,
        "free_reservation": SUCCESS,
        "event": SUCCESS,
        "event_query": SUCCESS,
        "event_destroy": SUCCESS,
        "event_destroy_again": INVALID_HANDLE,
        "event_query_destroyed": INVALID_HANDLE,
        "pool": SUCCESS,
        "pool_alloc": SUCCESS,
        "pool_used": SUCCESS,
        "pool_used_value": 1 << 20,
        "pool_set_high_nonzero": INVALID_VALUE,
        "pool_alloc_foreign": INVALID_VALUE,
        "pool_free": SUCCESS,
        "oom": OOM,
        "runtime_last_error_after_driver_oom": 0,
        "name_201": "CUDA_ERROR_INVALID_CONTEXT",
    }
    assert r == expected
