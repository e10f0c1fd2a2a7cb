"""Repros that check themselves: run what minify or export-test wrote once, in a clean child.

    >>> check_repro("bug/repro.py", captured="NotImplementedError: no lowering for gelu")
    SelfCheck(same=True, line='REPRODUCED: NotImplementedError: no lowering for gelu', ...)

The child is a fresh interpreter started the way the user would start the file (``python
repro.py``, ``python -m pytest test_x.py``), from the current folder and with the user's own
``PYTHONPATH`` (the backend must import as it does for them). For a ``repro.py`` graphdbg itself
is made unimportable (a package of that name that refuses to load comes first on the path), so a
repro that needs graphdbg shows up here, not in the upstream bug report.

What it runs is a dump's graph, so it runs as a replay child does: ``python -I``, sandboxed
(``execution.sandbox``: writes only under its own scratch folder, which holds its temporary files
and compiler caches; no sockets; ...) with a replay's memory cap on the CPU, by a small launcher
(``execution/sandboxed_file.py``) that applies the sandbox before the file runs; it and everything
it starts are ended past ``timeout`` (``execution.isolation.ChildGroup``). ``SelfCheck.sandbox``
says what was applied (``none (...)`` on a kernel without Landlock, as a replay's Outcome says).

When the child's verdict is not the captured failure, the file is kept and the command exits 4
(``SelfCheckFailed``), saying what the child saw.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from graphdbg.backends.resolve import USER_PYTHONPATH
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.execution.isolation import ChildGroup, tail_of
from graphdbg.execution.sandbox import CHILD_PATH_SETUP, ENV, SANDBOX_NOTE, WRITABLE_ENV, child_env, child_path, python_command
from graphdbg.judge.fatal_signal import died_of
from graphdbg.judge.signature import same_signature
from graphdbg.store.safe_files import read_child_file

# what a self-check trusts, as its compile cache's key: it runs a file graphdbg wrote, with the
# backend and modules that file names, so its caches are kept apart from the dump's untrusted replays'
SELF_CHECK_TRUST = "a file graphdbg wrote, run"

SHADOW = ('raise ModuleNotFoundError("No module named \'graphdbg\' (a repro graphdbg writes must run without it)", '
          'name="graphdbg")\n')


class SelfCheckFailed(GraphdbgError):
    """What was written does not show the captured failure when run on its own."""

    exit_code = 4


@dataclass
class SelfCheck:
    same: bool  # the child saw the captured failure
    line: str  # the child's verdict, one line
    exit_code: int | None  # the child's exit status (None: it timed out)
    missing: str | None = None  # what the check needs and this machine lacks (pytest): the file is not checked
    sandbox: str | None = None  # what the child's sandbox applied: "landlock (...)" or "none (why)" (execution/sandbox.py)

    @property
    def weaker(self) -> str | None:
        """What the sandbox could not hold on this kernel (no Landlock, ``weaker: ...``), else None."""
        if self.sandbox is None or (self.sandbox.startswith("landlock (") and "weaker:" not in self.sandbox):
            return None
        return self.sandbox

    def raise_unless_same(self, path: Path, captured: str | None) -> None:
        if not self.same and self.missing is None:
            raise SelfCheckFailed(f"wrote {path}, but run on its own in a fresh interpreter it does not show the captured "
                                  f"failure ({captured or 'a failure'}): {self.line}; the file is kept")


OUTPUT_TAIL = 64_000  # characters of the child's output read back: its verdict and pytest's summary are at the end


def _run(tmp: Path, launch: list[str], env: dict[str, str], device: str | None, timeout: float | None,
         dump: str | Path | None = None) -> tuple[int | None, str, str | None]:
    """Run ``graphdbg.execution.sandboxed_file`` with ``launch`` in a sandboxed child whose own
    folder is ``tmp/work`` and whose whole environment is ``env`` (and what the sandbox needs);
    its exit status (None: timed out), its output, what its sandbox applied. Its compiler caches:
    in its own folder, or ``dump``'s compile cache (``execution.sandbox.child_env``)."""
    own = tmp / "work"
    own.mkdir()
    # the user's say on the sandbox itself (off, or more folders their backend writes); child_env
    # adds a dump's compile cache to the latter
    asked = {k: os.environ[k] for k in (ENV, WRITABLE_ENV) if os.environ.get(k)}
    # caches that follow XDG (graphdbg's own, when the exported test replays) land in the scratch folder too
    # its cache apart from the dump's untrusted replays': the file runs the backend and modules it names
    env = {**env, "XDG_CACHE_HOME": str(own / "cache"), **asked,
           **child_env(own, _device(device), str(dump) if dump else None, SELF_CHECK_TRUST)}
    out = tmp / "output.txt"
    with ChildGroup(python_command("graphdbg.execution.sandboxed_file", *launch), out, env=env, inherit=False) as child:
        code = child.wait(timeout)
    text = tail_of(out, OUTPUT_TAIL)
    try:  # through the gate, as everything a child leaves: it may have swapped its note for a FIFO
        sandbox = read_child_file(own / SANDBOX_NOTE, max_bytes=2000, tail=True).decode("utf-8", "replace").strip() or None
    except DumpError:
        sandbox = None
    if code is None:
        text = f"timed out after {timeout:.0f}s"
    return code, text, sandbox


def _device(device: str | None) -> str:
    """The device the file runs on, for the sandbox (a GPU run: CUDA's socket, no address-space
    cap); not given: a GPU when this process's torch has one."""
    if device is not None:
        return str(device)
    torch = sys.modules.get("torch")
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def _clean_env(shadow: Path | None) -> dict[str, str]:
    """The user's environment: the ``PYTHONPATH`` they started graphdbg with, not the one graphdbg
    grew to find a dump's backend (``resolve.USER_PYTHONPATH``), so what runs here runs for them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHDBG_", "PYTEST_"))}
    env["PYTHONPATH"] = os.environ.get(USER_PYTHONPATH, env.get("PYTHONPATH", ""))
    paths = [p for p in env.pop("PYTHONPATH").split(os.pathsep) if p]
    if shadow is not None:
        paths = [str(shadow), *paths]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _runs_here(captured: str | None) -> bool:
    """Whether what a self-check runs runs in its sandboxed launcher, not in a child of its own:
    unless the captured failure was a signal or a timeout, whose child's death is the answer."""
    return not str(captured or "").startswith(("Signal ", "Timeout"))


def check_repro(path: str | Path, *, captured: str | None = None, timeout: float | None = 600.0,
                device: str | None = None, dump: str | Path | None = None) -> SelfCheck:
    """Run a ``repro.py`` minify wrote (``python repro.py``) with graphdbg unimportable, in the
    sandbox of a replay child on ``device``.

    ``dump``: the dump the repro was minified from. The check then compiles in that dump's
    compile cache, where minify's candidates compiled (warm: an Inductor repro of
    ``fixtures/block_runtime_error`` checks in 18-22 s against 29-38 s cold, 18 s before the
    sandbox), and may write there as that dump's replays may: the graph is that dump's.
    Without it, the caches are the check's own, cold.

    The repro judges itself (exit 1: the failure it was written for, 2: another, 0: none); its
    ``REPRODUCED:``/``FAILED DIFFERENTLY:``/``FIXED:`` line is the verdict shown.
    """
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="graphdbg-selfcheck-", ignore_cleanup_errors=True) as tmp:
        shadow = Path(tmp) / "shadow"  # outside the child's own folder: it can't change it
        (shadow / "graphdbg").mkdir(parents=True)
        (shadow / "graphdbg" / "__init__.py").write_text(SHADOW)
        # the launcher hides graphdbg once the sandbox is on; the shadow on PYTHONPATH too, for
        # the interpreter the repro starts (its backend, ``--in-process``)
        # The repro's backend runs in the sandboxed process itself (``--in-process``): on a GPU,
        # CUDA's driver writes to its process's own /proc entries at init and the sandbox lets only
        # the launcher's be written (a child the repro started saw no GPU: "0 active drivers", or
        # ran on the CPU); everywhere, one interpreter and one torch import fewer. A captured
        # signal or timeout keeps the repro's child, whose death is the answer it prints.
        code, text, sandbox = _run(Path(tmp), ["--hide-graphdbg", str(shadow), "--script", str(path),
                                               *(["--in-process"] if _runs_here(captured) else [])],
                                   {**_clean_env(shadow), **child_path()}, device, timeout, dump)
    verdict = next((ln.strip() for ln in text.splitlines() if ln.startswith(("REPRODUCED:", "FAILED DIFFERENTLY:", "FIXED:"))), None)
    if verdict is None and died_of(code, text):  # it died of a signal, however this torch ends such a process
        return _died(died_of(code, text), code, captured, "REPRODUCED: ", "FAILED DIFFERENTLY: ", sandbox)
    if verdict is None:
        verdict = _last_error(text) or (f"exit code {code}" if code is not None else text.strip())
    return SelfCheck(code == 1 and verdict.startswith("REPRODUCED:"), verdict, code, sandbox=sandbox)


def _died(name: str | None, code: int | None, captured: str | None, same: str, other: str, sandbox: str | None) -> SelfCheck:
    """A self-check whose file died of signal ``name`` (``judge.fatal_signal.died_of``): the
    captured failure when that was the same signal (``Signal SIGSEGV``)."""
    line = f"Signal {name}"
    hit = str(captured or "").strip() == line
    return SelfCheck(hit, f"{same if hit else other}{line} (exit status {code})", code, sandbox=sandbox)


# the exported test's assertion message: "<outcome.summary()> (the captured failure: ...)"
_SUMMARY = re.compile(r"(?:AssertionError: )?\b(crash|timeout|mismatch)\b(?:(?:: | at )(.*?))? \(the captured failure:")


def check_exported_test(path: str | Path, *, kind: str, captured: str | None, timeout: float | None = 600.0,
                        device: str | None = None) -> SelfCheck:
    """Run a test export-test wrote with pytest in a fresh interpreter, in the sandbox of a
    replay child on ``device``; it must fail, the way captured.

    The same failure: a crash whose signature matches ``captured``, or any mismatch for an
    accuracy dump. A pass, an error while collecting, or another failure is not.
    """

    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="graphdbg-selfcheck-", ignore_cleanup_errors=True) as tmp:
        if not _has_pytest(Path(tmp)):
            return SelfCheck(False, f"not run: pytest is not installed for {sys.executable} (pip install pytest)", None,
                             missing="pytest")
        # The test file alone, in a fresh folder that is pytest's rootdir, conftest boundary and
        # settings: no pytest.ini, conftest.py or package __init__.py beside the test (or above
        # it) is read or imported. Its data (``<stem>_data`` beside it) is linked, not copied.
        # The folder is outside the child's own: readable, never writable there.
        fresh = Path(tmp) / "test"
        fresh.mkdir()
        (fresh / "pytest.ini").write_text("[pytest]\n")
        source = path.read_bytes()
        (fresh / path.name).write_bytes(source)
        data = path.with_name(path.stem + "_data")
        if data.is_dir():
            (fresh / data.name).symlink_to(data, target_is_directory=True)
        # its replay runs in the sandboxed launcher itself, as a repro's backend does (``check_repro``)
        launch = [*(["--replays-here"] if _runs_here(captured) else []),
                  "--module", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider", "-o", "addopts=", "-c", str(fresh / "pytest.ini"), "--rootdir", str(fresh), "--confcutdir", str(fresh),
                  "--import-mode=importlib", str(fresh / path.name)]
        # the modules the test names (its backend, as module:callable), from where this process finds them
        code, text, sandbox = _run(Path(tmp), launch, {**_clean_env(None), **child_path([source.decode("utf-8", "replace")])},
                                   device, timeout)
    if code is None:
        return SelfCheck(False, text, None, sandbox=sandbox)
    if re.search(r"No module named '?pytest'?\s*$", text.strip()):
        return SelfCheck(False, f"not run: pytest is not installed for {sys.executable} (pip install pytest)", code,
                         missing="pytest", sandbox=sandbox)
    if code == 0:
        return SelfCheck(False, "the exported test passes (the failure is not there)", 0, sandbox=sandbox)
    found = _SUMMARY.search(text)
    if not (code == 1 and found) and died_of(code, text):  # the replay ran in the launcher: its death is the crash a child's would be
        return _died(died_of(code, text), code, captured, "crash: ", "crash: ", sandbox)
    if code != 1 or found is None:
        return SelfCheck(False, _last_error(text) or f"pytest exit code {code}", code, sandbox=sandbox)
    status, signature = found.group(1), (found.group(2) or "").strip()
    line = f"{status}: {signature}" if signature else status
    if kind == "accuracy":
        return SelfCheck(status == "mismatch", line, code, sandbox=sandbox)
    return SelfCheck(status == "crash" and same_signature(signature, captured), line, code, sandbox=sandbox)


def _has_pytest(empty: Path) -> bool:
    """Whether the user's interpreter finds pytest, asked before anything of graphdbg loads there
    (which may stop first on another missing package: the question is pytest). It starts in the
    ``empty`` folder: nothing of the folder graphdbg runs in (a ``sitecustomize.py``, shadows) is on
    its path: an isolated interpreter (``-I``: no ``PYTHONPATH``, no user site, so no
    ``sitecustomize.py`` of the user's folders runs) given the import path the sandboxed run gets
    (``child_path``, which leaves out the current folder)."""
    import subprocess  # here: only the exported test's self-check asks

    probe = CHILD_PATH_SETUP + "import importlib.util\nsys.exit(0 if importlib.util.find_spec('pytest') else 3)\n"
    done = subprocess.run([sys.executable, "-I", "-c", probe], env={**_clean_env(None), **child_path()}, cwd=empty,
                          capture_output=True, timeout=120)
    return done.returncode != 3


def _last_error(text: str) -> str | None:
    """The last ``SomeError: message`` line of a traceback, if any."""
    lines = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*(E\s+)?[\w.]+(Error|Exception|Interrupt)\b:?", ln)]
    return re.sub(r"^E\s+", "", lines[-1]) if lines else None
