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
