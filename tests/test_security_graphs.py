"""A dump is untrusted input: hostile graphs in every format are refused before anything runs.

Each attack from the issue is written into a real file of each kind graphdbg reads (a printed
graph, a dump's graph.py, a minifier repro.py, a vLLM compile-cache file) and driven through
``graphdbg show`` and ``graphdbg replay``: exit 2, one line naming the file and line, and the
file or folder the attack tries to create is never created.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.fx as fx
from conftest import FIXTURES, child_env

import graphdbg
from graphdbg.errors import GraphSourceError

# Each attack: lines for forward's body; {v} is a tensor value, {m} the marker the attack tries
# to create, {f} an existing file it tries to overwrite.
ATTACKS = {
    "collect_env_run": ['pwn = torch.utils.collect_env.run("touch {m}")'],
    "import_dotted_name": ['mod = torch._utils._import_dotted_name("subprocess")', 'pwn = mod.run(["touch", "{m}"])'],
    "generator_frame": ["m = torch.nn.Module()", "g = m.parameters()", "fr = g.gi_frame", "gl = fr.f_globals",
                        'tt = gl.get("torch")', "o = tt.os", 'pwn = o.mkdir("{m}")'],
    "frame_via_getattr": ['fr = getattr({v}, "gi_frame")'],
    "load_from_bytes": ['pwn = torch.storage._load_from_bytes(b"cos\\nsystem\\n(S\'touch {m}\'\\ntR.")'],
    "from_file": ['pwn = torch.from_file("{f}", True, 4)', "pwn2 = pwn.fill_(88)"],
    "aten_from_file": ['pwn = torch.ops.aten.from_file.default("{f}", True, 4)', "pwn2 = pwn.fill_(88)"],
    "tofile_through_tree_map": ["pwn = torch.utils._pytree.tree_map({v}.tofile, ({v},))"],
    "numpy_tofile": ['pwn = {v}.numpy().tofile("{m}")'],
    "storage_method": ["s = {v}.untyped_storage()"],
    "type_by_name": ['pwn = {v}.type("subprocess.Popen")'],
    "methodcaller": ['pwn = operator.methodcaller("tofile", "{m}")'],
    "torch_save": ['pwn = torch.save({v}, "{m}")'],
    "os_via_torch": ['pwn = torch.os.mkdir("{m}")'],
}

PRINTED = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 32][32, 1]cpu"):
        l_x_ = L_x_
        relu: "f32[4, 32][32, 1]cpu" = torch.relu(l_x_);  l_x_ = None
        return (relu,)
'''


def _insert(text: str, anchor: str, lines: list[str], indent: str, var: str, marker: Path, victim: Path,
            before: bool = False) -> str:
    body = "".join(f"{indent}{ln.format(v=var, m=marker, f=victim)}\n" for ln in lines)
    at = text.index(anchor)
    at = at if before else text.index("\n", at) + 1
    return text[:at] + body + text[at:]


def hostile_file(kind: str, attack: str, tmp: Path) -> tuple[Path, Path, Path]:
    """(the path to hand graphdbg, the marker the attack creates, a file it overwrites)."""
    marker, victim = tmp / "PWNED", tmp / "victim.bin"
    victim.write_bytes(b"\x00" * 16)
    lines = ATTACKS[attack]
    if kind == "printed_graph":
        path = tmp / "rank0_0.py"
        path.write_text(_insert(PRINTED, "l_x_ = L_x_", lines, " " * 8, "l_x_", marker, victim))
        return path, marker, victim
    if kind == "dump":
        src = next((FIXTURES / "block_compile_error").glob("rank*/*"))
        path = tmp / "dump"
        shutil.copytree(src, path)
        graph = path / "graph.py"
        graph.write_text(_insert(graph.read_text(), "l_x_ = L_x_", lines, " " * 8, "l_x_", marker, victim))
        return path, marker, victim
    if kind == "repro":
        path = tmp / "repro"
        shutil.copytree(FIXTURES / "torch_minifier" / "after_dynamo", path)
        script = path / "repro.py"
        script.write_text(_insert(script.read_text(), "    def forward(self, linear):", lines, " " * 8, "linear",
                                  marker, victim))
        return script, marker, victim
    if kind == "compile_cache":
        src = next((FIXTURES / "compile_cache" / "vllm").rglob("computation_graph.py"))
        top = FIXTURES / "compile_cache" / "vllm"
        shutil.copytree(top, tmp / "vllm")
        path = tmp / "vllm" / src.relative_to(top)
        path.write_text(_insert(path.read_text(), "        l_x_ = L_x_", lines, " " * 8, "l_x_", marker, victim))
        return path, marker, victim
    raise AssertionError(kind)


KINDS = ["printed_graph", "dump", "repro", "compile_cache"]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("kind", KINDS)
def test_hostile_graph_is_refused_by_show_and_replay(kind, attack, tmp_path, cli):
    path, marker, victim = hostile_file(kind, attack, tmp_path)
    for command in (["show", path], ["replay", path, "--backend", "eager", "--no-isolate"]):
        r = cli(*command)
        assert r.code == 2, (command, r)
        lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("graphdbg: error: "), r
        assert "refusing" in lines[0] and ":" in lines[0], r  # names the file and line
        assert "Traceback" not in r.err
    assert not marker.exists()
    assert victim.read_bytes() == b"\x00" * 16


def test_refusal_names_file_line_and_call(tmp_path, cli):
    path, _, _ = hostile_file("dump", "collect_env_run", tmp_path)
    line = next(i for i, ln in enumerate((path / "graph.py").read_text().splitlines(), 1) if "collect_env" in ln)
    r = cli("show", path)
    assert r.code == 2
    assert f"graph.py:{line}: refusing torch.utils.collect_env.run" in r.err, r


def test_no_subprocess_or_write_during_hostile_replays(tmp_path):
    """An audit hook sees every process start and every file opened for writing while all the
    hostile files are shown and replayed in one process: none comes from a graph."""
    paths = []
    for kind in KINDS:
        for attack in ("collect_env_run", "import_dotted_name", "generator_frame", "from_file", "load_from_bytes"):
            folder = tmp_path / f"{kind}-{attack}"
            folder.mkdir()
            paths.append(str(hostile_file(kind, attack, folder)[0]))
    script = textwrap.dedent(f"""
        import sys, json
        events = []
        def hook(event, args):
            if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                         "pickle.find_class"):
                events.append([event, repr(args)[:200]])
            elif event in ("os.mkdir", "ctypes.dlopen") and {str(tmp_path)!r} in repr(args):
                events.append([event, repr(args)[:200]])
            elif event == "open" and len(args) > 1 and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
                if {str(tmp_path)!r} in str(args[0]):
                    events.append([event, repr(args)[:200]])
        sys.addaudithook(hook)
        from graphdbg.ui.cli import main
        codes = []
        for path in {paths!r}:
            for cmd in (["show", path], ["replay", path, "--backend", "eager", "--no-isolate"]):
                sys.argv = ["graphdbg", *cmd]
                try:
                    main()
                except SystemExit as e:
                    codes.append(e.code)
        print(json.dumps({{"codes": codes, "events": events}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=child_env())
    data = json.loads(done.stdout.strip().splitlines()[-1])
    assert data["codes"] == [2] * (2 * len(paths)), done.stderr[-3000:]
    assert data["events"] == [], data["events"]
    assert not list(tmp_path.rglob("PWNED"))


# --- the same checks at run time ------------------------------------------------------------


def _case():
    return graphdbg.load(FIXTURES / "block_compile_error").case("cpu")


@pytest.mark.parametrize("change", ["function", "method", "attribute", "callable_argument", "module_input"])
def test_run_time_check_refuses_what_the_loader_never_saw(change, tmp_path):
    case = _case()
    graph = case.gm.graph
    x = next(iter(graph.find_nodes(op="placeholder")))
    marker = tmp_path / "PWNED"
    out = next(iter(graph.find_nodes(op="output")))
    with graph.inserting_before(out):
        if change == "function":
            from torch.utils import collect_env

            graph.call_function(collect_env.run, (f"touch {marker}",))
        elif change == "method":
            graph.call_method("numpy", (x,))
        elif change == "attribute":
            graph.call_function(getattr, (x, "gi_frame"))
        elif change == "callable_argument":
            from torch.utils import _pytree as pytree

            graph.call_function(torch.relu, (x,), {"out": pytree.tree_map})
    if change != "callable_argument":  # fx can't print a function argument; the check reads the graph
        case.gm.recompile()
    if change == "module_input":
        case.inputs = [os, *case.inputs[1:]]
    with pytest.raises(GraphSourceError, match="refusing"):
        case.run("eager", direct=True)
    with pytest.raises(GraphSourceError, match="refusing"):
        case.run_eager()
    assert not marker.exists()


def test_allowed_graphs_still_run():
    # the allow-list is not in the way of what real graphs do
    case = _case()
    out = case.run_eager()
    assert isinstance(out, tuple) and isinstance(out[0], torch.Tensor)
    gm = fx.symbolic_trace(lambda x: torch.nn.functional.gelu(x).sum(-1).shape[0] + x.T.mean())
    from graphdbg.graph.allow_list import check_graph_module

    check_graph_module(gm, [torch.ones(2, 2)])
