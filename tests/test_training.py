"""Training (issue 17): backward failures captured, gradients and optimizer steps judged,
replayed with --backward, minified and bisected. Small real training loops throughout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import graphdbg
from fixtures.training import (
    BackwardLoweringError,
    backward_crash_backend,
    corrupt_foreach_backend,
    gated_mlp,
    gelu_refusing_backend,
    mlp,
    tiny_gpt2,
    train_steps,
    wrong_gradient_backend,
)


def _only_dump(root: Path) -> Path:
    found = sorted(p.parent for p in root.glob("rank*/*/manifest.json"))
    assert len(found) == 1, found
    return found[0]


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def test_backward_compile_error_is_dumped_with_forward_and_replays(tmp_path, cli):
    model, x = mlp()
    backend = graphdbg.capture(gelu_refusing_backend, tmp_path / "dumps")
    with pytest.raises(BackwardLoweringError, match=r"^cannot lower aten.gelu_backward \(node gelu_backward\)$"):
        train_steps(model, x, backend=backend)

    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert dump.name.startswith("g0-backward-compile_error-")
    assert m["stage"] == "backward" and m["failed"] == "backward"
    assert m["failure"]["exception"]["type"] == "BackwardLoweringError"
    assert m["backend"] == "fixtures.training:refuse_gelu_backward"  # the bw_compiler, for replay
    assert m["backward"]["forward_backend"] == "fixtures.training:gelu_refusing_backend"
    roles = dict(zip([d["node"] for d in m["inputs"]], m["backward"]["roles"]))
    assert roles["tangents_1"] == "tangent" and list(roles.values()).count("saved") >= 3
    assert all(d["stored"] for d in m["inputs"])  # real saved tensors and tangents, not fakes
    assert "gelu_backward" in (dump / "graph.py").read_text()

    # the stored tangent is the real one: d(mean(out^2))/d(out) of the model's output
    loaded = graphdbg.load(dump).case()
    tangent = loaded.inputs[[d["node"] for d in m["inputs"]].index("tangents_1")]
    model2, x2 = mlp()
    out = model2(x2)
    assert torch.allclose(tangent, 2 * out.detach() / out.numel())

    fw = _manifest(dump / "forward")
    assert fw["stage"] == "forward" and fw["backward_dump"] == ".."
    assert fw["backend"] == "fixtures.training:gelu_refusing_backend"
    assert any(d.get("requires_grad") for d in fw["inputs"])

    # the backward graph alone, under its bw_compiler
    r = cli("replay", dump, "--trust-backend", "--no-isolate")
    assert r.code == 1 and "the same failure as captured" in r.out, r
    # forward then backward through the user's backend, with the recorded tangents
    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    assert r.code == 1, r
    out = json.loads(r.out)
    assert out["stage"] == "backward" and out["reproduces"]
    assert "tangents: recorded" in out["stand_ins"]
    # and a backend that can lower it passes, gradients included
    r = cli("replay", dump / "forward", "--backward", "--backend", "aot_eager", "--no-isolate", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r


def test_backward_runtime_error_is_dumped_once_with_what_it_received(tmp_path, cli):
    model, x = mlp()
    backend = graphdbg.capture(backward_crash_backend, tmp_path / "dumps")
    with pytest.raises(RuntimeError, match=r"^backward kernel failed on 5 inputs$"):
        train_steps(model, x, backend=backend)
    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["failure"]["kind"] == "runtime_error" and m["stage"] == "backward"
    assert m["inputs_state"] == "backward_after_failed_call" and all(d["stored"] for d in m["inputs"])
    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r


def test_dynamic_shapes_backward_gets_its_symints_and_one_dump(tmp_path):
    """With symints saved for the backward, AOT first tries the backward inside the forward's
    compile (with fakes) and retries at loss.backward(): the dump is the retry's, with values."""
    model, _ = mlp()
    compiled = torch.compile(model, backend=graphdbg.capture(gelu_refusing_backend, tmp_path / "dumps"), dynamic=True)
    for rows in (4, 4):
        with pytest.raises(BackwardLoweringError):
            compiled(torch.randn(rows, 8)).square().mean().backward()
    m = _manifest(_only_dump(tmp_path / "dumps"))
    assert m["inputs_state"] == "backward_at_compile"
    (sym,) = [d for d, role in zip(m["inputs"], m["backward"]["roles"]) if role == "symint"]
    assert sym["kind"] == "symint" and sym["hint"] == 4 and sym["expr"].startswith("s")


@pytest.mark.slow
def test_backward_dump_minifies_to_the_op_it_cannot_lower(tmp_path, cli):
    model, x = mlp()
    with pytest.raises(BackwardLoweringError):
        train_steps(model, x, backend=graphdbg.capture(gelu_refusing_backend, tmp_path / "dumps"))
    dump = _only_dump(tmp_path / "dumps")
    r = cli("minify", dump, "--trust-backend", "--no-isolate", "-o", tmp_path / "min", "--json")
    assert r.code == 0, r
    small = _only_dump(tmp_path / "min")
    ops = _manifest(small)["graph"]["ops"]
    assert any("gelu_backward" in op for op in ops) and _manifest(small)["graph"]["nodes"] <= 4
    assert _manifest(small)["stage"] == "backward"
    r = cli("replay", small, "--trust-backend", "--no-isolate")
    assert r.code == 1 and "the same failure as captured" in r.out, r


@pytest.mark.slow
def test_wrong_gradients_of_tiny_gpt2_are_dumped_and_replayed(tmp_path, cli):
    model, batch = tiny_gpt2()
    backend = graphdbg.capture(wrong_gradient_backend, tmp_path / "dumps", mode="accuracy")
    train_steps(model, *batch, backend=backend)  # the user's run goes on, with the wrong gradients

    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["failure"]["kind"] == "accuracy" and m["stage"] == "backward"
    assert m["failure"]["signature"] == "accuracy: gradient 0 value"
    assert m["failure"]["mismatches"][0]["max_rel_error"] == pytest.approx(0.5, rel=1e-3)  # scaled by 1.5

    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["status"] == "mismatch" and out["stage"] == "backward", r
    assert all(mm["what"] == "gradient" for mm in out["mismatches"])
    # the forward folder of a backward failure replays with its backward by default; alone it is right
    r = cli("replay", dump / "forward", "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("replay", dump / "forward", "--trust-backend", "--no-backward", "--no-isolate", "--json")
    assert r.code == 0, r


@pytest.mark.slow
def test_gradient_mismatch_minifies(tmp_path, cli):
    model, x = mlp()
    train_steps(model, x, backend=graphdbg.capture(wrong_gradient_backend, tmp_path / "dumps", mode="accuracy"))
    dump = _only_dump(tmp_path / "dumps")
    r = cli("minify", dump, "--trust-backend", "--no-isolate", "-o", tmp_path / "min", "--json")
    assert r.code == 0, r
    small = _only_dump(tmp_path / "min")
    assert _manifest(small)["graph"]["nodes"] < _manifest(dump)["graph"]["nodes"] / 3
    r = cli("replay", small, "--trust-backend", "--no-isolate", "--json")  # still wrong under the bw_compiler it names
    assert r.code == 1 and json.loads(r.out)["status"] == "mismatch", r
    r = cli("replay", small, "--backend", "eager", "--no-isolate", "--json")
    assert r.code == 0, r


def test_correct_backend_gives_no_training_dumps(tmp_path):
    model, batch = tiny_gpt2()
    backend = graphdbg.capture("aot_eager", tmp_path / "dumps", mode="accuracy")
    losses = train_steps(model, *batch, backend=backend)
    assert losses[1] < losses[0]
    assert backend.dumps == []


def test_wrong_optimizer_step_is_caught_by_its_mutations(tmp_path, cli):
    model, x = mlp()
    step_backend = graphdbg.capture(corrupt_foreach_backend, tmp_path / "dumps", mode="accuracy")
    train_steps(model, x, backend=None, compile_step=step_backend)

    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["failure"]["kind"] == "accuracy"
    assert m["failure"]["signature"].startswith("accuracy: attr ")
    assert "params" in m["failure"]["message"] and "after mutation" in m["failure"]["message"]
    assert "_foreach_mul_" in (dump / "graph.py").read_text()

    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"] and out["mismatches"][0]["what"] == "attr", r
    # the same step run as traced is right: the state it starts from is the captured one
    r = cli("replay", dump, "--backend", "eager", "--no-isolate", "--json")
    assert r.code == 0, r


@pytest.fixture
def relu_bug():
    import torch._inductor.config as inductor_config

    def set_bug(value: str | None) -> None:
        inductor_config.cpp.inject_relu_bug_TESTING_ONLY = value

    yield set_bug
    set_bug(None)


def test_inductor_backward_compile_error_is_dumped(tmp_path, relu_bug):
    """The relu exists only in the backward (a straight-through gate): Inductor fails in loss.backward()."""
    relu_bug("compile_error")
    model, x = gated_mlp()
    backend = graphdbg.capture("inductor", tmp_path / "dumps")
    with pytest.raises(Exception, match="CppCompileError") as info:
        train_steps(model, x, backend=backend, steps=1)
    assert type(info.value).__name__ == "InductorError"
    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["stage"] == "backward" and m["backend"] == "inductor" and m["backward"]["compiler"] is None
    assert "torch.ops.aten.relu.default" in (dump / "graph.py").read_text()
    assert (dump / "forward" / "manifest.json").is_file()


@pytest.mark.slow
def test_forward_of_a_backward_failure_replays_minifies_and_repros_with_its_backward(tmp_path, cli, relu_bug):
    """The ``forward`` folder of a backward dump is a dump of its own: ``ls`` lists it, so a user
    replays and minifies it. Its failure is in the backward of a custom autograd.Function (the
    relu of PositiveGrad.backward), which Dynamo can't re-trace (a graph break would run it
    eagerly): replay runs forward then backward, calls the backend on the whole graph, and
    applies the captured compiler settings; minify shrinks it to the Function and writes a
    repro.py that rebuilds the Function's graphs and checks itself."""
    relu_bug("accuracy")
    model, x = gated_mlp()
    train_steps(model, x, backend=graphdbg.capture("inductor", tmp_path / "dumps", mode="accuracy"), steps=1)
    relu_bug(None)  # from here on only the dump's recorded settings carry the bug
    forward = _only_dump(tmp_path / "dumps") / "forward"
    m = _manifest(forward)
    assert m["stage"] == "forward" and m["failed"] == "backward"
    assert m["config"]["values"]["inductor.cpp.inject_relu_bug_TESTING_ONLY"] == "accuracy"
    assert _manifest(forward.parent)["config"]["values"]["inductor.cpp.inject_relu_bug_TESTING_ONLY"] == "accuracy"
    assert _manifest(forward.parent)["failure"]["kind"] == "accuracy" and _manifest(forward.parent)["stage"] == "backward"

    # bisect from the forward: no forward node is off, so the backward graph is bisected, to the relu
    r = cli("bisect", "nodes", forward, "--backward", "--backend", "inductor", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["node"] == "relu" and found["note"].startswith("backward graph of")
    assert found["code"] == "return torch.relu(grad)"

    r = cli("replay", forward, "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"] and out["mismatches"][0]["what"] == "gradient", r
    assert any(s.startswith("re-trace: Dynamo broke the graph") for s in out["stand_ins"]), out["stand_ins"]
    assert cli("replay", forward, "--no-backward", "--json").code == 0  # the forward alone is right

    r = cli("minify", forward, "-o", tmp_path / "min", "--json")
    assert r.code == 0, r  # 0: repro.py was run in a fresh interpreter and showed the failure
    small = _only_dump(tmp_path / "min")
    assert "autograd_function_apply" in (small / "graph.py").read_text()
    assert _manifest(small)["failed"] == "backward" and _manifest(small)["graph"]["nodes"] < m["graph"]["nodes"]
    repro = (tmp_path / "min" / "repro.py").read_text()
    assert "BACKWARD = True" in repro and "class Repro_bwd_body_0" in repro


def test_bisect_backward_of_a_forward_dump_traces_its_backward(tmp_path, cli, relu_bug):
    """A forward captured on its own (mode="always") has no backward dump: its backward graph is
    traced with AOTAutograd and compiled by the backend, prefix by prefix, to the bad relu."""
    model, x = gated_mlp()
    train_steps(model, x, backend=graphdbg.capture("inductor", tmp_path / "dumps", mode="always"), steps=1)
    forward = _only_dump(tmp_path / "dumps")
    relu_bug("accuracy")  # in this process's Inductor only: the graph runs here (--no-isolate), not in a sandboxed child
    r = cli("bisect", "nodes", forward, "--backward", "--backend", "inductor", "--no-isolate", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["node"] == "relu" and found["note"].startswith("backward graph traced by AOTAutograd")


@pytest.mark.gpu
def test_gpu_inductor_triton_backward_bug_captured_replayed_minified(tmp_path, cli):
    """Item 5: a bug in a Triton kernel of the backward only (Inductor's injected relu bug in
    the Triton codegen; the same program on the CPU is right). Captured from loss.backward(),
    replayed as the backward graph alone, minified to the relu."""
    import torch._inductor.config as inductor_config

    model, x = gated_mlp(device="cuda")
    with inductor_config.patch({"triton.inject_relu_bug_TESTING_ONLY": "accuracy"}):
        backend = graphdbg.capture("inductor", tmp_path / "dumps", mode="accuracy")
        train_steps(model, x, backend=backend, steps=1)
        dump = _only_dump(tmp_path / "dumps")
        m = _manifest(dump)
        assert m["stage"] == "backward" and m["failure"]["kind"] == "accuracy"
        assert m["inputs"][0]["device"].startswith("cuda") and m["backend"] == "inductor"

        r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
        out = json.loads(r.out)
        assert r.code == 1 and out["reproduces"] and out["device"].startswith("cuda"), r
        r = cli("minify", dump, "--trust-backend", "--no-isolate", "-o", tmp_path / "min", "--json")
        assert r.code == 0, r
        small_path = _only_dump(tmp_path / "min")
        small = _manifest(small_path)
        assert any("relu" in op for op in small["graph"]["ops"]) and small["graph"]["nodes"] < m["graph"]["nodes"]
    # the minified dump carries the captured settings (the injected bug) and fails on its own
    r = cli("replay", small_path, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("replay", small_path, "--trust-backend", "--no-config", "--json")  # the same graph without the bug: right
    assert r.code == 0, r


@pytest.mark.slow
def test_a_backward_accuracy_dump_replayed_alone_reproduces_its_gradients(tmp_path, cli):
    """The backward graph replayed alone: its outputs are the gradients the capture named, so the
    same difference is REPRODUCED (exit 1), not 'FAILED DIFFERENTLY: output 0 ..., captured gradient 0'."""
    import torch._inductor.config as inductor_config

    model, x = gated_mlp()
    with inductor_config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}):
        backend = graphdbg.capture("inductor", tmp_path / "dumps", mode="accuracy")
        train_steps(model, x, backend=backend, steps=1)
    dump = _only_dump(tmp_path / "dumps")
    assert _manifest(dump)["stage"] == "backward"
    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"], r
