"""Story 3: an attention backend that is silently wrong, caught by accuracy-mode capture.

    python examples/story3_int8_attention.py       # CUDA or CPU

The serving engine's compile backend swaps SDPA for an int8 attention op that forgets to
rescale its scores. Nothing raises; accuracy-mode capture notices that the compiled outputs
disagree with eager and writes a dump. Results go to $OUT/story3.json.
"""

from __future__ import annotations

import shutil
import sys

import _story
import int8_attention
import llama_fusion
import torch

import graphdbg

SELECT = "int8_attention:select_int8_attention"


def main() -> dict:
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    dump_dir = _story.OUT / "story3_dumps"
    shutil.rmtree(dump_dir, ignore_errors=True)
    model, args = llama_fusion.decoder(device=device, dtype=dtype, layers=2)
    backend = graphdbg.capture(int8_attention.inductor_with_int8_attention, dump_dir=dump_dir, mode="accuracy")
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(*args)
    result: dict = {"device": device, "dtype": str(dtype), "user_saw_an_error": False,
                    "output_finite": bool(torch.isfinite(out).all()), "dumps": [str(p) for p in backend.dumps]}
    (path,) = backend.dumps
    dump = graphdbg.load(path)
    result["captured"] = {"kind": dump.failure_kind, "message": dump.message}

    code, own, secs = _story.graphdbg("replay", path, "--trust-backend")
    result["replay_own_backend"] = {"exit": code, "status": own.get("status"), "mismatches": own.get("mismatches"), "seconds": round(secs, 1)}
    code, ind, secs = _story.graphdbg("replay", path, "--backend", "inductor", "--passes", SELECT)
    result["replay_inductor_with_selection"] = {"exit": code, "status": ind.get("status"), "max_abs_error": ind.get("max_abs_error"),
                                                "mismatches": ind.get("mismatches"), "seconds": round(secs, 1)}
    code, plain, secs = _story.graphdbg("replay", path, "--backend", "inductor")
    result["replay_plain_inductor"] = {"exit": code, "status": plain.get("status"), "seconds": round(secs, 1)}
    code, nodes, secs = _story.graphdbg("bisect", "nodes", path, "--backend", "inductor", "--passes", SELECT)
    result["bisect_nodes"] = {"exit": code, **nodes, "wall_s": round(secs, 1)}
    _story.save("story3", result)
    return result


if __name__ == "__main__":
    r = main()
    ok = r["captured"]["kind"] == "accuracy" and r["replay_own_backend"]["status"] == "mismatch"
    sys.exit(0 if ok else 1)
