"""Every file a dump names stays inside it; export-test and repro.py embed data, never code.

Hand-made hostile dumps (paths out of the folder, symbolic links, FIFOs, a conftest.py, quotes
and backslashes in messages) driven through ``show``, ``replay``, ``export-test`` and ``minify``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, child_env

SECRET = "TOPSECRET-do-not-echo"


def _manifest(dump: Path) -> dict:
    return json.loads((dump / "manifest.json").read_text())


def _set(dump: Path, change) -> None:
    data = _manifest(dump)
    change(data)
    (dump / "manifest.json").write_text(json.dumps(data))


def _one_error_line(r) -> str:
    lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and lines[0].startswith("graphdbg: error: "), r
    return lines[0]


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every dump, whose contents must never be read back."""
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n")
    return path


def _both(cli, dump):
    return [cli("show", dump), cli("replay", dump, "--backend", "eager", "--no-isolate")]


def test_graph_file_outside_the_dump_is_refused_without_echo(fixture_copy, outside, cli):
    dump = fixture_copy("block_compile_error")
    for name in (str(outside), f"../../../elsewhere/{outside.name}", "C:\\x\\graph.py"):
        _set(dump, lambda m: m["graph"].__setitem__("file", name))
        for r in _both(cli, dump):
            line = _one_error_line(r)
            assert "not a file inside the dump" in line and SECRET not in r.err + r.out


def test_inputs_file_outside_the_dump_is_refused(fixture_copy, outside, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    other = fixture_copy("block_runtime_error")
    for name in (str(other / "inputs.safetensors"), "../../../block_runtime_error/rank0/"
                 f"{other.name}/inputs.safetensors", "/dev/zero"):
        _set(dump, lambda m: m.__setitem__("inputs_file", name))
        for r in _both(cli, dump):
            assert "not a file inside the dump" in _one_error_line(r)


@pytest.mark.parametrize("name", ["graph.py", "inputs.safetensors", "manifest.json"])
def test_symlinks_in_a_dump_are_not_followed(name, fixture_copy, outside, cli):
    dump = fixture_copy("block_compile_error")
    real = dump / name
    if name != "manifest.json":
        os.replace(real, outside)  # the link points at the real content: still refused
    else:
        outside.write_text(real.read_text())
        real.unlink()
    (dump / name).symlink_to(outside)
    for r in _both(cli, dump):
        line = _one_error_line(r)
        assert "symbolic link" in line and SECRET not in r.err + r.out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graph.py", "inputs.safetensors"])
def test_fifo_in_a_dump_is_refused_at_once(name, fixture_copy, tmp_path):
    dump = fixture_copy("block_compile_error")
    (dump / name).unlink()
    os.mkfifo(dump / name)
    for cmd in (["show", str(dump)], ["replay", str(dump), "--backend", "eager", "--no-isolate"]):
        done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", *cmd], capture_output=True, text=True, timeout=120,
                              env=child_env())
        assert done.returncode == 2, done.stderr
        assert "FIFO" in done.stderr and "Traceback" not in done.stderr


def test_fifo_named_on_the_command_line_is_refused(tmp_path):
    fifo = tmp_path / "rank0_0.py"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "show", str(fifo)], capture_output=True, text=True,
                          timeout=120, env=child_env())
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


def test_parse_errors_do_not_quote_a_file_that_is_not_a_graph(tmp_path, cli):
    path = tmp_path / "rank0_0.py"
    path.write_text(f"# a comment first\nclass GraphModule(torch.nn.Module):\n    pass\npassword = '{SECRET}'\n")
    r = cli("show", path)
    line = _one_error_line(r)
    assert "rank0_0.py:" in line and SECRET not in r.err + r.out


def test_minifier_storage_outside_its_folder_is_not_read(tmp_path, cli):
    repro = tmp_path / "repro"
    import shutil

    shutil.copytree(FIXTURES / "torch_minifier" / "after_dynamo", repro)
    script = repro / "repro.py"
    text = script.read_text()
    store = repro / "checkpoints" / "storages"
    import re

    real = store / re.search(r"reader\.storage\('([0-9a-f]+)'", text).group(1)
    # the script points at a storage above its folder, and the store holds a link leading out
    (tmp_path / "stolen").write_bytes(real.read_bytes())
    script.write_text(text.replace(f"reader.storage('{real.name}'", "reader.storage('../../../stolen'"))
    import graphdbg

    r = cli("show", script, "--json")
    assert r.code == 0, r
    stored = json.loads(r.out)["inputs_table"][0]["stored"]
    assert not stored  # no saved value: a stand-in, not the file above
    assert any("linear" in s.describe() for s in graphdbg.load(script).case("cpu").stand_ins)
    real.unlink()
    real.symlink_to(tmp_path / "stolen")
    script.write_text(text)
    case = graphdbg.load(script).case("cpu")
    assert any("linear" in s.describe() for s in case.stand_ins)


# --- export-test and repro.py ----------------------------------------------------------------

HOSTILE_MESSAGE = 'no lowering for gelu at C:\\xtemp\\new """ + __import__("os").system("touch PWNED") + """ \\'

class HostileMessage(NotImplementedError):
    pass


def backslash_backend(gm, example_inputs):
    """Refuses graphs with gelu, with a message full of quotes and backslashes."""
    import torch

    if any(n.target in (torch.nn.functional.gelu, torch.ops.aten.gelu.default) for n in gm.graph.nodes):
        raise HostileMessage(HOSTILE_MESSAGE)
    return gm.forward


@pytest.mark.slow
def test_export_test_embeds_data_and_copies_only_the_dump(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    evil = '""" + __import__("os").system("touch PWNED") + """ C:\\xtemp'

    def poison(m):
        m["failure"]["kind"] = "compile_error"
        m["failure"]["signature"] = evil
        m["failure"]["exception"]["message"] = evil
    _set(dump, poison)
    (dump / "conftest.py").write_text("open('PWNED', 'w')\n")
    (dump / "link").symlink_to("/etc")
    (dump / "loop").symlink_to(dump)
    out = tmp_path / "suite" / "test_evil-name.py"
    r = cli("export-test", dump, "-o", out, "--trust-backend")
    assert r.code == 4, r  # the test shows the real signature, not the poisoned one: kept, exit 4 (self-check)
    tree = ast.parse(out.read_text())  # not a SyntaxError
    values = {t.id: ast.literal_eval(s.value) for s in tree.body if isinstance(s, ast.Assign)
              for t in s.targets if isinstance(t, ast.Name) and isinstance(s.value, ast.Constant)}
    assert values["CAPTURED"] == evil
    data = out.with_name("test_evil-name_data")
    assert sorted(p.name for p in data.iterdir()) == ["graph.py", "inputs.safetensors", "manifest.json"]
    assert not any(p.is_symlink() for p in data.iterdir())
    # the test runs (and fails: the bug is there) without running anything from the dump
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT / "fixtures")])})
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-3000:]
    assert not list(tmp_path.rglob("PWNED"))


def test_export_test_refuses_a_dump_with_a_file_leading_out(fixture_copy, outside, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    (dump / "graph.py").unlink()
    (dump / "graph.py").symlink_to(outside)
    r = cli("export-test", dump, "-o", tmp_path / "t" / "test_x.py", "--trust-backend")
    assert "symbolic link" in _one_error_line(r)
    assert not (tmp_path / "t" / "test_x_data" / "graph.py").exists()


@pytest.mark.slow
def test_minify_repro_with_backslashes_and_quotes_still_compiles_and_reproduces(tmp_path, cli):
    out = tmp_path / "min"
    r = cli("minify", FIXTURES / "block_compile_error", "--backend", "test_security_files:backslash_backend", "--any-failure",
            "-o", out, "--json")
    assert r.code == 0, r
    repro = next(out.rglob("repro.py"))
    ast.parse(repro.read_text())
    done = subprocess.run([sys.executable, str(repro)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=child_env(tests=True))
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert not list(tmp_path.rglob("PWNED"))


# --- names a dump chooses never become names of files graphdbg writes ------------------------

def _renamed(dump: Path, graph: str, inputs: str) -> None:
    """The dump's graph and tensor files moved to names of the attacker's choosing."""
    for old, new in (("graph.py", graph), ("inputs.safetensors", inputs)):
        (dump / new).parent.mkdir(parents=True, exist_ok=True)
        (dump / old).rename(dump / new)
    _set(dump, lambda m: (m["graph"].__setitem__("file", graph), m.__setitem__("inputs_file", inputs)))


@pytest.mark.slow
def test_export_test_and_share_name_the_files_they_write(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    _renamed(dump, "checks/conftest.py", "__init__.py")
    (dump / "sitecustomize.py").write_text("open('PWNED', 'w')\n")  # not the dump's: never copied
    assert cli("show", dump).code == 0  # the dump itself is fine: its own names, read inside it
    out = tmp_path / "suite" / "test_renamed.py"
    r = cli("export-test", dump, "-o", out, "--trust-backend")
    assert r.code == 0, r  # the exported test ran on its own (self-check) and fails as captured
    written = sorted(p.relative_to(out.parent).as_posix() for p in out.parent.rglob("*") if p.is_file())
    assert written == ["test_renamed.py", "test_renamed_data/graph.py", "test_renamed_data/inputs.safetensors",
                       "test_renamed_data/manifest.json"], written
    copied = _manifest(out.parent / "test_renamed_data")
    assert copied["graph"]["file"] == "graph.py" and copied["inputs_file"] == "inputs.safetensors"
    shared = tmp_path / "shared"
    r = cli("share", dump, "-o", shared, "--trust-backend", "--no-isolate")
    assert r.code == 0, r
    assert sorted(p.name for p in shared.rglob("*")) == ["graph.py", "inputs.safetensors", "manifest.json"]
    assert cli("show", shared).code == 0 and not list(tmp_path.rglob("PWNED"))


# --- outputs through links -----------------------------------------------------------------------

def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("untouched\n")
    (victim / "rank0").mkdir()
    (victim / "rank0" / "old-dump").mkdir()
    (victim / "rank0" / "old-dump" / "keep.txt").write_text("untouched\n")
    return victim


def _unchanged(victim: Path) -> None:
    files = sorted(p.relative_to(victim).as_posix() for p in victim.rglob("*"))
    assert files == ["keep.txt", "rank0", "rank0/old-dump", "rank0/old-dump/keep.txt"], files
    assert (victim / "keep.txt").read_text() == "untouched\n"


def test_default_outputs_are_never_written_through_a_link(fixture_copy, tmp_path, cli, monkeypatch):
    dump = fixture_copy("block_compile_error")
    victim = _victim(tmp_path)
    work = tmp_path / "unpacked-bug-report"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / f"{dump.name}-min").symlink_to(victim)  # where minify's default output goes
    line = _one_error_line(cli("minify", dump, "--trust-backend"))
    assert "symbolic link" in line and "-o" in line
    log = tmp_path / "printed.log"
    log.write_text('[rank3]: class GraphModule(torch.nn.Module):\n[rank3]:     def forward(self, L_y_: "f32[4]"):\n'
                   "[rank3]:         neg = torch.neg(L_y_);  L_y_ = None\n[rank3]:         return (neg,)\n")
    (work / "graphs").symlink_to(victim / "rank0")  # extract's default
    assert "symbolic link" in _one_error_line(cli("extract", log))
    (work / "graphdbg_dumps").symlink_to(victim)  # capture's default, refused before the program starts
    assert "symbolic link" in _one_error_line(cli("capture", "--", sys.executable, "-c", "open('ran', 'w')"))
    assert not (work / "ran").exists()
    _unchanged(victim)
    # named with -o, a link is the user's choice: followed (--help and docs/security.md say so)
    r = cli("extract", log, "-o", "graphs")
    assert r.code == 0 and (victim / "rank0" / "rank3_0.py").is_file(), r
    (victim / "rank0" / "rank3_0.py").unlink()
    (work / "graphs").unlink()  # no link: the default is made and written
    assert cli("extract", log).code == 0 and (work / "graphs" / "rank3_0.py").is_file()
    # report's default report.html planted as a link: replaced by the page, the target untouched
    (work / "report.html").symlink_to(victim / "keep.txt")
    assert cli("report", dump).code == 0
    assert not (work / "report.html").is_symlink() and "<html" in (work / "report.html").read_text()
    _unchanged(victim)


@pytest.mark.slow
def test_minify_writes_nothing_through_links_planted_in_its_output(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    victim = _victim(tmp_path)
    out = tmp_path / "min"
    out.mkdir()
    (out / "rank0").symlink_to(victim / "rank0")  # old dumps under it would be removed, the new one moved in
    (out / "repro_inputs.pt").symlink_to(victim / "keep.txt")
    (out / "repro.py").symlink_to(victim / "keep.txt")
    r = cli("minify", "--no-self-check", dump, "--trust-backend", "-o", out, "--max-queries", "20")
    assert r.code == 2 and "a link is never followed" in r.err, r
    _unchanged(victim)
    (out / "rank0").unlink()
    _set(dump, lambda m: m["failure"].__setitem__("kind", "x/../../../victim/conftest.py"))  # a kind is not a name to write
    r = cli("minify", "--no-self-check", dump, "--trust-backend", "-o", out, "--max-queries", "20")
    assert r.code == 0, r
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert [p.name.split("-")[:2] for p in (out / "rank0").iterdir()] == [["g0", "failure"]]
    _unchanged(victim)


def test_report_never_shows_a_file_a_link_leads_to(fixture_copy, outside, tmp_path, cli):
    corpus = tmp_path / "graphs"
    corpus.mkdir()
    shutil.copy(FIXTURES / "corpus" / "Qwen3-0.6B" / "rank0_0.py", corpus / "rank0_0.py")
    printed = outside.parent / "printed.py"  # outside the folder: a printed graph of its own that carries the secret
    other = (FIXTURES / "corpus" / "Mixtral-8x7B-Instruct-v0.1" / "rank0_10.py").read_text()
    printed.write_text(other.replace("class GraphModule", f"# {SECRET}\nclass GraphModule", 1))
    (corpus / "rank1_0.py").symlink_to(printed)
    dump = fixture_copy("block_compile_error")
    (dump / "inputs.safetensors").unlink()
    (dump / "inputs.safetensors").symlink_to(outside)
    shutil.copytree(dump.parent.parent, corpus / "model", symlinks=True)
    page = tmp_path / "page.html"
    r = cli("report", corpus, "-o", page)
    assert r.code == 0, r
    text = page.read_text()
    assert SECRET not in text and "rank1_0.py" in text and "symbolic link" in text, text[-3000:]
    assert "rank0_0" in text  # the real printed graph is there


def test_a_backend_module_is_never_copied_under_a_name_python_or_pytest_runs(tmp_path, monkeypatch):
    from graphdbg.backends.carry import carry_backend

    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.syspath_prepend(str(mine))  # a module of the user's, found before this suite's own conftest
    monkeypatch.delitem(sys.modules, "conftest", raising=False)
    for name in ("sitecustomize", "conftest", "strict"):
        (mine / f"{name}.py").write_text("def backend(gm, example_inputs):\n    return gm.forward\n")
        out = tmp_path / f"out-{name}"
        carried = carry_backend(f"{name}:backend", out, recorded_path=str(mine))
        assert carried.spec == f"{name}:backend"
        written = sorted(p.name for p in out.iterdir()) if out.exists() else []
        assert written == (["strict.py"] if name == "strict" else []), written
