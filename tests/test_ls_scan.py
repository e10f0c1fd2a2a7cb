"""`graphdbg ls` scans printed graphs without torch (formats/scan.py) and lists exactly what the
full reader (fx) would: the same rows and groups, the same errors, the same hashes as `load()`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, SGLANG_CORPUS, child_env

from graphdbg.formats.printed_file import read_printed_source, scanned_manifest
from graphdbg.formats.scan import SHARE_ENV
from graphdbg.formats.sniff import looks_like_printed_graph
from graphdbg.listing import list_dumps
from graphdbg.listing.walk import walk

BAD_ANNOTATION = 'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[2"):\n        return (x,)\n'
PLAIN = 'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[2]"):\n        y = torch.relu(x)\n        return (y,)\n'  # no rank in it
NOT_A_GRAPH = "class GraphModule(torch.nn.Module):\n    def forward(self, x):\n        import os\n        return (x,)\n"


def printed_graph_files(root: Path) -> list[Path]:
    return [p for p in map(Path, walk(root).files) if looks_like_printed_graph(p)]


def _same(root: Path) -> dict:
    scanned = list_dumps(root, cache=False).to_json()
    full = list_dumps(root, cache=False, full=True).to_json()
    assert scanned["dumps"] == full["dumps"]
    assert scanned["groups"] == full["groups"]
    assert scanned["problems"] == full["problems"] and scanned["summary"] == full["summary"]
    return scanned


def test_the_scan_lists_the_fixtures_as_the_full_reader_does(tmp_path):
    root = tmp_path / "printed"
    shutil.copytree(FIXTURES / "corpus", root / "corpus")
    shutil.copytree(FIXTURES / "world_printed", root / "world_printed")
    shutil.copytree(FIXTURES / "cuda_streams_thunder", root / "cuda_streams_thunder")
    bad = root / "corpus" / "Qwen3-0.6B"
    (bad / "rank9_0.py").write_text(BAD_ANNOTATION)
    (bad / "rank8_0.py").write_text(NOT_A_GRAPH)
    listing = _same(root)
    errors = {Path(p["path"]).name: p["error"] for p in listing["problems"]}
    assert "rank9_0.py:2" in errors["rank9_0.py"] and "cannot read the annotation" in errors["rank9_0.py"], errors
    assert "rank8_0.py:3" in errors["rank8_0.py"], errors
    printed = [d for d in listing["dumps"] if d.get("format") == "printed_graph"]
    assert len(printed) == len(printed_graph_files(root)) - 2


# Headers a body can be printed under (ranks of one model print one graph each under their own);
# the last moves the class a line down.
_HEADS = ["# Rank: 3, Graph 7\n\n", "\n\n", "# Rank: 1, Graph 2\n# class Old(torch.nn.Module): a comment, not the class\n",
          "#\tRank: 5,   Graph 0 \n  # indented\n", "# Rank: 4, Graph 1\n# one line more\n\n"]


def test_files_that_differ_only_above_their_class_share_their_forwards_each_listed_as_itself(tmp_path, monkeypatch):
    """ls walks each forward's text once (the scan's kept forwards): files whose texts differ only
    in the comments above the class (another rank's header, none at all, more comments) share
    every forward and are each listed with their own rank, graph number and world size, as the
    full reader lists them one by one; files the scan can't decide, or whose annotations are
    bad, are each still read and reported as themselves."""
    from graphdbg.formats import scan
    from graphdbg.listing import read

    root = tmp_path / "bodies"
    bodies = [f.read_text() for f in sorted((FIXTURES / "corpus").rglob("*.py"))] + [BAD_ANNOTATION, NOT_A_GRAPH, PLAIN, PLAIN]
    for i, text in enumerate(bodies):
        body = text.split("\n", 1)[1] if text.startswith("# Rank:") else text
        for v, head in enumerate(_HEADS if i % 2 else list(reversed(_HEADS))):  # a header first, or none first
            folder = root / f"model{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"rank{v}_{i}.py").write_text(head + body)
    files = list(root.rglob("*.py"))

    walked, fulls = [], []
    real_read, real_full = scan._Forward.read, read._full_manifest
    monkeypatch.setattr(scan._Forward, "read", lambda self: walked.append(self.fn.lineno) or real_read(self))
    monkeypatch.setattr(read, "_full_manifest", lambda f: fulls.append(f) or real_full(f))
    one = list_dumps(root, cache=False).to_json()
    shared = len(walked)
    # only files the scan of each on its own can't decide go to the full reader (torch)
    assert sorted(fulls) == sorted(f for f in files if scanned_manifest(f, read_printed_source(f))[2])
    monkeypatch.setattr(scan, "_NODES_KEPT", 1)  # forwards let go before the next file's: walked again
    walked.clear()
    forgetful = list_dumps(root, cache=False).to_json()
    full = list_dumps(root, cache=False, full=True).to_json()
    monkeypatch.setenv(SHARE_ENV, "0")  # every file and forward on its own
    walked.clear()
    alone = list_dumps(root, cache=False).to_json()
    assert 2 * shared < len(walked), (shared, len(walked))  # five headers a body: its forwards walked once (or while kept)
    for listing in (one, forgetful, alone):
        assert listing["dumps"] == full["dumps"]
        assert listing["groups"] == full["groups"]
        assert listing["problems"] == full["problems"]
    ranks = {Path(d["path"]).name: d["rank"] for d in one["dumps"] if Path(d["path"]).parent.name == "model1"}
    assert (ranks["rank0_1.py"], ranks["rank2_1.py"], ranks["rank3_1.py"], ranks["rank4_1.py"]) == (3, 1, 5, 4), ranks
    assert len(one["problems"]) == 2 * len(_HEADS), one["problems"]  # the bad annotation and the undecided body, each file


def _tabs(text: str) -> str:
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        out.append("\t" * ((len(line) - len(body)) // 4) + " " * ((len(line) - len(body)) % 4) + body)
    return "\n".join(out)


# Spellings of one printed graph a user's files may have: each must list as the full reader reads it.
_SPELLINGS = {
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "trailing": lambda t: t.replace("\n", "  \n"),
    "formfeed": lambda t: t.replace("\n\n", "\n\x0c\n", 1),
    "tabs": _tabs,
    "nul_in_header": lambda t: "# Rank: 2, Graph 1 \x00\n" + t,
    "cr_in_header": lambda t: "# Rank: 2, Graph 1\rx = 1\n" + t,
}


def test_printed_graphs_spelled_differently_list_as_the_full_reader_reads_them(tmp_path):
    """Shared scans (one per body, one per forward text) stay exact whatever the file's line
    breaks, indentation or header: CRLF, tabs, form feeds, trailing spaces, a NUL or a lone CR
    in a comment above the class each list as the full reader reads that file."""
    files = sorted((FIXTURES / "corpus").rglob("*.py"))
    for name, spell in _SPELLINGS.items():
        for f in files:
            out = tmp_path / name / f.parent.name / f.name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(spell(f.read_text()).encode())
            shutil.copy(f, tmp_path / name / f.parent.name / f"plain_{f.name}")  # beside it, as printed
    listing = _same(tmp_path)
    listed = Counter(Path(d["path"]).parent.parent.name for d in listing["dumps"] if not Path(d["path"]).name.startswith("plain_"))
    assert listed == dict.fromkeys(("crlf", "trailing", "formfeed", "tabs"), len(files)), listed
    assert len(listing["problems"]) == len(files) and all("null bytes" in p["error"] for p in listing["problems"])
    # a lone CR ends the comment: `x = 1` is code above the class, and no reader takes the file for a printed graph


def _twice(forward: str) -> str:
    """A graph whose nested class's forward is the outer one's text, indented four more."""
    nested = "\n".join(("    " + line) if line else line for line in forward.splitlines())
    return f"class GraphModule(torch.nn.Module):\n{forward}\n    class sub(torch.nn.Module):\n{nested}\n"


def test_forwards_share_a_scan_only_where_their_text_is_the_same_program(tmp_path, monkeypatch):
    """A forward whose text was read before, however indented (Thunder's `thunder_N` and its
    `_model`), is not walked again; unless a token spans its lines (a triple-quoted string, a
    backslash continuation), where the indentation is part of a value."""
    same = '    def forward(self, x: "f32[2]"):\n        y = torch.ops.aten.add(x, x, alpha = 2)\n        return (y,)\n'
    strings = '    def forward(self, x: "f32[2]"):\n        y = torch.ops.aten.add(x, x, alpha = """a\n        b""")\n        return (y,)\n'
    continued = '    def forward(self, x: "f32[2]"):\n        y = torch.ops.aten.add(x, x, alpha = "a\\\n        b")\n        return (y,)\n'
    for name, forward in {"same": same, "strings": strings, "continued": continued}.items():
        (tmp_path / f"{name}.py").write_text(_twice(forward))
    shared = {Path(d["path"]).stem: (d["graph_hash"], d["group_hash"]) for d in list_dumps(tmp_path, cache=False).to_json()["dumps"]}
    monkeypatch.setenv(SHARE_ENV, "0")
    alone = {Path(d["path"]).stem: (d["graph_hash"], d["group_hash"]) for d in list_dumps(tmp_path, cache=False).to_json()["dumps"]}
    assert shared == alone and len(shared) == 3

    from graphdbg.formats.scan import graph_hash, scan_source

    for name in ("strings", "continued"):  # the nested copy's value has four more spaces: another graph
        graph = scan_source((tmp_path / f"{name}.py").read_text(), name).graph
        assert graph_hash(graph.submodules["sub"]) != graph_hash(scan_source(_twice(same), "same").graph.submodules["sub"])
        assert graph.nodes[1].kwargs["alpha"] != graph.submodules["sub"].nodes[1].kwargs["alpha"]


def test_kept_forwards_are_bounded_by_their_nodes(monkeypatch):
    """The forwards kept for later files hold at most ``_NODES_KEPT`` nodes (a kept node is ~1 KiB)."""
    from graphdbg.formats import scan

    monkeypatch.setattr(scan, "_NODES_KEPT", 200)
    scan.forget_forwards()
    try:
        for f in sorted((FIXTURES / "corpus").rglob("*.py")):
            scanned_manifest(f, read_printed_source(f))
            kept = scan._KEPT
            nodes = sum(len(g.nodes) + 1 for g in kept.values())
            assert nodes == kept.nodes and (nodes <= 200 or len(kept) == 1)
        assert len(kept) >= 2
    finally:
        scan.forget_forwards()


def test_the_scan_lists_the_whole_corpus_as_the_full_reader_does():
    assert len(_same(SGLANG_CORPUS)["dumps"]) == 152


def test_ls_shows_the_hashes_load_gives(tmp_path):
    from graphdbg import load

    files = printed_graph_files(FIXTURES / "corpus")
    rows = {r["path"]: r for r in list_dumps(FIXTURES / "corpus", cache=False).to_json()["dumps"]}
    for f in files:
        d = load(f)
        assert (rows[str(f)]["graph_hash"], rows[str(f)]["group_hash"], rows[str(f)]["nodes"]) == (d.graph_hash, d.manifest.printed.group_hash, d.node_count)


def test_the_names_tables_are_the_ones_for_these_sources():
    """One table per torch release graphdbg is tested on (``TESTED_TORCH``), each made from these
    sources; a torch with no table (another build) has ls read each printed graph in full."""
    from graphdbg._version import TESTED_TORCH
    from graphdbg.formats.names_table import source_stamp, table_for, torch_version

    tables = sorted(table_for("x").parent.glob("names_table-*.json"))
    made = {}
    for path in tables:
        stamp = json.loads(path.read_text())["stamp"]
        made_with = stamp.rpartition(":")[0]
        assert path == table_for(made_with), (path, made_with)
        assert stamp == source_stamp(made_with), f"rewrite {path.name}: python -m graphdbg.formats.names_table_maker with torch {made_with}"
        made[made_with.partition("+")[0].rpartition(".")[0]] = made_with
    assert sorted(made) == sorted(TESTED_TORCH), (made, TESTED_TORCH)
    if not table_for(torch_version()).is_file():
        pytest.skip(f"the shipped tables are torch {sorted(made.values())}'s; this torch is {torch_version()}, which ls reads without one")


def test_a_first_ls_of_printed_graphs_and_dumps_imports_no_torch(tmp_path):
    root = tmp_path / "printed"
    shutil.copytree(FIXTURES / "corpus", root)
    old = time.time() - 60
    for f in root.rglob("*"):
        os.utime(f, (old, old))
    probe = ("import sys\nfrom graphdbg.ui.cli import main\nsys.argv = ['graphdbg', 'ls', '--json', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print('torch imported:', 'torch' in sys.modules, code, file=sys.stderr)\n")
    env = child_env(GRAPHDBG_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", probe, str(root)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.stderr.strip().endswith("torch imported: False 0") for r in runs), runs
    first, again = (json.loads(r.stdout) for r in runs)
    assert first == again and len(first["dumps"]) == len(printed_graph_files(root))


def test_torch_version_read_as_text_is_the_installed_one():
    """The caches' and the names table's stamps read torch's version from its version.py (no
    importlib.metadata lookup, 0.04 s): the release the package metadata gives (a CUDA wheel's
    version.py carries its build's local tag, ``2.11.0+cu130``, which its metadata leaves out)."""
    from importlib.metadata import version

    from graphdbg.formats.names_table import torch_version

    text, meta = torch_version(), version("torch")
    assert text == meta or "+" not in meta and text.split("+")[0] == meta, (text, meta)


def test_shapes_the_front_end_refuses_are_one_line_problems_from_both_readers(tmp_path):
    """The scan and the full reader share one front end (graph/printed_front.py): a shape it
    refuses (a dict keyed by a list, ``*args``, a statement after return) is the same one-line
    problem with its line, whichever reader met it first, never a traceback."""
    bodies = {"dict_key": "        y = torch.ops.aten.add(x, {[1]: 2})\n        return (y,)\n",
              "starred": "        y = torch.ops.aten.add(*x)\n        return (y,)\n",
              "after_return": "        return (x,)\n        y = x\n"}
    for name, body in bodies.items():
        (tmp_path / f"{name}.py").write_text('class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[2]"):\n' + body)
    problems = {Path(p["path"]).stem: p["error"] for p in _same(tmp_path)["problems"]}
    assert "dict keys must be constants" in problems["dict_key"] and problems["dict_key"].endswith(":3: dict keys must be constants in `{[1]: 2}`")
    assert "unsupported */** arguments" in problems["starred"] and "statement after return" in problems["after_return"]


# Shapes around the forward that no printed graph has: each reader refuses them with the front end's words.
_MODULES = {
    "an import": "import os\n" + PLAIN,
    "a relative import": "from . import graphs\n" + PLAIN,
    "code beside the class": PLAIN + "x = GraphModule()\n",
    "two classes": PLAIN + PLAIN.replace("GraphModule", "Other"),
    "no class": "import torch\n",
    "a decorated class": "@dataclass\n" + PLAIN,
    "not a Module": PLAIN.replace("(torch.nn.Module)", "(object)"),
    "a method besides forward": PLAIN.replace("    def forward", "    def helper(self):\n        return 1\n    def forward"),
    "no forward": "class GraphModule(torch.nn.Module):\n    pass\n",
    "a decorated forward": PLAIN.replace("    def forward", "    @staticmethod\n    def forward"),
}


def test_the_scan_and_the_full_reader_refuse_a_module_in_the_same_words():
    """The module around the forward (its one class, the imports beside it, the class's body) is
    recognised once (graph/printed_front.py): the scan doubts what the parser refuses, with its
    message; a well-formed file with `from __future__` and torch imports reads in both."""
    import pytest

    from graphdbg.errors import GraphSourceError
    from graphdbg.formats.scan import Undecided, scan_source
    from graphdbg.graph.parser import parse_printed_graph

    for what, text in _MODULES.items():
        with pytest.raises(GraphSourceError) as full:
            parse_printed_graph(text)
        with pytest.raises(Undecided) as scanned:
            scan_source(text, "g.py")
        assert str(scanned.value) in str(full.value), (what, str(full.value), str(scanned.value))
    fine = "from __future__ import annotations\nimport torch\nfrom torch import nn\n'''a docstring'''\n" + PLAIN
    assert len(scan_source(fine, "g.py").graph.nodes) == len(parse_printed_graph(fine).graph.nodes) == 3


# Forwards whose text is cut from the file before parsing (scan.split_forwards): where the cut
# is not where the function ends, the file is parsed whole; either way, what the full reader reads.
_CUTS = {
    "signature_across_lines": PLAIN.replace('x: "f32[2]"', 'x: "f32[2]",\n y: "f32[2]"'),  # a line less indented than the def
    "comment_at_column_0": PLAIN.replace("        y = ", "# a comment inside\n        y = "),
    "trailing_comments": PLAIN + "    # after the forward\n\n# and at the end\n",
    "one_line_forward": 'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[2]"): return (x,)\n',
    "nested_same_text": _twice(PLAIN.split("\n", 1)[1].rstrip("\n")),
    "forward_not_first": PLAIN.replace("class GraphModule(torch.nn.Module):\n",
                                       "class GraphModule(torch.nn.Module):\n    class sub(torch.nn.Module):\n"
                                       + "".join("    " + ln + "\n" for ln in PLAIN.splitlines()[1:])),
    "returns_a_call": PLAIN.replace('"f32[2]"):', '"f32[2]") -> torch.zeros(1):'),
    "def_in_a_string": PLAIN.replace("torch.relu(x)", "torch.relu(x, 'def forward')"),
    "bad_annotation_lines_down": "\n\n# Rank: 1, Graph 0\n" + PLAIN.replace("        y = torch.relu(x)", "        y: \"f32[2\" = torch.relu(x)"),
}


def test_forwards_cut_from_the_text_read_as_the_whole_file_and_the_full_reader_read_them(tmp_path, monkeypatch):
    from graphdbg.formats.scan import split_forwards

    for name, text in _CUTS.items():
        (tmp_path / f"{name}.py").write_text(text)
    assert split_forwards(_CUTS["signature_across_lines"]) is not None  # cut, then parsed whole: the cut's text doesn't parse
    listed = _same(tmp_path)
    monkeypatch.setenv(SHARE_ENV, "0")  # nothing cut
    alone = list_dumps(tmp_path, cache=False).to_json()
    assert listed["dumps"] == alone["dumps"] and listed["problems"] == alone["problems"]
    problems = {Path(p["path"]).stem: p["error"] for p in listed["problems"]}
    assert set(problems) == {"returns_a_call", "bad_annotation_lines_down"}, problems
    assert "bad_annotation_lines_down.py:6" in problems["bad_annotation_lines_down"], problems  # the file's line, not the forward's
