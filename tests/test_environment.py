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
    from graphdbg.store.environment import settings

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
    from graphdbg.judge.environment import RANK

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
    assert "NOT REPRODUCED" in r.out and f"suspects: env var {backends.FAIL_VAR} ('1' at capture, unset now)" in r.out, r

    r = cli("replay", dump, "--trust-backend", "--as-captured")
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
def test_bisect_envs_names_the_recorded_variable_that_brings_the_failure(cli, tmp_path, monkeypatch, own_process_state):
    monkeypatch.setenv(backends.FAIL_VAR, "1")
    monkeypatch.setenv("TORCHINDUCTOR_GRAPHDBG_PROBE", "1")
    monkeypatch.setenv("TORCH_GRAPHDBG_OTHER", "yes")
    torch.set_float32_matmul_precision("medium")
    dump = _capture(tmp_path / "dumps", backends.fails_under_env_var)
    torch.set_float32_matmul_precision("highest")
    for name in (backends.FAIL_VAR, "TORCHINDUCTOR_GRAPHDBG_PROBE", "TORCH_GRAPHDBG_OTHER"):
        monkeypatch.delenv(name)

    r = cli("bisect", "envs", dump, "--trust-backend", "--json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert result["mode"] == "settings" and result["culprit"] == f"env var {backends.FAIL_VAR}" and result["alone"], result
    verdicts = [(run["label"], run["verdict"]) for run in result["runs"]]
    assert verdicts[0] == ("now", "passes") and verdicts[1][1] == "reproduces", verdicts
    assert len(result["runs"]) <= 2 + 3 + 1  # now, all, log2 of the 5 differences, alone
    assert result["differences"] == [{"kind": "env var", "name": backends.FAIL_VAR, "captured": "1", "now": None,
                                      "restorable": True}]
    assert os.environ.get(backends.FAIL_VAR) is None  # what the bisection set for its children is gone again

    monkeypatch.setenv(backends.FAIL_VAR, "1")  # as captured: nothing that differs changes the outcome
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
    ours = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]) if Path(p).is_dir()]
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
                                        "now": "2.0", "restorable": False}

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
    code = graphdbg.load(dump).manifest["generated_code"]
    assert code["compiler"] == "inductor" and len(code["hash"]) == 16 and code["graphs"] == [code["hash"]], code
