"""Recorded compiler settings that would change whether anything is compiled (issue 42).

A dump's settings are restored only from an explicit allow-list (``RESTORABLE``), each setting
with the reason restoring it cannot stop compilation, hide an error, or write or run anything.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from conftest import FIXTURES, ROOT

from graphdbg.backends.compiler_config import CONFIGS, NEVER, NEVER_KEYS, RESTORABLE, _module, replay_settings

# Settings a hostile dump records to turn a failing replay into a pass, or to write and run
# things on the replaying machine; none is restored, each is shown.
HOSTILE = {"dynamo.recompile_limit": 0, "dynamo.accumulated_recompile_limit": 0, "dynamo.cache_size_limit": 0,
           "dynamo.suppress_errors": True, "dynamo.disable": True, "dynamo.cprofile": True,
           "dynamo.do_not_emit_runtime_asserts": True, "inductor.generate_intermediate_hooks": True,
           "inductor.fx_graph_remote_cache": True, "inductor.trace.enabled": True}


@pytest.fixture
def no_overrides(monkeypatch):
    for var in ("GRAPHDBG_TRUST_CONFIG", "GRAPHDBG_NO_CONFIG", "GRAPHDBG_CONFIG"):
        monkeypatch.delenv(var, raising=False)


def test_settings_that_stop_compiling_hide_errors_or_write_are_not_restored(no_overrides):
    present = {k: v for k, v in HOSTILE.items() if k.partition(".")[2] in _module(k.partition(".")[0])._config}
    assert len(present) >= 8, present
    settings = replay_settings({"config": {"values": {**present, "dynamo.recompile_limit": 0,
                                                      "inductor.max_autotune": True}}})
    assert dict(settings) == {"inductor.max_autotune": True}
    assert set(settings.skipped) == set(present), settings.skipped
    assert "would skip compiling" in settings.skipped["dynamo.recompile_limit"]
    assert "never restored" in settings.skipped["dynamo.cprofile"]
    # a limit that still compiles is restored
    assert dict(replay_settings({"config": {"values": {"dynamo.recompile_limit": 4}}})) == {"dynamo.recompile_limit": 4}


def test_the_allow_list_is_explicit_typed_and_reasoned(no_overrides):
    """Every allowed setting exists in this torch, is typed (no free string), has a reason,
    and none of them is one that is never restored; every other setting of torch's three
    configs, whatever its type, is not restored."""
    from graphdbg.backends.compiler_config import ENUMS, _value_type

    for key, rule in RESTORABLE.items():
        short, _, name = key.partition(".")
        assert name in _module(short)._config, key
        assert rule.reason and len(rule.reason) > 40, key
        assert key not in NEVER_KEYS and not NEVER.search(name), key
        assert _value_type(key) is not str or key in ENUMS, key
    others = [f"{short}.{name}" for short in CONFIGS for name, entry in _module(short)._config.items()
              if f"{short}.{name}" not in RESTORABLE and not name.startswith("_") and entry.value_type is bool]
    assert len(others) > 100
    settings = replay_settings({"config": {"values": {key: True for key in others}}})
    assert dict(settings) == {}


@pytest.mark.slow
def test_a_failing_dump_that_records_dynamo_disable_still_fails_and_says_so(tmp_path, cli, no_overrides):
    """The attack: a failing Inductor dump whose settings would make its replay pass without
    compiling. The replay still compiles and fails; the verdict lists each setting not restored."""
    (src,) = [p.parent for p in (FIXTURES / "block_compile_error").rglob("manifest.json")]
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["config"] = {"values": {"dynamo.disable": True, "dynamo.suppress_errors": True, "dynamo.recompile_limit": 0,
                                     "dynamo.cprofile": True}, "skipped": {}}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    r = cli("replay", dump, "--trust-backend", "--json")
    out = json.loads(r.out)
    assert out["status"] == "crash" and "no lowering for gelu" in out["signature"], out
    for key in ("dynamo.disable", "dynamo.suppress_errors", "dynamo.recompile_limit", "dynamo.cprofile"):
        assert any(s.startswith(f"setting {key}: ") and "not restored" in s for s in out["stand_ins"]), out["stand_ins"]


def test_settings_whose_value_reaches_a_resource_are_bounded_even_trusted(no_overrides, monkeypatch):
    """Every int or float setting on the list has a bound (a thread count one sized to this
    machine); a value past it is not restored, --trust-config or not. The checks come back on
    only: a recorded False would take them out."""
    from graphdbg.backends.compiler_config import _value_type

    numeric = [key for key in RESTORABLE if _value_type(key) in (int, float, int | None, float | None)]
    assert len(numeric) > 10 and all(RESTORABLE[key].bound is not None for key in numeric), [
        key for key in numeric if RESTORABLE[key].bound is None]
    cpus = os.cpu_count() or 1
    recorded = {"inductor.cpp.threads": 4096, "inductor.max_fusion_size": 10**6, "inductor.size_asserts": False,
                "inductor.nan_asserts": True, "inductor.triton.max_tiles": 3}
    for trust in ("", "1"):
        monkeypatch.setenv("GRAPHDBG_TRUST_CONFIG", trust)
        settings = replay_settings({"config": {"values": recorded}})
        assert set(settings.skipped) == {"inductor.cpp.threads", "inductor.max_fusion_size"} | ({"inductor.size_asserts"} if not trust else set())
        assert f"outside -1 to this machine's CPU count ({cpus})" in settings.skipped["inductor.cpp.threads"]
    monkeypatch.delenv("GRAPHDBG_TRUST_CONFIG")
    assert dict(replay_settings({"config": {"values": {"inductor.cpp.threads": cpus}}})) == {"inductor.cpp.threads": cpus}


@pytest.mark.slow
def test_a_thread_count_past_this_machines_cpus_is_recorded_not_restored(tmp_path, cli, no_overrides):
    """``num_threads=4096`` in the recorded flags ended in std::bad_alloc under --as-captured."""
    (src,) = [p.parent for p in (FIXTURES / "block_compile_error").rglob("manifest.json")]
    dump = tmp_path / "dump"
    shutil.copytree(src, dump)
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest.setdefault("env", {})["settings"] = {"num_threads": 4096, "num_interop_threads": 10**9}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    before = torch.get_num_threads()
    r = cli("replay", dump, "--backend", "eager", "--as-captured", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code in (0, 1) and torch.get_num_threads() == before, r
    left = {line.split(":")[0]: line for line in out["not_restored"]}
    assert "recorded, not restored ('4096' is not a value it takes here (1 to this machine's CPU count" in left["setting num_threads"]
    assert "recorded, not restored" in left["setting num_interop_threads"]


def test_the_docs_state_the_allow_lists_as_the_code_has_them():
    """docs/security.md holds the two allow-lists as ``restored_vars.markdown()`` writes them from
    the code: a variable or setting added, removed or rebounded there fails here until the docs say so."""
    from graphdbg.backends.restored_vars import markdown

    text = (ROOT / "docs" / "security.md").read_text()
    assert markdown() in text, "regenerate the allow-lists in docs/security.md: python -c " \
        "'from graphdbg.backends.restored_vars import markdown; print(markdown())'"
