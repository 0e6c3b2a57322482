"""The other bound of an assumed expert routing: `cachalot capture` runs the program once more.

A Mixture-of-Experts router picks experts with ``topk`` over scores that come from weights, so
under the capture runtime its indices are unknown; `values` assumes them (balanced by default).
They steer memory only through host reads (``nonzero``/``torch.where`` of an expert mask, a loop
over the experts hit, ``.tolist()`` of per-expert counts): the device stream of a process can
depend on an assumed value only where the host read one. So

* no read of a value computed from the assumed routing: the memory is the same for any routing
  (grouped GEMMs, ``histc`` offsets on the device) and the report says so;
* some: the program runs again with the worst case (``CACHALOT_VALUES_ROUTING=worst``: the
  top-k experts get every token), its own output to /dev/null, and the report gives both
  peaks and whether the worst case fits, in text and in ``routing`` of ``--json``.

A program run with ``CACHALOT_VALUES_ROUTING`` set by the user runs once, under that assumption.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from . import _env, analysis, gpus, ranks
from .values import ROUTING, ROUTING_ENV


def _summary(job: ranks.Job) -> dict[str, Any] | None:
    """The routing assumptions of the job's processes, or None when none assumed one."""
    sites: dict[str, int] = {}
    reads = unknown = 0
    routing = None
    for meta in job.cuda:
        v = meta.get("values") or {}
        if v.get("routing_assumed"):
            routing = v.get("routing")
            for site, n in (v.get("routing_sites") or {}).items():
                sites[site] = sites.get(site, 0) + n
            reads += sum((v.get("assumed_reads") or {}).values())
            unknown += sum((v.get("dependent_unknown_reads") or {}).values())
    if routing is None:
        return None
    return {
        "assumption": routing,
        "topk_sites": sites,
        "reads": reads,
        "dependent_unknown_reads": unknown,
    }


def _peaks(pred: analysis.Prediction) -> dict[str, Any]:
    return {
        "peak_allocated": pred.peak_allocated,
        "peak_reserved": pred.peak_reserved,
        "verdict": pred.verdict,
        "min_capacity": pred.min_capacity,
    }


def bounds(
    job: ranks.Job,
    answer: ranks.Answer,
    cmd: list[str],
    env: dict[str, str],
    work: Path,
    gpu: gpus.Gpu,
    reserve: int | None,
    timeout: float | None,
) -> dict[str, Any] | None:
    """The ``routing`` part of the answer (None when no router was assumed); runs the worst
    case when the assumed routing steered a host read and the user chose no assumption."""
    from .. import _run

    got = _summary(job)
    if got is None:
        return None
    got["meaning"] = {k: ROUTING[k] for k in ("balanced", "worst")}
    got[got["assumption"]] = _peaks(answer.prediction)
    got["steers_memory"] = bool(got["reads"])
    if not got["reads"] or os.environ.get(ROUTING_ENV) or got["assumption"] != "balanced":
        return got
    print(
        "cachalot capture: the assumed expert routing steered host reads; running the program "
        "again with the worst case (its output is not shown) …",
        file=sys.stderr,
        flush=True,
    )
    procs = work / "procs-worst"
    procs.mkdir()
    (work / "nccl-share-worst").mkdir()
    env = dict(env, **{ROUTING_ENV: "worst"})
    env[_env.ENV_DIR], env[_env.ENV_NCCL_LOG] = str(procs), str(work / "nccl-worst.jsonl")
    env[_env.ENV_NCCL_SHARE] = str(work / "nccl-share-worst")
    with open(os.devnull, "wb") as null:
        done = _run.run(cmd, env, stdout=null.fileno(), timeout=timeout)
    other = ranks.gather(procs, work / "nccl-worst.jsonl")
    if done.status or done.interrupted or not other.cuda:
        got["worst"] = {"error": f"the worst-case run failed (exit {done.status})"}
        return got
    pred = analysis.predict(
        [m["snapshot"] for m in other.cuda],
        gpu,
        reserve=reserve,
        torch_stats=other.cuda[0]["torch_stats"],
        outside=[ranks._outside(m, other) for m in other.cuda],
    )
    got["worst"] = _peaks(pred)
    got["larger"] = {
        k: max(got["balanced"][k], got["worst"][k]) for k in ("peak_allocated", "peak_reserved")
    }
    return got


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.2f} MiB"


def report(b: dict[str, Any]) -> str:
    """The routing lines of the text report."""
    sites = ", ".join(list(b["topk_sites"])[:2])
    head = (
        f"expert routing      assumed at {sum(b['topk_sites'].values())} topk calls over unknown "
        f"scores ({sites})"
    )
    if not b["steers_memory"]:
        text = head + "; no host read of a value computed from it, so both bounds are this answer"
        if b.get("dependent_unknown_reads"):
            text += (
                f" (but {b['dependent_unknown_reads']} reads of values that depend on it could not be"
                " computed and read 0: see the warnings)"
            )
        return text
    lines = [head + ":"]
    for name in ("balanced", "worst"):
        p = b.get(name)
        if p is None:
            continue
        label = f"  {name:<8} ({b['meaning'][name]})"
        if "error" in p:
            lines.append(f"{label}: {p['error']}")
            continue
        lines.append(
            f"{label}: peak allocated {_gib(p['peak_allocated'])}, peak reserved "
            f"{_gib(p['peak_reserved'])}, {p['verdict']}"
            + ("  <- the answer above" if name == b["assumption"] else "")
        )
    if "larger" in b:
        big = b["larger"]
        lines.append(
            f"  the larger of the two: peak allocated {_gib(big['peak_allocated'])}, peak reserved "
            f"{_gib(big['peak_reserved'])} (they bound the expert load, not every routing's peak)"
        )
    return "\n".join(lines)
