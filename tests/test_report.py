"""graphdbg report: one self-contained HTML page, opened in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, child_env, run_graphdbg

DUMP = FIXTURES / "block_runtime_error"
# what a README quickstart run leaves in examples/quickstart (git ignores it): a copy for a fresh
# capture must not hold the last run's dumps (the same failure would count in them, no new dump)
QUICKSTART_OUTPUTS = shutil.ignore_patterns("graphdbg_dumps", "min", "test_block*", "report.html", "__pycache__")

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
HIGHLIGHT = (0xFF, 0xD7, 0xD5)  # report.STYLE: the failing node's background


@pytest.fixture(scope="module")
def minified(tmp_path_factory):
    """A minify output (the smallest graph, its repro.py) with a bisect result saved beside it
    (in this process: a fixture of ours; tests/test_security_runs.py tests the sandboxed runs)."""
    out = tmp_path_factory.mktemp("report") / "min"
    env = child_env(tests=True)
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "minify", str(FIXTURES / "block_runtime_error"),
                           "--backend", "fixtures.programs:broken_transpose_backend", "-o", str(out), "--json", "--no-isolate"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "bisect", "nodes", str(FIXTURES / "block_accuracy"),
                           "--backend", "fixtures.programs:bad_rewrite_backend", "--json", "--no-isolate"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    (out / "bisect-nodes.json").write_text(done.stdout)
    assert json.loads(done.stdout)["node"]
    return out


@pytest.mark.slow
def test_report_of_a_minify_output(cli, minified, tmp_path):
    page = tmp_path / "report.html"
    r = cli("report", minified, "-o", page)
    assert r.code == 0 and f"wrote {page}" in r.out, r
    text = page.read_text()
    # self-contained: nothing is fetched (the SVG namespace is a name, not a request)
    assert not re.search(r"<script|<link|<img|\bsrc=|@import|url\(", text)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    failing = re.findall(r"<span class='failing' id='L\d+'>([^<]*)</span>", text)
    assert len(failing) == 1 and failing[0].lstrip().startswith("linear"), failing
    assert "<tr class=failing><td><code>linear</code>" in text
    assert "programs.py:43" in text  # the user's source line of the failing node
    assert "<polyline" in text and "queries" in text  # minify steps: nodes against queries
    assert "repro.py" in text and "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in text
    assert "first diverging node" in text  # bisect nodes' --json, saved beside it


def test_report_of_a_corpus_shows_groups_ranks_and_stand_ins(cli, tmp_path):
    page = tmp_path / "corpus.html"
    r = cli("report", FIXTURES / "corpus", "-o", page)
    assert r.code == 0, r
    text = page.read_text()
    assert text.count("<h2 id='group-") >= 5
    assert "<h3>stand-ins</h3>" in text and "torch.ops.sglang.inplace_all_reduce" in text
    assert "NotImplementedError: argument of type" in text  # from the run's log
    # failures are ranked first
    assert text.index("compile_error</span></h2>") < text.index("printed_graph</span></h2>")


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Rows of RGB(A) bytes of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, rows, prev = zlib.decompress(idat), [], bytearray(width * bpp)
    stride = width * bpp
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install -y chromium)")
def test_report_in_headless_chromium_highlights_the_failing_node(cli, minified):
    shots = Path(tempfile.gettempdir()) / "graphdbg-report-screenshots"
    shots.mkdir(exist_ok=True)
    page = shots / "report.html"
    assert cli("report", minified, "-o", page).code == 0
    shot = shots / "report.png"
    shot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                 "--hide-scrollbars", "--window-size=1280,2000"]
        dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the browser parsed the page: the failing node's line is one highlighted element of the graph source
    marked = re.findall(r'<span class="failing" id="L\d+">([^<]*)</span>', dom.stdout)
    assert len(marked) == 1 and marked[0].lstrip().startswith("linear"), dom.stdout[:3000]
    assert shot.exists(), "chromium wrote no screenshot"
    print(f"\nscreenshot of the report: {shot}")
    width, bpp, rows = _png_pixels(shot.read_bytes())
    highlighted = sum(1 for row in rows for x in range(0, width * bpp, bpp * 4) if tuple(row[x:x + 3]) == HIGHLIGHT)
    assert highlighted > 50, "the failing node is not highlighted on screen"


def test_show_marks_the_failing_node(cli, minified):
    dump = next(minified.glob("rank*/*"))
    r = cli("show", dump)
    assert r.code == 0, r
    (marked,) = [line for line in r.out.splitlines() if "<- failed here" in line]
    assert "linear = torch._C._nn.linear(" in marked


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
    work = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples" / "quickstart", work, ignore=QUICKSTART_OUTPUTS)
    r = run_graphdbg("capture", "--", sys.executable, "model.py", cwd=work)
    assert r.returncode == 1 and "dump written to" in r.stderr, r
    r = run_graphdbg("report", "graphdbg_dumps", "-o", "r.html", cwd=work)
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
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install -y chromium)")
    work = tmp_path / "quickstart"
    shutil.copytree(ROOT / "examples" / "quickstart", work, ignore=QUICKSTART_OUTPUTS)
    assert run_graphdbg("capture", "--", sys.executable, "model.py", cwd=work).returncode == 1
    page = work / "report.html"
    assert run_graphdbg("report", "graphdbg_dumps", "-o", page, cwd=work).returncode == 0
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


# Hostile dump text: markup, an attribute breakout in both quotes, a Jinja expression (data is
# never a template), an entity, terminal controls. Each field gets its own so that the test sees
# which ones the page shows.
def _hostile(field: str) -> str:
    return f"<script>alert('{field}')</script><img src=x onerror=alert(1)>\"' onmouseover='x' {{{{7*7}}}} &amp; \x1b]0;t\x07"


# What the page itself is made of: anything else is markup that came from a dump.
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "div", "span", "code", "pre", "b",
             "br", "table", "tr", "th", "td", "a", "ul", "li", "details", "summary", "svg", "line", "text", "polyline",
             "circle"}
PAGE_ATTRS = {"lang", "charset", "class", "id", "href", "xmlns", "width", "height", "role", "aria-label", "x1", "y1",
              "x2", "y2", "stroke", "x", "y", "font-size", "text-anchor", "fill", "stroke-width", "points", "cx", "cy", "r"}


def _page_text(page: str) -> str:
    """The page's text as a browser reads it; fails on any tag or attribute the page doesn't make
    itself (a dump's text that became markup), or a link that leaves the page."""
    from html.parser import HTMLParser

    texts: list[str] = []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            assert tag in PAGE_TAGS, (tag, attrs)
            for name, value in attrs:
                assert name in PAGE_ATTRS, (tag, name, value)
                assert name != "href" or value.startswith("#group-"), value

        def handle_data(self, data):
            texts.append(data)

    assert "\x1b" not in page and "\x07" not in page  # terminal controls shown, not sent
    Reader(convert_charrefs=True).feed(page)
    return "".join(texts)


def _hostile_folder(fixture_copy, tmp_path) -> Path:
    """A copy of block_runtime_error under a hostile folder name, its manifest, a repro.py and
    bisect results beside it holding hostile text in every field the report shows."""
    dump = fixture_copy("block_runtime_error")
    manifest = json.loads((dump / "manifest.json").read_text())
    tb = (f'Traceback (most recent call last):\n  File "/x/site-packages/torch/fx.py", line 1, in run\n    run()\n'
          f'  File "{_hostile("frame")}.py", line 3, in f\n    {_hostile("frame_code")}\n{_hostile("tb_error")}\n')
    manifest["backend"] = _hostile("backend")
    manifest["failure"].update(signature=_hostile("signature"), message=_hostile("message"),
                               exception={"type": "RuntimeError", "message": _hostile("error"), "traceback": tb})
    manifest["minified"] = {"from": _hostile("minified_from"), "backend": _hostile("minified_backend"), "start_nodes": 9,
                            "oracle_queries": 3, "steps": [{"pass_name": _hostile("pass_name"), "nodes_before": 9,
                                                            "nodes_after": 4, "queries": 3, "seconds": 0.5}]}
    (dump / "manifest.json").write_text(json.dumps(manifest))
    top = dump.parent.parent
    (top / "repro.py").write_text(f"# {_hostile('repro')}\n</pre><script>alert('repro_pre')</script>\n")
    (top / "bisect-passes.json").write_text(json.dumps({"culprit": _hostile("culprit"), "pattern": _hostile("pattern")}))
    (top / "bisect-ranks.json").write_text(json.dumps({"odd": [1], "differences": {"1": [_hostile("rank_difference")]}}))
    (top / "bisect-nodes.json").write_text(json.dumps({"node": _hostile("bisect_node"), "method": "bisect",
                                                       "source": _hostile("bisect_source"), "max_abs_error": 0.5}))
    hostile_top = tmp_path / "a<img src=x onerror=alert('folder')>'\"b"
    os.replace(top, hostile_top)
    return hostile_top


def test_report_shows_hostile_dump_text_as_text_in_every_field(fixture_copy, tmp_path, cli):
    folder = _hostile_folder(fixture_copy, tmp_path)
    page = tmp_path / "r.html"
    r = cli("report", folder, "-o", page)
    assert r.code == 0, r
    text = _page_text(page.read_text())
    shown = {f for f in re.findall(r"alert\('(\w+)'\)", text)}
    assert shown >= {"folder", "backend", "signature", "error", "frame", "frame_code", "tb_error", "minified_from",
                     "minified_backend", "pass_name", "repro", "repro_pre", "culprit", "pattern", "rank_difference",
                     "bisect_node", "bisect_source"}, shown
    assert "{{7*7}}" in text and "49" not in re.findall(r"\d+", text.split("{{7*7}}")[0])[-1:]  # data is never a template


def test_report_template_escapes_every_value_it_is_given(fixture_copy, tmp_path):
    """Every string the template is given (those a dump can't reach today too: node names, dtypes,
    CSS classes, ids), replaced by hostile text: the page still holds only its own markup."""
    from graphdbg.listing import list_dumps
    from graphdbg.ui.report import _template, page_context

    def poison(value, where):
        if isinstance(value, dict):
            return {k: poison(v, f"{where}_{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(poison(v, f"{where}_{i}") for i, v in enumerate(value))
        return _hostile(where) if isinstance(value, (str, Path)) and str(value) else value  # "": none

    context = page_context(list_dumps(_hostile_folder(fixture_copy, tmp_path)))
    poisoned = poison(context, "v")
    text = _page_text(_template().render(**poisoned))
    shown = set(re.findall(r"alert\('(\w+)'\)", text))
    for key in ("title", "root", "version", "answer_kind", "answer_verdict", "answer_command", "groups_0_id",
                "groups_0_kind", "groups_0_backend", "groups_0_node_rows_0_name", "groups_0_node_rows_0_dtype",
                "groups_0_source_0_1", "groups_0_minify_steps_0_seconds", "bisect_0_path"):
        assert f"v_{key}" in shown, (key, sorted(shown))
