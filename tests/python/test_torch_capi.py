"""The C library inside a process that has torch loaded (issue #28 item 6): a failed
`cachalot_malloc` called through ctypes returns NULL with a readable error and the process goes
on, while torch's own calls through CUDAPluggableAllocator still get torch's exceptions
(torch.OutOfMemoryError, with torch's message). Before, the C++ exception crossed the ctypes
frame and the host died of SIGABRT."""

import json
import subprocess
import textwrap

import pytest

from conftest import TORCH_PYTHON, package_env

DIRECT = textwrap.dedent(
    """
    import ctypes, json
    import torch  # loads libc10, where the exceptions live
    from cachalot import _native
    lib = ctypes.CDLL(_native.__file__)
    lib.cachalot_malloc.restype = ctypes.c_void_p
    lib.cachalot_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    out = {}
    for name, size, device in [("huge", 1 << 50, 0), ("bad device", 1024, 9999),
                               ("negative device", 1024, -1)]:
        p = lib.cachalot_malloc(size, device, None)
        out[name] = [p, lib.cachalot_last_error().decode()]
    ok = lib.cachalot_malloc(1 << 20, 0, None)
    out["after"] = ok is not None
    print(json.dumps(out))
    """
)


def check_direct_calls(out):
    assert out["huge"][0] is None
    assert "out of memory" in out["huge"][1].lower(), out
    assert out["bad device"][0] is None and "9999" in out["bad device"][1], out
    assert out["negative device"][0] is None and "-1" in out["negative device"][1], out
    assert out["after"], "the library still allocates after the failures"


def test_ctypes_calls_with_torch_loaded_get_null_not_an_abort():
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON}")
    p = subprocess.run(
        [str(TORCH_PYTHON), "-c", DIRECT],
        env=package_env({"CACHALOT_DEVICE": "sim", "CACHALOT_SIM_CAPACITY": "1G"}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    check_direct_calls(json.loads(p.stdout.strip().splitlines()[-1]))


BOTH = textwrap.dedent(
    """
    import ctypes, json
    import torch
    import cachalot.torch as ct
    ct.use(device="sim")
    keep = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    out = {}
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        out["torch"] = ["OutOfMemoryError", str(e)]
    lib = ctypes.CDLL(ct._native.__file__)
    lib.cachalot_malloc.restype = ctypes.c_void_p
    lib.cachalot_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.cachalot_last_error.restype = ctypes.c_char_p
    for name, size, device in [("huge", 1 << 50, 0), ("bad device", 1024, 9999),
                               ("negative device", 1024, -1)]:
        out[name] = [lib.cachalot_malloc(size, device, None), lib.cachalot_last_error().decode()]
    out["after"] = lib.cachalot_malloc(1 << 20, 0, None) is not None
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        out["torch again"] = str(e)
    out["usable"] = torch.empty(1 << 20, device="cuda").data_ptr() != 0
    print(json.dumps(out))
    """
)


def test_torch_still_raises_its_exceptions_while_ctypes_gets_null(torch_on_fakegpu):
    p = torch_on_fakegpu(["-c", BOTH], env={"CACHALOT_SIM_CAPACITY": "2G"})
    out = json.loads(p.stdout.strip().splitlines()[-1])
    kind, msg = out["torch"]
    assert kind == "OutOfMemoryError"
    assert msg.startswith("CUDA out of memory. Tried to allocate 1048576.00 GiB."), msg
    # The ctypes allocation in between is in the second message's numbers, not its kind.
    assert out["torch again"].split(" GPU 0 ")[0] == msg.split(" GPU 0 ")[0]
    check_direct_calls(out)
    assert out["usable"]
