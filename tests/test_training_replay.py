"""Training as users run it (issue 39): a forward replayed then its backward reaches the
failure the capture saw, under the caller's autocast (with regions disabled inside), with
symbolic sizes and ``.item()`` reads, and only the backward named when only it is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphdbg
from fixtures.training import backward_crash_backend, silu_gradient_backend


def _only_dump(root: Path) -> Path:
    found = sorted(p.parent for p in root.glob("rank*/*/manifest.json"))
    assert len(found) == 1, found
    return found[0]


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


class RotaryLM(nn.Module):
    """A causal LM in miniature, as Llama/Qwen2 lay it out: RMSNorm, attention with rotary
    position embeddings computed with autocast off (as transformers does), a temperature-scaled
    head. Under ``dynamic=True`` Dynamo reads the float temperature with ``.item()`` in the graph."""

    def __init__(self, vocab: int = 32, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.RMSNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        half = dim // heads // 2
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(half).float() / half)))
        self.head = nn.Linear(dim, vocab)

    def rotary(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(t, device=self.inv_freq.device).float()
        with torch.autocast(device_type="cpu", enabled=False):
            freqs = torch.outer(pos, self.inv_freq.float())
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos(), emb.sin()

    def forward(self, idx: torch.Tensor, temperature: float) -> torch.Tensor:
        b, t = idx.shape
        x = self.emb(idx)
        q, k, v = self.qkv(self.norm(x)).split(x.shape[-1], -1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        cos, sin = self.rotary(t)

        def rotate(z: torch.Tensor) -> torch.Tensor:
            a, c = z.chunk(2, -1)
            return z * cos + torch.cat((-c, a), -1) * sin

        a = F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return self.head(x) / temperature


@pytest.mark.slow
def test_rotary_lm_under_autocast_with_dynamic_shapes_replays_forward_then_backward(tmp_path, cli):
    torch.manual_seed(0)
    model, idx = RotaryLM(), torch.randint(0, 32, (2, 8))
    compiled = torch.compile(model, backend=graphdbg.capture(backward_crash_backend, tmp_path / "dumps"), dynamic=True)
    with pytest.raises(RuntimeError, match="backward kernel failed"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(idx, 0.7).float().flatten(0, 1), idx.flatten())
        loss.backward()

    dump = _only_dump(tmp_path / "dumps")
    fw = _manifest(dump / "forward")
    assert fw["autocast"] == {"cpu": "bfloat16"}  # the caller's region, around the compiled call
    assert "dynamo.capture_scalar_outputs" not in fw.get("config", {}).get("values", {})
    source = (dump / "forward" / "graph.py").read_text()
    assert ".item()" in source and "_enter_autocast('cpu', None, False, None)" in source and "Sym(" in source

    # rebuilt, the graph computes in the dtypes it was captured in
    case = graphdbg.load(dump / "forward").case()
    assert case.gm(*case.inputs)[0].dtype == torch.bfloat16

    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    assert r.code == 1, r
    out = json.loads(r.out)
    assert out["stage"] == "backward" and out["reproduces"], out
    assert out["error_type"] == "RuntimeError" and "re-trace" not in " ".join(out["stand_ins"])
    # a backend whose backward works passes, outputs and gradients judged
    r = cli("replay", dump / "forward", "--backward", "--backend", "aot_eager", "--no-isolate", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r


class NormSiLUNet(nn.Module):
    """Linear, GroupNorm (computed with autocast off, in float32) and SiLU, as a UNet block has them."""

    def __init__(self):
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(8, 16), nn.GroupNorm(4, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        with torch.autocast("cpu", enabled=False):
            h = self.norm(h.float())
        return self.out(F.silu(h))


@pytest.mark.slow
def test_wrong_silu_derivative_under_autocast_replays_as_a_backward_failure(tmp_path, cli):
    torch.manual_seed(0)
    model, x = NormSiLUNet(), torch.randn(6, 8)
    compiled = torch.compile(model, backend=graphdbg.capture(silu_gradient_backend, tmp_path / "dumps", mode="accuracy"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(x)
    assert out.dtype == torch.bfloat16
    out.float().square().mean().backward()

    dump = _only_dump(tmp_path / "dumps")
    captured = _manifest(dump)["failure"]["mismatches"]
    # every gradient behind the SiLU is off: the first Linear's and GroupNorm's (its bias too)
    inputs = [d["node"] for d in _manifest(dump / "forward")["inputs"]]
    behind = [i for i, n in enumerate(inputs) if "_inp_" in n or "_norm_" in n]
    assert [m["index"] for m in captured] == behind and len(behind) == 4, (captured, inputs)

    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    assert r.code == 1, r
    got = json.loads(r.out)
    assert got["stage"] == "backward" and got["reproduces"], got
    # the forward's outputs match (dtype and values): only gradients differ
    assert {m["what"] for m in got["mismatches"]} == {"gradient"}
    assert sorted(m["index"] for m in got["mismatches"]) == sorted(m["index"] for m in captured)


class CastSandwich(nn.Module):
    """A low-precision autocast region opened in the model, a region with autocast off inside it
    (a norm in float32), more of the region after it, and a float32 head outside it: only the
    head's output is float32, and only a run that left no region open computes it so."""

    def __init__(self):
        super().__init__()
        self.inp, self.mid, self.head = nn.Linear(8, 16), nn.Linear(16, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype):
            h = self.inp(x)
            with torch.autocast("cpu", enabled=False):
                h = F.layer_norm(h.float(), (16,))
            h = self.mid(F.silu(h))
        return self.head(h.float())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_wrong_backward_under_nested_autocast_regions_is_found_in_the_backward(tmp_path, cli, dtype):
    """The float64 reference fails inside the regions (``h.float()`` meets a float64 weight); that
    must not leave a region open for the compiled forward, whose float32 head would then compute
    in ``dtype`` and make the forward look wrong (``output 0: dtype float32 vs bfloat16``)."""
    torch.manual_seed(0)
    model, x = CastSandwich(), torch.randn(6, 8)
    compiled = torch.compile(model, backend=graphdbg.capture(silu_gradient_backend, tmp_path / "dumps", mode="accuracy"))
    out = compiled(x, dtype)
    assert out.dtype == torch.float32
    out.square().mean().backward()
    dump = _only_dump(tmp_path / "dumps")

    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--json")
    assert r.code == 1, r
    got = json.loads(r.out)
    assert got["stage"] == "backward" and got["reproduces"], got
    assert {m["what"] for m in got["mismatches"]} == {"gradient"}, got["mismatches"]
    assert not torch.is_autocast_enabled("cpu")


def test_dynamo_retraces_autocast_regions_as_the_backend_first_got_them(tmp_path):
    """Replay's re-trace hands the backend a graph's nested regions as Dynamo handed them at
    capture: ``_enter_autocast``/``_exit_autocast`` nodes (torch 2.13 made them
    ``set_autocast_enabled`` calls; torch 2.11 asserted that the global autocast state changed
    while it traced). The outputs keep each region's dtype, and no region stays open."""
    from graphdbg.graph.autocast import retraceable

    enter, leave = torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    half = g.call_function(enter, ("cpu", torch.bfloat16, True, None))
    y = g.call_function(torch.matmul, (x, w))
    off = g.call_function(enter, ("cpu", None, False, None))
    z = g.call_function(torch.matmul, (g.call_method("float", (y,)), w))
    g.call_function(leave, (off,))
    u = g.call_function(torch.matmul, (z, w))
    g.call_function(leave, (half,))
    g.output((g.call_function(torch.matmul, (g.call_method("float", (u,)), w)), y, z, u))
    gm = torch.fx.GraphModule(nn.Module(), g)
    xv, wv = torch.randn(4, 4), torch.randn(4, 4)
    eager = gm(xv, wv)

    got = []

    def backend(graph, example_inputs):
        got.append(graph)
        return graph.forward

    out = torch.compile(retraceable(gm), backend=backend)(xv, wv)
    assert [t.dtype for t in out] == [t.dtype for t in eager] == [torch.float32, torch.bfloat16, torch.float32, torch.bfloat16]
    assert not torch.is_autocast_enabled("cpu")
    targets = [n.target for n in got[0].graph.nodes if n.op == "call_function"]
    assert targets.count(enter) == 2 and targets.count(leave) == 2, got[0].code
