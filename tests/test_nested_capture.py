"""Nested capture: a compile the captured backend starts itself fails, and its piece is dumped.

The split-and-delegate backend (``fixtures/split_backend.py``) splits like Thunder's splitter and
hands the ``relu`` region to Inductor; ``inject_relu_bug_TESTING_ONLY`` makes that piece fail to
compile, a setting the program turned on, so the piece also proves that settings travel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import child_env

import graphdbg
from graphdbg.backends.compiler_config import ENV_NO_CONFIG, ENV_OVERRIDES
from graphdbg.store.manifest import find_dumps

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import torch
import torch._inductor.config
from fixtures.split_backend import SplitBackend

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"


def f(x):
    y = x * 2
    z = torch.relu(y)
    return z + 1


torch.compile(f, backend=SplitBackend(delegate=("relu",)))(torch.randn(4, 8))
"""


@pytest.fixture(autouse=True)
def _no_config_overrides(monkeypatch):
    # the CLI puts --config/--no-config in the environment for its children; keep tests apart
    for name in (ENV_NO_CONFIG, ENV_OVERRIDES):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def piece_dumps(tmp_path_factory):
    """`graphdbg capture -- python prog.py` on the split backend: (dump dir, outer, piece, exit code)."""
    tmp = tmp_path_factory.mktemp("nested")
    prog = tmp / "prog.py"
    prog.write_text(PROGRAM)
    dumps = tmp / "dumps"
    env = child_env(inherit=True)
    proc = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "-o", str(dumps), "--", sys.executable, str(prog)],
                          env=env, capture_output=True, text=True, timeout=600)
    loaded = [graphdbg.load(p) for p in find_dumps(dumps)]
    (outer,) = [d for d in loaded if "parent" not in d.manifest_data]
    (piece,) = [d for d in loaded if "parent" in d.manifest_data]
    return dumps, outer, piece, proc


@pytest.mark.slow
def test_the_failing_piece_is_its_own_dump_linked_to_its_graph(piece_dumps):
    dumps, outer, piece, proc = piece_dumps
    # the user's program fails as it would without graphdbg: Inductor's error, exit code 1
    assert proc.returncode == 1 and "CppCompileError" in proc.stderr
    assert piece.backend == "inductor" and piece.failure_kind == "compile_error"
    assert piece.signature == outer.signature == "CppCompileError: C++ compile error"  # the wrapper unwrapped, as everywhere
    # the piece as Inductor got it: only the relu, and its real input (x * 2, not x)
    assert piece.manifest_data["graph"]["ops"] == {"relu": 1} or "relu" in piece.source
    assert piece.node_count == 3 and outer.node_count == 5
    parent = piece.manifest_data["parent"]
    assert parent["piece"] == "inductor_1" and isinstance(parent["position"], int) and parent["call"] == 1
    assert parent["id"] == outer.id and parent["backend"] == "fixtures.split_backend:SplitBackend"
    assert parent["phase"] == "run"  # compiled lazily on the first call, as Thunder does
    (child,) = outer.manifest_data["children"]
    assert child["piece"] == "inductor_1" and child["id"] == piece.id and (piece.path.parent / child["dir"]) == piece.path
    # the outer backend is recorded as something that can be imported again
    assert outer.backend == "fixtures.split_backend:SplitBackend"
    (x,) = piece.manifest_data["inputs"]
    assert x["kind"] == "tensor" and x["shape"] == [4, 8] and x["stored"]  # its real value
    # the setting the program turned on travels with both dumps
    for d in (outer, piece):
        assert d.manifest_data["config"]["values"]["inductor.cpp.inject_relu_bug_TESTING_ONLY"] == "compile_error"


def test_ls_shows_the_piece_under_its_graph(piece_dumps, cli):
    dumps, outer, piece, _ = piece_dumps
    r = cli("ls", dumps)
    assert r.code == 0, r
    lines = r.out.splitlines()
    row_outer = next(i for i, line in enumerate(lines) if outer.id in line)
    assert "└─ inductor_1: " + piece.id in lines[row_outer + 1]
    data = json.loads(cli("ls", dumps, "--json").out)
    (group,) = [g for g in data["groups"] if g.get("piece")]
    assert Path(group["parent"]) == outer.path
    (whole,) = [g for g in data["groups"] if g.get("children")]  # and back: the graph names its pieces
    assert [Path(p) for p in whole["children"]] == [piece.path]
    rows = {Path(r["path"]): r for r in data["dumps"]}
    assert rows[outer.path]["children"] == whole["children"] and Path(rows[piece.path]["parent"]).resolve() == outer.path.resolve()


def test_show_lists_the_settings_and_the_link(piece_dumps, cli):
    _, outer, piece, _ = piece_dumps
    r = cli("show", piece.path)
    assert r.code == 0
    assert "setting inductor.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'" in r.out
    assert "piece inductor_1" in r.out and outer.id in r.out
    data = json.loads(cli("show", piece.path, "--json").out)
    assert data["parent"]["id"] == outer.id and "inductor.cpp.inject_relu_bug_TESTING_ONLY" in data["config"]["values"]


@pytest.mark.slow
def test_the_piece_replays_as_captured_in_a_fresh_process_and_passes_without_its_settings(piece_dumps, cli):
    _, _, piece, _ = piece_dumps
    r = cli("replay", piece.path, "--json")  # isolated: a fresh process, the settings come from the dump
    data = json.loads(r.out)
    assert r.code == 1 and data["reproduces"] and data["backend"] == "inductor", r
    r = cli("replay", piece.path, "--no-config", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r
    # one setting back on the command line: the failure is back
    r = cli("replay", piece.path, "--no-config", "--config", "inductor.cpp.inject_relu_bug_TESTING_ONLY=compile_error", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("replay", piece.path, "--config", "inductor.no_such_setting=1")
    assert r.code == 2 and "no setting 'no_such_setting'" in r.err


@pytest.mark.slow
def test_minify_on_a_piece_writes_a_repro_that_carries_the_settings(piece_dumps, cli, tmp_path):
    _, _, piece, _ = piece_dumps
    out = tmp_path / "min"
    r = cli("minify", "--no-self-check", piece.path, "-o", out, "--json")
    assert r.code == 0, r
    repro = (out / "repro.py").read_text()
    assert "torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'" in repro
    (minified,) = find_dumps(out)
    assert graphdbg.load(minified).manifest_data["config"]["values"]["inductor.cpp.inject_relu_bug_TESTING_ONLY"] == "compile_error"
    run = subprocess.run([sys.executable, str(out / "repro.py")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "REPRODUCED" in run.stdout, run.stdout + run.stderr[-2000:]


def test_the_outer_backend_from_a_dump_needs_trust(piece_dumps, cli):
    _, outer, _, _ = piece_dumps
    r = cli("replay", outer.path)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r
    assert "fixtures.split_backend:SplitBackend" in r.err and f"graphdbg replay {outer.path} --trust-backend" in r.err
    r = cli("bisect", "nodes", outer.path)
    assert r.code == 2 and "graphdbg bisect nodes" in r.err and "--trust-backend" in r.err


def _refuse_relu(gm, example_inputs):
    if any("relu" in str(n.target) for n in gm.graph.nodes):
        raise NotImplementedError("no kernel for relu")
    return gm.forward


def _refuse_relu_forward(gm, example_inputs):
    if any("relu" in str(n.target) for n in gm.graph.nodes):
        raise NotImplementedError("no aten kernel for relu")
    return gm


def _f(x):
    return torch.relu(x * 2) + 1


@pytest.mark.parametrize("via", ["aot_autograd", "capture"])
def test_aot_autograd_and_captured_callables_inside_a_backend_dump_their_piece(tmp_path, via):
    from torch._dynamo.backends.common import aot_autograd

    from fixtures.split_backend import SplitBackend

    inner = aot_autograd(fw_compiler=_refuse_relu_forward) if via == "aot_autograd" else graphdbg.capture(_refuse_relu, dump_dir=tmp_path)
    be = graphdbg.capture(SplitBackend(delegate=("relu",), via=inner), dump_dir=tmp_path)
    with pytest.raises(NotImplementedError) as bare:
        torch.compile(_f, backend=SplitBackend(delegate=("relu",), via=_refuse_relu if via == "capture" else aot_autograd(fw_compiler=_refuse_relu_forward)))(torch.randn(3))
    torch._dynamo.reset()
    with pytest.raises(NotImplementedError) as wrapped:
        torch.compile(_f, backend=be)(torch.randn(3))
    assert str(wrapped.value) == str(bare.value)  # the user's exception is unchanged
    loaded = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    (piece,) = [d for d in loaded if "parent" in d.manifest_data]
    (outer,) = [d for d in loaded if "parent" not in d.manifest_data]
    assert piece.manifest_data["parent"]["piece"] == "inductor_1" and piece.manifest_data["parent"]["id"] == outer.id
    assert [c["id"] for c in outer.manifest_data["children"]] == [piece.id]
    if via == "capture":
        assert piece.backend == f"{__name__}:_refuse_relu"
        assert piece.signature == "NotImplementedError: no kernel for relu"
    else:  # the aot_autograd backend got the piece; its forward compiler is what failed
        assert piece.signature == "NotImplementedError: no aten kernel for relu"
    assert piece.case().run_eager() is not None


@pytest.mark.slow
def test_capture_inductor_itself_writes_no_piece(tmp_path, monkeypatch):
    """capture("inductor") reaches compile_fx with the graph it was given: one dump, not two."""
    import torch._inductor.config as ic

    with ic.patch({"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"}), pytest.raises(Exception):
        torch.compile(_f, backend=graphdbg.capture("inductor", dump_dir=tmp_path))(torch.randn(3))
    (only,) = find_dumps(tmp_path)
    d = graphdbg.load(only)
    assert "parent" not in d.manifest_data and "children" not in d.manifest_data and d.backend == "inductor"
    assert d.manifest_data["config"]["values"]["inductor.cpp.inject_relu_bug_TESTING_ONLY"] == "compile_error"


PICKY = """
import sys
import torch


def picky(gm, example_inputs):
    if any(getattr(n.target, "__name__", "") == "add" for n in gm.graph.nodes):
        raise NotImplementedError("picky refuses add")
    return gm.forward


print("THE PROGRAM RAN")

if __name__ == "__main__":
    torch.compile(lambda x: x + 1, backend=picky)(torch.randn(3))
"""


@pytest.mark.slow
def test_a_backend_defined_in_the_script_loads_from_it_with_trust(tmp_path, cli):
    prog = tmp_path / "prog.py"
    prog.write_text(PICKY)
    dumps = tmp_path / "dumps"
    r = cli("capture", "-o", dumps, "--", sys.executable, prog)
    assert r.code == 1
    (path,) = find_dumps(dumps)
    d = graphdbg.load(path)
    assert d.backend == "__main__:picky" and d.manifest_data["backend_source"]["script"] == str(prog.resolve())
    r = cli("replay", path)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "__main__:picky" in r.err and str(prog.resolve()) in r.err and f"graphdbg replay {path} --trust-backend" in r.err
    r = cli("replay", path, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    # loaded from the script's definitions: its prints and its __main__ block did not run
    assert f"loaded the backend from {prog.resolve()}" in r.err and "THE PROGRAM RAN" not in r.out + r.err


MODULE_BACKEND = """
def picky(gm, example_inputs):
    raise NotImplementedError("picky refuses everything")
"""


@pytest.mark.slow
def test_a_module_backend_is_recorded_by_module_and_qualname(tmp_path, cli, monkeypatch):
    (tmp_path / "mybackends.py").write_text(MODULE_BACKEND)
    prog = tmp_path / "prog.py"
    prog.write_text("import torch, mybackends\ntorch.compile(lambda x: x * 3, backend=mybackends.picky)(torch.randn(3))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    monkeypatch.syspath_prepend(str(tmp_path))
    dumps = tmp_path / "dumps"
    assert cli("capture", "-o", dumps, "--", sys.executable, prog).code == 1
    (path,) = find_dumps(dumps)
    d = graphdbg.load(path)
    assert d.backend == "mybackends:picky" and d.manifest_data["backend_source"]["name"] == "picky"
    assert cli("replay", path).code == 2
    r = cli("replay", path, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    # compare runs the dump's own backend too, by default
    r = cli("compare", path, "--trust-backend", "--no-isolate", "--json")
    rows = {row["backend"]: row for row in json.loads(r.out)["rows"]}
    assert rows["mybackends:picky"]["status"] == "crash" and rows["mybackends:picky"]["reproduces"]
    assert rows["eager"]["status"] == "pass"
    # or named among others as 'dump'
    r = cli("compare", path, "--backends", "dump", "--trust-backend", "--no-isolate", "--json")
    assert [row["backend"] for row in json.loads(r.out)["rows"]] == ["mybackends:picky"]
    assert cli("compare", path, "--backends", "eager,dump").code == 2  # code the dump names: only with trust


def test_only_json_settings_are_recorded():
    import torch._inductor.config as ic

    from graphdbg.backends.compiler_config import config_diff

    with ic.patch({"max_autotune": True, "post_grad_custom_post_pass": _refuse_relu}):
        diff = config_diff({"triton.cudagraphs": True})
    assert diff["values"]["inductor.max_autotune"] is True and diff["values"]["inductor.triton.cudagraphs"] is True
    assert "inductor.post_grad_custom_post_pass" in diff["skipped"]
    json.dumps(diff)


GPU_STREAM_PIECE = """
import torch
import torch.fx as fx


def stream_piece() -> fx.GraphModule:
    # the piece Thunder's splitter gave Inductor in the Qwen3-Next run: (x, s), s.wait_stream(...)
    g = fx.Graph()
    x, s = g.placeholder("x"), g.placeholder("s")
    current = g.call_function(torch.cuda.current_stream, ())
    g.call_method("wait_stream", (s, current))
    g.output((g.call_function(torch.mul, (x, 2)),))
    return fx.GraphModule(torch.nn.Module(), g)


def split_and_delegate(gm, example_inputs):
    # a stream made outside the piece (in a Thunder region) reaches Inductor as an input
    def run(*args):
        piece = torch._inductor.compile(stream_piece(), [args[0], torch.cuda.Stream()])
        return piece(args[0], torch.cuda.Stream())
    return run


if __name__ == "__main__":
    torch.compile(lambda x: x + 1, backend=split_and_delegate)(torch.randn(8, device="cuda"))
"""


@pytest.mark.gpu
def test_gpu_stream_piece_reproduces_under_inductor(tmp_path, cli):
    """A Stream input reaches an Inductor piece: Inductor's assertion is captured as the piece,
    with the stream described, and replaying the piece under inductor reproduces it."""
    prog = tmp_path / "prog.py"
    prog.write_text(GPU_STREAM_PIECE)
    dumps = tmp_path / "dumps"
    assert cli("capture", "-o", dumps, "--", sys.executable, prog).code == 1
    loaded = [graphdbg.load(p) for p in find_dumps(dumps)]
    (piece,) = [d for d in loaded if "parent" in d.manifest_data]
    assert piece.backend == "inductor" and "KNOWN_TYPES or opaque types" in (piece.signature or ""), piece.signature
    assert [i["kind"] for i in piece.manifest_data["inputs"]] == ["tensor", "stream"]
    assert piece.manifest_data["parent"]["backend"] == "__main__:split_and_delegate"
    r = cli("replay", piece.path, "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r


@pytest.mark.gpu
def test_gpu_thunder_hands_a_piece_to_inductor(tmp_path):
    thunder_dynamo = pytest.importorskip("thunder.dynamo")

    def two_streams(x):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = torch.sin(x) * 2
        torch.cuda.current_stream().wait_stream(s)
        return y + torch.cos(x)

    # "always": every piece Thunder hands to Inductor is dumped, failing or not
    be = graphdbg.capture(thunder_dynamo.ThunderCompiler(), dump_dir=tmp_path, mode="always")
    try:
        torch.compile(two_streams, backend=be)(torch.randn(64, device="cuda"))
    except Exception:
        pass  # the failure is what we came for; the dumps say what it was
    loaded = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    pieces = [d for d in loaded if "parent" in d.manifest_data]
    early = [d.signature for d in loaded if "Failed to find method wait_stream" in (d.signature or "")]
    if not pieces and early:
        # Thunder 0.2.6 on torch 2.11 fails on the stream method before it splits anything off
        # (measured on the H200): there is no piece to dump, and the top-level dump says why.
        pytest.skip("this Thunder fails before handing a piece to Inductor: " + early[0])
    assert pieces, [d.signature for d in loaded]
    assert all(p.backend == "inductor" and p.manifest_data["parent"]["backend"] == "thunder" for p in pieces)
    assert all(p.manifest_data["parent"].get("id") for p in pieces)


@pytest.mark.parametrize("via", ["compile_fx", "standalone_compile"])
def test_inductor_entry_points_inside_a_backend_dump_their_piece(tmp_path, via):
    import torch._inductor.config as ic

    from fixtures.split_backend import SplitBackend

    be = graphdbg.capture(SplitBackend(delegate=("relu",), via=via), dump_dir=tmp_path)
    with ic.patch({"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"}), pytest.raises(Exception) as err:
        torch.compile(_f, backend=be)(torch.randn(3))
    assert type(err.value).__name__ == "InductorError"
    loaded = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    (piece,) = [d for d in loaded if "parent" in d.manifest_data]
    (outer,) = [d for d in loaded if "parent" not in d.manifest_data]
    assert piece.backend == "inductor" and piece.manifest_data["parent"]["piece"] == "inductor_1"
    assert piece.manifest_data["parent"]["id"] == outer.id and outer.manifest_data["children"][0]["id"] == piece.id


def fails_when_run(gm, example_inputs):
    """A forward compiler whose code compiles fine and raises when it runs on a graph with relu
    (a kernel that fails at launch)."""
    if not any("relu" in str(n.target) for n in gm.graph.nodes):
        return gm

    def run(*args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered (injected)")

    return run


@pytest.mark.slow
def test_a_piece_that_compiles_and_fails_when_it_runs_is_dumped_with_that_calls_inputs(tmp_path, cli):
    from torch._dynamo.backends.common import aot_autograd

    from fixtures.split_backend import SplitBackend

    be = graphdbg.capture(SplitBackend(delegate=("relu",), via=aot_autograd(fw_compiler=fails_when_run)), dump_dir=tmp_path)
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="illegal memory access") as err:
        torch.compile(_f, backend=be)(x)
    package = Path(graphdbg.__file__).resolve().parent  # no frame of graphdbg's own code in what the user sees
    assert not any(Path(f.filename).resolve().is_relative_to(package) for f in __import__("traceback").extract_tb(err.value.__traceback__))
    loaded = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    (piece,) = [d for d in loaded if "parent" in d.manifest_data]
    (outer,) = [d for d in loaded if "parent" not in d.manifest_data]
    assert piece.failure_kind == outer.failure_kind == "runtime_error"
    assert piece.signature == "RuntimeError: CUDA error: an illegal memory access was encountered (injected)"
    assert piece.manifest_data["parent"]["piece"] == "inductor_1" and piece.manifest_data["parent"]["id"] == outer.id
    assert [c["id"] for c in outer.manifest_data["children"]] == [piece.id]
    # the piece's input is what the call got: x * 2 from the eager region before it
    (stored,) = [v for v in piece.case().inputs if isinstance(v, torch.Tensor)]
    assert torch.equal(stored, x * 2)
    # and it replays as captured, under the forward compiler the dump names
    r = cli("replay", piece.path, "--trust-backend", "--json")
    data = json.loads(r.out)
    assert r.code == 1 and data["signature"] == piece.signature, r
