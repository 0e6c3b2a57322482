"""The one writer every cachalot file goes through (`cachalot_trace::output`, reached from
Python as `_native.write_output` / `_native.check_output`, from the CLI by every command that
writes): special files stay special, symlinks stay symlinks, modes follow the umask, bad
paths are refused up front. No torch needed."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from cachalot import _native
from conftest import FIXTURES, cachalot_cli, package_env


def test_a_symlink_is_kept_and_its_target_written(tmp_path):
    (tmp_path / "real.pickle").write_bytes(b"old")
    link = tmp_path / "link.pickle"
    link.symlink_to("real.pickle")
    _native.write_output(str(link), b"new")
    assert link.is_symlink()
    assert (tmp_path / "real.pickle").read_bytes() == b"new"
    assert _native.check_output(str(link)) == str(tmp_path / "real.pickle")


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    _native.write_output(str(fifo), b"streamed")
    reader.join(10)
    assert got == [b"streamed"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def test_a_device_node_is_written_through(tmp_path):
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    _native.write_output(str(node), b"gone")
    assert stat.S_ISCHR(os.lstat(node).st_mode), "the device became a regular file"
    # The CLI's writers too: `convert` into the node.
    trace = FIXTURES / "traces" / "bert-finetune-varlen.csv.gz"
    p = subprocess.run(
        [*cachalot_cli(), "convert", str(trace), str(node)],
        env=package_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_dash_is_standard_output_for_the_cli(tmp_path):
    trace = FIXTURES / "traces" / "bert-finetune-varlen.csv.gz"
    p = subprocess.run(
        [*cachalot_cli(), "convert", str(trace), "-"],
        env=package_env(),
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(b"Thread"), p.stdout[:200]  # the RMM CSV header
    assert not (tmp_path / "-").exists()


def test_new_files_honour_the_umask_and_replaced_ones_keep_their_mode(tmp_path):
    code = (
        "import os, sys; os.umask(0o027); from cachalot import _native; "
        "_native.write_output(sys.argv[1], b'x')"
    )
    new = tmp_path / "new.pickle"
    subprocess.run([sys.executable, "-c", code, str(new)], env=package_env(), check=True)
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o640
    kept = tmp_path / "kept.pickle"
    kept.write_bytes(b"old")
    kept.chmod(0o600)
    _native.write_output(str(kept), b"new")
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "empty output path"),
        (".", "is a folder"),
        ("no-such-dir/x.pickle", "does not exist"),
    ],
)
def test_bad_paths_are_refused_with_the_path_quoted(tmp_path, name, message):
    path = str(tmp_path / name) if name else ""
    with pytest.raises(_native.CachalotError, match=message):
        _native.check_output(path)
    with pytest.raises(_native.CachalotError, match=message):
        _native.write_output(path, b"x")
    assert os.listdir(tmp_path) == []


def test_a_read_only_folder_is_refused_up_front(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    # root writes into a 0555 folder; a read-only bind mount in a private namespace does not.
    if os.geteuid() == 0:
        script = (
            f"mount --bind -o ro {ro} {ro} && {sys.executable} -c "
            f'\'from cachalot import _native; _native.write_output("{ro}/x", b"x")\''
        )
        p = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            env=package_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if "unshare" in p.stderr and "Operation not permitted" in p.stderr:
            pytest.skip(f"no private mount namespace here: {p.stderr.strip()}")
        assert p.returncode != 0
        assert "takes no new file" in p.stderr and str(ro) in p.stderr, p.stderr
    else:
        ro.chmod(0o555)
        try:
            with pytest.raises(_native.CachalotError, match="takes no new file"):
                _native.check_output(str(ro / "x"))
        finally:
            ro.chmod(0o755)
    assert os.listdir(ro) == []


def test_ctrl_c_interrupts_a_rust_command_waiting_on_a_fifo(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)  # no writer: the read blocks inside Rust
    p = subprocess.Popen(
        [*cachalot_cli(), "replay", str(fifo), "--capacity", "1G"],
        env=package_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(3)
    assert p.poll() is None
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("Ctrl-C did not interrupt the command") from None
    # the shell's convention for a command ended by Ctrl-C (issue #28): 128 + SIGINT
    err = p.stderr.read().decode()
    assert p.returncode == 128 + signal.SIGINT, err
    assert "interrupted" in err, err
