#!/usr/bin/env python3
"""Checks a snapshot pickle written by cachalot against one written by torch 2.15.

    python3 check_snapshot_pickle.py OURS.pickle TORCH.pickle[.gz]

1. Every opcode of OURS is one MemoryViz.js's unpickler handles (pickletools), and the
   protocol is 2 to 4 (MemoryViz refuses 5).
2. pickle.load(OURS) equals pickle.load(TORCH) except `time_us` (a virtual clock in cachalot,
   wall-clock microseconds in torch).
Prints "ok" or what differs, and exits non-zero on a difference.
"""
import gzip
import pickle
import pickletools
import sys

MEMORYVIZ_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "EMPTY_LIST", "LIST", "APPEND", "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1",
    "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "MEMOIZE", "BINPUT", "LONG_BINPUT",
    "BINGET", "LONG_BINGET",
}


def load_bytes(path):
    data = open(path, "rb").read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def strip(snap):
    for trace in snap["device_traces"]:
        for e in trace:
            e.pop("time_us", None)
    return snap


ours, theirs = load_bytes(sys.argv[1]), load_bytes(sys.argv[2])
bad = set()
proto = None
for op, arg, _ in pickletools.genops(ours):
    if op.name == "PROTO":
        proto = arg
    if op.name not in MEMORYVIZ_OPCODES:
        bad.add(op.name)
if bad or proto not in (2, 3, 4):
    sys.exit(f"opcodes outside MemoryViz.js's set: {sorted(bad)}; protocol {proto}")
a, b = strip(pickle.loads(ours)), strip(pickle.loads(theirs))
if a != b:
    for key in b:
        if a.get(key) != b[key]:
            sys.exit(f"key {key!r} differs")
    sys.exit(f"keys differ: {sorted(a)} vs {sorted(b)}")
print("ok")
