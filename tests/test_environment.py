"""What decides a replay's outcome besides the graph (issue 41): recorded at capture, compared
with the replay's, named as suspects when a failure does not reproduce, restored by
``--as-captured``, and redacted where it names a place."""

from __future__ import annotations

import json
import os
from pathlib import Path

import environment_backends as backends
import pytest
import torch

import graphdbg
from graphdbg.store.manifest import find_dumps


@pytest.fixture
def own_process_state():
    """--as-captured sets flags and variables in the CLI's process: this test's, put back after."""
    from graphdbg.replay.as_captured import restore
    from graphdbg.store.capture_environment import settings

    env, before = dict(os.environ), settings()
    yield
    os.environ.clear()
    os.environ.update(env)
    restore({"env": {"settings": before}})


def _capture(dump_dir: Path, backend) -> Path:
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(4, 8)
    with pytest.raises(Exception):
        torch.compile(model, backend=graphdbg.capture(backend, dump_dir=dump_dir))(x)
    (path,) = find_dumps(dump_dir)
    return path


@pytest.mark.slow
def test_differences_are_listed_most_likely_cause_first(cli, tmp_path, monkeypatch, own_process_state):
    monkeypatch.setenv("TORCHINDUCTOR_GRAPHDBG_PROBE", "1")
    torch.set_float32_matmul_precision("medium")
    with torch._inductor.config.patch(max_autotune_pointwise=True):
        dump = _capture(tmp_path / "dumps", backends.always_fails)
    env = json.loads((dump / "manifest.json").read_text())["env"]
    assert env["settings"]["float32_matmul_precision"] == "medium" and env["vars"]["TORCHINDUCTOR_GRAPHDBG_PROBE"] == "1"
    assert env["backend_package"] == "environment_backends" and env["device"]["name"]
    torch.set_float32_matmul_precision("highest")
    monkeypatch.delenv("TORCHINDUCTOR_GRAPHDBG_PROBE")

    r = cli("replay", dump, "--trust-backend", "--no-config", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)["environment_differences"]
    from graphdbg.judge.environment_diff import RANK

    assert [RANK[d["kind"]] for d in found] == sorted(RANK[d["kind"]] for d in found)
    rows = {d["name"]: (i, d["kind"], d["captured"], d["now"]) for i, d in enumerate(found)}
    assert rows["inductor.max_autotune_pointwise"][1:] == ("compiler setting", True, False)  # torch's own value here
    assert rows["float32_matmul_precision"][1:] == ("setting", "medium", "highest")
    assert rows["cuda.matmul.allow_tf32"][1:] == ("setting", True, False)  # "medium" turns TF32 on
    assert rows["TORCHINDUCTOR_GRAPHDBG_PROBE"][1:] == ("env var", "1", None)
    assert found[0]["kind"] == "compiler setting"
    assert rows["inductor.max_autotune_pointwise"][0] < rows["float32_matmul_precision"][0] < rows["TORCHINDUCTOR_GRAPHDBG_PROBE"][0]

    r = cli("replay", dump, "--trust-backend", "--no-config")
    lines = r.out.splitlines()
    at = [next(i for i, ln in enumerate(lines) if key in ln)
          for key in ("inductor.max_autotune_pointwise", "float32_matmul_precision", "TORCHINDUCTOR_GRAPHDBG_PROBE", "REPRODUCED")]
    assert at == sorted(at), r.out  # in order, before the verdict

    r = cli("replay", dump, "--trust-backend", "--json")  # the recorded compiler setting is restored: not a difference
    assert [d["name"] for d in json.loads(r.out)["environment_differences"]] == [
        "float32_matmul_precision", "cuda.matmul.allow_tf32", "TORCHINDUCTOR_GRAPHDBG_PROBE"]


@pytest.mark.slow
def test_a_failure_only_under_a_flag_is_not_reproduced_naming_it_and_reproduces_as_captured(cli, tmp_path, own_process_state):
    torch.set_float32_matmul_precision("medium")
    dump = _capture(tmp_path / "dumps", backends.fails_under_medium_precision)
    torch.set_float32_matmul_precision("highest")

    r = cli("replay", dump, "--trust-backend")
    assert r.code == 0, r
    verdict = next(ln for ln in r.out.splitlines() if "NOT REPRODUCED" in ln)
    assert "suspects: setting float32_matmul_precision ('medium' at capture, 'highest' now)" in verdict, r.out

    r = cli("replay", dump, "--trust-backend", "--as-captured", "--json")  # isolated: the child restores it
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    assert json.loads(r.out)["environment_differences"] == []


@pytest.mark.slow
def test_a_failure_only_under_an_env_var_reproduces_as_captured(cli, tmp_path, monkeypatch, own_process_state):
    monkeypatch.setenv(backends.FAIL_VAR, "1")
    dump = _capture(tmp_path / "dumps", backends.fails_under_env_var)
    monkeypatch.delenv(backends.FAIL_VAR)

    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 0 and not json.loads(r.out)["reproduces"], r
    assert json.loads(r.out)["environment_differences"][0]["name"] == backends.FAIL_VAR
    r = cli("replay", dump, "--trust-backend")
    assert "NOT REPRODUCED" in r.out and (f"suspects: env var {backends.FAIL_VAR}, read by the backend ('1' at capture, "
                                          f"unset now; to replay as captured: export {backends.FAIL_VAR}=1)") in r.out, r

    # not on the allow-list: recorded, not restored, unless the user trusts the dump's config
    r = cli("replay", dump, "--trust-backend", "--as-captured")
    assert r.code == 0 and f"env var {backends.FAIL_VAR}, read by the backend: recorded, not restored (" in r.out, r
    r = cli("replay", dump, "--trust-backend", "--as-captured", "--trust-config")
    assert r.code == 1 and "REPRODUCED: the same failure as captured" in r.out, r


def test_redact_hides_variables_that_name_a_path_or_a_host(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/home/someone/inductor-cache")
    monkeypatch.setenv("NCCL_GRAPHDBG_PROBE", "gpu-node-7.cluster.example.org")
    monkeypatch.setenv("TRITON_GRAPHDBG_PROBE", "10.1.2.3:29500")
    monkeypatch.setenv("TORCHINDUCTOR_GRAPHDBG_KEEP", "1")
    dump = _capture(tmp_path / "dumps", backends.always_fails)
    recorded = json.loads((dump / "manifest.json").read_text())["env"]["vars"]
    assert recorded["TORCHINDUCTOR_CACHE_DIR"] == "/home/someone/inductor-cache"

    r = cli("redact", tmp_path / "dumps", "-o", tmp_path / "shared", "--json")
    assert r.code == 0, r
    (shared,) = find_dumps(tmp_path / "shared")
    text = (shared / "manifest.json").read_text()
    kept = json.loads(text)["env"]["vars"]
    assert "someone" not in text and "example.org" not in text and "10.1.2.3" not in text
    assert kept["TORCHINDUCTOR_CACHE_DIR"] == kept["NCCL_GRAPHDBG_PROBE"] == kept["TRITON_GRAPHDBG_PROBE"] == "<redacted>"
    assert kept["TORCHINDUCTOR_GRAPHDBG_KEEP"] == "1"
    assert {"vars.TORCHINDUCTOR_CACHE_DIR", "vars.NCCL_GRAPHDBG_PROBE"} <= set(json.loads(r.out)[0]["removed"])


@pytest.mark.slow
def test_repeat_reports_a_flaky_failures_rate_with_an_interval(cli, tmp_path):
    from graphdbg.judge.flaky import wilson

    dump = backends.captured_flaky_dump(tmp_path / "dumps")

    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--repeat", "40", "--json")  # one process: the draws go on
    assert r.code == 1, r  # the captured failure, on some runs
    rep = json.loads(r.out)["repeat"]
    assert rep["runs"] == 40 and 0 < rep["failed"] < 40 and rep["rate"] == rep["failed"] / 40
    lo, hi = rep["interval"]
    assert (lo, hi) == pytest.approx(wilson(rep["failed"], 40)) and lo < 0.3 < hi and lo < rep["rate"] < hi
    assert rep["signatures"] == [{"signature": "RuntimeError: lost a race in the scheduler", "count": rep["failed"],
                                  "reproduces": True}]

    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--repeat", "10")
    assert "runs: " in r.out and "95% interval" in r.out and "(the captured failure)" in r.out, r


@pytest.mark.slow
def test_capture_counts_the_calls_that_failed_and_those_that_did_not(tmp_path):
    import subprocess
    import sys

    from conftest import HELPERS, child_env

    run = subprocess.run([sys.executable, str(HELPERS / "environment_backends.py"), str(tmp_path / "dumps")],
                         capture_output=True, text=True, timeout=300, env=child_env(tests=True))
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert 0 < seen["failed"] < 20
    (dump,) = find_dumps(tmp_path / "dumps")
    assert json.loads((dump / "manifest.json").read_text())["failure"]["calls"] == seen


@pytest.mark.slow
def test_minify_as_captured_shrinks_a_failure_that_needs_a_flag_and_its_repro_sets_it(cli, tmp_path, own_process_state):
    torch.set_float32_matmul_precision("medium")
    dump = _capture(tmp_path / "dumps", backends.fails_under_medium_precision)
    torch.set_float32_matmul_precision("highest")

    r = cli("minify", dump, "--trust-backend", "--as-captured", "-o", tmp_path / "min", "--json")
    assert r.code == 0, r  # repro.py, run on its own in a fresh interpreter, showed the captured failure
    result = json.loads(r.out)
    assert result["signature"] == "RuntimeError: reduced-precision matmul lowering is broken"
    assert result["final_nodes"] < result["start_nodes"] and result["environment_differences"] == []
    assert "torch.set_float32_matmul_precision('medium')" in (tmp_path / "min" / "repro.py").read_text()


@pytest.mark.slow
def test_bisect_envs_names_the_recorded_variable_that_brings_the_failure(cli, tmp_path, monkeypatch, untrusted,
                                                                         own_process_state):
    """The variables bisected are those --as-captured restores: on the allow-list, within their
    bound; a hostile manifest's others are listed as not bisected, and never set."""
    monkeypatch.setenv(backends.ALLOWED_FAIL_VAR, "1")
    monkeypatch.setenv("TORCHINDUCTOR_GRAPHDBG_PROBE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE", "1")
    torch.set_float32_matmul_precision("medium")
    dump = _capture(tmp_path / "dumps", backends.fails_under_allowed_env_var)
    torch.set_float32_matmul_precision("highest")
    hostile = {k: HOSTILE_VARS[k] for k in ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE", "TORCHINDUCTOR_CPP_MARCH",
                                            "TORCHINDUCTOR_COMPILE_THREADS", "OMP_NUM_THREADS")}
    _with_vars(dump, hostile)
    for name in (backends.ALLOWED_FAIL_VAR, "TORCHINDUCTOR_GRAPHDBG_PROBE", "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE", *hostile):
        monkeypatch.delenv(name, raising=False)

    r = cli("bisect", "envs", dump, "--trust-backend", "--json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert result["mode"] == "settings" and result["culprit"] == f"env var {backends.ALLOWED_FAIL_VAR}" and result["alone"], result
    verdicts = [(run["label"], run["verdict"]) for run in result["runs"]]
    assert verdicts[0] == ("now", "passes") and verdicts[1] == ("with the 4 captured values", "reproduces"), verdicts
    assert len(result["runs"]) <= 2 + 2 + 1  # now, all, log2 of the 4 that may be set, alone
    assert result["differences"] == [{"kind": "env var", "name": backends.ALLOWED_FAIL_VAR, "captured": "1", "now": None,
                                      "restorable": True, "read_by_backend": True}]
    assert all(f"env var {name}" in result["note"] for name in hostile), result["note"]  # and TORCHINDUCTOR_GRAPHDBG_PROBE
    assert not any(name in run["label"] for run in result["runs"] for name in hostile)
    assert os.environ.get(backends.ALLOWED_FAIL_VAR) is None  # what the bisection set for its children is gone again

    monkeypatch.setenv(backends.ALLOWED_FAIL_VAR, "1")  # as captured: nothing that differs changes the outcome
    r = cli("bisect", "envs", dump, "--trust-backend")
    assert r.code == 0 and "no environment changes the outcome" in r.out, r


def _venv(where: Path, version: str, broken: bool) -> Path:
    """A venv of this interpreter's packages plus its own graphdbg_envtest_pkg ``version``."""
    import site
    import subprocess
    import sys
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True)
    python = where / "bin" / "python"
    own = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip())
    # with the installed packages a .pth put on this interpreter's path (a venv seeing an image's own environment)
    installed = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    ours = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], *installed]) if Path(p).is_dir()]
    (own / "this_pythons_packages.pth").write_text("\n".join(ours) + "\n")
    _package(own, version, broken)
    return python


def _package(folder: Path, version: str, broken: bool) -> None:
    pkg = folder / "graphdbg_envtest_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"BROKEN = {broken}\n\n"
        "def backend(gm, example_inputs):\n"
        "    if BROKEN:\n"
        f"        raise RuntimeError('release {version} broke the lowering')\n"
        "    return gm.forward\n")
    info = folder / f"graphdbg_envtest_pkg-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: graphdbg_envtest_pkg\nVersion: {version}\n")
    (info / "top_level.txt").write_text("graphdbg_envtest_pkg\n")


@pytest.mark.slow
def test_bisect_envs_names_the_interpreter_whose_backend_release_brings_the_failure(cli, tmp_path, monkeypatch):
    _package(tmp_path / "capturing", "2.0", broken=True)
    monkeypatch.syspath_prepend(str(tmp_path / "capturing"))
    import graphdbg_envtest_pkg

    dump = _capture(tmp_path / "dumps", graphdbg_envtest_pkg.backend)
    env = json.loads((dump / "manifest.json").read_text())["env"]
    assert (env["backend_package"], env["backend_version"]) == ("graphdbg_envtest_pkg", "2.0")
    old, new = _venv(tmp_path / "v1", "1.0", broken=False), _venv(tmp_path / "v2", "2.0", broken=True)

    r = cli("bisect", "envs", dump, "--trust-backend", "--python", old, "--python", new, "--json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert result["mode"] == "pythons" and result["culprit"] == str(new)
    assert [run["verdict"] for run in result["runs"]] == ["passes", "reproduces"]
    assert result["differences"][0] == {"kind": "backend", "name": "graphdbg_envtest_pkg version", "captured": "1.0",
                                        "now": "2.0", "restorable": False, "read_by_backend": False}

    r = cli("bisect", "envs", dump, "--trust-backend", "--python", tmp_path / "nothing-here")
    assert r.code == 2 and "not an interpreter" in r.err, r


@pytest.mark.slow
def test_inductor_records_the_hash_of_its_code_and_a_replay_that_generates_other_code_says_so(cli, tmp_path):
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(4, 8)
    with torch._inductor.config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}):  # Inductor's own bug: relu + 1
        torch.compile(model, backend=graphdbg.capture("inductor", dump_dir=tmp_path / "dumps", mode="accuracy"))(x)
    (dump,) = find_dumps(tmp_path / "dumps")
    code = json.loads((dump / "manifest.json").read_text())["generated_code"]
    assert code["compiler"] == "inductor" and len(code["hash"]) == 16 and code["graphs"] == [code["hash"]]

    r = cli("replay", dump, "--json")  # the recorded setting restored: the same code, in a child with its own caches
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"] and out["generated_code"]["hash"] == code["hash"], r
    assert not any(d["kind"] == "generated code" for d in out["environment_differences"])

    r = cli("replay", dump, "--no-config", "--json")
    out = json.loads(r.out)
    assert r.code == 0 and not out["reproduces"], r
    first = out["environment_differences"][0]
    assert (first["kind"], first["name"], first["captured"]) == ("generated code", "inductor output code hash", code["hash"])
    assert first["now"] == out["generated_code"]["hash"] != code["hash"]
    r = cli("replay", dump, "--no-config")
    verdict = next(ln for ln in r.out.splitlines() if "NOT REPRODUCED" in ln)
    assert "suspects: generated code inductor output code hash" in verdict and "inject_relu_bug_TESTING_ONLY" in verdict, r.out


@pytest.mark.gpu
def test_inductor_records_its_autotune_choices_and_a_replay_compares_them(cli, tmp_path):
    torch._dynamo.reset()
    model, x = torch.nn.Linear(256, 256).cuda(), torch.randn(64, 256, device="cuda")
    with torch._inductor.config.patch(max_autotune=True, max_autotune_gemm_backends="TRITON,ATEN"):
        torch.compile(model, backend=graphdbg.capture("inductor", dump_dir=tmp_path / "dumps", mode="always"))(x)
    torch._dynamo.reset()
    (dump,) = find_dumps(tmp_path / "dumps")
    code = json.loads((dump / "manifest.json").read_text())["generated_code"]
    assert code["hash"] and code["autotune"] and all(isinstance(v, str) and v for v in code["autotune"].values()), code

    r = cli("replay", dump, "--json")  # max_autotune restored: the replay benchmarks the choices again
    out = json.loads(r.out)
    assert r.code == 0 and out["generated_code"]["hash"], r
    named = {d["name"] for d in out["environment_differences"] if d["kind"] == "generated code"}
    for op, choice in code["autotune"].items():
        if out["generated_code"]["autotune"].get(op, choice) != choice:
            assert f"autotune choice of {op}" in named, out["environment_differences"]
    assert ("inductor output code hash" in named) == (out["generated_code"]["hash"] != code["hash"])


@pytest.mark.slow
def test_a_dump_of_every_graph_records_the_code_its_compile_generated_after_it(tmp_path):
    """mode="always" writes its dump before the compile (a compile that kills the process leaves
    it); the code Inductor generated is added to it once the compile is done."""
    torch._dynamo.reset()
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), torch.randn(4, 8)
    torch.compile(model, backend=graphdbg.capture("inductor", dump_dir=tmp_path / "dumps", mode="always"))(x)
    torch._dynamo.reset()
    (dump,) = find_dumps(tmp_path / "dumps")
    code = graphdbg.load(dump).manifest_data["generated_code"]
    assert code["compiler"] == "inductor" and len(code["hash"]) == 16 and code["graphs"] == [code["hash"]], code


# The allow-list of restored variables (issue 51 section 1) ---------------------------------------
# What the round of attacks restored, and more of our own: each stops compiling, changes the
# backend, hides an error, writes, runs a program, or asks for more threads than the machine has.
HOSTILE_MARCH = "native -wrapper sh,-c,touch${IFS}$(pwd|cut -c1)tmp$(pwd|cut -c1)PWNED"
HOSTILE_VARS = {
    "TORCHINDUCTOR_CPP_MARCH": HOSTILE_MARCH,
    "TORCHINDUCTOR_CPP_ENABLE_FLOATING_POINT_CONTRACT_FLAG": HOSTILE_MARCH.replace("native", "fast", 1),
    "TORCH_COMPILE_DISABLE": "1", "TORCHDYNAMO_DISABLE": "1", "TORCH_COMPILE_OVERRIDE_BACKENDS": ".*:eager",
    "TORCHDYNAMO_SUPPRESS_ERRORS": "1", "TORCH_BISECT_BACKEND": "eager", "TORCH_BISECT_SUBSYSTEM": "lowerings",
    "TORCH_BISECT_MAX": "0", "TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS": "cpp.march=native", "TORCH_COMPILE_CPROFILE": "1",
    "CUDA_VISIBLE_DEVICES": "", "CUDA_LAUNCH_BLOCKING": "1", "OMP_TOOL_LIBRARIES": "libtool.so", "OMP_TOOL": "enabled",
    "KMP_SETTINGS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "4096", "TORCH_PYTHON_NATIVE_USER_GRAPH_ORDER_FN": "os:system",
    "TORCH_COMPILE_STROBELIGHT": "1", "TORCH_COMPILE_STICKY_PGO_WRITE": "pgo", "TORCH_HUB": "hub", "TORCH_MODEL_ZOO": "zoo",
    # our own: a bool out of its bound, checks turned off, a log, JIT off, threads past the CPUs, a loader variable
    "TORCHINDUCTOR_MAX_AUTOTUNE": "yes", "TORCHINDUCTOR_SIZE_ASSERTS": "0", "TORCH_LOGS": "+dynamo", "PYTORCH_JIT": "0",
    "OMP_NUM_THREADS": "4096", "NVIDIA_TF32_OVERRIDE": "0 ", "TORCH_CUDA_ARCH_LIST": "sm_90;x",
    "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "LD_PRELOAD": "libevil.so", "MYKERNEL_MODE": "fast x",
}
ALLOWED_VARS = {"TORCHINDUCTOR_UNIQUE_KERNEL_NAMES": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "TORCHINDUCTOR_MULTI_KERNEL": "2",
                "TRITON_F32_DEFAULT": "ieee", "MKL_NUM_THREADS": "1"}


def _with_vars(dump: Path, variables: dict[str, str]) -> Path:
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["env"]["vars"] = {**manifest["env"]["vars"], **variables}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    return dump


@pytest.fixture
def untrusted(monkeypatch):
    for var in ("GRAPHDBG_TRUST_CONFIG", "GRAPHDBG_NO_CONFIG", "GRAPHDBG_CONFIG", "GRAPHDBG_AS_CAPTURED"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.slow
def test_replay_as_captured_restores_only_variables_on_the_allow_list(cli, tmp_path, untrusted, own_process_state):
    """Through the CLI: the replay child sees the allowed variables of a hostile manifest and none
    of the others; each of those is reported, in text and --json, as recorded, not restored."""
    dump = _with_vars(_capture(tmp_path / "dumps", backends.always_fails), {**HOSTILE_VARS, **ALLOWED_VARS})
    for name in {**HOSTILE_VARS, **ALLOWED_VARS}:
        os.environ.pop(name, None)
    os.environ["TORCHINDUCTOR_MAX_AUTOTUNE_GEMM"] = "1"  # on the list, set now, unset at capture: unset as captured

    r = cli("replay", dump, "--backend", "environment_backends:reports_env", "--trust-backend", "--as-captured", "--json")
    out = json.loads(r.out)
    assert out["status"] == "crash" and "seen {" in out["signature"], r
    seen = json.loads(out["signature"].partition("seen ")[2])
    assert {k: seen.get(k) for k in ALLOWED_VARS} == ALLOWED_VARS
    assert not set(HOSTILE_VARS) & set(seen), seen
    assert "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM" not in seen
    left = {line.split(":")[0].removeprefix("env var ").split(",")[0]: line for line in out["not_restored"]}
    assert set(HOSTILE_VARS) <= set(left), out["not_restored"]
    assert all("recorded, not restored (" in left[name] for name in HOSTILE_VARS)
    assert "outside 1 to this machine's CPU count" in left["OMP_NUM_THREADS"]
    assert "is not one of {0, 1}" in left["TORCHINDUCTOR_MAX_AUTOTUNE"]
    assert "set it yourself: export MYKERNEL_MODE='fast x'" in left["MYKERNEL_MODE"]
    assert "--trust-config restores it" in left["TORCH_COMPILE_DISABLE"]

    r = cli("replay", dump, "--backend", "environment_backends:reports_env", "--trust-backend", "--as-captured")
    assert "env var TORCHDYNAMO_DISABLE: recorded, not restored (not on the allow-list" in r.out, r.out


def _variables_torch_and_triton_read() -> set[str]:
    """Every environment variable the installed torch (its Python and its C++ headers) and Triton
    read or name as a config's variable, found in their source now; and those CUDA's, cuBLAS's,
    NCCL's, OpenMP's and MKL's documentation lists (their source is not installed)."""
    import importlib.util
    import re

    found = re.compile(r"""(?:environ\.get|getenv|environ\[|environ\.setdefault|environ\.pop|env_name_(?:force|default)\s*=|"""
                       r"""\benv_var\s*=|get_env\w*|check_env|env_(?:bool|int|str|opt_str|opt_bool|class|list)"""
                       r"""|_utils_internal\.\w+)\s*\(?\s*["']([A-Z][A-Z0-9_]{2,})["']""")
    names = set(CUDA_DOCUMENTED)
    for package in ("torch", "triton"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        for path in [*root.rglob("*.py"), *root.rglob("*.h")]:
            try:
                text = path.read_text(errors="ignore")
            except OSError:
                continue
            if "env" in text or "_utils_internal" in text:
                names.update(m[1] for m in found.finditer(text))
    return names


CUDA_DOCUMENTED = {
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MANAGED_FORCE_DEVICE_ALLOC", "CUDA_CACHE_DISABLE", "CUDA_CACHE_PATH",
    "CUDA_CACHE_MAXSIZE", "CUDA_FORCE_PTX_JIT", "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_JIT", "CUDA_DISABLE_JIT",
    "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_DEVICE_MAX_COPY_CONNECTIONS", "CUDA_AUTO_BOOST",
    "CUDA_SCALE_LAUNCH_QUEUES", "CUDA_GRAPHS_USE_NODE_PRIORITY", "CUDA_DEVICE_WAITS_ON_EXCEPTION", "CUDA_MODULE_LOADING",
    "CUDA_MODULE_DATA_LOADING", "CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION",
    "CUDA_ENABLE_LIGHTWEIGHT_COREDUMP", "CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "CUDA_COREDUMP_FILE", "CUDA_COREDUMP_PIPE",
    "CUDA_COREDUMP_GENERATION_FLAGS", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_CLIENT_PRIORITY", "CUDA_LOG_FILE", "CUDA_INJECTION64_PATH",
    "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_LOG_LEVEL", "CUBLASLT_LOG_FILE", "CUBLASLT_LOG_MASK", "CUBLAS_LOGINFO_DBG",
    "CUBLAS_LOGDEST_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGDEST_DBG", "CUDNN_LOGLEVEL_DBG", "NVIDIA_TF32_OVERRIDE",
    "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME", "NCCL_NET_PLUGIN", "NCCL_TOPO_FILE", "NCCL_TUNER_PLUGIN", "NCCL_BUFFSIZE", "NCCL_NTHREADS",
    "OMP_NUM_THREADS", "OMP_TOOL", "OMP_TOOL_LIBRARIES", "OMP_TOOL_VERBOSE_INIT", "OMP_DISPLAY_ENV", "OMP_PROC_BIND",
    "OMP_PLACES", "OMP_STACKSIZE", "OMP_WAIT_POLICY", "OMP_DYNAMIC", "KMP_SETTINGS", "KMP_AFFINITY", "KMP_BLOCKTIME",
    "KMP_DUPLICATE_LIB_OK", "MKL_NUM_THREADS", "MKL_DYNAMIC", "MKL_VERBOSE", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE",
}
ODD_VALUES = ("1", "0", "2", "4096", "-1", "1.5", "yes", "", "ieee", "LAZY", "fast", ":4096:8", HOSTILE_MARCH, "/tmp/x")


@pytest.mark.slow
def test_every_variable_torch_triton_and_cuda_read_is_restored_only_by_the_allow_list(untrusted, own_process_state):
    """A manifest recording every variable torch, Inductor, Triton and CUDA read or document, each
    with one odd value after another: what ``--as-captured`` (and so bisect envs and repro.py, by
    the same decision) restores is on the allow-list and within its bound, the rest is reported."""
    from graphdbg.backends.restored_vars import ENV_RESTORABLE
    from graphdbg.judge.environment_diff import SET_BY_TORCH
    from graphdbg.replay.as_captured import python_lines, restore

    names = _variables_torch_and_triton_read() | set(HOSTILE_VARS)
    assert len(names) > 400 and {"TORCH_COMPILE_DISABLE", "TORCHINDUCTOR_CPP_MARCH", "TORCHINDUCTOR_MAX_AUTOTUNE"} <= names
    # every entry of the list is a variable torch or Triton reads, or CUDA documents (Triton's own where it is installed)
    import importlib.util

    triton = importlib.util.find_spec("triton") is not None
    unread = {n for n in ENV_RESTORABLE if triton or not n.startswith("TRITON_")} - names
    assert len(unread) <= 3, unread  # a torch older or newer than 2.13 may lack one or two; a typo would show here
    for value in ODD_VALUES:
        for name in names:
            os.environ.pop(name, None)
        manifest = {"env": {"vars": dict.fromkeys(names, value)}}
        left = restore(manifest)
        restored = {n for n in names if os.environ.get(n) == value}
        assert restored <= set(ENV_RESTORABLE), (value, sorted(restored - set(ENV_RESTORABLE)))
        assert all(ENV_RESTORABLE[n].bound.why_not(value) is None for n in restored), value
        reported = {line.split(":")[0].removeprefix("env var ").split(",")[0] for line in left}
        assert names - restored - SET_BY_TORCH <= reported, value
        assert all("recorded, not restored (" in line for line in left)
        os.environ["GRAPHDBG_AS_CAPTURED"] = "{}"  # what a repro.py of --as-captured sets: the same variables
        assert {line.partition("[")[2].partition("]")[0].strip("'") for line in python_lines(manifest)
                if line.startswith("os.environ[")} == restored
        del os.environ["GRAPHDBG_AS_CAPTURED"]
    assert restored_at(str((os.cpu_count() or 1) + 1), "OMP_NUM_THREADS") is False
    assert restored_at(str(os.cpu_count() or 1), "OMP_NUM_THREADS") is True


def restored_at(value: str, name: str) -> bool:
    from graphdbg.replay.as_captured import restore

    os.environ.pop(name, None)
    restore({"env": {"vars": {name: value}}})
    return os.environ.get(name) == value


# The environment the backend itself reads (issue 53 section 4) -----------------------------------
MYKERNEL = '''import os


def backend(gm, example_inputs):
    mode = os.environ["MYKERNEL_MODE"] if "MYKERNEL_MODE" in os.environ else "safe"
    os.getenv("MYKERNEL_DEBUG")  # unset at capture: read all the same
    os.environ.get("MYKERNEL_API_TOKEN")
    if mode == "fast":
        raise RuntimeError("mykernel: the fast path has no lowering for addmm")
    return gm.forward
'''


@pytest.mark.slow
def test_a_variable_the_backend_reads_is_recorded_and_named_first_when_the_replay_lacks_it(cli, tmp_path, monkeypatch,
                                                                                           untrusted, own_process_state):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mykernel_envtest.py").write_text(MYKERNEL)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    import mykernel_envtest

    monkeypatch.setenv("MYKERNEL_MODE", "fast")
    monkeypatch.setenv("MYKERNEL_API_TOKEN", "hunter2")
    monkeypatch.setenv("MYKERNEL_UNREAD", "1")  # set, never read by the backend: not recorded
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")  # recorded by its prefix; not read by this backend
    monkeypatch.delenv("MYKERNEL_DEBUG", raising=False)
    dump = _capture(tmp_path / "dumps", mykernel_envtest.backend)
    assert "get" not in type(os.environ).__dict__ and "__contains__" not in type(os.environ).__dict__  # the window closed
    env = json.loads((dump / "manifest.json").read_text())["env"]
    assert {"MYKERNEL_MODE", "MYKERNEL_DEBUG", "MYKERNEL_API_TOKEN"} <= set(env["read"]), env["read"]
    assert env["vars"]["MYKERNEL_MODE"] == "fast" and env["vars"]["MYKERNEL_API_TOKEN"] == "<redacted>"
    assert "MYKERNEL_DEBUG" not in env["vars"] and "MYKERNEL_UNREAD" not in env["vars"] and "HOME" not in env["read"]
    for name in ("MYKERNEL_MODE", "MYKERNEL_API_TOKEN", "TORCHINDUCTOR_MAX_AUTOTUNE"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("MYKERNEL_DEBUG", "1")

    r = cli("replay", dump, "--trust-backend")
    assert r.code == 0, r
    verdict = next(ln for ln in r.out.splitlines() if "NOT REPRODUCED" in ln)
    assert ("env var MYKERNEL_MODE, read by the backend ('fast' at capture, unset now; "
            "to replay as captured: export MYKERNEL_MODE=fast)") in verdict, r.out
    assert "env var MYKERNEL_DEBUG, read by the backend (unset at capture, '1' now; to replay as captured: unset MYKERNEL_DEBUG)" in verdict
    suspects = verdict.partition("suspects: ")[2]
    assert suspects.startswith("env var MYKERNEL_") and max(suspects.index("MYKERNEL_MODE"), suspects.index("MYKERNEL_DEBUG")) < (
        suspects.index("TORCHINDUCTOR_MAX_AUTOTUNE")), verdict  # the backend's own first, the prefixed one after

    r = cli("replay", dump, "--trust-backend", "--as-captured", "--json")  # a variable of the backend's own: not restored
    out = json.loads(r.out)
    assert r.code == 0 and not out["reproduces"], r
    assert sorted((d["name"], d["read_by_backend"], d["restorable"]) for d in out["environment_differences"]) == [
        ("MYKERNEL_DEBUG", True, False), ("MYKERNEL_MODE", True, False)], out  # TORCHINDUCTOR_MAX_AUTOTUNE=1: on the list
    assert any(line.startswith("env var MYKERNEL_MODE, read by the backend: recorded, not restored (")
               and "export MYKERNEL_MODE=fast" in line for line in out["not_restored"]), out["not_restored"]

    monkeypatch.setenv("MYKERNEL_MODE", "fast")  # the line the report gave: the user's own doing
    r = cli("replay", dump, "--trust-backend")
    assert r.code == 1 and "REPRODUCED: the same failure as captured" in r.out, r


def test_generated_code_hash_ignores_the_order_of_the_inputs_and_where_each_is_freed():
    """torch 2.11 retraces a replayed graph with its inputs in another order: the wrapper checks
    and frees them in that order while the computation is the same; another computation is not."""
    from graphdbg.backends.generated_code import code_hash

    def wrapper(inputs, body):
        shapes = {"primals_1": "(8, 8), (8, 1)", "primals_2": "(8, ), (1, )", "primals_3": "(4, 8), (8, 1)"}
        checks = "".join(f"    assert_size_stride({n}, {shapes[n]})\n" for n in inputs)
        return f"def call(args):\n    {', '.join(inputs)} = args\n    args.clear()\n{checks}{body}    return (buf0, )\n"

    first = wrapper(["primals_1", "primals_2", "primals_3"],
                    "    extern_kernels.addmm(primals_2, primals_3, primals_1, out=buf0)\n    del primals_1\n    del primals_2\n")
    again = wrapper(["primals_3", "primals_1", "primals_2"],
                    "    extern_kernels.addmm(primals_2, primals_3, primals_1, out=buf0)\n    del primals_1\n    del primals_3\n")
    other = wrapper(["primals_1", "primals_2", "primals_3"],
                    "    extern_kernels.mm(primals_3, primals_1, out=buf0)\n    del primals_1\n")
    assert code_hash(first) == code_hash(again) != code_hash(other)
