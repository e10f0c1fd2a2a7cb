"""Replay every printed graph of a corpus under eager, then the failing Qwen3-Next graphs under
Thunder and Inductor, and report per group of files.

    python examples/corpus_replay.py [FOLDER] [--device cuda] [--seed 0] [--backends thunder,inductor]

FOLDER defaults to fixtures/sglang-thunderfx (the bundled corpus). For each printed GraphModule file:
load it (parsed, never executed), synthesize inputs on the device, install stand-ins, and
replay it under ``eager`` (re-traced by Dynamo, as graphdbg replays everything). Files are
grouped as ``graphdbg ls`` groups them (same graph on every rank up to rank literals); the
table shows per group the outcome counts and the stand-ins used, then a total
("N of M graphs ran under eager"). Then every ``graph_module_*.py`` of Qwen3-Next-80B is
replayed under each of ``--backends`` in a child process (a crash or hang of the backend
becomes an outcome), and each group's outcomes and signatures are printed.

With $OUT set, a JSON summary goes to $OUT/corpus_replay.json.
On a CPU-only machine, files whose inputs exceed --max-input-gb (default 2 on the CPU) are
skipped and counted as such: their many-GB KV caches would be copied several times.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import graphdbg  # noqa: E402
from graphdbg.errors import GraphdbgError  # noqa: E402
from graphdbg.formats.printed_graph import SEED_ENV  # noqa: E402
from graphdbg.listing import list_dumps  # noqa: E402

DEFAULT = ROOT / "fixtures" / "sglang-thunderfx"
FAILING_MODEL = "Qwen3-Next-80B-A3B-Instruct"


def input_bytes(dump) -> int:
    from graphdbg.store.specs import dtype_from_name

    total = 0
    for d in dump.manifest_data["inputs"]:
        if d["kind"] == "tensor" and all(isinstance(x, int) for x in d["shape"]):
            total += math.prod(d["shape"]) * dtype_from_name(d["dtype"]).itemsize
    return total


def replay_eager(path: str, device: str, seed: int, max_bytes: int | None) -> dict:
    row = {"path": path, "status": None, "signature": None, "stand_ins": [], "seconds": None}
    started = time.perf_counter()
    try:
        dump = graphdbg.load(path)
        if max_bytes is not None and input_bytes(dump) > max_bytes:
            row.update(status="skipped", signature=f"inputs {input_bytes(dump) / (1 << 30):.1f} GiB > --max-input-gb")
            return row
        case = dump.case(device, seed=seed)
        # eager against eager needs no accuracy check; it would copy every input twice more
        outcome = case.run("eager", accuracy=False)
        row.update(status=outcome.status, signature=outcome.signature, stand_ins=outcome.stand_ins)
        del case
    except GraphdbgError as e:
        row.update(status="error", signature=f"GraphdbgError: {e}")
    except Exception as e:  # a graphdbg bug: keep going, but say so
        row.update(status="error", signature=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                   traceback=traceback.format_exc()[-3000:])
    finally:
        row["seconds"] = round(time.perf_counter() - started, 2)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return row


def stand_in_summary(rows: list[dict]) -> list[str]:
    """Distinct stand-ins over a group's files: kind and what (synthesized inputs counted)."""
    seen: dict[str, None] = {}
    synthesized = 0
    for row in rows:
        for s in row["stand_ins"]:
            name, _, rest = s.partition(": ")
            kind, _, detail = rest.partition(" (")
            if kind == "synthesized":
                synthesized += 1
                continue
            what = detail.split(" is not on this machine")[0].split(":")[0].split("(")[0].strip()
            seen.setdefault(f"{kind}: {what}" if what else kind)
    out = list(seen)
    if synthesized:
        out.insert(0, f"synthesized inputs ({synthesized} over {len(rows)} files)")
    return out


def group_label(g: dict, root: Path) -> str:
    graphs = ",".join(map(str, g.get("graphs") or [])) or Path(g["paths"][0]).name
    return f"{g['model']} graph {graphs}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="thunder,inductor", help="for the Qwen3-Next graph_module files; empty to skip")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per isolated backend replay")
    parser.add_argument("--max-input-gb", type=float, default=None,
                        help="skip files with more input bytes (default: no limit on a GPU, 2 on the CPU)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N files (a quick check)")
    args = parser.parse_args()
    max_gb = args.max_input_gb if args.max_input_gb is not None else (None if args.device.startswith("cuda") else 2.0)
    max_bytes = int(max_gb * (1 << 30)) if max_gb is not None else None
    os.environ[SEED_ENV] = str(args.seed)  # the isolated children synthesize the same inputs

    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name(0)})" if args.device.startswith("cuda") else ""), flush=True)
    listing = list_dumps(args.folder)
    for p in listing.problems:
        print(f"could not read {p['path']}: {p['error']}")
    groups = [g for g in listing.groups if g.get("format") == "printed_graph"]
    paths = [p for g in groups for p in g["paths"]][: args.limit]

    # 1. every graph under eager ---------------------------------------------------
    rows: dict[str, dict] = {}
    for i, path in enumerate(paths, 1):
        rows[path] = replay_eager(path, args.device, args.seed, max_bytes)
        r = rows[path]
        print(f"[{i}/{len(paths)}] {os.path.relpath(path, args.folder)}: {r['status']} {r['signature'] or ''} ({r['seconds']} s)", flush=True)

    summary_groups = []
    print("\n== eager replays, per group")
    print(f"{'group':58} {'files':>5} {'ranks':12} {'outcomes':28} stand-ins")
    for g in groups:
        members = [rows[p] for p in g["paths"] if p in rows]
        if not members:
            continue
        counts = collections.Counter(r["status"] for r in members)
        failures = collections.Counter(r["signature"] for r in members if r["status"] not in ("pass", "skipped"))
        entry = {"group": group_label(g, args.folder), "model": g["model"], "graphs": g.get("graphs"), "files": g["files"],
                 "ranks": g["ranks"], "outcomes": dict(counts), "failures": dict(failures),
                 "constructs": g.get("constructs", []), "stand_ins": stand_in_summary(members)}
        summary_groups.append(entry)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        ranks = ",".join(map(str, sorted(set(g["ranks"]))))
        print(f"{entry['group'][:58]:58} {len(members):>5} {ranks:12} {outcomes:28} {'; '.join(entry['stand_ins'])}")
        for sig, n in failures.items():
            print(f"{'':58} {'':>5} {'':12} {n} x {sig}")
    ran = sum(1 for r in rows.values() if r["status"] == "pass")
    skipped = sum(1 for r in rows.values() if r["status"] == "skipped")
    print(f"\n{ran} of {len(rows)} graphs ran under eager on {args.device}"
          + (f" ({skipped} skipped: inputs over {max_gb:g} GiB)" if skipped else ""))

    # 2. the failing model under real backends ---------------------------------------
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    backend_results = []
    if backends:
        from graphdbg.execution.entry import replay_dump

        failing = [g for g in groups if g["model"] == FAILING_MODEL and any(Path(p).name.startswith("graph_module_") for p in g["paths"])]
        print(f"\n== {FAILING_MODEL} graph_module files under {', '.join(backends)} (isolated, seed {args.seed})")
        for g in failing:
            for backend in backends:
                outcomes = []
                for path in g["paths"]:
                    dump = graphdbg.load(path)
                    if max_bytes is not None and input_bytes(dump) > max_bytes:
                        outcomes.append({"path": path, "status": "skipped", "signature": None, "stage": None})
                        continue
                    started = time.perf_counter()
                    try:
                        o = replay_dump(dump, backend, device=args.device, isolate=True, timeout=args.timeout)
                        outcomes.append({"path": path, "status": o.status, "signature": o.signature, "stage": o.stage,
                                         "node": o.node_target, "message": (o.message or "")[:500],
                                         "stand_ins": o.stand_ins, "seconds": round(time.perf_counter() - started, 1)})
                    except GraphdbgError as e:
                        outcomes.append({"path": path, "status": "unavailable", "signature": str(e), "stage": None})
                    last = outcomes[-1]
                    print(f"  {backend:9} {Path(path).name}: {last['status']} {last['signature'] or ''}"
                          + (f" [stage {last['stage']}]" if last.get("stage") else ""), flush=True)
                    if last["status"] == "unavailable":
                        break  # the backend can't be imported here: no point trying every file
                by_outcome = collections.Counter((o["status"], o["signature"]) for o in outcomes)
                entry = {"group": group_label(g, args.folder), "files": g["files"], "ranks": g["ranks"], "backend": backend,
                         "outcomes": [{"status": s, "signature": sig, "count": n} for (s, sig), n in by_outcome.items()],
                         "runs": outcomes}
                backend_results.append(entry)
                print(f"{entry['group']} ({len(g['files'])} files, ranks {','.join(map(str, sorted(set(g['ranks']))))}) under {backend}:")
                for (status, sig), n in by_outcome.items():
                    print(f"    {n} x {status}: {sig or ''}")

    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        summary = {"graphdbg": graphdbg.__version__, "torch": torch.__version__, "device": args.device,
                   "device_name": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
                   "folder": str(args.folder), "seed": args.seed, "ran_under_eager": ran, "graphs": len(rows),
                   "skipped": skipped, "groups": summary_groups, "files": list(rows.values()), "backends": backend_results}
        (Path(out) / "corpus_replay.json").write_text(json.dumps(summary, indent=1, default=str))
        print(f"\nwrote {Path(out) / 'corpus_replay.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
