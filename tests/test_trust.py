"""Trust (issue 23): code a dump names is imported only with --trust-backend, on every command.

A dump names code in several places: its backend (``module:callable``), a recipe, the backend and
passes minify recorded, the backend of the backward dump a forward dump links to. Each is
pointed here at a module that, when imported, creates a marker file; every command refuses it
with exit 2 and one line giving the exact command to run, and the marker never appears.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, ROOT, run_graphdbg

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


@pytest.mark.slow
@pytest.mark.parametrize("field", ["backend", "passes"])
def test_export_test_refuses_what_minify_recorded_without_trust(field, fixture_copy, evil, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    minified = {"from": None, "backend": "eager", "passes": None}
    minified[field] = "evil_mod:backend" if field == "backend" else "evil_mod:a_pass"
    _edit(dump, backend="eager", minified=minified)
    out = tmp_path / "t" / "test_x.py"
    _refused(cli("export-test", dump, "-o", out), "export-test")
    assert not out.exists() and not evil.exists()
    # with --trust-backend the test is written, naming what the dump recorded; export-test then
    # runs it once (self-check, in the sandbox): trusted code runs, and this one does not fail as captured
    r = cli("export-test", dump, "-o", out, "--trust-backend")
    assert r.code in (0, 4), r
    assert "evil_mod:" in out.read_text()
    # what the command line gives is written without trust, and the dump's code is not
    # (under eager the captured failure is not there: the self-check says so, exit 4, the file kept)
    r = cli("export-test", dump, "-o", out, "--force", "--backend", "eager", "--passes", "passes_for_tests:count_nodes")
    assert r.code == 4 and "evil_mod" not in out.read_text(), r


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


# Compiler settings -------------------------------------------------------------------------
HOSTILE = 'native -wrapper /bin/sh,-c,touch${IFS}MARKER;exec${IFS}"$0"${IFS}"$@"'


def _string_fields() -> list[str]:
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    return [f"{short}.{name}" for short, mod in (("inductor", inductor_config), ("dynamo", dynamo_config))
            for name, entry in mod._config.items() if isinstance(entry.default, str) or "str" in str(entry.value_type)]


def test_no_string_setting_is_restored_from_a_dump_without_trust_config(monkeypatch):
    from graphdbg.backends.compiler_config import ENUMS, replay_settings

    fields = _string_fields()
    assert len(fields) > 60  # torch's own: every free string setting of Inductor and Dynamo
    monkeypatch.delenv("GRAPHDBG_TRUST_CONFIG", raising=False)
    monkeypatch.delenv("GRAPHDBG_NO_CONFIG", raising=False)
    monkeypatch.delenv("GRAPHDBG_CONFIG", raising=False)
    hostile = HOSTILE.replace("MARKER", str("/tmp/x"))
    settings = replay_settings({"config": {"values": {key: hostile for key in fields}}})
    assert dict(settings) == {}
    assert set(settings.skipped) == set(fields)
    assert all("not restored" in line for line in settings.shown())
    # a fixed-choice string is restored with one of its choices, and only then
    good = replay_settings({"config": {"values": {"inductor.cpu_backend": "cpp",
                                                  "inductor.cpp.inject_relu_bug_TESTING_ONLY": "runtime_error",
                                                  "inductor.fallback_random": True, "inductor.realize_opcount_threshold": 30,
                                                  "inductor.save_args": True, "inductor.max_fusion_size": 10**12}}})
    assert dict(good) == {"inductor.cpu_backend": "cpp", "inductor.cpp.inject_relu_bug_TESTING_ONLY": "runtime_error",
                          "inductor.fallback_random": True, "inductor.realize_opcount_threshold": 30}
    assert set(good.skipped) == {"inductor.save_args", "inductor.max_fusion_size"}
    assert all(key in fields or key.startswith("functorch.") for key in ENUMS)
    # --trust-config restores the strings, but never save_args or a machine's paths
    monkeypatch.setenv("GRAPHDBG_TRUST_CONFIG", "1")
    trusted = replay_settings({"config": {"values": {"inductor.cpp.march": "native", "inductor.save_args": True,
                                                     "dynamo.debug_dir_root": "/tmp/x"}}})
    if _has_march():
        assert dict(trusted) == {"inductor.cpp.march": "native"}
    else:  # torch 2.11 has no such setting: skipped, and said so
        assert dict(trusted) == {} and trusted.skipped["inductor.cpp.march"] == "not in this torch", trusted.skipped


def _has_march() -> bool:
    import torch._inductor.config as inductor_config

    return "cpp.march" in inductor_config._config


def _config_dump(tmp_path: Path, marker: Path) -> Path:
    """A dump graphdbg captured while a hostile -march was set (its author's doing)."""
    import torch._inductor.config as inductor_config

    def refuses(gm, example_inputs):
        raise RuntimeError("no kernel for sin")

    if not _has_march():
        pytest.skip(f"torch {torch.__version__} has no inductor.cpp.march, the compiler flag this attack records")

    with inductor_config.patch({"cpp.march": HOSTILE.replace("MARKER", str(marker)), "fallback_random": True}):
        f = torch.compile(lambda x: torch.sin(x) + 1, backend=graphdbg.capture(refuses, tmp_path / "dumps"))
        with pytest.raises(Exception):
            f(torch.randn(8))
    (dump,) = [p.parent for p in (tmp_path / "dumps").glob("rank*/*/manifest.json")]
    assert "inductor.cpp.march" in json.loads((dump / "manifest.json").read_text())["config"]["values"]
    return dump


@pytest.mark.slow
def test_replay_and_compares_inductor_column_skip_a_recorded_compiler_flag(tmp_path, cli, capsys):
    marker = tmp_path / "PWNED"
    dump = _config_dump(tmp_path, marker)
    capsys.readouterr()
    r = cli("replay", dump, "--backend", "inductor", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert out["status"] == "pass", r
    assert any(s.startswith("setting inductor.cpp.march: ") and "--trust-config" in s
               for s in out["stand_ins"]), out["stand_ins"]
    assert not any("fallback_random" in s for s in out["stand_ins"])  # a bool on the list: restored
    torch._dynamo.reset()
    r = cli("compare", dump, "--backends", "eager,inductor", "--no-isolate")
    assert r.code == 0, r
    assert not marker.exists()


# Ops by what they can touch ----------------------------------------------------------------
PRINTED = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 8][8, 1]cpu"):
        l_x_ = L_x_
        relu: "f32[4, 8][8, 1]cpu" = torch.relu(l_x_)
{lines}
        return (relu,)
'''

REFUSED = {
    "from_blob": ["pwn = torch._from_blob(140000000, [64], [1])"],
    "frombuffer": ["pwn = torch.frombuffer(b'abcd', dtype=torch.uint8)"],
    "alloc_from_pool": ["pwn = torch.ops.inductor._alloc_from_pool.default(l_x_, 1 << 40, torch.float32, [64], [1])"],
    "reinterpret_tensor": ["pwn = torch.ops.inductor._reinterpret_tensor.default(l_x_, [64], [1], 1 << 30)"],
    "set_method_offset": ["pwn = l_x_.set_(relu, 1 << 30, [64], [1])"],
    "set_op_offset": ["pwn = torch.ops.aten.set_.source_Tensor_storage_offset(l_x_, relu, 1 << 30, [64], [1])"],
    "set_packet": ["pwn = torch.ops.aten.set_(l_x_, relu)"],
    "set_source": ["pwn = torch.ops.aten.set_.source_Tensor(l_x_, relu)"],  # issue 42: re-points l_x_ at relu's memory
    "print_attr": ["pwn = torch.ops.higher_order.print('{0.__class__.__init__.__globals__}', l_x_)"],
    "print_item": ["pwn = torch.ops.higher_order.print('{0[PATH]}', l_x_)"],
}


@pytest.mark.parametrize("attack", sorted(REFUSED))
def test_ops_that_reach_raw_memory_or_format_attributes_are_refused(attack, tmp_path, cli):
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines="\n".join(" " * 8 + ln for ln in REFUSED[attack])))
    for command in (["show", path], ["replay", path, "--backend", "eager", "--no-isolate"]):
        r = cli(*command)
        assert r.code == 2, (command, r)
        # an op this torch lacks (torch._from_blob before 2.13) is refused as a name that does not resolve
        lacks = attack == "from_blob" and not hasattr(torch, "_from_blob")
        assert ("cannot resolve" if lacks else "refusing") in r.err and "Traceback" not in r.err, r


def test_a_checked_view_and_a_plain_print_still_load(tmp_path, cli):
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines="\n".join(" " * 8 + ln for ln in [
        "v = torch.ops.aten.as_strided.default(relu, [2, 8], [8, 1], 8)",
        "pr = torch.ops.higher_order.print('value {} and {x}', v, x=relu)"])))
    r = cli("replay", path, "--backend", "eager", "--no-isolate")
    assert r.code == 0, r


def test_dynamo_graphs_with_param_data_and_number_methods_load_and_replay(tmp_path, cli):
    """``param.data`` becomes ``torch._C._autograd._get_data_attr``; a dynamic mask becomes
    ``ge.__and__(lt)`` (Gemma-2's sliding window); both are graphs Dynamo wrote and must load."""
    printed = []

    def printing(gm, example_inputs):
        printed.append(gm.print_readable(print_output=False))
        return gm.forward

    def uses_data(x, w):
        return x @ w.data

    def sliding_window(x):
        n = x.shape[0]
        a = torch.arange(n)
        m = (a[:, None] >= a[None, :]).__and__(a[:, None] - a[None, :] < 4)
        return x.masked_fill(~m, 0) * (n // 2)

    torch.compile(uses_data, backend=printing)(torch.randn(3, 4), torch.nn.Parameter(torch.randn(4, 2)))
    x = torch.randn(8, 8)
    torch._dynamo.mark_dynamic(x, 0)
    torch.compile(sliding_window, backend=printing, dynamic=True)(x)
    text = "\n".join(printed)
    assert "_get_data_attr" in text and ".__and__(" in text
    for i, graph in enumerate(printed):
        path = tmp_path / f"rank0_{i}.py"
        path.write_text(graph)
        r = cli("replay", path, "--backend", "eager", "--no-isolate")
        assert r.code == 0, (graph, r)


# Sandbox -----------------------------------------------------------------------------------
ESCAPE = r'''
import json, os, socket, sys
from pathlib import Path
import torch, torch.fx as fx
from graphdbg.execution.sandbox import apply_sandbox

own, outside, inside = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
status = apply_sandbox([own])

def write(path, x):  # what an escape from the op allow-list would call
    try:
        Path(path).write_text("escaped")
        return "wrote"
    except OSError as e:
        return type(e).__name__

def connect(x):
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
        return "connected"
    except OSError as e:
        return type(e).__name__

g = fx.Graph()
x = g.placeholder("x")
a = g.call_function(write, (str(outside), x))
b = g.call_function(write, (str(inside), x))
c = g.call_function(connect, (x,))
d = g.call_function(os.system, ("touch " + str(outside) + ".sh",))
g.output((a, b, c, d))
out = fx.GraphModule(torch.nn.Module(), g)(torch.ones(2))
print(json.dumps({"status": status, "outside": out[0], "inside": out[1], "net": out[2]}))
'''


def test_sandbox_keeps_an_escaped_graph_inside_its_folder(tmp_path):
    """A graph built by hand that escapes the op allow-list (a Python function that writes a
    file, os.system, a TCP connection), run in a child after the sandbox helper: it writes in
    its own folder and nowhere else, and opens no network socket."""
    import subprocess
    import sys

    from graphdbg.execution.sandbox import landlock_abi

    own, elsewhere = tmp_path / "child", tmp_path / "elsewhere"
    own.mkdir()
    elsewhere.mkdir()
    script = tmp_path / "escape.py"
    script.write_text(ESCAPE)
    r = subprocess.run([sys.executable, str(script), str(own), str(elsewhere / "victim.txt"), str(own / "mine.txt")],
                       capture_output=True, text=True, timeout=120, env={**__import__("os").environ})
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if landlock_abi() == 0:
        assert got["status"].startswith("none (no Landlock"), got
        pytest.skip(f"this kernel has no Landlock: {got['status']}")
    assert got["status"].startswith("landlock ("), got
    assert got["inside"] == "wrote" and (own / "mine.txt").read_text() == "escaped"
    assert got["outside"] == "PermissionError" and list(elsewhere.iterdir()) == []
    assert got["net"] == "PermissionError"


def test_isolated_replay_says_whether_it_was_sandboxed(fixture_copy, cli):
    from graphdbg.execution.sandbox import landlock_abi

    r = cli("replay", fixture_copy("block_compile_error"), "--backend", "eager", "--json")
    out = json.loads(r.out)
    assert r.code == 0 and out["isolated"], r
    expected = "landlock (" if landlock_abi() else "none ("
    assert out["sandbox"].startswith(expected), out["sandbox"]


# OpInfo sweep (issue 22.3) -----------------------------------------------------------------
SWEEP_OPS = ["add", "matmul", "nn.functional.gelu", "softmax", "as_strided", "masked_fill", "where", "cat",
             "masked.cumsum", "signal.windows.hamming"]


@pytest.mark.slow
def test_opinfo_graphs_dynamo_and_aot_print_all_load_and_replay():
    """A bounded subset of PyTorch's OpInfo database through Dynamo and AOTAutograd: every
    printed graph loads (no op Dynamo emitted is refused) and replays eagerly."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("opinfo_sweep", ROOT / "benchmarks" / "opinfo_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.sweep(names=SWEEP_OPS)
    assert result["traced"] >= 2 * len(SWEEP_OPS) - 4, result
    assert result["refused"] == {}, result["refused"]
    assert result["unloadable"] == {}, result["unloadable"]
    assert result["loaded"] == result["traced"] and result["replayed"] == result["loaded"], result


# Bounded runs ------------------------------------------------------------------------------
def test_an_isolated_cpu_replay_has_a_memory_limit(tmp_path, cli, monkeypatch):
    """A graph that allocates more than the limit fails in its child with an out-of-memory
    error (RLIMIT_AS), instead of taking the machine's memory; the Outcome says the limit."""
    monkeypatch.setenv("GRAPHDBG_MEMORY_LIMIT_GB", "2.5")
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines=" " * 8 + "big: \"u8[6442450944]\" = torch.empty([6442450944], dtype=torch.uint8)"))
    r = cli("replay", path, "--backend", "eager", "--json")
    out = json.loads(r.out)
    assert "memory limit 2.5 GiB" in out["sandbox"], out
    assert out["status"] == "crash", out
    assert "memory" in (out["signature"] or "").lower() or "alloc" in (out["signature"] or "").lower(), out


@pytest.mark.slow
def test_a_memory_limit_below_what_torch_maps_still_lets_torch_load(tmp_path, cli, monkeypatch):
    """A user's limit is memory for the graph, counted above what the child maps once torch is
    loaded: below that (a CUDA build of torch maps about 3 GiB of libraries, a CPU build under 1),
    torch itself could not load in the child (``libtorch_cuda.so: failed to map segment``)."""
    monkeypatch.setenv("GRAPHDBG_MEMORY_LIMIT_GB", "0.5")
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines=""))
    r = cli("replay", path, "--backend", "eager", "--json")
    out = json.loads(r.out)
    assert out["status"] == "pass", out
    assert "memory limit 0.5 GiB above the " in out["sandbox"] and "GiB torch maps" in out["sandbox"], out


def raises_its_memory_limit(gm, example_inputs):
    """A backend that lifts the replay child's memory limit before it allocates."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError) as e:
        raise RuntimeError(f"the limit held: {type(e).__name__}") from None
    raise RuntimeError("the limit was lifted")


@pytest.mark.slow
def test_code_in_the_replay_child_cannot_lift_its_memory_limit(fixture_copy, cli, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_MEMORY_LIMIT_GB", "3")
    r = cli("replay", fixture_copy("block_compile_error"), "--backend", "test_trust:raises_its_memory_limit", "--json")
    out = json.loads(r.out)
    assert "memory limit 3.0 GiB" in out["sandbox"], out
    assert "the limit held" in (out["signature"] or ""), out


def sleeps_forever(gm, example_inputs):
    """A backend that never returns (a compiler stuck in a loop)."""
    import time

    time.sleep(3600)
    return gm.forward


@pytest.mark.slow
def test_minify_timeout_is_enforced_without_isolate(fixture_copy, tmp_path, cli):
    """``minify --timeout`` runs candidates isolated when --isolate was not said, so a backend
    that hangs ends as a timeout instead of hanging minify."""
    dump = fixture_copy("block_compile_error")
    r = cli("minify", dump, "--backend", "test_trust:sleeps_forever", "--timeout", "6", "-o", tmp_path / "min", "--json")
    assert r.code != 0 or "timeout" in r.out.lower(), r
    assert "timeout" in (r.out + r.err).lower(), r


@pytest.mark.slow
def test_bisect_nodes_has_a_timeout(fixture_copy, cli):
    r = cli("bisect", "nodes", fixture_copy("block_compile_error"), "--backend", "test_trust:sleeps_forever",
            "--timeout", "5")
    assert r.code == 2, r
    assert "bisect nodes: no result after 5s" in r.err and "Traceback" not in r.err, r


@pytest.mark.slow
def test_replay_with_trusted_backend_works_from_any_folder(tmp_path):
    """A dump inside the project that made it names a backend module of that project: replay
    finds the module from any folder (here a module importable from nowhere else)."""
    project = tmp_path / "project"
    (project / "dumps").mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "programs.py", project / "mybackends_for_ten.py")
    dump = project / "dumps" / "block_runtime_error"
    shutil.copytree(FIXTURES / "block_runtime_error", dump)
    manifest = next(dump.glob("rank*/*/manifest.json"))
    m = json.loads(manifest.read_text())
    m["backend"] = "mybackends_for_ten:broken_transpose_backend"
    manifest.write_text(json.dumps(m))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = run_graphdbg("replay", dump, "--trust-backend", cwd=elsewhere)
    assert r.returncode == 1, r
    assert "mat1 and mat2 shapes cannot be multiplied" in r.stdout and "the same failure as captured" in r.stdout
