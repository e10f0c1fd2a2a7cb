"""Printed graphs parse back into GraphModules that compute the same thing, and never run code."""

from __future__ import annotations

import math
import operator
import re

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
from conftest import SGLANG_CORPUS

from graphdbg.errors import GraphSourceError
from graphdbg.graph.parser import PrintedGraph, mangled_name, parse_printed_graph, resolve_target
from graphdbg.store.specs import SymSpec, TensorSpec

CORPUS = SGLANG_CORPUS
CORPUS_FILES = sorted(CORPUS.glob("**/*.py"))


def printed(gm: fx.GraphModule) -> str:
    return gm.print_readable(print_output=False, include_stride=True, include_device=True)


def untyped(code: str) -> str:
    # Dynamo sets node.type on placeholders (torch.Tensor, Parameter); the printed form keeps only specs.
    return re.sub(r" : [\w.]+", "", code)


def stand_in(qualname: str):
    def missing_op(*args, **kwargs):
        raise RuntimeError(f"stand-in for {qualname}")

    return missing_op


# --- round trips on graphs Dynamo really produces -------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
        y = nn.functional.gelu(self.out(attn @ v))
        return y + x[:, :1, ...], (y[..., 0] >= 0) & ~(y[..., 1] < -1), x.shape[1] * 2


def capture(model, *inputs, dynamic: bool):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend, dynamic=dynamic)(*inputs)
    assert len(graphs) == 1
    return graphs[0]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_round_trip_dynamo_graph(dynamic):
    torch.manual_seed(0)
    gm, inputs = capture(Block(), torch.randn(2, 5, 8), dynamic=dynamic)
    text = printed(gm)
    pg = parse_printed_graph(text, filename="block.py")
    parsed = pg.to_module()

    torch.testing.assert_close(parsed(*inputs), gm(*inputs))
    # Names, placeholder targets and the printed form survive the trip.
    assert untyped(parsed.code) == untyped(gm.code)
    placeholders = pg.graph.find_nodes(op="placeholder")
    x = next(n for n in placeholders if n.target == "L_x_")
    assert x.name == "l_x_"
    assert isinstance(x.meta["graphdbg_spec"], TensorSpec)
    if dynamic:
        assert x.meta["graphdbg_spec"].stride[0] == "8*s27"
        assert any(isinstance(n.meta["graphdbg_spec"], SymSpec) for n in placeholders)
    sources = [n.meta["graphdbg_source"] for n in pg.graph.nodes if "graphdbg_source" in n.meta]
    assert sources and all(s["file"].endswith("test_printed_graph.py") and s["fn"] == "forward" for s in sources)
    softmax = next(n for n in pg.graph.nodes if n.target is torch.softmax)
    assert "softmax" in softmax.meta["graphdbg_source"]["code"]
    assert text.splitlines()[softmax.meta["graphdbg_lineno"] - 1].strip().startswith(softmax.name)


def combine(kwargs, grid):
    return kwargs["a"] * grid[0][0] + kwargs["b"]


def hand_built() -> fx.GraphModule:
    sub_graph = fx.Graph()
    z = sub_graph.placeholder("z")
    sub_graph.output((sub_graph.call_method("cos", (z,)),))
    g = fx.Graph()
    x, n = g.placeholder("x"), g.placeholder("n")
    const = g.get_attr("_tensor_constant0")
    sqrt = g.call_function(math.sqrt, (n,))
    dim0 = g.call_function(operator.getitem, (g.call_function(getattr, (x, "shape")), 0))
    y = g.call_method("to", (x,), {"device": torch.device("cpu"), "dtype": torch.float32})
    y = g.call_function(torch.clamp, (y,), {"min": -math.inf, "max": math.inf})
    y = g.call_function(operator.add, (g.call_function(operator.mul, (y, sqrt)), const))
    wrapped = g.call_function(operator.getitem, (g.call_function(torch.ops.higher_order.wrap, (g.get_attr("sub"), y)), 0))
    called = g.call_function(operator.getitem, (g.call_module("sub", (wrapped,)), 0))
    mixed = g.call_function(combine, (), {"kwargs": {"a": wrapped, "b": called}, "grid": [(2, 1, 1)]})
    picked = g.call_function(operator.getitem, (g.call_method("unsqueeze", (mixed, -1)), (slice(None), 0, ..., None)))
    g.output((g.call_function(torch.cat, ([picked, picked],), {"dim": 0}), dim0))
    root = nn.Module()
    root.sub = fx.GraphModule(nn.Module(), sub_graph)
    root.register_buffer("_tensor_constant0", torch.arange(3.0))
    return fx.GraphModule(root, g)


def test_round_trip_hand_built_graph():
    gm = hand_built()
    text = printed(gm)
    mangled = re.search(r"(\w+_combine)\(", text)[1]  # fx names it after this test module
    pg = parse_printed_graph(text, resolve=lambda q: combine if q == mangled else None)

    assert set(pg.submodules) == {"sub"} and set(pg.attrs) == {"_tensor_constant0"}
    with pytest.raises(GraphSourceError, match="_tensor_constant0"):
        pg.to_module()
    parsed = pg.to_module(attr_values={"_tensor_constant0": torch.arange(3.0)})
    x = torch.randn(2, 3)
    torch.testing.assert_close(parsed(x, 4.0), gm(x, 4.0))
    ops = {n.op for n in parsed.graph.nodes}
    assert ops == {"placeholder", "get_attr", "call_function", "call_method", "call_module", "output"}
    to = next(n for n in pg.graph.nodes if n.target == "to")
    assert to.kwargs == {"device": torch.device("cpu"), "dtype": torch.float32}
    assert next(n for n in pg.graph.nodes if n.name == "sqrt").target is math.sqrt
    assert next(n for n in pg.graph.nodes if n.name == "clamp").kwargs == {"min": -math.inf, "max": math.inf}


def test_missing_attr_gets_qualified_names_and_unused_nested_class_is_kept():
    text = '''
class GraphModule(torch.nn.Module):
    def forward(self, x: "f32[3]"):
        inner = self.inner(x);  x = None
        return (inner,)

    class inner(torch.nn.Module):
        def forward(self, y: "f32[3]"):
            c: "f32[3][1]cpu" = self._tensor_constant0
            add = y + c;  y = c = None
            return add

    class unused(torch.nn.Module):
        def forward(self):
            return ()
'''
    asked = []

    def missing(name, spec):
        asked.append((name, spec))
        return torch.ones(spec.concrete_shape())

    gm = parse_printed_graph(text).to_module(missing_attr=missing)
    assert [(n, s.annotation()) for n, s in asked] == [("inner._tensor_constant0", "f32[3][1]cpu")]
    assert isinstance(gm.unused, fx.GraphModule)
    torch.testing.assert_close(gm(torch.zeros(3)), (torch.ones(3),))


def test_resolution_helpers():
    assert mangled_name("math.sqrt") == "math_sqrt"
    assert mangled_name("torch._dynamo.utils.foo") == "torch__dynamo_utils_foo"
    assert resolve_target("torch.ops.aten.add.Tensor") is torch.ops.aten.add.Tensor
    assert resolve_target("math_sqrt") is math.sqrt
    assert resolve_target("_operator_not_") is operator.not_
    assert resolve_target("torch_Tensor_add") is torch.Tensor.add
    assert resolve_target("getattr") is getattr
    from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index

    name = mangled_name("torch._dynamo.graph_bytecode_inputs.get_external_object_by_index")
    assert resolve_target(name) is get_external_object_by_index
    for bad in ("torch.load", "torch.os.system", "torch.hub.load", "os.system", "open", "eval",
                "torch.Tensor.__class__", "operator.methodcaller", "torch.utils.cpp_extension.load_inline"):
        with pytest.raises(GraphSourceError):
            resolve_target(bad)


# --- the corpus: real files from someone else's run ------------------------------------------


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_file_parses(path):
    pg = parse_printed_graph(path.read_text(), filename=str(path), resolve=stand_in)
    assert pg.name == "GraphModule"
    gm = pg.to_module()
    assert gm.code  # fx can regenerate code from what we built


def test_corpus_split_graph_facts():
    path = CORPUS / "Qwen/Qwen3-Next-80B-A3B-Instruct/rank0_0.py"
    pg = parse_printed_graph(path.read_text(), filename=str(path), resolve=stand_in)
    assert pg.header == ["# Rank: 0, Graph 0"]
    assert set(pg.submodules) == {"thunder_0", "inductor_1"}
    thunder = pg.submodules["thunder_0"]
    assert set(thunder.submodules) == {"_model"}
    assert [n.name for n in thunder.graph.find_nodes(op="placeholder")] == ["l_input_", "l_self_parameters_weight_"]
    assert [n.target for n in pg.graph.find_nodes(op="call_module")] == ["thunder_0", "inductor_1"]
    ge = next(n for n in thunder.graph.nodes if n.name == "ge")
    src = ge.meta["graphdbg_source"]
    assert src["file"].endswith("vocab_parallel_embedding.py") and src["line"] == 136
    assert src["fn"] == "get_masked_input_and_mask" and src["code"].startswith("org_vocab_mask = ")
    assert ge.target is operator.ge and ge.meta["graphdbg_spec"].annotation() == "b8[1]"
    inductor = pg.submodules["inductor_1"]
    is_cpu = next(n for n in inductor.graph.nodes if n.name == "getattr_1")
    assert is_cpu.target is getattr and is_cpu.args[1] == "is_cpu"
    assert "graphdbg_source" not in next(n for n in pg.graph.nodes if n.name == "thunder_0").meta

    # The Thunder half runs on CPU as printed: masked embedding lookup of one token.
    gm = pg.to_module()
    weight = torch.randn(18992, 2048, dtype=torch.bfloat16)
    out = gm.thunder_0(torch.tensor([5]), weight)
    torch.testing.assert_close(out, weight[5:6])


def test_corpus_unknown_custom_op_without_hook_names_file_line_and_call():
    path = CORPUS / "Qwen/Qwen3-Next-80B-A3B-Instruct/rank0_0.py"
    text = path.read_text()
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "= torch.ops.sglang.inplace_all_reduce(" in ln)
    with pytest.raises(GraphSourceError, match="torch.ops.sglang.inplace_all_reduce") as info:
        parse_printed_graph(text, filename=str(path))
    assert info.value.file == str(path) and info.value.line == line
    assert f"rank0_0.py:{line}:" in str(info.value)


def test_corpus_unsplit_graph_facts():
    path = next(p for p in CORPUS_FILES if "triton_kernel_wrapper_mutation" in p.read_text())
    pg = parse_printed_graph(path.read_text(), filename=str(path), resolve=stand_in)
    hidden = next(n for n in pg.graph.find_nodes(op="placeholder") if n.target == "L_hidden_states_")
    assert hidden.name == "l_hidden_states_"
    kernels = [n for n in pg.graph.nodes if n.name.startswith("triton_kernel_wrapper_mutation")]
    assert kernels and all(isinstance(n.kwargs["kwargs"], dict) for n in kernels)
    assert any(isinstance(v, fx.Node) for v in kernels[0].kwargs["kwargs"].values())
    assert isinstance(kernels[0].kwargs["grid"], list) and isinstance(kernels[0].kwargs["grid"][0], tuple)
    devices = [a for n in pg.graph.nodes for a in (*n.args, *n.kwargs.values()) if isinstance(a, torch.device)]
    assert devices and all(d.type == "cuda" for d in devices)
    assert any(n.target is torch.cuda.streams.Stream for n in pg.graph.nodes)


# --- safety: the file is data, never code ----------------------------------------------------


def forward_with(body: str, args: str = "x") -> str:
    return f"class GraphModule(torch.nn.Module):\n    def forward(self, {args}):\n{body}\n        return (x,)\n"


@pytest.mark.parametrize(
    "body, needle",
    [
        ("y = torch.load('weights.pt')", "torch.load"),
        ("y = os.system('touch pwned')", "os.system"),
        ("y = x.__class__", "__class__"),
        ("y = __import__('os')", "__import__"),
        ("y = getattr(x, '__class__')", "__class__"),
        ("y = torch.os.system('touch pwned')", "torch.os"),
        ("y = torch.hub.load('a/b', 'c')", "torch.hub.load"),
        ("y = torch.utils.cpp_extension.load_inline('m', 'int x;')", "torch.utils.cpp_extension"),
        ("y = torch.ops.load_library('/tmp/evil.so')", "torch.ops.load_library"),
        ("y = x._foo()", "_foo"),
        ("y = x.numpy().tofile('pwned')", "tofile"),
        ("y = eval('1')", "eval"),
    ],
)
def test_refused_calls_name_the_line(body, needle):
    text = forward_with("        z = x + 1\n        " + body)
    with pytest.raises(GraphSourceError, match=needle.replace(".", r"\.")) as info:
        parse_printed_graph(text, filename="evil.py", resolve=stand_in)  # a catch-all hook can't let them in
    assert info.value.line == 4 and str(info.value).startswith("evil.py:4: ")


def test_no_code_runs(tmp_path):
    marker = tmp_path / "marker"
    attempts = [
        f"open({str(marker)!r}, 'w').write('ran')\n" + forward_with("        pass"),
        f"import os\nos.system('touch {marker}')\n" + forward_with("        pass"),
        forward_with(f"        f = open({str(marker)!r}, 'w')"),
        forward_with("        pass", args=f"x, y=open({str(marker)!r}, 'w')"),
        forward_with("        pass", args=f"x: open({str(marker)!r}, 'w')").replace(
            "class GraphModule", f"class GraphModule(torch.nn.Module, metaclass=open({str(marker)!r}, 'w'))\nclass G"),
        forward_with("        pass").replace("    def forward", f"    @open({str(marker)!r}, 'w')\n    def forward"),
    ]
    for text in attempts:
        with pytest.raises(GraphSourceError) as info:
            parse_printed_graph(text, filename="evil.py")
        assert info.value.line is not None
    assert not marker.exists()
    # An annotation is only ever read as a spec string, so this one parses, and still runs nothing.
    pg = parse_printed_graph(forward_with("        pass", args=f"x: open({str(marker)!r}, 'w')"))
    assert pg.graph.find_nodes(op="placeholder")[0].meta["graphdbg_spec"] is None
    assert not marker.exists()


# --- not a graph -----------------------------------------------------------------------------


def test_bad_inputs_name_file_and_line():
    real = printed(hand_built())
    lines = real.splitlines()
    cases = {
        "": 1,
        "def f(x):\n    return x\n": 1,
        "class Config:\n    x = 1\n": 1,
        "class GraphModule(torch.nn.Module):\n    pass\n": 1,
        "\n".join(lines[: len(lines) // 2]): None,  # cut at a line boundary: parses, but no return
        real[: len(real) // 2 + 7]: None,  # cut mid-line
    }
    for text, line in cases.items():
        with pytest.raises(GraphSourceError) as info:
            parse_printed_graph(text, filename="cut.py")
        assert info.value.file == "cut.py" and info.value.line is not None
        assert str(info.value).startswith(f"cut.py:{info.value.line}: ") and "\n" not in str(info.value)
        if line is not None:
            assert info.value.line == line


def test_unknown_name_is_an_error_not_a_hook_call():
    text = forward_with("        y = torch.relu(undefined_thing)")
    with pytest.raises(GraphSourceError, match="undefined_thing"):
        parse_printed_graph(text, resolve=stand_in)


def test_printed_graph_is_public_dataclass():
    pg = parse_printed_graph(forward_with("        y = x * 2"))
    assert isinstance(pg, PrintedGraph) and pg.filename == "<graph>" and pg.header == []


# --- parse_module_class: one class of a larger script (torch's minifier `class Repro`) -------


REPRO_CLASS = '''
import torch
from torch.nn import *
torch._inductor.config.some_flag = True   # never run: only the class is read
class Repro(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer('_tensor_constant0', tensor([0.5000, -inf, 2.0000], dtype=torch.float64))
        self.register_buffer('_tensor_constant1', torch.randn([4, 8], dtype=torch.float16).to("cuda:0"))
        self.w = torch.nn.Parameter(torch.randn([8, 8], dtype=torch.float32, device="cuda:0"))
        self.fc = Linear(in_features=8, out_features=8, bias=True)

    def helper(self):
        import os

    def forward(self, x):
        _tensor_constant0 = self._tensor_constant0
        return (torch.ops.aten.relu.default(x), _tensor_constant0)
def load_args(reader):
    pass
'''


def test_parse_module_class_reads_init_as_data_and_skips_the_rest():
    from graphdbg.graph.parser import parse_module_class

    pg = parse_module_class(REPRO_CLASS, "Repro", filename="repro.py")
    got = {c.name: (c.kind, c.func, c.args, c.kwargs, c.device) for c in pg.inits}
    assert got["_tensor_constant0"] == ("buffer", "tensor", ([0.5, -math.inf, 2.0],), {"dtype": torch.float64}, None)
    assert got["_tensor_constant1"] == ("buffer", "torch.randn", ([4, 8],), {"dtype": torch.float16}, "cuda:0")
    assert got["w"] == ("parameter", "torch.randn", ([8, 8],), {"dtype": torch.float32, "device": "cuda:0"}, None)
    assert got["fc"] == ("module", "Linear", (), {"in_features": 8, "out_features": 8, "bias": True}, None)
    assert [n.op for n in pg.graph.nodes] == ["placeholder", "get_attr", "call_function", "output"]
    gm = pg.to_module({"_tensor_constant0": torch.tensor([1.0])})
    assert gm(torch.tensor([-1.0, 2.0]))[0].tolist() == [0.0, 2.0]


@pytest.mark.parametrize("init, message", [
    ("import os", "unsupported statement in __init__"),
    ("self.x = torch.load('f')", "refusing torch.load"),
    ("self.x = torch.randn([2], dtype=os.environ)", "cannot resolve os.environ|refusing os"),
    ("self.register_buffer('b', tensor([1.0]).to(open('f')))", r"not a constant"),
    ("self.__class__ = Linear(1, 1)", "refusing dunder attribute"),
])
def test_parse_module_class_refuses_init_statements_it_cannot_read_as_data(init, message):
    from graphdbg.graph.parser import parse_module_class

    source = REPRO_CLASS.replace("self.fc = Linear(in_features=8, out_features=8, bias=True)", init)
    with pytest.raises(GraphSourceError, match=rf"repro\.py:\d+: .*({message})"):
        parse_module_class(source, "Repro", filename="repro.py")


def test_parse_module_class_errors_name_file_and_line():
    from graphdbg.graph.parser import parse_module_class

    with pytest.raises(GraphSourceError, match=r"^repro\.py:1: no `class Missing"):
        parse_module_class(REPRO_CLASS, "Missing", filename="repro.py")
    with pytest.raises(GraphSourceError, match=r"^repro\.py:\d+: not a readable Python file \(truncated\?\)"):
        parse_module_class(REPRO_CLASS[:300], "Repro", filename="repro.py")


def test_future_import_header_of_compile_cache_files_is_accepted():
    # vLLM and SGLang write `from __future__ import annotations\nimport torch\n` before print_readable output.
    pg = parse_printed_graph('from __future__ import annotations\nimport torch\n' + '''
class GraphModule(torch.nn.Module):
    def forward(self, x: "f32[2]"):
        relu: "f32[2]" = torch.relu(x);  x = None
        return (relu,)
''', filename="computation_graph.py")
    assert [n.name for n in pg.graph.nodes] == ["x", "relu", "output"]
    with pytest.raises(GraphSourceError, match="refusing import of a relative module"):
        parse_printed_graph("from .__future__ import annotations\n", filename="x.py")


def test_annotation_and_recompute_comments_keep_the_source_line():
    # torch prints a node's `custom` meta before its stack trace: `# Annotation: {...} File: ...`
    from graphdbg.graph.parser import parse_printed_graph

    source = """class GraphModule(torch.nn.Module):
    def forward(self, x: "f32[4]"):
        # File: /proj/model.py:10 in forward, code: y = x + 1
        add: "f32[4]" = x + 1
        # Annotation: {'stream': 1} File: /proj/model.py:12 in forward, code: z = y.sin()
        sin: "f32[4]" = add.sin()
        # recompute: MUST_SAVE File: /proj/model.py:13 in forward, code: w = z * 2
        mul: "f32[4]" = sin * 2
        return (mul,)
"""
    graph = parse_printed_graph(source, filename="annotated.py").graph
    src = {n.name: n.meta.get("graphdbg_source") for n in graph.nodes if n.op == "call_function" or n.op == "call_method"}
    assert src["add"]["line"] == 10 and "annotation" not in src["add"]
    assert src["sin"]["line"] == 12 and src["sin"]["annotation"] == "{'stream': 1}" and src["sin"]["code"] == "z = y.sin()"
    assert src["mul"]["line"] == 13


def test_a_graph_printed_in_colour_loads_and_replays(tmp_path):
    """print_readable(colored=True), as a terminal or a log shows it: the colour codes go, the
    annotations stay."""
    import graphdbg

    printed = {}

    def keep(gm, example_inputs):
        printed["text"] = gm.print_readable(print_output=False, colored=True, include_stride=True, include_device=True)
        return gm.forward

    torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w).sum(-1), backend=keep)(torch.randn(4, 8), torch.randn(8, 8))
    assert "\x1b[" in printed["text"]
    path = tmp_path / "colored.py"
    path.write_text(printed["text"])
    dump = graphdbg.load(path)
    assert [d["shape"] for d in dump.manifest_data["inputs"]] == [[4, 8], [8, 8]]
    assert dump.case("cpu").run("eager").status == "pass"


def test_a_tensor_spec_as_a_dict_is_dataclasses_asdict():
    """TensorSpec.to_dict is written out by hand (ls makes one for every input of every file):
    it must stay what dataclasses.asdict gives, fields added later included."""
    import dataclasses

    for spec in (TensorSpec("bfloat16", [1, "s0", 4], [4, 4, 1], "cuda:1", True, 3), TensorSpec("f32", []),
                 TensorSpec.of(torch.ones(2, 3).t())):
        d = spec.to_dict()
        assert d == dataclasses.asdict(spec) and list(d) == [f.name for f in dataclasses.fields(spec)]
        assert d["shape"] is not spec.shape  # a copy, as asdict makes
