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
    """``tmp_path`` with this checkout's fixtures (linked) and a copy of its examples as git sees
    them: what the quickstart wrote in the checkout (ignored by git) stays behind."""
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "examples"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode:  # not a git checkout (an unpacked archive): all of it
        shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    for name in listed.stdout.splitlines() if not listed.returncode else ():
        if (ROOT / name).is_file():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, cmd in (("graphdbg", f'{sys.executable} -m graphdbg "$@"'), ("python", f'{sys.executable} "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\nexec {cmd}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}  # stdout and stderr in the order they are written, as on a terminal
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


def runnable_blocks(readme: Path = ROOT / "README.md") -> list[tuple[str, int, str | None]]:
    """README's ```bash runnable blocks: (code, the exit code its ``exit=N`` gives, else 0, the
    ```text block that follows it, else None)."""
    found = blocks(readme)
    return [(code, int(m.group(1)) if (m := re.search(r"\bexit=(\d+)", info)) else 0,
             found[n + 1][1] if n + 1 < len(found) and found[n + 1][0] == "text" else None)
            for n, (info, code) in enumerate(found) if info.split()[:2] == ["bash", "runnable"]]


def quickstart_script(readme: Path = ROOT / "README.md") -> str:
    """README's runnable blocks as one bash script, run in one shell from the checkout's root
    (.ci/run runs it there): stderr into stdout, a line ``__block N`` before block N and
    ``__block N rc=R`` after it; exit 1 when a block exits otherwise than its ``exit=N`` says."""
    parts = ["exec 2>&1", "failed=0"]
    for n, (code, want, _) in enumerate(runnable_blocks(readme)):
        parts.append(f'echo "__block {n}"\n{{\n{code}\n}}\nrc=$?\necho "__block {n} rc=$rc"\n'
                     f'[ "$rc" = {want} ] || {{ echo "README block {n} exited $rc, not {want}"; failed=1; }}')
    return "\n".join([*parts, "exit $failed", ""])


# What differs between two runs of the same commands: durations, the hash in a dump's name, the
# folder the quickstart sits in. A README line that is "..." (or "  ... (torch's frames)") stands
# for any number of lines: the traceback's frames inside torch.
_VARIES = [(re.compile(r"(?<![\w.])/[^\s\"']*/examples/quickstart\b"), "<quickstart>"),
           (re.compile(r"\b(g\d+-[a-z_]+)-[0-9a-f]{8}\b"), r"\1-<hash>"),
           (re.compile(r"\b\d+(?:\.\d+)?s\b"), "<seconds>")]


def _normalised(line: str) -> str:
    for pattern, by in _VARIES:
        line = pattern.sub(by, line)
    return line.rstrip()


def printed_as_shown(printed: str, shown: str) -> bool:
    """Are the lines ``printed`` the README's ``shown`` lines, up to what varies?"""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line.strip().startswith("...") else re.escape(_normalised(line)) + "\n"
                      for line in shown.splitlines())
    return re.fullmatch(pattern, "".join(_normalised(line) + "\n" for line in printed.splitlines())) is not None


def test_printed_as_shown_allows_only_what_varies():
    shown = ("x: dump written to /home/you/graphdbg/examples/quickstart/d/g0-runtime_error-72323080\n"
             "Traceback (most recent call last):\n  ... (torch's frames)\nRuntimeError: boom\nminify: 13 -> 5 nodes (2 queries, 0.4s)\n")
    printed = ("x: dump written to /tmp/pytest-1/examples/quickstart/d/g0-runtime_error-0badf00d\n"
               "Traceback (most recent call last):\n  File \"/venv/torch/a.py\", line 1\n    ^^^^\nRuntimeError: boom\n"
               "minify: 13 -> 5 nodes (2 queries, 12.5s)\n")
    assert printed_as_shown(printed, shown)
    assert printed_as_shown(printed.replace('  File "/venv/torch/a.py", line 1\n    ^^^^\n', ""), shown)
    for was, now in (("13 -> 5", "13 -> 6"), ("(2 queries", "(3 queries"), ("boom", "bang"), ("Traceback", "Trace"),
                     ("/quickstart/d/", "/quickstart/e/"), ("g0-runtime_error", "g1-runtime_error"), ("boom\n", "boom\nmore\n")):
        assert not printed_as_shown(printed, shown.replace(was, now)), now


@pytest.mark.slow
def test_readme_quickstart_prints_what_the_readme_shows(tmp_path):
    """README's runnable blocks, in order, in one shell, in a copy of examples/quickstart with this
    graphdbg on PATH: each exits as its ``exit=N`` says and prints the lines of the ```text block
    that follows it, up to what varies from run to run."""
    runnable = runnable_blocks()
    assert len(runnable) >= 5 and all(shown is not None for _, _, shown in runnable)
    scratch, env = _scratch(tmp_path), _env(tmp_path)
    r = subprocess.run(["bash", "-c", quickstart_script()], cwd=scratch, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=1200)
    wrong = []  # every block that differs, so that one run shows all the README needs
    for n, (code, want, shown) in enumerate(runnable):
        block = re.search(rf"^__block {n}\n(.*?)^__block {n} rc=(\d+)\n", r.stdout, re.M | re.S)
        assert block is not None, (n, r.stdout[-3000:])
        printed, rc = block.group(1), int(block.group(2))
        if rc != want or not printed_as_shown(printed, shown):
            wrong.append(f"README block {n} ({code.strip()}) exited {rc} (README: {want}) and printed:\n{printed}\nbut shows:\n{shown}")
    assert not wrong, "\n".join(wrong)
    assert r.returncode == 0
    quick = scratch / "examples" / "quickstart"
    assert (quick / "test_block.py").is_file() and (quick / "report.html").is_file() and (quick / "min" / "repro.py").is_file()

    # The capture run again: the same failure is counted in the dump it has, so the README's
    # `graphdbg replay graphdbg_dumps/rank0/g0-*` still names one dump.
    runnable = [code for info, code in blocks(ROOT / "README.md") if info.startswith("bash runnable")]
    capture = next(code for code in runnable if "graphdbg capture" in code)
    replay = next(code for code in runnable if "graphdbg replay" in code)
    script = f"cd {scratch}\n{{\n{capture}\n}}\n{{\n{replay}\n}}\necho \"__replay rc=$?\""
    r = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True, text=True, timeout=1200)
    assert re.search(r"^__replay rc=1$", r.stdout, re.M), (r.stdout[-3000:], r.stderr[-3000:])
    assert "REPRODUCED: the same failure as captured" in r.stdout
    assert "captured 2 times (no new dump)" in r.stderr
    assert len(list((quick / "graphdbg_dumps" / "rank0").iterdir())) == 1


def test_ci_runs_the_readme_test_command_as_the_readme_gives_it():
    (command,) = [code.strip() for info, code in blocks(ROOT / "README.md") if info == "bash" and "pytest" in code]
    assert "CI runs this command through `.ci/run`" in (ROOT / "README.md").read_text()
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


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
    from graphdbg.outcome import DIFFERENT_FAILURE

    text = " ".join(cli("replay", "--help").out.split())
    for code, meaning in ((0, "pass"), (1, "the captured failure"), (DIFFERENT_FAILURE, "another failure"), (2, "can't run")):
        assert f"{code} on {meaning}" in text or f"{code} if it {meaning}" in text, (code, meaning)


def test_docs_layout_names_only_paths_that_exist():
    """docs/layout.md's every file and folder name (`name.py`, `folder/`, `a/b.py`) is in the tree: read
    against the folder its top-level bullet names (`graphdbg/replay/`), else from the checkout's root."""
    missing = []
    where = ROOT
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines():
        names = re.findall(r"`([^`\s]+)`", line)
        if line.startswith("- ") and names and names[0].endswith("/"):
            where = ROOT / names[0]
        for name in names:
            if not (name.endswith((".py", "/")) or "/" in name) or name.startswith(("http", "[")):
                continue
            if not any((base / name).exists() for base in (where, ROOT, ROOT / "graphdbg")):
                missing.append(name)
    assert not missing, f"docs/layout.md names paths that are not in the tree: {missing}"
