"""Streams and other runtime objects come back as what they were (issue 22, item 1).

Dynamo hands a backend ``torch.Stream`` on some paths and ``torch.cuda.Stream`` on others, and
a compiler treats the two apart: a replay that rebuilds the wrong one fails another way. Every
non-tensor value a graph or piece receives is rebuilt with its recorded Python type, in the
place it was (a graph input, or Dynamo's side table, where ``torch.ops.streams.*`` look objects
up by index), and a piece replays with the inputs its compiler was given.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import child_env

import graphdbg
from graphdbg.rebuild.inputs import InputBuilder, NullStream
from graphdbg.store.describe import describe_value
from graphdbg.store.manifest import find_dumps

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "fixtures" / "side_stream_program.py"


def _run_program(device: str, dumps: Path) -> subprocess.CompletedProcess:
    env = child_env(inherit=True)
    return subprocess.run([sys.executable, str(PROGRAM), device, str(dumps)], env=env, capture_output=True,
                          text=True, timeout=900)


def _replays_as_captured(dumps: Path, cli) -> list:
    """Both dumps (the outer graph and its piece), each replayed: exit 1, the captured signature."""
    loaded = [graphdbg.load(p) for p in find_dumps(dumps)]
    outer = [d for d in loaded if "parent" not in d.manifest_data]
    pieces = [d for d in loaded if "parent" in d.manifest_data]
    assert len(outer) == 1 and len(pieces) == 1, [d.path for d in loaded]
    for dump in outer + pieces:
        r = cli("replay", dump.path, "--trust-backend", "--json")
        out = json.loads(r.out)
        assert r.code == 1 and out["reproduces"], (dump.path, dump.signature, r.out[-3000:])
        assert out["signature"].split(" @ ")[0] == dump.signature.split(" @ ")[0], (out["signature"], dump.signature)
    return loaded


@pytest.mark.slow
def test_the_side_stream_program_on_the_cpu_replays_both_dumps_as_captured(tmp_path, cli):
    """The CPU run of the issue's program: the side table's torch.Streams are seated at their
    indices again (``torch.ops.streams.wait_stream(0, 1)`` reads them by index), so the piece
    and the outer graph both fail as the program did."""
    proc = _run_program("cpu", tmp_path / "dumps")
    assert proc.returncode != 0
    loaded = _replays_as_captured(tmp_path / "dumps", cli)
    for dump in loaded:
        assert {o["type"] for o in dump.manifest_data["external_objects"]} == {"torch.Stream"}
        case = dump.case("cpu")
        table = torch._dynamo.graph_bytecode_inputs.index_to_external_object_weakref
        assert all(type(table[o["index"]]()) is torch.Stream for o in dump.manifest_data["external_objects"])
        if "parent" in dump.manifest_data:  # a piece is compiled as it is: its graph keeps its side-table reads
            assert not case.inputs


@pytest.mark.gpu
def test_gpu_the_side_stream_program_replays_both_dumps_with_exit_1_and_the_captured_signature(tmp_path, cli):
    proc = _run_program("cuda", tmp_path / "dumps")
    assert proc.returncode != 0, proc.stdout[-2000:]
    _replays_as_captured(tmp_path / "dumps", cli)


def _refuse_with_types(gm, example_inputs):
    raise TypeError("refused: " + ", ".join(type(v).__module__ + "." + type(v).__qualname__ for v in example_inputs))


NON_TENSORS = {
    "device": torch.device("cpu"),
    "int": 7,
    "float": 0.25,
    "bool": True,
    "str": "tp:0",
    "dtype": torch.bfloat16,
    "none": None,
    "stream": torch.Stream(device="cpu"),
    "event": torch.Event(device="cpu"),
    "tuple": (3, torch.device("cpu")),
}


@pytest.mark.slow
def test_every_non_tensor_kind_the_cpu_makes_comes_back_with_its_type_through_a_dump(tmp_path, cli):
    """A piece handed to a compiler with one of each non-tensor kind: the piece's dump rebuilds
    each with the same type and value, and replays through the same entry point (Inductor)
    with the captured signature."""
    import torch.fx as fx

    names = list(NON_TENSORS)

    def splitter(gm, example_inputs):
        g = fx.Graph()
        x = g.placeholder("x")
        for name in names:
            g.placeholder(name)
        g.output((g.call_function(torch.mul, (x, 2)),))
        piece = fx.GraphModule(torch.nn.Module(), g)
        torch._inductor.compile(piece, [example_inputs[0], *NON_TENSORS.values()])
        return gm

    be = graphdbg.capture(splitter, dump_dir=tmp_path / "dumps")
    with pytest.raises(Exception):
        torch.compile(lambda x: x + 1, backend=be)(torch.randn(4))
    (piece,) = [graphdbg.load(p) for p in find_dumps(tmp_path / "dumps") if "parent" in graphdbg.load(p).manifest_data]
    assert piece.backend == "inductor"
    case = piece.case("cpu")
    rebuilt = case.inputs[1:]
    for (name, value), got in zip(NON_TENSORS.items(), rebuilt):
        assert type(got) is type(value), (name, type(got))
        if name not in ("stream", "event"):
            assert got == value, (name, got)
    assert [type(v) for v in rebuilt[-1]] == [int, torch.device]
    r = cli("replay", piece.path, "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"] and out["signature"] == piece.signature, (piece.signature, r.out[-2000:])


def test_symbolic_sizes_come_back_as_their_hints(tmp_path):
    seen = []

    def refuse(gm, example_inputs):
        seen.extend(type(v) for v in example_inputs)
        raise RuntimeError("no")

    be = graphdbg.capture(refuse, dump_dir=tmp_path / "dumps")
    with pytest.raises(Exception):
        torch.compile(lambda x, n: x * n, backend=be, dynamic=True)(torch.randn(5), 3)
    (path,) = find_dumps(tmp_path / "dumps")
    case = graphdbg.load(path).case("cpu")
    assert torch.SymInt in seen
    assert [v for v in case.inputs if not isinstance(v, torch.Tensor)] == [5, 3]


@pytest.mark.parametrize("recorded", ["torch.Stream", "torch.cuda.streams.Stream"])
def test_a_cuda_stream_on_a_machine_without_one_is_a_null_stream_that_says_what_it_stands_for(recorded):
    builder = InputBuilder(torch.device("cpu"), lambda keys: {}, {})
    desc = {"kind": "stream", "type": recorded, "device": "cuda:3", "device_index": 3, "stream_id": 35}
    value = builder.build("s", desc, {})
    assert isinstance(value, NullStream)
    (line,) = builder.stand_ins
    assert line.kind == "stream" and f"no CUDA here: a no-op NullStream stands in for the {recorded} on cuda:3" in line.detail


def test_descriptors_record_the_exact_type():
    assert describe_value(torch.Stream(device="cpu"))["type"] == "torch.Stream"
    assert describe_value(torch.Event(device="cpu"))["type"] == "torch.Event"
    built = InputBuilder(torch.device("cpu"), lambda keys: {}, {}).build("e", describe_value(torch.Event(device="cpu")), {})
    assert type(built) is torch.Event
