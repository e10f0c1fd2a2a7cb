"""Story 2: an add+RMSNorm fusion pass, and a buggy kernel-selection pass after it.

    python examples/story2_fusion_pass.py          # CUDA + flashinfer for the real kernel; runs on CPU too

A Llama-style decoder is captured (mode "always") under Inductor; the dump is then replayed
with the pass pipeline, and graphdbg names the pass and the node that break it.
Results go to $OUT/story2.json.
"""

from __future__ import annotations

import shutil
import sys

import _story
import llama_fusion
import torch

import graphdbg

GOOD = "llama_fusion:fuse_add_rmsnorm@post_grad_pre"
BUGGY = "llama_fusion:use_flashinfer_kernel@post_grad_pre"


def main() -> dict:
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    dump_dir = _story.OUT / "story2_dumps"
    shutil.rmtree(dump_dir, ignore_errors=True)
    model, args = llama_fusion.decoder(device=device, dtype=dtype, layers=2)
    backend = graphdbg.capture("inductor", dump_dir=dump_dir, mode="always")
    with torch.no_grad():
        torch.compile(model, backend=backend)(*args)
    (path,) = backend.dumps
    result: dict = {"device": device, "dtype": str(dtype), "dump": str(path), "nodes": graphdbg.load(path).node_count,
                    "flashinfer": llama_fusion._flashinfer() is not None}

    code, good, secs = _story.graphdbg("replay", path, "--backend", "inductor", "--passes", GOOD)
    result["replay_good"] = {"exit": code, "status": good.get("status"), "signature": good.get("signature"),
                             "stage": good.get("stage"), "seconds": round(secs, 1),
                             "traceback_tail": (good.get("traceback") or "")[-1500:], "stderr_tail": (good.get("stderr_tail") or "")[-1500:],
                             "passes": [{k: p.get(k) for k in ("name", "result", "nodes_before", "nodes_after")} for p in good.get("passes", [])]}
    code, both, secs = _story.graphdbg("replay", path, "--backend", "inductor", "--passes", f"{GOOD},{BUGGY}")
    result["replay_good_buggy"] = {"exit": code, "status": both.get("status"), "signature": both.get("signature"),
                                   "traceback_tail": (both.get("traceback") or "")[-1500:], "max_abs_error": both.get("max_abs_error"),
                                   "mismatches": both.get("mismatches"), "seconds": round(secs, 1)}
    code, bis, secs = _story.graphdbg("bisect", "passes", path, "--backend", "inductor", "--passes", f"{GOOD},{BUGGY}")
    result["bisect_passes"] = {"exit": code, **bis, "wall_s": round(secs, 1)}
    code, nodes, secs = _story.graphdbg("bisect", "nodes", path, "--backend", "inductor", "--passes", f"{GOOD},{BUGGY}")
    result["bisect_nodes"] = {"exit": code, **nodes, "wall_s": round(secs, 1)}
    _story.save("story2", result)
    return result


if __name__ == "__main__":
    r = main()
    ok = r["replay_good"]["status"] == "pass" and r["replay_good_buggy"]["status"] == "mismatch"
    sys.exit(0 if ok else 1)
