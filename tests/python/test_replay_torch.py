"""`cachalot.replay/compare/tune(..., torch="X.Y")` make that release's decisions, as the CLI's
`--torch` does: a `roundup_power2_divisions` list with `>` is read as torch 2.9 reads it (and
the replay is torch 2.9's own allocator's where its oracle is built), the release a capture
recorded is picked up by itself, what the release rejects is a ConfigError, and what is not
replayed is a warning."""

import json
import os
import shutil
import subprocess
import warnings

import pytest

import cachalot
from cachalot.capture import gpus, launch
from conftest import FIXTURES, REPO
from conftest import cli_stdout as cli
from test_parity import untimed, untimed_text

GPT2 = FIXTURES / "traces" / "gpt2-train.csv.gz"
LIST = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
# The fields of the oracle's report a replay reproduces (testkit's ORACLE_FIELDS, in part).
JUDGED = ["peak", "final", "num_device_alloc", "num_device_free", "num_ooms", "device_stats"]


def judged(ours, theirs):
    """`ours` where the oracle has a value (its report is the reference; cachalot's has keys of
    later releases too, as testkit's json_diff leaves them)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return {k: judged(ours.get(k), v) for k, v in theirs.items()}
    return ours


def version_oracle(release: str):
    """torch `release`'s oracle, or why it cannot be used (with the command that builds it)."""
    script = REPO / "scripts" / "versions" / "oracle.sh"
    env = dict(os.environ)
    env.setdefault("CACHALOT_SHARED", str(REPO.parent / "shared"))
    check = subprocess.run(
        ["bash", str(script), release, "--check"], env=env, capture_output=True, check=False
    )
    if check.returncode != 0:
        return None, f"torch {release}'s oracle is not built: run {script} {release}"
    base = os.environ.get("CACHALOT_ORACLE_VERSIONS", os.path.expanduser("~/.cache"))
    return os.path.join(base, f"cachalot-oracle-{release}", "oracle"), None


def test_replay_for_2_9_reads_the_list_as_torch_2_9():
    newest = cachalot.replay(GPT2, conf=LIST, capacity="80G")
    old = cachalot.replay(GPT2, conf=LIST, capacity="80G", torch="2.9.1+cu128")
    assert newest.to_dict()["torch"] == "2.15"
    assert old.to_dict()["torch"] == "2.9"
    assert old.to_dict()["peak"] != newest.to_dict()["peak"]
    assert "decisions: torch 2.9's" in str(old)
    assert "torch 2.9" not in str(newest)

    oracle, why = version_oracle("2.9")
    if oracle is None:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if "ALLOC_CONF" not in k}
    env.update(FAKE_CUDA_CAPACITY=str(80 << 30), PYTORCH_CUDA_ALLOC_CONF=LIST)
    out = subprocess.run([oracle, str(GPT2)], env=env, capture_output=True, check=True)
    theirs = json.loads(out.stdout)
    ours = old.to_dict()
    for field in JUDGED:
        assert judged(ours[field], theirs[field]) == theirs[field], field
    assert newest.to_dict()["peak"] != theirs["peak"]


def test_with_torch_python_is_the_cli():
    flags = ["--conf", LIST, "--capacity", "80G", "--torch", "2.9"]
    r = cachalot.replay(GPT2, conf=LIST, capacity="80G", torch="2.9")
    assert untimed(r.to_dict()) == untimed(json.loads(cli("replay", str(GPT2), *flags, "--json")))
    assert untimed_text(str(r)) == untimed_text(cli("replay", str(GPT2), *flags))

    c = cachalot.compare(GPT2, [LIST], capacity="80G", html=False, min_capacity=False, torch="2.9")
    args = ["compare", str(GPT2), "--conf", LIST, "--capacity", "80G", "--no-min-capacity"]
    args += ["--torch", "2.9", "-q"]
    assert c.to_dict() == json.loads(cli(*args, "--json"))
    assert str(c) == cli(*args)
    assert c.to_dict()["torch"] == "2.9"

    plain = min((FIXTURES / "traces").glob("*.csv.gz"), key=lambda p: p.stat().st_size)
    t = cachalot.tune(plain, "2G", html=False, top=3, torch="2.9")
    args = ["tune", str(plain), "--capacity", "2G", "--top", "3", "--torch", "2.9", "-q"]
    assert t.to_dict() == json.loads(cli(*args, "--json"))
    assert str(t) == cli(*args)

    m = cachalot.min_capacity(plain, top=2, torch="2.9")
    args = ["tune", str(plain), "--min-capacity", "--top", "2", "--torch", "2.9", "-q"]
    assert m.to_dict() == json.loads(cli(*args, "--json"))
    assert m.to_dict()["torch"] == "2.9"


def test_bad_releases_and_rejected_lines():
    for call in (cachalot.replay, cachalot.compare):
        with pytest.raises(cachalot.ArgumentError, match=r"'2\.16'|\"2\.16\"") as e:
            call(GPT2, torch="2.16")
        assert "2.4 to 2.15" in str(e.value)
    with pytest.raises(cachalot.ConfigError, match=r"torch 2\.9 rejects the configuration") as e:
        cachalot.replay(GPT2, conf="per_process_memory_fraction:0.9", torch="2.9")
    assert "'per_process_memory_fraction:0.9'" in str(e.value)
    with pytest.raises(cachalot.ConfigError, match=r"rejected before torch 2\.10"):
        cachalot.compare(GPT2, ["per_process_memory_fraction:0.9"], torch="2.9", html=False)


def test_what_is_not_replayed_warns():
    conf = "expandable_segments:True,max_split_size_mb:128"
    with pytest.warns(UserWarning, match=r"torch 2\.4 decides otherwise"):
        r = cachalot.replay(GPT2, conf=conf, torch="2.4")
    assert len(r.to_dict()["torch_warnings"]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "torch_warnings" not in cachalot.replay(GPT2, conf=conf, torch="2.5").to_dict()


def test_a_captured_trace_replays_as_the_release_that_ran(tmp_path):
    trace = tmp_path / "t.csv.gz"
    shutil.copy(GPT2, trace)
    launch.write_device_info(str(trace), gpus.get("h100"), torch_version="2.9.1+cu128")
    info = json.loads((tmp_path / "t.csv.device.json").read_text())
    assert info["torch_version"] == "2.9.1+cu128"
    r = cachalot.replay(trace, conf=LIST, capacity="80G")
    assert r.to_dict()["torch"] == "2.9"
    assert "the release the snapshot was recorded with" in str(r)
    asked = cachalot.replay(GPT2, conf=LIST, capacity="80G", torch="2.9")
    assert r.to_dict()["peak"] == asked.to_dict()["peak"]
    # --torch wins over the recording
    assert (
        cachalot.replay(trace, conf=LIST, capacity="80G", torch="2.15").to_dict()["torch"] == "2.15"
    )
