"""Files other tools write, read as dumps: torch's minifier scripts and vLLM/SGLang compile-cache graphs.

The fixtures come from real runs (see the README in each fixture folder). Loading never runs
the file; replay under eager computes what the original module computes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import graphdbg
from fixtures.programs import Block
from fixtures.torch_minifier.make_fixture import ReluMLP, relu_mlp
from graphdbg.errors import GraphdbgError, GraphSourceError
from graphdbg.formats import compile_cache, torch_repro
from graphdbg.formats.compile_cache import load_computation_graph
from graphdbg.formats.torch_repro import load_torch_repro, read_storage_bytes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
AOT = FIXTURES / "torch_minifier" / "after_aot"
DYNAMO = FIXTURES / "torch_minifier" / "after_dynamo"
VLLM = next((FIXTURES / "compile_cache" / "vllm").rglob("computation_graph.py"))
SGLANG = next((FIXTURES / "compile_cache" / "sglang").rglob("computation_graph_*.py"))


def relu_mlp_with(weights: list[torch.Tensor]) -> ReluMLP:
    model = ReluMLP().eval()
    with torch.no_grad():
        for p, w in zip((model.fc1.weight, model.fc1.bias, model.fc2.weight, model.fc2.bias), weights):
            p.copy_(w)
    return model


# --- torch's minifier --------------------------------------------------------------------


def test_after_aot_launcher_has_no_saved_tensors_so_inputs_are_stand_ins_and_eager_matches_the_module():
    dump = load_torch_repro(AOT / "minifier_launcher.py")
    assert dump.backend == "inductor" and dump.failure_kind == "captured" and dump.manifest_data["minifier"]["variant"] == "after_aot"
    table = dump.inputs_table()
    assert list(table["shape"]) == [(32, 16), (32,), (4, 16), (16, 32), (16,)]
    assert not any(table["stored"])  # after_aot launchers save fake tensors: the file says reader.storage(None, ...)
    case = dump.case("cpu", seed=3)
    assert sorted(s.name for s in case.stand_ins) == ["arg0_1", "arg1_1", "arg2_1", "arg3_1", "arg4_1"]
    # the one buffer is printed inline by the minifier: its real value, not a stand-in
    assert torch.equal(case.gm._tensor_constant0, torch.tensor([0.5, 2.0]))
    w1, b1, x, w2, b2 = case.inputs
    expected = relu_mlp_with([w1, b1, w2, b2])(x)
    (out,) = case.run_eager()
    torch.testing.assert_close(out, expected)
    assert case.run("eager").status == "pass"
    # the seed picks the stand-in values
    assert not torch.equal(dump.case("cpu", seed=4).inputs[0], w1)


def test_after_aot_repro_reads_its_saved_storage_without_unpickling(tmp_path):
    dump = load_torch_repro(AOT / "repro.py")
    (desc,) = dump.manifest_data["inputs"]
    assert desc["stored"] == "14bac311620a4169da4cd5df19995d9b82e68931" and desc["shape"] == [4, 32]
    case = dump.case("cpu")
    assert case.stand_ins == []
    # torch's own reader (torch.load, weights_only) as the oracle, on our own fixture
    from torch.utils._content_store import ContentStoreReader

    storage = ContentStoreReader(str(AOT / "checkpoints")).read_storage(desc["stored"])
    expected = torch.empty(0).set_(storage, 0, (4, 32), (32, 1))
    assert torch.equal(case.inputs[0], expected)
    assert bytes(read_storage_bytes(AOT / "checkpoints" / "storages" / desc["stored"])) == bytes(storage)
    (out,) = case.run_eager()
    assert torch.equal(out, torch.relu(expected))

    # The same file without its store: random data of the same spec, listed as a stand-in.
    shutil.copy(AOT / "repro.py", tmp_path / "repro.py")
    bare = load_torch_repro(tmp_path / "repro.py")
    assert bare.manifest_data["inputs"][0]["stored"] is None
    bare_case = bare.case("cpu")
    assert [s.name for s in bare_case.stand_ins] == ["addmm"] and "not found" in bare_case.stand_ins[0].detail
    assert bare_case.inputs[0].shape == (4, 32) and bare_case.inputs[0].dtype == torch.float32
    assert not torch.equal(bare_case.inputs[0], expected)


def test_after_dynamo_launcher_brings_back_the_users_real_weights_and_reproduces_under_its_backend():
    dump = load_torch_repro(DYNAMO / "minifier_launcher.py")
    assert dump.backend == "relu_compile_error_TESTING_ONLY"
    case = dump.case("cpu")
    assert case.stand_ins == []
    model, x = relu_mlp()  # the program the fixture was made from, same seed
    w1, b1, x_saved, w2, b2 = case.inputs
    assert torch.equal(w1, model.fc1.weight) and torch.equal(b2, model.fc2.bias) and torch.equal(x_saved, x)
    assert w1.requires_grad  # load_args says requires_grad=True for parameters
    with torch.no_grad():
        torch.testing.assert_close(case.run_eager()[0], model(x), rtol=0, atol=0)
    outcome = case.run(dump.backend)
    assert outcome.status == "crash" and outcome.error_type == "ReluCompileError"


def test_after_dynamo_repro_with_and_without_its_tensors(tmp_path):
    dump = load_torch_repro(DYNAMO / "repro.py")
    assert dump.case("cpu").stand_ins == []
    shutil.copy(DYNAMO / "repro.py", tmp_path / "repro.py")
    case = load_torch_repro(tmp_path / "repro.py").case("cpu")
    assert [s.kind for s in case.stand_ins] == ["regenerated"]
    assert torch.equal(case.run_eager()[0], torch.relu(case.inputs[0]))


def test_detect_format_tells_the_files_apart(tmp_path):
    assert torch_repro.detect_format(AOT / "repro.py") == "torch_minifier"
    assert torch_repro.detect_format(DYNAMO / "minifier_launcher.py") == "torch_minifier"
    assert torch_repro.detect_format(VLLM) is None
    assert compile_cache.detect_format(VLLM) == "vllm_compile_cache"
    assert compile_cache.detect_format(SGLANG) == "sglang_compile_cache"
    assert compile_cache.detect_format(AOT / "repro.py") is None
    other = tmp_path / "computation_graph.py"
    other.write_text("print('hello')\n")
    assert compile_cache.detect_format(other) is None and torch_repro.detect_format(other) is None
    assert torch_repro.detect_format(tmp_path) is None


# --- vLLM / SGLang compile caches --------------------------------------------------------


def _block_from(case) -> Block:
    model = Block().eval()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for node, value in zip(case.placeholders, case.inputs):
            name = re.sub(r"^l_self_|_$", "", node.name)
            name = re.sub(r"(modules|parameters)_", "", name).replace("_", ".")
            if name in params:
                params[name].copy_(value)
    return model


@pytest.mark.parametrize("path, fmt", [(VLLM, "vllm_compile_cache"), (SGLANG, "sglang_compile_cache")])
def test_computation_graph_replays_like_the_block_it_was_traced_from(path, fmt):
    dump = load_computation_graph(path)
    assert dump.format == fmt and dump.rank == 0
    assert dump.manifest_data["compile_cache"]["tag"] == "backbone"
    assert sorted(dump.printed.submodules) == [f"submod_{i}" for i in range(5)]
    case = dump.case("cpu", seed=1, sizes={"s77": 3})
    x = next(v for n, v in zip(case.placeholders, case.inputs) if n.name == "l_x_")
    assert x.shape == (3, 8, 32)
    assert {s.name for s in case.stand_ins} >= {"l_x_", "l_self_modules_mlp_modules_up_parameters_weight_"}
    with torch.no_grad():
        torch.testing.assert_close(case.run_eager()[0], _block_from(case)(x))
    assert case.run("eager").status == "pass"
    # a size symbol without a value is a stand-in too
    assert any(s.name == "s77" and s.kind == "size" for s in dump.case("cpu").stand_ins)


def test_vllm_graph_has_no_symint_inputs_and_sglang_keeps_them():
    vllm = [d["kind"] for d in load_computation_graph(VLLM).manifest_data["inputs"]]
    sglang = [d["kind"] for d in load_computation_graph(SGLANG).manifest_data["inputs"]]
    assert "symint" not in vllm and sglang[0] == "symint"


def test_missing_custom_op_becomes_a_listed_shape_correct_stand_in(tmp_path):
    text = VLLM.read_text().replace(
        'softmax: "f32[s77, 4, 8, 8]" = masked_fill.softmax(-1);',
        'softmax: "f32[s77, 4, 8, 8]" = torch.ops.vllm.unified_attention(masked_fill);')
    assert "torch.ops.vllm.unified_attention" in text
    path = tmp_path / "rank_1_0" / "backbone" / "computation_graph.py"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    dump = load_computation_graph(path)
    assert dump.rank == 1 and dump.manifest_data["missing_ops"] == ["torch.ops.vllm.unified_attention"]
    case = dump.case("cpu", sizes={"s77": 2})
    assert any(s.kind == "custom_op" for s in case.stand_ins)
    assert case.run_eager()[0].shape == (2, 8, 32)


# --- never run, and bad input ------------------------------------------------------------


def test_loading_never_executes_the_file(tmp_path):
    marker = tmp_path / "ran"
    body = (AOT / "repro.py").read_text()
    side_effect = f"open({str(marker)!r}, 'w').write('x')"
    module_level = body.replace("mod = Repro()", f"{side_effect}\nmod = Repro()")
    (tmp_path / "a.py").write_text(module_level)
    dump = load_torch_repro(tmp_path / "a.py")  # the extra statement is skipped, never run
    dump.case("cpu").run_eager()
    in_init = body.replace("super().__init__()", f"super().__init__()\n        {side_effect}")
    (tmp_path / "b.py").write_text(in_init)
    with pytest.raises(GraphSourceError, match=r"b\.py:\d+: unsupported statement in __init__"):
        load_torch_repro(tmp_path / "b.py")
    in_load_args = body.replace("def load_args(reader):", f"def load_args(reader):\n    {side_effect}")
    (tmp_path / "c.py").write_text(in_load_args)
    with pytest.raises(GraphSourceError, match=r"c\.py:\d+: unsupported statement in load_args"):
        load_torch_repro(tmp_path / "c.py")
    cache_file = tmp_path / "rank_0_0" / "computation_graph.py"
    cache_file.parent.mkdir()
    cache_file.write_text(VLLM.read_text().replace("import torch\n", f"import torch\n{side_effect}\n", 1))
    with pytest.raises(GraphSourceError, match="unexpected statement outside the graph class"):
        load_computation_graph(cache_file)
    assert not marker.exists()


def test_refuses_modules_and_factories_outside_what_the_minifier_writes(tmp_path):
    body = (AOT / "repro.py").read_text()
    evil = body.replace("super().__init__()", "super().__init__()\n        self.m = Evil(1)")
    (tmp_path / "r.py").write_text(evil)
    with pytest.raises(GraphSourceError, match=r"r\.py:\d+: refusing module constructor Evil"):
        load_torch_repro(tmp_path / "r.py").case("cpu")
    evil = body.replace("super().__init__()", "super().__init__()\n        self.register_buffer('b', torch.load('x'))")
    (tmp_path / "s.py").write_text(evil)
    with pytest.raises(GraphSourceError, match=r"s\.py:\d+: refusing torch.load"):
        load_torch_repro(tmp_path / "s.py").case("cpu")


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.8])
def test_truncated_files_are_one_line_errors_with_file_and_line(tmp_path, cut):
    for src in (AOT / "minifier_launcher.py", VLLM):
        text = src.read_text()
        path = tmp_path / src.name
        path.write_text(text[: int(len(text) * cut)])
        load = load_torch_repro if src.name.startswith("minifier") else load_computation_graph
        with pytest.raises(GraphdbgError) as e:
            load(path)
        msg = str(e.value)
        assert "\n" not in msg and re.match(rf"{re.escape(str(path))}:\d+: ", msg), msg


def test_not_a_repro(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("import torch\nclass Repro(torch.nn.Module):\n    pass\n")
    with pytest.raises(GraphSourceError, match=r"x\.py:\d+: minifier script without `def load_args"):
        load_torch_repro(path)
    path.write_text("def load_args(reader):\n    pass\n")
    with pytest.raises(GraphSourceError, match=r"x\.py:1: not a PyTorch minifier script"):
        load_torch_repro(path)
    with pytest.raises(GraphdbgError, match="not a vLLM/SGLang"):
        load_computation_graph(path)
    bad = (AOT / "repro.py").read_text().replace("(4, 32)", "(4, 64)")
    path.write_text(bad)
    with pytest.raises(GraphSourceError, match="needs 1024 bytes, its storage has 512"):
        load_torch_repro(path).case("cpu")


# --- through graphdbg.load and the CLI, once the loader dispatches to these readers --------


def _load_or_skip(path: Path):
    dump = graphdbg.load(path)  # the loader dispatches to torch_repro / compile_cache
    assert dump.format in ("torch_minifier", "vllm_compile_cache", "sglang_compile_cache")
    return dump


@pytest.mark.parametrize("path", [AOT / "repro.py", DYNAMO / "minifier_launcher.py", VLLM, SGLANG])
def test_graphdbg_load_and_cli(path, cli):
    dump = _load_or_skip(path)
    assert dump.manifest_data["format"] in ("torch_minifier", "vllm_compile_cache", "sglang_compile_cache")
    r = cli("replay", str(path), "--backend", "eager", "--no-isolate", "--json")
    assert r.code == 0, r
    r = cli("show", str(path), "--json")
    assert r.code == 0, r


def test_regenerated_repeats_still_add_up_to_the_traced_output_size(tmp_path):
    # torch's after_aot writer adds this fixup to load_args when a graph has
    # repeat_interleave(repeats, output_size=n); random repeats would not sum to n.
    body = (AOT / "repro.py").read_text()
    start, end = body.index("    def forward(self, addmm):"), body.index("load_args._version = 0")
    script = body[:start] + (
        "    def forward(self, arg0_1, arg1_1):\n"
        "        repeat_interleave = torch.ops.aten.repeat_interleave.Tensor(arg0_1, output_size = arg1_1);  arg0_1 = arg1_1 = None\n"
        "        return (repeat_interleave,)\n\n"
        "def load_args(reader):\n"
        "    buf0 = reader.storage(None, 24, dtype_hint=torch.int64)\n"
        "    reader.tensor(buf0, (3,), dtype=torch.int64, is_leaf=True)  # arg0_1\n"
        "    reader.symint(7)  # arg1_1\n"
        "    # Fixup: ensure sum(repeats) == output_size for repeat_interleave\n"
        "    if hasattr(reader, 'args'):\n"
        "        _repeats = reader.args[0]\n"
        "        _output_size = reader.args[1]\n"
        "        if isinstance(_repeats, torch.Tensor) and _repeats.dtype == torch.int64:\n"
        "            _n = _repeats.numel()\n"
        "            _repeats.fill_(_output_size // _n)\n"
        "            _repeats[:_output_size % _n] += 1\n"
    ) + body[end:]
    path = tmp_path / "repro.py"
    path.write_text(script)
    dump = graphdbg.load(path)
    assert dump.format == "torch_minifier" and dump.manifest_data["inputs"][0]["sums_to"] == 1
    case = dump.case("cpu", seed=5)
    assert [(s.name, s.kind) for s in case.stand_ins] == [("arg0_1", "regenerated")]
    repeats, size = case.inputs
    assert size == 7 and repeats.tolist() == [3, 2, 2]
    (out,) = case.run_eager()
    assert out.tolist() == [0, 0, 0, 1, 1, 2, 2]


def test_ls_lists_pytorchs_own_repro_scripts_beside_printed_graphs(tmp_path, cli):
    """What TORCH_COMPILE_DEBUG=1 leaves: fx_graph_runnable.py (a minifier-shaped script) and
    fx_graph_readable.py, whose class Inductor prints as ``class <lambda>(torch.nn.Module):``."""
    import json

    from torch.fx.experimental.proxy_tensor import make_fx

    debug = tmp_path / "torchinductor" / "model__0_inference_0.0"
    debug.mkdir(parents=True)
    shutil.copy(FIXTURES / "torch_minifier" / "after_aot" / "repro.py", debug / "fx_graph_runnable.py")
    readable = make_fx(lambda x, w: torch.nn.functional.gelu(x @ w))(torch.randn(4, 8), torch.randn(8, 8))
    text = readable.print_readable(print_output=False)
    assert text.startswith("class <lambda>(torch.nn.Module):")
    (debug / "fx_graph_readable.py").write_text(text)
    r = cli("ls", tmp_path, "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["problems"] == [], r
    assert sorted((Path(d["path"]).name, d["format"]) for d in data["dumps"]) == [
        ("fx_graph_readable.py", "printed_graph"), ("fx_graph_runnable.py", "torch_minifier")]
    r = cli("replay", debug / "fx_graph_readable.py", "--backend", "aot_eager", "--no-isolate", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r
