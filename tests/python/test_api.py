"""The Python API gives the CLI's numbers, takes paths or snapshot dicts, and raises the
CLI's errors as Python exceptions."""

import gzip
import json
import pickle
import threading
import time

import pytest

import cachalot
from conftest import FIXTURES
from conftest import cli_stdout as cli_out

TRACES = FIXTURES / "traces"
OOM_SNAPSHOT = FIXTURES / "pickle" / "resnet50-train.oom-5G.pickle.gz"
SMALL = min(TRACES.glob("*.csv.gz"), key=lambda p: p.stat().st_size)


def cli_json(*args):
    return json.loads(cli_out(*args, "--json"))


def test_tune_gives_the_cli_numbers():
    r = cachalot.tune(SMALL, capacity="2G", html=False)
    assert isinstance(r, cachalot.TuneResult)
    assert r.to_dict() == cli_json("tune", str(SMALL), "--capacity", "2G", "-q")
    assert r.recommended == (r.best if r.fits else None)
    assert str(r) == cli_out("tune", str(SMALL), "--capacity", "2G", "-q")


def test_tune_html_report_for_jupyter():
    r = cachalot.tune(SMALL, capacity="2G")
    page = r._repr_html_()
    assert page.lstrip().lower().startswith("<!doctype html") or "<html" in page[:200].lower()
    assert r.best.split(",")[0] in page


def test_min_capacity_and_compare_give_the_cli_numbers():
    m = cachalot.min_capacity(SMALL)
    assert m.to_dict() == cli_json("tune", str(SMALL), "--min-capacity", "-q")
    assert m.capacity == m.data["min_capacity"] > 0
    c = cachalot.compare(SMALL, ["expandable_segments:True"], "2G", html=False)
    assert c.to_dict() == cli_json(
        "compare", str(SMALL), "--conf", "expandable_segments:True", "--capacity", "2G", "-q"
    )
    assert [row["PYTORCH_CUDA_ALLOC_CONF"] for row in c.rows][:2] == [
        "",
        "expandable_segments:True",
    ] or len(c.rows) == 2


def test_replay_gives_the_cli_numbers_and_torch_stats():
    r = cachalot.replay(SMALL, capacity=1 << 30)
    theirs = cli_json("replay", str(SMALL), "--capacity", str(1 << 30))
    for d in (r.data, theirs):
        d.pop("timing")
    assert r.data == theirs
    assert len(r.memory_stats) == 123  # torch 2.15's memory_stats() keys
    assert r.exit_status == (1 if r.ooms else 0)


def test_a_snapshot_dict_is_taken_as_a_file_would_be(tmp_path):
    path = OOM_SNAPSHOT
    as_dict = pickle.loads(gzip.decompress(path.read_bytes()))
    a = cachalot.replay(path, capacity="80G").data
    b = cachalot.replay(as_dict, capacity="80G").data
    for d in (a, b):
        d.pop("timing")
        d.pop("trace")
    assert a == b
    n = cachalot.convert(as_dict, tmp_path / "out.csv")
    assert n > 0 and (tmp_path / "out.csv").read_text().startswith("Thread,Time,Action")


def test_errors_are_python_exceptions_with_the_cli_message():
    with pytest.raises(cachalot.ConfigError, match="max_split_size_mb") as e:
        cachalot.parse_config("max_split_size_mb:lots")
    assert "torch 2.15 says" in str(e.value)
    with pytest.raises(cachalot.ConfigError):
        cachalot.compare(SMALL, ["not_an_option:1"], "1G")
    with pytest.raises(cachalot.TraceError, match=r"/no/such\.csv"):
        cachalot.replay("/no/such.csv")
    with pytest.raises(cachalot.TraceError, match="segments"):
        cachalot.replay({"not": "a snapshot"})
    with pytest.raises(cachalot.ArgumentError, match="capacity"):
        cachalot.tune(SMALL, capacity="lots")
    assert issubclass(cachalot.ConfigError, cachalot.CachalotError)


@pytest.mark.parametrize(
    ("call", "quoted"),
    [
        (lambda: cachalot.tune(SMALL, capacity=1.5), "1.5"),
        (lambda: cachalot.tune(SMALL, capacity=-1), "-1"),
        (lambda: cachalot.tune(SMALL, capacity="24"), "'24'"),
        (lambda: cachalot.replay(SMALL, capacity=1 << 70), str(1 << 70)),
        (lambda: cachalot.tune(SMALL, capacity="2G", threads=0), "0"),
        (lambda: cachalot.tune(SMALL, capacity="2G", threads=10**6), str(10**6)),
        (lambda: cachalot.compare(SMALL, [], "2G", threads=-3), "-3"),
        (lambda: cachalot.tune(SMALL, capacity="2G", top=2.5), "2.5"),
        (lambda: cachalot.replay(SMALL, device="0"), "'0'"),
        (lambda: cachalot.replay(12), "12"),
        (lambda: cachalot.explain(None), "snapshot"),
    ],
)
def test_bad_arguments_raise_cachalot_errors_that_quote_them(call, quoted):
    # Never a bare ValueError/OverflowError/TypeError from the binding: one family to catch.
    with pytest.raises(cachalot.CachalotError) as e:
        call()
    assert quoted in str(e.value), str(e.value)


def test_tune_prints_nothing_and_returns_the_html(capfd):
    r = cachalot.tune(SMALL, capacity="2G", top=2)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert "<html" in r.html[:400].lower() and r.html.rstrip().endswith("</html>")


def test_parse_config():
    c = cachalot.parse_config("max_split_size_mb:128,expandable_segments:True")
    assert c["max_split_size_mb"] == "128"
    assert c["expandable_segments"] == "True"
    assert "max_split_size_mb:128" in c.canonical
    assert c.to_dict()["options"][0].keys() == {"option", "value", "default", "meaning"}


def test_long_runs_release_the_gil():
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    cachalot.min_capacity(SMALL)
    took = time.perf_counter() - start
    stop.set()
    t.join()
    # With the GIL held for the whole call, the other thread would not tick at all.
    assert len(ticks) > 0.2 * took * 1000 / 2, (len(ticks), took)


def test_explain_gives_the_cli_text():
    r = cachalot.explain(OOM_SNAPSHOT)
    assert str(r) == cli_out("explain", str(OOM_SNAPSHOT))
    assert r.data["ooms"] >= 1 and r.data["capacity"] > 0
    d = cachalot.explain(pickle.loads(gzip.decompress(OOM_SNAPSHOT.read_bytes())))
    assert d.data == r.data


def test_one_argument_error_class_a_cachalot_error_and_a_value_error():
    """`_native`'s and `cachalot.torch`'s ArgumentError are one class, caught as either base."""
    from cachalot import _native

    assert cachalot.ArgumentError is _native.ArgumentError
    assert issubclass(cachalot.ArgumentError, cachalot.CachalotError)
    assert issubclass(cachalot.ArgumentError, ValueError)
    assert cachalot.ArgumentError.__module__ == cachalot.CachalotError.__module__
    with pytest.raises(ValueError, match="'12Q'"):
        _native.parse_size("12Q")
    with pytest.raises(cachalot.CachalotError, match="'h1000'"):
        _native.gpu_key("h1000")
    torch_api = pytest.importorskip("cachalot.torch")
    assert torch_api.ArgumentError is cachalot.ArgumentError
