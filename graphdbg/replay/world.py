"""Replay every rank of a captured world at once, with real collectives.

    >>> world = replay_world("dumps/", backend="inductor", timeout=120)
    >>> [(r.rank, r.outcome.status) for r in world.ranks]
    [(0, 'crash'), (1, 'crash'), (2, 'timeout'), (3, 'crash')]

One process per rank, each loading its own rank's dump, joined in a process group (gloo on
the CPU, NCCL on GPUs) so that the graph's collectives really communicate. Dynamo's default
group is named "0" in every process, so a graph that all-reduces over group "0" finds its peers.
A rank that never returns (stuck in a collective whose peer crashed) becomes a timeout, and
every child is ended before this returns.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphdbg.errors import GraphdbgError
from graphdbg.manifest import find_dumps
from graphdbg.replay.outcome import Outcome


@dataclass
class RankReplay:
    rank: int
    dump: str
    outcome: Outcome

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "dump": self.dump, **self.outcome.to_dict()}


@dataclass
class WorldReplay:
    world_size: int
    graph: str
    backend: str
    device: str
    ranks: list[RankReplay] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return 0 if all(r.outcome.status == "pass" for r in self.ranks) else 1

    def to_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "graph": self.graph, "backend": self.backend, "device": self.device,
                "seconds": self.seconds, "ranks": [r.to_dict() for r in self.ranks]}

    def __rich__(self) -> Any:
        from graphdbg.render import world_table

        return world_table(self)


def _graph_key(path: Path) -> str:
    """'g0-compile_error' from 'g0-compile_error-1a2b3c4d[-1]': the same graph of each rank."""
    m = re.match(r"^(g\d+-[a-z_]+)-", path.name)
    return m.group(1) if m else path.name


def world_dumps(root: str | Path, graph: str | None = None) -> tuple[str, dict[int, Path]]:
    """One dump per rank for one graph; errors name what to choose when that is ambiguous."""
    import graphdbg

    found = find_dumps(Path(root))
    if not found:
        raise GraphdbgError(f"{root}: no graphdbg dumps here")
    keys = sorted({_graph_key(p) for p in found})
    if graph is None:
        if len(keys) > 1:
            raise GraphdbgError(f"{root} holds several graphs ({', '.join(keys)}); choose one with --graph")
        graph = keys[0]
    by_rank: dict[int, Path] = {}
    for p in found:
        if _graph_key(p) != graph and not p.name.startswith(graph):
            continue
        rank = graphdbg.load(p).rank
        if rank in by_rank:
            raise GraphdbgError(f"rank {rank} has two dumps of {graph}: {by_rank[rank]} and {p}")
        by_rank[rank] = p
    if not by_rank:
        raise GraphdbgError(f"{root}: no dumps of graph {graph!r} (graphs here: {', '.join(keys)})")
    return graph, dict(sorted(by_rank.items()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay_world(root: str | Path, backend: str | None = None, passes: str | None = None, *, graph: str | None = None,
                 nproc: int | None = None, device: str | None = None, timeout: float = 300.0, **options: Any) -> WorldReplay:
    import graphdbg

    graph, dumps = world_dumps(root, graph)
    first = graphdbg.load(next(iter(dumps.values())))
    world = first.world_size
    missing = sorted(set(range(world)) - set(dumps))
    if missing:
        raise GraphdbgError(f"{root}: world of {world} ranks, but no dump for rank(s) {missing}; replay one rank instead")
    nproc = nproc or world
    if nproc != world:
        raise GraphdbgError(f"the graph's collectives need all {world} ranks; --nproc {nproc} can't run them "
                            f"(replay one rank alone with: graphdbg replay {dumps[0]})")
    dev_type = torch.device(device).type if device else ("cuda" if first.captured_device.type == "cuda" and torch.cuda.is_available() else "cpu")
    if dev_type == "cuda" and torch.cuda.device_count() < world:
        raise GraphdbgError(f"{world} ranks need {world} GPUs for NCCL, this machine has {torch.cuda.device_count()}; "
                            f"replay one rank alone with: graphdbg replay {dumps[0]} (collectives then act as on a world of one)")
    backend = backend or first.backend
    result = WorldReplay(world_size=world, graph=graph, backend=backend, device=dev_type)
    port = _free_port()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphdbg-world-") as tmp:
        from graphdbg.replay.isolation import ChildGroup, tail_of

        procs: dict[int, tuple[ChildGroup, Path, Path]] = {}
        try:
            for rank, path in dumps.items():
                out = Path(tmp) / f"rank{rank}.json"
                request = {"dump": str(path), "backend": backend, "passes": passes, "rank": rank, "world_size": world,
                           "device": dev_type, "options": options}
                req = Path(tmp) / f"rank{rank}.request.json"
                req.write_text(json.dumps(request))
                env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
                err_path = Path(tmp) / f"rank{rank}.stderr.txt"
                procs[rank] = (ChildGroup([sys.executable, "-m", "graphdbg.replay.world", str(req), str(out)], err_path,
                                          env=env), out, err_path)
            deadline = time.monotonic() + timeout
            for rank, (child, _, _) in procs.items():
                if child.wait(max(0.1, deadline - time.monotonic())) is None:
                    break
        finally:
            for child, _, _ in procs.values():  # end every child still running, whatever happened
                child.kill()
        for rank, (child, out, err_path) in procs.items():
            result.ranks.append(RankReplay(rank, str(dumps[rank]), _rank_outcome(child.proc, out, tail_of(err_path), backend, timeout)))
    result.seconds = time.perf_counter() - started
    return result


def _rank_outcome(proc: subprocess.Popen, out: Path, err: str, backend: str, timeout: float) -> Outcome:
    from graphdbg.replay.isolation import child_outcome

    if not out.exists() and proc.returncode == -signal.SIGKILL:  # ended by us when the world's time ran out
        return Outcome(status="timeout", backend=backend, stage="child", signature=f"Timeout after {timeout:g}s",
                       message="still running when the world's time ran out (a collective waiting for a peer?)",
                       isolated=True, stderr_tail=(err or "")[-3000:])
    return child_outcome(proc.returncode, out, err or "", backend, None)


def _child(request_path: str, outcome_path: str) -> int:
    """One rank: join the group, replay this rank's dump in-process, write the Outcome."""
    import torch.distributed as dist

    import graphdbg
    from graphdbg.errors import GraphdbgError
    from graphdbg.replay.run import run_case

    from graphdbg.replay.child import die_with_parent

    die_with_parent()
    request = json.loads(Path(request_path).read_text())
    rank, world = request["rank"], request["world_size"]
    if request["device"] == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device, pg_backend = f"cuda:{rank % torch.cuda.device_count()}", "nccl"
    else:
        device, pg_backend = "cpu", "gloo"
    dist.init_process_group(pg_backend, rank=rank, world_size=world)
    try:
        case = graphdbg.load(request["dump"]).case(device=device)
        data = run_case(case, request["backend"], request["passes"], isolate=False, **request["options"]).to_dict()
    except GraphdbgError as e:
        data = {"error": str(e)}
    Path(outcome_path).write_text(json.dumps(data, default=str))
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
