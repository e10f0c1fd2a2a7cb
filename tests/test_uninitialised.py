"""A verdict never rests on memory nobody wrote (issue 22, item 4).

Graphs return buffers made by ``torch.empty`` that a kernel elsewhere fills. Eager and a
compiling backend hand out different bytes for them; replay must not call that a mismatch.
The backend here (``uninitialised_backends.poisons_empty``) fills them with NaN, as torch's
deterministic mode does, so the difference is certain, not luck of the allocator.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.fx as fx
from torch.fx.passes.split_module import split_module

import graphdbg
from graphdbg.replay.uninitialised import uninitialised_outputs
from graphdbg.store.manifest import find_dumps


def _scratch(x):
    q = torch.empty(x.shape, dtype=torch.uint8)  # quantised output a fused kernel would write
    scale = torch.empty(4, 8).new_empty((3,))  # scratch made from scratch
    y = x * 2
    written = torch.empty_like(x)
    torch.mul(x, 3, out=written)  # written: compared like any output
    return y, q, scale.view(3, 1), written


def _dump(tmp_path, fn, *inputs):
    be = graphdbg.capture(_refuses, dump_dir=tmp_path / "dumps")
    try:
        torch.compile(fn, backend=be)(*inputs)
    except Exception:
        pass
    (path,) = find_dumps(tmp_path / "dumps")
    return path


def _refuses(gm, example_inputs):
    raise RuntimeError("refuses every graph, so that it is dumped")


@pytest.mark.slow
def test_outputs_of_uninitialised_memory_are_named_and_not_compared(tmp_path, cli):
    path = _dump(tmp_path, _scratch, torch.randn(4, 8))
    r = cli("replay", path, "--backend", "uninitialised_backends:poisons_empty", "--json")
    out = json.loads(r.out)
    assert r.code == 0 and out["status"] == "pass", r.out
    (line,) = [s for s in out["stand_ins"] if s.startswith("outputs not compared")]
    assert "1 (q)" in line and "2 (scale)" in line and "3 (" not in line and "0 (" not in line


@pytest.mark.slow
def test_a_written_buffer_is_still_compared(tmp_path, cli):
    def wrong(x):
        buf = torch.empty_like(x)
        buf.copy_(x)
        return buf

    path = _dump(tmp_path, wrong, torch.randn(5))
    # under the poisoning backend the copy still writes every element: the same values, a pass
    r = cli("replay", path, "--backend", "uninitialised_backends:poisons_empty", "--json")
    out = json.loads(r.out)
    assert out["status"] == "pass" and not any(s.startswith("outputs not compared") for s in out["stand_ins"]), r.out


@pytest.mark.slow
def test_a_partly_written_buffer_is_compared_and_its_mismatch_reported(tmp_path, cli):
    """Half written is not "nobody wrote it": the verdict stays a mismatch (the graph reads
    garbage, a real difference between runs), so only outputs of untouched memory are set aside."""
    def half(x):
        buf = torch.empty(8)
        buf[:4].copy_(x)
        return buf

    path = _dump(tmp_path, half, torch.randn(4))
    r = cli("replay", path, "--backend", "uninitialised_backends:poisons_empty", "--json")
    out = json.loads(r.out)
    assert out["status"] == "mismatch", r.out


def test_the_flow_is_followed_through_the_pieces_of_a_split_graph():
    """Thunder-style: a piece allocates and returns the buffer, the outer graph returns it."""
    def f(x):
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
        idx = torch.empty(x.shape[0], dtype=torch.int32)
        y = torch.relu(x)
        idx.copy_(torch.arange(x.shape[0], dtype=torch.int32))  # written in a later piece
        return y, q, idx

    gm = fx.symbolic_trace(f)
    order = [n.name for n in gm.graph.nodes]
    split = split_module(gm, None, lambda n: 0 if order.index(n.name) < order.index("relu") else 1)
    found = uninitialised_outputs(split)
    assert list(found) == [1] and found[1].startswith("submod_0."), found
