"""cachalot.torch's answers to bad arguments inside real PyTorch on the fake GPU (issue #28
item 14): cachalot.CachalotError subclasses that quote the argument (ArgumentError is also a
ValueError, AllocatorError also a RuntimeError), no call on another device than asked for, no
file at a path the user did not give, and torch's silence where torch is silent."""

import json
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, torch
    import cachalot, cachalot.torch as ct
    os.chdir(sys.argv[1])
    out = {}

    def attempt(name, fn):
        try:
            fn()
        except Exception as e:
            out[name] = [type(e).__name__, isinstance(e, cachalot.CachalotError),
                         isinstance(e, ValueError), isinstance(e, RuntimeError), str(e)]
        else:
            out[name] = None

    attempt("use bad device", lambda: ct.use(device="gpu"))
    attempt("use bad conf type", lambda: ct.use(conf=3))
    ct.use(device="sim")
    x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    attempt("stats 2**40", lambda: ct.memory_stats(2**40))
    attempt("stats 2**32", lambda: ct.memory_stats(2**32))
    attempt("stats -1", lambda: ct.memory_stats(-1))
    attempt("stats 7", lambda: ct.memory_stats(7))
    attempt("stats cpu", lambda: ct.memory_stats("cpu"))
    attempt("stats nonsense", lambda: ct.memory_stats("nonsense"))
    attempt("stats float", lambda: ct.memory_stats(1.5))
    attempt("summary 2**40", lambda: ct.memory_summary(2**40))
    attempt("reset 2**40", lambda: ct.reset_peak_memory_stats(2**40))
    attempt("history enabled", lambda: ct.record_memory_history(enabled="everything"))
    attempt("history entries", lambda: ct.record_memory_history(max_entries=-1))
    attempt("dump nul", lambda: ct.dump_snapshot("a\\0b"))
    attempt("dump empty", lambda: ct.dump_snapshot(""))
    attempt("dump type", lambda: ct.dump_snapshot(3))
    attempt("use again", lambda: ct.use("expandable_segments:True"))
    out["files"] = sorted(os.listdir("."))
    out["stats 0 allocated"] = ct.memory_stats(0)["allocated_bytes.all.current"]
    out["stats cuda:0"] = ct.memory_stats("cuda:0") == ct.memory_stats(0)
    side = torch.cuda.Stream()
    empty = torch.empty(0, device="cuda")
    sys.stderr.write("BEFORE RECORD_STREAM\\n")
    sys.stderr.flush()
    empty.record_stream(side)
    torch.cuda.synchronize()
    sys.stderr.write("AFTER RECORD_STREAM\\n")
    sys.stderr.flush()
    print(json.dumps(out))
    """
)


def test_bad_arguments_raise_cachalot_errors_and_nothing_else_happens(torch_on_fakegpu, tmp_path):
    p = torch_on_fakegpu(["-c", SCRIPT, tmp_path], env={"CACHALOT_SIM_CAPACITY": "2G"})
    out = json.loads(p.stdout.strip().splitlines()[-1])
    argument = [
        "use bad device",
        "use bad conf type",
        "stats 2**40",
        "stats 2**32",
        "stats -1",
        "stats 7",
        "stats cpu",
        "stats nonsense",
        "stats float",
        "summary 2**40",
        "reset 2**40",
        "history enabled",
        "history entries",
        "dump nul",
        "dump empty",
        "dump type",
    ]
    for name in argument:
        assert out[name] is not None, f"{name}: no error"
        kind, cachalot_error, value_error, _, msg = out[name]
        assert (kind, cachalot_error, value_error) == ("ArgumentError", True, True), (
            name,
            out[name],
        )
    # The messages quote what was given and say what would do.
    assert "1099511627776" in out["stats 2**40"][4] and "0..0" in out["stats 2**40"][4]
    assert "'a\\x00b'" in out["dump nul"][4] and "NUL" in out["dump nul"][4]
    assert "'gpu'" in out["use bad device"][4] and "cuda, sim" in out["use bad device"][4]
    assert "'everything'" in out["history enabled"][4]
    kind, cachalot_error, _, runtime_error, msg = out["use again"]
    assert (kind, cachalot_error, runtime_error) == ("AllocatorError", True, True)
    assert "already called" in msg
    # dump_snapshot("a\0b") wrote nothing, neither "a" nor anything else.
    assert out["files"] == []
    assert out["stats 0 allocated"] == 1 << 20
    assert out["stats cuda:0"]
    # record_stream on an empty tensor: nothing said, as with torch's allocator.
    between = p.stderr.split("BEFORE RECORD_STREAM\n", 1)[1].split("AFTER RECORD_STREAM", 1)[0]
    assert between == "", between
