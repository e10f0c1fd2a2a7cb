"""One rank of a world replay, as torchrun starts it: ``python -m graphdbg.execution.rank_main REQUEST``.

torchrun sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and the rendezvous address; the request
(written by ``world.replay_world``) says which dump each rank replays, on which device, under
which backend and process-group backend. The rank joins the group, creates the groups the
graph names, replays its own dump in-process with real collectives, and writes its Outcome as
``rank<R>.json`` in the request's folder (its pid and stderr go there too, so the launcher
can end it and show what it printed).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

from graphdbg.errors import GraphdbgError
from graphdbg.formats import load as load_dump


def main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    out = Path(request["out"])
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    err = open(out / f"rank{rank}.stderr", "w")  # noqa: SIM115 - stays open as this process's stderr
    os.dup2(err.fileno(), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    # after stderr is redirected: what torch and its libraries print on import lands in rank<R>.stderr
    import torch
    import torch.distributed as dist

    from graphdbg.rebuild.collectives import use_groups
    from graphdbg.rebuild.stand_ins import install_stand_ins
    from graphdbg.replay.run import run_case

    device = request["devices"][str(local)]
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    # Longer than the launcher's own timeout: a rank waiting on a peer is ended by the launcher
    # (and reads as a timeout), not by gloo's error first.
    dist.init_process_group(request["pg_backend"], timeout=datetime.timedelta(seconds=float(request["timeout"]) + 120))
    try:
        use_groups(request["groups"])
        case = load_dump(request["dumps"][str(rank)]).case(device=device)
        # A dump's case leaves collectives alone once a world is up; missing ops still need
        # their stand-ins, and collectives their real group (a no-op where already installed).
        case.stand_ins += install_stand_ins(case.gm, torch.device(device), zero_uninitialized=False)
        outcome = run_case(case, request["backend"], request["passes"], isolate=False, **request["options"])
        outcome.device = device
        data = outcome.to_dict()
    except GraphdbgError as e:
        data = {"error": str(e)}
    tmp = out / f"rank{rank}.json.part"
    tmp.write_text(json.dumps(data, default=str))
    tmp.rename(out / f"rank{rank}.json")
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a peer gone already; the outcome is written
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
