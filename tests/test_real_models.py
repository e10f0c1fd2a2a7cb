"""Real (tiny) models through capture, replay, minify and repro: the failures issue 16 found.

Models are built from configs with random weights (transformers, pinned as a dev dependency);
nothing is downloaded. timm can't be installed beside this torch build, so the ResNet case is
a plain-torch ``x += identity`` block.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from conftest import child_env

import graphdbg

ROOT = Path(__file__).resolve().parent.parent


def _dumps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("rank*/*") if p.is_dir())


def _tiny_llama(dropout: float = 0.0):
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        attention_dropout=dropout))


# --- no false dumps ---------------------------------------------------------------------------
def _scales(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.full_like(x, s) * x + x.clamp(max=s)  # a float Dynamo tensorifies, then restarts on


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_dynamo_restart_is_not_a_failure(tmp_path, backend):
    wrapped = graphdbg.capture(backend, dump_dir=tmp_path)
    compiled = torch.compile(_scales, backend=wrapped, dynamic=True)
    x = torch.randn(4, 8)
    for s in (0.5, 1.5, 2.5):
        torch.testing.assert_close(compiled(x, s), _scales(x, s))
    assert wrapped.dumps == [] and _dumps(tmp_path) == []


def test_restart_passes_through_the_wrapper_untouched(tmp_path):
    seen = []

    def spy(gm, example_inputs):
        try:
            return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
        except Exception as e:
            seen.append(type(e).__name__)
            raise

    compiled = torch.compile(_scales, backend=graphdbg.capture(spy, dump_dir=tmp_path), dynamic=True)
    compiled(torch.randn(4, 8), 0.5)
    assert "TensorifyScalarRestartAnalysis" in seen  # the restart did go through the wrapper
    assert _dumps(tmp_path) == []


@pytest.mark.slow
def test_accuracy_mode_keeps_dropout_draws_and_the_users_loss(tmp_path):
    model = _tiny_llama(dropout=0.3).train()
    ids = torch.randint(0, 64, (2, 8))

    def loss_of(backend) -> list[float]:
        torch._dynamo.reset()
        torch.manual_seed(1)
        fn = torch.compile(model, backend=backend)
        losses = [float(fn(input_ids=ids, labels=ids).loss) for _ in range(2)]
        losses.append(float(torch.rand(())))  # what the program draws next is unchanged too
        return losses

    plain = loss_of("eager")
    wrapped = graphdbg.capture("eager", dump_dir=tmp_path, mode="accuracy")
    assert loss_of(wrapped) == plain
    assert wrapped.dumps == [] and _dumps(tmp_path) == []


# --- integer outputs ----------------------------------------------------------------------------
def _tiny_gpt2():
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()


class NextToken(nn.Module):
    """Greedy decoding's step: the argmax of a causal LM's last logits."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids).logits[:, -1].argmax(-1)


@pytest.mark.slow
def test_argmax_off_by_one_is_dumped_replayed_and_minified(tmp_path, cli, monkeypatch):
    from model_backends import argmax_off_by_one

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "helpers"))
    model = NextToken(_tiny_gpt2())
    ids = torch.randint(0, 64, (3, 8))
    wrapped = graphdbg.capture(argmax_off_by_one, dump_dir=tmp_path / "dumps", mode="accuracy")
    with torch.no_grad():
        torch.compile(model, backend=wrapped)(ids)
    [dump] = _dumps(tmp_path / "dumps")
    failure = json.loads((dump / "manifest.json").read_text())["failure"]
    assert failure["kind"] == "accuracy"
    [m] = failure["mismatches"]
    assert m["differing"] >= 1 and m["at"] and m["max_rel_error"] is None
    assert "must be exact" in failure["message"]

    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1, r
    assert json.loads(r.out)["mismatches"][0]["differing"] == m["differing"]

    r = cli("minify", "--no-self-check", dump, "--trust-backend", "--out", tmp_path / "min", "--json")
    assert r.code == 0, r
    result = json.loads(r.out)
    before, after = result["start_nodes"], result["final_nodes"]
    assert after < before, result
    r = subprocess.run([sys.executable, str(tmp_path / "min" / "repro.py")], capture_output=True, text=True,
                       env=child_env(tests=True))
    assert r.returncode == 1 and "REPRODUCED" in r.stdout, (r.stdout, r.stderr[-2000:])


# --- crash-safe capture ---------------------------------------------------------------------------
_DIES = textwrap.dedent("""
    import sys, torch, graphdbg
    sys.path[:0] = [{helpers!r}, {tests!r}]
    import model_backends
    from test_real_models import ResidualBlock
    torch.manual_seed(0)
    block = ResidualBlock()
    backend = graphdbg.capture(getattr(model_backends, sys.argv[1]), dump_dir=sys.argv[2])
    with torch.no_grad():
        torch.compile(block, backend=backend)(torch.randn(2, 8, 6, 6))
    print("survived")
""")


class ResidualBlock(nn.Module):
    """ResNet's basic block, with its ``x += identity`` (timm's resnet18 can't be installed here)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        out += identity
        return out.relu()


@pytest.mark.slow
@pytest.mark.parametrize("backend, sig", [("aborts_when_called", "SIGABRT"), ("segfaults_when_called", "SIGSEGV")])
def test_a_process_killed_by_a_signal_leaves_a_crash_dump(tmp_path, cli, backend, sig):
    program = tmp_path / "dies.py"
    program.write_text(_DIES.format(helpers=str(ROOT / "tests" / "helpers"), tests=str(ROOT / "tests")))
    r = subprocess.run([sys.executable, str(program), backend, str(tmp_path / "dumps")], capture_output=True, text=True,
                       timeout=300, env=child_env())
    assert r.returncode < 0 and "survived" not in r.stdout, (r.returncode, r.stderr[-2000:])
    [dump] = _dumps(tmp_path / "dumps")
    assert dump.name.startswith("g0-crash-")
    d = graphdbg.load(dump)
    assert (d.failure_kind, d.signature) == ("crash", f"Signal {sig}")
    assert "run" in d.manifest_data["failure"]["exception"]["traceback"]  # faulthandler's Python stack
    r = cli("ls", tmp_path / "dumps", "--json")
    assert r.code == 0 and json.loads(r.out)["groups"][0]["kind"] == "crash", r
    r = cli("replay", dump, "--trust-backend", "--json")  # isolated: the replay child dies the same way
    assert r.code == 1 and json.loads(r.out)["reproduces"], r


def test_armed_dump_is_removed_when_the_call_returns(tmp_path):
    block = ResidualBlock()
    wrapped = graphdbg.capture("eager", dump_dir=tmp_path)
    with torch.no_grad():
        out = torch.compile(block, backend=wrapped)(torch.randn(2, 8, 6, 6))
    assert out.shape == (2, 8, 6, 6)
    assert wrapped.dumps == [] and list(tmp_path.glob("rank*/*")) == []


# --- which graph is which -------------------------------------------------------------------------
def _hidden(out):
    """A GPT-2 block's hidden states: the first of its tuple (transformers 4.x), or the tensor itself (newer)."""
    return out[0] if isinstance(out, tuple) else out


class BrokenBlocks(nn.Module):
    """Eleven GPT-2 blocks with a graph break after each: one graph per block (g0 ... g10), from resume frames."""

    def __init__(self, h: nn.ModuleList) -> None:
        super().__init__()
        self.h = h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # written out: Dynamo skips a whole frame whose loop holds a graph break
        x = _hidden(self.h[0](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[1](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[2](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[3](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[4](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[5](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[6](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[7](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[8](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[9](x))
        torch._dynamo.graph_break()
        x = _hidden(self.h[10](x))
        torch._dynamo.graph_break()
        return x


@pytest.mark.slow
def test_ls_names_frame_compile_id_and_blocks_in_natural_order(tmp_path, cli):
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    blocks = GPT2Model(GPT2Config(vocab_size=64, n_embd=32, n_layer=11, n_head=4, n_positions=64)).eval().h
    with torch.no_grad():
        torch.compile(BrokenBlocks(blocks), backend=graphdbg.capture("eager", dump_dir=tmp_path, mode="always"))(torch.randn(1, 8, 32))
    r = cli("ls", tmp_path, "--json")
    assert r.code == 0, r
    groups = json.loads(r.out)["groups"]
    ids = [g["id"].split("-")[0] for g in groups]
    assert ids[:3] == ["g0", "g1", "g2"] and ids[-1] == "g10", ids
    assert groups[0]["frame"].startswith("forward (test_real_models.py:") and groups[0]["compile_id"] == "0/0"
    assert groups[-1]["frame"].startswith("torch_dynamo_resume_in_") and groups[-1]["compile_id"] != "0/0"
    assert [m for g in groups for m in g["modules"]] == [f"h.{i}" for i in range(11)]
    r = cli("ls", tmp_path)
    assert "forward (test_real_models.py:" in r.out and "h.10" in r.out, r

    # the same graph captured by a second run: one row, both members' blocks listed
    with torch.no_grad():
        torch._dynamo.reset()
        torch.compile(BrokenBlocks(blocks), backend=graphdbg.capture("eager", dump_dir=tmp_path, mode="always"))(torch.randn(1, 8, 32))
    groups = json.loads(cli("ls", tmp_path, "--json").out)["groups"]
    assert all(len(g["paths"]) == 2 and g["modules"] == [g["modules"][0]] * 2 for g in groups)
    assert len(groups) == 11


# --- repros and exit codes --------------------------------------------------------------------------
def _run_repro(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, timeout=600,
                          env=child_env(tests=True))


@pytest.mark.slow
def test_inductor_compile_error_has_one_signature_in_capture_replay_and_repro(tmp_path, cli, monkeypatch):
    from model_backends import inductor_with_relu_compile_error

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "helpers"))
    block = ResidualBlock()
    with pytest.raises(Exception), torch.no_grad():
        torch.compile(block, backend=graphdbg.capture(inductor_with_relu_compile_error, dump_dir=tmp_path / "d"))(torch.randn(2, 8, 6, 6))
    [dump] = _dumps(tmp_path / "d")
    d = graphdbg.load(dump)
    assert d.error_type == "InductorError" and d.signature.startswith("CppCompileError: "), d.signature
    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    assert json.loads(r.out)["signature"].startswith("CppCompileError: ")
    r = cli("minify", "--no-self-check", dump, "--trust-backend", "--out", tmp_path / "min", "--json")
    assert r.code == 0 and json.loads(r.out)["final_nodes"] < d.manifest_data["graph"]["nodes"], r
    r = _run_repro(tmp_path / "min")
    assert r.returncode == 1 and r.stdout.startswith("REPRODUCED: CppCompileError"), (r.stdout, r.stderr[-2000:])


@pytest.mark.slow
def test_repro_of_a_segfault_exits_1_naming_the_signal(tmp_path, cli):
    program = tmp_path / "dies.py"
    program.write_text(_DIES.format(helpers=str(ROOT / "tests" / "helpers"), tests=str(ROOT / "tests")))
    subprocess.run([sys.executable, str(program), "segfaults_when_called", str(tmp_path / "dumps")], capture_output=True,
                   timeout=300, env=child_env())
    [dump] = _dumps(tmp_path / "dumps")
    r = cli("minify", "--no-self-check", dump, "--trust-backend", "--out", tmp_path / "min", "--json")
    assert r.code == 0 and json.loads(r.out)["signature"] == "Signal SIGSEGV", r
    r = _run_repro(tmp_path / "min")
    assert r.returncode == 1 and r.stdout.splitlines()[0] == "REPRODUCED: Signal SIGSEGV", (r.returncode, r.stdout, r.stderr[-2000:])


# --- faithful inputs ------------------------------------------------------------------------------
@pytest.mark.slow
def test_non_leaf_inputs_replay_as_non_leaves(tmp_path, cli):
    model = _tiny_llama()
    layer = model.model.layers[0].mlp  # the MLP gets the attention's activations: non-leaf, requires_grad
    h = model.model.embed_tokens(torch.randint(0, 64, (1, 8))) * 2
    assert h.requires_grad and not h.is_leaf
    from model_backends import refuses_non_leaf_inputs

    with pytest.raises(Exception):
        torch.compile(layer, backend=graphdbg.capture(refuses_non_leaf_inputs, dump_dir=tmp_path))(h)
    [dump] = _dumps(tmp_path)
    d = graphdbg.load(dump)
    [x] = [i for i in d.manifest_data["inputs"] if i.get("leaf") is False]
    assert x["requires_grad"]
    case = d.case("cpu")
    assert [not v.is_leaf for v in case.inputs if isinstance(v, torch.Tensor) and v.requires_grad].count(True) == 1
    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r


def test_custom_op_stand_in_names_the_ops_module_that_provides_it(tmp_path, cli, monkeypatch):
    from graphdbg.graph import allow_list
    from graphdbg.rebuild import stand_ins

    monkeypatch.setattr(allow_list, "_allowed_namespaces", [])
    monkeypatch.setenv(stand_ins.OPS_ENV, "")
    pkg = tmp_path / "g16ops"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('g16ops::scale', mutates_args=())\n"
        "def scale(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
        "@scale.register_fake\n"
        "def _(x):\n    return torch.empty_like(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable, but nothing imported g16ops.kernels
    graph = tmp_path / "rank0_0.py"
    graph.write_text(
        "class GraphModule(torch.nn.Module):\n"
        '    def forward(self, l_x_: "f32[2, 3]"):\n'
        '        y: "f32[2, 3]" = torch.ops.g16ops.scale.default(l_x_);  l_x_ = None\n'
        "        return (y,)\n")
    r = cli("replay", graph, "--backend", "eager", "--no-isolate", "--json")
    [note] = [s for s in json.loads(r.out)["stand_ins"] if "g16ops.scale" in s]
    assert "--ops g16ops.kernels would provide it" in note, note
    r = cli("replay", graph, "--backend", "eager", "--no-isolate", "--json", "--ops", "g16ops.kernels")
    assert not [s for s in json.loads(r.out)["stand_ins"] if "g16ops" in s], r


# --- rebuildable backends ----------------------------------------------------------------------------
def test_aot_autograd_and_partial_backends_are_recorded_and_rebuilt(tmp_path, monkeypatch):
    import functools

    from model_backends import compile_with_options, fw_refusing_silu
    from torch._dynamo.backends.common import aot_autograd

    from graphdbg.backends.recipe import rebuild_backend

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "helpers"))
    model = _tiny_llama().model.layers[0].mlp.eval()
    x = torch.randn(1, 4, 32)
    for name, backend in [("aot", aot_autograd(fw_compiler=fw_refusing_silu)),
                          ("partial", functools.partial(compile_with_options, refuse="silu"))]:
        torch._dynamo.reset()
        with pytest.raises(Exception), torch.no_grad():
            torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path / name))(x)
        [dump] = _dumps(tmp_path / name)
        d = graphdbg.load(dump)
        recipe = d.manifest_data["backend_recipe"]
        assert recipe["complete"], recipe
        rebuilt = rebuild_backend(recipe)
        outcome = d.case("cpu").run(rebuilt)
        assert outcome.reproduces(d), (name, outcome.summary(), d.signature)
    assert recipe == {"kind": "partial", "func": {"callable": "model_backends:compile_with_options"}, "args": [],
                      "keywords": {"refuse": {"value": "silu"}}, "complete": True}


def _silu_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x) * 2 + torch.relu(x)


def _capture_failing(backend, dump_dir: Path, capsys) -> Path:
    torch._dynamo.reset()
    with pytest.raises(Exception), torch.no_grad():
        torch.compile(_silu_relu, backend=graphdbg.capture(backend, dump_dir=dump_dir))(torch.randn(4, 8))
    capsys.readouterr()  # capture's own "dump written" line is not the CLI's
    [dump] = _dumps(dump_dir)
    return dump


@pytest.mark.slow
def test_recipe_backends_replay_minify_and_refuse_through_the_cli(tmp_path, cli, capsys):
    """A dump of aot_autograd(fw_compiler=...) / functools.partial(...) replays under the backend it
    recorded (in a child and in-process), only with --trust-backend, and minifies keeping its failure."""
    import functools

    from model_backends import compile_with_options, fw_refusing_silu
    from torch._dynamo.backends.common import aot_autograd

    shown = {"aot": "aot_autograd(fw_compiler=model_backends:fw_refusing_silu)",
             "partial": "partial(model_backends:compile_with_options, refuse='silu')"}
    for name, backend in [("aot", aot_autograd(fw_compiler=fw_refusing_silu)),
                          ("partial", functools.partial(compile_with_options, refuse="silu"))]:
        dump = _capture_failing(backend, tmp_path / name, capsys)
        d = graphdbg.load(dump)
        assert ":" in d.manifest_data["backend"] and d.manifest_data["backend_recipe"]["complete"], d.manifest_data["backend"]
        # without trust: one line naming the recipe's parts and the command to run, exit 2
        r = cli("replay", dump, "--json")
        assert r.code == 2 and r.err.strip().count("\n") == 0, r
        assert shown[name] in r.err and f"graphdbg replay {dump} --trust-backend" in r.err, r
        # the recipe wins over the recorded class name: the captured failure again, in a child and in-process
        for isolate in ("--isolate", "--no-isolate")[:2 if name == "aot" else 1]:  # a child (the default), in-process
            r = cli("replay", dump, "--trust-backend", "--json", isolate)
            out = json.loads(r.out)
            assert r.code == 1 and out["reproduces"] and out["signature"] == d.signature, (isolate, r)
            assert out["backend"] == shown[name] and out["isolated"] == (isolate == "--isolate"), out
        r = cli("ls", tmp_path / name, "--json")
        assert [g["backend"] for g in json.loads(r.out)["groups"]] == [shown[name]], r.out

    # minify under the recorded recipe keeps the captured signature; the repro rebuilds the backend alone
    r = cli("minify", "--no-self-check", _dumps(tmp_path / "aot")[0], "--out", tmp_path / "min")
    assert r.code == 2 and "--trust-backend" in r.err, r
    r = cli("minify", "--no-self-check", _dumps(tmp_path / "aot")[0], "--trust-backend", "--out", tmp_path / "min", "--json")
    assert r.code == 0, r
    [small] = _dumps(tmp_path / "min")
    m = graphdbg.load(small)
    assert m.signature == graphdbg.load(_dumps(tmp_path / "aot")[0]).signature, m.signature
    assert m.node_count < graphdbg.load(_dumps(tmp_path / "aot")[0]).node_count
    assert m.manifest_data["backend_recipe"]["kwargs"] == {"fw_compiler": {"callable": "model_backends:fw_refusing_silu"}}
    env = child_env(graphdbg=False, tests=True)  # the repro needs torch and the backend, no graphdbg
    run = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path / "min", env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1 and run.stdout.startswith("REPRODUCED: NotImplementedError"), run
    r = cli("replay", small, "--trust-backend", "--json", "--no-isolate")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r

    # export-test of the captured dump: the test rebuilds the recipe too, and fails while the bug is there
    r = cli("export-test", "--no-self-check", _dumps(tmp_path / "aot")[0], "--out", tmp_path / "et" / "test_aot.py")
    assert r.code == 2 and "graphdbg export-test" in r.err and "--trust-backend" in r.err, r
    r = cli("export-test", "--no-self-check", _dumps(tmp_path / "aot")[0], "--out", tmp_path / "et" / "test_aot.py", "--trust-backend")
    assert r.code == 0, r
    import importlib.util

    spec = importlib.util.spec_from_file_location("exported_recipe_test", tmp_path / "et" / "test_aot.py")
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    with pytest.raises(AssertionError, match="no lowering for aten.silu.default"):
        with pytest.MonkeyPatch.context() as mp:  # the exported test takes pytest's monkeypatch and capsys fixtures
            exported.test_aot(mp, capsys)  # replays in a child process, as pytest would run it


def test_recipe_backend_with_an_unrecorded_part_or_a_forged_recipe_is_one_line(tmp_path, cli, capsys):
    from model_backends import fw_refusing_silu
    from torch._dynamo.backends.common import aot_autograd

    dump = _capture_failing(aot_autograd(fw_compiler=lambda gm, ex: fw_refusing_silu(gm, ex)), tmp_path / "lam", capsys)
    assert graphdbg.load(dump).manifest_data["backend_recipe"]["complete"] is False
    r = cli("replay", dump, "--trust-backend")
    assert r.code == 2 and r.err.strip().count("\n") == 0, r
    assert "fw_compiler (<function" in r.err and "not recorded" in r.err and "--backend" in r.err, r
    r = cli("replay", dump, "--backend", "eager", "--json")  # --backend still picks one
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r
    # a dump is someone else's file: a recipe not in graphdbg's shape is refused, never imported
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["backend_recipe"] = {"kind": "aot_autograd", "kwargs": {"fw_compiler": {"callable": "os:system('x')"}}}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    r = cli("replay", dump, "--trust-backend")
    assert r.code == 2 and r.err.strip().count("\n") == 0 and "not one graphdbg wrote" in r.err, r
