"""The failure you had is the failure you get back: user programs on tiny transformers models,
each compiled with a backend that fails one way, run under ``graphdbg capture``; then every dump
written is replayed, minified (its repro.py run in a fresh interpreter, from another folder, with
no graphdbg on the path) and exported as a pytest test (which must fail).

    python benchmarks/fidelity.py                       # every scenario, three at a time
    python benchmarks/fidelity.py --only bert_refuses_gelu --only segfault
    python benchmarks/fidelity.py --json > fidelity.json

Programs: tests/helpers/real_programs.py (OPT, Qwen2, ViT, GPT-NeoX; the scenarios tests/test_same_failure.py
runs) and benchmarks/fidelity_programs.py (BERT, T5, Whisper's encoder). Per dump:

- captured: the signature ``graphdbg ls --json`` reads from the dump, and whether the user saw it
  (its message in the captured program's stderr, or its signal as the program's death);
- replay: ``replay DUMP --trust-backend --json``: its signature equals the captured one? (exit code);
- minify: ``minify DUMP --trust-backend -o OUT --json --max-queries 60``: start -> final nodes;
- repro: OUT/repro.py in a fresh interpreter: exit code, and whether its first line is
  ``REPRODUCED: <captured signature>`` (otherwise the line it printed is shown);
- export-test: ``export-test DUMP -o test_x.py --trust-backend``, then pytest on it: it must fail
  (exit 1) and name the captured message.

The last line is the ratio of dumps whose replayed signature equals the captured one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "helpers" / "real_programs.py"
NEW = ROOT / "benchmarks" / "fidelity_programs.py"
TIMEOUT = 400.0


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    kind: str
    program: Path
    arg: str


SCENARIOS = [
    Scenario("bert_refuses_gelu", "BERT", "forward compile error (fw refuses gelu)", NEW, "bert_refuses_gelu"),
    Scenario("t5_rsqrt_fails_when_run", "T5", "forward run-time error (rsqrt graph)", NEW, "t5_rsqrt_fails_when_run"),
    Scenario("whisper_refuses_attention_backward", "Whisper encoder", "backward compile error (bw refuses SDPA backward)",
             NEW, "whisper_refuses_attention_backward"),
    Scenario("forward", "OPT", "forward compile error (fw refuses relu)", REAL, "forward"),
    Scenario("backward_compile", "OPT", "backward compile error (bw refuses threshold_backward)", REAL, "backward_compile"),
    Scenario("backward_run", "OPT", "backward run-time error", REAL, "backward_run"),
    Scenario("nested", "OPT", "nested aot_autograd, fw refuses relu", REAL, "nested"),
    Scenario("segfault", "Qwen2", "compiled code segfaults (script backend)", REAL, "segfault"),
    Scenario("vit_training_step", "ViT", "backward compile error (bw refuses gelu_backward)", REAL, "vit_training_step"),
    Scenario("neox_training_step", "GPT-NeoX", "boxed backward fails at run time", REAL, "neox_training_step"),
]


def _env(graphdbg_on_path: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRAPHDBG_DUMP_DIR")}
    if graphdbg_on_path:
        env["PYTHONPATH"] = str(ROOT)
    return env


def _run(args: list[Any], cwd: Path, graphdbg_on_path: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(graphdbg_on_path), capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        proc = subprocess.CompletedProcess(e.cmd, 124, _text(e.stdout), _text(e.stderr) + f"\n(timed out after {TIMEOUT}s)")
    return proc, time.perf_counter() - start


def _text(b: Any) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def _cli(*args: Any, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    return _run([sys.executable, "-m", "graphdbg.ui.cli", *args], cwd)


def _json(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {}


def _user_saw(signature: str, message: str, capture: subprocess.CompletedProcess) -> bool:
    """The captured failure is the one the user's program met: its message in the program's stderr,
    or, for a signal, the program's death by it."""
    if signature.startswith("Signal "):
        return capture.returncode == -getattr(signal, signature.split()[1], 0)
    return bool(message) and message in capture.stderr


def replay(dump: Path, want: str, work: Path) -> dict[str, Any]:
    proc, wall = _cli("replay", dump, "--trust-backend", "--json", cwd=work)
    out = _json(proc)
    return {"exit": proc.returncode, "signature": out.get("signature"), "stage": out.get("stage"),
            "same": out.get("signature") == want, "s": round(wall, 1),
            **({} if out else {"error": (proc.stderr or proc.stdout)[-800:]})}


def minify_and_repro(dump: Path, want: str, out_dir: Path, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    proc, wall = _cli("minify", dump, "--trust-backend", "-o", out_dir, "--json", "--max-queries", "60", cwd=work)
    out = _json(proc)
    minify = {"exit": proc.returncode, "start_nodes": out.get("start_nodes"), "final_nodes": out.get("final_nodes"),
              "queries": out.get("oracle_queries"), "signature": out.get("signature"), "s": round(wall, 1),
              **({} if out else {"error": (proc.stderr or proc.stdout)[-800:]})}
    repro_py = out_dir / "repro.py"
    if not repro_py.exists():
        return minify, {"exit": None, "reproduced": False, "says_reproduced": False, "line": "(no repro.py written)"}
    elsewhere = Path(tempfile.mkdtemp(dir=work, prefix="elsewhere-"))
    run, wall = _run([sys.executable, repro_py], elsewhere, graphdbg_on_path=False)  # torch only
    first = (run.stdout.strip().splitlines() or [""])[0]
    return minify, {"exit": run.returncode, "reproduced": first == "REPRODUCED: " + want,
                    "says_reproduced": first.startswith("REPRODUCED"), "line": first[:200],
                    "s": round(wall, 1), **({} if first else {"stderr": run.stderr[-800:]})}


def export_test(dump: Path, message: str, test_file: Path, work: Path) -> dict[str, Any]:
    proc, wall = _cli("export-test", dump, "-o", test_file, "--trust-backend", cwd=work)
    if proc.returncode != 0:
        return {"export_exit": proc.returncode, "fails": False, "error": (proc.stderr or proc.stdout)[-800:]}
    elsewhere = Path(tempfile.mkdtemp(dir=work, prefix="pytest-"))
    test, twall = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file], elsewhere)
    said = bool(message) and message in test.stdout
    return {"export_exit": 0, "pytest_exit": test.returncode, "fails": test.returncode == 1, "names_message": said,
            "s": round(wall + twall, 1), **({} if test.returncode == 1 else {"tail": test.stdout[-800:]})}


def one_dump(entry: dict[str, Any], index: int, capture: subprocess.CompletedProcess, work: Path) -> dict[str, Any]:
    dump, want, message = Path(entry["path"]), entry.get("signature") or "", entry.get("message") or ""
    if not dump.is_absolute():
        dump = work / dump
    row: dict[str, Any] = {"dump": dump.relative_to(work).as_posix(), "kind": entry.get("kind"), "captured": want,
                           "parent": entry.get("parent"), "user_saw_it": _user_saw(want, message, capture)}
    row["replay"] = replay(dump, want, work)
    row["minify"], row["repro"] = minify_and_repro(dump, want, work / f"min{index}", work)
    row["export_test"] = export_test(dump, message, work / f"et{index}" / f"test_{scenario_slug(dump)}.py", work)
    return row


def scenario_slug(dump: Path) -> str:
    return "".join(c if c.isalnum() else "_" for c in dump.name)


def run_scenario(sc: Scenario, base: Path) -> dict[str, Any]:
    work = base / sc.name
    work.mkdir(parents=True)
    capture, wall = _cli("capture", "-o", work / "dumps", "--", sys.executable, sc.program, sc.arg, cwd=work)
    listed, _ = _cli("ls", work / "dumps", "--json", cwd=work)
    entries = _json(listed).get("dumps", [])
    result: dict[str, Any] = {"scenario": sc.name, "family": sc.family, "failure": sc.kind, "capture_exit": capture.returncode,
                              "capture_s": round(wall, 1), "dumps": []}
    if not entries:
        result["error"] = "no dump written: " + capture.stderr[-1500:]
    for i, entry in enumerate(entries):
        result["dumps"].append(one_dump(entry, i, capture, work))
    (work / "result.json").write_text(json.dumps(result, indent=1))  # kept with --keep, should a long run be cut short
    print(f"fidelity: {sc.name} done ({len(entries)} dump(s))", file=sys.stderr, flush=True)
    return result


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def _saw(result: dict[str, Any], dump: dict[str, Any]) -> str:
    if dump["user_saw_it"]:
        return "yes"
    # tests/helpers/real_programs.py's OPT scenarios catch the error and print its frames: nothing to compare
    return "n/a (program caught it)" if result["capture_exit"] == 0 else "NO"


def table(results: list[dict[str, Any]]) -> str:
    head = ("| scenario | model family | failure kind | dump | captured signature | user saw it | replays same (exit) "
            "| minified to (nodes) | repro exit | export-test fails |")
    lines = [head, "|" + " --- |" * head.count(" | ") + " --- |"]
    for r in results:
        if not r["dumps"]:
            lines.append(f"| {r['scenario']} | {r['family']} | {r['failure']} | - | (no dump: {r.get('error', '')[-120:]!r}) "
                         "| - | - | - | - | - |")
        for d in r["dumps"]:
            rp, mn, rr, et = d["replay"], d["minify"], d["repro"], d["export_test"]
            got = "" if rp["same"] else f"; got {rp['signature']!r}"
            nodes = f"{mn['start_nodes']} -> {mn['final_nodes']}" if mn.get("final_nodes") is not None else f"failed (exit {mn['exit']})"
            repro = f"{rr['exit']} ({'REPRODUCED, same signature' if rr['reproduced'] else 'other line: ' + repr(rr['line'][:90])})"
            fails = (f"{_mark(et['fails'])} (pytest exit {et.get('pytest_exit')})" if "pytest_exit" in et
                     else f"NO (export exit {et['export_exit']})")
            lines.append(f"| {r['scenario']} | {r['family']} | {r['failure']} | {d['dump']} | {d['captured']} "
                         f"| {_saw(r, d)} | {_mark(rp['same'])} ({rp['exit']}{got}) | {nodes} | {repro} | {fails} |")
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    dumps = [d for r in results for d in r["dumps"]]
    same = sum(d["replay"]["same"] for d in dumps)
    return {"dumps": len(dumps), "replayed_same": same, "ratio": round(same / len(dumps), 3) if dumps else None,
            "repro_reproduced": sum(d["repro"]["reproduced"] for d in dumps),
            "export_test_fails": sum(d["export_test"]["fails"] for d in dumps),
            "scenarios_without_dump": [r["scenario"] for r in results if not r["dumps"]]}


def _summary_line(total: dict[str, Any]) -> str:
    return (f"captured == replayed: {total['replayed_same']}/{total['dumps']} dumps (ratio {total['ratio']}); "
            f"repro REPRODUCED {total['repro_reproduced']}/{total['dumps']}; exported test fails "
            f"{total['export_test_fails']}/{total['dumps']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=[s.name for s in SCENARIOS], help="run this scenario (repeatable)")
    ap.add_argument("--jobs", type=int, default=3, help="scenarios run at once (default 3)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    ap.add_argument("--json-out", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary folder, removed)")
    ap.add_argument("--render", type=Path, help="print the table of a --keep folder's result.json files, run nothing")
    args = ap.parse_args(argv)
    if args.render:
        results = [json.loads(p.read_text()) for p in sorted(args.render.glob("*/result.json"))]
        order = [s.name for s in SCENARIOS]
        results.sort(key=lambda r: order.index(r["scenario"]))
        total = summary(results)
        print(table(results) + "\n\n" + _summary_line(total))
        return 0
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    base = args.keep or Path(tempfile.mkdtemp(prefix="graphdbg-fidelity-"))
    base.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda sc: run_scenario(sc, base.resolve()), chosen))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    total = summary(results)
    total["wall_s"] = round(time.perf_counter() - start, 1)
    if args.json_out:
        args.json_out.write_text(json.dumps({"results": results, "summary": total}, indent=1))
    if args.json:
        print(json.dumps({"results": results, "summary": total}, indent=1))
    else:
        print(table(results))
        print("\n" + _summary_line(total) + f"; {total['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
