"""Every code example in README.md and docs/*.md runs: each file's ```python blocks in order, as
one session (a later block may use an earlier block's names), and its shell blocks marked
```bash runnable (``exit=N`` when the command is meant to exit N), in one bash session with
``graphdbg`` and ``python`` on PATH. They run in a scratch folder holding ``fixtures`` and
``examples`` of this checkout, so nothing they write lands in it. The README's table renders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(path: Path) -> list[tuple[str, str]]:
    """(info string, code) of each fenced block."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(path.read_text())]


def _scratch(tmp_path: Path) -> Path:
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, cmd in (("graphdbg", f'{sys.executable} -m graphdbg "$@"'), ("python", f'{sys.executable} "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\nexec {cmd}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("GRAPHDBG_DUMP_DIR", None)
    return env


def test_every_doc_file_has_a_fence_parse_and_links_that_exist():
    for doc in DOCS:
        text = doc.read_text()
        assert text.count("```") % 2 == 0, doc
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not target.startswith(("http://", "https://")):
                assert (doc.parent / target).exists(), (doc, target)


def test_readme_command_table_renders():
    """One header, one separator, rows with the same number of cells, no command twice."""
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `graphdbg")
             or line.startswith("| command")]
    text = (ROOT / "README.md").read_text()
    table = re.search(r"^\| command \| what it does \|\n\| --- \| --- \|\n((?:\|.*\|\n)+)", text, re.M)
    assert table is not None
    rows = table.group(1).splitlines()
    assert len(rows) == len(lines) - 1  # every command row is in the one table
    cells = [re.split(r"(?<!\\)\|", row)[1:-1] for row in rows]
    assert all(len(c) == 2 for c in cells), [r for r, c in zip(rows, cells) if len(c) != 2]
    names = [c[0].strip().split()[1] for c in cells]
    assert len(names) == len(set(names)), names
    for command in ("capture", "ls", "show", "replay", "compare", "minify", "bisect", "export-test", "report", "redact",
                    "extract", "schema"):
        assert command in names


@pytest.mark.parametrize("doc", [d for d in DOCS if any(i == "python" for i, _ in blocks(d))],
                         ids=lambda d: d.name)
@pytest.mark.slow
def test_python_examples_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(_scratch(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for n, (info, code) in enumerate(blocks(doc)):
        if info == "python":
            exec(compile(code, f"{doc.name}[block {n}]", "exec"), namespace)  # our own docs, not a dump


@pytest.mark.slow
def test_readme_quickstart_runs(tmp_path):
    """The README's runnable shell blocks, in order, in one shell: each exits as it says."""
    runnable = [(info, code) for info, code in blocks(ROOT / "README.md") if info.startswith("bash runnable")]
    assert len(runnable) >= 5
    script = []
    for n, (info, code) in enumerate(runnable):
        script.append(f"{{\n{code}\n}}\necho \"__block {n} rc=$?\"")
    scratch = _scratch(tmp_path)
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=scratch, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=1200)
    codes = dict(re.findall(r"^__block (\d+) rc=(\d+)$", r.stdout, re.M))
    for n, (info, code) in enumerate(runnable):
        expected = re.search(r"exit=(\d+)", info)
        assert codes.get(str(n)) == (expected.group(1) if expected else "0"), (n, code, r.stdout[-3000:], r.stderr[-3000:])
    quick = scratch / "examples" / "quickstart"
    assert (quick / "test_block.py").is_file() and (quick / "report.html").is_file() and (quick / "min" / "repro.py").is_file()
    assert "the same failure as captured" in r.stdout
    assert re.search(r"13 -> \d+ nodes", r.stdout)


@pytest.mark.slow
def test_the_readme_replay_command_works_after_the_quickstart_is_captured_twice(tmp_path):
    """A second run of the quickstart's capture is the same failure: it is counted in the dump it
    has, so `graphdbg replay graphdbg_dumps/rank0/g0-*` still names one dump."""
    runnable = [code for info, code in blocks(ROOT / "README.md") if info.startswith("bash runnable")]
    capture = next(code for code in runnable if "graphdbg capture" in code)
    replay = next(code for code in runnable if "graphdbg replay" in code)
    scratch = _scratch(tmp_path)
    script = f"{{\n{capture}\n}}\ncd {scratch}\n{{\n{capture}\n}}\n{{\n{replay}\n}}\necho \"__replay rc=$?\""
    r = subprocess.run(["bash", "-c", script], cwd=scratch, env=_env(tmp_path), capture_output=True, text=True, timeout=1200)
    assert re.search(r"^__replay rc=1$", r.stdout, re.M), (r.stdout[-3000:], r.stderr[-3000:])
    assert "REPRODUCED: the same failure as captured" in r.stdout
    assert "captured 2 times (no new dump)" in r.stderr
    assert len(list((scratch / "examples" / "quickstart" / "graphdbg_dumps" / "rank0").iterdir())) == 1


def test_every_command_help_ends_with_an_example_of_that_command(cli):
    """`graphdbg --help`, each command's and each subcommand's: the last line is an example of it."""
    import typer

    from graphdbg.ui.cli import app

    def paths(command, path=()):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                yield from paths(sub, (*path, name))

    seen = []
    for path in paths(typer.main.get_command(app)):
        r = cli(*path, "--help")
        last = [line.strip() for line in r.out.splitlines() if line.strip()][-1]
        assert r.code == 0 and last.startswith(" ".join(("Example: graphdbg", *path)) + " "), (path, last)
        seen.append(" ".join(path))
    assert {"capture", "replay", "share", "bisect", "bisect nodes", "bisect passes", "bisect ranks"} <= set(seen), seen


def test_replay_help_lists_each_exit_code_replay_gives(cli):
    from graphdbg.ui.cli import DIFFERENT_FAILURE

    text = " ".join(cli("replay", "--help").out.split())
    for code, meaning in ((0, "pass"), (1, "the captured failure"), (DIFFERENT_FAILURE, "another failure"), (2, "can't run")):
        assert f"{code} on {meaning}" in text or f"{code} if it {meaning}" in text, (code, meaning)
