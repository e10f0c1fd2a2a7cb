"""On a CUDA machine: Inductor (Triton) and Thunder replays, and streams recreated on the GPU.

Run them all with the README's GPU command (scripts/gpu-tests.sh on the GPU machine).
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import FIXTURES

import graphdbg
from fixtures import programs
from graphdbg.store.manifest import find_dumps

pytestmark = pytest.mark.gpu


def _compile_and_fail(model, x, backend, dump_dir, mode="error"):
    torch._dynamo.reset()
    error = None
    try:
        with torch.no_grad():
            torch.compile(model, backend=graphdbg.capture(backend, dump_dir=dump_dir, mode=mode))(x)
    except Exception as e:  # noqa: BLE001
        error = e
    torch._dynamo.reset()
    return error


def test_cuda_dump_replays_under_triton_inductor_and_reproduces_the_backend_bug(tmp_path, cli):
    model, x = programs.tiny_block()
    err = _compile_and_fail(model.cuda(), x.cuda(), programs.broken_transpose_backend, tmp_path)
    assert isinstance(err, RuntimeError)
    (path,) = find_dumps(tmp_path)
    dump = graphdbg.load(path)
    assert dump.captured_device == torch.device("cuda", 0) and "H" in dump.manifest_data["env"]["device_name"]
    r = cli("replay", path, "--backend", "inductor", "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["status"] == "pass" and data["device"] == "cuda:0", r
    r = cli("replay", path, "--trust-backend", "--json")
    data = json.loads(r.out)
    assert r.code == 1 and data["reproduces"] and data["node"] == "linear", r
    # the same dump on the CPU: inputs move, the failure stays the same
    r = cli("replay", path, "--device", "cpu", "--trust-backend", "--json")
    assert json.loads(r.out)["signature"] == data["signature"]


def test_compare_of_a_cuda_dump_runs_its_backends_one_after_another_in_one_child(tmp_path, cli, replay_children):
    """compare's columns share one sandboxed child on the GPU too: eager, aot_eager and Triton
    Inductor pass one after another in one CUDA context, and the dump's own backend (code the
    dump names: the last column of its child) reproduces the captured failure."""
    model, x = programs.tiny_block()
    _compile_and_fail(model.cuda(), x.cuda(), programs.broken_transpose_backend, tmp_path)
    (path,) = find_dumps(tmp_path)
    r = cli("compare", path, "--trust-backend", "--json")
    rows = json.loads(r.out)["rows"]
    assert r.code == 1 and [row["backend"] for row in rows[:3]] == ["eager", "aot_eager", "inductor"], r
    assert [row["status"] for row in rows[:3]] == ["pass"] * 3 and rows[3]["reproduces"], rows
    assert len(replay_children) == 1


def test_thunder_replays_a_plain_block_on_cuda(cli):
    pytest.importorskip("thunder")
    r = cli("replay", FIXTURES / "block_compile_error", "--backend", "thunder", "--device", "cuda", "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["status"] == "pass", r


def test_thunder_stream_failure_is_captured_and_reproduced_with_recreated_streams(tmp_path, cli):
    pytest.importorskip("thunder")
    from thunder.dynamo import ThunderCompiler

    model, x = programs.two_stream_block()
    err = _compile_and_fail(model, x, ThunderCompiler(), tmp_path)
    assert err is not None and "Failed to find method wait_stream" in str(err)
    (path,) = find_dumps(tmp_path)
    dump = graphdbg.load(path)
    streams = [d for d in dump.manifest_data["external_objects"] if d["kind"] == "stream"]
    assert len(streams) == 2 and all(d["device"] == "cuda:0" for d in streams)

    case = dump.case()
    # each stream comes back as the Python type Dynamo handed the backend (torch.Stream or torch.cuda.Stream)
    assert sum(isinstance(v, torch.Stream) for v in case.inputs) >= 1
    assert all(s.kind == "stream" and s.detail.startswith("a new ") and "on cuda:0" in s.detail for s in case.stand_ins)

    r = cli("replay", path, "--backend", "thunder", "--json")
    data = json.loads(r.out)
    assert r.code == 1 and data["reproduces"] and data["signature"] == "AssertionError: Failed to find method wait_stream", r
    r = cli("replay", path, "--backend", "inductor", "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["status"] == "pass" and data["reference"] == "eager", r


def test_committed_cuda_fixture_replays_on_cuda():
    outcome = graphdbg.load(FIXTURES / "cuda_streams_thunder").case().run("inductor")
    assert outcome.status == "pass", outcome


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (nvidia-h200-x2)")
def test_two_gpu_world_with_nccl(tmp_path, cli, child_pythonpath):
    from dist_programs import capture_world

    dumps = capture_world(2, str(tmp_path), "backends_for_tests:refuses_collectives", device="cuda")
    loaded = sorted((graphdbg.load(p) for p in find_dumps(dumps)), key=lambda d: d.rank)
    assert [d.captured_device for d in loaded] == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert all(d.manifest_data["dist"]["backend"] == "nccl" for d in loaded)
    r = cli("replay", dumps, "--all-ranks", "--backend", "inductor", "--timeout", "300", "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["device"] == "cuda", r
    assert [row["status"] for row in data["ranks"]] == ["pass", "pass"]
    assert [row["device"] for row in data["ranks"]] == ["cuda:0", "cuda:1"]
    r = cli("replay", dumps, "--all-ranks", "--trust-backend", "--json")
    assert r.code == 1 and {row["status"] for row in json.loads(r.out)["ranks"]} == {"crash"}
