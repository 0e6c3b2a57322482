"""`cachalot capture` as a new user and a CI script expect: `--json` alone on stdout, a
documented exit status for "does not fit", the user's own traceback, one-line errors for a
missing script or a bad size, signals forwarded with the temporary folder removed.

Tests that run a program need torch (the capture runtime builds itself at first use) and skip
where it is not installed; the usage errors need nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import (
    TORCH_PYTHON,
    assert_no_process_runs,
    package_env,
    signal_and_wait,
    torch_python,
    wait_until_ready,
)


def capture(tmp_path, args, **kw):
    env = package_env({"TMPDIR": str(tmp_path)})
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run(
        [sys.executable, "-m", "cachalot", "capture", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        **kw,
    )


def _leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.glob("cachalot-capture-*"))


def test_a_missing_script_is_one_line_and_exit_2(tmp_path):
    p = capture(tmp_path, ["--", sys.executable, tmp_path / "nope.py"])
    assert p.returncode == 2
    assert "can't open file" in p.stderr and "nope.py" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("size", ["inf", "-1", "12Q", "nan"])
def test_a_bad_reserve_is_an_error_not_a_traceback(tmp_path, size):
    (tmp_path / "t.py").write_text("pass\n")
    p = capture(tmp_path, ["--reserve", size, "--", sys.executable, tmp_path / "t.py"])
    assert p.returncode == 2, p.stderr
    assert f"--reserve {size!r} is not a size" in p.stderr and "Traceback" not in p.stderr


def test_help_documents_the_exit_statuses_and_json_on_stdout(tmp_path):
    p = capture(tmp_path, ["--help"])
    assert p.returncode == 0
    assert "1  the program ran and does not fit" in p.stdout
    assert "--json prints only the JSON on stdout" in p.stdout


PRINTS = textwrap.dedent(
    """
    import sys, torch
    print("the program's own output")
    x = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
    print("done", sys.flags.dont_write_bytecode)
    """
)


@pytest.mark.parametrize(("gib", "status", "fits"), [("1", 0, True), ("20", 1, False)])
def test_json_alone_on_stdout_and_does_not_fit_is_exit_1(tmp_path, gib, status, fits):
    torch_python()
    script = tmp_path / "prints.py"
    script.write_text(PRINTS)
    out = tmp_path / "t.pickle"
    args = ["-o", out, "--gpu", "t4", "--json", "--", TORCH_PYTHON, "-B", script, gib]
    p = capture(tmp_path, args)
    assert p.returncode == status, p.stderr[-3000:]
    answer = json.loads(p.stdout)  # nothing else on stdout
    assert answer["fits"] is fits
    assert "the program's own output" in p.stderr
    assert "done 1" in p.stderr  # -B went to the interpreter, not taken for the script
    assert _leftovers(tmp_path) == []


def test_the_users_traceback_has_no_capture_frames(tmp_path):
    torch_python()
    script = tmp_path / "boom.py"
    script.write_text("import torch\n\ndef f():\n    raise KeyError('mine')\n\nf()\n")
    p = capture(tmp_path, ["-o", tmp_path / "t.pickle", "--", TORCH_PYTHON, script])
    assert p.returncode == 3, p.stderr[-3000:]
    tb = p.stderr[p.stderr.index("Traceback") :]
    assert "_boot.py" not in tb and "runpy" not in tb, tb
    assert 'boom.py", line 6' in tb and "KeyError: 'mine'" in tb


# SIGINT as a terminal leaves it, and ignored as a job started with `&` from a script (a CI
# run, nohup) inherits it: capture still takes a SIGINT sent to it and forwards it, and the
# program must heed it (it used to sleep on, and capture waited for it).
@pytest.mark.parametrize(
    ("sig", "sigint"),
    [
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGINT, signal.SIG_DFL),
        (signal.SIGINT, signal.SIG_IGN),
    ],
    ids=["SIGTERM", "SIGINT", "SIGINT-inherited-ignored"],
)
def test_a_signal_is_forwarded_and_the_temporary_folder_removed(tmp_path, sig, sigint):
    torch_python()
    script = tmp_path / "slow.py"
    ready = tmp_path / "ready"
    script.write_text(
        "import sys, time, torch\nx = torch.empty(1, device='cuda')\n"
        f"open({str(ready)!r}, 'w').close()\ntime.sleep(300)\n"
    )
    env = package_env({"TMPDIR": str(tmp_path)})
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cachalot",
            "capture",
            "-o",
            str(tmp_path / "t.pickle"),
            "--",
            str(TORCH_PYTHON),
            str(script),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    wait_until_ready(p, ready, timeout=600)
    assert _leftovers(tmp_path), "the capture's temporary folder should exist while it runs"
    signal_and_wait(p, sig)  # 143 for SIGTERM, 130 for SIGINT
    assert _leftovers(tmp_path) == []
    assert_no_process_runs(script, "cachalot capture")


def test_a_script_that_switches_the_allocator_gets_a_clear_message(tmp_path):
    torch_python()
    script = tmp_path / "use.py"
    script.write_text(
        "import cachalot.torch, torch\ncachalot.torch.use()\n"
        "x = torch.empty(1 << 20, device='cuda')\n"
    )
    p = capture(tmp_path, ["-o", tmp_path / "t.pickle", "--", TORCH_PYTHON, script])
    assert p.returncode == 2, p.stderr[-3000:]
    assert "switched torch to another allocator" in p.stderr, p.stderr[-3000:]
    assert os.listdir(tmp_path).count("t.pickle") == 0
