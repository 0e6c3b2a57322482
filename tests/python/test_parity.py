"""The Python API and the CLI are one application layer: on every fixture kind (a plain RMM
trace, a snapshot with several devices, a trace with private pools, a ring-buffer window, a
snapshot taken at an out-of-memory), `cachalot.replay/tune/compare(...).to_dict()` equals
what the matching `cachalot ... --json` prints, and `str()` what the command prints."""

import json

import pytest

import cachalot
from conftest import FIXTURES
from conftest import cli_stdout as cli

PLAIN = min((FIXTURES / "traces").glob("*.csv.gz"), key=lambda p: p.stat().st_size)
MULTI = FIXTURES / "snapshots" / "code_location_expandable_3gpu_oom.json.gz"
POOLS = FIXTURES / "pools" / "example_mempool.csv"
RING = FIXTURES / "snapshots" / "cs336_bcrafton.json.gz"
OOM = FIXTURES / "pickle" / "resnet50-train.oom-5G.pickle.gz"

# (name, path, Python keyword arguments, the same as CLI flags)
KINDS = [
    ("plain", PLAIN, {"capacity": "2G"}, ["--capacity", "2G"]),
    ("multi-device", MULTI, {"device": 1}, ["--device", "1"]),
    ("pools", POOLS, {"capacity": "1G"}, ["--capacity", "1G"]),
    ("ring-window", RING, {"capacity": "4G"}, ["--capacity", "4G"]),
    ("oom-snapshot", OOM, {}, []),
]
IDS = [k[0] for k in KINDS]


def untimed(v):
    """`v` less its wall-clock measurements (`timing`), the one part two runs differ in."""
    if isinstance(v, dict):
        return {k: untimed(x) for k, x in v.items() if k != "timing"}
    if isinstance(v, list):
        return [untimed(x) for x in v]
    return v


def untimed_text(t):
    """The text less its replay-speed line (`... ns per event`)."""
    return "\n".join(line for line in t.splitlines() if "ns per event" not in line)


@pytest.mark.parametrize(("name", "path", "kw", "flags"), KINDS, ids=IDS)
def test_replay_parity(name, path, kw, flags):
    r = cachalot.replay(path, **kw)
    d = r.to_dict()
    assert "timing" in d
    assert untimed(d) == untimed(json.loads(cli("replay", str(path), *flags, "--json")))
    assert untimed_text(str(r)) == untimed_text(cli("replay", str(path), *flags))
    if name == "pools":
        assert "pool_accounts" in r.to_dict()


@pytest.mark.parametrize(("name", "path", "kw", "flags"), KINDS, ids=IDS)
def test_tune_parity(name, path, kw, flags):
    if name == "multi-device":
        kw, flags = {"all_devices": True}, ["--all-devices"]
    r = cachalot.tune(path, html=False, top=3, **kw)
    args = ["tune", str(path), *flags, "--top", "3", "-q"]
    assert r.to_dict() == json.loads(cli(*args, "--json"))
    assert str(r) == cli(*args)
    if name == "pools":
        assert "pool_accounts" in r.to_dict()
        assert "pools with the recommended configuration" in str(r)


@pytest.mark.parametrize(("name", "path", "kw", "flags"), KINDS, ids=IDS)
def test_compare_parity(name, path, kw, flags):
    conf = "expandable_segments:True"
    # The minimum-capacity column on the small traces only (it takes several replays a row).
    small = name in ("plain", "pools")
    r = cachalot.compare(path, [conf], html=False, min_capacity=small, **kw)
    args = ["compare", str(path), "--conf", conf, *flags, "-q"]
    if not small:
        args.append("--no-min-capacity")
    assert r.to_dict() == json.loads(cli(*args, "--json"))
    assert str(r) == cli(*args)
    if name == "pools":
        assert all("pool_accounts" in row for row in r.to_dict()["rows"])


def test_min_capacity_parity_with_pools():
    r = cachalot.min_capacity(POOLS)
    assert r.to_dict() == json.loads(cli("tune", str(POOLS), "--min-capacity", "-q", "--json"))
    assert "pool_accounts" in r.to_dict()["tune"]
