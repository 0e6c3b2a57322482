#!/usr/bin/env python3
"""Writes a large torch memory snapshot pickle, laid out as torch 2.15's _dump_snapshot() does.

For the snapshot reader's benchmark (issue #12): a history recorded with full stack
context over millions of events, written without building the object tree in Python. The
pickle is written opcode by opcode the way Python's pickler writes the dict that
torch.cuda.memory._snapshot() returns: protocol 4, framed, every container and string
memoized, APPENDS/SETITEMS in batches of 1000, stack frames shared the way torch's
symbolizer shares them (one dict per distinct frame, referred to through the memo), and
some frame lists shared between entries.

The workload is training-like: allocations and completed frees (alloc, free_requested,
free_completed; segment_alloc when the simulated reserve grows), ending with an `oom`
entry; the segments hold the blocks still live at the end.

    gen_big_snapshot.py /tmp/big.pickle --target-mb 1024    # about 1 GB
    gen_big_snapshot.py --check                             # equal to Python's pickler

Generate it under /tmp, not in the repository.
"""

from __future__ import annotations

import argparse
import io
import pickle
import random
import struct

BATCH = 1000
FRAME_TARGET = 64 * 1024
SEGMENT = 2 << 20
CAPACITY = 80 << 30
SIZES = [512, 1024, 4096, 65536, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 25 << 20]


class Writer:
    """Python's protocol-4 pickler, by hand: framing, the memo, batching."""

    def __init__(self, out):
        self.out = out
        self.buf = io.BytesIO()
        self.memo_len = 0
        self.shared: dict[object, int] = {}
        self.out.write(b"\x80\x04")

    def op(self, b: bytes) -> None:
        self.buf.write(b)

    def commit(self, force: bool = False) -> None:
        n = self.buf.tell()
        if n and (force or n >= FRAME_TARGET):
            self.out.write(b"\x95" + struct.pack("<Q", n) + self.buf.getvalue())
            self.buf = io.BytesIO()

    def memoize(self) -> int:
        self.op(b"\x94")
        self.memo_len += 1
        return self.memo_len - 1

    def get(self, idx: int) -> None:
        self.op(b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx))

    def int(self, v: int) -> None:
        if 0 <= v < 256:
            self.op(b"K" + bytes([v]))
        elif 0 <= v < 65536:
            self.op(b"M" + struct.pack("<H", v))
        elif -(2**31) <= v < 2**31:
            self.op(b"J" + struct.pack("<i", v))
        else:
            raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
            self.op(b"\x8a" + bytes([len(raw)]) + raw)

    def fresh_str(self, s: str) -> None:
        raw = s.encode()
        if len(raw) < 256:
            self.op(b"\x8c" + bytes([len(raw)]) + raw)
        else:
            self.op(b"X" + struct.pack("<I", len(raw)) + raw)
        self.memoize()

    def str(self, s: str) -> None:
        """A string object the document refers to from many places (keys, names)."""
        key = ("s", s)
        if key in self.shared:
            self.get(self.shared[key])
        else:
            self.shared[key] = self.memo_len
            self.fresh_str(s)

    def value(self, v) -> None:
        if v is None:
            self.op(b"N")
        elif v is True:
            self.op(b"\x88")
        elif v is False:
            self.op(b"\x89")
        elif isinstance(v, int):
            self.int(v)
        elif isinstance(v, float):
            self.op(b"G" + struct.pack(">d", v))
        elif isinstance(v, str):
            self.str(v)
        elif isinstance(v, tuple):
            for x in v:
                self.value(x)
            self.op(b"\x86")
            self.memoize()
        elif isinstance(v, dict):
            self.dict(v.items())
        elif isinstance(v, list):
            self.list(v)
        else:
            raise TypeError(type(v))

    def dict(self, items) -> int:
        self.op(b"}")
        idx = self.memoize()
        items = list(items)
        for i in range(0, len(items), BATCH):
            chunk = items[i : i + BATCH]
            if len(chunk) > 1:
                self.op(b"(")
            for k, v in chunk:
                self.str(k)
                self.value(v)
            self.op(b"u" if len(chunk) > 1 else b"s")
            self.commit()
        return idx

    def list(self, items, write_item=None) -> int:
        """A list written item by item (`items` may be a generator)."""
        write_item = write_item or self.value
        self.op(b"]")
        idx = self.memoize()
        chunk: list = []

        def flush():
            if len(chunk) > 1:
                self.op(b"(")
            for item in chunk:
                write_item(item)
                self.commit()
            if chunk:
                self.op(b"e" if len(chunk) > 1 else b"a")
            chunk.clear()

        for item in items:
            chunk.append(item)
            if len(chunk) == BATCH:
                flush()
        flush()
        return idx


def make_frames(rng: random.Random, depth: int):
    files = [f"/work/models/{m}.py" for m in ("model", "layers", "attention", "optim", "train")]
    libs = [
        "/usr/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
        "/usr/lib/python3.11/site-packages/torch/lib/libc10_cuda.so",
        "/usr/lib/libpython3.11.so.1.0",
    ]
    frames = []
    for i in range(4000):
        if i % 3 == 0:
            frames.append(
                {"name": f"fn_{i}", "filename": rng.choice(files), "line": rng.randrange(1, 2000)}
            )
        else:
            name = "??" if i % 7 else f"c10::op_{i}"
            frames.append(
                {"name": name, "filename": rng.choice(libs), "line": rng.randrange(10**5, 10**8)}
            )
    stacks = [
        list(range(12)) + [rng.randrange(12, len(frames)) for _ in range(max(1, depth - 12))]
        for _ in range(3000)
    ]
    return frames, stacks


def history(seed: int, n: int):
    """(action, addr, size, stack, time_us) entries, then an oom; returns the live blocks."""
    rng = random.Random(seed)
    live: dict[int, int] = {}
    order: list[int] = []
    next_addr = 0x7F0000000000
    used = reserved = 0
    t = 1_700_000_000_000_000
    count = 0
    while count < n:
        stack = rng.randrange(3000)
        if order and (len(order) > 3000 or rng.random() < 0.48):
            addr = order.pop(rng.randrange(len(order)) if rng.random() < 0.3 else 0)
            size = live.pop(addr)
            used -= size
            yield ("free_requested", addr, size, stack, t)
            yield ("free_completed", addr, size, stack, t + 1)
            count += 2
        else:
            size = rng.choice(SIZES) + rng.randrange(0, 512) * 512
            if used + size > reserved:
                grow = (size + SEGMENT - 1) // SEGMENT * SEGMENT
                yield ("segment_alloc", 0x100000000000 + reserved, grow, stack, t)
                reserved += grow
                count += 1
            addr = next_addr
            next_addr += (size + 511) // 512 * 512
            live[addr] = size
            used += size
            order.append(addr)
            yield ("alloc", addr, size, stack, t)
            count += 1
        t += rng.randrange(1, 50)
    yield ("oom", CAPACITY - reserved, CAPACITY, 0, t)
    return live


def end_state(seed: int, n: int) -> dict[int, int]:
    it = history(seed, n)
    while True:
        try:
            next(it)
        except StopIteration as stop:
            return stop.value


def segments_of(live: dict[int, int], with_frames: list) -> list[dict]:
    """One segment per live block (its size rounded to 512 bytes), as torch reports them."""
    out = []
    for addr, size in sorted(live.items()):
        rounded = (size + 511) // 512 * 512
        out.append(
            {
                "device": 0,
                "address": addr,
                "total_size": rounded,
                "allocated_size": rounded,
                "active_size": rounded,
                "requested_size": size,
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": with_frames,
                "blocks": [
                    {
                        "address": addr,
                        "size": rounded,
                        "requested_size": size,
                        "state": "active_allocated",
                        "frames": with_frames,
                    }
                ],
            }
        )
    return out


SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": "",
    "max_split_size": -1,
    "garbage_collection_threshold": 0.0,
    "expandable_segments": False,
    "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False,
    "pinned_use_cuda_host_register": False,
    "graph_capture_record_stream_reuse": False,
    "max_round_threshold": -1,
    "max_cached_size": -1,
    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
}


def write(out, n: int, seed: int, depth: int) -> int:
    """Writes the snapshot of `n` history entries; returns how many were written."""
    rng = random.Random(seed + 1)
    frames, stacks = make_frames(rng, depth)
    live = end_state(seed, n)
    w = Writer(out)
    count = 0

    def frame(i: int) -> None:
        key = ("f", i)
        if key in w.shared:
            w.get(w.shared[key])
        else:
            w.shared[key] = w.dict(frames[i].items())

    def entry(e) -> None:
        nonlocal count
        action, addr, size, stack, t = e
        w.op(b"}")
        w.memoize()
        w.op(b"(")
        w.str("action")
        w.str(action)
        w.str("device_free" if action == "oom" else "addr")
        w.int(addr)
        for k, v in (("size", size), ("stream", 0), ("time_us", t)):
            w.str(k)
            w.int(v)
        w.str("compile_context")
        w.fresh_str("N/A")
        w.str("user_metadata")
        w.fresh_str("")
        w.str("pool_id")
        w.value((0, 0))
        w.str("frames")
        key = ("stack", stack)
        if key in w.shared and rng.random() < 0.25:
            w.get(w.shared[key])
        else:
            w.shared[key] = w.list(stacks[stack], frame)
        w.op(b"u")
        count += 1

    w.op(b"}")
    w.memoize()
    w.op(b"(")
    w.str("segments")
    w.value(segments_of(live, []))
    w.str("device_traces")
    w.op(b"]")
    w.memoize()
    w.list(history(seed, n), entry)
    w.op(b"a")
    w.str("allocator_settings")
    w.value(SETTINGS)
    for k in ("external_annotations", "host_segments", "host_traces"):
        w.str(k)
        w.list([])
    w.op(b"u.")
    w.commit(force=True)
    return count


def python_equivalent(n: int, seed: int, depth: int) -> dict:
    """The same snapshot as Python objects (for --check)."""
    rng = random.Random(seed + 1)
    frames, stacks = make_frames(rng, depth)
    live = end_state(seed, n)
    entries = []
    for action, addr, size, stack, t in history(seed, n):
        e = {
            "action": action,
            ("device_free" if action == "oom" else "addr"): addr,
            "size": size,
            "stream": 0,
            "time_us": t,
        }
        e.update(
            {
                "compile_context": "N/A",
                "user_metadata": "",
                "pool_id": (0, 0),
                "frames": [frames[f] for f in stacks[stack]],
            }
        )
        entries.append(e)
    return {
        "segments": segments_of(live, []),
        "device_traces": [entries],
        "allocator_settings": SETTINGS,
        "external_annotations": [],
        "host_segments": [],
        "host_traces": [],
    }


def check() -> None:
    n, seed, depth = 5000, 7, 24
    buf = io.BytesIO()
    write(buf, n, seed, depth)
    ours = pickle.loads(buf.getvalue())
    theirs = python_equivalent(n, seed, depth)
    assert ours == theirs, "the hand-written pickle differs from the Python objects"
    ops = {op.name for op, _, _ in __import__("pickletools").genops(buf.getvalue())}
    print(
        f"ok: {len(ours['device_traces'][0])} entries, {len(buf.getvalue())} bytes, opcodes {sorted(ops)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--target-mb", type=float, default=1024)
    ap.add_argument("--depth", type=int, default=32, help="frames per stack")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        check()
        return
    if not a.out:
        ap.error("OUT is required (or --check)")
    # About 75 bytes per entry plus 5 per frame reference (4 in 5 entries write their list).
    per_entry = 75 + 4 * a.depth
    n = int(a.target_mb * 1e6 / per_entry)
    with open(a.out, "wb") as f:
        count = write(f, n, a.seed, a.depth)
        size = f.tell()
    print(f"{a.out}: {size / 1e6:.1f} MB, {count} history entries, {a.depth} frames per stack")


if __name__ == "__main__":
    main()
