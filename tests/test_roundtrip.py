"""Every graph graphdbg writes reads back: capture real model graphs, load every dump, replay it.

``print_readable`` emits statement forms a hand-written graph rarely has: in-place Python
operators (``x += y;  x_1: "f32[3]" = x``), item assignment, aliases. Each model here is
compiled under ``mode="always"``, so every graph Dynamo makes is dumped, then read back with
``graphdbg.load`` and run eagerly on its stored inputs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import graphdbg


class InPlaceOps(nn.Module):
    """The in-place forms seen in ResNet (``x += identity``), T5 (``buckets += where``) and
    Mixtral (``top_value /= sum``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        h = self.lin(x)
        h += x
        top = h.softmax(-1)
        top /= top.sum(-1, keepdim=True)
        buckets = torch.zeros_like(h, dtype=torch.long)
        buckets += (h > 0).long()
        top[0] *= 2
        k = n
        k -= 1
        return top * buckets + k


def _capture_all(model: nn.Module, args: tuple, tmp_path) -> list:
    compiled = torch.compile(model, backend=graphdbg.capture("eager", dump_dir=tmp_path, mode="always"))
    with torch.no_grad():
        expected = model(*args)
        got = compiled(*args)
    torch.testing.assert_close(got, expected)
    dumps = sorted(tmp_path.glob("rank*/*"))
    assert dumps, "nothing was dumped"
    return dumps


def test_in_place_python_operators_read_back_and_replay(tmp_path, cli):
    dumps = _capture_all(InPlaceOps(), (torch.randn(4, 8), 3), tmp_path)
    for path in dumps:
        source = (path / "graph.py").read_text()
        dump = graphdbg.load(path)
        case = dump.case("cpu")
        targets = {str(getattr(n.target, "__name__", n.target)) for n in case.gm.graph.nodes}
        if "+=" in source:
            assert "iadd" in targets
        outcome = case.run("eager")
        assert outcome.status == "pass", outcome.summary()
    assert any("+=" in (p / "graph.py").read_text() for p in dumps)
    r = cli("ls", tmp_path, "--json")
    assert r.code == 0 and not __import__("json").loads(r.out)["problems"], r
    r = cli("replay", dumps[0], "--backend", "eager", "--no-isolate")
    assert r.code == 0, r


def _tiny_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers import (
        BertConfig,
        BertModel,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
        T5Config,
        T5EncoderModel,
    )

    torch.manual_seed(0)
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64)
    return transformers, [
        ("llama", LlamaForCausalLM(LlamaConfig(**small)).eval()),
        ("mixtral", MixtralForCausalLM(MixtralConfig(**small, num_local_experts=4, num_experts_per_tok=2)).eval()),
        ("gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()),
        ("bert", BertModel(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64)).eval()),
        ("t5", T5EncoderModel(T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)).eval()),
    ]


@pytest.mark.slow
def test_tiny_transformers_graphs_read_back(tmp_path):
    _, models = _tiny_transformers()
    ids = torch.randint(0, 64, (1, 8))
    in_place = 0
    for name, model in models:
        torch._dynamo.reset()
        out = tmp_path / name
        compiled = torch.compile(model, backend=graphdbg.capture("eager", dump_dir=out, mode="always"))
        with torch.no_grad():
            compiled(input_ids=ids)
        dumps = sorted(out.glob("rank*/*"))
        assert dumps, name
        for path in dumps:
            in_place += any(op in (path / "graph.py").read_text() for op in ("+=", "/=", "*="))
            outcome = graphdbg.load(path).case("cpu").run("eager")
            assert outcome.status == "pass", (name, path.name, outcome.summary())
    assert in_place, "no model printed an in-place operator: the test no longer covers them"
