"""Exploration on the GPU machine: what Thunder and Inductor do with streams, and real CUDA dumps."""
import os
import shutil
import traceback
from pathlib import Path

import torch

import graphdbg
from fixtures import programs

out = Path(os.environ.get("OUT", "/tmp/out"))
print("torch", torch.__version__, torch.cuda.get_device_name(0))
dumps = out / "dumps"

def attempt(name, backend, model_and_input, mode="error"):
    torch._dynamo.reset()
    model, x = model_and_input
    be = graphdbg.capture(backend, dump_dir=dumps / name, mode=mode)
    try:
        with torch.no_grad():
            torch.compile(model, backend=be)(x)
        print(f"== {name}: no error", flush=True)
    except Exception as e:
        print(f"== {name}: USER SAW {type(e).__name__}: {str(e)[:600]}", flush=True)
    print("dumps:", [str(p) for p in be.dumps])
    for p in be.dumps:
        d = graphdbg.load(p)
        print(" ext:", d.manifest_data["external_objects"])
        print(" graph:\n", d.source[:3000])
        for b in ("eager", "inductor", "thunder"):
            try:
                o = graphdbg.load(p).case().run(b)
                print(f" replay {b}: {o.status} {o.signature} stage={o.stage} stand_ins={o.stand_ins}", flush=True)
            except Exception as e:
                print(f" replay {b}: ERROR {type(e).__name__}: {e}", flush=True)
                traceback.print_exc()

try:
    from thunder.dynamo import ThunderCompiler
    attempt("thunder_streams", ThunderCompiler(), programs.two_stream_block())
except Exception as e:
    print("thunder import failed", e)
attempt("always_streams", "eager", programs.two_stream_block(), mode="always")
attempt("cuda_block_runtime", programs.broken_transpose_backend, tuple(t.cuda() if isinstance(t, torch.Tensor) else t.cuda() for t in programs.tiny_block()))
shutil.make_archive(str(out / "dumps"), "gztar", dumps)
