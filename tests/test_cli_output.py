"""What the CLI prints: strict JSON, readable renderings, narrow terminals and pipes, the small flags."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT, child_env, run_graphdbg

import graphdbg

BAD_REWRITE = "fixtures.programs:bad_rewrite_backend"
CORPUS = FIXTURES / "corpus"
DUMP = FIXTURES / "block_runtime_error"


def _strict(text: str) -> object:
    """json.loads that refuses NaN, Infinity and -Infinity, as JSON.parse in a browser does."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _two_ranks(tmp_path, monkeypatch):
    from graphdbg.case import save_case

    root = tmp_path / "ranks"
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        save_case(graphdbg.load(FIXTURES / "block_compile_error").case(), root)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    return root


def _log_with_a_graph(tmp_path):
    log = tmp_path / "printed.log"
    log.write_text('[rank0]: class GraphModule(torch.nn.Module):\n[rank0]:     def forward(self, L_x_: "f32[2]"):\n'
                   "[rank0]:         relu = torch.relu(L_x_);  L_x_ = None\n[rank0]:         return (relu,)\n")
    return log


@pytest.mark.slow
def test_every_json_output_is_strict_json(cli, tmp_path, monkeypatch):
    commands = [
        ("ls", FIXTURES),
        ("ls", CORPUS),
        ("show", FIXTURES / "block_dynamic"),  # dynamic shapes: the table had 52 NaN
        ("show", CORPUS / "Qwen3-0.6B" / "rank0_0.py"),
        ("replay", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE, "--no-isolate"),
        ("replay", FIXTURES / "block_compile_error", "--no-isolate", "--trust-backend"),
        ("compare", FIXTURES / "block_compile_error", "--backends", "eager,aot_eager", "--no-isolate"),  # NaN error, NaN signature
        ("minify", FIXTURES / "block_compile_error", "-o", tmp_path / "min", "--trust-backend"),
        ("bisect", "passes", FIXTURES / "block_compile_error", "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu", "--backend", "eager"),
        ("bisect", "nodes", FIXTURES / "block_accuracy", "--backend", BAD_REWRITE),
        ("bisect", "ranks", _two_ranks(tmp_path, monkeypatch)),
        ("extract", _log_with_a_graph(tmp_path), "-o", tmp_path / "extracted"),
    ]
    for args in commands:
        r = cli(*args, "--json")
        assert r.code in (0, 1, 4), (args, r)  # 4: bisect passes' culprit fails otherwise than the dump
        assert "NaN" not in r.out and "Infinity" not in r.out, args
        data = _strict(r.out)
        assert isinstance(data, dict) and data, args
    rows = _strict(cli("compare", FIXTURES / "block_compile_error", "--backends", "eager", "--no-isolate", "--json").out)["rows"]
    assert rows[0]["signature"] is None and rows[0]["max_abs_error"] is None


def test_bisect_results_print_as_text_not_json(cli, tmp_path, monkeypatch):
    r = cli("bisect", "passes", FIXTURES / "block_compile_error", "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu", "--backend", "eager")
    # the dump captured a crash; the culprit makes a mismatch: it fails differently (exit 4), and says so
    assert r.code == 4 and "culprit" in r.out and "passes_for_tests:gelu_to_relu" in r.out and "fails differently" in r.out, r
    assert not r.out.lstrip().startswith("{")
    r = cli("bisect", "ranks", _two_ranks(tmp_path, monkeypatch))
    assert r.code == 0 and "2 ranks, none differs" in r.out and not r.out.lstrip().startswith("{"), r


def _graphdbg(*args, cwd, **kw) -> subprocess.Popen:
    """The CLI as a user runs it, in its own process (PYTHONPATH names only graphdbg itself)."""
    env = child_env(COLUMNS="200")
    return subprocess.Popen([sys.executable, "-m", "graphdbg.ui.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_help_and_version_are_quick_and_do_not_import_torch(tmp_path):
    env = child_env()
    check = "import sys, graphdbg.ui.cli, graphdbg; assert 'torch' not in sys.modules, 'torch imported'; print(graphdbg.capture.__name__)"
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "capture", done.stderr
    for flag in ("-h", "--help"):
        done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", flag], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "replay" in done.stdout and "minify" in done.stdout, done.stderr
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"graphdbg {graphdbg.__version__}"


def test_capture_names_still_import():
    from graphdbg.capture import DEFAULT_BUDGET, CapturingBackend, capture

    backend = graphdbg.capture("eager")
    assert isinstance(backend, CapturingBackend) and capture is graphdbg.capture and DEFAULT_BUDGET > 0


def test_isolated_replays_have_a_default_timeout_shown_in_help(cli):
    for command in ("replay", "compare"):
        r = cli(command, "--help")
        assert r.code == 0 and "[default: 600.0]" in r.out, (command, r)
    r = cli("minify", "--help")  # given, --timeout also isolates the candidates; unset, 600 s where isolated
    assert r.code == 0 and "default 600" in " ".join(r.out.split()), r


@pytest.mark.slow
def test_passes_and_backends_from_the_current_folder(tmp_path):
    (tmp_path / "my_passes.py").write_text("def count(gm):\n    return len(gm.graph.nodes)\n")
    (tmp_path / "my_backend.py").write_text("def plain(gm, example_inputs):\n    return gm.forward\n")
    # isolated (the default): the child finds them too
    proc = _graphdbg("replay", FIXTURES / "block_compile_error", "--backend", "my_backend:plain", "--passes", "my_passes:count",
                     "--json", cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    data = _strict(out)
    assert data["status"] == "pass" and data["isolated"] and [p["name"] for p in data["passes"]] == ["my_passes:count"]


@pytest.mark.slow
def test_export_test_refuses_to_overwrite_without_force(cli, tmp_path):
    test_file = tmp_path / "test_gelu.py"
    test_file.write_text("# mine\n")
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", test_file, "--trust-backend")
    assert r.code == 2 and "exists; pass --force" in r.err and test_file.read_text() == "# mine\n", r
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", test_file, "--force", "--trust-backend")
    assert r.code == 0 and "def test_" in test_file.read_text(), r


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate, timeout: float) -> None:
    import time

    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_ctrl_c_during_an_isolated_replay_ends_the_child(tmp_path):
    import signal

    # the backend module is found in the current folder (tests/helpers/), as a user's would be
    proc = _graphdbg("replay", FIXTURES / "block_compile_error", "--backend", "backends_for_tests:hang", cwd=ROOT / "tests" / "helpers")
    _wait_for(lambda: _children(proc.pid), 120)
    (child,) = _children(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, (out, err)
    _wait_for(lambda: not _alive(child), 10)


@pytest.mark.slow
def test_ctrl_c_during_minify_says_what_was_kept(tmp_path):
    import signal

    (tmp_path / "slow.py").write_text(
        "import time\nfrom fixtures.programs import unsupported_op_backend\n_inner = unsupported_op_backend('gelu')\n"
        "def gelu(gm, example_inputs):\n    time.sleep(0.3)\n    return _inner(gm, example_inputs)\n")
    dump = FIXTURES / "block_compile_error" / "rank0" / "g0-compile_error-3b0e0256"
    proc = _graphdbg("minify", dump, "--backend", "slow:gelu", "--no-isolate", cwd=tmp_path)
    out_dir = tmp_path / f"{dump.name}-min"
    _wait_for(lambda: (out_dir / "repro.py").exists() or proc.poll() is not None, 240)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert f"minify: writing to ./{dump.name}-min/" in err, err
    assert proc.returncode == 130, (out, err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: best ") and last.endswith(f"-node graph saved to {dump.name}-min/repro.py"), err
    nodes = int(last.split("best ")[1].split("-node")[0])
    assert nodes < 50 and graphdbg.load(next(out_dir.glob("rank*/*"))).node_count == nodes


def _run_piped(*args, columns: int = 80) -> subprocess.CompletedProcess:
    env = child_env(COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_ls_piped_at_80_columns_prints_every_path_whole(tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "dumps"
    for name in ("block_compile_error", "block_dynamic"):
        src = next((FIXTURES / name).glob("rank*/*"))
        import shutil

        shutil.copytree(src, deep / name / src.parent.name / src.name)
    for root in (CORPUS, deep):
        done = _run_piped("ls", root)
        assert done.returncode == 0, done.stderr
        lines = [line.strip() for line in done.stdout.splitlines()]
        listing = _strict(_run_piped("ls", root, "--json").stdout)
        for g in listing["groups"]:
            for p in g["paths"][:3]:
                rel = os.path.relpath(p, listing["root"])
                assert rel in lines or f"also {rel}" in lines, (rel, done.stdout)
        assert "│" not in done.stdout  # a list, not a table folded into 12-character pieces
    assert "needs stand-ins: 8: 3 stream" in _run_piped("ls", CORPUS).stdout  # eight constructs, counted by kind


def test_ls_on_a_wide_terminal_is_a_table_with_whole_paths():
    from io import StringIO

    from rich.console import Console

    from graphdbg.listing import list_dumps
    from graphdbg.ui.render import ListingView

    listing = list_dumps(CORPUS)
    out = StringIO()
    Console(file=out, force_terminal=True, width=220, color_system=None).print(ListingView(listing.groups, str(listing.root)), crop=False)
    assert "┃ dump" in out.getvalue()
    for g in listing.groups:
        assert os.path.relpath(g["paths"][0], listing.root) in out.getvalue()


@pytest.mark.slow
def test_show_prints_the_whole_path_at_80_columns(tmp_path):
    import shutil

    src = next((FIXTURES / "block_dynamic").glob("rank*/*"))
    dump = tmp_path / ("a-long-folder-" * 6) / src.name
    shutil.copytree(src, dump)
    done = _run_piped("show", dump)
    assert done.returncode == 0 and str(dump) in done.stdout.splitlines(), done.stdout[:2000]


def test_show_gives_the_traceback_stored_values_statistics_and_honest_wording(cli):
    r = cli("show", FIXTURES / "block_runtime_error")
    assert r.code == 0, r
    assert "traceback" in r.out and "RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x32 and 96x32)" in r.out
    x_row = next(line for line in r.out.splitlines() if "l_x_" in line and "float32[2, 8, 32]" in line and "yes" in line)
    assert "min " in x_row and "mean " in x_row  # a stored input's statistics, read from its values
    r = cli("show", CORPUS / "Qwen3-0.6B" / "rank0_0.py")
    assert r.code == 0 and "printed graph, no failure recorded" in r.out, r
    assert "torch None" not in r.out and "backend 'eager'" not in r.out
    assert "environment not recorded" in r.out


def test_complex64_and_fnuz_inputs_are_stored_not_stats_only(tmp_path, cli):
    import torch

    def f(z, q):
        return (z * 2).real + q.to(torch.float32)

    z = torch.randn(4, dtype=torch.complex64)
    q = torch.randn(4).to(torch.float8_e4m3fnuz)
    torch.compile(f, backend=graphdbg.capture("eager", tmp_path, mode="always"))(z, q)
    (dump,) = [graphdbg.load(p) for p in tmp_path.glob("rank*/*")]
    table = dump.inputs_table()
    assert table.stored.all(), table[["name", "dtype", "stored"]]
    case = dump.case()
    assert torch.equal(case.inputs[0], z) and torch.equal(case.inputs[1].view(torch.uint8), q.view(torch.uint8))
    assert "no: stats only" not in cli("show", dump.path).out


def test_compare_piped_prints_a_line_per_backend(cli):
    r = cli("compare", FIXTURES / "block_compile_error", "--backends", "eager,aot_eager", "--no-isolate")
    assert r.code == 0, r
    lines = r.err.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["eager (1/2)", "aot_eager (2/2)"], r.err
    assert "backends" in r.out and "pass" in r.out


@pytest.mark.slow
def test_an_exported_test_survives_a_backend_that_segfaults(tmp_path, cli):
    # the exported test replays in a child process: a segfault fails the test, not pytest
    test_file = tmp_path / "regress" / "test_segv.py"
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", test_file, "--backend", "model_backends:segfaults_when_called")
    assert r.code == 4 and "crash: Signal SIGSEGV" in r.err and r.err.rstrip().endswith("the file is kept"), r  # self-check: not the captured failure
    text = test_file.read_text()
    assert "graphdbg.replay" not in text and "isolate=True" in text
    env = child_env(tests=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Signal SIGSEGV" in done.stdout and "1 failed" in done.stdout


def test_the_json_writer_changes_only_what_strict_json_needs():
    """strict_json (every --json output): the text is json.dumps(indent=1) and a newline,
    joined in pieces; a dict or list that needs no change is not copied (ls --json of 10,000
    files), one that does is a new one and the original is left as it was."""
    from graphdbg.strict_json import encode_jsonable, jsonable

    plain = {"rows": [{"path": "a", "rank": 0, "ok": True, "x": None, "f": 1.5}] * 3, "n": 3}
    assert jsonable(plain) is plain
    odd = {"rows": [{"err": float("nan"), "shape": (2, 3)}, {"p": 1}], 7: "seven"}
    ready = jsonable(odd)
    assert ready == {"rows": [{"err": None, "shape": [2, 3]}, {"p": 1}], "7": "seven"}
    assert ready["rows"][1] is odd["rows"][1] and math.isnan(odd["rows"][0]["err"])
    big = {"dumps": [{"i": i, "s": "é\u2028"} for i in range(20000)]}
    assert encode_jsonable(big) == json.dumps(big, indent=1) + "\n"


def test_display_dispatches_on_the_class_not_its_name():
    import importlib
    import io

    from rich.console import Console

    from graphdbg.outcome import Outcome
    from graphdbg.ui.render import _repr_line, renderable, short_repr

    shown = {"graphdbg.dump": ["Dump"], "graphdbg.case": ["Case"], "graphdbg.outcome": ["Outcome"],
             "graphdbg.listing.groups": ["Listing"], "graphdbg.minify.bisect": ["PassBisection", "RankReport"],
             "graphdbg.replay.divergence": ["NodeDivergence"], "graphdbg.minify.shrinker": ["MinifyResult"],
             "graphdbg.replay.compare_swap": ["SwapReport"], "graphdbg.minify.bisect_envs": ["EnvBisection"],
             "graphdbg.minify.bisect_ops": ["BisectOpsResult"]}
    classes = [getattr(importlib.import_module(module), name) for module, names in shown.items() for name in names]
    short_repr(object())  # a dispatch that finds nothing registers what waited for a module now loaded
    assert set(classes) <= set(renderable.registry), set(classes) - set(renderable.registry)
    assert {c.__name__ for c in _repr_line.registry} >= {"Case", "Outcome", "Listing", "MinifyResult", "PassBisection",
                                                         "NodeDivergence", "RankReport"}
    impostor = type("Outcome", (), {"status": "crash", "backend": "eager", "signature": "E: x", "total_s": None})
    assert short_repr(Outcome(status="crash", backend="eager", signature="E: x")) == "Outcome(crash: E: x, backend 'eager')"
    assert short_repr(impostor()).startswith("<")  # a class of the same name is not an Outcome
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(renderable(Outcome(status="crash", backend="eager", signature="E: x")))
    assert "E: x" in console.export_text()


def test_a_class_whose_module_loads_after_render_is_shown_by_its_own_functions():
    """render loads without torch (``ls`` prints through it); a noun whose module (and torch)
    comes later is still shown by the functions registered for its class."""
    code = ("import sys, io\nfrom graphdbg.ui.render import renderable, safe_console, short_repr\n"
            "print('torch' in sys.modules)\n"
            "from graphdbg.minify.bisect import RankReport\n"
            "r = RankReport(ranks=[0, 1, 2], graphs={}, signatures={}, differences={0: [], 1: ['graph'], 2: []})\n"
            "print(repr(r))\nprint(short_repr(r) == repr(r), type(renderable(r)).__name__)\n"
            "print(repr(object()).startswith('<object object'), type(renderable(1)).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(inherit=True), timeout=300)
    assert r.stdout.splitlines() == ["False", "RankReport(ranks 0-2, odd 1)", "True Group", "True Text"], r


def test_python_dash_m_and_short_version():
    from graphdbg import __version__

    r = run_graphdbg("-V")
    assert r.returncode == 0 and r.stdout.strip() == f"graphdbg {__version__}"
    assert run_graphdbg("--version").stdout == r.stdout


def test_missing_path_answers_before_torch_is_imported():
    code = ("import sys\nsys.argv = ['graphdbg', 'replay', '/no/such/path']\nfrom graphdbg.ui.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(inherit=True), timeout=300)
    assert r.stdout.split() == ["2", "False"], r
    assert r.stderr.strip() == "graphdbg: error: /no/such/path: no such file or folder"


@pytest.mark.parametrize("command", ["replay", "show", "ls", "compare", "minify", "export-test"])
def test_json_errors_are_json(cli, command):
    jsonschema = pytest.importorskip("jsonschema")  # a dev dependency; the GPU image lacks it
    args = [command, "/no/such/path", "--json"] if command != "export-test" else [command, "/no/such/path", "-o", "t.py"]
    r = cli(*args)
    assert r.code == 2 and "graphdbg: error: /no/such/path: no such file or folder" in r.err
    if command != "export-test":  # export-test has no --json
        out = json.loads(r.out)
        assert out["schema"] == "error" and out["exit_code"] == 2 and "no such file" in out["error"]
        jsonschema.validate(out, _schema(cli, "error"))


def _schema(cli, name: str) -> dict:
    jsonschema = pytest.importorskip("jsonschema")  # a dev dependency; the GPU image lacks it
    r = cli("schema", name)
    assert r.code == 0, r
    schema = json.loads(r.out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_every_json_output_names_its_version_and_schema(cli):
    jsonschema = pytest.importorskip("jsonschema")  # a dev dependency; the GPU image lacks it
    from graphdbg import __version__

    listed = cli("schema", "--list").out.split()
    assert {"manifest", "ls", "show", "replay", "compare", "minify", "bisect-passes", "bisect-nodes", "bisect-ranks",
            "extract", "error"} <= set(listed)
    runs = {"ls": cli("ls", ROOT / "fixtures" / "block_dynamic", "--json"),
            "show": cli("show", DUMP, "--json"),
            "replay": cli("replay", DUMP, "--backend", "eager", "--no-isolate", "--json"),
            "bisect-ranks": cli("bisect", "ranks", ROOT / "fixtures" / "world_printed", "--json")}
    for name, r in runs.items():
        out = json.loads(r.out)
        assert out["graphdbg"] == __version__ and out["schema"] == name, (name, r)
        jsonschema.validate(out, _schema(cli, name))
    assert cli("schema", "nonsense").code == 2


def test_help_has_panels_examples_and_no_bool_metavars(cli):
    r = cli("replay", "--help")
    assert r.code == 0
    assert "Example: graphdbg replay fixtures/block_runtime_error --trust-backend" in r.out
    assert "Backend" in r.out and "Inputs" in r.out and "Output" in r.out
    assert "<bool>" not in r.out and "--trust-backend" in r.out
    for command in ("ls", "show", "compare", "minify", "report", "export-test", "schema", "redact", "extract"):
        assert "Example: graphdbg " + command in cli(command, "--help").out, command


def test_shell_completion_installs(tmp_path):
    # typer's switch for naming the shell instead of detecting it from the parent processes
    fixed = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", "SHELL": "/bin/bash"}
    shown = run_graphdbg("--show-completion", "bash", **fixed)
    assert shown.returncode == 0 and "_GRAPHDBG_COMPLETE" in shown.stdout
    r = run_graphdbg("--install-completion", "bash", HOME=str(tmp_path), **fixed)
    assert r.returncode == 0, r
    installed = list(tmp_path.rglob("graphdbg*"))
    assert installed and "_GRAPHDBG_COMPLETE" in installed[0].read_text()
    assert str(installed[0].name) in (tmp_path / ".bashrc").read_text()


def _plain_lines(out: str) -> list[str]:
    lines = out.splitlines()
    assert not any(ch in out for ch in "╭╮╰╯│─"), out  # no box drawing
    assert all(line == line.rstrip() for line in lines), out  # no trailing padding
    return lines


@pytest.mark.slow
def test_piped_replay_leads_with_the_verdict_unboxed_and_unfolded():
    r = run_graphdbg("replay", DUMP, "--trust-backend", COLUMNS="40")
    assert r.returncode == 1, r
    lines = _plain_lines(r.stdout)
    assert lines[0] == "REPRODUCED: the same failure as captured"
    # the signature is one line, whole, though far wider than 40 columns: grep finds it
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (?x? and ?x?) @ torch._C._nn.linear" in lines


def test_replay_says_when_the_recorded_failure_is_not_reproduced(cli):
    r = cli("replay", DUMP, "--backend", "eager", "--no-isolate")
    assert r.code == 0
    first = _plain_lines(r.out)[0]
    assert first.startswith("NOT REPRODUCED: the dump recorded RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert first.endswith("backend eager passes")


def test_stand_ins_collapse_to_one_line_per_kind(cli):
    r = cli("replay", ROOT / "fixtures" / "cuda_streams_thunder", "--backend", "eager", "--no-isolate", "--json")
    stand_ins = json.loads(r.out)["stand_ins"]
    kinds = {s.partition(": ")[2].split(" (")[0] for s in stand_ins}
    assert len(stand_ins) > len(kinds)  # several of one kind, here streams on a machine without CUDA
    r = cli("replay", ROOT / "fixtures" / "cuda_streams_thunder", "--backend", "eager", "--no-isolate")
    shown = [line for line in _plain_lines(r.out) if line.startswith("stand-in")]
    assert len(shown) == len(kinds), r.out
    assert any(line.startswith(f"stand-ins: {sum('stream (' in s for s in stand_ins)} stream (") for line in shown), shown


def test_outcome_is_a_panel_on_a_terminal():
    import io

    from rich.console import Console

    import graphdbg
    from graphdbg.ui.render import outcome_panel

    dump = graphdbg.load(DUMP)
    outcome = dump.case().run("eager", accuracy=False)
    term = Console(file=io.StringIO(), force_terminal=True, width=100)
    term.print(outcome_panel(outcome, dump))
    shown = term.file.getvalue()
    assert "╭" in shown and "Outcome" in shown and "NOT REPRODUCED" in shown
    assert shown.index("NOT REPRODUCED") < shown.index("PASS")


@pytest.mark.slow
def test_long_steps_print_plain_progress_lines_when_piped(tmp_path):
    """Off a terminal each long step says when it is done, on stderr; stdout stays the result."""
    r = run_graphdbg("replay", DUMP, "--backend", "eager", "--no-isolate", "--no-accuracy")
    assert r.returncode == 0, r
    assert "replay: eager: compile, run, compare with the reference: done in " in r.stderr, r.stderr
    assert "done in" not in r.stdout
    r = run_graphdbg("report", DUMP, "-o", tmp_path / "r.html")
    assert r.returncode == 0 and f"report: reading {DUMP}: done in " in r.stderr, r
    r = run_graphdbg("bisect", "ranks", ROOT / "fixtures" / "world_printed", "--json")
    assert "done in" not in r.stderr  # --json: nothing but the JSON and errors


def test_piped_compare_is_plain_rows(cli):
    r = cli("compare", DUMP, "--backends", "eager", "--no-isolate")
    assert r.code == 0, r
    lines = _plain_lines(r.out)
    assert lines[:2] == ["backends", "backend  outcome  signature  seconds  max abs error"]
    assert re.fullmatch(r"eager  pass  -  \d+\.\d\d  -", lines[2]), lines
