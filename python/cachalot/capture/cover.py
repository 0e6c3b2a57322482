"""World sizes larger than the machine: a job of N ranks of which only a few are executed.

`cachalot capture --world-size 64 [--ranks 0,63] -- torchrun --nproc_per_node 8 train.py`
runs the executed ranks (default: rank 0 and the last) and no other. Each executed rank sees
the job of N ranks in everything that shapes its memory: its rank and the world size (the
environment the launcher sets, `torch.distributed`), the devices of a node of
`--nproc_per_node` GPUs (`CUDA_VISIBLE_DEVICES`, `LOCAL_RANK` = rank mod the node's GPUs),
NCCL communicators of N ranks (so `all_gather`/`reduce_scatter` outputs, FSDP2 shards and
DeepSpeed partitions have their N-rank sizes). The ranks not executed never arrive:

- the launcher is started for the executed ranks alone on one node (its own per-node count
  replaced by theirs, its multi-node options dropped); each of its workers then becomes one
  executed rank (`remap_env`, from sitecustomize, before the script reads its environment);
  `torch.multiprocessing.spawn` of N ranks starts only the executed ones (`_Spawned`);
- the rendezvous store hosted by rank 0 does not wait for N workers to connect, and torch's
  optional store barrier after init (TORCH_DIST_INIT_BARRIER) is off; the simulated NCCL's
  collectives never wait for a peer, and a broadcast whose root is not executed gives each
  rank its own bytes at once (fake_nccl.cpp, CACHALOT_NCCL_EXECUTED);
- a Gloo group that has ranks not executed is torch's own fake process group (CPU
  collectives complete and move no data: no GPU memory is at stake there);
- what cannot be satisfied is refused with the reason: rank 0 must be executed (it creates
  the NCCL communicator's id every other rank reads from the store), so must the first rank
  of each process group an executed rank joins through the store (torch 2.15 splits new
  groups from the default one by `ncclCommSplit` where it can, which needs no store), and a
  program whose world size is not N is reported as such.

Coverage is by symmetry: rank 0 is its own (it logs, saves, evaluates); ranks 1..N-1 run the
same program on equal shares (DDP replicas, FSDP2 and ZeRO shards padded to equal sizes), so
each is answered by the executed rank at or below it (`covered_by`). That assumption fails
for a program that branches on its rank beyond rank 0, splits uneven data, or gives ranks
different stages (pipeline parallelism: its import is reported).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

ENV = "CACHALOT_COVER"  # "WORLD:PER_NODE:R0,R1,…", set for every process of a covered job
ENV_RANK = "CACHALOT_COVER_RANK"  # set in a rank once its environment says its covered rank
ENV_NCCL_EXECUTED = "CACHALOT_NCCL_EXECUTED"  # the executed ranks, for fake_nccl.cpp
ENV_NCCL_WORLD = "CACHALOT_NCCL_WORLD"


class CoverError(ValueError):
    """A --world-size / --ranks / launcher combination that cannot be run as asked."""


@dataclass(frozen=True)
class Cover:
    world: int  # N, the job's ranks
    per_node: int  # the GPUs of a node (the launcher's per-node count)
    ranks: tuple[int, ...]  # the executed ranks, sorted, rank 0 first

    def env(self) -> dict[str, str]:
        listed = ",".join(map(str, self.ranks))
        return {
            ENV: f"{self.world}:{self.per_node}:{listed}",
            ENV_NCCL_EXECUTED: listed,
            ENV_NCCL_WORLD: str(self.world),
            "TORCH_DIST_INIT_BARRIER": "0",  # a store barrier waits for all N ranks
        }

    def covered_by(self, rank: int) -> int:
        """The executed rank whose answer stands for `rank` (itself when executed)."""
        if rank in self.ranks:
            return rank
        below = [r for r in self.ranks if 0 < r <= rank]
        return below[-1] if below else min(r for r in self.ranks if r > 0)

    def covered(self, executed: int) -> list[int]:
        """The ranks not executed that `executed` stands for."""
        return [
            r for r in range(self.world) if r not in self.ranks and self.covered_by(r) == executed
        ]


def from_env(env: dict[str, str] | os._Environ = os.environ) -> Cover | None:
    text = env.get(ENV)
    if not text:
        return None
    world, per_node, ranks = text.split(":")
    return Cover(int(world), int(per_node), tuple(int(r) for r in ranks.split(",")))


def parse_ranks(text: str | None, world: int) -> tuple[int, ...]:
    """`--ranks 0,7` (default: rank 0 and the last) for a job of `world` ranks."""
    if text is None:
        return (0, world - 1) if world > 1 else (0,)
    try:
        ranks = sorted({int(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise CoverError(
            f"--ranks {text!r}: expected ranks separated by commas, e.g. 0,7"
        ) from None
    if not ranks or ranks[0] != 0:
        raise CoverError(
            f"--ranks {text!r}: rank 0 must be one of them (it creates the communicators' ids "
            "every other rank waits for), e.g. 0," + str(world - 1)
        )
    if ranks[-1] >= world:
        raise CoverError(
            f"--ranks {text!r}: rank {ranks[-1]} is outside a job of {world} ranks (0 to {world - 1})"
        )
    return tuple(ranks)


# -- the launcher's command line ---------------------------------------------------------

# Per launcher: its option for processes per node (or in all, for accelerate), for nodes, and
# the multi-node options dropped when the executed ranks run on this one node.
_LAUNCHERS = {
    "torchrun": (
        ("--nproc_per_node", "--nproc-per-node"),
        ("--nnodes",),
        (
            "--node_rank",
            "--node-rank",
            "--rdzv_backend",
            "--rdzv-backend",
            "--rdzv_endpoint",
            "--rdzv-endpoint",
            "--rdzv_id",
            "--rdzv-id",
            "--rdzv_conf",
            "--rdzv-conf",
            "--master_addr",
            "--master-addr",
        ),
    ),
    "accelerate": (
        ("--num_processes", "--num-processes"),
        ("--num_machines", "--num-machines"),
        ("--machine_rank", "--machine-rank", "--main_process_ip", "--main-process-ip"),
    ),
    "deepspeed": (
        ("--num_gpus", "--num-gpus"),
        ("--num_nodes", "--num-nodes"),
        ("--hostfile", "-H", "--node_rank", "--master_addr"),
    ),
}


def launcher(command: list[str]) -> tuple[str | None, int]:
    """Which launcher `command` is (torchrun, accelerate, deepspeed, or None for a plain
    script) and where its own options start."""
    name = os.path.basename(command[0])
    if name == "torchrun":
        return "torchrun", 1
    if name == "deepspeed":
        return "deepspeed", 1
    if name == "accelerate" and len(command) > 1 and command[1] == "launch":
        return "accelerate", 2
    if name.startswith("python"):
        for i, a in enumerate(command[1:-1], start=1):
            if a == "-m":
                if command[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
                    return "torchrun", i + 2
                return None, 0
            if not a.startswith("-"):
                break
    return None, 0


def _options(command: list[str], start: int) -> list[tuple[int, str, str | None, bool]]:
    """The launcher's options up to its script: (index, name, value, value in the same word)."""
    out = []
    i = start
    while i < len(command):
        a = command[i]
        if a.endswith(".py") or a in ("-m", "--module") or not a.startswith("-"):
            break
        if "=" in a:
            name, value = a.split("=", 1)
            out.append((i, name, value, True))
        elif i + 1 < len(command) and not command[i + 1].startswith("-"):
            out.append((i, a, command[i + 1], False))
            i += 1
        else:
            out.append((i, a, None, False))
        i += 1
    return out


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.split(":")[-1]  # torchrun's --nnodes MIN:MAX
    return int(value) if value.isdigit() and int(value) > 0 else None


def launcher_world(command: list[str]) -> tuple[int | None, int | None]:
    """(ranks in all, GPUs per node) as the launcher's own options say, where they do."""
    kind, start = launcher(command)
    if kind is None:
        return None, None
    procs_opts, nodes_opts, _ = _LAUNCHERS[kind]
    procs = nodes = None
    for _, name, value, _ in _options(command, start):
        if name in procs_opts:
            procs = _count(value)
        elif name in nodes_opts:
            nodes = _count(value)
    nodes = nodes or 1
    if procs is None:
        return None, None
    if kind == "accelerate":  # --num_processes counts every machine's
        return procs, max(1, procs // nodes)
    return procs * nodes, procs


def rewrite(command: list[str], executed: int) -> list[str]:
    """The launcher's command for `executed` processes on this one node (a plain script's
    command is unchanged)."""
    kind, start = launcher(command)
    if kind is None:
        return list(command)
    procs_opts, nodes_opts, dropped = _LAUNCHERS[kind]
    drop: set[int] = set()
    multi_node = False
    for i, name, value, same in _options(command, start):
        if name in procs_opts or name in nodes_opts or name in dropped:
            drop.add(i)
            if value is not None and not same:
                drop.add(i + 1)
            multi_node |= name in nodes_opts and (_count(value) or 1) > 1
            multi_node |= name in ("--rdzv_endpoint", "--rdzv-endpoint")
    out = [a for i, a in enumerate(command) if i not in drop]
    added = [procs_opts[0], str(executed), nodes_opts[0], "1"]
    if kind == "torchrun" and multi_node and "--standalone" not in out:
        added.append("--standalone")  # this node is the rendezvous now
    return out[:start] + added + out[start:]


# -- inside each process of a covered job ------------------------------------------------

_LOCAL_RANK_ARGS = ("--local_rank", "--local-rank")


def remap_env() -> None:
    """In a launcher's worker (RANK set by a launcher told of the executed ranks only): the
    environment of the covered rank it stands for, as a node of `per_node` GPUs in a job of
    `world` ranks sets it. Runs from sitecustomize, before the script reads anything."""
    cover = from_env()
    env = os.environ
    if cover is None or env.get(ENV_RANK) or not (env.get("RANK") or "").isdigit():
        return
    index = int(env["RANK"])
    if index >= len(cover.ranks) or env.get("WORLD_SIZE") != str(len(cover.ranks)):
        return
    rank, world, per_node = cover.ranks[index], cover.world, cover.per_node
    local = rank % per_node
    values = {
        "RANK": rank,
        "WORLD_SIZE": world,
        "LOCAL_RANK": local,
        "LOCAL_WORLD_SIZE": per_node,
        "GROUP_RANK": rank // per_node,
        "GROUP_WORLD_SIZE": world // per_node,
        "ROLE_RANK": rank,
        "ROLE_WORLD_SIZE": world,
        "NODE_RANK": rank // per_node,
        "CROSS_RANK": rank // per_node,
        "CROSS_SIZE": world // per_node,
    }
    for name, value in values.items():
        if name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") or name in env:
            env[name] = str(value)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(per_node)))
    env[ENV_RANK] = str(rank)
    argv = sys.argv
    for i, a in enumerate(argv):  # deepspeed's launcher passes --local_rank=I
        for opt in _LOCAL_RANK_ARGS:
            if a.startswith(opt + "="):
                argv[i] = f"{opt}={local}"
            elif a == opt and i + 1 < len(argv):
                argv[i + 1] = str(local)


class _Spawned:
    """`torch.multiprocessing.spawn`'s function for an executed rank: process i is rank
    `ranks[i]` (picklable: the function is the program's own, by reference)."""

    def __init__(self, fn, ranks):
        self.fn, self.ranks = fn, ranks

    def __call__(self, i, *args):
        os.environ[ENV_RANK] = str(self.ranks[i])
        return self.fn(self.ranks[i], *args)


def install(torch, warn) -> None:
    """The patches a process of a covered job needs once it imports torch (see the module
    docs); `warn(text)` adds a line to the answer."""
    cover = from_env()
    if cover is None:
        return
    _patch_spawn(torch, cover)
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if not dist.is_available():
        return
    _patch_store()
    _patch_groups(cover, warn)


def _patch_spawn(torch, cover: Cover) -> None:
    if os.environ.get("RANK") or os.environ.get(ENV_RANK):
        return  # a rank: its own spawns are not the job's ranks
    import torch.multiprocessing as tmp

    spawn_module = sys.modules["torch.multiprocessing.spawn"]  # the attribute is the function
    orig = spawn_module.start_processes

    def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        if nprocs != cover.world:
            raise RuntimeError(
                f"cachalot capture --world-size {cover.world}: the program spawns {nprocs} "
                f"ranks; make it spawn {cover.world} (e.g. from an argument), or give "
                f"--world-size {nprocs}"
            )
        return orig(_Spawned(fn, cover.ranks), args, len(cover.ranks), join, daemon, start_method)

    spawn_module.start_processes = start_processes
    tmp.start_processes = start_processes


def _patch_store() -> None:
    """Rank 0's store does not wait for N workers to connect: most never will."""
    from torch.distributed import TCPStore

    rdzv = sys.modules["torch.distributed.rendezvous"]  # torch.distributed.rendezvous is a function

    orig = rdzv._create_c10d_store

    def create(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rdzv._agent_store_serves(hostname, port):
            return orig(hostname, port, rank, world_size, timeout, use_libuv)
        return TCPStore(
            host_name=hostname,
            port=port,
            world_size=world_size,
            is_master=rank == 0,
            timeout=timeout,
            wait_for_workers=False,
            multi_tenant=True,
            use_libuv=use_libuv,
        )

    rdzv._create_c10d_store = create


def _patch_groups(cover: Cover, warn) -> None:
    import torch.distributed.distributed_c10d as c10d

    Backend = c10d.Backend
    executed = set(cover.ranks)
    gloo = Backend._plugins.get("GLOO")
    if gloo is not None:

        def create_gloo(opts, backend_opts):
            members = list(opts.global_ranks_in_group or range(cover.world))
            if set(members) <= executed:
                return gloo.creator_fn(opts, backend_opts)
            Backend._ensure_backend_registered("fake")
            with contextlib.suppress(ImportError):
                import torch.testing._internal.distributed.fake_pg  # noqa: F401 - registers it
            warn(
                f"a Gloo process group of {len(members)} ranks, some not executed, ran as torch's "
                "fake process group: its CPU collectives moved no data"
            )
            return Backend._plugins["FAKE"].creator_fn(opts, backend_opts)

        Backend._plugins["GLOO"] = Backend._BackendPlugin(create_gloo, True)

    orig = c10d._new_process_group_helper

    def new_group(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
        members = list(global_ranks_in_group or [])
        by_split = _splits(c10d, backend)
        nccl = "nccl" in str(backend).lower() or str(backend) == Backend.UNDEFINED
        # the group's rank 0 makes its NCCL id and leaves it in the store for the others
        if (
            members
            and group_rank is not None
            and members[0] not in executed
            and nccl
            and not by_split
        ):
            raise RuntimeError(
                f"cachalot capture: rank {members[group_rank]} joins a process group of ranks "
                f"{_ranges(members)} whose first rank {members[0]} is not executed: its NCCL id "
                f"would never come. Add it to --ranks (e.g. --ranks "
                f"{','.join(map(str, sorted(executed | {members[0]})))}), or bind the default "
                "group to the device (init_process_group(device_id=...)) so that groups are split"
            )
        return orig(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)

    c10d._new_process_group_helper = new_group


def _splits(c10d, backend) -> bool:
    """Whether torch makes a new group's communicator by splitting the default group's
    (ncclCommSplit: no id through the store), as torch itself decides it."""
    default = c10d.GroupMember.WORLD
    if default is None:
        return False
    decide = getattr(c10d, "_get_split_source", None)
    if decide is None:  # an older torch: only a default group bound to its device splits
        return getattr(default, "bound_device_id", None) is not None
    try:
        return decide(default, backend) is not None
    except Exception:  # noqa: BLE001 - torch could not tell: assume the store
        return False


def _ranges(ranks: list[int]) -> str:
    """`1-6,8-62`: the ranks as runs."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ",".join(f"{a}-{b}" if b > a + 1 else (f"{a},{b}" if b > a else str(a)) for a, b in runs)


def describe(cover: Cover) -> str:
    """The report's line on which ranks ran and which they stand for."""
    parts = []
    for r in cover.ranks:
        covered = cover.covered(r)
        if covered:
            parts.append(f"rank {r} also stands for {_ranges(covered)}")
    executed = ", ".join(map(str, cover.ranks))
    return (
        f"executed ranks {executed} of {cover.world} ({cover.world // cover.per_node} node(s) of "
        f"{cover.per_node} GPUs); "
        + ("; ".join(parts) or "no rank covered")
        + " (alike by symmetry: same program, equal shares)"
    )
