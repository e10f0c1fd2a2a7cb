"""Make a dump safe to attach to a bug report: no host, user or machine layout in it.

A dump records the host name, the command line, and absolute source paths in every
``# File:`` comment of graph.py and in every traceback. Redacting keeps what ``show`` and
``replay`` need and rewrites the rest:

- source paths under the project root become relative (``fixtures/programs.py:31``);
  installed packages become ``<site-packages>/torch/...``, the standard library
  ``<python>/...``, temp files ``<tmp>/name``, any other absolute path ``<path>/name``;
- ``env`` keeps versions, the device and the settings only: no host name, pid or platform; the
  command line is reduced to the program's name; an environment variable (``env.vars``) whose
  value is a path, a host or an address, or whose name says it holds one, becomes ``<redacted>``;
- the host name and this user's name are removed from every text field.

    >>> redact_dumps("dumps", out="dumps-shared")      # or `graphdbg redact dumps -o dumps-shared`
    [{'path': 'dumps-shared/rank0/g0-compile_error-1a2b3c4d', 'paths': 12, 'removed': ['hostname', 'pid', 'argv']}]

Only comment lines of graph.py change, so the graph, its hash and its inputs stay the same.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.store.manifest import GRAPH, INPUTS, MANIFEST, MAX_GRAPH_BYTES, find_dumps, read_manifest, write_manifest
from graphdbg.store.safe_files import MAX_COPY_BYTES, Folder, check_name, files_under, inside, read_inside

# env keys that say which software and device made the dump, and nothing about who or where
KEPT_ENV = ("graphdbg", "torch", "triton", "python", "platform", "cuda", "driver", "device_name", "cuda_devices", "device",
            "backend_package", "backend_version", "settings", "vars")
# An environment variable that names a place: by its name (..._DIR, MASTER_ADDR, ..._URL) or by
# its value (a path, a URL, host:port, a dotted host name or address).
_PLACE_NAME = re.compile(r"(^|_)(PATH|PATHS|DIR|DIRS|FILE|FILES|HOME|ROOT|HOST|HOSTS|HOSTNAME|ADDR|ADDRESS|URL|URI|ENDPOINT|"
                         r"SOCKET|PREFIX|LOG|LOGS|CACHE|IFNAME|INTERFACE)($|_)", re.I)
_PLACE_VALUE = re.compile(r"[/\\~]|://|^[\w.-]+:\d+$|^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)*([eE][+-]?\d+)?$")


def redacted_vars(env_vars: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the environment variables with those naming a place ``<redacted>``, their names)."""
    out, hidden = {}, []
    for name, value in env_vars.items():
        text = str(value)
        place = text != "<redacted>" and (_PLACE_NAME.search(name) or (_PLACE_VALUE.search(text) and not _NUMBER.match(text)))
        out[name] = "<redacted>" if place and text else value
        if place and text:
            hidden.append(f"vars.{name}")
    return out, hidden
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")

# An absolute POSIX path of two or more parts, not inside a URL or a relative path.
_ABS_PATH = re.compile(r"(?<![\w/.:~-])/(?:[\w.+@~-]+/)+[\w.+@~-]+")
_INSTALLED = re.compile(r"/(?:site|dist)-packages/(.*)$")
_STDLIB = re.compile(r"/lib/python\d+(?:\.\d+)*t?/(.*)$")


@dataclass
class Redactor:
    """Rewrites text: absolute paths by where they point, then the host and user names."""

    root: PurePosixPath | None
    names: list[str] = field(default_factory=list)
    paths: int = 0

    def path(self, text: str) -> str:
        p = PurePosixPath(text)
        if m := _INSTALLED.search(text):
            return f"<site-packages>/{m[1]}"
        if self.root is not None and p.is_relative_to(self.root) and p != self.root:
            return p.relative_to(self.root).as_posix()
        if m := _STDLIB.search(text):
            return f"<python>/{m[1]}"
        if text.startswith(("/tmp/", "/var/folders/", "/private/var/", "/dev/shm/")):
            return f"<tmp>/{p.name}"
        return f"<path>/{p.name}"

    def text(self, text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            self.paths += 1
            return self.path(m.group())

        text = _ABS_PATH.sub(repl, text)
        for name in self.names:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", "<redacted>", text)
        return text

    def value(self, value: Any) -> Any:
        """Every string inside a JSON value rewritten (keys too: node_info may be keyed by path)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        return value


def project_root(paths: list[str], cwd: Path | None = None) -> PurePosixPath | None:
    """The root the user's source paths are relative to.

    The nearest folder above a path that holds a project marker (pyproject.toml, setup.py,
    .git), where the path still exists here; else the working directory if it holds them
    all; else the parent of their common folder (``/home/u/proj/fixtures/a.py`` and
    ``/home/u/proj/model.py`` -> ``/home/u``, keeping ``proj/...``).
    """
    own = [p for p in paths if not _INSTALLED.search(p) and not _STDLIB.search(p)]
    if not own:
        return None
    for p in own:
        for parent in PurePosixPath(p).parents:
            if str(parent) == "/":
                break
            try:
                if any((Path(parent) / marker).exists() for marker in PROJECT_MARKERS):
                    return parent
            except OSError:
                continue
    cwd = PurePosixPath(cwd or Path.cwd())
    if all(PurePosixPath(p).is_relative_to(cwd) for p in own):
        return cwd
    common = PurePosixPath(os.path.commonpath(own))
    if common == PurePosixPath(own[0]):
        common = common.parent
    return common.parent if str(common.parent) != "/" else common


def source_paths(manifest: dict[str, Any], graph_source: str) -> list[str]:
    """Absolute paths named in graph.py's comments and in the manifest's tracebacks."""
    found = []
    for line in graph_source.splitlines():
        if line.lstrip().startswith("#"):
            found += [m.split(":")[0] for m in _ABS_PATH.findall(line)]
    exc = (manifest.get("failure") or {}).get("exception") or {}
    found += re.findall(r'File "(/[^"]+)"', str(exc.get("traceback") or ""))
    return found


def redact_folder(folder: Path, *, root: Path | str | None = None, redactor: Redactor | None = None) -> dict[str, Any]:
    """Redact one dump folder in place (manifest.json and graph.py's comments); returns what changed."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    graph_name = (manifest.get("graph") or {}).get("file") or GRAPH
    graph = read_inside(folder, graph_name, max_bytes=MAX_GRAPH_BYTES, text=True)
    if redactor is None:
        redactor = Redactor(PurePosixPath(root) if root is not None else project_root(source_paths(manifest, graph)),
                            _names(manifest))
    env = manifest.get("env") or {}
    removed = sorted(k for k in env if k not in (*KEPT_ENV, "argv"))
    kept_env = {k: v for k, v in env.items() if k in KEPT_ENV}
    if isinstance(kept_env.get("vars"), dict):
        kept_env["vars"], hidden = redacted_vars(kept_env["vars"])
        removed += hidden
    argv = env.get("argv")
    if isinstance(argv, list) and argv:
        program = PurePosixPath(str(argv[0])).name  # the program, not its arguments or path
        kept_env["argv"] = [program]
        if argv != [program]:
            removed.append("argv")
    redacted = {k: redactor.value(kept_env if k == "env" else v) for k, v in manifest.items()}
    redacted["redacted"] = True
    lines = [redactor.text(line) if line.lstrip().startswith("#") else line for line in graph.splitlines(keepends=True)]
    _replace(folder, graph_name, "".join(lines))
    texts = _redact_other_texts(folder, {graph_name, MANIFEST}, redactor)
    write_manifest(folder, redacted)  # checked against the schema, then written through the gate's writer
    return {"path": str(folder), "paths": redactor.paths, "removed": removed, "texts": texts,
            "root": "<given>" if root is not None else ("<found>" if redactor.root else None)}


def redact_dumps(path: Path | str, *, out: Path | str | None = None, root: Path | str | None = None) -> list[dict[str, Any]]:
    """Redact every dump under ``path``, in place or into a copy under ``out``."""
    path = Path(path)
    dumps = find_dumps(path)
    if not dumps:
        raise DumpError(f"{path}: no graphdbg dump here (printed graphs and other tools' files are not dumps)")
    report = []
    outer: list[Path] = []
    for dump in sorted(dumps, key=lambda d: (len(d.parts), d)):
        if any(dump.is_relative_to(o) for o in outer):
            continue  # a dump inside another (a backward dump's forward/): redacted and copied with it
        outer.append(dump)
        target = dump
        if out is not None:
            target = Path(out) / dump.relative_to(path)
            _copy_dump(dump, target)
        report.append(redact_folder(target, root=root))
    return report


def _copy_dump(src: Path, dst: Path) -> None:
    """The dump's regular files (read once through the gate, never through a link), written by
    the gate's writer into folders it opened itself."""
    if os.path.lexists(dst) and (not dst.is_dir() or dst.is_symlink() or any(dst.iterdir())):
        raise GraphdbgError(f"{dst}: already exists and is not empty")
    for name in (MANIFEST, GRAPH, INPUTS):  # these must be plain files, or nothing is copied
        if os.path.lexists(src / name):
            inside(src, name)
    with Folder.open(dst, create=True) as top:
        for path in files_under(src, "*", limit=10_000):
            name = path.relative_to(src).as_posix()
            top.put(check_name(src, name), read_inside(src, name, max_bytes=MAX_COPY_BYTES), make_folders=True)


def _replace(folder: Path, name: str, text: str) -> None:
    """Write ``name`` (a checked name inside ``folder``) through the gate's writer: a fresh
    O_EXCL|O_NOFOLLOW file renamed over it, so a planted link is replaced, never written through."""
    with Folder.open(folder) as top:
        top.put(check_name(folder, name), text, replace=True)


def _redact_other_texts(folder: Path, done: set[str], redactor: Redactor) -> list[str]:
    """Every other text file of the dump (graph files the manifest names elsewhere, notes,
    fault.txt, logs) rewritten like the graph's comments; links and non-files are left alone."""
    changed = []
    nested = sorted({p.parent for p in files_under(folder, MANIFEST, limit=1000) if p.parent != folder})
    for sub in nested:  # a dump inside this one (a backward dump's forward): redacted as a dump
        redact_folder(sub, redactor=redactor)
        changed.append(sub.relative_to(folder).as_posix() + "/")
    for path in files_under(folder, "*", limit=1000):
        name = path.relative_to(folder).as_posix()
        if any(path.is_relative_to(sub) for sub in nested):
            continue
        if name in done or path.suffix in (".safetensors", ".pt", ".bin", ".pkl", ".zip"):
            continue
        try:
            text = read_inside(folder, name, max_bytes=MAX_GRAPH_BYTES, text=True)
        except DumpError:
            continue  # binary or too large: not text to redact
        new = redactor.text(text)
        if new != text:
            _replace(folder, name, new)
            changed.append(name)
    return changed


def _names(manifest: dict[str, Any]) -> list[str]:
    """Host and user names to remove from text; short or generic ones would hit ordinary words."""
    env = manifest.get("env") or {}
    names = {str(env.get("hostname") or ""), socket_hostname()}
    try:
        names.add(getpass.getuser())
    except Exception:
        pass
    return sorted(n for n in names if len(n) >= 4 and n not in ("root", "user", "runner"))


def socket_hostname() -> str:
    try:
        return socket.gethostname()
    except OSError:
        return ""


__all__ = ["redact_dumps", "redact_folder", "Redactor", "project_root"]
