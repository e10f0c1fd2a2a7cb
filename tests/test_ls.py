"""graphdbg ls at scale and as an answer: failures first, a summary line, filters, problems that
don't fail the run unless asked, a cache that makes a second listing read no graph, and the
plain `graphdbg ls` answered without the CLI's framework as the CLI answers it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

from conftest import FIXTURES, SGLANG_CORPUS


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "dumps"
    for name in ("block_accuracy", "block_compile_error", "block_runtime_error"):
        shutil.copytree(FIXTURES / name, root / name)
    shutil.copytree(FIXTURES / "corpus", root / "corpus")  # printed graphs: no failure of their own but a log's
    return root


def test_ls_leads_with_failures_and_a_summary_and_filters_them(tmp_path, cli):
    root = _folder(tmp_path)
    r = cli("ls", root, "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    kinds = [g["kind"] for g in data["groups"]]
    failing = [k not in ("captured", "foreign", "pass") for k in kinds]
    assert failing == sorted(failing, reverse=True) and any(failing), kinds  # failures first
    s = data["summary"]
    assert s["files"] == len(data["dumps"]) and s["groups"] == len(kinds) and s["unreadable"] == 0
    assert s["by_kind"]["accuracy"] == 1 and s["failed"] == sum(failing)

    r = cli("ls", root)  # the answer on the first line: groups, failures by kind
    head = r.out.splitlines()[0]
    assert r.code == 0 and f"{s['files']} files in {s['groups']} groups" in head and "accuracy 1" in head, r.out
    assert all(line == line.rstrip() for line in r.out.splitlines()) and "─" not in r.out.replace("└─", "")  # piped: plain lines

    only = json.loads(cli("ls", root, "--json", "--kind", "accuracy").out)
    assert [g["kind"] for g in only["groups"]] == ["accuracy"] and only["summary"]["files"] == 1
    failed = json.loads(cli("ls", root, "--json", "--failed").out)
    assert failed["groups"] and all(g["kind"] not in ("captured", "foreign") for g in failed["groups"])
    one = cli("ls", root, "--kind", "accuracy")
    assert "1 file in 1 group: 1 failing (accuracy 1)" in one.out.splitlines()[0], one.out
    none = cli("ls", root, "--kind", "timeout")
    assert none.code == 0 and "none match" in none.out


def test_unreadable_files_are_problems_and_strict_fails_on_them(tmp_path, cli):
    root = _folder(tmp_path)
    bad = root / "corpus" / "Qwen3-Next-80B-A3B-Instruct" / "rank9_0.py"
    bad.write_text("class GraphModule(torch.nn.Module):\n    def forward(self, x: \"f32[2\"):\n        return (x,)\n")
    r = cli("ls", root)
    assert r.code == 0 and "1 unreadable" in r.out.splitlines()[0], r
    assert "graphdbg: unreadable:" in r.err and "rank9_0.py:2" in r.err and "Traceback" not in r.err
    r = cli("ls", root, "--strict")
    assert r.code == 2 and "rank9_0.py" in r.err


def test_a_second_ls_reads_from_the_cache_and_sees_changed_files(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    root = _folder(tmp_path)
    old = time.time() - 60  # files written just now are not cached (a same-size rewrite in one clock tick)
    files = sorted(root.rglob("*.py"))
    for f in [*files, *root.rglob("*.txt")]:  # the printed graphs and the run logs
        os.utime(f, (old, old))
    first = json.loads(cli("ls", root, "--json").out)
    with sqlite3.connect(tmp_path / "cache" / "ls.sqlite") as db:
        cached = db.execute("select count(*) from files_v1 where path not like 'log:%'").fetchone()[0]
        logs = db.execute("select count(*) from files_v1 where path like 'log:%'").fetchone()[0]
    assert cached == len(list((root / "corpus").rglob("*.py"))) + 3  # the printed graphs and the 3 dump folders
    assert logs == len(first["logs"]) > 0  # and the parse of each run log read
    assert json.loads(cli("ls", root, "--json").out) == first  # from the cache: the same listing

    # a file that changed is read again, not answered from the cache
    target = next(f for f in files if f.name.startswith("rank0_"))
    target.write_text(target.read_text().replace("class GraphModule", "class GraphModule", 1) + "\n# edited\n")
    os.utime(target, (old + 1, old + 1))
    again = json.loads(cli("ls", root, "--json").out)
    assert again["summary"] == first["summary"]
    target.write_text("class GraphModule(torch.nn.Module):\n    def forward(self, x: \"f32[2\"):\n        return (x,)\n")
    os.utime(target, (old + 2, old + 2))
    broken = json.loads(cli("ls", root, "--json").out)
    assert [Path(p["path"]).name for p in broken["problems"]] == [target.name]
    fresh = json.loads(cli("ls", root, "--json", "--no-cache").out)
    assert fresh["problems"] == broken["problems"] and fresh["summary"] == broken["summary"]


def test_ls_of_a_folder_listed_before_does_not_import_torch(tmp_path):
    import subprocess
    import sys

    root = tmp_path / "dumps"
    for i in range(3):
        shutil.copytree(FIXTURES / "block_runtime_error", root / f"run{i}")
    shutil.copytree(FIXTURES / "corpus", root / "printed")  # printed graphs and their logs: from the cache too
    old = time.time() - 60
    for f in root.rglob("*"):
        os.utime(f, (old, old))
    probe = ("import sys\nfrom graphdbg.ui.cli import main\nsys.argv = ['graphdbg', 'ls', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nprint('torch imported:', 'torch' in sys.modules, code)\n")
    env = {**os.environ, "COLUMNS": "200", "GRAPHDBG_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    runs = [subprocess.run([sys.executable, "-c", probe, str(root)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert runs[0].stdout.splitlines()[0] == runs[1].stdout.splitlines()[0], runs
    assert all("runtime_error 1" in r.stdout.splitlines()[0] for r in runs), runs
    # validated once (manifest, tensor file's header) and then from the cache: never with torch
    assert runs[0].stdout.strip().endswith("torch imported: False 0"), runs[0]
    assert runs[1].stdout.strip().endswith("torch imported: False 0"), runs[1]


def test_the_schema_bounds_numel_as_specs_do():
    from graphdbg.store import schema, specs

    assert schema.MAX_NUMEL == specs.MAX_NUMEL


def test_a_cached_listing_opens_no_cached_graph_and_still_sees_the_folder_change(tmp_path, cli, monkeypatch):
    """A second ls takes the files the cache holds, unchanged, as printed graphs without looking
    into them; a file that stopped being a graph, and a rank file added beside the others (the
    world size), are seen at once."""
    from graphdbg.listing import read

    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "corpus"
    shutil.copytree(FIXTURES / "corpus", root)
    old = time.time() - 60
    files = sorted(root.rglob("*.py"))
    for f in [*files, *root.rglob("*.txt")]:
        os.utime(f, (old, old))
    first = json.loads(cli("ls", root, "--json").out)
    looked: list[Path] = []
    real = read.looks_like_printed_graph
    monkeypatch.setattr(read, "looks_like_printed_graph", lambda p: looked.append(p) or real(p))
    (root / "notes.md").write_text("not a graph\n")
    os.utime(root / "notes.md", (old, old))
    assert json.loads(cli("ls", root, "--json").out) == first
    assert looked == []  # every file came from the cache: none was opened to see what it is

    program = files[0]
    program.write_text("import os\nprint(os.getcwd())\n")  # no longer a printed graph
    os.utime(program, (old + 1, old + 1))
    folder = files[-1].parent
    ranks = {r["rank"] for r in first["dumps"] if Path(r["path"]).parent == folder}
    added = folder / f"rank{max(ranks) + 5}_0.py"
    added.write_text(files[-1].read_text())  # a new rank's file
    again = json.loads(cli("ls", root, "--json").out)
    assert set(looked) == {program, added}  # only the files the cache doesn't hold as they are
    assert str(program) not in {r["path"] for r in again["dumps"]}
    assert {r["world_size"] for r in again["dumps"] if Path(r["path"]).parent == folder} == {max(ranks) + 6}


def test_a_folder_spelled_any_way_lists_its_files_as_pathlib_writes_them(tmp_path, monkeypatch):
    """ls walks the folder's files as texts (a Path per file was most of a listing's memory):
    whatever the folder's spelling ("." from inside it, "./x/", a trailing slash, "//"), each
    row's path, and each group's, is the one a Path of the file gives."""
    from graphdbg.listing import list_dumps

    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "run"
    shutil.copytree(FIXTURES / "corpus", root / "corpus")
    expected = {str(Path(p)) for p in (root / "corpus").rglob("*.py")}
    monkeypatch.chdir(tmp_path)
    for spelling in (".", "./run/", "run/corpus/..", "run//", "/" + str(root).lstrip("/"), "/" + str(root)):
        listing = list_dumps(spelling, cache=False).to_json()
        paths = [d["path"] for d in listing["dumps"]]
        assert {str(Path(p).resolve()) for p in paths} == expected, spelling
        assert paths == [str(Path(p)) for p in paths] and all(Path(p).is_file() for p in paths), spelling
        assert sorted(p for g in listing["groups"] for p in g["paths"]) == sorted(paths)


def test_a_name_that_is_not_utf8_is_a_problem_shown_escaped(tmp_path, cli):
    """A dump folder, printed graph or run log whose name is not UTF-8 (bytes a Linux file name
    may hold) can't be written in the listing's JSON: it is a problem row (a log: a log entry
    with its error) with the name escaped, and the rest of the folder lists as before, in the
    table and in --json."""
    root = tmp_path / "dumps"
    shutil.copytree(FIXTURES / "block_runtime_error", root / "good")
    odd_dump = os.fsdecode(bytes(root / "run") + b"\xff")
    shutil.copytree(FIXTURES / "block_accuracy", odd_dump)
    graph = FIXTURES / "corpus" / "Qwen3-0.6B" / "rank0_0.py"
    shutil.copy(graph, root / "rank0_0.py")
    shutil.copy(graph, os.fsdecode(bytes(root) + b"/rank1_0\xfe.py"))
    shutil.copy(graph, root / "good" / "rank0_0.py")  # a printed graph: the run's logs beside it are read
    (root / "good" / os.fsdecode(b"run\xfd.log")).write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
    r = cli("ls", root, "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert [entry["path"] for entry in data["logs"]] == [str(root / "good" / "run\\xfd.log")] and "not UTF-8" in data["logs"][0]["error"]
    assert sorted(p["path"] for p in data["problems"]) == [str(root / "rank1_0\\xfe.py"), str(root / "run\\xff")]
    assert all("not UTF-8" in p["error"] for p in data["problems"])
    assert data["summary"]["files"] == 3 and data["summary"]["unreadable"] == 2
    r = cli("ls", root)
    assert r.code == 0 and "2 unreadable" in r.out.splitlines()[0] and "run\\xff" in r.err, r
    assert cli("ls", root, "--strict").code == 2


def test_the_plain_ls_command_line_is_the_typer_commands(tmp_path, capsys, monkeypatch):
    """`graphdbg ls` is answered without typer (graphdbg/__main__.py, ui/ls_command.py): the
    options it knows are the typer command's, and every command line, answered either way, prints
    the same bytes with the same exit code (errors, --strict, filters, bad options included)."""
    import sys

    from graphdbg.__main__ import main as fast
    from graphdbg.ui import ls_command
    from graphdbg.ui.cli import app
    from graphdbg.ui.cli import main as full

    click_ls = next(c for c in typer_commands(app) if c.name == "ls")
    declared = {o: p.name for p in click_ls.params for o in p.opts if o.startswith("--")}
    known = {**ls_command.FLAGS, **ls_command.VALUES}
    assert {o: declared[o] for o in known} == known and set(declared) - set(known) == {"--ops"}
    root = _folder(tmp_path)
    (root / "broken").mkdir()
    (root / "broken" / "rank0_0.py").write_text("class GraphModule(torch.nn.Module):\n    def forward(self, x):\n        return (x,\n")
    monkeypatch.setenv("COLUMNS", "200")
    lines = [["ls", str(root)], ["ls", "--json", str(root)], ["ls", str(root), "--strict", "--kind=accuracy"],
             ["ls", str(root), "--json", "--failed", "--no-cache"], ["ls", str(root / "nothing"), "--json"],
             ["ls", str(root), "--kind"], ["ls", str(root), "--bogus"], ["ls"], ["ls", str(root), "--log", str(root / "no.log")],
             ["ls", str(root / "corpus"), "--log", str(root / "corpus" / "Qwen3-0.6B" / "log.txt"), "--json"]]
    for line in lines:
        answers = []
        for entry in (fast, full):
            monkeypatch.setattr(sys, "argv", ["graphdbg", *line])
            try:
                entry()
                code = 0
            except SystemExit as e:
                code = e.code
            answers.append((code, *capsys.readouterr()))
        assert answers[0] == answers[1], line
        assert (ls_command.plain_ls(line) is None) == (line[-1] in ("--kind", "--bogus", "ls")), line  # those: typer's usage errors


def typer_commands(app):
    import typer

    return typer.main.get_command(app).commands.values()


def test_a_plain_ls_imports_neither_typer_nor_torch(tmp_path):
    # pydantic is imported: a Dump's manifest is the schema's model (store/schema.py), torch-free
    import subprocess
    import sys

    probe = ("import sys\nfrom graphdbg.__main__ import main\nsys.argv = ['graphdbg', 'ls', '--json', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich', 'torch'}), code, file=sys.stderr)\n")
    env = {**os.environ, "GRAPHDBG_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    r = subprocess.run([sys.executable, "-c", probe, str(SGLANG_CORPUS)], env=env, capture_output=True, text=True, timeout=300)
    assert r.stderr.strip().endswith("[] 0"), r.stderr[-2000:]
    assert json.loads(r.stdout)["summary"]["files"] == 152
