"""Bounds (issue 51, section 4): every integer option of the CLI has a range, and a value outside
it is one line and exit 2; ``replay --repeat`` has a total bound; a dump whose graph resizes a
storage past its size is refused when it loads."""

from __future__ import annotations

import json

import pytest
import typer

from graphdbg.ui import cli as cli_module
from graphdbg.ui.commands.common import _Range


def _commands(group, path=()):
    """(command path, click command) for every command of the typer app, sub-apps included."""
    for name, command in sorted(getattr(group, "commands", {}).items()):
        if getattr(command, "commands", None):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _int_options():
    app = typer.main.get_command(cli_module.app)
    out = []
    for path, command in _commands(app):
        for param in command.params:
            if getattr(param, "param_type_name", "") != "option" or param.is_flag:
                continue
            kind = getattr(param.type, "func", None)
            if param.type.name in ("integer", "integer range") or isinstance(kind, _Range):
                out.append((path, param, command))
    return out


def test_every_integer_option_has_a_range():
    found = _int_options()
    assert len(found) >= 10, found  # --repeat, --jobs, --seed, --nproc, ...
    unbounded = [(" ".join(path), p.opts[0]) for path, p, _ in found if not isinstance(getattr(p.type, "func", None), _Range)]
    assert not unbounded, unbounded


@pytest.mark.parametrize("value", ["9" * 30, "-" + "9" * 30, "1e9", "many"])
def test_a_value_outside_an_integer_options_range_is_one_line_and_exit_2(cli, value):
    for path, param, command in _int_options():
        arguments = ["nowhere" for p in command.params if getattr(p, "param_type_name", "") == "argument" and p.required]
        r = cli(*path, *arguments, f"{param.opts[0]}={value}")
        lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
        assert r.code == 2 and len(lines) == 1, (path, param.opts, r)
        assert lines[0].startswith(f"graphdbg: error: {param.opts[0]} ") and "expected a whole number from" in lines[0], lines
        assert "Traceback" not in r.err and "OverflowError" not in r.err


def test_an_integer_option_inside_its_range_still_works(cli, tmp_path):
    r = cli("replay", "fixtures/block_runtime_error", "--backend", "eager", "--repeat", "2", "--no-isolate", "--json")
    assert r.code in (0, 1) and json.loads(r.out)["repeat"]["runs"] == 2, r


@pytest.mark.parametrize("isolate", [pytest.param("--isolate", marks=pytest.mark.slow), "--no-isolate"])
def test_repeat_stops_at_its_total_bound_and_says_so_with_the_rate_so_far(cli, isolate):
    """A million runs of --timeout 5 each: --total-timeout ends them, with the rate so far
    (before it, nothing bounded them all: 150 s and counting)."""
    import time

    started = time.monotonic()
    r = cli("replay", "fixtures/block_runtime_error", "--backend", "eager", "--repeat", "1000000", "--total-timeout", "2",
            "--timeout", "5", isolate, "--json")
    took = time.monotonic() - started
    repeat = json.loads(r.out)["repeat"]
    assert 1 <= repeat["runs"] < 1000000 and "of 1000000 runs: --total-timeout 2s reached" in repeat["ran"], repeat
    assert repeat["rate"] == repeat["failed"] / repeat["runs"]
    assert took < 60, took  # the child's start, a run under way, and 2 s
    if isolate == "--no-isolate":
        r = cli("replay", "fixtures/block_runtime_error", "--backend", "eager", "--repeat", "1000000", "--total-timeout", "1",
                isolate)
        assert "stopped after" in r.out and "--total-timeout 1s reached" in r.out, r.out


@pytest.mark.parametrize("call", ["torch.ops.inductor.resize_storage_bytes_.default(l_x_, 0)",
                                  "torch.ops.inductor.resize_storage_bytes_(l_x_, 4)"])
def test_a_storage_resized_under_its_tensor_is_refused_when_the_dump_loads(cli, tmp_path, call):
    """Shrunk under the tensor that views it, the next read is past the storage's end: the replay
    child died of SIGSEGV (exit 1 where bad input is 2). Refused at load, before any child."""
    graph = tmp_path / "rank0_0.py"
    graph.write_text('class GraphModule(torch.nn.Module):\n    def forward(self, L_x_: "f32[1048576][1]cpu"):\n'
                     f"        l_x_ = L_x_\n        r = {call}\n        return (l_x_ + 1,)\n")
    for args in (("replay", graph, "--backend", "eager"), ("show", graph)):
        r = cli(*args)
        lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
        if args[0] == "show" and r.code == 0:
            continue  # show reads the graph as text: nothing runs
        assert r.code == 2 and len(lines) == 1 and "resize_storage_bytes_" in lines[0] and "past its end" in lines[0], r


def test_minify_never_takes_a_timeout_it_cant_keep(tmp_path):
    """``--no-isolate`` runs the graph in graphdbg's own process, where a call stuck in C (here
    ``min`` over 10**17 numbers) ignores every signal: ``--timeout`` with it is refused, one line,
    instead of a minify that runs for ever (it did)."""
    import subprocess
    import sys

    from conftest import child_env

    graph = tmp_path / "rank0_0.py"
    graph.write_text('class GraphModule(torch.nn.Module):\n    def forward(self, L_x_: "f32[8][1]cpu"):\n        l_x_ = L_x_\n'
                     "        n = min(range(100000000000000000, 200000000000000000))\n        return (l_x_ + n,)\n")
    done = subprocess.run([sys.executable, "-m", "graphdbg", "minify", str(graph), "--backend", "eager", "--no-isolate",
                           "--timeout", "5", "-o", str(tmp_path / "min")], capture_output=True, text=True, timeout=120,
                          env=child_env(), cwd=tmp_path)
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "--no-isolate" in lines[0] and "--timeout" in lines[0], done.stderr
