"""A graph's own kernels: recorded at capture, swapped for references, and the wrong one found
(graph/kernels.py, judge/references.py, rebuild/op_swaps.py, replay/compare_swap.py, minify/bisect_ops.py).

The programs (tests/helpers/kernel_programs.py) call custom ops with seeded bugs that eager shares, so
accuracy mode can't see them: an int8 attention without smoothing, an RMSNorm with its epsilon
outside the square root.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F

import graphdbg
from graphdbg.judge import references as refs
from graphdbg.rebuild.op_swaps import parse_swaps, swap_ops
from graphdbg.store.manifest import find_dumps

kp = pytest.importorskip("kernel_programs")
pytest_plugins = ["pytester"]

BF16 = {"rtol": 1.6e-2, "atol": 1e-2}  # graphdbg's bf16 tolerance (judge/accuracy.py)


@pytest.fixture(autouse=True)
def _ops_modules_stay_in_the_test(monkeypatch):
    """--ops (and a module:function reference) registers modules in $GRAPHDBG_OPS and the
    allow-list; later tests in this process (an ls that must not import torch) must not see them."""
    from graphdbg.graph import allow_list

    monkeypatch.setenv(allow_list.OPS_ENV, os.environ.get(allow_list.OPS_ENV, ""))
    monkeypatch.setattr(allow_list, "_allowed_namespaces", list(allow_list._allowed_namespaces))


# --- references, each against the op it replaces, on inputs where that op is right -----------------
def _qkv(b=2, hq=8, hkv=8, lq=16, lk=16, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, lq, d, generator=g), torch.randn(b, hkv, lk, d, generator=g),
            torch.randn(b, hkv, lk, d, generator=g))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lq,lk", [(16, 16), (4, 16), (1, 9)])
def test_attention_reference_is_sdpa(causal, lq, lk):
    q, k, v = _qkv(lq=lq, lk=lk)
    # SDPA's is_causal aligns top-left; the reference aligns bottom-right (a query block at the
    # end of its keys, as with a KV cache): the same where lq == lk, else an explicit mask
    mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq) if causal and lq != lk else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and lq == lk)
    torch.testing.assert_close(refs.attention(q, k, v, is_causal=causal), expected, rtol=1e-5, atol=1e-5)


def test_attention_reference_gqa_masks_and_scale_are_sdpa():
    q, k, v = _qkv(hq=8, hkv=2)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(refs.attention(q, k, v, is_causal=True), expected, rtol=1e-5, atol=1e-5)
    q, k, v = _qkv()
    bias = torch.randn(16, 16)
    keep = torch.rand(16, 16) > 0.3
    keep[:, 0] = True
    for mask in (bias, keep):
        torch.testing.assert_close(refs.attention(q, k, v, attn_mask=mask, scale=0.3),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3), rtol=1e-5, atol=1e-5)


def test_paged_attention_reference_is_sdpa_over_each_sequences_blocks():
    g = torch.Generator().manual_seed(3)
    blocks, block, hkv, hq, d = 10, 4, 2, 4, 16
    k_cache, v_cache = torch.randn(blocks, block, hkv, d, generator=g), torch.randn(blocks, block, hkv, d, generator=g)
    table = torch.tensor([[7, 2, 5], [1, 9, 0]])
    lens = torch.tensor([11, 6])
    q = torch.randn(2, hq, d, generator=g)
    out = refs.paged_attention(q, k_cache, v_cache, table, lens)
    for b in range(2):
        keys = torch.cat([k_cache[i] for i in table[b]])[: lens[b]].transpose(0, 1).unsqueeze(0)
        values = torch.cat([v_cache[i] for i in table[b]])[: lens[b]].transpose(0, 1).unsqueeze(0)
        expected = F.scaled_dot_product_attention(q[b].unsqueeze(0).unsqueeze(-2), keys, values, enable_gqa=True)
        torch.testing.assert_close(out[b], expected[0, :, 0], rtol=1e-5, atol=1e-5)


def test_norm_activation_rotary_and_quantised_gemm_references_are_the_ops_they_replace():
    g = torch.Generator().manual_seed(1)
    x, res, w = torch.randn(3, 5, 64, generator=g), torch.randn(3, 5, 64, generator=g), torch.rand(64, generator=g)
    torch.testing.assert_close(refs.rms_norm(x, w, 1e-5), F.rms_norm(x, (64,), w, 1e-5))
    xb = x.bfloat16()
    torch.testing.assert_close(refs.rms_norm(xb, w.bfloat16(), 1e-5), F.rms_norm(xb.float(), (64,), w, 1e-5).bfloat16(), **BF16)
    out, summed = refs.fused_add_rms_norm(x, res, w, 1e-5)
    torch.testing.assert_close(summed, x + res)
    torch.testing.assert_close(out, F.rms_norm(x + res, (64,), w, 1e-5))
    torch.testing.assert_close(refs.silu_and_mul(x), F.silu(x[..., :32]) * x[..., 32:])
    torch.testing.assert_close(refs.silu_and_mul(x), kp.silu_and_mul(x))
    # rotary: Llama's own formulation, a rotation of complex pairs
    seq, d = 5, 64
    angles = torch.arange(seq)[:, None] * (10000 ** (-torch.arange(0, d, 2) / d))[None]
    rotated = torch.view_as_real(torch.view_as_complex(x.reshape(3, seq, d // 2, 2)) * torch.polar(torch.ones_like(angles), angles))
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
    torch.testing.assert_close(refs.rotary_embedding(x, cos, sin, interleaved=True), rotated.flatten(-2), rtol=1e-5, atol=1e-5)
    half = torch.cat([angles, angles], -1)  # NeoX halves: pair (i, i + d/2)
    halves = torch.complex(x[..., :32], x[..., 32:]) * torch.polar(torch.ones_like(angles), angles)
    torch.testing.assert_close(refs.rotary_embedding(x, half.cos(), half.sin()), torch.cat([halves.real, halves.imag], -1),
                               rtol=1e-5, atol=1e-5)
    # int8 weight-only GEMM: aten's own kernel
    a, wq, scale = torch.randn(4, 64, generator=g), torch.randint(-127, 128, (32, 64), dtype=torch.int8, generator=g), torch.rand(32, generator=g)
    torch.testing.assert_close(refs.quantized_matmul(a, wq, scale), torch.ops.aten._weight_int8pack_mm(a, wq, scale), rtol=1e-4, atol=1e-3)


def test_references_are_matched_by_name_and_fitted_to_the_ops_schema():
    assert [refs.reference_for(n) for n in ("sglang::fused_add_rmsnorm", "vllm::rms_norm", "kt_attn::int8_attention",
                                            "vllm::paged_attention_v1", "sgl_kernel::silu_and_mul", "vllm::rotary_embedding",
                                            "torch.ops.mylib.int8_gemm.default", "mylib::scale")] == [
        "fused_add_rms_norm", "rms_norm", "attention", "paged_attention", "silu_and_mul", "rotary_embedding",
        "quantized_matmul", None]
    q, k, v = _qkv()
    fn = refs.adapt(refs.attention, ["query", "key", "value", "causal", "sm_scale"])
    torch.testing.assert_close(fn(q, k, v, True, 0.2), F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2))
    assert refs.adapt(refs.rms_norm, ["a_tensor_called_y"]) is None  # nothing to pass as x


# --- the held-out style programs, through capture and the CLI --------------------------------------
def _capture(model, tokens, dump_dir, mode, backend="aot_eager"):
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=graphdbg.capture(backend, dump_dir=dump_dir, mode=mode))(tokens)
    torch._dynamo.reset()
    return out


@pytest.fixture(scope="module")
def int8_decoder_dump(tmp_path_factory):
    """A decoder whose attention is int8 without smoothing, keys with an outlier channel: accuracy
    mode finds nothing (eager calls the same kernel), ``always`` writes the dump."""
    root = tmp_path_factory.mktemp("int8")
    model, tokens = kp.Decoder(outlier=100.0).eval(), kp.tokens()
    _capture(model, tokens, root / "accuracy", "accuracy")
    assert find_dumps(root / "accuracy") == []
    _capture(model, tokens, root / "always", "always")
    (path,) = find_dumps(root / "always")
    return path, model, tokens


def test_capture_records_each_custom_op_with_where_it_came_from(int8_decoder_dump, cli):
    path, _, _ = int8_decoder_dump
    ops = {o["name"]: o for o in graphdbg.load(path).manifest_data["custom_ops"]}  # through the gate's schema
    assert sorted(ops) == ["kt_act::silu_and_mul", "kt_attn::int8_attention", "kt_norm::rms_norm"]
    attn = ops["kt_attn::int8_attention"]
    assert attn["schema"] == "kt_attn::int8_attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor"
    assert attn["module"] == "kernel_programs" and attn["has_fake"] and attn["calls"] == 2
    assert ops["kt_norm::rms_norm"]["calls"] == 4
    r = cli("show", path)
    assert "kernels and custom ops" in r.out and "from kernel_programs; fake impl; called 2 times" in r.out, r.out
    r = cli("show", path, "--json")
    assert [o["name"] for o in json.loads(r.out)["kernels"]["custom_ops"]] == sorted(ops)
    r = cli("ls", path.parent, "--json")
    [row] = json.loads(r.out)["dumps"]
    assert row["custom_ops"] == sorted(ops) and row["triton_kernels"] == []


def _check_schema(cli, out: dict, name: str) -> None:
    import jsonschema

    from graphdbg import __version__

    assert out["graphdbg"] == __version__ and out["schema"] == name
    jsonschema.validate(out, json.loads(cli("schema", name).out))


@pytest.mark.slow
def test_bisect_ops_names_the_int8_attention_and_its_swap_matches_sdpa(int8_decoder_dump, cli):
    path, model, tokens = int8_decoder_dump
    r = cli("bisect", "ops", path, "--ops", "kernel_programs", "--json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert result["culprits"] == ["kt_attn::int8_attention"], result
    by_op = {o["op"]: o for o in result["ops"]}
    assert by_op["kt_attn::int8_attention"]["accounts_for"] > 0.9
    assert by_op["kt_attn::int8_attention"]["accounts_for_vs_float64"] > 0.9
    assert all(by_op[o]["accounts_for"] < 0.1 for o in ("kt_norm::rms_norm", "kt_act::silu_and_mul"))
    _check_schema(cli, result, "bisect-ops")
    r = cli("compare", path, "--ops", "kernel_programs", "--swap", "kt_attn::int8_attention=attention", "--json")
    assert r.code == 1, r
    report = json.loads(r.out)
    _check_schema(cli, report, "compare-swap")
    [row] = report["rows"]
    assert not row["close"] and row["max_abs_error"] > 0.1 and len(report["replaced"]) == 2, report
    # the swapped graph is the model with SDPA, within bf16 tolerance
    case = graphdbg.load(path).case("cpu")
    swapped, _ = swap_ops(case.gm, parse_swaps(["kt_attn::int8_attention=attention"], case.gm))
    with torch.no_grad():
        (logits,) = swapped(*case.inputs)
        sdpa = kp.same_weights(model, kp.Decoder(attention="sdpa", outlier=100.0)).eval()(tokens)
    torch.testing.assert_close(logits, sdpa, **BF16)
    # the user's own reference, a module:function named on the command line
    r = cli("compare", path, "--swap", "torch.ops.kt_attn.int8_attention=kernel_programs:sdpa_attention", "--json")
    assert json.loads(r.out)["rows"][0]["max_abs_error"] == pytest.approx(row["max_abs_error"], rel=1e-3), r


@pytest.mark.slow
def test_int8_attention_moves_the_outputs_only_where_keys_have_an_outlier_channel(tmp_path, cli):
    _capture(kp.Decoder(outlier=0.0).eval(), kp.tokens(), tmp_path, "always")
    (path,) = find_dumps(tmp_path)
    r = cli("compare", path, "--ops", "kernel_programs", "--swap", "kt_attn::int8_attention=attention", "--json")
    without = json.loads(r.out)["rows"][0]
    assert without["cosine"] > 0.9999 and without["max_abs_error"] < 0.05, without  # 0.23 with the outlier channel


@pytest.mark.slow
def test_bisect_ops_names_an_rms_norm_with_its_epsilon_misplaced(tmp_path, cli):
    model = kp.Decoder(attention="sdpa", norm="rms_norm_eps_bug", layers=3, seed=5).eval()
    _capture(model, kp.tokens(batch=1, seq=8, seed=9), tmp_path, "always")
    (path,) = find_dumps(tmp_path)
    r = cli("bisect", "ops", path, "--ops", "kernel_programs")
    assert r.code == 1 and "culprit: kt_norm::rms_norm_eps_bug" in r.out, r
    r = cli("bisect", "ops", path, "--ops", "kernel_programs", "--json")
    result = json.loads(r.out)
    assert [o["op"] for o in result["ops"]] == ["kt_norm::rms_norm_eps_bug", "kt_act::silu_and_mul"], result
    assert result["all_reference_error_vs_float64"] < 1e-5 < result["error_vs_float64"]


@pytest.mark.slow
def test_swap_of_an_op_the_graph_lacks_or_a_reference_that_isnt_is_one_line(int8_decoder_dump, cli):
    path, _, _ = int8_decoder_dump
    for swap, says in [("kt_attn::nope=attention", "the graph calls no kt_attn::nope"),
                       ("kt_attn::int8_attention=not_a_reference", "not a built-in reference"),
                       ("kt_attn::int8_attention", "expected OP=REFERENCE"),
                       ("kt_attn::int8_attention=kernel_programs:missing", "has no function missing"),
                       ("kt_attn::int8_attention=kernel_programs:relu_into",
                        "the graph with kt_attn::int8_attention=kernel_programs:relu_into fails: TypeError")]:
        r = cli("compare", path, "--ops", "kernel_programs", "--swap", swap)
        assert r.code == 2 and says in r.err and "Traceback" not in r.err, (swap, r)


TRITON_GRAPH = '''class GraphModule(torch.nn.Module):
    def forward(self, l_x_: "f32[4, 8]"):
        out: "f32[4, 8]" = torch.empty_like(l_x_)
        triton_kernel_wrapper_mutation = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel_idx = 3, constant_args_idx = 4, grid = [(1, 1, 1)], tma_descriptor_metadata = {}, kwargs = {'X': l_x_, 'Y': out});  triton_kernel_wrapper_mutation = None
        y: "f32[4, 8]" = out * 2;  out = None
        return (y,)
'''


@pytest.mark.slow
def test_a_triton_kernel_kept_only_by_index_is_swapped_for_the_users_reference(tmp_path, cli):
    graph = tmp_path / "rank0_0.py"
    graph.write_text(TRITON_GRAPH)
    case = graphdbg.load(graph).case("cpu")
    assert "triton_kernel" in [s.kind for s in case.stand_ins]  # on its own, a no-op stand-in
    swapped, used = swap_ops(case.gm, parse_swaps(["kernel_idx=3=kernel_programs:relu_into"], case.gm))
    (y,) = swapped(*case.inputs)
    torch.testing.assert_close(y, case.inputs[0].relu() * 2)
    r = cli("compare", graph, "--swap", "kernel_idx=3=kernel_programs:relu_into", "--json")
    assert r.code == 1 and not json.loads(r.out)["rows"][0]["close"], r
    r = cli("bisect", "ops", graph, "--swap", "kernel_idx=3=kernel_programs:relu_into", "--json")
    assert r.code == 1 and json.loads(r.out)["culprits"] == ["kernel_idx=3"], r


GPU_TRITON = pytest.mark.skipif(not torch.cuda.is_available() or kp.triton is None, reason="needs CUDA and Triton")


@pytest.mark.gpu
@GPU_TRITON
def test_a_user_triton_kernel_is_recorded_replayed_from_its_source_and_found_by_its_swap(tmp_path, cli):
    """The GPU run of the issue's held-out case: a user @triton.jit RMSNorm with its epsilon
    outside the root. Recorded with its source; with --trust-kernels it replays from the dump's
    source with no stand-in and the captured numerics; compare --swap and bisect ops find it;
    the repro defines it without the user's package."""
    torch.manual_seed(0)
    model, x = kp.TritonNorm().cuda(), torch.randn(8, 64, device="cuda")
    _capture(model, x, tmp_path / "dumps", "always")
    (path,) = find_dumps(tmp_path / "dumps")
    [kernel] = graphdbg.load(path).manifest_data["triton_kernels"]
    assert kernel["name"] == "rms_norm_kernel" and kernel["module"] == "kernel_programs", kernel
    assert "the seeded bug" in kernel["source"] and kernel["triton_version"] == kp.triton.__version__
    assert kernel["constant_args"].get("BLOCK") == 64 and kernel["calls"] == 1, kernel
    r = cli("show", path)
    assert "triton kernel rms_norm_kernel" in r.out and "lines of source in the dump" in r.out, r.out
    r = cli("ls", path.parent, "--json")
    assert json.loads(r.out)["dumps"][0]["triton_kernels"] == ["rms_norm_kernel"]
    # without trust: a stand-in, named; with it: the kernel from the dump, eagerly and under a backend
    r = cli("replay", path, "--backend", "eager", "--json")
    assert json.loads(r.out)["kernels"][0]["ran"] == "stand-in", r.out
    for backend in ("eager", "aot_eager"):
        r = cli("replay", path, "--backend", backend, "--trust-kernels", "--json")
        out = json.loads(r.out)
        assert out["status"] == "pass" and not [s for s in out["stand_ins"] if "triton_kernel" in s], r.out
        assert out["kernels"] == [{"kernel": "rms_norm_kernel", "kind": "triton_kernel", "ran": "from the dump", "why": None,
                                   "calls": 1}], out
    # the captured numerics: the swap moves the output by exactly what the seeded bug does
    with torch.no_grad():
        h = model.proj(x)
        bug = (model(x) - h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 0.5) * model.weight).abs().max().item()
    swap = "rms_norm_kernel=kernel_programs:rms_norm_into"
    r = cli("compare", path, "--swap", swap, "--trust-kernels", "--json")
    [row] = json.loads(r.out)["rows"]
    assert r.code == 1 and row["max_abs_error"] == pytest.approx(bug, rel=1e-3, abs=1e-5) and bug > 0.05, (row, bug)
    r = cli("bisect", "ops", path, "--swap", swap, "--trust-kernels", "--json")
    result = json.loads(r.out)
    assert r.code == 1 and result["culprits"] == ["rms_norm_kernel"] and result["kernels"][0]["ran"] == "from the dump", result
    # minify's output: the saved graph keeps the kernel, the repro defines it from the recorded source
    from graphdbg.minify.repro import write_repro
    from graphdbg.minify.self_check import check_repro

    case = graphdbg.load(path).case("cuda")
    saved = case.save(tmp_path / "min")
    assert graphdbg.load(saved).manifest_data["triton_kernels"][0]["source"] == kernel["source"]
    out = write_repro(case, "eager", tmp_path / "repro" / "repro.py", trust_kernels=True)
    assert "the seeded bug" in (out.parent / "repro_kernels.py").read_text()
    result = check_repro(out, timeout=300)
    assert result.exit_code == 0, result


@pytest.mark.gpu
@GPU_TRITON
def test_an_autotuned_triton_kernel_with_a_helper_and_a_global_replays_from_its_source(tmp_path, cli):
    torch.manual_seed(1)
    model, x = kp.TritonSoftmax().cuda(), torch.randn(16, 96, device="cuda")
    with torch.no_grad():
        model(x)  # autotuned eagerly first, as a warm-up would: the dump records the chosen config
    _capture(model, x, tmp_path, "always")
    (path,) = find_dumps(tmp_path)
    [kernel] = graphdbg.load(path).manifest_data["triton_kernels"]
    assert {g["name"] for g in kernel["globals"]} >= {"_row_max", "SOFTMAX_EPS", "tl"} and kernel["autotune_configs"], kernel
    r = cli("replay", path, "--backend", "aot_eager", "--trust-kernels", "--json")
    out = json.loads(r.out)
    assert out["status"] == "pass" and out["kernels"][0]["ran"] == "from the dump", r.out
    r = cli("bisect", "ops", path, "--swap", "softmax_kernel=kernel_programs:softmax_into", "--trust-kernels", "--json")
    result = json.loads(r.out)
    assert r.code == 1 and result["culprits"] == ["softmax_kernel"], result


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_flashinfer_kernel_replays_for_real_and_agrees_with_its_reference(tmp_path, cli, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("flashinfer is not installed here (its wheel: scripts/fetch-gpu-wheels.sh --flashinfer, .whl/fi)")
    # flashinfer compiles each kernel family into its own cache on first use: one folder of the test's, which the
    # sandboxed replay child may write too (GRAPHDBG_SANDBOX_WRITABLE: the user's folders their kernels write to)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "flashinfer"))
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / "flashinfer" / "tvm-ffi"))
    monkeypatch.setenv("GRAPHDBG_SANDBOX_WRITABLE", str(tmp_path / "flashinfer"))
    (tmp_path / "flashinfer").mkdir()
    model, x = kp.FlashinferNorm().cuda().half(), torch.randn(8, 256, device="cuda", dtype=torch.half)
    _capture(model, x, tmp_path, "always")
    (path,) = find_dumps(tmp_path)
    r = cli("replay", path, "--backend", "aot_eager", "--ops", "kernel_programs", "--json")
    out = json.loads(r.out)
    assert out["status"] == "pass" and out["kernels"] == [{"kernel": "kt_fi::rmsnorm", "kind": "custom_op", "ran": "real",
                                                           "why": None, "calls": 1}], out
    assert not [s for s in out["stand_ins"] if "custom_op" in s], out
    r = cli("compare", path, "--ops", "kernel_programs", "--swap", "kt_fi::rmsnorm=rms_norm", "--json")
    report = json.loads(r.out)
    assert r.code == 0 and all(row["close"] for row in report["rows"]), report  # flashinfer's RMSNorm is right


def test_a_kernel_field_of_the_wrong_type_is_refused_by_the_gate_in_one_line(int8_decoder_dump, cli, tmp_path):
    import shutil

    path, _, _ = int8_decoder_dump
    for field, bad, says in [("custom_ops", [{"name": 5}], "custom_ops[0].name: must be a string"),
                             ("triton_kernels", [{"kernel_idx": 0, "source": ["import os"]}], "triton_kernels[0].source")]:
        copy = tmp_path / field
        shutil.copytree(path, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest[field] = bad
        (copy / "manifest.json").write_text(json.dumps(manifest))
        r = cli("show", copy)
        assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r


@pytest.mark.slow
def test_export_test_turns_a_swap_into_a_regression_test_that_fails_while_the_kernel_is_wrong(int8_decoder_dump, cli, tmp_path):
    import subprocess
    import sys

    from conftest import child_env

    path, _, _ = int8_decoder_dump
    out = tmp_path / "suite" / "test_int8_attention.py"
    r = cli("export-test", path, "-o", out, "--ops", "kernel_programs", "--swap", "kt_attn::int8_attention=attention")
    assert r.code == 0 and out.is_file() and (out.parent / "test_int8_attention_data" / "manifest.json").is_file(), r
    assert str(tmp_path) not in out.read_text()  # runs wherever the folder goes
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], capture_output=True,
                         text=True, cwd=out.parent, env=child_env(tests=True), timeout=300)
    assert run.returncode == 1 and "output 0 moves by max 0.227" in run.stdout, run.stdout[-2000:]
    r = cli("export-test", path, "-o", tmp_path / "test_norm.py", "--force", "--ops", "kernel_programs", "--swap", "kt_norm::rms_norm=rms_norm")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_norm.py")],
                         capture_output=True, text=True, cwd=tmp_path, env=child_env(tests=True), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:]  # the right RMSNorm agrees with its reference


MISSING_OP_GRAPH = '''class GraphModule(torch.nn.Module):
    def forward(self, l_x_: "f32[4, 64]", l_w_: "f32[64]"):
        h: "f32[4, 64]" = torch.ops.nosuchlib.fused_rmsnorm.default(l_x_, l_w_, 1e-06);  l_x_ = l_w_ = None
        y: "f32[4, 64]" = h * 2;  h = None
        return (y,)
'''


def test_a_custom_op_this_machine_lacks_runs_as_its_built_in_reference_instead_of_a_stand_in(tmp_path, cli):
    graph = tmp_path / "rank0_0.py"
    graph.write_text(MISSING_OP_GRAPH)
    case = graphdbg.load(graph).case("cpu")
    assert "custom_op" in [s.kind for s in case.stand_ins]
    swapped, used = swap_ops(case.gm, parse_swaps(["nosuchlib::fused_rmsnorm=rms_norm"], case.gm))
    (y,) = swapped(*case.inputs)
    x, w = case.inputs
    torch.testing.assert_close(y, F.rms_norm(x, (64,), w, 1e-6) * 2)
    r = cli("bisect", "ops", graph, "--json")  # matched by name, fitted by position
    assert r.code == 1 and json.loads(r.out)["culprits"] == ["nosuchlib::fused_rmsnorm"], r
    assert any("nosuchlib.fused_rmsnorm" in s for s in json.loads(r.out)["stand_ins"])


class _JITFunction:  # Triton's shape where Triton isn't installed: the source in .src, the function in .fn
    def __init__(self, fn, src):
        self.fn, self.src = fn, src


class _Autotuner:
    def __init__(self, fn, configs, best_config):
        self.fn, self.configs, self.best_config = fn, configs, best_config


class _Config:
    def __init__(self, block, warps):
        self.kwargs, self.num_warps, self.num_stages = {"BLOCK": block}, warps, 3


def test_triton_kernels_are_read_from_dynamos_side_table_under_an_autotuner(tmp_path):
    import torch.fx as fx
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    from graphdbg.graph.kernels import triton_kernels
    from graphdbg.store.schema import validate_manifest

    def scale_kernel(X, Y, n, BLOCK):
        pass

    src = "def scale_kernel(X, Y, n, BLOCK: tl.constexpr):\n    pass  # the kernel's text\n"
    jit = _JITFunction(scale_kernel, src)
    tuned = _Autotuner(jit, [_Config(32, 2), _Config(64, 4)], _Config(64, 4))
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    for kernel in (jit, tuned, jit):
        g.call_function(torch.ops.higher_order.triton_kernel_wrapper_mutation, (), {
            "kernel_idx": kernel_side_table.add_kernel(kernel), "constant_args_idx": kernel_side_table.add_constant_args({"n": 8}),
            "grid": [(4, 1, 1)], "tma_descriptor_metadata": {}, "kwargs": {"X": x, "Y": y}})
    g.output(None)
    plain, autotuned = triton_kernels(fx.GraphModule(torch.nn.Module(), g))
    assert plain["name"] == "scale_kernel" and plain["source"] == src and plain["calls"] == 2, plain
    assert plain["module"] == __name__ and plain["constant_args"] == {"n": 8} and plain["grid"] == [[4, 1, 1]]
    assert list(plain["constant_args_by_call"].values()) == [{"n": 8}, {"n": 8}]  # each call's, for a swap
    assert autotuned["source"] == src and [c["kwargs"]["BLOCK"] for c in autotuned["autotune_configs"]] == [32, 64]
    assert autotuned["chosen_config"] == {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3}
    manifest = json.loads(json.dumps({"schema": "graphdbg.dump", "id": "g0", "failure": {"kind": "captured"},
                                      "graph": {"file": "graph.py"}, "inputs": [], "triton_kernels": [plain, autotuned]}))
    assert validate_manifest(manifest, "m")["triton_kernels"][1]["chosen_config"]["num_warps"] == 4


@pytest.mark.slow
def test_in_place_kernels_are_swapped_with_their_results_written_where_the_kernel_writes_them(tmp_path, cli):
    model, x = kp.InPlaceNorms().eval(), torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    _capture(model, x, tmp_path, "always")
    (path,) = find_dumps(tmp_path)
    r = cli("compare", path, "--ops", "kernel_programs", "--swap", "kt_vllm::rms_norm=rms_norm", "--json")
    assert r.code == 0 and all(row["close"] for row in json.loads(r.out)["rows"]), r  # the right one agrees
    r = cli("bisect", "ops", path, "--ops", "kernel_programs", "--json")
    result = json.loads(r.out)
    assert r.code == 1 and result["culprits"] == ["kt_vllm::fused_add_rms_norm"], result
    # swapped, the graph is the model with the norms written out
    case = graphdbg.load(path).case("cpu")
    swapped, _ = swap_ops(case.gm, parse_swaps(["kt_vllm::fused_add_rms_norm=fused_add_rms_norm"], case.gm))
    with torch.no_grad():
        y, residual = swapped(*case.inputs)
        h = model.b(F.rms_norm(model.a(x), (64,), model.w1, 1e-6))
    torch.testing.assert_close(residual, x + h)
    torch.testing.assert_close(y, F.rms_norm(x + h, (64,), model.w2, 1e-6))


@pytest.mark.slow
def test_under_stock_inductor_accuracy_mode_agrees_and_bisect_ops_names_the_int8_attention(tmp_path, cli):
    model, tokens = kp.Decoder(outlier=100.0, layers=1).eval(), kp.tokens(batch=1)
    _capture(model, tokens, tmp_path / "accuracy", "accuracy", backend="inductor")
    assert find_dumps(tmp_path / "accuracy") == []  # eager calls the same kernel: both agree, both wrong
    _capture(model, tokens, tmp_path / "always", "always", backend="inductor")
    (path,) = find_dumps(tmp_path / "always")
    r = cli("bisect", "ops", path, "--ops", "kernel_programs", "--json")
    assert r.code == 1 and json.loads(r.out)["culprits"] == ["kt_attn::int8_attention"], r
    case = graphdbg.load(path).case("cpu")  # with the swap, the Inductor graph is the SDPA model within bf16 tolerance
    swapped, _ = swap_ops(case.gm, parse_swaps(["kt_attn::int8_attention=attention"], case.gm))
    with torch.no_grad():
        (logits,) = swapped(*case.inputs)
        sdpa = kp.same_weights(model, kp.Decoder(attention="sdpa", outlier=100.0, layers=1)).eval()(tokens)
    torch.testing.assert_close(logits, sdpa, **BF16)


# --- --trust-kernels: a user Triton kernel from the dump's source, in the sandboxed child only -------
RELU_SOURCE = ("def relu_kernel(X, Y, n, BLOCK: tl.constexpr):\n    i = tl.arange(0, BLOCK)\n"
               "    tl.store(Y + i, tl.maximum(tl.load(X + i, mask=i < n), 0.0), mask=i < n)\n")


@pytest.fixture(scope="module")
def triton_kernel_dump(tmp_path_factory):
    """A dump written by capture of a graph that calls a user Triton kernel through Dynamo's
    wrapper (``kernel_programs.relu_kernel_dump``)."""
    from kernel_programs import relu_kernel_dump

    return relu_kernel_dump(tmp_path_factory.mktemp("triton_dump"), RELU_SOURCE)


def test_without_trust_a_recorded_triton_kernel_is_a_stand_in_and_the_verdict_says_what_would_run_it(triton_kernel_dump, cli):
    r = cli("replay", triton_kernel_dump, "--backend", "eager", "--json")
    out = json.loads(r.out)
    [kernel] = out["kernels"]
    assert kernel["kernel"] == "relu_kernel" and kernel["ran"] == "stand-in" and "--trust-kernels runs it" in kernel["why"], out
    assert any("kernel_idx=0" in s for s in out["stand_ins"])
    _check_schema(cli, out, "replay")
    r = cli("show", triton_kernel_dump)
    assert "triton kernel relu_kernel" in r.out and "3 lines of source in the dump (replay --trust-kernels runs it)" in r.out, r.out


def test_trust_kernels_never_runs_a_dumps_kernel_outside_the_sandboxed_child(triton_kernel_dump, cli, monkeypatch):
    from graphdbg.execution import sandbox
    from graphdbg.rebuild import kernel_source

    assert kernel_source.SANDBOX_DIR_ENV == sandbox.FOLDER_ENV  # one name for "this is the sandboxed child"
    r = cli("replay", triton_kernel_dump, "--backend", "eager", "--trust-kernels", "--no-isolate")
    assert r.code == 2 and "only in the sandboxed replay child" in r.err and len(r.err.strip().splitlines()) == 1, r
    r = cli("replay", triton_kernel_dump.parent, "--all-ranks", "--trust-kernels")
    assert r.code == 2 and "not in the rank processes of --all-ranks" in r.err and "Traceback" not in r.err, r
    monkeypatch.delenv(sandbox.FOLDER_ENV, raising=False)
    with pytest.raises(graphdbg.GraphdbgError, match="only in the sandboxed replay child"):
        graphdbg.load(triton_kernel_dump).case("cpu", trust_kernels=True)


@pytest.mark.slow
def test_trust_kernels_in_the_child_runs_the_kernel_or_says_why_it_stayed_a_stand_in(triton_kernel_dump, cli, tmp_path,
                                                                                       monkeypatch):
    """In the child the kernel is defined from the dump's source: where Triton is importable it
    runs (here, without a GPU, on Triton's interpreter: TRITON_INTERPRET=1), else the child says
    why it stayed a stand-in. A kernel whose source names a module outside Triton's is refused
    whatever the machine."""
    import shutil

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the child's Triton, where there is one, runs kernels on the CPU
    r = cli("replay", triton_kernel_dump, "--backend", "eager", "--trust-kernels", "--json")
    out = json.loads(r.out)
    [kernel] = out["kernels"]
    assert out["isolated"] and out["status"] == "pass", out
    if kp.triton is None:
        assert kernel["ran"] == "stand-in" and kernel["why"] == "Triton is not importable here", kernel
    else:
        assert kernel["ran"] == "from the dump" and not [s for s in out["stand_ins"] if "kernel_idx" in s], out
    copy = tmp_path / "hostile"
    shutil.copytree(triton_kernel_dump, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["triton_kernels"][0]["globals"] = [{"name": "tl", "module": "os"}]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    r = cli("replay", copy, "--backend", "eager", "--trust-kernels")
    assert "triton kernel relu_kernel: ran stand-in (its source refers to the module os" in " ".join(r.out.split()), r.out


@pytest.mark.slow
@pytest.mark.skipif(kp.triton is None, reason="needs Triton (its interpreter runs the kernel on the CPU)")
def test_with_triton_the_kernel_from_the_dump_computes_what_it_computed_when_captured(triton_kernel_dump, cli, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    r = cli("compare", triton_kernel_dump, "--swap", "relu_kernel=kernel_programs:relu_kernel_reference", "--trust-kernels",
            "--json")
    report = json.loads(r.out)
    assert r.code == 0 and report["rows"][0]["close"] and report["kernels"][0]["ran"] == "from the dump", report  # a right kernel


@pytest.mark.slow
def test_compare_swap_and_bisect_ops_with_trust_kernels_run_in_the_sandboxed_child(triton_kernel_dump, cli):
    """Without Triton here the captured run's kernel is the stand-in (its output stays zeros): the swap moves it."""
    if kp.triton is not None:
        pytest.skip("with Triton the kernel runs: test_with_triton_the_kernel_from_the_dump_... covers it")
    swap = "relu_kernel=kernel_programs:relu_kernel_reference"
    r = cli("compare", triton_kernel_dump, "--swap", swap, "--trust-kernels", "--json")
    assert r.code == 1, r
    report = json.loads(r.out)
    _check_schema(cli, report, "compare-swap")
    assert not report["rows"][0]["close"] and report["replaced"] and report["kernels"][0]["kernel"] == "relu_kernel", report
    r = cli("bisect", "ops", triton_kernel_dump, "--swap", swap, "--trust-kernels", "--json")
    result = json.loads(r.out)
    assert r.code == 1 and result["culprits"] == ["relu_kernel"] and result["kernels"][0]["ran"] == "stand-in", r
    _check_schema(cli, result, "bisect-ops")
    r = cli("compare", triton_kernel_dump, "--swap", "relu_kernel=kernel_programs:missing", "--trust-kernels")
    assert r.code == 2 and "has no function missing" in r.err and "Traceback" not in r.err, r


def test_a_saved_case_keeps_its_triton_kernel_calls_and_their_recorded_source(triton_kernel_dump, tmp_path, cli):
    """What minify writes (Case.save, after each shrink step) prints a kernel's call as captured
    and carries what the dump recorded of it: the smaller dump replays it from the source too."""
    case = graphdbg.load(triton_kernel_dump).case("cpu")
    saved = case.save(tmp_path / "min")
    assert "torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel_idx = 0" in (saved / "graph.py").read_text()
    [kernel] = graphdbg.load(saved).manifest_data["triton_kernels"]
    assert kernel["source"] == RELU_SOURCE and kernel["constant_args_by_call"] == {"0": {"n": 32, "BLOCK": 32}}
    r = cli("replay", saved, "--backend", "eager", "--json")
    assert json.loads(r.out)["kernels"][0]["why"].startswith("the dump has its source"), r.out


@pytest.mark.slow
def test_repro_defines_the_graphs_own_kernels_so_it_runs_without_the_users_package(triton_kernel_dump, tmp_path):
    import shutil

    from graphdbg.minify.repro import write_repro
    from graphdbg.minify.self_check import check_repro

    # a Triton kernel: defined in repro_kernels.py from the recorded source, launched by the graph's call
    out = write_repro(graphdbg.load(triton_kernel_dump).case("cpu"), "eager", tmp_path / "triton" / "repro.py", trust_kernels=True)
    kernels = (out.parent / "repro_kernels.py").read_text()
    compile(kernels, "repro_kernels.py", "exec")
    assert "@triton.jit\n" + RELU_SOURCE.rstrip() in kernels and "CONSTANTS = {0: {'n': 32, 'BLOCK': 32}}" in kernels
    assert "repro_kernels.launch(kernel_idx, constant_args_idx, grid, kwargs)" in out.read_text()
    # no float64 reference through a kernel with no float64 code (on a GPU it read float64 buffers as float32)
    assert "\nWIDE = False" in out.read_text()
    # custom ops: the module that defines them comes along; the folder runs elsewhere, without graphdbg or tests/
    _capture(kp.InPlaceNorms().eval(), torch.randn(4, 64), tmp_path / "dump", "always")
    (path,) = find_dumps(tmp_path / "dump")
    out = write_repro(graphdbg.load(path).case("cpu"), "aot_eager", tmp_path / "ops" / "repro.py")
    assert (out.parent / "kernel_programs.py").is_file()
    moved = shutil.copytree(out.parent, tmp_path / "elsewhere" / "deep" / "ops")
    result = check_repro(moved / "repro.py", timeout=300)
    assert result.exit_code == 0 and "FIXED" in result.line, result


@pytest.mark.slow
def test_the_pytest_plugin_turns_a_swap_into_each_dumps_regression_test(int8_decoder_dump, triton_kernel_dump, pytester):
    """``pytest --graphdbg=DIR --graphdbg-swap OP=REFERENCE``: the graph with OP agrees with the
    graph with REFERENCE, per dump; a dump whose graph calls none of the swapped ops is skipped."""
    import shutil

    path, _, _ = int8_decoder_dump
    shutil.copytree(path, pytester.path / "dumps" / "decoder" / path.name)
    shutil.copytree(triton_kernel_dump, pytester.path / "dumps" / "triton" / triton_kernel_dump.name)
    plugin = ("-p", "graphdbg.ui.pytest_plugin", "--graphdbg=dumps", "--graphdbg-ops", "kernel_programs")
    r = pytester.runpytest(*plugin, "--graphdbg-swap", "kt_attn::int8_attention=attention", "-rs")
    r.assert_outcomes(failed=1, skipped=1)
    r.stdout.fnmatch_lines(["*with kt_attn::int8_attention=attention: output 0 moves by max 0.227*(reproduce: graphdbg compare "
                            "dumps/decoder/* --swap=kt_attn::int8_attention=attention --ops=kernel_programs)*",
                            "*its graph calls none of kt_attn::int8_attention*"])
    r = pytester.runpytest(*plugin, "--graphdbg-swap", "kt_norm::rms_norm=rms_norm", "-k", "decoder")
    r.assert_outcomes(passed=1)  # the right RMSNorm agrees with its reference
