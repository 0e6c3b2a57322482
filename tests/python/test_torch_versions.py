"""`tune --torch X.Y` recommends only lines torch X.Y's own parser accepts (issue #25).

For each bundled advisor fixture (a trace and the tight capacity its golden was made at), every
configuration `cachalot.tune(..., torch=X.Y)` ranks is handed to that release's own parser
(`torch.cuda.memory._set_allocator_settings`, which needs no GPU) in a virtual environment that
has that release. Releases without an environment here skip, saying how to make one
(`scripts/python_env.sh --torch` makes the 2.9.1 one); `crates/core/tests/torch_versions.rs`
covers every release's keys from its wheel's libraries.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import cachalot
from conftest import FIXTURES, TORCH_PYTHON

# release -> the interpreter of a virtual environment that has it
RELEASES = {
    "2.9": Path(
        os.environ.get(
            "CACHALOT_TORCH29_PYTHON", Path.home() / ".cache/cachalot-torch29/bin/python"
        )
    ),
    "2.15": TORCH_PYTHON,
}

# Each line on stdin is handed to the parser; one JSON object per line comes back.
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

CASES = ["select_n_multistream", "gpt2-train", "resnet50-train", "bert-finetune-varlen"]


def parse_with(release: str, confs: list[str]) -> tuple[str, list[dict]]:
    python = RELEASES[release]
    if not python.exists():
        pytest.skip(f"no torch {release} environment at {python} (scripts/python_env.sh --torch)")
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
    return lines[0]["version"], lines[1:]


def ranked(case: str, release: str) -> list[str]:
    golden = json.loads((FIXTURES / "advisor" / f"{case}.json").read_text())
    trace = FIXTURES / "traces" / golden["trace"]
    r = cachalot.tune(trace, golden["capacity"], torch=release, top=8, html=False, threads=2)
    d = r.to_dict()
    assert d["torch"] == release
    confs = [row["PYTORCH_CUDA_ALLOC_CONF"] for row in d["ranking"]]
    assert confs, d
    return confs


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_ranked_line_is_accepted_by_that_releases_parser(release: str) -> None:
    confs = sorted({c for case in CASES for c in ranked(case, release)} - {""})
    version, results = parse_with(release, confs)
    assert version.startswith(release + "."), version
    rejected = [r for r in results if not r["ok"]]
    assert not rejected, f"torch {version} rejects: {rejected}"
    assert len(results) == len(confs)


@pytest.mark.slow
def test_the_2_15_line_is_rejected_by_2_9_and_the_2_9_line_is_not() -> None:
    """The issue's case: 2.15's winner on select_n_multistream sets per_process_memory_fraction,
    which torch 2.9 rejects; the line for 2.9 has no such key and 2.9 takes it."""
    newest = ranked("select_n_multistream", "2.15")[0]
    for_29 = ranked("select_n_multistream", "2.9")[0]
    assert "per_process_memory_fraction" in newest
    assert "per_process_memory_fraction" not in for_29
    _, results = parse_with("2.9", [newest, for_29])
    assert [r["ok"] for r in results] == [False, True], results
    assert "per_process_memory_fraction" in results[0]["error"]


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
