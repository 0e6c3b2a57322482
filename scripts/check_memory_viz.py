#!/usr/bin/env python3
"""Check a cachalot snapshot pickle with torch's own torch/cuda/_memory_viz.py.

usage: scripts/check_memory_viz.py MEMORY_VIZ_DIR OURS.pickle [TORCH_REFERENCE.pickle]

MEMORY_VIZ_DIR holds _memory_viz.py, e.g. extracted from the torch 2.15 wheel:
    pip download --no-deps torch==2.15.0 -d /tmp/whl
    python3 -c "import zipfile; zipfile.ZipFile('/tmp/whl/torch-2.15.0-...whl').extract('torch/cuda/_memory_viz.py', '/tmp/whl/x')"
    scripts/check_memory_viz.py /tmp/whl/x/torch/cuda ours.pickle ../shared/traces/pickle/resnet50-train.default.pickle

The module imports nothing from torch at load time, so no torch installation is needed. It
runs segsum and trace (text views) and trace_plot / segment_plot (the HTML pages that embed
the pickle for MemoryViz.js). With a reference pickle written by torch for the same replay,
the text views must be identical once `time_us` (a virtual clock in cachalot, wall-clock in
torch) is masked.
"""

import contextlib
import io
import pickle
import sys


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    sys.path.insert(0, sys.argv[1])
    import _memory_viz as mv

    ours = load(sys.argv[2])
    ref = load(sys.argv[3]) if len(sys.argv) == 4 else None
    if ref is not None:
        for snap in (ours, ref):
            for trace in snap["device_traces"]:
                for entry in trace:
                    entry["time_us"] = 0

    def text(view, data):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            r = getattr(mv, view)(data)
        return (r if isinstance(r, str) else "") + out.getvalue()

    ok = True
    for view in ("segsum", "trace"):
        a = text(view, ours)
        if ref is None:
            print(f"{view}: {len(a.splitlines())} lines")
        elif a == text(view, ref):
            print(f"{view}: identical to torch's ({len(a.splitlines())} lines)")
        else:
            ok = False
            print(f"{view}: DIFFERENT from torch's")
    for view in ("trace_plot", "segment_plot"):
        html = getattr(mv, view)(ours)
        print(f"{view}: {len(html)} bytes of HTML")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
