"""Replay every rank of a captured world at once, with real collectives, launched by torchrun.

    >>> world = replay_world("dumps/", "inductor", ReplayOptions(timeout=120))
    >>> [(r.rank, r.device, r.outcome.status) for r in world.ranks], world.pg_backend
    ([(0, 'cuda:0', 'crash'), (1, 'cuda:1', 'crash'), (2, 'cuda:0', 'timeout'), (3, 'cuda:1', 'crash')], 'gloo')

``torch.distributed.run`` (elastic, restarts off) starts one process per rank on this node
(``rank_main``); rendezvous, process-group teardown and exit codes are torch's. Each rank
loads its own rank's dump, or its own file of a printed graph, joins the process group and
replays with real collectives (``rebuild.collectives``), and writes its Outcome as JSON into a
folder this process reads back.

- **Devices.** Ranks spread round-robin over the GPUs given (``gpus``, default all), or all
  run on the CPU. One GPU per rank gets NCCL; ranks that share a device get gloo, which runs
  the common collectives on CUDA tensors too. The map is in the result.
- **Memory.** The inputs of the ranks that share a device must fit in its free memory, or
  the replay is refused before it starts, naming the largest world that fits.
- **Several nodes.** The same call on each node with ``nnodes``, ``node_rank`` and
  ``master_addr`` (passed to torchrun, static rendezvous); each node reports its own ranks.
- **Timeouts.** A rank without an outcome when the time is up (stuck in a collective whose
  peer hangs) is a ``timeout``, and every rank process is killed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphdbg.dump import natural_key
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.execution.isolation import child_outcome
from graphdbg.execution.sandbox import child_path, python_command
from graphdbg.formats import load as load_dump
from graphdbg.outcome import Outcome
from graphdbg.rebuild.inputs import symbol_env
from graphdbg.rebuild.memory_budget import free_bytes as free_on
from graphdbg.replay.options import ReplayOptions
from graphdbg.store.manifest import find_dumps
from graphdbg.store.safe_files import read_child_file
from graphdbg.store.specs import TensorSpec

DEFAULT_MASTER_PORT = 29500  # torchrun's own default
KILL_GRACE_S = 20.0
EXIT_WAIT_S = 20.0  # torchrun's time to exit after this node's ranks all wrote their outcomes


@dataclass
class RankReplay:
    rank: int
    dump: str
    outcome: Outcome
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "dump": self.dump, **self.outcome.to_dict(), "device": self.device}


@dataclass
class WorldReplay:
    world_size: int
    graph: str
    backend: str
    device: str  # cpu | cuda
    pg_backend: str = "gloo"
    devices: dict[int, str] = field(default_factory=dict)  # rank -> device, for this node's ranks
    nnodes: int = 1
    node_rank: int = 0
    ranks: list[RankReplay] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 0 if all(r.outcome.status == "pass" for r in self.ranks) else 1

    def to_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "graph": self.graph, "backend": self.backend, "device": self.device,
                "pg_backend": self.pg_backend, "devices": {str(r): d for r, d in self.devices.items()},
                "nnodes": self.nnodes, "node_rank": self.node_rank, "seconds": self.seconds,
                "ranks": [r.to_dict() for r in self.ranks]}

    def __rich__(self) -> Any:
        from graphdbg.ui.render import world_table  # upward, declared in ARCHITECTURE.md

        return world_table(self)


# Which files make the world ----------------------------------------------------------------

_DUMP_NAME = re.compile(r"^(g\d+(?:\.\d+)*(?:-backward)?)-([a-z_]+)-")


def graph_key(path: Path) -> str:
    """The same graph of every rank, whatever each rank's failure: 'g0' from
    'g0-compile_error-1a2b3c4d[-1]', 'g0.2' from a piece's 'g0.2-captured-...', 'g0-backward'
    from a backward dump, 'g0-backward/forward' from the forward kept inside it."""
    if path.name == "forward" and _DUMP_NAME.match(path.parent.name):
        return graph_key(path.parent) + "/forward"
    m = _DUMP_NAME.match(path.name)
    return m.group(1) if m else path.name


def is_captured(path: Path) -> bool:
    """A dump that ``mode="always"`` wrote of a graph that did not fail there (its folder says so)."""
    name = path.parent.name if path.name == "forward" else path.name
    m = _DUMP_NAME.match(name)
    return bool(m) and m.group(2) == "captured"


def rank_dumps(found: list[Path], graph: str) -> dict[int, Path]:
    """Each rank's dump of ``graph`` (a key, or the start of a dump's name): the failure where
    a rank has one, else what ``mode="always"`` captured of that graph there, so that ranks on
    which it did not fail take part too."""
    chosen: dict[int, list[Path]] = {}
    for p in found:
        if graph_key(p) == graph or p.name.startswith(graph) and p.name != "forward":
            chosen.setdefault(load_dump(p).rank, []).append(p)
    by_rank: dict[int, Path] = {}
    for rank, paths in sorted(chosen.items()):
        failures = [p for p in paths if not is_captured(p)] or paths
        if len(failures) > 1:
            raise GraphdbgError(f"rank {rank} has two dumps of {graph}: {failures[0]} and {failures[1]}; "
                                f"choose one with --graph {failures[1].name}")
        by_rank[rank] = failures[0]
    return by_rank


def world_dumps(root: str | Path, graph: str | None = None) -> tuple[str, dict[int, Path]]:
    """One dump per rank for one graph: dump folders, else the files of one printed graph.

        >>> world_dumps("corpus/Qwen3-0.6B", graph="9")
        ('Qwen3-0.6B/9', {0: PosixPath('.../rank0_9.py'), 1: ..., 2: ..., 3: ...})
        >>> world_dumps("dumps/", graph="g0-backward")   # rank 1 failed; rank 0 met the failure in a collective
        ('g0-backward', {0: PosixPath('dumps/rank0/g0-backward-runtime_error-570cad3b'), 1: ...})
    """
    found = find_dumps(Path(root)) if Path(root).is_dir() else []
    if not found:
        return _printed_world(Path(root), graph)
    keys = sorted({graph_key(p) for p in found}, key=natural_key)
    if graph is None:
        if len(keys) > 1:
            raise GraphdbgError(f"{root} holds several graphs ({', '.join(keys)}); choose one with --graph")
        graph = keys[0]
    by_rank = rank_dumps(found, graph)
    if not by_rank:
        raise GraphdbgError(f"{root}: no dumps of graph {graph!r} (graphs here: {', '.join(keys)})")
    return graph, by_rank


def printed_worlds(root: Path) -> dict[str, dict[int, Any]]:
    """Printed graph files under ``root`` by graph: ``'<model>/<graph number>'`` (from the
    ``# Rank: R, Graph G`` header, else ``rank<R>_<G>.py``, else the masked graph hash) -> rank
    -> its Dump. A rank whose file of that graph differs from the others is still in it: that is what to debug."""
    from graphdbg.listing import list_dumps  # upward, declared in ARCHITECTURE.md: the world's files as ls lists them

    worlds: dict[str, dict[int, Any]] = {}
    for d in list_dumps(root).dumps:
        if d.failure_kind != "printed_graph":
            continue
        printed = d.manifest.printed
        number = printed.graph_number
        if number is None:  # no header: SGLang's file name, else the graph itself (Dynamo's graph_module_<pid>.py)
            m = re.fullmatch(r"rank\d+_(\d+)", d.path.stem)
            number = m.group(1) if m else (printed.group_hash or "")[:8]
        worlds.setdefault(f"{printed.model}/{number}", {}).setdefault(d.rank, d)
    return worlds


def _printed_world(root: Path, graph: str | None) -> tuple[str, dict[int, Path]]:
    worlds = {k: v for k, v in printed_worlds(root).items() if len(v) > 1 or graph is not None}
    if not worlds:
        raise GraphdbgError(f"{root}: no dumps here, and no printed graph with files of several ranks")
    if graph is not None:
        wanted = graph.removeprefix("g")
        chosen = [k for k in worlds if k == graph or k.rsplit("/", 1)[1] == wanted]
        if len(chosen) != 1:
            raise GraphdbgError(f"{root}: {'no' if not chosen else 'several'} printed graphs match --graph {graph} "
                                f"(graphs here: {', '.join(sorted(worlds, key=natural_key))})")
        key = chosen[0]
    elif len(worlds) > 1:
        raise GraphdbgError(f"{root} holds several printed graphs ({', '.join(sorted(worlds, key=natural_key))}); choose one with --graph")
    else:
        key = next(iter(worlds))
    return key, {r: d.path for r, d in sorted(worlds[key].items())}



# Where each rank runs ------------------------------------------------------------------

@dataclass
class Placement:
    devices: dict[int, str]  # global rank -> device
    pg_backend: str
    device_type: str


def place_ranks(ranks: list[int], device: str | None, *, gpus: int | None = None, pg_backend: str | None = None,
                captured_cuda: bool = False) -> Placement:
    """Ranks to devices, round-robin, and the process-group backend that allows that map.

        >>> place_ranks([0, 1, 2, 3], "cuda", gpus=2).devices
        {0: 'cuda:0', 1: 'cuda:1', 2: 'cuda:0', 3: 'cuda:1'}
    """
    try:
        dev = torch.device(device) if device else torch.device("cuda" if captured_cuda and torch.cuda.is_available() else "cpu")
    except RuntimeError:
        raise GraphdbgError(f"{device!r} is not a device") from None
    if dev.type == "cpu":
        if gpus:
            raise GraphdbgError("--gpus needs a CUDA device (--device cuda)")
        devices = {r: "cpu" for r in ranks}
    elif dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise GraphdbgError(f"device {dev} is not available on this machine (no CUDA GPU)")
        if dev.index is not None:
            if dev.index >= count:
                raise GraphdbgError(f"device {dev} is not available on this machine ({count} GPUs)")
            pool = [dev.index]
        else:
            if gpus is not None and not 1 <= gpus <= count:
                raise GraphdbgError(f"--gpus {gpus}: this machine has {count} GPUs")
            pool = list(range(min(gpus or count, len(ranks))))
        devices = {r: f"cuda:{pool[i % len(pool)]}" for i, r in enumerate(ranks)}
    else:
        raise GraphdbgError(f"device {dev} is not supported for replay")
    shared = len(set(devices.values())) < len(devices)
    chosen = pg_backend or ("nccl" if dev.type == "cuda" and not shared else "gloo")
    if chosen not in ("gloo", "nccl"):
        raise GraphdbgError(f"--pg-backend {chosen}: use gloo or nccl")
    if chosen == "nccl" and (dev.type != "cuda" or shared):
        raise GraphdbgError(f"NCCL needs one GPU per rank; here {len(devices)} ranks share "
                            f"{len(set(devices.values()))} {'GPUs' if dev.type == 'cuda' else 'CPU'}: use --pg-backend gloo")
    return Placement(devices, chosen, dev.type)


def input_bytes(dump: Any) -> int:
    """The bytes of a dump's tensor inputs (and stored attributes), from the manifest alone."""
    descs = dump.manifest_data.get("inputs", [])
    env = symbol_env(descs)
    total = 0
    for d in [*descs, *dump.manifest_data.get("attrs", {}).values()]:
        if d.get("kind") == "tensor" and "shape" in d:
            try:
                total += TensorSpec.from_dict(d).nbytes(env)
            except Exception:
                continue  # a size symbol without a hint: nothing to count
    return total


def free_bytes(device: str) -> int:
    """What ``device`` has free now (``rebuild.memory_budget.free_bytes``: CUDA's own count, or
    the host's MemAvailable); on a host without /proc/meminfo, its available pages."""
    free = free_on(torch.device(device))
    if free is not None:
        return free
    if device.startswith("cuda"):
        raise GraphdbgError(f"cannot read the free memory of {device}")
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_memory(need: dict[int, int], placement: Placement, limit: int | None = None) -> None:
    """Refuse, with the largest world that fits, when the ranks sharing a device can't all hold
    their inputs in its free memory (or in ``limit`` bytes per device)."""
    pool = list(dict.fromkeys(placement.devices.values()))
    free = {d: limit if limit is not None else free_bytes(d) for d in pool}

    def overflow(k: int) -> tuple[str, int] | None:
        used: dict[str, int] = {}
        for i, rank in enumerate(sorted(need)[:k]):
            dev = pool[i % len(pool)]
            used[dev] = used.get(dev, 0) + need[rank]
        return next(((d, u) for d, u in used.items() if u > free[d]), None)

    worst = overflow(len(need))
    if worst is None:
        return
    fits = next((k for k in range(len(need) - 1, 0, -1) if overflow(k) is None), 0)
    dev, used = worst
    sharing = sum(1 for d in placement.devices.values() if d == dev)
    raise GraphdbgError(f"the inputs of the {sharing} ranks on {dev} need {_gib(used)}, it has {_gib(free[dev])} free; "
                        f"the largest world that fits is {fits} rank{'s' if fits != 1 else ''} on "
                        f"{len(pool)} device{'s' if len(pool) != 1 else ''} (add GPUs with --gpus, or replay one rank alone)")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 24 else f"{n / 1024:.1f} KiB"


# The launch --------------------------------------------------------------------------
WORLD_TIMEOUT = 300.0  # seconds all ranks together may take, unless told

def replay_world(root: str | Path, backend: str | None = None, opts: ReplayOptions = ReplayOptions(), *,
                 graph: str | None = None, nproc: int | None = None, gpus: int | None = None,
                 pg_backend: str | None = None, nnodes: int = 1, node_rank: int = 0, master_addr: str | None = None,
                 master_port: int | None = None, max_memory: int | None = None,
                 announce: Callable[[str], None] | None = None) -> WorldReplay:
    """Replay every rank of one graph under ``root``; this node's ranks come back as rows.
    ``opts``: its passes, device, timeout (default 300 s) and how each rank judges.

    ``announce`` receives, on a multi-node replay, the command each other node runs.
    """
    device, timeout = opts.device, opts.timeout or WORLD_TIMEOUT
    graph, paths = world_dumps(root, graph)
    dumps = {r: load_dump(p) for r, p in paths.items()}
    first = next(iter(dumps.values()))
    world = first.world_size
    missing = sorted(set(range(world)) - set(dumps))
    if missing:
        raise GraphdbgError(f"{root}: world of {world} ranks, but no dump for rank(s) {missing}; replay one rank instead")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise GraphdbgError(f"--node-rank {node_rank} is not a node of --nnodes {nnodes}")
    if world % nnodes:
        raise GraphdbgError(f"{world} ranks don't split evenly over {nnodes} nodes")
    per_node = world // nnodes
    if nproc is not None and nproc != per_node:
        raise GraphdbgError(f"the graph's collectives need all {world} ranks; --nproc {nproc} can't run them "
                            f"(replay one rank alone with: graphdbg replay {paths[min(paths)]})")
    if nnodes > 1 and not master_addr:
        raise GraphdbgError(f"--nnodes {nnodes} needs --master-addr (the host of node 0)")
    mine = list(range(node_rank * per_node, (node_rank + 1) * per_node))  # torchrun's static rendezvous order
    placement = place_ranks(mine, device, gpus=gpus, pg_backend=pg_backend,
                            captured_cuda=any(d.captured_device.type == "cuda" for d in dumps.values()))
    check_memory({r: input_bytes(dumps[r]) for r in mine}, placement, max_memory)
    backend = backend or first.backend
    port = master_port or DEFAULT_MASTER_PORT
    if nnodes > 1 and announce is not None:
        others = [n for n in range(nnodes) if n != node_rank]
        which = str(others[0]) if len(others) == 1 else "R"
        where = f"node {others[0]}" if len(others) == 1 else f"each other node R ({', '.join(map(str, others))})"
        announce(f"on {where}, run: " + other_node_command(sys.argv, port, placement.pg_backend, which))
    result = WorldReplay(world_size=world, graph=graph, backend=backend, device=placement.device_type,
                         pg_backend=placement.pg_backend, devices=placement.devices, nnodes=nnodes, node_rank=node_rank)
    groups = [g for d in dumps.values() for g in d.manifest.dist.collectives or []]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphdbg-world-", ignore_cleanup_errors=True) as tmp:
        out = Path(tmp)
        request = {"dumps": {str(r): str(p) for r, p in paths.items()}, "backend": backend, "passes": opts.passes,
                   "options": opts.for_child(), "devices": {str(i): placement.devices[r] for i, r in enumerate(mine)},
                   "pg_backend": placement.pg_backend, "groups": groups, "timeout": timeout, "out": str(out)}
        (out / "request.json").write_text(json.dumps(request))
        launch = python_command("torch.distributed.run", "--nproc-per-node", str(per_node), "--max-restarts", "0",
                                "--monitor-interval", "0.2")
        if nnodes == 1 and not master_addr:
            launch += ["--standalone"]  # torchrun picks the port: two replays on one host don't collide
        else:
            launch += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", master_addr or "127.0.0.1",
                       "--master-port", str(port)]
        # each rank is an isolated interpreter too (python -I: nothing from the folder it runs in)
        launch += ["--no-python", *python_command("graphdbg.execution.rank_main", str(out / "request.json"))]
        exit_codes, timed_out, launcher_err = _run_torchrun(launch, out, mine, timeout, child_path([backend, opts.passes]))
        for r in mine:
            result.ranks.append(RankReplay(r, str(paths[r]), _rank_outcome(r, out, exit_codes, timed_out, launcher_err,
                                                                           backend, timeout), placement.devices[r]))
    result.seconds = time.perf_counter() - started
    return result


def other_node_command(argv: list[str], port: int, pg_backend: str, node_rank: str = "R") -> str:
    """This command line as another node runs it: its own ``--node-rank``, and the port and
    process-group backend pinned so that every node agrees."""
    args = list(argv[1:])
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in ("--node-rank", "--master-port", "--pg-backend"):
            skip = "=" not in a
            continue
        out.append(a)
    return shlex.join(["graphdbg", *out]) + f" --master-port {port} --pg-backend {pg_backend} --node-rank {node_rank}"


def _run_torchrun(cmd: list[str], out: Path, ranks: list[int], timeout: float,
                  env: dict[str, str] | None = None) -> tuple[dict[int, int], bool, str]:
    """Run torchrun until every rank is done or the time is up; then nothing of it is left running.
    Returns torch's exit code per failed rank, whether time ran out, and torchrun's stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    timed_out = False
    try:
        err = _wait_for_torchrun(proc, out, ranks, timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        # Ranks are session leaders (torch starts them so): end each group, then torchrun.
        for r in ranks:
            if not (out / f"rank{r}.json").exists():
                _kill_group(out / f"rank{r}.pid")
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            for r in ranks:
                _kill_group(out / f"rank{r}.pid")
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
    return _failed_ranks(err or ""), timed_out, err or ""


def _wait_for_torchrun(proc: subprocess.Popen, out: Path, ranks: list[int], timeout: float) -> str:
    """torchrun's stderr once it exits; TimeoutExpired after ``timeout``. Once every rank of this
    node has written its outcome, torchrun gets ``EXIT_WAIT_S`` more, then SIGTERM: with several
    nodes, its agent can wait out torch elastic's exit barrier (300 s) for a node whose torchrun
    has already gone (seen with two nodes on one host: node 1 done in 7 s, node 0 in 262 s)."""
    deadline = time.monotonic() + timeout
    all_done_at = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        try:
            return proc.communicate(timeout=min(1.0, deadline - now))[1] or ""
        except subprocess.TimeoutExpired:
            pass
        if all_done_at is None and all((out / f"rank{r}.json").exists() for r in ranks):
            all_done_at = time.monotonic()
        if all_done_at is not None and time.monotonic() - all_done_at > EXIT_WAIT_S:
            proc.send_signal(signal.SIGTERM)  # the agent only; its ranks have exited
            return proc.communicate(timeout=KILL_GRACE_S)[1] or ""


def _kill_group(pid_file: Path) -> None:
    try:
        os.killpg(int(read_child_file(pid_file, max_bytes=64)), signal.SIGKILL)
    except (OSError, ValueError, DumpError):
        pass  # not started yet, or gone already: torchrun's own teardown covers it


_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def _failed_ranks(stderr: str) -> dict[int, int]:
    """Rank -> exit code, from torchrun's failure report (ChildFailedError's table)."""
    return {int(r): int(code) for r, code in _FAILURE.findall(stderr)}


def _rank_outcome(rank: int, out: Path, exit_codes: dict[int, int], timed_out: bool, launcher_err: str, backend: str,
                  timeout: float) -> Outcome:
    err_file = out / f"rank{rank}.stderr"
    try:  # through the gate: a rank may have swapped its stderr file for a FIFO
        err = read_child_file(err_file, max_bytes=12000, tail=True).decode("utf-8", errors="replace")
    except DumpError:
        err = ""
    outcome_file = out / f"rank{rank}.json"
    if not outcome_file.exists() and timed_out:
        return Outcome(status="timeout", backend=backend, stage="child", signature=f"Timeout after {timeout:g}s",
                       message="still running when the world's time ran out (a collective waiting for a peer?)",
                       isolated=True, stderr_tail=err[-3000:] or None)
    # torchrun ends the other ranks with SIGTERM once one fails; under load its report lists them too
    first = {r: c for r, c in exit_codes.items() if c != -signal.SIGTERM}
    if not outcome_file.exists() and (rank not in exit_codes or rank not in first and first):
        # torch reports the ranks that failed first and ends the rest; or the rank never started
        failed = sorted(first)
        why = (f"ended by torchrun after rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} failed" if failed
               else "torchrun ended without starting it: " + ((launcher_err.strip().splitlines() or ["no message"])[-1]))
        return Outcome(status="crash", backend=backend, stage="child", error_type="TorchrunEnded",
                       signature="TorchrunEnded: " + ("a peer failed" if failed else "never started"), message=why,
                       isolated=True, stderr_tail=(err or launcher_err)[-3000:] or None)
    return child_outcome(exit_codes.get(rank, 0), outcome_file, err, backend, None)
