"""Device values under `cachalot capture` (capture/values.py): reads of values the host knows get
a GPU's answers, the allocation stream is unchanged, and routing assumptions are named.

The judge of a prediction is real torch 2.15 on shared/fakegpu with its reads answered by
fakegpu_util.HostReadOracle with the values a GPU computes for the same input
(padded_generate_workload.py); the judge of "unchanged" is the same capture with the value
tracking off (CACHALOT_VALUES=0). Tests skip, saying why, where torch or the fake GPU is missing.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEGPU_BUILD, TORCH_PYTHON, torch_python

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PY_SRC = REPO / "python"
SHARED = Path(os.environ.get("CACHALOT_SHARED", REPO.parent / "shared"))
FAKEGPU = SHARED / "fakegpu"
TORCH_PY = str(TORCH_PYTHON)


def capture(script: Path, out: Path, env_extra: dict | None = None) -> dict:
    """`cachalot capture --json` of `script`; its JSON answer (the trace is at `out`)."""
    env = dict(os.environ, PYTHONPATH=str(PY_SRC), **(env_extra or {}))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    p = subprocess.run(
        [
            TORCH_PY,
            "-m",
            "cachalot",
            "capture",
            "-o",
            str(out),
            "--json",
            "--",
            TORCH_PY,
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def truth(script: Path, out: Path) -> dict:
    """torch's own peaks for `script` on shared/fakegpu, its reads answered by the judge."""
    if not (FAKEGPU / "run.sh").exists():
        pytest.skip(f"no fake GPU at {FAKEGPU}")
    if not (FAKEGPU_BUILD / "libcudart.so.13").exists():
        pytest.skip(f"fake GPU not built in {FAKEGPU_BUILD} (run {FAKEGPU}/build.sh)")
    env = dict(
        os.environ,
        PYTHON=TORCH_PY,
        FAKEGPU_DIR=str(FAKEGPU),
        FAKEGPU_BUILD=str(FAKEGPU_BUILD),
        CAPTURE_TRUTH_OUT=str(out),
    )
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    p = subprocess.run(
        ["bash", str(FAKEGPU / "run.sh"), str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "truth.json").read_text())


def stream(trace: Path) -> list:
    """A trace's allocation stream, (action, size) in order. The frees of autocast's cache
    clear follow the CPU heap addresses of its keys (they differ run to run even with nothing
    changed), so each run of them is compared as a multiset."""
    snap = pickle.loads(trace.read_bytes())
    out, clear = [], []
    for e in (e for t in snap["device_traces"] for e in t if e["action"] != "snapshot"):
        top = (e.get("frames") or [{}])[0].get("filename", "")
        if "autocast_mode.py" in top and e["action"].startswith("free"):
            clear.append((e["action"], e["size"]))
            continue
        if clear:
            out.append(("autocast clear", tuple(sorted(clear))))
            clear = []
        out.append((e["action"], e["size"]))
    if clear:
        out.append(("autocast clear", tuple(sorted(clear))))
    return out


def _pct(pred: int, meas: int) -> float:
    return 100.0 * (pred - meas) / meas


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    torch_python("transformers")
    script = HERE / "padded_generate_workload.py"
    d = tmp_path_factory.mktemp("padded")
    (d / "truth").mkdir()
    return {
        "truth": truth(script, d / "truth"),
        "values": capture(script, d / "values.pickle"),
        "off": capture(script, d / "off.pickle", {"CACHALOT_VALUES": "0"}),
    }


def test_a_left_padded_generate_matches_torch_with_a_gpus_answers(padded):
    t, c = padded["truth"], padded["values"]
    assert abs(_pct(c["peak_allocated"], t["allocated"])) <= 1.0, (c["peak_allocated"], t)
    assert abs(_pct(c["peak_reserved"], t["reserved"])) <= 2.0, (c["peak_reserved"], t)
    # the mask's reads were computed, none was left at the runtime's 0 or answered by a guess
    assert not any("device data read" in w for w in c["warnings"]), c["warnings"]
    assert not any("known call site" in w for w in c["warnings"]), c["warnings"]
    assert any("computed" in w and "masking_utils.py" in w for w in c["warnings"]), c["warnings"]


def test_the_padded_batch_steers_memory(padded):
    """Without the values (every read a fixed guess: "the mask is all ones") the same batch
    under-predicts, so the test above could fail."""
    t, off = padded["truth"], padded["off"]
    assert _pct(off["peak_allocated"], t["allocated"]) < -1.0, (off["peak_allocated"], t)


def test_the_value_tracking_leaves_the_allocation_stream_unchanged(tmp_path):
    """A GPT-2 training step (bf16 autocast, AdamW) and an unpadded generate: the same stream
    with and without the value tracking."""
    torch_python("transformers")
    script = HERE / "capture_small.py"
    on = capture(script, tmp_path / "on.pickle")
    off = capture(script, tmp_path / "off.pickle", {"CACHALOT_VALUES": "0"})
    a, b = stream(tmp_path / "on.pickle"), stream(tmp_path / "off.pickle")
    assert len(a) > 1000, len(a)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    assert a == b, (len(a), len(b), first)
    assert on["peak_allocated"] == off["peak_allocated"]
    assert on["peak_reserved"] == off["peak_reserved"]


MOE = {"tokens": 4 * 128, "hidden": 128, "experts": 8, "top_k": 2}  # moe_workload.py's config


def expert_batches(trace: Path) -> list[int]:
    """Bytes of each expert's gathered tokens (`hidden_states[token_idx]` in Mixtral's eager
    experts), as torch's allocator was asked for them, in order."""
    snap = pickle.loads(trace.read_bytes())
    out = []
    for e in (e for t in snap["device_traces"] for e in t if e["action"] == "alloc"):
        top = (e.get("frames") or [{}])[0]
        if top.get("filename", "").endswith("modeling_mixtral.py") and top.get("name") == (
            "forward"
        ):
            line = top.get("line")
            src = Path(top["filename"]).read_text().splitlines()[line - 1]
            if "current_state = hidden_states[token_idx]" in src:
                out.append(e["size"])
    return out


def _round(n: int) -> int:
    return -(-n // 512) * 512  # torch's allocator rounds requests to 512 bytes


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    torch_python("transformers")
    d = tmp_path_factory.mktemp("moe")
    script = HERE / "moe_workload.py"
    return {
        "both": capture(script, d / "balanced.pickle"),
        "worst": capture(script, d / "worst.pickle", {"CACHALOT_VALUES_ROUTING": "worst"}),
        "dir": d,
    }


def test_moe_routing_is_stated_with_a_balanced_and_a_worst_case_peak(moe):
    r = moe["both"]["routing"]
    assert r["assumption"] == "balanced" and r["steers_memory"], r
    assert any("topk" in s and "modeling_mixtral.py" in s for s in r["topk_sites"]), r
    assert r["balanced"]["peak_allocated"] == moe["both"]["peak_allocated"]
    # the second run is the same program under the worst case: as when asked for it alone
    alone = moe["worst"]
    assert r["worst"]["peak_allocated"] == alone["peak_allocated"], (r, alone["peak_allocated"])
    assert r["worst"]["peak_reserved"] == alone["peak_reserved"]
    # the routing steers this model's memory; the report gives the larger of the two
    assert r["worst"]["peak_reserved"] != r["balanced"]["peak_reserved"], r
    for k in ("peak_allocated", "peak_reserved"):
        assert r["larger"][k] == max(r["worst"][k], r["balanced"][k]), r
    assert any("assumed the expert routing (balanced" in w for w in moe["both"]["warnings"])
    assert alone["routing"]["assumption"] == "worst" and "balanced" not in alone["routing"]


def test_the_balanced_assumption_gives_every_expert_its_share(moe):
    per_expert = MOE["tokens"] * MOE["top_k"] // MOE["experts"]
    sizes = expert_batches(moe["dir"] / "balanced.pickle")
    # every expert of both layers is hit with its share of the tokens (fp32 activations)
    assert sizes == [_round(per_expert * MOE["hidden"] * 4)] * (2 * MOE["experts"]), sizes


def test_the_worst_case_sends_every_token_to_the_top_k_experts(moe):
    sizes = expert_batches(moe["dir"] / "worst.pickle")
    assert sizes == [_round(MOE["tokens"] * MOE["hidden"] * 4)] * (2 * MOE["top_k"]), sizes


# the older releases CI installs (scripts/python_env.sh --torch), as test_versions_capture.py
RELEASES = {
    "2.15": TORCH_PY,
    "2.9": os.environ.get(
        "CACHALOT_TORCH29_PYTHON", os.path.expanduser("~/.cache/cachalot-torch29/bin/python")
    ),
    "2.13": os.environ.get(
        "CACHALOT_TORCH213_PYTHON", os.path.expanduser("~/.cache/cachalot-torch213/bin/python")
    ),
}


@pytest.mark.parametrize("release", list(RELEASES))
def test_reads_of_known_values_equal_torch_on_the_cpu(tmp_path, release):
    """Masks, cumsum, nonzero, where, boolean indexing, histograms, a stop flag, a copy to
    the host, a scalar index: what capture answers on "cuda" is what torch computes on the CPU
    (each release's own nonzero reads its count from the device)."""
    py = RELEASES[release]
    if release == "2.15":
        torch_python("transformers")
    elif not os.path.exists(py):
        pytest.skip(f"no torch {release} environment at {py} (scripts/python_env.sh --torch)")
    script = HERE / "values_reads_workload.py"
    cpu = subprocess.run(
        [py, str(script)],
        env=dict(os.environ, DEVICE="cpu"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env = dict(os.environ, PYTHONPATH=str(PY_SRC))
    cmd = [py, "-m", "cachalot", "capture", "-o", str(tmp_path / "r.pickle"), "--"]
    p = subprocess.run(
        [*cmd, py, str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    want = json.loads(cpu.split("VALUES ", 1)[1])
    got = json.loads((p.stdout + p.stderr).split("VALUES ", 1)[1].splitlines()[0])
    assert got == want
    assert "device data read" not in p.stdout + p.stderr


GROUPED = """
import torch, transformers as tf
cfg = tf.MixtralConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
    vocab_size=1024)
model = tf.AutoModelForCausalLM.from_config(cfg).to("cuda")  # grouped_mm experts
assert model.config._experts_implementation == "grouped_mm"
ids = torch.randint(0, 1024, (4, 128)).to("cuda")
model(input_ids=ids, labels=ids).loss.backward()
"""


def test_a_routing_no_read_depends_on_runs_once_and_says_so(tmp_path):
    """Grouped GEMM experts: the expert offsets stay on the device, so the routing steers no
    host read through a computed value; the run is not repeated, and the reads of values that
    depend on the routing but cannot be computed (grouped_mm's offsets) are named."""
    torch_python("transformers")
    script = tmp_path / "grouped.py"
    script.write_text(GROUPED)
    r = capture(script, tmp_path / "g.pickle")
    routing = r["routing"]
    assert routing["assumption"] == "balanced" and not routing["steers_memory"], routing
    assert "worst" not in routing and routing["reads"] == 0, routing
    assert routing["dependent_unknown_reads"] > 0, routing
    assert any("depends on the assumed routing" in w for w in r["warnings"]), r["warnings"]
