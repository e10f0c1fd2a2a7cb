"""Trust (issue 23): code a dump names is imported only with --trust-backend, on every command.

A dump names code in several places: its backend (``module:callable``), a recipe, the backend and
passes minify recorded, the backend of the backward dump a forward dump links to. Each is
pointed here at a module that, when imported, creates a marker file; every command refuses it
with exit 2 and one line giving the exact command to run, and the marker never appears.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import graphdbg

EVIL = '''from pathlib import Path
Path({marker!r}).write_text("imported")


def backend(gm, example_inputs):
    return gm.forward


def a_pass(gm):
    return gm
'''


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """A module ``evil_mod`` that writes a marker when imported; returns the marker."""
    marker = tmp_path / "IMPORTED"
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "evil_mod.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.setenv("PYTHONPATH", str(mods))
    return marker


def _edit(dump: Path, **changes) -> None:
    m = json.loads((dump / "manifest.json").read_text())
    m.update(changes)
    (dump / "manifest.json").write_text(json.dumps(m))


def _refused(r, command: str) -> None:
    lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
    assert r.code == 2, r
    assert len(lines) == 1 and lines[0].startswith("graphdbg: error: "), r
    assert f"graphdbg {command} " in lines[0] and "--trust-backend" in lines[0], r


COMMANDS = {
    "replay": lambda d, t: ["replay", d, "--no-isolate"],
    "compare": lambda d, t: ["compare", d, "--backends", "eager,dump", "--no-isolate"],
    "minify": lambda d, t: ["minify", d, "--no-isolate", "-o", t / "min"],
    "bisect passes": lambda d, t: ["bisect", "passes", d, "--passes", "passes_for_tests:count_nodes"],
    "bisect nodes": lambda d, t: ["bisect", "nodes", d],
    "export-test": lambda d, t: ["export-test", d, "-o", t / "t" / "test_x.py"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("field", ["backend", "recipe"])
def test_every_command_refuses_the_dumps_backend_without_trust(command, field, fixture_copy, evil, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    if field == "backend":
        _edit(dump, backend="evil_mod:backend")
    else:
        _edit(dump, backend="aot_autograd", backend_recipe={
            "kind": "aot_autograd", "kwargs": {"fw_compiler": {"callable": "evil_mod:backend"}}})
    r = cli(*COMMANDS[command](dump, tmp_path))
    _refused(r, command)
    assert not evil.exists()
    assert not (tmp_path / "t").exists() and not (tmp_path / "min").exists()


@pytest.mark.parametrize("field", ["backend", "passes"])
def test_export_test_refuses_what_minify_recorded_without_trust(field, fixture_copy, evil, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    minified = {"from": None, "backend": "eager", "passes": None}
    minified[field] = "evil_mod:backend" if field == "backend" else "evil_mod:a_pass"
    _edit(dump, backend="eager", minified=minified)
    out = tmp_path / "t" / "test_x.py"
    _refused(cli("export-test", dump, "-o", out), "export-test")
    assert not out.exists() and not evil.exists()
    # with --trust-backend the test is written, naming what the dump recorded (nothing runs yet)
    r = cli("export-test", dump, "-o", out, "--trust-backend")
    assert r.code == 0, r
    assert "evil_mod:" in out.read_text() and not evil.exists()
    # what the command line gives is written without trust, and the dump's code is not
    r = cli("export-test", dump, "-o", out, "--force", "--backend", "eager", "--passes", "passes_for_tests:count_nodes")
    assert r.code == 0 and "evil_mod" not in out.read_text(), r


def test_bisect_nodes_backward_refuses_the_backward_dumps_backend(tmp_path, evil, cli, capsys):
    from fixtures.training import gelu_refusing_backend, mlp, train_steps

    model, x = mlp()
    with pytest.raises(Exception):
        train_steps(model, x, backend=graphdbg.capture(gelu_refusing_backend, tmp_path / "dumps"))
    (bw,) = [p.parent for p in (tmp_path / "dumps").glob("rank*/*/manifest.json")]
    _edit(bw, backend="evil_mod:backend", backward={**json.loads((bw / "manifest.json").read_text())["backward"],
                                                     "compiler": "evil_mod:backend"})
    _edit(bw / "forward", backend="eager")
    torch._dynamo.reset()
    capsys.readouterr()  # capture's own stderr line
    r = cli("bisect", "nodes", bw / "forward", "--backward")
    _refused(r, "bisect nodes --backward")
    assert not evil.exists()
