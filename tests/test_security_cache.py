"""The compiler cache of a dump's replays (issue 51, section 5): keyed by the content of every
file the replay reads and by what the replay trusted, so a dump changed anywhere, or replayed
with more trust, never finds what another replay's compiler left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphdbg.execution.sandbox import dump_compile_cache, trust_level


def _folders(cache: Path) -> set[str]:
    return {p.name for p in (cache / "compile").iterdir()} if (cache / "compile").is_dir() else set()


def test_a_file_rewritten_in_a_subfolder_with_its_size_and_mtime_gets_another_cache(fixture_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    dump = fixture_copy("block_runtime_error")
    (dump / "sub").mkdir()
    planted = dump / "sub" / "graph.py"
    planted.write_text("x = 1\n")
    first = dump_compile_cache(str(dump))
    assert first is not None and dump_compile_cache(str(dump)) == first  # the same dump: the same cache
    st = planted.stat()
    planted.write_text("x = 2\n")  # same size
    os.utime(planted, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    assert planted.stat().st_size == st.st_size and planted.stat().st_mtime_ns == st.st_mtime_ns
    assert dump_compile_cache(str(dump)) != first


def test_trusted_and_untrusted_replays_of_a_dump_never_share_a_cache(fixture_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GRAPHDBG_TRUST_CONFIG", raising=False)
    dump = str(fixture_copy("block_runtime_error"))
    nothing = dump_compile_cache(dump, trust_level(["inductor", None]))
    assert nothing == dump_compile_cache(dump, trust_level(["eager", "aot_eager"]))  # registered names: no one's code
    levels = [trust_level(["backends_for_tests:fixed", None]), trust_level(["inductor"], trust_kernels=True),
              trust_level(["inductor", "passes_for_tests:noop"])]
    monkeypatch.setenv("GRAPHDBG_AS_CAPTURED", '{"OMP_NUM_THREADS": "2"}')
    levels.append(trust_level(["inductor"]))
    monkeypatch.delenv("GRAPHDBG_AS_CAPTURED")
    monkeypatch.setenv("GRAPHDBG_TRUST_CONFIG", "1")
    levels.append(trust_level(["inductor"]))
    caches = [dump_compile_cache(dump, t) for t in levels]
    assert nothing not in caches and len(set(caches)) == len(caches)


@pytest.mark.slow
def test_an_untrusted_then_a_trusted_replay_compile_in_different_caches(fixture_copy, tmp_path, cli, monkeypatch):
    """As a user runs them: the untrusted replay's folder is not the trusted one's."""
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    dump = fixture_copy("block_runtime_error")
    cli("replay", dump, "--backend", "eager")
    untrusted = _folders(tmp_path / "cache")
    assert len(untrusted) == 1
    cli("replay", dump, "--backend", "eager", "--trust-config")
    assert len(_folders(tmp_path / "cache")) == 2
    cli("replay", dump, "--backend", "eager")
    assert len(_folders(tmp_path / "cache")) == 2  # the untrusted one again: its own, warm


def test_a_dump_too_big_to_hash_gets_no_shared_cache(fixture_copy, tmp_path, monkeypatch):
    """A sparse file of a terabyte in a dump: no minutes of hashing on every replay, no shared cache."""
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    dump = fixture_copy("block_runtime_error")
    with open(dump / "huge.bin", "wb") as f:
        f.truncate(1 << 40)
    os.mkfifo(dump / "pipe")  # never opened
    assert dump_compile_cache(str(dump)) is None
