"""Fuzz: hostile dumps made from graphdbg's own fixtures by Hypothesis.

Every generated dump must end `show` and `replay` in exit 0, 1 or 2: never 3 (a graphdbg
bug), never a hang, and never a read of a file outside the dump folder (an audit hook on
``open`` watches). About a minute in CI: few examples, each on a small fixture.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import signal
import site
import struct
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")  # a dev dependency; the GPU machine may not have it

from conftest import FIXTURES, ROOT  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FIXTURE = next((FIXTURES / "block_runtime_error").glob("rank*/*"))
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
GRAPH = (FIXTURE / "graph.py").read_text()
SECONDS = 20  # per example; anything near it is a hang (a real one ran for 900 s)
# GRAPHDBG_FUZZ_EXAMPLES=500 for a longer, random search; CI runs a fixed, small one
EXAMPLES = int(os.environ.get("GRAPHDBG_FUZZ_EXAMPLES", "0")) or 12
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES == 12, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# Reads outside the dump ---------------------------------------------------------------------

class _Reads:
    """An audit hook (it can't be removed, so it is installed once) noting opens outside the
    dump while ``dump`` is set; Python's own files, graphdbg's and the OS's are expected."""

    def __init__(self) -> None:
        self.dump: Path | None = None
        self.outside: list[str] = []
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT), *site.getsitepackages(), site.getusersitepackages(),
                 "/proc", "/sys", "/dev", "/etc/ld.so.cache", "/usr/lib", "/usr/share", "/lib",
                 # installed packages a .pth put on the path (a venv seeing an image's own environment)
                 *(p for p in sys.path if Path(p).name in ("site-packages", "dist-packages"))}
        self.allowed = tuple(str(Path(r).resolve()) for r in roots if r)
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple) -> None:
        if event != "open" or self.dump is None or not isinstance(args[0], (str, bytes, Path)):
            return
        path = Path(args[0].decode() if isinstance(args[0], bytes) else args[0])
        try:
            path = path.resolve() if path.is_absolute() else (Path.cwd() / path).resolve()
        except (OSError, RuntimeError):
            return
        text = str(path)
        if text.startswith(str(self.dump) + "/") or text == str(self.dump) or text.startswith(self.allowed):
            return
        self.outside.append(text)


READS = _Reads()


class _Hang(BaseException):
    """Not an Exception: the CLI must not turn it into an exit code."""


def _on_alarm(signum, frame):
    raise _Hang()


def run_cli(*args: str) -> tuple[int, str]:
    """The CLI in-process, as the console script runs it: (exit code, stderr)."""
    from graphdbg.ui.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_handler = sys.argv, signal.signal(signal.SIGALRM, _on_alarm)
    sys.argv = ["graphdbg", *args]
    signal.alarm(SECONDS)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except _Hang:
        code = "hang"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        sys.argv = old_argv
    return code, err.getvalue()


def check_dump(folder: Path, *, replay: bool = True) -> None:
    """show, then a cheap replay where show accepted it: exit 0, 1 or 2, in time, reads inside."""
    import torch

    READS.dump, READS.outside = folder.resolve(), []
    try:
        code, err = run_cli("show", str(folder))
        assert code in (0, 2), f"show exited {code}: {err[-500:]}"
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("graphdbg: error: "), err[-500:]
        if replay and code == 0:
            torch._dynamo.reset()
            code, err = run_cli("replay", str(folder), "--no-isolate", "--backend", "eager", "--direct")
            assert code in (0, 1, 2), f"replay exited {code}: {err[-500:]}"
    finally:
        READS.dump = None
    assert not READS.outside, f"read outside the dump: {READS.outside[:3]}"


@contextlib.contextmanager
def dump_copy():
    with tempfile.TemporaryDirectory(prefix="graphdbg-fuzz-") as tmp:
        folder = Path(tmp) / "rank0" / FIXTURE.name
        shutil.copytree(FIXTURE, folder)
        yield folder


# Hostile manifests -----------------------------------------------------------------------------

def _paths(value, prefix=()):
    """Every (path, value) inside the fixture's manifest, to pick a place to break."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            yield from _paths(v, (*prefix, i))


PLACES = [p for p, _ in _paths(MANIFEST) if p]
FILE_KEYS = {("graph", "file"), ("inputs_file",)}  # where a path goes: confinement has its own test

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70), st.sampled_from([0, 1, -1, 2**63, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["9**9**9", "2**2**100", "s0", "zero", "cuda:99", "meta", "bfloat16", "f32", "", "tensor", "symint",
                     "10**12", "-1", "Max(s0, 9**99)", "__import__('os')", "\x00", "runtime_error"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=10)


def _set(manifest, place, value):
    target = manifest
    for key in place[:-1]:
        target = target[key]
    if value is _DELETE:
        if isinstance(target, dict):
            target.pop(place[-1], None)
        else:
            target.pop(place[-1])
    else:
        target[place[-1]] = value


_DELETE = object()


@st.composite
def hostile_manifests(draw):
    manifest = copy.deepcopy(MANIFEST)
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.sampled_from(PLACES))
        if place in FILE_KEYS:
            value = draw(st.from_regex(r"[a-z_.]{1,12}", fullmatch=True))
        else:
            value = draw(st.one_of(values, st.just(_DELETE)))
        try:
            _set(manifest, place, value)
        except (KeyError, IndexError, TypeError):
            pass  # the place went away with an earlier change
    return manifest


def _dumps(manifest) -> str:
    return json.dumps(manifest, allow_nan=True)


@FUZZ
@given(manifest=hostile_manifests(), deep=st.sampled_from([0, 0, 0, 30, 100_000]))
def test_fuzz_manifests(manifest, deep):
    with dump_copy() as folder:
        text = _dumps(manifest)
        if deep:
            text = text[:-1] + ', "deep": ' + "[" * deep + "]" * deep + "}"
        (folder / "manifest.json").write_text(text)
        check_dump(folder)


# Hostile safetensors headers ---------------------------------------------------------------------

def _header_of(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


HEADER, DATA = _header_of(FIXTURE / "inputs.safetensors")
NAMES = [k for k in HEADER if k != "__metadata__"]


@st.composite
def hostile_tensor_files(draw) -> tuple[dict, int | None, int]:
    """(header, the length field if it lies, how many data bytes follow)."""
    header = copy.deepcopy(HEADER)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(NAMES))
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets", None]))
        if field is None or not isinstance(header[name], dict):
            header[name] = draw(values)
        elif field == "data_offsets":
            header[name][field] = draw(st.one_of(
                st.lists(st.integers(-10, len(DATA) + 10), min_size=0, max_size=3),
                st.tuples(st.integers(0, len(DATA)), st.integers(0, 2**64)).map(list), values))
        elif field == "shape":
            header[name][field] = draw(st.one_of(st.lists(st.integers(-2, 2**40), max_size=4), values))
        else:
            header[name][field] = draw(st.one_of(st.sampled_from(["F32", "F64", "I64", "BOOL", "F8_E4M3", "U64", "XX"]), values))
    length = draw(st.one_of(st.none(), st.integers(0, 2**64 - 1)))
    data = draw(st.integers(0, len(DATA))) if draw(st.booleans()) else len(DATA)
    return header, length, data


@FUZZ
@given(file=hostile_tensor_files())
def test_fuzz_tensor_headers(file):
    header, length, data = file
    blob = json.dumps(header).encode()
    with dump_copy() as folder:
        (folder / "inputs.safetensors").write_bytes(struct.pack("<Q", len(blob) if length is None else length) + blob + DATA[:data])
        check_dump(folder)


# Hostile printed graphs -------------------------------------------------------------------------

ANNOTATION_LINES = [i for i, line in enumerate(GRAPH.splitlines()) if '"f32[' in line or '"Sym(' in line]
annotations = st.one_of(
    st.sampled_from(['f32[9**9**9][1]cpu', 'f32[2**2**100]', 'f32[1000000, 1000000][1000000, 1]cpu', 'Sym(9**9**9)', 'f32[s0]',
                     'f32[-1][1]cpu', 'f32[', 'x' * 10_000, 'f32[' + '(' * 300 + ']', 'f32[99999999999999999999999]', 'i64[2][1]cuda:7']),
    st.from_regex(r"(f32|i64|b8|bf16)\[[0-9s*+ ,()]{0,30}\](\[[0-9, ]{0,10}\])?(cpu|cuda:[0-9])?", fullmatch=True),
)


@st.composite
def hostile_graphs(draw) -> str:
    lines = GRAPH.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["annotation", "truncate", "insert", "delete"]))
        if how == "annotation":
            i = draw(st.sampled_from(ANNOTATION_LINES))
            if i >= len(lines):
                continue
            start = lines[i].index('"') + 1 if '"' in lines[i] else 0
            end = lines[i].index('"', start) if '"' in lines[i][start:] else start
            lines[i] = lines[i][:start] + draw(annotations) + lines[i][end:]
        elif how == "truncate":
            cut = draw(st.integers(0, len(lines)))
            lines = lines[:cut]
        elif how == "insert":
            at = draw(st.integers(0, len(lines)))
            lines.insert(at, draw(st.sampled_from([
                "        import os", "        x = __import__('os').system('true')", "        torch.utils.collect_env.run('true')",
                "        y: \"f32[4]\" = open('/etc/hostname').read()", "    def forward(self):", "        " + "(" * 500,
                "        z = l_x_.tofile('/tmp/x')", "        return (", "# File: /etc/passwd:1 in f, code: x"])))
        elif lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
    return "\n".join(lines) + "\n"


@FUZZ
@given(source=hostile_graphs())
def test_fuzz_printed_graphs(source):
    with dump_copy() as folder:
        (folder / "graph.py").write_text(source)
        check_dump(folder)
        standalone = folder.parent.parent / "rank0_0.py"  # the same text as a printed graph from another tool
        standalone.write_text(source)
        READS.dump = folder.parent.parent.resolve()
        try:
            code, err = run_cli("show", str(standalone))
        finally:
            READS.dump = None
        assert code in (0, 2), f"show exited {code}: {err[-500:]}"


# Files a dump names that lie outside it ----------------------------------------------------------

@settings(max_examples=4, deadline=None, derandomize=True, database=None)
@given(place=st.sampled_from(sorted(FILE_KEYS)),
       target=st.sampled_from(["/etc/hostname", "../../../etc/hostname", "../../../../../../../etc/hostname"]))
def test_fuzz_named_files_stay_inside_the_dump(place, target):
    manifest = copy.deepcopy(MANIFEST)
    _set(manifest, place, target)
    with dump_copy() as folder:
        (folder / "manifest.json").write_text(_dumps(manifest))
        check_dump(folder, replay=False)


def test_the_audit_hook_sees_reads_outside_the_dump(tmp_path):
    """The watch itself works: a read of a file next to the dump is caught."""
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    READS.dump, READS.outside = (tmp_path / "dump").resolve(), []
    try:
        outside.read_text()
    finally:
        READS.dump = None
    assert READS.outside == [str(outside.resolve())]


# Every schema field, every file kind (issue 23) ----------------------------------------------------

def _schema_fields() -> list[str]:
    """Every top-level field the manifest's schema types, by the name a manifest uses."""
    from graphdbg.store.schema import Manifest

    return sorted(f.alias or name for name, f in Manifest.model_fields.items())


SCHEMA_FIELDS = _schema_fields()
field_values = st.one_of(values, st.sampled_from([
    {"values": {"inductor.cpp.march": "native -wrapper /bin/sh"}}, {"values": "x"}, {"seq": "1", "dir": "../.."},
    [{"id": 1, "dir": ["x"]}], {"kind": "partial", "func": {"callable": "os:system"}}, "..", "../other", "/etc",
    {"backend": "recipe:{}", "passes": ["os:system"], "steps": [{"nodes_before": -1}]}, "[/]\x1b]52;c;eA==\x07"]))


NO_SHRINK = settings(FUZZ, phases=[Phase.explicit, Phase.reuse, Phase.generate])  # a shrink here takes minutes


@NO_SHRINK
@given(changes=st.lists(st.tuples(st.sampled_from(SCHEMA_FIELDS), st.one_of(field_values, st.just(_DELETE))), min_size=1, max_size=3))
def test_fuzz_every_schema_field(changes):
    manifest = copy.deepcopy(MANIFEST)
    for field, value in changes:
        if field in ("graph", "inputs_file") and isinstance(value, str):
            continue  # where a path goes: confinement has its own test
        _set(manifest, (field,), value)
    with dump_copy() as folder:
        (folder / "manifest.json").write_text(_dumps(manifest))
        check_dump(folder)


FILE_KINDS = ["text", "binary", "link_out", "dangling", "fifo", "device", "folder"]
# files a dump or a folder of dumps holds that graphdbg reads: (where, name) relative to the dump
NAMED_FILES = [(".", "fault.txt"), (".", "notes.txt"), ("../..", "repro.py"), ("../..", "bisect-passes.json"),
               ("../..", "log.txt"), ("..", "bisect-nodes.json")]


def _plant(path: Path, kind: str, text: str) -> None:
    if os.path.lexists(path):
        path.unlink()
    if kind == "text":
        path.write_text(text)
    elif kind == "binary":
        path.write_bytes(b"\xff\x00" * 64 + text.encode())
    elif kind == "link_out":
        path.symlink_to("/etc/hostname")
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere" / "x")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


@NO_SHRINK
@given(files=st.lists(st.tuples(st.sampled_from(NAMED_FILES), st.sampled_from(FILE_KINDS), st.text(max_size=40)),
                      min_size=1, max_size=3), crash=st.booleans())
def test_fuzz_every_file_kind(files, crash):
    """fault.txt, repro.py, bisect-*.json, log.txt and extra text, each as text, binary, a link
    out, a dangling link, a FIFO, a device or a folder: show, ls, report and redact end in 0, 1
    or 2, in time, reading nothing outside, writing nothing through a link."""
    with dump_copy() as folder:
        if crash:
            manifest = copy.deepcopy(MANIFEST)
            manifest["failure"] = {"kind": "crash"}
            manifest["minified"] = {"backend": "eager", "steps": []}
            (folder / "manifest.json").write_text(_dumps(manifest))
        for (where, name), kind, text in files:
            _plant(folder / where / name, kind, text)
        root = folder.parent.parent
        READS.dump, READS.outside = root.resolve(), []
        try:
            for args in (("show", str(folder)), ("ls", str(root)), ("report", str(root), "-o", str(root / "r.html")),
                         ("redact", str(root), "-o", str(root / "shared"))):
                code, err = run_cli(*args)
                assert code in (0, 1, 2), f"{args[0]} exited {code}: {err[-500:]}"
                if code == 2:  # one line per refused file, no traceback
                    assert all(ln.startswith(("graphdbg: error: ", "graphdbg: skipped ")) for ln in err.strip().splitlines()), err[-500:]
        finally:
            READS.dump = None
        assert not READS.outside, f"read outside the dump: {READS.outside[:3]}"
        assert not (folder / "nowhere").exists()
