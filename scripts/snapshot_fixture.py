"""What the snapshot fixture generators (gen_snapshot_fixtures.py, gen_ring_fixtures.py,
gen_pool_snapshots.py) share: each file is recorded by a child process of its own (a fresh
allocator, its own device size and configuration) and written gzip'd with no timestamp in the
gzip header, atomically (a failed run leaves the old file).

Import it from a script in this folder: `import snapshot_fixture` (Python puts the script's
folder first on the path)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path


def dump_gz(torch, out: Path) -> None:
    """torch's snapshot of this process (`torch.cuda.memory._dump_snapshot`), gzip'd to `out`."""
    raw = out.with_name(out.name + ".raw.tmp")
    torch.cuda.memory._dump_snapshot(str(raw))
    data = raw.read_bytes()
    raw.unlink()
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    os.replace(tmp, out)


def run_child(script: str, args: list[str], env: dict[str, str]) -> None:
    """Runs `script --child ARGS…` with this Python, in the environment with `env` set and no
    allocator configuration of the caller's own."""
    e = dict(os.environ)
    e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    e.update(env)
    subprocess.run([sys.executable, script, "--child", *args], env=e, check=True)
