"""`cachalot record` as a careful user expects of a wrapper: it destroys nothing of the user's,
checks `-o` before the program runs, forwards SIGINT/SIGTERM and waits for the snapshot, exits
with the shell's status, writes one snapshot per process, and nested recordings compose.

The first tests need no torch (the program never uses CUDA); the others run real PyTorch on
the fake GPU and skip where that is not set up."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import (
    FAKEGPU,
    FAKEGPU_BUILD,
    TORCH_PYTHON,
    assert_no_process_runs,
    cachalot_cli,
    fakegpu_missing,
    package_env,
    signal_and_wait,
    wait_until_ready,
)


def record(args, cwd=None, env=None):
    return subprocess.run(
        [*cachalot_cli(), "record", *map(str, args)],
        env=package_env(env),
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=600,
    )


def test_record_o_the_script_does_not_touch_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    p = record(["-o", script, "--", sys.executable, script])
    assert p.returncode == 2, p.stderr
    assert "is not a snapshot" in p.stderr and "ran" not in p.stdout
    assert script.read_text() == "print('ran')\n"


def test_an_earlier_snapshot_is_kept_when_the_run_writes_none(tmp_path):
    out = tmp_path / "snap.pickle"
    old = pickle.dumps({"segments": [], "device_traces": [[]]})
    out.write_bytes(old)
    (tmp_path / "snap.device.json").write_text("{}")
    p = record(["-o", out, "--", sys.executable, "-c", "pass"])
    assert p.returncode == 1
    assert "no snapshot (the earlier snapshot there is kept)" in p.stderr
    assert out.read_bytes() == old
    assert (tmp_path / "snap.device.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "empty output path"),
        (".", "is a folder"),
        ("missing-dir/snap.pickle", "does not exist"),
        ("-", "give a file name"),
    ],
)
def test_o_is_checked_before_the_program_runs(tmp_path, output, message):
    marker = tmp_path / "ran"
    p = record(
        ["-o", output, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"], cwd=tmp_path
    )
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not marker.exists(), "the program ran although -o could not be written"


def test_max_entries_out_of_range_is_refused(tmp_path):
    p = record(["--max-entries", "99999999999999999999", "--", sys.executable, "-c", "pass"])
    assert p.returncode == 2
    assert "max_entries=99999999999999999999" in p.stderr and "1 to" in p.stderr


def test_a_child_killed_by_a_signal_gives_128_plus_the_signal(tmp_path):
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    p = record(["-o", tmp_path / "s.pickle", "--", sys.executable, "-c", kill])
    assert p.returncode == 137, p.stderr
    assert "killed by SIGKILL" in p.stderr


def test_interpreter_options_stay_the_interpreters(tmp_path):
    code = "import sys; print(sys.flags.dont_write_bytecode, sys.flags.dev_mode, sys.argv[1:])"
    p = record(
        ["-o", tmp_path / "s.pickle", "--", sys.executable, "-B", "-X", "dev", "-c", code, "a"]
    )
    assert "1 True ['a']" in p.stdout, p.stderr


# --- with torch on the fake GPU ---------------------------------------------------------

SLOW_EXIT = textwrap.dedent(
    """
    import sys, time, torch
    x = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
    open(sys.argv[1], "w").close()  # ready
    try:
        time.sleep(120)
    finally:
        time.sleep(1.0)  # the program's own cleanup takes a while: it must get the time
        y = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # recorded after the signal
    """
)


def _torch_env():
    why = fakegpu_missing()
    if why:
        pytest.skip(why)
    return package_env({"PYTHON": str(TORCH_PYTHON), "FAKEGPU_BUILD": str(FAKEGPU_BUILD)})


def _record_argv(out, script, *args):
    """`cachalot record -o OUT -- python SCRIPT ARGS`, with torch's interpreter on the fake GPU."""
    argv = ["bash", str(FAKEGPU / "run.sh"), "-m", "cachalot", "record", "-o", str(out), "--"]
    return [*argv, str(TORCH_PYTHON), str(script), *map(str, args)]


def _record_torch(tmp_path, name, script_text, *args):
    """Writes `script_text` to `tmp_path/name` and records it into `tmp_path/snap.pickle`,
    waiting for it; returns the CompletedProcess and the snapshot's path."""
    env = _torch_env()
    script = tmp_path / name
    script.write_text(script_text)
    out = tmp_path / "snap.pickle"
    p = subprocess.run(
        _record_argv(out, script, *args),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return p, out


def _start_record(tmp_path, script_text, sigint=signal.SIG_DFL):
    """Starts `cachalot record` on `script_text` with SIGINT's action `sigint` (ignored: as a
    job started with `&` from a script, a CI run, inherits it) and waits until it is ready."""
    env = _torch_env()
    script = tmp_path / "train.py"
    script.write_text(script_text)
    out = tmp_path / "snap.pickle"
    ready = tmp_path / "ready"
    p = subprocess.Popen(
        _record_argv(out, script, ready),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    wait_until_ready(p, ready)
    return p, out


def _sizes(snapshot_path):
    snap = pickle.loads(snapshot_path.read_bytes())
    return [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]


@pytest.mark.parametrize(
    ("sig", "sigint"),
    [
        (signal.SIGINT, signal.SIG_DFL),
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGINT, signal.SIG_IGN),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"],
)
def test_a_signal_to_record_reaches_the_program_which_writes_its_snapshot(tmp_path, sig, sigint):
    p, out = _start_record(tmp_path, SLOW_EXIT, sigint)
    # Well before the program's own 120 s sleep ends: a program that ignored the forwarded
    # signal slept it out, and record then passed after 130 s instead of failing.
    stdout, _ = signal_and_wait(p, sig, timeout=60)  # 130 for SIGINT, 143 for SIGTERM
    assert f"wrote {out}" in stdout
    # the allocation made after the signal, during the program's own cleanup, is in it
    assert 3 << 20 in _sizes(out)
    assert_no_process_runs(tmp_path / "train.py", "cachalot record")


def test_a_program_that_is_not_python_heeds_a_forwarded_sigint_record_inherited_ignored(tmp_path):
    """`cachalot record` started with SIGINT ignored (`&` from a script) still gives the program
    SIGINT's default action, so a program that cannot re-arm it (here `sleep`, no Python, no
    torch) ends at the SIGINT record forwards instead of running on."""
    ready = tmp_path / "ready"
    program = ["bash", "-c", 'touch "$1"; exec sleep 120', "_", str(ready)]
    p = subprocess.Popen(
        [*cachalot_cli(), "record", "-o", str(tmp_path / "snap.pickle"), "--", *program],
        env=package_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    wait_until_ready(p, ready, timeout=60)
    signal_and_wait(p, signal.SIGINT, timeout=30)
    assert_no_process_runs(ready, "cachalot record")


SPAWN = textwrap.dedent(
    """
    import sys, torch, torch.multiprocessing as mp

    def rank(i):
        x = torch.empty((i + 1) << 20, dtype=torch.uint8, device="cuda")

    if __name__ == "__main__":
        mp.spawn(rank, nprocs=2)
    """
)


def test_spawned_ranks_each_write_their_own_snapshot(tmp_path):
    p, _ = _record_torch(tmp_path, "ddp.py", SPAWN)
    assert p.returncode == 0, p.stderr
    per_rank = sorted(tmp_path.glob("snap.pid*.pickle"))
    assert len(per_rank) == 2, (os.listdir(tmp_path), p.stdout, p.stderr)
    biggest = sorted(max(_sizes(f)) for f in per_rank)
    assert biggest == [1 << 20, 2 << 20]  # each rank's own allocation
    for f in per_rank:
        assert f"wrote {f}" in p.stdout


NESTED = textwrap.dedent(
    """
    import sys, torch, cachalot
    a = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    with cachalot.recording(sys.argv[1], quiet=True):
        b = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
        with cachalot.recording(sys.argv[2], quiet=True):
            c = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        d = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")  # after the inner one ended
    try:
        with cachalot.recording(sys.argv[3] + "/gone/x.pickle", quiet=True):
            raise ValueError("the user's own error")
    except ValueError as e:
        print("caught:", e)
    """
)


def test_nested_recordings_compose_inside_record(tmp_path):
    outer, inner = tmp_path / "outer.pickle", tmp_path / "inner.pickle"
    p, whole = _record_torch(tmp_path, "nested.py", NESTED, outer, inner, tmp_path)
    assert p.returncode == 0, p.stderr
    assert "caught: the user's own error" in p.stdout  # not replaced by the write's failure
    assert "could not write" in p.stderr
    assert 3 << 20 in _sizes(inner)
    assert 5 << 20 in _sizes(outer), "the history went off when the inner recording ended"
    assert 5 << 20 in _sizes(whole), "the history went off when a recording() ended"


def test_a_program_that_switches_the_allocator_gets_a_clear_message(tmp_path):
    use = "import cachalot.torch, torch\ncachalot.torch.use()\n"
    use += "x = torch.empty(1 << 20, device='cuda')\n"
    p, out = _record_torch(tmp_path, "use.py", use)
    assert p.returncode == 1, p.stderr
    assert "switched torch to another allocator" in p.stderr, p.stderr
    assert not out.exists()


def test_help_documents_the_exit_status_and_the_per_process_names():
    p = record(["--help"])
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "128+N when it was killed by signal N" in text and "130 Ctrl-C, 143 SIGTERM" in text
    assert "NAME.pidP.pickle" in text


def test_ctrl_c_at_a_terminal_lets_the_program_finish_and_exits_130(tmp_path):
    """A Ctrl-C typed at the terminal (a pty here) goes to the whole foreground process group:
    the program's cleanup completes, its snapshot is written, record exits 130. (Whether record
    also forwards it is not visible here: Python folds two SIGINTs that arrive together.)"""
    import pty

    env = _torch_env()
    script = tmp_path / "train.py"
    script.write_text(SLOW_EXIT)
    out, ready = tmp_path / "snap.pickle", tmp_path / "ready"
    argv = _record_argv(out, script, ready)
    pid, master = pty.fork()
    if pid == 0:  # the child: session leader with the pty as its controlling terminal
        try:
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    output = b""
    try:
        deadline = time.time() + 300
        while not ready.exists():
            assert time.time() < deadline, "the program never got ready"
            time.sleep(0.2)
        os.write(master, b"\x03")  # the terminal's interrupt character
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            output += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, text
    assert "interrupted (SIGINT)" in text
    assert 3 << 20 in _sizes(out), "the program's cleanup was cut short: " + text
