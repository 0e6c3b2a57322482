"""Ctrl-C and SIGTERM during long native calls (#28 items 11 and 3): the Python API raises
KeyboardInterrupt instead of waiting for the Rust call (a FIFO with no writer waited forever);
the pip console script ends at SIGINT/SIGTERM with 130/143, keeping the previous output file
and leaving no temporary file behind."""

from __future__ import annotations

import contextlib
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


def _spawn(argv: list[str]) -> subprocess.Popen:
    """Starts `argv` with SIGINT's default action, as a shell at a terminal starts a command:
    a test run started with `&` from a script (a CI job, nohup) passes SIGINT ignored to its
    children, and a Python started so raises no KeyboardInterrupt at Ctrl-C (by design)."""
    return subprocess.Popen(
        argv,
        env=package_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _opened(p: subprocess.Popen, path: Path, limit: float = 120.0) -> None:
    """Waits until `p` has `path` open: the call is inside the native code, waiting on the
    FIFO (a signal sent sooner would land in the interpreter's start or `import cachalot`)."""
    deadline = time.monotonic() + limit
    fds = Path(f"/proc/{p.pid}/fd")
    while True:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, f"{path} was never opened"
        with contextlib.suppress(OSError):  # an fd closed while listed
            if any(os.readlink(fd) == str(path) for fd in fds.iterdir()):
                return
        time.sleep(0.005)


def _interrupted(p: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[str, str]:
    """Sends `sig` to `p` and waits for it to end; ends it if it has not within 20 s (a
    call that does not end was the bug), so that no process outlives the test."""
    try:
        p.send_signal(sig)
        return p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_ctrl_c_interrupts_an_api_call_waiting_on_a_fifo(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    p = _spawn([sys.executable, "-c", API_CALL, str(fifo), str(TRACE)])
    _opened(p, fifo)
    out, err = _interrupted(p)
    assert p.returncode == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("KeyboardInterrupt after"), out
    assert json.loads(lines[1]) == cachalot.replay(str(TRACE)).memory_stats


def test_ctrl_c_ends_the_console_script_waiting_on_a_fifo(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    p = _spawn([*cachalot_cli(), "tune", "--capacity", "24G", str(fifo)])
    _opened(p, fifo)
    out, err = _interrupted(p)
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
    _, err = _interrupted(p, signal.SIGTERM)
    assert p.returncode == 143, err
    assert "interrupted by SIGTERM" in err
    assert sorted(x.name for x in out_dir.iterdir()) == ["trace.csv.gz"]
    assert out.read_text() == "previous\n"
