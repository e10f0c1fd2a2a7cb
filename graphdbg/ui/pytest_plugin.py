"""pytest plugin: every dump and printed graph under a folder is a test item.

Off unless asked::

    $ pytest --graphdbg=dumps/                       # or, in the ini file: graphdbg_dumps = dumps
    $ pytest --graphdbg=dumps/ --graphdbg-backend inductor -k rank0 -n auto --junitxml=out.xml

Each item replays its dump in a child process under the dump's own backend (or
``--graphdbg-backend``). It **passes** when the failure is gone (the backend compiles and runs the
graph and agrees with eager), **fails** with the replay's one-line signature and the command that
reproduces it while the captured failure is there, and **errors** when it fails differently.

An expected failure (xfail) is marked in the manifest (``"expect": {"xfail": true, "strict":
true, "reason": "..."}``) or by a sidecar file: ``expect`` in the dump folder, ``<name>.expect``
beside a printed graph, whose first line is ``xfail`` or ``xfail strict``, then an optional
``: reason``. A strict xfail that starts passing fails the run, so a fix is noticed.

Item names are short: the dump's path under the folder (model folder, rank, graph id), with
graphdbg's ``g0-compile_error-1a2b3c4d`` shortened to ``g0``. Markers: ``gpu`` when the dump was
captured on CUDA, ``slow`` when the backend is Inductor, and the failure kind
(``compile_error``, ``runtime_error``, ``accuracy``, ``crash``).

``--graphdbg-swap OP=REFERENCE`` (repeatable, or ``graphdbg_swap`` lines in the ini file) turns
each item into a kernel's regression test: the graph with OP agrees with the graph with
REFERENCE within the outputs' tolerance (``graphdbg compare --swap``; ``--graphdbg-ops`` names
the modules defining the custom ops, ``--graphdbg-trust-kernels`` runs user Triton kernels from
a dump's source). It fails naming each output that moves; a dump whose graph calls none of the
swapped ops is skipped. ``--graphdbg-within MEASURE>=X`` (repeatable, or ``graphdbg_within``
lines) judges each output by that bound instead of the dtype's tolerance (``cosine>=0.9999``,
``rel_l1<=0.01``; ``graphdbg compare --swap --within``).

Code a dump names as its backend (``module:qualname``) is imported only with
``--graphdbg-trust-backend`` (or ``graphdbg_trust_backend = true``): the same rule as
``graphdbg replay --trust-backend``. A dump's values are read as data, never executed, and
pytest imports no Python file under the folder: pytest's own collection never enters it (no
``conftest.py``, ``__init__.py`` or ``test_*.py`` under it is imported, whatever a dump names
its graph file), and a run where pytest would take its settings (``pytest.ini``, ``tox.ini``,
``setup.cfg``, ``pyproject.toml``) or its first conftests from inside the folder is refused
with one line. ``conftest.py`` files above the folder, in the user's project, are the user's
own and load as in any pytest run. pytest reads its settings before any plugin runs, taking a
separate ``DIR`` for a test path whose settings file it reads (and whose ``addopts = -p mod``
imports a module before this plugin loads): the option is spelled ``--graphdbg=DIR`` (or the ini
option), and ``--graphdbg DIR`` as two arguments is an error (docs/security.md).

This module imports nothing heavy at import time: it is loaded in every pytest run where
graphdbg is installed.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

KINDS = ("compile_error", "runtime_error", "accuracy", "crash")
_FAILED_KINDS = set(KINDS)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphdbg", "graphdbg: dumps as regression tests")
    group.addoption("--graphdbg", dest="graphdbg_dumps", metavar="DIR", default=None,
                    help="Collect every graphdbg dump and printed graph under DIR as a test item: --graphdbg=DIR, "
                         "one argument (two are an error: pytest would read DIR's settings file first).")
    group.addoption("--graphdbg-backend", dest="graphdbg_backend", metavar="BACKEND", default=None,
                    help="Replay every dump under this backend (default: each dump's own).")
    group.addoption("--graphdbg-trust-backend", dest="graphdbg_trust_backend", action="store_true", default=None,
                    help="Import the module:qualname backend a dump names (code from the dump's author).")
    group.addoption("--graphdbg-timeout", dest="graphdbg_timeout", type=float, default=None,
                    help="Seconds one replay may take before it counts as a timeout (default 600).")
    group.addoption("--graphdbg-device", dest="graphdbg_device", default=None,
                    help="cpu, cuda, cuda:N (default: the capture device if present, else cpu).")
    # kernels (docs/kernels.md): a swap as each item's check instead of a replay
    group.addoption("--graphdbg-swap", dest="graphdbg_swap", metavar="OP=REFERENCE", action="append", default=None,
                    help="Judge each dump by the swap: the graph with OP agrees with the graph with REFERENCE (repeatable).")
    group.addoption("--graphdbg-ops", dest="graphdbg_ops", metavar="MODULES", default=None,
                    help="Comma-separated modules defining the dumps' custom ops (as graphdbg --ops).")
    group.addoption("--graphdbg-trust-kernels", dest="graphdbg_trust_kernels", action="store_true", default=None,
                    help="Run user Triton kernels from the source a dump recorded, in the sandboxed replay child.")
    group.addoption("--graphdbg-within", dest="graphdbg_within", metavar="BOUND", action="append", default=None,
                    help="Judge each swapped output by this bound (cosine>=0.9999, rel_l1<=0.01, rel_l2, max_abs, ulps) "
                         "instead of the dtype's tolerance (repeatable; all must hold).")
    parser.addini("graphdbg_swap", "OP=REFERENCE swaps every dump is judged by (as --graphdbg-swap).", type="linelist", default=[])
    parser.addini("graphdbg_within", "Bounds every swapped output is judged by (as --graphdbg-within).", type="linelist", default=[])
    parser.addini("graphdbg_ops", "Modules defining the dumps' custom ops (as --graphdbg-ops).", default="")
    parser.addini("graphdbg_trust_kernels", "Run user Triton kernels from a dump's source.", type="bool", default=False)
    parser.addini("graphdbg_dumps", "Folder of graphdbg dumps to collect as test items (as --graphdbg).", default="")
    parser.addini("graphdbg_backend", "Backend every dump is replayed under (as --graphdbg-backend).", default="")
    parser.addini("graphdbg_trust_backend", "Import the module:qualname backends dumps name.", type="bool", default=False)


def pytest_configure(config: pytest.Config) -> None:
    for kind in KINDS:
        config.addinivalue_line("markers", f"{kind}: a graphdbg dump whose recorded failure is {kind}")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")
    config.addinivalue_line("markers", "slow: end-to-end cases that compile with Inductor")
    _check_bounds(config)


def _check_bounds(config: pytest.Config) -> None:
    """A bad --graphdbg-within, or one with no swap to judge, stops the run with one line."""
    if not _bounds(config) or _folder(config) is None:
        return
    if not _swaps(config):
        raise pytest.UsageError("--graphdbg-within judges a swap's outputs: give --graphdbg-swap OP=REFERENCE too")
    # lazy: torch, only in a run that judges swaps by bounds
    from graphdbg.errors import GraphdbgError
    from graphdbg.judge.measures import parse_within  # lazy: as the line above

    try:
        parse_within(_bounds(config))
    except GraphdbgError as e:
        raise pytest.UsageError(str(e)) from None


def _folder(config: pytest.Config) -> Path | None:
    given = getattr(config.option, "graphdbg_dumps", None) or getattr(config.known_args_namespace, "graphdbg_dumps", None)
    value = given or config.getini("graphdbg_dumps")
    if not value:
        return None
    path = Path(value)
    if not path.is_absolute() and not given:
        path = (config.inipath.parent if config.inipath else config.rootpath) / path  # relative to the ini file, as testpaths are
    return path


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or under it (both resolved: a link can't hide it)."""
    try:
        path, folder = Path(path).resolve(), Path(folder).resolve()
    except (OSError, RuntimeError):
        return False
    return path == folder or folder in path.parents


@pytest.hookimpl(tryfirst=True)  # before pytest loads its first conftest.py files (its own hook is trylast)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Refuse a run where pytest would import from the dumps folder before collection: its
    settings file found there (with ``--graphdbg DIR`` pytest looks in DIR first), its rootdir
    there, or a first conftest there (the current folder or a path given to pytest inside it);
    and ``--graphdbg DIR`` as two arguments (``_two_arguments``)."""
    _two_arguments([*early_config.invocation_params.args, *args])
    folder = _folder(early_config)
    if folder is None or not folder.exists():
        return
    shown = _shown(str(folder))
    if early_config.inipath is not None and _within(early_config.inipath, folder):
        raise pytest.UsageError(f"graphdbg: pytest read its settings from {_shown(str(early_config.inipath))}, inside the dumps "
                                f"folder {shown}; a dumps folder is data, never configuration: spell it --graphdbg={shown} "
                                "(or pass -c with your own settings file)")
    # where pytest loads its first conftest.py files: the paths it was given (else testpaths, else
    # the current folder), each with its test* subfolders (_pytest.config: _set_initial_conftests)
    invocation, root = early_config.invocation_params.dir, early_config.rootpath
    given = [invocation / str(a).split("::")[0] for a in early_config.known_args_namespace.file_or_dir or []
             if not str(a).startswith("-")]
    bases = given or [p for t in early_config.getini("testpaths") for p in root.glob(t)] or [invocation]
    anchors = [*bases, *(sub for b in bases if b.is_dir() for sub in b.glob("test*") if sub.is_dir())]
    for anchor in [root, *anchors]:
        if _within(anchor, folder):
            raise pytest.UsageError(f"graphdbg: pytest would load the conftest.py files of {_shown(str(anchor))} first, inside "
                                    f"the dumps folder {shown} (nothing under it may be imported); run pytest from your own "
                                    "project folder and give it your test paths, or keep the dumps folder out of test* folders")


def _two_arguments(args: list[str]) -> None:
    """A UsageError for ``--graphdbg DIR``: pytest reads its settings before any plugin loads,
    with ``--graphdbg`` unknown and ``DIR`` a test path, so a settings file in DIR was pytest's
    (its ``addopts = -p mod`` with ``pythonpath = .`` imports a module of DIR before this plugin
    can say a word: no hook of a plugin runs earlier). One argument, ``--graphdbg=DIR``, is never
    a test path; two are refused, so that no one relies on them."""
    for i, arg in enumerate(args):
        if str(arg) == "--graphdbg":
            shown = _shown(str(args[i + 1])) if i + 1 < len(args) else "DIR"
            raise pytest.UsageError(f"graphdbg: spell it --graphdbg={shown} (one argument): as two, pytest takes {shown} for a "
                                    "test path and reads a settings file there before any plugin runs (docs/security.md)")


_RESOLVED = pytest.StashKey[Any]()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """pytest's own collection never enters the dumps folder: a ``conftest.py``, an ``__init__.py``
    or a ``test_*.py`` there (a dump's graph file of that name) is never imported."""
    if _RESOLVED not in config.stash:
        folder = _folder(config)
        config.stash[_RESOLVED] = folder.resolve() if folder is not None else None
    folder = config.stash[_RESOLVED]
    if folder is not None and _within(collection_path, folder):
        return True
    return None


def _shown(text: str) -> str:
    """``text`` as it can be printed: bytes of a name that are not UTF-8 as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect and --lf's filter, which run later or wrap this
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    folder = _folder(config)
    if folder is None:
        return
    if not folder.exists():
        raise pytest.UsageError(f"graphdbg: {folder}: no such file or folder")
    collector = DumpFolder.from_parent(session, name=_shown(folder.name), path=folder.resolve(), nodeid=_node_path(folder, config))
    collected = collector.collect()
    # pytest's count ("collected N items") and other plugins hear of these items as of any collected file's
    config.hook.pytest_collectreport(report=pytest.CollectReport(collector.nodeid, "passed", None, collected))
    items.extend(collected)


def _node_path(folder: Path, config: pytest.Config) -> str:
    try:
        return _shown(folder.resolve().relative_to(config.rootpath).as_posix())
    except ValueError:
        return _shown(folder.resolve().as_posix())


class DumpFolder(pytest.Collector):
    """The folder given with --graphdbg: one item per dump or printed graph under it."""

    def collect(self) -> list[pytest.Item]:
        # lazy: this plugin loads in every pytest run; graphdbg's heavy modules only once a dump is collected
        from graphdbg.dump import natural_key
        from graphdbg.listing import list_dumps

        items: list[pytest.Item] = []
        seen: set[str] = set()
        if _shown(str(self.path)) != str(self.path):  # a name that is not UTF-8: one item that says so, never an internal error
            return [DumpItem.from_parent(self, name=_shown(self.path.name), dump_path=Path(_shown(str(self.path))), dump=None,
                                         problem=f"{_shown(str(self.path))}: the folder's name is not UTF-8 text; rename it")]
        listing = list_dumps(self.path)
        for d in listing.dumps:
            name = _unique(_short_name(d.path, self.path), seen)
            items.append(DumpItem.from_parent(self, name=name, dump_path=Path(d.path), dump=d))
        for problem in listing.problems:  # an unreadable dump is an item that errors, never a silent skip
            name = _unique(_short_name(Path(problem["path"]), self.path), seen)
            items.append(DumpItem.from_parent(self, name=name, dump_path=Path(problem["path"]), dump=None,
                                              problem=problem["error"]))
        return sorted(items, key=lambda item: natural_key(item.name))


def _short_name(path: Path, root: Path) -> str:
    """``Qwen3/rank0/g0`` for ``Qwen3/rank0/g0-compile_error-1a2b3c4d``; ``Qwen3/rank0_7`` for a printed graph."""
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        rel = Path(Path(path).name)
    parts = list(rel.parts) or [Path(path).name]
    last = parts[-1]
    if last.endswith(".py"):
        last = last[: -len(".py")]
    elif re.fullmatch(r"g[\d.]+-[a-z_]+-[0-9a-f]+(-\d+)?", last):
        last = last.split("-", 1)[0]
    parts[-1] = last
    return "/".join(parts) if parts != ["."] else Path(path).name



def _unique(name: str, seen: set[str]) -> str:
    out, n = name, 1
    while out in seen:
        n += 1
        out = f"{name}~{n}"
    seen.add(out)
    return out


class StillFails(Exception):
    """The dump still fails the way it was captured."""


class FailsDifferently(Exception):
    """The dump fails, but not the way it was captured (raised in setup: an error, not a failure)."""


def expectation(dump_path: Path, manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The xfail a dump asks for: ``{"strict": bool, "reason": str}``, or None.

    From the manifest's ``expect`` (``"xfail"``, ``"xfail strict"`` or ``{"xfail": true, "strict":
    true, "reason": "..."}``), else from a sidecar ``expect`` file (in a dump folder) or
    ``<name>.expect`` (beside a printed graph): ``xfail [strict][: reason]`` on its first line.
    """
    value = (manifest or {}).get("expect")
    if isinstance(value, dict):
        if value.get("xfail"):
            return {"strict": bool(value.get("strict", False)), "reason": str(value.get("reason") or "expected failure")}
        return None
    text = value if isinstance(value, str) else None
    if text is None:
        side = dump_path / "expect" if dump_path.is_dir() else dump_path.with_suffix(".expect")
        if side.is_file() and not side.is_symlink():
            # lazy: this plugin loads in every pytest run
            from graphdbg.store.safe_files import read_inside

            # read as a file of the folder (a link, a FIFO swapped in after the check: refused)
            data = bytes(read_inside(side.parent, side.name, max_bytes=1 << 16))
            text = (data.decode(errors="replace").strip().splitlines() or [""])[0][:500]
    if not text:
        return None
    head, _, reason = text.partition(":")
    words = head.split()
    if not words or words[0].lower() != "xfail":
        return None
    return {"strict": "strict" in (w.lower() for w in words[1:]), "reason": reason.strip() or "expected failure"}


class DumpItem(pytest.Item):
    """One dump: replayed in a child process in setup, judged in call."""

    def __init__(self, *, dump_path: Path, dump: Any, problem: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dump_path = dump_path
        self.dump = dump
        self.problem = problem
        self.outcome: Any = None
        self.swap_report: Any = None
        self.backend: str | None = None
        self.command: str = ""
        self._mark()

    # markers from the manifest -------------------------------------------------------
    def _mark(self) -> None:
        d = self.dump
        if d is None:
            return
        kind = d.failure_kind
        if kind in _FAILED_KINDS:
            self.add_marker(kind)
        device = self.config.getoption("graphdbg_device") or ""
        try:
            captured = str(d.captured_device)
        except Exception:
            captured = "cpu"
        if device.startswith("cuda") or (not device and captured.startswith("cuda")):
            self.add_marker("gpu")
        backend = self.config.getoption("graphdbg_backend") or self.config.getini("graphdbg_backend") or d.backend
        if "inductor" in str(backend).lower() or "inductor" in str(d.manifest_data.get("backend_recipe") or "").lower():
            self.add_marker("slow")
        expect = expectation(self.dump_path, d.manifest_data)
        if expect is not None:
            self.add_marker(pytest.mark.xfail(reason=expect["reason"], strict=expect["strict"], raises=StillFails))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.dump_path, None, f"graphdbg dump {self.name}"

    # the run -------------------------------------------------------------------------
    def _backend(self) -> str:
        # lazy: this plugin loads in every pytest run; graphdbg's heavy modules only once a dump is collected
        from graphdbg.backends.resolve import dump_backend

        chosen = self.config.getoption("graphdbg_backend") or self.config.getini("graphdbg_backend")
        if chosen:
            return chosen
        if self.dump.format != "dump" and not self.dump.manifest.backend:
            return "eager"
        trust = bool(self.config.getoption("graphdbg_trust_backend") or self.config.getini("graphdbg_trust_backend"))
        return dump_backend(self.dump, trust, "replay")

    def setup(self) -> None:
        # lazy: this plugin loads in every pytest run; graphdbg's heavy modules only once a dump is collected
        from graphdbg.errors import GraphdbgError

        # lazy: this plugin loads in every pytest run; graphdbg's heavy modules only once a dump is collected
        from graphdbg.execution.entry import replay_dump

        if self.problem is not None:
            raise FailsDifferently(f"graphdbg could not read this dump: {self.problem}")
        if _swaps(self.config):
            self._swap_setup(self.config.getoption("graphdbg_timeout") or 600.0, self.config.getoption("graphdbg_device"))
            return
        try:
            self.backend = self._backend()
        except GraphdbgError as e:
            raise FailsDifferently(str(e)) from None
        self.command = _command(self.dump_path, self.backend, self.config)
        timeout = self.config.getoption("graphdbg_timeout") or 600.0
        device = self.config.getoption("graphdbg_device")
        with _importable(self.config):  # module:qualname backends next to the tests, as the CLI finds them
            try:
                self.outcome = replay_dump(self.dump, self.backend, device=device, isolate=True, timeout=timeout)
            except GraphdbgError as e:
                raise FailsDifferently(f"{e} (reproduce: {self.command})") from None
        o = self.outcome
        if o.fails_differently(self.dump):  # the CLI's exit 4: the same test (Outcome.fails_differently)
            captured = self.dump.signature or self.dump.failure_kind
            raise FailsDifferently(f"fails differently: {o.summary()} (captured: {captured}; reproduce: {self.command})")

    def runtest(self) -> None:
        if self.swap_report is not None:
            if self.swap_report.moved:
                raise StillFails(f"{self.swap_report.moves()} (reproduce: {self.command})")
            return
        o = self.outcome
        if o is not None and o.failed:
            raise StillFails(f"{o.summary()} (reproduce: {self.command})")

    # kernels (docs/kernels.md): with --graphdbg-swap, the item is "the graph with OP agrees with the graph with REFERENCE"
    def _swap_setup(self, timeout: float, device: str | None) -> None:
        # lazy: this plugin loads in every pytest run; graphdbg's heavy modules only once a dump is collected
        from graphdbg.errors import GraphdbgError

        # lazy: as the line above
        from graphdbg.replay.compare_swap import swap_dump

        swaps, config = _swaps(self.config), self.config
        ops = [m.strip() for m in (config.getoption("graphdbg_ops") or config.getini("graphdbg_ops") or "").split(",") if m.strip()]
        trust = bool(config.getoption("graphdbg_trust_kernels") or config.getini("graphdbg_trust_kernels"))
        within = _bounds(config)
        self.command = shlex.join(["graphdbg", "compare", _from_here(self.dump_path), *(f"--swap={s}" for s in swaps),
                                   *(f"--within={w}" for w in within),
                                   *([f"--ops={','.join(ops)}"] if ops else []), *(["--trust-kernels"] if trust else [])])
        with _importable(config):  # the --ops modules and module:function references next to the tests
            try:
                self.swap_report = swap_dump(self.dump, swaps, ops=ops, device=device, trust_kernels=trust, timeout=timeout,
                                             only_called=True, within=within)
            except GraphdbgError as e:
                raise FailsDifferently(f"{e} (reproduce: {self.command})") from None
        if not self.swap_report.swaps:
            pytest.skip(f"its graph calls none of {', '.join(s.partition('=')[0] for s in swaps)}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, (StillFails, FailsDifferently)):
            return " ".join(str(excinfo.value).split())  # one line: the signature and the command
        return super().repr_failure(excinfo, style)

    def _repr_failure_py(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        # pytest reports an error in setup through this one (repr_failure is for the call phase)
        if isinstance(excinfo.value, (StillFails, FailsDifferently)):
            return " ".join(str(excinfo.value).split())
        return super()._repr_failure_py(excinfo, style)


def _swaps(config: pytest.Config) -> list[str]:
    return list(config.getoption("graphdbg_swap") or config.getini("graphdbg_swap") or [])


def _bounds(config: pytest.Config) -> list[str]:
    return list(config.getoption("graphdbg_within") or config.getini("graphdbg_within") or [])


def _from_here(path: Path) -> str:
    """``path`` relative to the current folder where it is under it, for a command to run from here."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _command(path: Path, backend: str, config: pytest.Config) -> str:
    parts = ["graphdbg", "replay", _from_here(path), "--backend", backend]
    device = config.getoption("graphdbg_device")
    if device:
        parts += ["--device", device]
    return shlex.join(parts)


class _importable:
    """The rootdir and the current folder on PYTHONPATH while a replay's child starts."""

    def __init__(self, config: pytest.Config) -> None:
        self.paths = [str(config.rootpath), os.getcwd()]
        self.before: str | None = None
        self.added: list[str] = []

    def __enter__(self) -> None:

        self.added = [p for p in self.paths if p not in sys.path]
        sys.path.extend(self.added)  # the parent checks the backend resolves before the child starts
        self.before = os.environ.get("PYTHONPATH")
        have = [p for p in (self.before or "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*have, *self.paths]))

    def __exit__(self, *exc: Any) -> None:

        for p in self.added:
            if p in sys.path:
                sys.path.remove(p)
        if self.before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self.before
