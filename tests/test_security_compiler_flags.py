"""A C++ compiler flag recorded in a dump's settings is never restored unless --trust-config:
replay and compare skip it (and say so); trusted, the same flag does reach g++ (the control).
The allow-list's unit tests are in tests/test_trust.py."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES

HOSTILE = "native -wrapper /bin/sh,-c,touch${{IFS}}{m}"  # runs `touch MARKER` when it reaches g++


@pytest.mark.slow
def test_replay_and_compare_of_a_dump_with_a_hostile_march_never_run_it(tmp_path, cli, monkeypatch):
    """The route of the red team: a C++ compiler flag in the recorded settings, reached by
    replay under Inductor (no flag at all) and by compare's default Inductor column."""
    (src,) = [p.parent for p in (FIXTURES / "block_compile_error").rglob("manifest.json")]
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    marker = tmp_path / "PWNED"
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["config"] = {"values": {"inductor.cpp.march": HOSTILE.format(m=marker),
                                     "inductor.cpp.enable_floating_point_contract_flag":
                                         HOSTILE.format(m=marker).replace("native", "fast", 1),
                                     "inductor.fallback_random": True}, "skipped": {}}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # a cached kernel would skip g++

    r = cli("replay", dump, "--backend", "inductor", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert not marker.exists()
    skipped = [s for s in out["stand_ins"] if s.startswith("setting ")]
    assert any(s.startswith("setting inductor.cpp.march: ") and "not restored" in s for s in skipped), out["stand_ins"]
    assert any("enable_floating_point_contract_flag: " in s and "not restored" in s for s in skipped)
    assert not any("fallback_random" in s for s in skipped)  # a typed knob is restored

    r = cli("compare", dump, "--json")
    assert r.code in (0, 1), r
    assert not marker.exists()

    # the control: trusted, the same setting does reach the compiler's command line
    r = cli("replay", dump, "--backend", "inductor", "--no-isolate", "--trust-config", "--json")
    assert marker.exists(), json.loads(r.out)["message"]


@pytest.mark.slow
def test_replay_as_captured_of_a_dump_with_a_hostile_march_variable_never_runs_it(tmp_path, cli, monkeypatch):
    """Issue 51's route: the variables TORCHINDUCTOR_CPP_MARCH and ..._FLOATING_POINT_CONTRACT_FLAG
    in the recorded environment, restored by --as-captured under Inductor, reached g++'s command
    line split like a shell. Neither is restored now (the marker the shell would write never
    appears, the sandbox letting the child write there); trusted, the march is (the control)."""
    (src,) = [p.parent for p in (FIXTURES / "block_compile_error").rglob("manifest.json")]
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    marker = tmp_path / "PWNED"
    slash = "$(pwd|cut${IFS}-c1)"  # no "/" in the value: a check for values that name a place would miss it
    hostile = "native -wrapper sh,-c,touch${IFS}" + str(marker).replace("/", slash)
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest.setdefault("env", {})["vars"] = {"TORCHINDUCTOR_CPP_MARCH": hostile,
                                              "TORCHINDUCTOR_CPP_ENABLE_FLOATING_POINT_CONTRACT_FLAG": "fast " + hostile[7:]}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    for var in ("GRAPHDBG_TRUST_CONFIG", "TORCHINDUCTOR_CPP_MARCH", "TORCHINDUCTOR_CPP_ENABLE_FLOATING_POINT_CONTRACT_FLAG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRAPHDBG_SANDBOX_WRITABLE", str(tmp_path))

    r = cli("replay", dump, "--backend", "inductor", "--as-captured", "--json")
    out = json.loads(r.out)
    assert not marker.exists(), out
    assert {line.split(":")[0] for line in out["not_restored"]} >= {
        "env var TORCHINDUCTOR_CPP_MARCH", "env var TORCHINDUCTOR_CPP_ENABLE_FLOATING_POINT_CONTRACT_FLAG"}, out["not_restored"]
    assert "is not one of {fast, off, on}" in next(s for s in out["not_restored"] if "CONTRACT_FLAG" in s)

    r = cli("replay", dump, "--backend", "inductor", "--as-captured", "--trust-config", "--json")
    assert marker.exists(), json.loads(r.out)["signature"]  # the control: the route is real
