"""`tune --torch X.Y` recommends only lines torch X.Y's own parser accepts (issue #25).

The judge of release X.Y is its own allocator on the simulated device: it reads
PYTORCH_CUDA_ALLOC_CONF with that release's parser when it starts, and exits 2 with torch's
error when the parser refuses the line. `scripts/versions/oracle.sh X.Y` builds it into
~/.cache/cachalot-oracle-X.Y (CACHALOT_ORACLE_VERSIONS names another folder than ~/.cache);
for the newest release shared/oracle's is the same. For every release of
scripts/versions/releases.sh whose oracle is built, every configuration
`cachalot.tune(..., torch="X.Y")` ranks on the bundled advisor fixtures is handed to it and
must be accepted, and lines it must refuse show that the judge can say no; a release without
an oracle skips with the command that builds it.

Where a virtual environment has the release installed (scripts/python_env.sh --torch makes
2.9.1, 2.13.0 and 2.15.0), torch's Python-side parser `torch.cuda.memory._set_allocator_settings`
(no GPU needed) must give the oracle's verdict on the same lines: a check of the oracle's build
against the release as users install it. `crates/replay/tests/torch_versions.rs` holds the
versions table's verdict on single entries to each release's oracle.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

import cachalot
from cachalot import _native
from conftest import FIXTURES, REPO, TORCH_PYTHON

ORACLE_SH = REPO / "scripts" / "versions" / "oracle.sh"
ORACLES = Path(os.environ.get("CACHALOT_ORACLE_VERSIONS", Path.home() / ".cache"))
SHARED = Path(os.environ.get("CACHALOT_SHARED", REPO.parent / "shared"))


def _releases() -> list[str]:
    """The release lines of scripts/versions/releases.sh (what oracle.sh builds), oldest first,
    each as the version table names it."""
    text = (REPO / "scripts" / "versions" / "releases.sh").read_text()
    listed = re.search(r"^VERSIONS=\(([^)]*)\)", text, re.M)
    assert listed, "releases.sh has no VERSIONS=(...) line"
    return [_native.torch_release(v) for v in listed.group(1).split()]


RELEASES = _releases()
NEWEST = RELEASES[-1]  # shared/oracle's torch

# release -> the interpreter of a virtual environment that has it (scripts/python_env.sh --torch)
PYTHONS = {
    "2.9": Path(
        os.environ.get(
            "CACHALOT_TORCH29_PYTHON", Path.home() / ".cache/cachalot-torch29/bin/python"
        )
    ),
    "2.13": Path(
        os.environ.get(
            "CACHALOT_TORCH213_PYTHON", Path.home() / ".cache/cachalot-torch213/bin/python"
        )
    ),
    NEWEST: TORCH_PYTHON,
}

# The bundled advisor fixtures, each a trace and the tight capacity its golden was made at
# (tuning all of them for one release takes about 8 s).
CASES = sorted(p.stem for p in (FIXTURES / "advisor").glob("*.json"))

# Lines every release refuses: a key no torch has, and a split size below every release's
# minimum (21 MiB up to 2.9, 20 MiB from 2.10).
REFUSED_BY_ALL = ["cachalot_no_such_key:1", "max_split_size_mb:19"]

# One allocation: the parse happens when the allocator starts, before the trace is read.
TINY_TRACE = (
    "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,1,0\n1,1,deallocate,0x1,1,0\n"
)


def oracle(release: str) -> Path:
    """torch `release`'s own allocator, or a skip saying how to build it."""
    env = {**os.environ, "CACHALOT_SHARED": str(SHARED)}
    check = subprocess.run(
        [ORACLE_SH, release, "--check"], env=env, capture_output=True, check=False
    )
    if check.returncode == 0:
        return ORACLES / f"cachalot-oracle-{release}" / "oracle"
    shared = SHARED / "oracle"
    if release == NEWEST and (shared / "oracle").exists():
        setup = subprocess.run([shared / "setup.sh", "--check"], capture_output=True, check=False)
        if setup.returncode == 0:
            return shared / "oracle"
    pytest.skip(f"torch {release}'s oracle is not built: run {ORACLE_SH} {release}")


@cache
def judge(release: str, conf: str) -> tuple[bool, str]:
    """Whether torch `release`'s parser accepts `conf` (its oracle at startup), and its error."""
    path = oracle(release)
    trace = Path(os.environ.get("TMPDIR", "/tmp")) / f"cachalot-parse-{os.getpid()}.csv"
    trace.write_text(TINY_TRACE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_")}
    env.update(FAKE_CUDA_CAPACITY=str(1 << 30), PYTORCH_CUDA_ALLOC_CONF=conf)
    p = subprocess.run([path, trace], env=env, capture_output=True, text=True, check=False)
    trace.unlink()
    assert p.returncode in (0, 2), f"torch {release}'s oracle on {conf!r}: {p.stderr[-2000:]}"
    if p.returncode == 0:
        return True, ""
    # torch's message is the line after "torch_oracle: c10::Error thrown in ...:"
    error = [line for line in p.stderr.splitlines() if not line.startswith(("torch_oracle", "[W"))]
    return False, (error[0] if error else p.stderr.strip())


@cache
def ranked(case: str, release: str) -> tuple[str, ...]:
    """Every configuration `tune --torch release` ranks on the advisor fixture `case`."""
    golden = json.loads((FIXTURES / "advisor" / f"{case}.json").read_text())
    trace = FIXTURES / "traces" / golden["trace"]
    r = cachalot.tune(trace, golden["capacity"], torch=release, top=8, html=False, threads=2)
    d = r.to_dict()
    assert d["torch"] == release
    confs = tuple(row["PYTORCH_CUDA_ALLOC_CONF"] for row in d["ranking"])
    assert confs, d
    return confs


def recommended(release: str) -> list[str]:
    return sorted({c for case in CASES for c in ranked(case, release)})


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_every_ranked_line_is_accepted_by_that_releases_own_parser(release: str) -> None:
    oracle(release)  # skips before tuning when there is no judge
    confs = recommended(release)
    refused = {c: judge(release, c)[1] for c in confs if not judge(release, c)[0]}
    assert not refused, f"torch {release} refuses what tune --torch {release} ranks: {refused}"
    # The judge can say no, with torch's own words.
    for conf in REFUSED_BY_ALL:
        ok, error = judge(release, conf)
        assert not ok, f"torch {release} accepts {conf!r}"
        assert conf.split(":")[0] in error, error


@pytest.mark.slow
def test_the_2_15_line_is_refused_by_2_9_and_the_2_9_line_is_not() -> None:
    """The issue's case: 2.15's winner on select_n_multistream sets per_process_memory_fraction,
    which torch 2.9 refuses; the line for 2.9 has no such key and 2.9 takes it."""
    oracle("2.9")
    newest = ranked("select_n_multistream", NEWEST)[0]
    for_29 = ranked("select_n_multistream", "2.9")[0]
    assert "per_process_memory_fraction" in newest
    assert "per_process_memory_fraction" not in for_29
    assert judge("2.9", for_29) == (True, "")
    ok, error = judge("2.9", newest)
    assert not ok
    assert "Unrecognized CachingAllocator option: per_process_memory_fraction" in error, error


# Each line on stdin is handed to torch's Python-side parser; one JSON object per line comes back.
PARSE = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
print(json.dumps({"version": torch.__version__}))
for line in sys.stdin:
    conf = line.rstrip("\\n")
    try:
        torch.cuda.memory._set_allocator_settings(conf)
        print(json.dumps({"conf": conf, "ok": True}))
    except Exception as e:
        print(json.dumps({"conf": conf, "ok": False, "error": str(e).splitlines()[0]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(PYTHONS))
def test_the_installed_release_gives_its_oracles_verdicts(release: str) -> None:
    """The lines tuned for `release` and for the newest release, and lines every release
    refuses: torch as installed and its oracle agree on each, and refuse some."""
    python = PYTHONS[release]
    if not python.exists():
        pytest.skip(f"no torch {release} environment at {python} (scripts/python_env.sh --torch)")
    oracle(release)
    confs = sorted(set(recommended(release) + recommended(NEWEST) + REFUSED_BY_ALL) - {""})
    p = subprocess.run(
        [str(python), "-c", PARSE],
        input="".join(c + "\n" for c in confs),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["version"].startswith(release + "."), lines[0]
    installed = {r["conf"]: r["ok"] for r in lines[1:]}
    assert sorted(installed) == confs
    differ = {
        c: (installed[c], judge(release, c)) for c in confs if installed[c] != judge(release, c)[0]
    }
    assert not differ, f"torch {release} installed vs its oracle (installed, oracle): {differ}"
    assert not all(installed.values()), "the lines every release refuses were accepted"


def test_a_bad_release_is_an_argument_error_that_quotes_it() -> None:
    with pytest.raises(cachalot.CachalotError) as e:
        cachalot.tune(FIXTURES / "traces" / "gpt2-train.csv.gz", "8G", torch="2.99")
    assert "'2.99'" in str(e.value) or '"2.99"' in str(e.value)
    assert "2.4 to 2.15" in str(e.value)


def test_record_stores_the_release_and_tune_recommends_for_it(torch_on_fakegpu, tmp_path):
    """`cachalot record` writes torch's version beside the snapshot; `tune` then tunes for it."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.empty(64 << 20, device='cuda')\ndel x\n")
    out = tmp_path / "snap.pickle"
    p = torch_on_fakegpu(
        ["-m", "cachalot", "record", "-o", out, "--", TORCH_PYTHON, script], check=False
    )
    assert p.returncode == 0, p.stderr
    info = json.loads((tmp_path / "snap.device.json").read_text())
    assert info["torch_version"].startswith("2.15."), info
    assert info["cuda_version"].startswith("13."), info
    assert cachalot.tune(out, "1G", html=False).to_dict()["torch"] == "2.15"
    info["torch_version"] = "2.9.1+cu128"
    (tmp_path / "snap.device.json").write_text(json.dumps(info))
    r = cachalot.tune(out, "1G", html=False)
    assert r.to_dict()["torch"] == "2.9"
    assert "the release the snapshot was recorded with" in str(r)
