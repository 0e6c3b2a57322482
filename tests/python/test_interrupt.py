"""Ctrl-C and SIGTERM during long native calls (#28 items 11 and 3): the Python API raises
KeyboardInterrupt instead of waiting for the Rust call (a FIFO with no writer waited forever);
the pip console script ends at SIGINT/SIGTERM with 130/143, keeping the previous output file
and leaving no temporary file behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cachalot
from conftest import FIXTURES, cachalot_cli, package_env

TRACE = FIXTURES / "traces" / "bert-finetune-varlen.csv.gz"

API_CALL = textwrap.dedent(
    """
    import json, sys, time
    import cachalot
    start = time.monotonic()
    try:
        cachalot.tune(sys.argv[1], capacity="24G")
    except KeyboardInterrupt:
        print(f"KeyboardInterrupt after {time.monotonic() - start:.1f} s", flush=True)
        # The next call runs to its end: the stop does not stay asked.
        print(json.dumps(cachalot.replay(sys.argv[2]).memory_stats), flush=True)
        sys.exit(0)
    print("returned", flush=True)
    sys.exit(3)
    """
)


def _started(p: subprocess.Popen, marker: Path | None = None, limit: float = 60.0) -> None:
    """Waits until `p` is inside the call: `marker` exists, or a moment after its start."""
    deadline = time.monotonic() + limit
    while marker is not None and not marker.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the call did not start"
        time.sleep(0.005)
    if marker is None:
        time.sleep(2.0)  # the interpreter imports cachalot and enters the call


def test_ctrl_c_interrupts_an_api_call_waiting_on_a_fifo(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    p = subprocess.Popen(
        [sys.executable, "-c", API_CALL, str(fifo), str(TRACE)],
        env=package_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _started(p)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("KeyboardInterrupt after"), out
    assert json.loads(lines[1]) == cachalot.replay(str(TRACE)).memory_stats


def test_ctrl_c_ends_the_console_script_waiting_on_a_fifo(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    p = subprocess.Popen(
        [*cachalot_cli(), "tune", "--capacity", "24G", str(fifo)],
        env=package_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _started(p)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 130, (out, err)
    assert "interrupted by Ctrl-C" in err


def test_sigterm_during_a_write_keeps_the_previous_file_and_no_temporary_one(tmp_path):
    big = tmp_path / "big.csv"
    with big.open("w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for i in range(600_000):
            size = 512 + (i * 7919) % 4_000_000
            f.write(f"1,{2 * i},allocate,{0x1000 + i:#x},{size},0\n")
            f.write(f"1,{2 * i + 1},free,{0x1000 + i:#x},{size},0\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "trace.csv.gz"
    out.write_text("previous\n")
    p = subprocess.Popen(
        [*cachalot_cli(), "convert", str(big), str(out)],
        env=package_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    # The temporary file appears when the write starts.
    while len(list(out_dir.iterdir())) < 2:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "no temporary file"
        time.sleep(0.005)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 143, err
    assert "interrupted by SIGTERM" in err
    assert sorted(x.name for x in out_dir.iterdir()) == ["trace.csv.gz"]
    assert out.read_text() == "previous\n"
