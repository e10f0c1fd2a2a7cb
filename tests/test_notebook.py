"""graphdbg in a notebook: a real Jupyter kernel runs the README's notebook steps (nbclient)."""

from __future__ import annotations

import os

import pytest
from conftest import FIXTURES, ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CELLS = {
    "dump": f"import graphdbg\nd = graphdbg.load({str(FIXTURES / 'block_runtime_error')!r})\nd",
    "case": "c = d.case()\nc",
    "outcome": "o = c.run('fixtures.programs:broken_transpose_backend')\no",
    "listing": f"from graphdbg.listing import list_dumps\nlist_dumps({str(FIXTURES)!r})",
    "minify": "from graphdbg.minify import minify\nr = minify(c, 'fixtures.programs:broken_transpose_backend', progress=False, out='min')\nr",
    # the minified dump's signature names the failing node's target
    "nodes": "nodes = graphdbg.load(r.saved).nodes()\nnodes[nodes.failed][['name', 'target', 'failed']].to_dict(orient='records')",
    "inputs": "t = d.inputs_table()\n(str(t['mean'].dtype), t[t.kind == 'tensor'].iloc[0]['shape'], int(t['mean'].describe()['count']))",
}


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"name": name}) for name, src in CELLS.items()]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), old or ""])  # the kernel imports this graphdbg
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}}).execute()
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    return {cell.metadata["name"]: cell.outputs for cell in nb.cells}


def _result(outputs) -> dict:
    (result,) = [o for o in outputs if o.output_type == "execute_result"]
    return result.data


@pytest.mark.slow
def test_nouns_show_as_html_with_short_plain_reprs(executed):
    expected = {"dump": ("runtime_error", "g0-runtime_error-3b0e0256"), "case": ("50 nodes", "inputs on cpu"),
                "outcome": ("CRASH", "mat1 and mat2"), "listing": ("block_accuracy", "compile_error"),
                "minify": ("nodes", "queries")}
    for name, needles in expected.items():
        data = _result(executed[name])
        assert "<pre" in data["text/html"] and all(n in data["text/html"] for n in needles), (name, data["text/html"][:3000])
        plain = data["text/plain"]
        assert len(plain) < 300 and "tensor(" not in plain and "Traceback" not in plain, (name, plain)


def test_a_run_that_returns_an_outcome_prints_nothing_on_stderr(executed):
    streams = [o for o in executed["outcome"] if o.output_type == "stream" and o.name == "stderr"]
    assert streams == [], streams
    assert "crash" in _result(executed["outcome"])["text/plain"]


def test_tables_have_typed_columns_and_a_failed_column(executed):
    import ast

    failed = ast.literal_eval(_result(executed["nodes"])["text/plain"])
    assert [row["name"] for row in failed] == ["linear"] and failed[0]["failed"] is True
    dtype, shape, count = ast.literal_eval(_result(executed["inputs"])["text/plain"])
    assert dtype == "float64" and isinstance(shape, tuple) and count > 0
