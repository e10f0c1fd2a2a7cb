"""Story 1: a backend that can't handle CUDA streams (Thunder), captured, replayed, minified.

    python examples/story1_thunder_streams.py      # on a CUDA machine with lightning-thunder

SGLang's Qwen3-Next and DeepSeek layers overlap work on an alternate stream. Compiled with
Thunder's ThunderCompiler, such a module fails; this script shows what graphdbg makes of it.
Results go to $OUT/story1.json.
"""

from __future__ import annotations

import shutil
import sys

import _story
import torch

import graphdbg
from fixtures import programs


def main() -> dict:
    from thunder.dynamo import ThunderCompiler

    dump_dir = _story.OUT / "story1_dumps"
    shutil.rmtree(dump_dir, ignore_errors=True)
    result: dict = {}

    def compile_and_run(backend):
        torch._dynamo.reset()
        model, x = programs.two_stream_block()
        try:
            with torch.no_grad():
                torch.compile(model, backend=backend)(x)
            return None
        except Exception as e:  # noqa: BLE001
            return e

    bare = compile_and_run(ThunderCompiler())
    wrapped_backend = graphdbg.capture(ThunderCompiler(), dump_dir=dump_dir)
    wrapped = compile_and_run(wrapped_backend)
    from graphdbg.judge.signature import normalize_message

    # the same type and message; a backend object's address in the message may differ
    result["user_error_unchanged"] = (type(bare) is type(wrapped) and
                                      [normalize_message(ln) for ln in str(bare).splitlines()] ==
                                      [normalize_message(ln) for ln in str(wrapped).splitlines()])
    result["bare_error_first_line"] = str(bare).splitlines()[0] if bare else None
    result["wrapped_error_first_line"] = str(wrapped).splitlines()[0] if wrapped else None
    result["user_error"] = f"{type(wrapped).__name__}: {str(wrapped).splitlines()[1] if wrapped else None}"
    (path,) = wrapped_backend.dumps
    dump = graphdbg.load(path)
    result["dump"] = str(path)
    result["signature"] = dump.signature
    result["nodes"] = dump.node_count
    result["streams"] = [{k: d.get(k) for k in ("index", "type", "device", "priority", "used_by")}
                         for d in dump.manifest_data["external_objects"] if d["kind"] == "stream"]

    code, thunder, secs = _story.graphdbg("replay", path, "--backend", "thunder")
    result["replay_thunder"] = {"exit": code, "status": thunder.get("status"), "signature": thunder.get("signature"),
                                "reproduces": thunder.get("reproduces"), "seconds": round(secs, 1)}
    code, inductor, secs = _story.graphdbg("replay", path, "--backend", "inductor")
    result["replay_inductor"] = {"exit": code, "status": inductor.get("status"), "reference": inductor.get("reference"),
                                 "stand_ins": inductor.get("stand_ins"), "seconds": round(secs, 1)}
    code, mini, secs = _story.graphdbg("minify", path, "--backend", "thunder", "-o", _story.OUT / "story1_min")
    result["minify_thunder"] = {"exit": code, **{k: mini.get(k) for k in ("start_nodes", "final_nodes", "oracle_queries", "cache_hits", "seconds", "out")},
                                "wall_s": round(secs, 1), "error": mini.get("error") or mini.get("stderr")}
    if mini.get("out"):
        try:
            result["minified_graph"] = (graphdbg.load(mini["out"]).source.split("class GraphModule", 1)[-1])[:3000]
        except Exception as e:  # noqa: BLE001
            result["minified_graph"] = f"unreadable: {e}"
    _story.save("story1", result)
    return result


if __name__ == "__main__":
    r = main()
    ok = (r["user_error_unchanged"] and r["replay_thunder"]["reproduces"] and r["replay_inductor"]["status"] == "pass")
    sys.exit(0 if ok else 1)
