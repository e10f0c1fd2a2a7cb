"""OpInfo sweep: every graph Dynamo and AOTAutograd print for PyTorch's own op database loads in
graphdbg and replays eagerly.

    python benchmarks/opinfo_sweep.py                 # the whole op_db (tens of minutes on 2 cores)
    python benchmarks/opinfo_sweep.py --limit 40 --json

Each OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` gives its first
sample input(s) on CPU; the op is compiled with a backend that prints the Dynamo graph
(``print_readable``) and with ``aot_autograd`` whose forward compiler prints the ATen graph. Each
printed graph is written as a file, loaded with ``graphdbg.load`` (parsed, never exec'd), and
replayed under ``eager`` on synthesized inputs. Printed: graphs loaded / traced, graphs replayed,
the ops whose graph graphdbg refused (what the allow-list must never do to a graph Dynamo wrote),
and the graphs that loaded but failed to replay (with why).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any


def _trace(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """[(stage, printed graph)] of Dynamo's graphs and AOTAutograd's forward graphs of ``fn``."""
    import torch
    from torch._dynamo.backends.common import aot_autograd

    out: list[tuple[str, str]] = []

    def dynamo(gm: Any, example_inputs: Any) -> Any:
        out.append(("dynamo", gm.print_readable(print_output=False)))
        return gm.forward

    def forward(gm: Any, example_inputs: Any) -> Any:
        out.append(("aot", gm.print_readable(print_output=False)))
        return gm.forward

    for backend in (dynamo, aot_autograd(fw_compiler=forward)):
        torch._dynamo.reset()
        try:
            torch.compile(fn, backend=backend)(*args, **kwargs)
        except Exception:
            pass  # an op Dynamo can't trace is not graphdbg's to load
    return out


def _refused_name(message: str) -> str:
    m = re.search(r"refusing (?:method call )?`?([^`:( ]+)", message)
    return m.group(1) if m else message[:80]


def sweep(limit: int | None = None, samples: int = 1, names: list[str] | None = None, shard: tuple[int, int] = (0, 1),
          progress: bool = False) -> dict[str, Any]:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import graphdbg
    from graphdbg.errors import GraphdbgError

    torch._dynamo.config.recompile_limit = 1 << 16
    torch._dynamo.config.accumulated_recompile_limit = 1 << 20
    ops = [op for op in op_db if names is None or op.name in names]
    ops = ops[shard[0]::shard[1]][:limit]
    traced = loaded = replayed = 0
    refused: dict[str, list[str]] = collections.defaultdict(list)
    unloadable: dict[str, str] = {}
    failed: dict[str, str] = {}
    seen: set[str] = set()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opinfo-") as tmp:
        for k, op in enumerate(ops):
            dtypes = op.supported_dtypes("cpu")
            dtype = torch.float32 if torch.float32 in dtypes else (sorted(dtypes, key=str)[0] if dtypes else None)
            if dtype is None:
                continue
            try:
                inputs = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]
            except Exception:
                continue
            for j, sample in enumerate(inputs):
                def fn(x: Any, *args: Any, _op: Any = op, _kw: Any = sample.kwargs) -> Any:
                    return _op.op(x, *args, **_kw)

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    graphs = _trace(fn, [sample.input, *sample.args], {})
                for stage, text in graphs:
                    if text in seen:
                        continue
                    seen.add(text)
                    traced += 1
                    label = f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}[{j}] {stage}"
                    path = Path(tmp) / f"rank0_{traced}.py"
                    path.write_text(text)
                    try:
                        dump = graphdbg.load(path)
                        case = dump.case()
                    except GraphdbgError as e:
                        if "refusing" in str(e):
                            refused[_refused_name(str(e))].append(label)
                        else:
                            unloadable[label] = str(e).splitlines()[0][:200]
                        continue
                    loaded += 1
                    try:
                        outcome = case.run("eager", accuracy=False, isolate=False)
                    except GraphdbgError as e:
                        failed[label] = f"GraphdbgError: {str(e)[:160]}"
                        continue
                    if outcome.status == "pass":
                        replayed += 1
                    else:
                        failed[label] = str(outcome.signature)[:200]
            if progress:
                print(f"[{k + 1}/{len(ops)}] {op.name}: traced {traced}, loaded {loaded}, replayed {replayed}",
                      file=sys.stderr, flush=True)
    return {"ops": len(ops), "traced": traced, "loaded": loaded, "replayed": replayed, "refused": dict(refused),
            "unloadable": unloadable, "failed": failed, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N OpInfos (after --shard)")
    parser.add_argument("--samples", type=int, default=1, help="sample inputs per OpInfo")
    parser.add_argument("--ops", default=None, help="comma-separated OpInfo names")
    parser.add_argument("--shard", default="0/1", help="I/N: every N-th OpInfo from the I-th")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    i, n = (int(v) for v in args.shard.split("/"))
    result = sweep(args.limit, args.samples, args.ops.split(",") if args.ops else None, (i, n), progress=not args.json)
    if args.json:
        print(json.dumps(result))
        return
    print(f"OpInfo sweep over {result['ops']} OpInfos: {result['loaded']}/{result['traced']} printed graphs load "
          f"({result['loaded'] / max(result['traced'], 1):.1%}), {result['replayed']}/{result['loaded']} replay eagerly; "
          f"{result['seconds']} s")
    print(f"refused ops: {sorted(result['refused']) or 'none'}")
    for name, labels in sorted(result["refused"].items()):
        print(f"  refused {name}: {', '.join(labels[:5])}")
    for label, why in sorted(result["unloadable"].items()):
        print(f"  not loaded {label}: {why}")
    for label, why in sorted(result["failed"].items()):
        print(f"  replay failed {label}: {why}")


if __name__ == "__main__":
    main()
