"""Compiler settings from a dump are restored by allow-list: typed knobs only, strings never
(unless listed with their values), and everything else shown and skipped unless --trust-config."""

from __future__ import annotations

import importlib
import json
import shutil
import typing

import pytest
from conftest import FIXTURES

from graphdbg.backends.compiler_config import CONFIGS, ENUMS, restorable, settings_and_skipped

HOSTILE = "native -wrapper /bin/sh,-c,touch${{IFS}}{m}"  # runs `touch MARKER` when it reaches g++


def _string_settings(short: str) -> list[str]:
    mod = importlib.import_module(CONFIGS[short])
    out = []
    for name, entry in mod._config.items():
        hint = getattr(entry, "value_type", None)
        if str in (typing.get_args(hint) or (hint,)) or isinstance(entry.default, str):
            out.append(f"{short}.{name}")
    return out


@pytest.mark.parametrize("short", ["inductor", "dynamo", "functorch"])
def test_no_string_setting_of_torch_takes_a_command_line_from_a_dump(short):
    keys = _string_settings(short)
    assert len(keys) > 5  # the population is torch's own, not a hand list
    for key in keys:
        assert restorable(key, HOSTILE.format(m="/tmp/x")) is not None, key
        for value in ENUMS.get(key, ()):  # listed knobs take their listed values only
            assert restorable(key, value) is None, (key, value)


def test_typed_knobs_are_restored_and_file_writing_ones_are_not():
    assert restorable("inductor.fallback_random", True) is None
    assert restorable("inductor.max_fusion_size", 32) is None
    assert restorable("inductor.cpp.inject_relu_bug_TESTING_ONLY", "compile_error") is None
    assert restorable("inductor.max_fusion_size", "32") is not None  # a string where an int goes
    assert restorable("inductor.max_fusion_size", 10**12) is not None  # out of bounds
    assert restorable("inductor.compile_threads", 10_000) is not None  # a fork bomb of compile workers
    assert restorable("inductor.save_args", True) is not None  # writes pickles
    assert restorable("inductor.trace.enabled", True) is not None  # writes a debug folder
    assert restorable("inductor.max_autotune_gemm_backends", "ATEN,TRITON") is None
    assert restorable("inductor.max_autotune_gemm_backends", "ATEN,CUTLASS") is not None


def test_trust_config_restores_everything(monkeypatch):
    manifest = {"config": {"values": {"inductor.cpp.march": "native", "inductor.fallback_random": True, "bad key": 1}}}
    monkeypatch.delenv("GRAPHDBG_TRUST_CONFIG", raising=False)
    settings, skipped = settings_and_skipped(manifest)
    assert settings == {"inductor.fallback_random": True} and set(skipped) == {"inductor.cpp.march", "bad key"}
    monkeypatch.setenv("GRAPHDBG_TRUST_CONFIG", "1")
    settings, skipped = settings_and_skipped(manifest)
    assert settings == {"inductor.cpp.march": "native", "inductor.fallback_random": True} and set(skipped) == {"bad key"}


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
    assert any("inductor.cpp.march: not restored" in s for s in skipped), out["stand_ins"]
    assert any("enable_floating_point_contract_flag: not restored" in s for s in skipped)
    assert not any("fallback_random" in s for s in skipped)  # a typed knob is restored

    r = cli("compare", dump, "--json")
    assert r.code in (0, 1), r
    assert not marker.exists()

    # the control: trusted, the same setting does reach the compiler's command line
    r = cli("replay", dump, "--backend", "inductor", "--no-isolate", "--trust-config", "--json")
    assert marker.exists(), json.loads(r.out)["message"]
