"""graphdbg report: one self-contained HTML page, opened in a real headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest
from conftest import FIXTURES, child_env

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
HIGHLIGHT = (0xFF, 0xD7, 0xD5)  # report.STYLE: the failing node's background


@pytest.fixture(scope="module")
def minified(tmp_path_factory):
    """A minify output (the smallest graph, its repro.py) with a bisect result saved beside it."""
    import json
    import sys

    out = tmp_path_factory.mktemp("report") / "min"
    env = child_env(tests=True)
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "minify", str(FIXTURES / "block_runtime_error"),
                           "--backend", "fixtures.programs:broken_transpose_backend", "-o", str(out), "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "graphdbg.ui.cli", "bisect", "nodes", str(FIXTURES / "block_accuracy"),
                           "--backend", "fixtures.programs:bad_rewrite_backend", "--json"],
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
