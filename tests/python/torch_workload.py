"""One workload run with torch's own allocator or with cachalot's (`--allocator`), recording
torch's `memory_stats()` after every step, the out-of-memory errors (type and message) and
whether the next allocation works; and how two runs are compared (`differences`,
`call_differences`), by test_torch.py on the fake GPU and the simulated driver and by
scripts/gpu_python_check.py on a real GPU (importing this module imports no torch).

    torch_workload.py --allocator torch|cachalot [--device sim|cuda] OUT.json

--device is cachalot's device (`cachalot.torch.use(device=...)`): its simulated GPU, or the
CUDA driver (on the simulated driver of the capture runtime in the tests). The allocator's
configuration comes from PYTORCH_CUDA_ALLOC_CONF, read by torch and cachalot alike. With
CACHALOT_DEVICE_LOG (and on the capture runtime FAKE_CUDA_LOG) set, OUT.json also says how many
lines those device-call logs held before the threaded step.
"""

import argparse
import json
import os
import threading
from collections import Counter
from pathlib import Path

LOG_HEADER = "seq,op,size,ptr,handle,result,phys_used"


def differences(ours, theirs, oom_message_until=None):
    """What differs between two runs' results (empty: the same): the steps, every statistic
    after every step (after the threads only what is live: the totals depend on the
    interleaving, and torch now and then makes one more small request from a new thread), and
    the two OOMs (type, message, recovery). `oom_message_until`: compare the messages up to
    that text only (on a real GPU the free memory they quote moves between runs)."""
    out = []
    if [s["step"] for s in ours["steps"]] != [s["step"] for s in theirs["steps"]]:
        return [
            f"steps {[s['step'] for s in ours['steps']]} != {[s['step'] for s in theirs['steps']]}"
        ]
    for a, b in zip(ours["steps"], theirs["steps"]):
        if len(b["stats"]) != 123 or set(a["stats"]) != set(b["stats"]):
            out.append(f"{a['step']}: {len(a['stats'])} and {len(b['stats'])} statistics")
            continue
        threaded = a["step"] in ("threads", "end")
        keys = [k for k in b["stats"] if not threaded or k.endswith(".current")]
        diff = {k: (a["stats"][k], b["stats"][k]) for k in keys if a["stats"][k] != b["stats"][k]}
        if diff:
            out.append(f"{a['step']}: {diff}")
    if len(ours["ooms"]) != 2 or len(theirs["ooms"]) != 2:
        out.append(f"{len(ours['ooms'])} and {len(theirs['ooms'])} OOM cases")
    cut = (lambda m: m.split(oom_message_until)[0]) if oom_message_until else (lambda m: m)
    for a, b in zip(ours["ooms"], theirs["ooms"]):
        if not (a["type"] == b["type"] == "OutOfMemoryError"):
            out.append(f"{a['step']}: raised {a['type']} and {b['type']}: {a['message']}")
        elif cut(a["message"]) != cut(b["message"]):
            out.append(f"{a['step']}: messages {a['message']!r} and {b['message']!r}")
        if not (a["recovered"] and b["recovered"]):
            out.append(f"{a['step']}: no recovery")
    return out


def call_rows(log):
    """A device-call log's rows less the header and the sequence number: (op, size, ptr,
    handle, result, phys_used) as text."""
    if not log or log[0] != LOG_HEADER:
        raise ValueError(f"not a device-call log: {log[:1]}")
    return [tuple(line.split(",")[1:]) for line in log[1:]]


def first_difference(ours, theirs):
    """Where two lists of rows first differ, in one line (None: equal)."""
    if ours == theirs:
        return None
    i = next(
        (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))
    )

    def at(rows):
        return rows[i] if i < len(rows) else "<end>"

    return f"row {i + 1} of {len(ours)} and {len(theirs)}: {at(ours)} against {at(theirs)}"


def log_against_stats(log, stats):
    """Where a device-call log of the caching backend disagrees with the statistics the run
    ended with (None: it agrees): as many successful cudaMalloc and cudaFree rows as
    num_device_alloc and num_device_free. (The other backends count differently: the VMM
    calls of expandable segments page by page, the pool's calls not at all.)"""
    rows = call_rows(log)
    for op, key in (("cudaMalloc", "num_device_alloc"), ("cudaFree", "num_device_free")):
        n = sum(1 for r in rows if r[0] == op and r[4] == "0")
        if n != stats[key]:
            return f"{n} successful {op} calls in the log, {key} = {stats[key]}"
    return None


def call_differences(ours, our_before, theirs, their_before, fields=(0, 1, 2, 3, 4, 5)):
    """How two device-call logs differ (None: the same): the rows before the threaded step
    (`*_before`: the log's lines then, header included) in order, compared on `fields` of
    (op, size, ptr, handle, result, phys_used); from the threads on, whose order depends on
    the interleaving, the multisets of (op, size, result)."""
    a, b = call_rows(ours), call_rows(theirs)
    n, m = our_before - 1, their_before - 1
    if n != m:
        return f"{n} and {m} calls before the threads"
    pick = lambda rows: [tuple(r[f] for f in fields) for r in rows]  # noqa: E731
    first = first_difference(pick(a[:n]), pick(b[:n]))
    if first:
        return f"before the threads, {first}"
    later = lambda rows: Counter((r[0], r[1], r[4]) for r in rows[n:])  # noqa: E731
    if later(a) != later(b):
        return f"from the threads on: {later(a) - later(b)} against {later(b) - later(a)}"
    return None


def main():
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", choices=["torch", "cachalot"], required=True)
    ap.add_argument("--device", choices=["sim", "cuda"], default="sim")
    ap.add_argument("out")
    args = ap.parse_args()

    if args.allocator == "cachalot":
        import cachalot.torch as ct

        ct.use(device=args.device)
        stats = ct.memory_stats
    else:
        stats = torch.cuda.memory_stats

    steps = []
    ooms = []

    def step(name):
        torch.cuda.synchronize()
        steps.append({"step": name, "stats": dict(stats())})

    def expect_oom(name, fn):
        try:
            fn()
        except torch.OutOfMemoryError as e:
            ooms.append({"step": name, "type": type(e).__name__, "message": str(e)})
        else:
            ooms.append({"step": name, "type": None, "message": "no exception"})
        # Recovery: the next allocation works.
        t = torch.empty(4096, device="cuda")
        ooms[-1]["recovered"] = t.data_ptr() != 0
        del t
        step(name)

    MiB = 1 << 20
    keep = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (512, 4096, 1 * MiB, 3 * MiB)]
    step("small and large")
    keep += [torch.empty(n * MiB, dtype=torch.uint8, device="cuda") for n in (7, 15, 25, 100)]
    del keep[1], keep[3]
    step("frees")

    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
    )
    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters())
    for i in range(2):
        model(torch.randn(64, 512, device="cuda")).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(f"train step {i}")

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
    shared = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")
    shared.record_stream(side)
    del shared
    step("record_stream")
    with torch.cuda.stream(side):
        del on_side
        again = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
    del again
    step("second stream")

    del keep
    torch.cuda.empty_cache()
    step("empty_cache")

    expect_oom("too big", lambda: torch.empty(1 << 40, dtype=torch.uint8, device="cuda"))
    torch.cuda.set_per_process_memory_fraction(0.25)
    # 30 GiB on the tests' 80 GiB device, over the 20 GiB the fraction allows; as much over on any GPU.
    big = torch.cuda.get_device_properties(0).total_memory * 3 // 8
    expect_oom("memory fraction", lambda: torch.empty(big, dtype=torch.uint8, device="cuda"))
    torch.cuda.set_per_process_memory_fraction(1.0)

    def worker(n):
        for i in range(20):
            t = torch.empty((i % 5 + 1) * MiB + n, dtype=torch.uint8, device="cuda")
            del t

    # How many lines the device-call logs hold before the threads (their order depends on the
    # interleaving): the capture runtime's (FAKE_CUDA_LOG) and cachalot's own (CACHALOT_DEVICE_LOG).
    def lines_of(variable):
        log = os.environ.get(variable)
        return len(Path(log).read_text().splitlines()) if log else None

    calls_before_threads = lines_of("FAKE_CUDA_LOG")
    device_calls_before_threads = lines_of("CACHALOT_DEVICE_LOG")
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    step("threads")
    del model, opt
    torch.cuda.empty_cache()
    step("end")

    with open(args.out, "w") as f:
        json.dump(
            {
                "steps": steps,
                "ooms": ooms,
                "calls_before_threads": calls_before_threads,
                "device_calls_before_threads": device_calls_before_threads,
            },
            f,
        )


if __name__ == "__main__":
    main()
