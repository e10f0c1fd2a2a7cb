"""Replaying dumps: backends, outcomes, accuracy, isolation, devices, CLI exit codes."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import FIXTURES, ROOT

import graphdbg
from graphdbg.outcome import Outcome
from graphdbg.store.manifest import find_dumps

BROKEN = "fixtures.programs:broken_transpose_backend"
BAD_REWRITE = "fixtures.programs:bad_rewrite_backend"


@pytest.fixture(autouse=True)
def _tests_importable_in_children(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_eager_and_aot_eager_pass_on_a_real_graph():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    for backend in ("eager", "aot_eager"):
        outcome = case.run(backend)
        assert outcome.status == "pass", outcome
        assert outcome.reference == "eager"  # within tolerance of eager: no float64 run needed


@pytest.mark.slow
def test_inductor_cpp_backend_passes_and_matches_eager():
    outcome = graphdbg.load(FIXTURES / "block_dynamic").case().run("inductor")
    assert outcome.status == "pass", outcome
    assert outcome.compile_s > 0


def test_a_dynamic_shape_dump_reaches_the_backend_as_one_graph_with_the_captured_dims_dynamic():
    """block_dynamic's graph takes Sym(s77), Sym(s27) and x: f32[s77, s27, 32], and reads its
    RMSNorm eps with .item() (Dynamo's tensorified floats). Re-traced statically it broke into
    three graphs; as captured, the backend gets one, with x's first two dims symbolic only."""
    seen = []

    def spy(gm, example_inputs):
        seen.append([n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"])
        return gm.forward

    assert graphdbg.load(FIXTURES / "block_dynamic").case().run(spy).status == "pass"
    (values,) = seen
    x = next(v for v in values if isinstance(v, torch.Tensor) and v.dim() == 3)
    assert [isinstance(d, torch.SymInt) for d in x.shape] == [True, True, False]
    weights = [v for v in values if isinstance(v, torch.Tensor) and v.dim() == 2]
    assert weights and all(not isinstance(d, torch.SymInt) for w in weights for d in w.shape)


@pytest.mark.slow
def test_crash_reproduces_the_captured_signature(cli):
    r = cli("replay", FIXTURES / "block_runtime_error", "--backend", BROKEN, "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["status"] == "crash" and data["stage"] == "run" and data["isolated"]
    assert data["reproduces"] is True
    assert data["signature"] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (?x? and ?x?) @ torch._C._nn.linear"
    assert data["node"] == "linear"


def test_a_run_crash_keeps_the_generated_line_in_its_traceback():
    outcome = graphdbg.load(FIXTURES / "block_runtime_error").case().run(BROKEN)
    assert outcome.status == "crash" and outcome.stage == "run"
    assert '<eval_with_key>' in outcome.traceback and "linear = torch._C._nn.linear(" in outcome.traceback
    assert "replay/run.py" not in outcome.traceback  # the backend's code down, not the replayer's frames


def _linears(dump):
    """The dump's linear nodes, in order, with their weight's shape."""
    from graphdbg.graph.hashing import target_name

    return [(n, tuple(n.args[1].meta["graphdbg_spec"].shape)) for n in dump.printed.graph.nodes
            if target_name(n) == "torch._C._nn.linear"]


@pytest.mark.slow
def test_dynamic_shapes_crash_names_the_linear_that_raised(cli):
    """block_dynamic was captured with dynamic shapes: its graph starts with SymInt inputs and
    reads each RMSNorm's eps with .item(), where the replay's re-trace breaks the graph; the
    traceback also runs through the split graph's code at the line it broke on (an ``item``),
    and fx's GraphModule.__call__ cut the failing graph's frames. The node named is still the
    one whose execution raised."""
    dump = graphdbg.load(FIXTURES / "block_dynamic")
    assert any(n.op == "placeholder" and n.meta["graphdbg_spec"].kind == "symint" for n in dump.printed.graph.nodes)
    # broken_transpose_backend transposes every linear's weight: the first non-square one raises
    expected = next(n for n, shape in _linears(dump) if shape[0] != shape[1])
    r = cli("replay", FIXTURES / "block_dynamic", "--trust-backend", "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["status"] == "crash" and data["stage"] == "run" and data["reproduces"]
    assert (data["node"], data["node_target"]) == (expected.name, "torch._C._nn.linear")
    assert data["signature"].endswith(" @ torch._C._nn.linear")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["transposes_biased_linear_weights", "transposes_biased_linear_weights_called_as_module"])
def test_a_crash_in_a_later_linear_is_named_in_the_dumps_nodes(backend):
    """The failing linear is the MLP's, late in the graph (a static re-trace used to break the
    graph before it, at the norms' .item()); the node is found from the graph's own frames, or
    (when GraphModule.__call__ cut them) by running the graph that raised, on its own inputs,
    under fx.Interpreter; and named as in the dump."""
    dump = graphdbg.load(FIXTURES / "block_dynamic")
    expected = next(n for n, _ in _linears(dump) if len(n.args) > 2 and n.args[2] is not None)
    outcome = dump.case().run(f"backends_for_tests:{backend}")
    assert outcome.status == "crash" and outcome.stage == "run", outcome
    assert (outcome.node, outcome.node_target) == (expected.name, "torch._C._nn.linear")


def _refuse_relu_graphs(gm, example_inputs):
    if any(n.target is torch.relu for n in gm.graph.nodes):
        raise NotImplementedError("no lowering for relu")
    return gm.forward


def test_after_a_graph_break_a_later_graphs_compile_failure_is_a_compile_crash():
    from graphdbg.case import Case

    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.mul, (x, 2))
    nz = g.call_function(torch.nonzero, (y,))  # a data-dependent shape: Dynamo splits the graph here
    g.output((g.call_function(torch.relu, (y,)), nz))
    case = Case(gm=torch.fx.GraphModule(torch.nn.Module(), g), inputs=[torch.randn(3)], device=torch.device("cpu"))
    outcome = case.run(_refuse_relu_graphs)
    assert outcome.status == "crash" and outcome.stage == "compile", outcome
    assert outcome.signature == "NotImplementedError: no lowering for relu"


def test_signature_is_stable_across_runs_and_ranks(tmp_path, monkeypatch):
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    a = case.run("backends_for_tests:crash_on_call")
    b = case.run("backends_for_tests:crash_on_call")
    assert a.status == b.status == "crash"
    assert a.message != b.message  # the raw messages carry an object address
    assert a.signature == b.signature == "ValueError: compiled code failed on 9 inputs at 0x?"


def test_compile_error_is_unwrapped_from_dynamo_and_the_backend_defaults_to_the_dumps(cli):
    r = cli("replay", FIXTURES / "block_compile_error", "--no-isolate", "--trust-backend", "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["backend"] == "fixtures.programs:refuses_gelu"
    assert data["status"] == "crash" and data["stage"] == "compile" and data["reproduces"]
    assert data["signature"] == "NotImplementedError: no lowering for gelu"


def test_mismatch_reports_the_output_and_error_size(cli):
    r = cli("replay", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE, "--no-isolate", "--json")
    assert r.code == 1
    data = json.loads(r.out)
    assert data["status"] == "mismatch" and data["reproduces"]
    (m,) = data["mismatches"]
    assert m["index"] == 0 and m["max_abs_error"] == pytest.approx(data["max_abs_error"]) and m["max_abs_error"] > 1e-3
    r = cli("replay", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE, "--no-isolate", "--no-accuracy", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("backend,signal_name", [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_backend_that_kills_the_process_is_an_outcome(backend, signal_name):
    outcome = graphdbg.load(FIXTURES / "block_compile_error").case().run(f"backends_for_tests:{backend}", isolate=True)
    assert outcome.status == "crash"
    assert outcome.signature == f"Signal {signal_name}"
    assert outcome.exit_signal == signal_name and outcome.isolated


@pytest.mark.slow
def test_a_hang_is_a_timeout_and_the_child_is_killed(cli):
    r = cli("replay", FIXTURES / "block_compile_error", "--backend", "backends_for_tests:hang", "--timeout", "8", "--json")
    assert r.code == 4  # it failed, but not as the dump recorded (a compile error)
    data = json.loads(r.out)
    assert data["status"] == "timeout" and data["signature"] == "Timeout after 8s"


@pytest.mark.slow
def test_unknown_backend_and_missing_thunder_are_errors_not_outcomes(cli, monkeypatch):
    from graphdbg.execution import isolation

    def no_child(*args, **kwargs):
        raise AssertionError("a child was started for a backend this process can name as unknown")

    monkeypatch.setattr(isolation, "ChildGroup", no_child)
    r = cli("replay", FIXTURES / "block_compile_error", "--backend", "no_such_backend")
    assert r.code == 2 and "unknown backend 'no_such_backend'" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("compare", FIXTURES / "block_compile_error", "--backends", "eager,no_such_backend")
    assert r.code == 2 and r.err.strip() == ("graphdbg: error: unknown backend 'no_such_backend'; give a registered name "
                                             "(inductor, aot_eager, eager, ...), or package.module:callable"), r.err
    try:
        import thunder  # noqa: F401
    except ImportError:
        r = cli("replay", FIXTURES / "block_compile_error", "--backend", "thunder")
        assert r.code == 2 and "backend 'thunder' is not available here" in r.err


def test_a_dump_from_a_device_this_machine_lacks(fixture_copy, cli):
    """Captured on cuda:5 (inputs and a device literal); replays on the CPU with the move listed."""
    path = fixture_copy("block_compile_error")
    m = json.loads((path / "manifest.json").read_text())
    for d in m["inputs"]:
        d["device"] = "cuda:5"
    (path / "manifest.json").write_text(json.dumps(m))
    graph = path / "graph.py"
    text = graph.read_text().replace("torch.ones(8, 8, dtype = torch.bool, device = device(type='cpu'))",
                                     "torch.ones(8, 8, dtype = torch.bool, device = device(type='cuda', index=5))")
    assert "index=5" in text
    graph.write_text(text)
    dump = graphdbg.load(path)
    assert dump.captured_device == torch.device("cuda", 5)
    case = dump.case()
    assert case.device == torch.device("cpu")
    assert any(s.kind == "device" for s in case.stand_ins)
    assert case.run("eager").status == "pass"
    if not torch.cuda.is_available():
        r = cli("replay", path, "--device", "cuda:0", "--trust-backend")
        assert r.code == 2 and "device cuda:0 is not available" in r.err


@pytest.mark.slow
def test_compare_table_and_dataframe(cli):
    df = graphdbg.compare(FIXTURES / "block_accuracy", ["eager", BAD_REWRITE], isolate=False)
    assert list(df.backend) == ["eager", BAD_REWRITE]
    assert list(df.status) == ["pass", "mismatch"]
    assert df.max_abs_error.iloc[1] > 1e-3
    r = cli("compare", FIXTURES / "block_accuracy", "--backends", f"eager,{BAD_REWRITE}", "--no-isolate", "--json")
    assert r.code == 1
    assert [row["status"] for row in json.loads(r.out)["rows"]] == ["pass", "mismatch"]


def test_compare_runs_its_columns_in_one_child_and_a_column_that_kills_it_is_its_own_outcome(replay_children):
    """The columns of one compare share a sandboxed child, one after another; a column that
    kills it is that column's outcome, with its own stderr, and the columns after it run in a
    fresh child (a backend that imports user code is the last column of its child anyway)."""
    df = graphdbg.compare(FIXTURES / "block_compile_error", ["eager", "backends_for_tests:segfault", "eager"])
    assert list(df.status) == ["pass", "crash", "pass"], df
    assert list(df.signature)[1] == "Signal SIGSEGV"
    assert len(replay_children) == 2  # eager and the segfault in one child, the second eager in a fresh one
    first, killed, last = df.attrs["outcomes"]
    fault = "Extension modules:"  # the end of the fault handler's report
    assert fault in killed.stderr_tail and fault not in (first.stderr_tail or "") + (last.stderr_tail or "")


def test_outcome_renders_and_round_trips():
    from rich.console import Console

    outcome = graphdbg.load(FIXTURES / "block_accuracy").case().run(BAD_REWRITE)
    console = Console(record=True, width=120)
    console.print(outcome)
    text = console.export_text()
    assert "MISMATCH" in text and "output 0" in text
    assert Outcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome


@pytest.mark.slow
def test_an_isolated_replay_of_a_modified_case_goes_through_a_temporary_dump():
    case = graphdbg.load(FIXTURES / "block_runtime_error").case()
    case.modified = True
    outcome = case.run(BROKEN, isolate=True)
    assert outcome.status == "crash" and outcome.isolated
    assert outcome.signature.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")


@pytest.mark.slow
def test_a_pass_pipeline_where_only_the_second_pass_breaks_numerics(cli):
    dump = FIXTURES / "block_compile_error"
    r = cli("replay", dump, "--backend", "eager", "--passes", "passes_for_tests:clone_output", "--no-isolate", "--json")
    assert r.code == 0, r
    (report,) = json.loads(r.out)["passes"]
    assert report["nodes_after"] == report["nodes_before"] + 1 and report["ops_delta"] == {"Tensor.clone": 1}

    r = cli("replay", dump, "-b", "eager", "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu", "--json")
    assert r.code == 4, r  # a mismatch, where the dump recorded a compile error
    data = json.loads(r.out)
    assert data["status"] == "mismatch"
    first, second = data["passes"]
    assert first["name"] == "passes_for_tests:clone_output" and second["name"] == "passes_for_tests:gelu_to_relu"
    assert second["ops_delta"] == {"torch._C._nn.gelu": -1, "torch.relu": 1}


def test_a_pass_that_raises_is_a_crash_in_that_pass():
    outcome = graphdbg.load(FIXTURES / "block_compile_error").case().run(
        "eager", ["passes_for_tests:clone_output", "passes_for_tests:boom"])
    assert outcome.status == "crash" and outcome.stage == "pass:passes_for_tests:boom"
    assert [p["name"] for p in outcome.passes] == ["passes_for_tests:clone_output", "passes_for_tests:boom"]
    assert outcome.passes[1]["error"]


@pytest.mark.slow
def test_a_post_grad_pass_runs_inside_inductor(cli):
    r = cli("replay", FIXTURES / "block_compile_error", "--backend", "inductor",
            "--passes", "passes_for_tests:count_nodes@post_grad", "--no-isolate", "--json")
    assert r.code == 0, r
    (report,) = json.loads(r.out)["passes"]
    assert report["stage"] == "post_grad" and report["result"] == report["nodes_before"] > 10
    r = cli("replay", FIXTURES / "block_compile_error", "--backend", "eager", "--passes", "passes_for_tests:count_nodes@post_grad")
    assert r.code == 2 and "post_grad passes run inside Inductor" in r.err


@pytest.mark.slow
def test_a_real_cuda_dump_with_streams_replays_on_the_cpu(cli):
    """Captured on an H200 (torch 2.11) where Thunder failed on a two-stream block."""
    dump = graphdbg.load(FIXTURES / "cuda_streams_thunder")
    assert dump.captured_device == torch.device("cuda", 0)
    assert dump.signature == "AssertionError: Failed to find method wait_stream"
    streams = [d for d in dump.manifest_data["external_objects"] if d["kind"] == "stream"]
    assert len(streams) == 2 and {d["device"] for d in streams} == {"cuda:0"}
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without CUDA")
    case = dump.case()
    kinds = sorted(s.kind for s in case.stand_ins)
    assert kinds == ["device", "stream", "stream"]
    r = cli("replay", FIXTURES / "cuda_streams_thunder", "--backend", "aot_eager", "--json")
    assert r.code == 0, r
    assert sum("NullStream" in s for s in json.loads(r.out)["stand_ins"]) == 2


def _capture_accuracy(dump_dir, backend):
    from fixtures import programs

    model, x = programs.tiny_block()
    with torch.no_grad():
        torch.compile(model, backend=graphdbg.capture(backend, dump_dir=dump_dir, mode="accuracy"))(x)
    torch._dynamo.reset()
    return find_dumps(dump_dir)


def test_an_accuracy_replay_reproduces_only_the_same_kind_of_difference(tmp_path, cli):
    """Captured: GELU's output 1% too large (off by about 0.007). A replay under a backend with the
    same bug a little larger reproduces it; one that adds 0.5 there, or makes NaN there, is
    another bug on the same output: FAILED DIFFERENTLY, exit 4, saying what differs."""
    import seeded_backends

    (path,) = _capture_accuracy(tmp_path / "dumps", seeded_backends.scales_gelu)
    [captured] = json.loads((path / "manifest.json").read_text())["failure"]["mismatches"]
    assert captured["index"] == 0 and captured["reason"] == "value" and 0.001 < captured["max_abs_error"] < 0.05
    assert captured["elements"] == 512 and 0 < captured["off"] <= 512

    same = cli("replay", path, "--backend", "seeded_backends:scales_gelu_more", "--no-isolate")
    assert same.code == 1 and same.out.startswith("REPRODUCED: output 0 off by "), same
    # where it starts: the node the backend rewrote, what bisect nodes finds, with its source line
    assert "it starts where the backend rewrote node gelu (" in same.out.splitlines()[0] and "programs.py:59" in same.out

    shifted = cli("replay", path, "--backend", "seeded_backends:shifts_gelu", "--no-isolate", "--json")
    data = json.loads(shifted.out)
    assert shifted.code == 4 and data["status"] == "mismatch" and data["reproduces"] is False, shifted
    assert data["mismatches"][0]["max_abs_error"] > 10 * captured["max_abs_error"]
    assert data["diverges_at"]["replaced"] == "gelu" and data["diverges_at"]["source"].endswith("programs.py:59")
    shifted = cli("replay", path, "--backend", "seeded_backends:shifts_gelu", "--no-isolate")
    first = shifted.out.splitlines()[0]
    assert first == (f"FAILED DIFFERENTLY: output 0 off by {data['mismatches'][0]['max_abs_error']:.3g}, "
                     f"captured {captured['max_abs_error']:.3g}"), shifted

    nan = cli("replay", path, "--backend", "seeded_backends:nan_gelu", "--no-isolate")
    assert nan.code == 4 and nan.out.startswith("FAILED DIFFERENTLY: output 0: nan differs"), nan


def test_an_accuracy_dump_without_the_size_of_its_difference_keeps_any_mismatch(cli):
    """A dump written before graphdbg recorded how much was off: any mismatch of its outputs reproduces it."""
    r = cli("replay", FIXTURES / "block_accuracy", "--backend", "seeded_backends:shifts_gelu", "--no-isolate")
    assert r.code == 1 and r.out.startswith("REPRODUCED: output 0 off by "), r


def test_one_options_object_is_made_once_and_passed_down():
    from graphdbg.minify import bisect_nodes

    dump = graphdbg.load(FIXTURES / "block_accuracy")
    loose = graphdbg.ReplayOptions(isolate=False, rtol=10.0, atol=10.0)  # wide enough to forgive the bad rewrite
    assert dump.case().run(BAD_REWRITE, options=loose).status == "pass"
    # keywords are fields over the object; a changed copy leaves the first as it was
    assert dump.case().run(BAD_REWRITE, options=loose, rtol=1e-5, atol=1e-5).status == "mismatch"
    assert dump.case().run(BAD_REWRITE, options=loose.but(rtol=None, atol=None)).status == "mismatch"
    assert loose.rtol == 10.0
    assert bisect_nodes(dump, BAD_REWRITE, options=loose).node is None
    assert bisect_nodes(dump, BAD_REWRITE).node is not None
