"""The child side of an isolated replay: python -m graphdbg.replay.child REQUEST OUTCOME."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(request_path: str, outcome_path: str) -> int:
    from graphdbg.errors import GraphdbgError

    request = json.loads(Path(request_path).read_text())
    try:
        import graphdbg
        from graphdbg.replay.run import run_case

        case = graphdbg.load(request["dump"]).case(device=request["device"])
        outcome = run_case(case, request["backend"], request["passes"], isolate=False, **request["options"])
        data = outcome.to_dict()
    except GraphdbgError as e:
        data = {"error": str(e)}
    except Exception as e:  # the replay could not even start here (an import, a device): say what
        import traceback

        from graphdbg.replay.outcome import Outcome
        from graphdbg.signature import signature

        data = Outcome(status="crash", backend=str(request["backend"]), stage="child", error_type=type(e).__name__,
                       message=str(e), signature=signature(type(e).__name__, str(e)), device=request["device"],
                       traceback="".join(traceback.format_exception(type(e), e, e.__traceback__))[-8000:]).to_dict()
    Path(outcome_path).write_text(json.dumps(data, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
