"""capture(): dumps on real failures of real programs, and stays out of the user's way."""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from conftest import ROOT, child_env, run_graphdbg

import graphdbg
from fixtures import programs
from graphdbg.judge.signature import normalize_message
from graphdbg.store.manifest import SCHEMA_VERSION, find_dumps


def _call(fn, *args):
    try:
        with torch.no_grad():
            return fn(*args), None
    except Exception as e:  # noqa: BLE001 - we compare what the user sees
        return None, e


def _only_dump(dump_dir):
    dumps = find_dumps(dump_dir)
    assert len(dumps) == 1, dumps
    return graphdbg.load(dumps[0])


def test_compile_error_is_dumped_and_the_user_error_is_unchanged(tmp_path):
    model, x = programs.tiny_block()
    backend = programs.refuses_gelu
    _, bare = _call(torch.compile(model, backend=backend), x)
    torch._dynamo.reset()
    _, wrapped = _call(torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path)), x)

    assert type(wrapped) is type(bare)
    assert str(wrapped) == str(bare)
    # the backend's own frame is still in the traceback
    frames = traceback.extract_tb(wrapped.__cause__.__traceback__ if wrapped.__cause__ else wrapped.__traceback__)
    assert any(f.name == "unsupported_op" for f in frames)

    dump = _only_dump(tmp_path)
    m = dump.manifest_data
    assert m["schema_version"] == SCHEMA_VERSION
    assert dump.failure_kind == "compile_error"
    assert dump.error_type == "NotImplementedError"
    assert "no lowering for gelu" in dump.message
    assert "unsupported_op" in m["failure"]["exception"]["traceback"]
    assert m["env"]["torch"] == torch.__version__ and m["env"]["python"]
    assert m["dist"] == {**m["dist"], "rank": 0, "world_size": 1}
    assert m["graph"]["nodes"] == len(dump.printed.graph.nodes)
    assert m["graph"]["ops"]["torch._C._nn.gelu"] == 1
    assert m["inputs_state"] == "at_compile"
    # parameters are inputs of a Dynamo graph, and their real values are stored
    params = [d for d in m["inputs"] if d.get("parameter")]
    assert len(params) == len(list(model.parameters()))
    case = dump.case()
    weight = dict(model.named_parameters())["attn.qkv.weight"]
    assert any(isinstance(v, torch.Tensor) and v.shape == weight.shape and torch.equal(v, weight) for v in case.inputs)
    # the dumped graph, replayed eagerly, computes what the model computes
    torch.testing.assert_close(case.run_eager()[0], model(x))
    # and the backend, given the replayed graph, fails the same way
    with pytest.raises(NotImplementedError, match="no lowering for gelu"):
        backend(case.gm, case.inputs)


def test_graph_py_carries_annotations_and_source_lines(tmp_path):
    model, x = programs.tiny_block()
    _call(torch.compile(model, backend=graphdbg.capture(programs.refuses_gelu, dump_dir=tmp_path)), x)
    dump = _only_dump(tmp_path)
    text = dump.source
    assert 'f32[2, 8, 32][256, 32, 1]cpu' in text  # dtype, shape, stride, device
    assert "programs.py" in text and "# File:" in text and "code: return self.down(F.gelu(self.up(x)))" in text
    nodes = dump.nodes()
    gelu = nodes[nodes.target == "torch._C._nn.gelu"].iloc[0]
    assert gelu.source.endswith(f"programs.py:{_line_of('return self.down(F.gelu(self.up(x)))')}")
    assert gelu.module == "mlp"
    assert nodes[nodes.name == "linear"].iloc[0].module == "attn.qkv"
    assert list(nodes.columns) == ["name", "op", "target", "dtype", "shape", "source", "code", "module", "failed"]


def _line_of(code: str) -> int:
    lines = (ROOT / "fixtures" / "programs.py").read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if code in line)


def test_runtime_error_of_compiled_code(tmp_path):
    model, x = programs.tiny_block()
    _, bare = _call(torch.compile(model, backend=programs.broken_transpose_backend), x)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=graphdbg.capture(programs.broken_transpose_backend, dump_dir=tmp_path))
    _, wrapped = _call(compiled, x)
    assert type(wrapped) is type(bare) is RuntimeError and str(wrapped) == str(bare)
    # a second failing call does not write a second dump
    _call(compiled, x)
    dump = _only_dump(tmp_path)
    assert dump.failure_kind == "runtime_error"
    assert dump.signature == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (?x? and ?x?)"
    assert dump.manifest_data["inputs_state"] == "after_failed_call"
    case = dump.case()
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        programs.broken_transpose_backend(case.gm, case.inputs)(*case.inputs)


GRAPHDBG_DIR = str(Path(graphdbg.__file__).resolve().parent)


def _frames(e):
    """(file, function) of every frame of ``e`` and of its causes; fx's generated code by kind only."""
    out = []
    while e is not None:
        for f in traceback.extract_tb(e.__traceback__):
            out.append(("<eval_with_key>" if f.filename.startswith("<eval_with_key>") else f.filename, f.name))
        e = e.__cause__
    return out


@pytest.mark.parametrize("backend", [programs.broken_transpose_backend, programs.refuses_gelu],
                         ids=["runtime_error", "compile_error"])
def test_the_users_traceback_has_no_graphdbg_frame(tmp_path, capfd, backend):
    model, x = programs.tiny_block()
    _, bare = _call(torch.compile(model, backend=backend), x)
    bare_err = capfd.readouterr().err
    torch._dynamo.reset()
    _, wrapped = _call(torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path)), x)
    wrapped_err = capfd.readouterr().err
    assert len(find_dumps(tmp_path)) == 1
    assert type(wrapped) is type(bare) and str(wrapped) == str(bare)
    if sys.version_info >= (3, 11):
        # the very frames the program shows without graphdbg: none of graphdbg's, and the
        # backend's or its generated code's line where the error was raised
        assert _frames(wrapped) == _frames(bare)
        assert not [f for f in _frames(wrapped) if f[0].startswith(GRAPHDBG_DIR)]
    else:  # a bare raise keeps the wrapper's frame on 3.10; pytest hides it
        tb = wrapped.__cause__.__traceback__ if wrapped.__cause__ else wrapped.__traceback__
        ours = [t.tb_frame for t in _walk(tb) if t.tb_frame.f_code.co_filename.startswith(GRAPHDBG_DIR)]
        assert ours and all(f.f_locals.get("__tracebackhide__") for f in ours)
    # and no report on stderr that the program without graphdbg doesn't print (fx's, when its
    # generated frames are cut), only graphdbg's own line about the dump
    assert ("Call using an FX-traced Module" in wrapped_err) == ("Call using an FX-traced Module" in bare_err)


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_accuracy_mode_dumps_wrong_numbers_and_returns_them_unchanged(tmp_path):
    model, x = programs.tiny_block()
    expected_wrong, _ = _call(torch.compile(model, backend=programs.bad_rewrite_backend), x)
    torch._dynamo.reset()
    got, err = _call(torch.compile(model, backend=graphdbg.capture(programs.bad_rewrite_backend, dump_dir=tmp_path, mode="accuracy")), x)
    assert err is None
    assert torch.equal(got, expected_wrong)
    dump = _only_dump(tmp_path)
    assert dump.failure_kind == "accuracy"
    (mismatch,) = dump.manifest_data["failure"]["mismatches"]
    assert mismatch["index"] == 0 and mismatch["reason"] == "value" and mismatch["max_abs_error"] > 1e-3
    assert dump.manifest_data["inputs_state"] == "before_call"
    torch.testing.assert_close(dump.case().run_eager()[0], model(x))


def test_accuracy_mode_is_quiet_when_the_backend_is_right(tmp_path):
    model, x = programs.tiny_block()
    got, err = _call(torch.compile(model, backend=graphdbg.capture("eager", dump_dir=tmp_path, mode="accuracy")), x)
    assert err is None
    torch.testing.assert_close(got, model(x))
    assert not tmp_path.exists() or find_dumps(tmp_path) == []


def test_always_mode_dumps_every_graph(tmp_path):
    def two_graphs(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos() + 1

    be = graphdbg.capture("eager", dump_dir=tmp_path, mode="always")
    out, err = _call(torch.compile(two_graphs, backend=be), torch.randn(4))
    assert err is None and out.shape == (4,)
    dumps = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    assert sorted(d.failure_kind for d in dumps) == ["captured", "captured"]
    assert {d.id.split("-")[0] for d in dumps} == {"g0", "g1"}
    assert len(be.dumps) == 2


def test_success_path_is_transparent_under_inductor(tmp_path, capfd):
    """Accuracy mode too: Inductor's compiled function is boxed, yet Dynamo calls it with positional inputs."""
    model, x = programs.tiny_block()
    out, err = _call(torch.compile(model, backend=graphdbg.capture("inductor", dump_dir=tmp_path, mode="accuracy")), x)
    assert err is None
    assert "graphdbg:" not in capfd.readouterr().err  # the eager reference ran, nothing was skipped
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    assert not tmp_path.exists() or find_dumps(tmp_path) == []


def test_dynamic_shapes_record_symints(tmp_path):
    model, x = programs.tiny_block()
    _call(torch.compile(model, backend=graphdbg.capture(programs.broken_transpose_backend, dump_dir=tmp_path), dynamic=True), x)
    dump = _only_dump(tmp_path)
    syms = [d for d in dump.manifest_data["inputs"] if d["kind"] == "symint"]
    assert syms and all(d["expr"].startswith("s") for d in syms)
    assert sorted(d["hint"] for d in syms) == sorted({2, 8})
    (x_desc,) = [d for d in dump.manifest_data["inputs"] if d["name"] == "L_x_"]
    assert x_desc["shape"] == [2, 8, 32]  # the real value's shape
    assert [type(dim) for dim in x_desc["symbolic_shape"]] == [str, str, int]  # and Dynamo's view of it
    case = dump.case()
    assert sorted(v for v in case.inputs if isinstance(v, int)) == [2, 8]
    torch.testing.assert_close(case.run_eager()[0], model(x))


def test_budget_keeps_small_inputs_and_statistics_of_the_rest(tmp_path):
    model, x = programs.tiny_block()
    _call(torch.compile(model, backend=graphdbg.capture(programs.refuses_gelu, dump_dir=tmp_path, budget_bytes=4096)), x)
    dump = _only_dump(tmp_path)
    inputs = [d for d in dump.manifest_data["inputs"] if d["kind"] == "tensor"]
    stored = [d for d in inputs if d["stored"]]
    skipped = [d for d in inputs if not d["stored"]]
    assert stored and skipped
    assert dump.manifest_data["stored_bytes"] <= 4096
    big = max(skipped, key=lambda d: d["shape"][0] * (d["shape"][1] if len(d["shape"]) > 1 else 1))
    assert big["reason"] == "over the size budget"
    assert set(big["stats"]) >= {"min", "max", "mean", "std", "nan", "inf"}
    case = dump.case()
    regenerated = {s.name for s in case.stand_ins if s.kind == "regenerated"}
    assert regenerated == {d["node"] for d in skipped}
    value = case.inputs[big["index"]]
    assert value.shape == tuple(big["shape"])
    assert abs(float(value.mean()) - big["stats"]["mean"]) < 0.05
    assert float(value.min()) >= big["stats"]["min"] and float(value.max()) <= big["stats"]["max"]


def test_non_tensor_inputs_are_described(tmp_path):
    """A CPU stream built inside the graph is fetched by index from Dynamo's side table."""

    def with_stream(x, scale: float):
        s = torch.Stream(device="cpu")
        with s:
            y = x * scale
        return y + 1

    be = graphdbg.capture(programs.refuses_add, dump_dir=tmp_path)
    _call(torch.compile(with_stream, backend=be, dynamic=False), torch.randn(3), 2.5)
    dump = _only_dump(tmp_path)
    (ext,) = dump.manifest_data["external_objects"]
    assert ext["kind"] == "stream" and ext["device"] == "cpu" and ext["used_by"]
    assert "get_external_object_by_index" in dump.source
    case = dump.case()
    # replay passes the recreated stream in as an input: Dynamo's side table is gone by now
    assert isinstance(case.inputs[-1], torch.Stream) and len(case.inputs) == len(dump.manifest_data["inputs"]) + 1
    assert "get_external_object_by_index" not in {getattr(n.target, "__name__", "") for n in case.gm.graph.nodes}
    torch.testing.assert_close(case.run_eager()[0], case.inputs[0] * 2.5 + 1)
    # and compiled again, Dynamo takes the stream input back into its side table
    assert case.run("eager").status == "pass"
    outcome = case.run(dump.backend)
    assert dump.backend == "fixtures.programs:refuses_add"
    assert outcome.status == "crash" and outcome.reproduces(dump)


def test_descriptors_of_things_that_cannot_travel():
    from graphdbg.store.describe import describe_value

    assert describe_value(torch.device("cuda", 5)) == {"kind": "device", "value": "cuda:5"}
    assert describe_value(torch.bfloat16) == {"kind": "dtype", "value": "bfloat16"}
    assert describe_value(None) == {"kind": "none"}
    assert describe_value(float("inf")) == {"kind": "float", "value": "inf"}
    assert describe_value(torch.Stream(device="cpu"))["kind"] == "stream"
    opaque = describe_value(object())
    assert opaque["kind"] == "opaque" and opaque["type"] == "builtins.object"


def test_process_group_descriptor(tmp_path):
    import torch.distributed as dist

    from graphdbg.store.describe import describe_value

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        d = describe_value(dist.group.WORLD)
        assert d["kind"] == "process_group" and d["rank"] == 0 and d["size"] == 1 and d["ranks"] == [0]
        from graphdbg.store.capture_environment import distributed_info

        info = distributed_info()
        assert info["source"] == "torch.distributed" and info["backend"] == "gloo"
    finally:
        dist.destroy_process_group()


def test_failing_to_dump_costs_one_line_and_keeps_the_user_error(tmp_path, capfd):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the dump folder should go")
    model, x = programs.tiny_block()
    _, err = _call(torch.compile(model, backend=graphdbg.capture(programs.refuses_gelu, dump_dir=blocker)), x)
    assert "no lowering for gelu" in str(err)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("graphdbg:")]
    assert len(lines) == 1 and "could not write a dump" in lines[0]


def test_rank_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    model, x = programs.tiny_block()
    _call(torch.compile(model, backend=graphdbg.capture(programs.refuses_gelu, dump_dir=tmp_path)), x)
    (path,) = find_dumps(tmp_path)
    assert path.parent.name == "rank5"
    m = json.loads((path / "manifest.json").read_text())
    assert (m["dist"]["rank"], m["dist"]["local_rank"], m["dist"]["world_size"], m["dist"]["source"]) == (5, 1, 8, "env")


WRITER = """
import os, sys, torch, graphdbg
from fixtures import programs
model, x = programs.tiny_block(seed=int(sys.argv[2]))
for i in range(3):
    def refuses(gm, example_inputs):  # a failure of its own (the same one again would not be written again)
        raise NotImplementedError("no lowering for " + "abcd"[int(sys.argv[3])] + "xyz"[i])
    be = graphdbg.capture(refuses, dump_dir=sys.argv[1])
    torch._dynamo.reset()
    try:
        torch.compile(model, backend=be)(x)
    except Exception:
        pass
"""


@pytest.mark.slow
def test_concurrent_writers_never_collide(tmp_path):
    """Four processes, two of them claiming the same rank, each dumping three failures at once."""
    procs = []
    for i, rank in enumerate((0, 1, 2, 2)):
        env = {"RANK": str(rank), "WORLD_SIZE": "3", "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(rank), str(i)],
                                      env={**__import__("os").environ, **env}, stderr=subprocess.PIPE, text=True))
    for p in procs:
        p.communicate(timeout=300)
    dumps = find_dumps(tmp_path)
    assert len(dumps) == 12
    assert len({d.name for d in dumps if d.parent.name == "rank2"}) == 6
    assert not [p for p in tmp_path.rglob(".tmp-*")]
    for d in dumps:
        graphdbg.load(d).case()  # every one complete and loadable


SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
from fixtures import programs
model, x = programs.tiny_block()
backend = sys.argv[1]
backend = programs.broken_transpose_backend if backend == "broken" else backend
out = torch.compile(model, backend=backend)(x)
print("finished", tuple(out.shape))
"""


@pytest.mark.slow
def test_capture_command_wraps_an_unmodified_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    dump_dir = tmp_path / "dumps"
    cmd = [sys.executable, "-m", "graphdbg.ui.cli", "capture", "--dump-dir", str(dump_dir), "--", sys.executable, str(script)]
    env = child_env()
    failed = subprocess.run([*cmd, "broken"], env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in failed.stderr
    (path,) = find_dumps(dump_dir)
    assert graphdbg.load(path).backend == "__main__:broken_transpose_backend" or "broken_transpose" in graphdbg.load(path).backend
    assert "--mode accuracy" not in failed.stderr  # a dump was written: no hint
    ok = subprocess.run([*cmd, "eager"], env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "finished (2, 8, 32)" in ok.stdout
    assert len(find_dumps(dump_dir)) == 1
    # a run that wrote no dump says, last, that silent errors need accuracy mode
    assert ok.stderr.strip().splitlines()[-1].startswith("graphdbg: no compile or run-time error was captured")
    assert "--mode accuracy" in ok.stderr


def test_an_instance_backend_fails_with_the_same_message(tmp_path):
    class Compiler:  # like thunder.dynamo.ThunderCompiler: an object, no __name__
        def __call__(self, gm, example_inputs):
            raise AssertionError("Failed to find method wait_stream")

    model, x = programs.tiny_block()
    _, bare = _call(torch.compile(model, backend=Compiler()), x)
    torch._dynamo.reset()
    _, wrapped = _call(torch.compile(model, backend=graphdbg.capture(Compiler(), dump_dir=tmp_path)), x)
    # the message names the user's backend object; two instances differ only in their address
    assert type(bare) is type(wrapped)
    assert "Compiler object at 0x" in str(wrapped)
    assert normalize_message(str(bare)) == normalize_message(str(wrapped))


def test_the_same_failure_captured_again_counts_in_its_dump_and_another_gets_its_own(tmp_path, capsys, cli):
    """One dump per distinct failure: the same rank, graph, kind and signature (and, for accuracy,
    the same kind of difference) is counted in the dump it has; anything else gets a folder."""
    import seeded_backends

    def run(backend, mode="error"):
        model, x = programs.tiny_block()
        _call(torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path, mode=mode)), x)
        torch._dynamo.reset()
        return sorted(p.name for p in find_dumps(tmp_path))

    first = run(programs.refuses_gelu)
    assert run(programs.refuses_gelu) == first == ["g0-compile_error-3b0e0256"]
    manifest = json.loads((tmp_path / "rank0" / first[0] / "manifest.json").read_text())
    assert manifest["failure"]["seen"] == 2 and manifest["failure"]["last_seen"]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("graphdbg:")]
    assert lines[-1].endswith(f"the same failure as {tmp_path / 'rank0' / first[0]}, captured 2 times (no new dump)"), lines
    assert graphdbg.load(tmp_path / "rank0" / first[0]).failure_kind == "compile_error"  # still a dump that loads
    assert "captured 2 times, last at " in cli("show", tmp_path / "rank0" / first[0]).out

    assert len(run(programs.broken_transpose_backend)) == 2  # another failure of the same graph
    assert len(run(seeded_backends.scales_gelu, "accuracy")) == 3
    assert len(run(seeded_backends.scales_gelu_more, "accuracy")) == 3  # the same kind of difference
    assert len(run(seeded_backends.shifts_gelu, "accuracy")) == 4  # off by far more: another bug


def _quickstart_backend():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mybackend", ROOT / "examples" / "quickstart" / "mybackend.py")
    mybackend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mybackend)
    return mybackend.my_backend


@pytest.mark.parametrize("kind", ["runtime_error", "compile_error"])
def test_the_node_a_graph_failed_in_is_recorded_and_shown(tmp_path, cli, kind):
    """The quickstart's bug (every linear weight transposed) on a transformer block fails in
    attention's first linear, the first non-square weight: when the generated code runs
    (the quickstart's backend), or at compile time in a backend that checks its rewrite by
    running it (ShapeProp). The dump records that node; show, show --json and Dump.nodes()
    name it, with the user's source line."""
    import seeded_backends

    backend = _quickstart_backend() if kind == "runtime_error" else seeded_backends.checks_its_rewrite
    model, x = programs.tiny_block()
    _, err = _call(torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path)), x)
    assert err is not None
    dump = _only_dump(tmp_path)
    assert dump.failure_kind == kind
    node = dump.manifest_data["failure"]["node"]
    nodes = dump.nodes()
    [row] = nodes[nodes.failed].to_dict(orient="records")
    assert row["name"] == node and row["target"] == "torch._C._nn.linear" and row["source"].endswith("programs.py:43")
    shown = cli("show", dump.path)
    assert shown.code == 0 and f"failing node: {node} = torch._C._nn.linear at " in shown.out, shown
    assert "programs.py:43  " + (ROOT / "fixtures" / "programs.py").read_text().splitlines()[42].strip() in shown.out
    data = json.loads(cli("show", dump.path, "--json").out)
    assert [r["name"] for r in data["nodes_table"] if r["failed"]] == [node]


def _fails_when_run(gm, example_inputs):
    """An AOTAutograd backend whose compiled forward raises when it runs."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def compiled(gm, example_inputs):
        def run(*args):
            raise RuntimeError("attention kernel failed")

        return make_boxed_func(run)

    return aot_autograd(fw_compiler=compiled)(gm, example_inputs)


def test_the_users_traceback_through_aot_autograd_is_the_plain_runs_frame_for_frame(tmp_path):
    """aot_autograd returns its code under torch._dynamo.disable, which Dynamo unwraps when it
    wraps it again: a capture's wrapper must not add a second ``eval_frame.py ... _fn`` frame.
    nn.MultiheadAttention's fast path (eval, no_grad), as a served model runs it."""
    torch.manual_seed(0)
    mha, x = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval(), torch.randn(2, 5, 16)

    def call(backend):
        torch._dynamo.reset()
        with torch.no_grad(), pytest.raises(RuntimeError, match="attention kernel failed") as raised:
            torch.compile(mha, backend=backend)(x, x, x, need_weights=False)
        return raised.value

    bare = call(_fails_when_run)
    wrapped = call(graphdbg.capture(_fails_when_run, dump_dir=tmp_path))
    assert len(find_dumps(tmp_path)) == 1
    if sys.version_info >= (3, 11):
        assert _frames(wrapped) == _frames(bare)


@pytest.mark.slow
def test_capture_command_honours_graphdbg_dump_dir(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(
        "import torch\n"
        "def bad(gm, inputs):\n    raise NotImplementedError('no lowering for this graph')\n"
        "f = torch.compile(lambda x: torch.relu(x) + 1, backend=bad)\n"
        "try:\n    f(torch.randn(4))\nexcept Exception as e:\n    print('failed as expected:', type(e).__name__)\n")
    where = tmp_path / "from_env"
    r = run_graphdbg("capture", "--", sys.executable, str(program), cwd=tmp_path, GRAPHDBG_DUMP_DIR=str(where))
    assert r.returncode == 0 and "failed as expected" in r.stdout, r
    manifests = list(where.glob("rank*/*/manifest.json"))
    assert len(manifests) == 1 and not (tmp_path / "graphdbg_dumps").exists()
    assert json.loads(manifests[0].read_text())["failure"]["kind"] == "compile_error"
