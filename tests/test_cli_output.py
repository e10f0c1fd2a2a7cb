"""What the CLI prints: strict JSON, readable renderings, narrow terminals and pipes, the small flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import graphdbg

from conftest import FIXTURES, ROOT

BAD_REWRITE = "fixtures.programs:bad_rewrite_backend"
CORPUS = FIXTURES / "corpus"


def _strict(text: str) -> object:
    """json.loads that refuses NaN, Infinity and -Infinity, as JSON.parse in a browser does."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _two_ranks(tmp_path, monkeypatch):
    from graphdbg.capture.write import save_case

    root = tmp_path / "ranks"
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        save_case(graphdbg.load(FIXTURES / "block_compile_error").case(), root)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    return root


def test_every_json_output_is_strict_json(cli, tmp_path, monkeypatch):
    commands = [
        ("ls", FIXTURES),
        ("ls", CORPUS),
        ("show", FIXTURES / "block_dynamic"),  # dynamic shapes: the table had 52 NaN
        ("show", CORPUS / "Qwen3-0.6B" / "rank0_0.py"),
        ("replay", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE, "--no-isolate"),
        ("replay", FIXTURES / "block_compile_error", "--no-isolate"),
        ("compare", FIXTURES / "block_compile_error", "--backends", "eager,aot_eager", "--no-isolate"),  # NaN error, NaN signature
        ("minify", FIXTURES / "block_compile_error", "-o", tmp_path / "min"),
        ("bisect", "passes", FIXTURES / "block_compile_error", "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu"),
        ("bisect", "nodes", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE),
        ("bisect", "ranks", _two_ranks(tmp_path, monkeypatch)),
    ]
    for args in commands:
        r = cli(*args, "--json")
        assert r.code in (0, 1), (args, r)
        assert "NaN" not in r.out and "Infinity" not in r.out, args
        data = _strict(r.out)
        assert isinstance(data, dict) and data, args
    rows = _strict(cli("compare", FIXTURES / "block_compile_error", "--backends", "eager", "--no-isolate", "--json").out)["rows"]
    assert rows[0]["signature"] is None and rows[0]["max_abs_error"] is None


def test_bisect_results_print_as_text_not_json(cli, tmp_path, monkeypatch):
    r = cli("bisect", "passes", FIXTURES / "block_compile_error", "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu")
    assert r.code == 1 and "culprit" in r.out and "passes_for_tests:gelu_to_relu" in r.out, r
    assert not r.out.lstrip().startswith("{")
    r = cli("bisect", "ranks", _two_ranks(tmp_path, monkeypatch))
    assert r.code == 0 and "2 ranks, none differs" in r.out and not r.out.lstrip().startswith("{"), r
