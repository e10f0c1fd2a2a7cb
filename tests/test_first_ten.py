"""Issue 24, the first ten minutes: what a new user meets first, driven through the CLI and the
public API (conventions, JSON, quick answers to bad input, progress, the Outcome panel)."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")  # a dev dependency; the GPU image lacks it

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "fixtures" / "block_runtime_error"



# what a README quickstart run leaves in examples/quickstart (git ignores it): a copy for a fresh
# capture must not hold the last run's dumps (the same failure would count in them, no new dump)
QUICKSTART_OUTPUTS = shutil.ignore_patterns("graphdbg_dumps", "min", "test_block*", "report.html", "__pycache__")

def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}
    env.pop("GRAPHDBG_DUMP_DIR", None) if "GRAPHDBG_DUMP_DIR" not in extra else None
    return env


def _graphdbg(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m graphdbg ARGS`` as a user runs it, stdout piped."""
    return subprocess.run([sys.executable, "-m", "graphdbg", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=_env(**env), timeout=600)


def test_python_dash_m_and_short_version():
    from graphdbg import __version__

    r = _graphdbg("-V")
    assert r.returncode == 0 and r.stdout.strip() == f"graphdbg {__version__}"
    assert _graphdbg("--version").stdout == r.stdout


def test_missing_path_answers_before_torch_is_imported():
    code = ("import sys\nsys.argv = ['graphdbg', 'replay', '/no/such/path']\nfrom graphdbg.ui.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert r.stdout.split() == ["2", "False"], r
    assert r.stderr.strip() == "graphdbg: error: /no/such/path: no such file or folder"


@pytest.mark.parametrize("command", ["replay", "show", "ls", "compare", "minify", "export-test"])
def test_json_errors_are_json(cli, command):
    args = [command, "/no/such/path", "--json"] if command != "export-test" else [command, "/no/such/path", "-o", "t.py"]
    r = cli(*args)
    assert r.code == 2 and "graphdbg: error: /no/such/path: no such file or folder" in r.err
    if command != "export-test":  # export-test has no --json
        out = json.loads(r.out)
        assert out["schema"] == "error" and out["exit_code"] == 2 and "no such file" in out["error"]
        jsonschema.validate(out, _schema(cli, "error"))


def _schema(cli, name: str) -> dict:
    r = cli("schema", name)
    assert r.code == 0, r
    schema = json.loads(r.out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_every_json_output_names_its_version_and_schema(cli):
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
    shown = _graphdbg("--show-completion", "bash", **fixed)
    assert shown.returncode == 0 and "_GRAPHDBG_COMPLETE" in shown.stdout
    r = _graphdbg("--install-completion", "bash", HOME=str(tmp_path), **fixed)
    assert r.returncode == 0, r
    installed = list(tmp_path.rglob("graphdbg*"))
    assert installed and "_GRAPHDBG_COMPLETE" in installed[0].read_text()
    assert str(installed[0].name) in (tmp_path / ".bashrc").read_text()


@pytest.mark.slow
def test_capture_command_honours_graphdbg_dump_dir(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(
        "import torch\n"
        "def bad(gm, inputs):\n    raise NotImplementedError('no lowering for this graph')\n"
        "f = torch.compile(lambda x: torch.relu(x) + 1, backend=bad)\n"
        "try:\n    f(torch.randn(4))\nexcept Exception as e:\n    print('failed as expected:', type(e).__name__)\n")
    where = tmp_path / "from_env"
    r = _graphdbg("capture", "--", sys.executable, str(program), cwd=tmp_path, GRAPHDBG_DUMP_DIR=str(where))
    assert r.returncode == 0 and "failed as expected" in r.stdout, r
    manifests = list(where.glob("rank*/*/manifest.json"))
    assert len(manifests) == 1 and not (tmp_path / "graphdbg_dumps").exists()
    assert json.loads(manifests[0].read_text())["failure"]["kind"] == "compile_error"


def test_public_api_is_typed():
    import graphdbg
    from graphdbg.case import Case

    assert (Path(graphdbg.__file__).parent / "py.typed").is_file()
    for fn, names in ((graphdbg.capture, {"mode", "budget_bytes", "rtol", "atol", "redact"}),
                      (graphdbg.compare, {"device", "isolate", "timeout", "passes", "accuracy", "rtol", "atol"}),
                      (Case.run, {"isolate", "timeout", "accuracy", "rtol", "atol", "direct", "backward"})):
        params = inspect.signature(fn).parameters
        assert names <= set(params), fn
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), fn
        assert all(p.annotation is not inspect.Parameter.empty for n, p in params.items() if n != "self"), fn


def test_public_api_keywords_reach_the_run():
    import graphdbg

    dump = graphdbg.load(DUMP)
    outcome = dump.case().run("eager", accuracy=False, isolate=False)
    assert outcome.status == "pass"
    with pytest.raises(TypeError):
        dump.case().run("eager", no_such_option=True)
    df = graphdbg.compare(dump, ["eager"], isolate=False, accuracy=False)
    assert list(df.status) == ["pass"]


@pytest.mark.slow
def test_replay_with_trusted_backend_works_from_any_folder(tmp_path):
    """A dump inside the project that made it names a backend module of that project: replay
    finds the module from any folder (here a module importable from nowhere else)."""
    import shutil

    project = tmp_path / "project"
    (project / "dumps").mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "programs.py", project / "mybackends_for_ten.py")
    dump = project / "dumps" / "block_runtime_error"
    shutil.copytree(DUMP, dump)
    manifest = next(dump.glob("rank*/*/manifest.json"))
    m = json.loads(manifest.read_text())
    m["backend"] = "mybackends_for_ten:broken_transpose_backend"
    manifest.write_text(json.dumps(m))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _graphdbg("replay", dump, "--trust-backend", cwd=elsewhere)
    assert r.returncode == 1, r
    assert "mat1 and mat2 shapes cannot be multiplied" in r.stdout and "the same failure as captured" in r.stdout


def _plain_lines(out: str) -> list[str]:
    lines = out.splitlines()
    assert not any(ch in out for ch in "╭╮╰╯│─"), out  # no box drawing
    assert all(line == line.rstrip() for line in lines), out  # no trailing padding
    return lines


@pytest.mark.slow
def test_piped_replay_leads_with_the_verdict_unboxed_and_unfolded():
    r = _graphdbg("replay", DUMP, "--trust-backend", COLUMNS="40")
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
    r = _graphdbg("replay", DUMP, "--backend", "eager", "--no-isolate", "--no-accuracy")
    assert r.returncode == 0, r
    assert "replay: eager: compile, run, compare with the reference: done in " in r.stderr, r.stderr
    assert "done in" not in r.stdout
    r = _graphdbg("report", DUMP, "-o", tmp_path / "r.html")
    assert r.returncode == 0 and f"report: reading {DUMP}: done in " in r.stderr, r
    r = _graphdbg("bisect", "ranks", ROOT / "fixtures" / "world_printed", "--json")
    assert "done in" not in r.stderr  # --json: nothing but the JSON and errors


def _answer(page: str) -> str:
    start = page.index("<div class=answer")
    return page[start:page.index("</div>", start)]


def test_report_leads_with_the_answer(cli, tmp_path):
    page = tmp_path / "r.html"
    assert cli("report", DUMP, "-o", page).code == 0
    text = page.read_text()
    answer = _answer(text)
    assert text.index("<div class=answer") < text.index("<h2")  # above every section
    assert "runtime_error: RuntimeError: mat1 and mat2 shapes cannot be multiplied" in answer
    assert "the dump does not say which node failed" in answer  # its traceback lost the generated code's frame
    assert f"graphdbg replay {DUMP}/rank0/g0-runtime_error-3b0e0256 --trust-backend" in answer


@pytest.mark.slow
def test_report_names_the_node_the_generated_code_raised_in(tmp_path):
    """A fresh capture of the README's quickstart program: the traceback's generated-code frame
    names the node, and the graph source marks it."""
    import shutil

    work = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples" / "quickstart", work, ignore=QUICKSTART_OUTPUTS)
    r = _graphdbg("capture", "--", sys.executable, "model.py", cwd=work)
    assert r.returncode == 1 and "dump written to" in r.stderr, r
    r = _graphdbg("report", "graphdbg_dumps", "-o", "r.html", cwd=work)
    assert r.returncode == 0, r
    text = (work / "r.html").read_text()
    answer = _answer(text)
    assert "failing node (where the generated code raised): <code class=failing-node>linear</code>" in answer
    assert "model.py:16" in answer  # the user's source line of that node
    assert len(re.findall(r"<span class='failing' id='L\d+'>\s*linear", text)) == 1


def test_report_puts_the_users_frames_first(cli, tmp_path):
    page = tmp_path / "r.html"
    assert cli("report", ROOT / "fixtures" / "block_compile_error", "-o", page).code == 0
    text = page.read_text()
    yours = text.index("traceback: your frames")
    assert "fixtures/programs.py:111 in unsupported_op" in text[yours:text.index("</pre>", yours)]
    assert "hook.py" not in text[yours:text.index("</pre>", yours)]
    assert "<details><summary>the whole traceback" in text


def test_report_takes_the_failing_node_from_bisect_when_the_dump_does_not_say(cli, tmp_path):
    import shutil

    folder = tmp_path / "acc"
    shutil.copytree(ROOT / "fixtures" / "block_accuracy", folder)
    r = cli("bisect", "nodes", folder, "--backend", "fixtures.programs:bad_rewrite_backend", "--json")
    assert r.code == 1, r
    node = json.loads(r.out)["node"]
    (folder / "bisect-nodes.json").write_text(r.out)
    page = tmp_path / "r.html"
    assert cli("report", folder, "-o", page).code == 0
    text = page.read_text()
    answer = _answer(text)
    assert f"<code class=failing-node>{node}</code>" in answer and "first diverging node" in answer
    assert re.search(r"max abs error \d\.\d\d|max abs error \d\.\d{1,2}e", answer)  # 3 significant digits
    assert re.findall(rf"<span class='failing' id='L\d+'>\s*{node}\b", text)


@pytest.mark.slow
def test_report_screenshot_shows_the_verdict_and_failing_node_without_scrolling(cli, tmp_path):
    """Headless Chromium at 1280x800, no scrolling: the answer box with the verdict and the failing
    node (highlighted as in the graph) is on the first screen."""
    import tempfile

    from test_report import CHROMIUM, HIGHLIGHT, _png_pixels

    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium)")
    import shutil

    work = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples" / "quickstart", work, ignore=QUICKSTART_OUTPUTS)
    assert _graphdbg("capture", "--", sys.executable, "model.py", cwd=work).returncode == 1
    page = work / "report.html"
    assert _graphdbg("report", "graphdbg_dumps", "-o", page, cwd=work).returncode == 0
    shot = Path(tempfile.gettempdir()) / "graphdbg-report-screenshots" / "first-screen.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--hide-scrollbars", "--window-size=1280,800"]
        dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and 'class="verdict"' in dom.stdout and 'class="failing-node"' in dom.stdout
    assert shot.exists(), "chromium wrote no screenshot"
    print(f"\nscreenshot of the report's first screen: {shot}")
    width, bpp, rows = _png_pixels(shot.read_bytes())
    highlighted = sum(1 for row in rows for x in range(0, width * bpp, bpp) if tuple(row[x:x + 3]) == HIGHLIGHT)
    assert highlighted > 100, "the failing node is not highlighted on the first screen"


def test_piped_compare_is_plain_rows(cli):
    r = cli("compare", DUMP, "--backends", "eager", "--no-isolate")
    assert r.code == 0, r
    lines = _plain_lines(r.out)
    assert lines[:2] == ["backends", "backend  outcome  signature  seconds  max abs error"]
    assert re.fullmatch(r"eager  pass  -  \d+\.\d\d  -", lines[2]), lines


@pytest.mark.slow
def test_the_wheel_has_the_typed_package_the_entry_point_and_the_extras(tmp_path):
    """What `pip install` from a checkout or a wheel gets (built here without network)."""
    import zipfile

    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                        str(ROOT)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = zipfile.ZipFile(next(tmp_path.glob("graphdbg-*.whl")))
    names = wheel.namelist()
    assert {"graphdbg/py.typed", "graphdbg/__main__.py", "graphdbg/ui/schemas.py"} <= set(names)
    entry = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "graphdbg = graphdbg.ui.cli:main" in entry
    meta = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode().splitlines()
    assert {f"Provides-Extra: {e}" for e in ("thunder", "flashinfer", "gpu", "dev")} <= set(meta)
    assert "Classifier: Typing :: Typed" in meta
