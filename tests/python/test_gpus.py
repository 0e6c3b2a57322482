"""One GPU table, in Rust: `cachalot.capture.gpus` is a view of `_native.gpus()` (the table
`cachalot tune --gpu` reads), keeping the profile data the capture runtime is given; names
are found however users type them; `--gpu list` prints the table in capture as in tune."""

import json
import re
from pathlib import Path

import pytest

import cachalot
from cachalot import _native
from cachalot.capture import gpus, launch

PACKAGE = Path(cachalot.__file__).parent


def test_the_capture_profiles_are_the_native_table():
    rows = _native.gpus()
    assert [g.key for g in gpus.GPUS] == [r.key for r in rows]
    assert [g.memory for g in gpus.GPUS] == sorted(g.memory for g in gpus.GPUS)
    # The runtime is told CUDA's total (torch's 79.11 GiB on an 80 GB H100), not nvidia-smi's.
    h100 = gpus.lookup("h100")
    assert h100.env() == {
        "FAKE_CUDA_DEVICE_NAME": "NVIDIA H100 80GB HBM3",
        "FAKE_CUDA_TOTAL": str(81005 << 20),
        "FAKE_CUDA_CC": "9.0",
        "FAKE_CUDA_SMS": "132",
        "FAKE_CUDA_L2": str(50 << 20),
        "FAKE_CUDA_SMEM_SM": str(228 << 10),
        "FAKE_CUDA_SMEM_OPTIN": str(227 << 10),
    }
    assert f"{h100.memory / 2**30:.2f}" == "79.11"
    assert gpus.lookup("T4").memory == 15_843_721_216
    assert gpus.ALIASES["a100"] == "a100-40gb"
    for r in rows:
        assert r.source and r.evidence in ("exact", "torch", "estimate")
        assert r.estimate == (r.evidence == "estimate") == r.source.startswith("estimate:")
        assert 0.9 * r.nominal < r.memory < r.nominal, r.key
    g = gpus.lookup("rtx4080")
    assert g.evidence == "estimate" and g.nominal == 16 << 30 and "rtx4080" in g.names


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("4090", "rtx4090"),
        ("rtx-4090", "rtx4090"),
        ("RTX 4090", "rtx4090"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("a100", "a100-40gb"),
        ("A100-SXM4-80GB", "a100-80gb"),
        ("h100", "h100"),
        ("H100 PCIe", "h100-pcie"),
        ("nvidia_a10g", "a10g"),
        ("RTX A6000", "a6000"),
        ("5090", "rtx5090"),
    ],
)
def test_names_as_users_type_them(typed, key):
    assert gpus.get(typed).key == key


def test_short_names_for_several_cards_say_what_they_are_taken_as():
    assert "40GB" in gpus.alias_note("a100") and "a100-80gb" in gpus.alias_note("a100")
    assert "SXM5" in gpus.alias_note("H100")
    assert gpus.alias_note("rtx4090") is None


def test_unknown_gpus_and_smallest_fitting():
    with pytest.raises(gpus.UnknownGpu, match=r"'rtx 4900': did you mean rtx4080, rtx4090"):
        gpus.lookup("rtx 4900")
    with pytest.raises(gpus.UnknownGpu, match=r"'k80'.*known: t4"):
        gpus.lookup("k80")
    assert gpus.smallest_fitting(14 << 30).key == "t4"
    assert gpus.smallest_fitting(23 << 30).key == "rtx4090"
    assert gpus.smallest_fitting(1 << 50) is None


def test_capture_gpu_list_prints_the_table(capsys):
    assert launch.main(["--gpu", "list"]) == 0
    out = capsys.readouterr().out
    assert out == _native.gpu_table()
    lines = {line.split()[0]: line for line in out.splitlines() if line[:1].isalnum()}
    for g in gpus.GPUS:
        assert g.key in lines, g.key
        assert lines[g.key].split()[1] == f"{g.memory / 2**30:.2f}"
    assert "'a100' is taken as the A100 40GB SXM4" in out and "sources:" in out


def test_no_python_file_holds_a_gpu_table():
    # A table would carry memory sizes: no CUDA total appears in the package's code.
    totals = {str(g.memory) for g in gpus.GPUS}
    totals |= {f"{g.memory >> 20:_}" for g in gpus.GPUS} | {str(g.memory >> 20) for g in gpus.GPUS}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        found = [t for t in totals if re.search(rf"\b{re.escape(t)}\b", text)]
        assert not found, (path, found)


def test_a_trace_names_the_gpu_it_was_captured_as(tmp_path):
    # capture writes STEM.device.json beside its trace as `cachalot record` does; tune --gpu on
    # the trace then names what torch sizes by the GPU when the target is another card.
    trace = tmp_path / "t.csv"
    trace.write_text(
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "1,0,allocate,0x1000,1048576,0\n1,1,free,0x1000,1048576,0\n"
    )
    launch.write_device_info(str(trace), gpus.get("rtx3090"))
    info = json.loads((tmp_path / "t.device.json").read_text())
    assert info["devices"] == [
        {"index": 0, "name": "NVIDIA GeForce RTX 3090", "total_memory": gpus.get("3090").memory}
    ]
    out = json.loads(_native.tune([str(trace)], gpu="h100", top=1, threads=1)[0])
    dep = out["gpu_dependent"]
    assert dep["recorded"]["key"] == "rtx3090" and dep["target"] == "h100"
    assert [i["what"] for i in dep["items"]][:2] == [
        "cublas_workspace",
        "flash_attention_deterministic_backward",
    ]
    assert "gpu_dependent" not in json.loads(_native.tune([str(trace)], gpu="3090", top=1)[0])
