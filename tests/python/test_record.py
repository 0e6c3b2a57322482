"""`cachalot record` and `cachalot.recording()` with real PyTorch on the fake GPU."""

import json
import pickle
import subprocess
import textwrap

from conftest import TORCH_PYTHON, cachalot_cli, package_env

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    model = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        model(torch.randn(32, 256, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()
    print("argv", sys.argv[1:])
    if "oom" in sys.argv:
        torch.empty(1 << 40, device="cuda")
    if "raise" in sys.argv:
        raise SystemExit(3)
    """
)


def record(torch_on_fakegpu, tmp_path, *script_args, options=()):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "snap.pickle"
    return out, torch_on_fakegpu(
        ["-m", "cachalot", "record", "-o", out, *options, "--", TORCH_PYTHON, script, *script_args],
        check=False,
    )


def test_record_writes_a_snapshot_and_prints_the_tune_command(torch_on_fakegpu, tmp_path):
    out, p = record(torch_on_fakegpu, tmp_path, "--lr", "1", options=["--max-entries", "50"])
    assert p.returncode == 0, p.stderr
    assert "argv ['--lr', '1']" in p.stdout  # the script got its arguments unchanged
    snap = pickle.loads(out.read_bytes())
    assert snap["segments"], "the snapshot has the script's segments"
    assert 0 < len(snap["device_traces"][0]) <= 50  # max_entries bounds the history
    capacity = json.loads((tmp_path / "snap.device.json").read_text())["devices"][0]
    assert capacity["total_memory"] == 80 << 30  # the fake H100
    assert f"cachalot tune {out} --capacity 80G" in p.stdout
    # The snapshot is one every command reads.
    t = subprocess.run(
        [*cachalot_cli(), "replay", str(out), "--capacity", "80G"],
        env=package_env(),
        check=False,
        capture_output=True,
        text=True,
    )
    assert t.returncode == 0, t.stderr


def test_record_writes_the_oom_snapshot_and_keeps_the_exit_status(torch_on_fakegpu, tmp_path):
    out, p = record(torch_on_fakegpu, tmp_path, "oom")
    assert p.returncode == 1
    assert "torch.OutOfMemoryError" in p.stderr  # the script's own traceback, unchanged
    oom = tmp_path / "snap-oom.pickle"
    snap = pickle.loads(oom.read_bytes())
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions[-1] == "oom"  # taken at the out-of-memory
    assert out.exists()  # and the one at exit
    assert f"cachalot explain {oom}" in p.stdout


def test_record_writes_the_snapshot_when_the_script_raises(torch_on_fakegpu, tmp_path):
    out, p = record(torch_on_fakegpu, tmp_path, "raise", options=["--context", "alloc"])
    assert p.returncode == 3
    assert pickle.loads(out.read_bytes())["segments"]


def test_recording_context_manager(torch_on_fakegpu, tmp_path):
    code = textwrap.dedent(
        f"""
        import cachalot, torch
        with cachalot.recording({str(tmp_path / "nb.pickle")!r}, max_entries=10, quiet=True) as r:
            x = [torch.empty(1 << 20, device="cuda") for _ in range(30)]
        print(r.written)
        """
    )
    p = torch_on_fakegpu(["-c", code])
    snap = pickle.loads((tmp_path / "nb.pickle").read_bytes())
    assert len(snap["device_traces"][0]) == 10
    assert p.stdout.strip().endswith("nb.pickle")


def test_record_options_are_checked_before_running(tmp_path):
    p = subprocess.run(
        [*cachalot_cli(), "record", "--max-entries", "0", "--", "python", "x.py"],
        env=package_env(),
        check=False,
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "max_entries=0" in p.stderr
