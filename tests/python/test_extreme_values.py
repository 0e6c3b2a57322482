"""The extreme-value sweep through every entry point (#28 item 4): sizes and addresses near
2**64, huge counts, bad device indexes and fractions, through the C library (ctypes, with torch
loaded and without, and under a 4 GiB address-space limit), the Python API and the console
script on traces written to disk. Each input is an error or a result: no panic, no abort, no
signal, no exception other than CachalotError from the Python API."""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import textwrap

import pytest

import cachalot
from conftest import TORCH_PYTHON, cachalot_cli, package_env

U64 = (1 << 64) - 1
EXTREME = [0, 1, 511, 512, (1 << 20) + 1, 1 << 31, 1 << 32, 1 << 40, 1 << 62, 1 << 63]
EXTREME += [U64 - (1 << 21), U64 - 511, U64 - 1, U64]

C_SWEEP = textwrap.dedent(
    """
    import ctypes, json, random, sys
    if sys.argv[2] == "torch":
        import torch  # noqa: F401 (c10 loaded: a C++ exception must not cross the C frame)
    import cachalot._native as n
    lib = ctypes.CDLL(n.__file__)
    vp, sz, i, d = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_double
    lib.cachalot_malloc.restype = vp
    lib.cachalot_malloc.argtypes = [sz, i, vp]
    lib.cachalot_free.argtypes = [vp, sz, i, vp]
    lib.cachalot_record_stream.argtypes = [vp, vp]
    lib.cachalot_register_stream.argtypes = [vp, i, ctypes.c_int64]
    lib.cachalot_set_memory_fraction.argtypes = [d, i]
    lib.cachalot_memory_stats_json.restype = ctypes.c_char_p
    lib.cachalot_memory_stats_json.argtypes = [i]
    lib.cachalot_segment_malloc.restype = vp
    lib.cachalot_segment_malloc.argtypes = [sz, i, vp]
    lib.cachalot_release_pool.argtypes = [i, ctypes.c_uint64, ctypes.c_uint64]
    lib.cachalot_begin_allocate_to_pool.argtypes = [i, ctypes.c_uint64, ctypes.c_uint64, vp, vp]
    extreme = json.loads(sys.argv[3])
    rng = random.Random(int(sys.argv[1]))
    devices = [0, 0, 0, 1, -1, 9999, 2**31 - 1, -(2**31)]
    def value():
        return rng.choice(extreme) if rng.random() < 0.8 else rng.getrandbits(64)
    live, calls, got = [], 0, 0
    for _ in range(int(sys.argv[4])):
        k = rng.randrange(9)
        dev, stream = rng.choice(devices), rng.choice([None, value()])
        if k < 3:
            p = lib.cachalot_malloc(value(), dev, stream)
            if p:
                got += 1
                live.append(p)
        elif k == 3 and live:
            lib.cachalot_free(live.pop(rng.randrange(len(live))), 0, 0, None)
        elif k == 4:
            lib.cachalot_free(value() or None, value(), dev, stream)
        elif k == 5:
            lib.cachalot_record_stream(rng.choice(live + [value()]) or None, stream)
        elif k == 6:
            f = rng.choice([float("nan"), float("inf"), -1.0, 2.0, 0.0, 0.5, 1.0, 1e308])
            lib.cachalot_set_memory_fraction(f, dev)
        elif k == 7:
            s = lib.cachalot_memory_stats_json(dev)
            if s is not None:
                json.loads(s)
        else:
            lib.cachalot_register_stream(stream, dev, rng.getrandbits(63))
            lib.cachalot_segment_malloc(value(), dev, stream)
            lib.cachalot_release_pool(dev, value(), value())
        calls += 1
    print(json.dumps({"calls": calls, "allocated": got}))
    """
)


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _c_sweep(torch: bool, limit: bool, seed: int, calls: int, python: str) -> dict:
    env = package_env({"CACHALOT_DEVICE": "sim", "CACHALOT_SIM_CAPACITY": "80G"})
    sweep_args = [json.dumps(EXTREME), str(calls)]
    p = subprocess.run(
        [python, "-c", C_SWEEP, str(seed), "torch" if torch else "none", *sweep_args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_limit_address_space if limit else None,
        check=False,
    )
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
    assert "panicked" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


@pytest.mark.parametrize("limit", [False, True])
def test_the_c_library_without_torch(limit):
    r = _c_sweep(False, limit, seed=7, calls=3000, python=sys.executable)
    assert r["calls"] == 3000
    assert r["allocated"] > 50  # the sweep reaches real allocations too


def test_the_c_library_with_torch_loaded():
    if not TORCH_PYTHON.exists():
        pytest.skip(f"no torch venv at {TORCH_PYTHON} (set CACHALOT_TORCH_PYTHON)")
    r = _c_sweep(True, False, seed=8, calls=3000, python=str(TORCH_PYTHON))
    assert r["calls"] == 3000 and r["allocated"] > 50


def _extreme_traces(tmp_path, seed: int, count: int) -> list:
    rng = random.Random(seed)
    paths = []
    for t in range(count):
        rows = ["Thread,Time,Action,Pointer,Size,Stream"]
        live = []
        for i in range(rng.randint(1, 40)):
            if live and rng.random() < 0.4:
                ptr, size = live.pop(rng.randrange(len(live)))
                rows.append(f"1,{i},free,{ptr:#x},{size},{rng.choice([0, 7, U64])}")
            else:
                ptr = rng.choice([rng.choice(EXTREME), rng.getrandbits(64)])
                size = rng.choice(EXTREME)
                live.append((ptr, size))
                rows.append(f"1,{i},allocate,{ptr:#x},{size},{rng.choice([0, 3, U64])}")
        p = tmp_path / f"extreme{t}.csv"
        p.write_text("\n".join(rows) + "\n")
        paths.append(p)
    return paths


def test_the_console_script_on_extreme_traces(tmp_path):
    calls = 0
    for trace in _extreme_traces(tmp_path, seed=3, count=12):
        for args in (
            ["replay", str(trace)],
            ["tune", "--capacity", "24G", "--threads", "1", str(trace)],
            ["compare", "--capacity", str(U64), str(trace), "", "expandable_segments:True"],
            ["convert", str(trace), str(tmp_path / "out.csv")],
        ):
            p = subprocess.run(
                [*cachalot_cli(), *args],
                env=package_env(),
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=_limit_address_space,
                check=False,
            )
            calls += 1
            assert p.returncode in (0, 1, 2), (args, p.returncode, p.stderr[-2000:])
            assert "panicked" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert calls == 48


def test_the_python_api_on_extreme_traces(tmp_path):
    calls = errors = 0
    for trace in _extreme_traces(tmp_path, seed=4, count=12):
        for call in (
            lambda t: cachalot.replay(str(t)),
            lambda t: cachalot.replay(str(t), capacity=U64),
            lambda t: cachalot.tune(str(t), capacity="24G", threads=1),
            lambda t: cachalot.compare(str(t), ["", "max_split_size_mb:20"], capacity=U64),
        ):
            calls += 1
            try:
                call(trace)
            except cachalot.CachalotError:
                errors += 1
    assert calls == 48
    assert errors < calls  # some of them are results


@pytest.mark.parametrize(
    "call",
    [
        lambda t: cachalot.replay(t, conf=5),
        lambda t: cachalot.compare(t, [5], capacity="24G"),
        lambda t: cachalot.compare(t, 5, capacity="24G"),
        lambda t: cachalot.parse_config(5),
        lambda t: cachalot.parse_config(cachalot=b"x"),
        lambda t: cachalot.tune(t, capacity=1.5),
        lambda t: cachalot.tune(t, capacity="24G", threads=10**5),
        lambda t: cachalot.tune(t, capacity="24G", device=2**40),
        lambda t: cachalot.replay(t, capacity=2**64),
        lambda t: cachalot.convert(t, "a\0b"),
    ],
)
def test_bad_python_arguments_are_cachalot_errors(tmp_path, call):
    """#28 item 14: each bad argument is a CachalotError (ArgumentError also a ValueError),
    never a TypeError/OverflowError from the binding, nor silently accepted."""
    (trace,) = _extreme_traces(tmp_path, seed=5, count=1)
    with pytest.raises(cachalot.CachalotError):
        call(str(trace))
