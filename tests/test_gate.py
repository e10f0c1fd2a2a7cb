"""The gate (issue 23, the store side): every file a dump or a folder names is read through
``graphdbg.store.safe_files``, every field through the schema, every write through its ``Folder``.

Each class of the second red-team round, rebuilt by hand on a copy of a committed fixture and
driven through the CLI: a symlinked, FIFO or device ``fault.txt``, a symlinked or FIFO
``repro.py`` / ``bisect-*.json`` under ``report``, a symlinked ``log.txt`` under ``ls``, a
``backward_dump`` leading out, untyped manifest fields, planted links under ``redact`` and
``extract``, text redact missed, rich markup and terminal escapes in dump text, 60k-term
expressions and 1,900-deep folders, a garbage ``outcome.json`` from a backend.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

SECRET = "TOPSECRET-gate-do-not-echo"
PACKAGE = ROOT / "graphdbg"


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


def _cli_subprocess(*args, timeout=120) -> subprocess.CompletedProcess:
    """The CLI in a child, for inputs that could hang it (a FIFO): the timeout is the test."""
    return subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


@pytest.fixture
def outside(tmp_path) -> Path:
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"Fatal Python error: {SECRET}\n")
    return path


def _crash_dump(fixture_copy) -> Path:
    """A copy of a fixture turned into an armed crash dump (kind crash, no signature yet)."""
    dump = fixture_copy("block_compile_error")
    _set(dump, lambda m: m.__setitem__("failure", {"kind": "crash"}))
    return dump


# 1. files a dump names, read through the gate ----------------------------------------------

def test_fault_txt_is_read_through_the_gate(fixture_copy, outside, cli):
    dump = _crash_dump(fixture_copy)
    (dump / "fault.txt").write_text("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n")
    r = cli("show", dump, "--json")
    assert r.code == 0 and json.loads(r.out)["signature"] == "Signal SIGSEGV", r
    (dump / "fault.txt").unlink()
    (dump / "fault.txt").symlink_to(outside)
    for args in (("show", dump), ("replay", dump, "--backend", "eager", "--no-isolate")):
        r = cli(*args)
        assert "symbolic link" in _one_error_line(r) and SECRET not in r.out + r.err


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_fault_txt_fifo_or_device_neither_hangs_nor_is_read(kind, fixture_copy):
    dump = _crash_dump(fixture_copy)
    if kind == "fifo":
        os.mkfifo(dump / "fault.txt")
    else:
        (dump / "fault.txt").symlink_to("/dev/zero")
    said = "FIFO" if kind == "fifo" else "symbolic link"
    for args in (("show", dump), ("ls", "--strict", dump.parent.parent)):  # ls lists it as unreadable; --strict fails
        done = _cli_subprocess(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr and said in done.stderr, (args, done.stderr)
    page = dump.parent / "r.html"  # the report lists the dump it could not read, with the reason
    done = _cli_subprocess("report", dump.parent.parent, "-o", page)
    assert done.returncode == 0 and said in page.read_text(), done.stderr


@pytest.mark.slow
def test_report_never_follows_repro_or_bisect_links(fixture_copy, outside, tmp_path):
    dump = fixture_copy("block_compile_error")  # <root>/rank0/<dump>: a minify output's layout
    _set(dump, lambda m: m.__setitem__("minified", {"backend": "eager", "steps": [], "start_nodes": 9}))
    root = dump.parent.parent
    (root / "repro.py").symlink_to(outside)
    (root / "bisect-passes.json").symlink_to(outside)
    (root / "sub").mkdir()
    (root / "sub" / "bisect-nodes.json").symlink_to(outside)
    out = tmp_path / "report.html"
    done = _cli_subprocess("report", root, "-o", out)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert SECRET not in page and "repro.py" in page and "symbolic link" in page
    (root / "repro.py").unlink()
    os.mkfifo(root / "repro.py")
    done = _cli_subprocess("report", root, "-o", out)  # a FIFO: refused at once, not waited on
    assert done.returncode == 0 and "FIFO" in out.read_text(), done.stderr


def test_ls_never_reads_a_symlinked_log(tmp_path, outside, cli):
    folder = tmp_path / "run"
    folder.mkdir()
    src = FIXTURES / "corpus" / "Qwen3-0.6B" / "rank0_0.py"
    (folder / "rank0_0.py").write_text(src.read_text())
    outside.write_text(f"Traceback (most recent call last):\nRuntimeError: {SECRET}\n")
    (folder / "log.txt").symlink_to(outside)
    r = cli("ls", folder, "--json")
    assert r.code == 0 and SECRET not in r.out + r.err, r


def test_backward_dump_must_be_the_enclosing_dump(fixture_copy, cli):
    dump = fixture_copy("block_compile_error")
    for bad in ("../other", "/etc", "../..", ["x"]):
        _set(dump, lambda m: m.__setitem__("backward_dump", bad))
        for args in (("show", dump), ("replay", dump, "--backend", "eager", "--no-isolate")):
            assert "backward_dump" in _one_error_line(cli(*args))


def test_a_zip_member_inflates_no_further_than_it_declares(tmp_path):
    from graphdbg.errors import DumpError
    from graphdbg.store.safe_files import inflate_member

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("a/data/0", b"\0" * (4 << 20))
    blob = bytearray(archive.read_bytes())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size: say 16 bytes
        at = blob.find(sig)
        blob[at + off: at + off + 4] = (16).to_bytes(4, "little")
    archive.write_bytes(bytes(blob))
    with pytest.raises(DumpError, match="damaged or inflates past the 16 bytes it declares"):
        inflate_member(archive, "a/data/0")
    with pytest.raises(DumpError, match="over the 8 byte limit"):
        inflate_member(archive, "a/data/0", cap=8)


@pytest.mark.slow
def test_safetensors_header_entry_count_is_bounded(fixture_copy, cli):
    dump = fixture_copy("block_compile_error")
    header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(300_000)}
    blob = json.dumps(header).encode()
    (dump / "inputs.safetensors").write_bytes(len(blob).to_bytes(8, "little") + blob)
    assert "entries" in _one_error_line(cli("show", dump))


# 2. typed fields ----------------------------------------------------------------------------

GARBAGE = {
    "config": [{"values": "rm -rf"}, {"values": {"not.a.setting": 1}}, {"skipped": [1]}, "x"],
    "parent": ["p", {"seq": "one"}, {"piece": [1]}],
    "children": [{"id": 1}, [{"dir": ["x"]}], [3]],
    "origin": [{"line": "ten"}, {"file": 3}],
    "backend_source": [{"module": 5}, {"instance": "yes"}, 7],
    "minified": [{"backend": 5}, {"passes": [1]}, {"steps": [{"nodes_before": "x"}]}, {"direct": "no"}],
    "backend_recipe": [{"kind": "os.system"}, "partial", {"kwargs": {}}],
    "backward": [{"roles": "tangent"}],
    "failure": [{"kind": "crash", "signal": 11}],
}


@pytest.mark.parametrize("field", sorted(GARBAGE))
def test_untyped_fields_exit_2_with_one_line(field, fixture_copy, cli):
    dump = fixture_copy("block_compile_error")
    for value in GARBAGE[field]:
        _set(dump, lambda m: m.__setitem__(field, value))
        for args in (("show", dump), ("replay", dump, "--backend", "eager", "--no-isolate"), ("export-test", dump, "-o",
                     dump.parent / "t.py")):
            assert field in _one_error_line(cli(*args))


@pytest.mark.slow
def test_garbage_outcome_json_from_a_backend_exits_2(fixture_copy, cli):
    dump = fixture_copy("block_runtime_error")
    r = cli("replay", dump, "--backend", "gate_backends:garbage_outcome", "--isolate")
    assert "garbage outcome.json" in _one_error_line(r)


# 3. one writer ------------------------------------------------------------------------------

def test_redact_in_place_never_writes_through_planted_links(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("untouched\n")
    (dump / ".graph.py.redacting").symlink_to(victim / "file")
    (dump / ".manifest.json.redacting").symlink_to(victim)
    r = cli("redact", dump.parent.parent)
    assert r.code == 0, r
    assert (victim / "file").read_text() == "untouched\n" and sorted(os.listdir(victim)) == ["file"]
    graph = dump / "graph.py"
    (victim / "graph.py").write_text(graph.read_text())
    graph.unlink()
    graph.symlink_to(victim / "graph.py")  # a symlinked graph.py: refused, the target unchanged
    before = (victim / "graph.py").read_text()
    assert "symbolic link" in _one_error_line(cli("redact", dump.parent.parent))
    assert (victim / "graph.py").read_text() == before


def test_extract_never_writes_through_a_dangling_link(tmp_path, cli):
    log = tmp_path / "printed.log"
    log.write_text('[rank0]: class GraphModule(torch.nn.Module):\n[rank0]:     def forward(self, L_x_: "f32[2]"):\n'
                   "[rank0]:         relu = torch.relu(L_x_);  L_x_ = None\n[rank0]:         return (relu,)\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank0_0.py").symlink_to(tmp_path / "planted.py")
    r = cli("extract", log, "-o", out)
    assert r.code == 2 and not (tmp_path / "planted.py").exists(), r


def test_writer_replaces_links_and_refuses_odd_names(tmp_path):
    from graphdbg.errors import DumpError
    from graphdbg.store.safe_files import Folder

    (tmp_path / "target").write_text("kept\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").symlink_to(tmp_path / "target")
    (tmp_path / "d" / "sub").symlink_to(tmp_path)
    with Folder.open(tmp_path / "d") as d:
        d.replace("a", "new\n")
        with pytest.raises(DumpError, match="already exists"):
            d.create("a", "x")
        with pytest.raises(DumpError, match="a link is never followed"):
            d.put(("sub", "target"), "x", replace=True)
        for name in ("../x", "", "..", "a/b"):
            with pytest.raises(DumpError, match="not a plain file name"):
                d.create(name, "x")
    assert (tmp_path / "target").read_text() == "kept\n" and (tmp_path / "d" / "a").read_text() == "new\n"


# 4. redact rewrites every text file ---------------------------------------------------------

def test_redact_rewrites_every_text_file_and_named_graph(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    leak = "/home/alice-gate/secret-project/model.py"
    os.replace(dump / "graph.py", dump / "g2.py")
    (dump / "g2.py").write_text((dump / "g2.py").read_text().replace("# ", f"# File: {leak}:3 ", 1))
    _set(dump, lambda m: (m["graph"].__setitem__("file", "g2.py"), m.__setitem__("notes", f"ran on {leak}")))
    (dump / "notes.txt").write_text(f"see {leak}\n")
    (dump / "extra").mkdir()
    (dump / "extra" / "fault.txt").write_text(f'  File "{leak}", line 3 in f\n')
    out = tmp_path / "shared"
    r = cli("redact", dump.parent.parent, "-o", out)
    assert r.code == 0, r
    texts = {p: p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix != ".safetensors"}
    assert len(texts) == 4 and not any("alice-gate" in t for t in texts.values()), texts
    assert cli("show", out).code == 0


def test_redact_copies_a_dump_nested_in_another_once(fixture_copy, tmp_path, cli):
    outer = fixture_copy("block_compile_error")
    inner = fixture_copy("block_runtime_error")
    os.replace(inner, outer / "forward")  # a backward dump's layout: forward/ inside, backward_dump ".."
    _set(outer / "forward", lambda m: m.update(backward_dump="..", env={**m.get("env", {}), "hostname": "host-gate-x"}))
    out = tmp_path / "shared"
    r = cli("redact", outer.parent.parent, "-o", out, "--json")
    assert r.code == 0, r
    copied = next(out.glob("rank0/*"))
    assert "host-gate-x" not in (copied / "forward" / "manifest.json").read_text()
    assert cli("show", copied / "forward").code == 0


# 5. escaping and exit codes -----------------------------------------------------------------

HOSTILE_TEXT = "boom [/] [bold red]x[/] \x1b]0;pwned-title\x07 \x1b[2J \x1b]52;c;cm0gLXJmIH4=\x07 \u202e"


def test_markup_and_terminal_escapes_in_dump_text_are_shown_not_obeyed(fixture_copy, tmp_path, cli):
    dump = fixture_copy("block_compile_error")
    _set(dump, lambda m: m["failure"].update(signature=HOSTILE_TEXT, message=HOSTILE_TEXT,
                                             exception={"type": "RuntimeError", "message": HOSTILE_TEXT}))
    odd = tmp_path / "a[bold]b[link=x]c\x1b[2J"  # markup and a CSI in a folder's name
    os.replace(dump.parent.parent, odd)
    for args in (("show", odd), ("ls", odd), ("replay", odd, "--backend", "eager", "--no-isolate")):
        r = cli(*args)
        assert r.code in (0, 1), r
        assert "\x1b" not in r.out + r.err and "\x07" not in r.out + r.err and "\u202e" not in r.out + r.err
    r = cli("show", odd)
    assert "[/]" in r.out and "\\x1b]0;pwned-title" in r.out and "a[bold]b[link=x]c" in r.out
    page = tmp_path / "r.html"
    assert cli("report", odd, "-o", page).code == 0 and "\x1b" not in page.read_text()


def test_deep_expressions_and_folders_exit_2_not_3(tmp_path, cli):
    graph = tmp_path / "rank0_0.py"
    terms = " + ".join(["l_x_"] * 60_000)
    graph.write_text("class GraphModule(torch.nn.Module):\n"
                     '    def forward(self, L_x_: "f32[2]"):\n'
                     "        l_x_ = L_x_\n"
                     f"        add = {terms};  l_x_ = None\n"
                     "        return (add,)\n")
    r = cli("show", graph)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(1_900):  # os.makedirs itself recurses
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    try:
        r = cli("ls", deep)
        assert r.code in (0, 2) and "internal error" not in r.err, r
    finally:  # pytest's own clean-up of old temp folders recurses: take the chain down from the bottom
        fds = [os.open(deep, os.O_RDONLY)]
        while os.path.isdir(f"/proc/self/fd/{fds[-1]}/d"):
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        for child, parent in zip(fds[:0:-1], fds[-2::-1]):
            os.close(child)
            os.rmdir("d", dir_fd=parent)
        os.close(fds[0])


def test_a_graph_fx_cannot_build_exits_2(tmp_path, cli):
    graph = tmp_path / "rank0_0.py"
    graph.write_text('class GraphModule(torch.nn.Module):\n    def forward(self, L_x_: "f32[2]", L_x_: "f32[2]"):\n'
                     "        relu = torch.relu(L_x_)\n        return (relu,)\n")
    for args in (("show", graph), ("replay", graph, "--backend", "eager", "--no-isolate")):
        assert "fx cannot build this graph" in _one_error_line(cli(*args))


# 6. nothing else opens a file: a grep over the package -----------------------------------------

# Files graphdbg makes for itself, never named by a dump: each entry says why it may open files.
OWN_FILES = {
    "store/safe_files.py": "the gate itself",
    "store/tensor_file.py": "safetensors' own reader after check_tensor_file, via the gate's Folder for writes",
    "graph/parser.py": "doc examples only",
    "execution/world.py": "its own temporary folder: request.json, rank pids and stderr",
    "execution/rank_main.py": "its own temporary folder (a torchrun rank)",
    "execution/child.py": "its own temporary folder (request.json, outcome.json)",
    "execution/isolation.py": "its own temporary folder (request.json, stderr)",
    "execution/worker_main.py": "the sandboxed worker's own job folders (request.json, answer.json, its stderr.txt)",
    "replay/passes.py": "a --passes file the user named",
    "capture/armed.py": "fault.txt of a dump it is writing",
    "rebuild/ops_hint.py": "installed packages' sources (which library defines an op)",
    "rebuild/memory_budget.py": "/proc/meminfo",
    "minify/repro.py": "inside the generated repro.py (runs in the user's own process)",
    "ui/cli.py": "/proc/<pid>/stat of its own children",
    "listing/cache.py": "ls's own sqlite cache in GRAPHDBG_CACHE_DIR (FileCache.open), never a dump's file",
    "listing/__init__.py": "FileCache.open: ls's own cache (the dumps it lists are read through the gate)",
    "execution/sandbox.py": "/proc/meminfo, the sandbox note in its own request folder, O_PATH of folders it allows",
    "minify/self_check.py": "its own temporary folder (the shadow graphdbg package)",
    "formats/names_table_maker.py": "writes graphdbg's own names table for the installed torch (a developer's command, with torch)",
    "formats/names_table.py": "graphdbg's own names tables and its own sources (the table's stamp), the installed torch's version.py, never a dump's file",
}
_OPENS = re.compile(r"(?<![\w.])open\(|\.open\(|read_text\(|read_bytes\(|write_text\(|write_bytes\(|copyfile\(|"
                    r"json\.load\(|safe_open\(|torch\.load\(")


def test_nothing_else_opens_a_file():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in OWN_FILES:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _OPENS.search(code) and not re.search(r"open_stream\(|Folder\.open\(|\bos\.fdopen\(", code):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "files opened outside store/safe_files.py:\n" + "\n".join(found)


def test_a_folder_graphdbg_chose_is_opened_through_no_link(tmp_path, monkeypatch):
    from graphdbg.errors import DumpError
    from graphdbg.store.safe_files import Folder, write_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mid").symlink_to(tmp_path / "elsewhere")
    for path in (Path("out/mid/deeper"), tmp_path / "out" / "mid"):
        with pytest.raises(DumpError, match="is a symbolic link"):
            Folder.open(path, create=True, follow=False)
        with pytest.raises(DumpError, match="is a symbolic link"):
            write_file(path / "repro.py", "x", follow=False)
    assert os.listdir(tmp_path / "elsewhere") == []
    with Folder.open(Path("out/made/here"), create=True, follow=False) as made:
        made.create("a.txt", "ok")
    assert (tmp_path / "out" / "made" / "here" / "a.txt").read_text() == "ok"
    with Folder.open(tmp_path / "out" / "mid", create=True) as followed:  # follow=True: the user named it
        assert followed.path == tmp_path / "out" / "mid"
