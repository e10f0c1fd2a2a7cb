"""A failure that depends on a symbolic size: a compiled kernel with a fixed bound on the
sequence length (tests/helpers/symbolic_backends.py), compiled for a dynamic-shape graph and called
with a longer sequence. Shrinking keeps the sizes symbolic (and the Sym inputs that carry them),
so the failure survives every cut; the saved dump keeps them too, and replays the failure."""

from __future__ import annotations

import json

import pytest
import symbolic_backends as SB
import torch

import graphdbg
from fixtures import programs as P


def _captured_dynamic(tmp_path):
    model, x = P.stack(1, seq=8)
    compiled = torch.compile(model, backend=graphdbg.capture(SB.seq_bounded_softmax, dump_dir=tmp_path / "dumps"),
                             dynamic=True)
    compiled(x)  # 8 <= the kernel's bound: fine
    with pytest.raises(RuntimeError, match="softmax kernel compiled for at most 16"):
        compiled(torch.randn(2, 24, 32))
    torch._dynamo.reset()
    (path,) = [p for p in (tmp_path / "dumps").glob("rank0/*") if "runtime_error" in p.name]
    return path


@pytest.mark.slow
def test_a_symbolic_size_failure_shrinks_to_a_few_nodes_and_stays_symbolic(tmp_path, cli):
    dump = _captured_dynamic(tmp_path)
    assert "Sym(" in (dump / "graph.py").read_text()
    # the call with seq 8 passed, with other sizes: it is no sign of a flaky failure (minify would
    # then run each candidate up to 5 times)
    assert json.loads((dump / "manifest.json").read_text())["failure"]["calls"] == {"passed": 0, "failed": 1}
    r = cli("minify", "--no-self-check", dump, "-o", tmp_path / "min", "--trust-backend", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["final_nodes"] <= 5 < data["start_nodes"], data
    assert data["oracle_queries"] <= 20 and not data["budget_ended"]
    assert "softmax kernel compiled for at most" in data["signature"]
    small = graphdbg.load(data["out"])
    compute = [n for n in small.case().gm.graph.nodes if n.op not in ("placeholder", "output")]
    assert [n.target for n in compute] == ["softmax"]
    source = small.source
    assert 'Sym(s' in source and "f32[s" in source  # the sizes as captured, not 24
    replay = cli("replay", data["out"], "--trust-backend", "--json")
    assert replay.code == 1, replay
    assert json.loads(replay.out)["reproduces"] is True


@pytest.mark.slow
def test_a_repro_of_a_graph_that_passes_a_symbolic_size_to_a_factory_runs(tmp_path, cli):
    """The budget ends before any cut: repro.py holds the whole graph, whose ``torch.ones(s27, s27)``
    takes two size inputs; traced in the repro, that call becomes a node (fx alone raised a TypeError)."""
    dump = _captured_dynamic(tmp_path)
    r = cli("minify", dump, "-o", tmp_path / "min", "--trust-backend", "--max-queries", "1", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["final_nodes"] == data["start_nodes"]
    repro = (tmp_path / "min" / "repro.py").read_text()
    assert "torch.ones(s27, s27" in repro
    assert "checked:" in r.err and "REPRODUCED" in r.err, r.err
