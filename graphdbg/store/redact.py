"""Make a dump safe to attach to a bug report: nothing in it that identifies a person.

A dump records the host, user and home of the capturing process (``env``, for this purpose:
``store.environment.captured_by``), the command line, environment variables, and absolute source
paths in every ``# File:`` comment of graph.py and in every traceback; a failure message or a
log may hold access tokens. Redacting keeps what ``show`` and ``replay`` need and rewrites the
rest, in every text of the dump (docs/security.md's "Redact" lists each rule):

- secrets: the token shapes of ``TOKEN_SHAPES`` (GitHub, Hugging Face, AWS, Slack, OpenAI, JWT,
  private keys, ...), a URL's ``user:password@``, the value of ``NAME=value`` where NAME says it
  is a secret; each becomes ``<secret>``;
- source paths under the project root become relative (``fixtures/programs.py:31``);
  installed packages become ``<site-packages>/torch/...``, the standard library
  ``<python>/...``, temp files ``<tmp>/name``, a home folder ``<home>``, any other absolute path
  ``<path>/name`` (in ``file://`` URLs too);
- the capturing user and host (and this machine's) become ``<user>`` and ``<host>``, with the
  host's domain; ``name@host`` and the name in a home folder (``/home/NAME``,
  ``C:\\Users\\NAME``) go whoever's they are; URL-encoded text is read decoded;
- ``env`` keeps versions, the device and the settings only: no host, user, home, pid or
  command line beyond the program's name; an environment variable (``env.vars``) whose value is
  a path, a host or an address, or whose name says it holds one or a secret, becomes ``<redacted>``;
- manifest fields the schema does not know are dropped (``known_fields``), the tensor file's
  ``__metadata__`` keeps graphdbg's own key only, and every other file of the dump is redacted
  as text or, where it can't be (binary, too large), removed.

    >>> redact_dumps("dumps", out="dumps-shared")      # or `graphdbg redact dumps -o dumps-shared`
    [{'path': 'dumps-shared/rank0/g0-compile_error-1a2b3c4d', 'paths': 12, 'removed': ['hostname', 'pid', 'argv']}]

Only comment lines of graph.py change (and code lines holding a secret), so the graph, its hash
and its inputs stay the same.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import socket
import stat
import typing
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.store.manifest import (
    GRAPH,
    INPUTS,
    MANIFEST,
    MAX_GRAPH_BYTES,
    check_manifest_bytes,
    find_dumps,
    read_manifest,
    write_manifest,
)
from graphdbg.store.safe_files import MAX_COPY_BYTES, Folder, check_name, files_under, inside, read_inside
from graphdbg.store.tensor_header import rewrite_header

# env keys that say which software and device made the dump, and nothing about who or where
KEPT_ENV = ("graphdbg", "torch", "triton", "python", "platform", "cuda", "driver", "device_name", "cuda_devices", "device",
            "backend_package", "backend_version", "settings", "vars",
            "read")  # the names of the variables the backend read (their values are in vars, redacted as the rest)
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
_FILE_URL = re.compile(r"file://(?:localhost)?(/[^\s\"'<>]*)", re.I)  # file:///home/alice/x: the path after it
_INSTALLED = re.compile(r"/(?:site|dist)-packages/(.*)$")
_STDLIB = re.compile(r"/lib/python\d+(?:\.\d+)*t?/(.*)$")
# A home folder: /home/NAME, /Users/NAME, /export/home/NAME, C:\Users\NAME (one backslash, two in
# JSON or repr text, or a slash); its NAME is a user's, whoever's it is.
_HOME = re.compile(r"(?<![\w.-])(/home/|/Users/|/export/home/|/usr/home/|[A-Za-z]:(?:\\\\|\\|/)(?:Users|Documents and Settings)(?:\\\\|\\|/))"
                   r"(?!<)([^\\/\s\"'<>:;,]+)", re.I)
# user@host (ssh, scp, git remotes, e-mail addresses): both halves name someone; the host starts
# with a letter, so versions (pkg@1.2) and decorators (@torch.compile) stay.
_USER_AT_HOST = re.compile(r"(?<![\w.%+-])[\w.%+-]+@[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*(?![\w-])")
# user:password@ in a URL (https://u:p@host/...): the credentials go, the host stays
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s:@\"'<>]+(?::[^/\s@\"'<>]*)?@")

# The shapes of the common access tokens, from their issuers' published formats: matched in
# every text, wherever they stand. (detect-secrets and similar scanners find the same shapes,
# but also flag any high-entropy string, and a dump is full of them: graph hashes, ids.)
TOKEN_SHAPES: tuple[tuple[str, str], ...] = (
    ("private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"),
    ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255})\b"),
    ("GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("AWS access key id", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}\b"),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("Slack token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}"),
    ("Slack webhook", r"hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    ("OpenAI/Anthropic key", r"\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,}"),
    ("Stripe key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("npm token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("PyPI token", r"\bpypi-[A-Za-z0-9_-]{50,}"),
    ("JSON web token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)


# a word with a %XX escape in it (from the word's start only: each word is read once)
_URL_ENCODED = re.compile(r"(?<![^\s\"'<>])[^\s\"'<>]*%[0-9A-Fa-f]{2}[^\s\"'<>]*")
_TOKENS = re.compile("|".join(f"(?:{shape})" for _, shape in TOKEN_SHAPES))
# Words that say a variable or a field holds a secret. A variable's value (``env.vars``) is
# hidden when one is a part of its name (``TORCH_HF_TOKEN``, ``TRITON_AWS_SECRET_ACCESS_KEY``,
# ``..._API_KEY``); in text, ``NAME=value``, ``NAME: value`` and ``"NAME": "value"`` lose a value
# of 8 or more characters with a letter in it (``max_tokens=4096`` stays).
_SECRET_WORDS = r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|SECRET_?KEY|CREDENTIALS?|AUTH|COOKIE"
_SECRET_VAR = re.compile(rf"(?:^|_)(?:{_SECRET_WORDS}|KEY|PASS|PWD|SIGNATURE)S?(?:$|_)", re.I)
_VC = r"""[^\s"',;&()\[\]{}<>]"""  # a character of a value
# 8 or more characters with a letter, and a digit or 16 of them; not a call, not a dotted name (tokens = model.generate(x))
_VALUE = (rf"(?=(?:{_VC})*[A-Za-z])(?=(?:{_VC})*\d|(?:{_VC}){{16}})(?!(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?!{_VC}))"
          rf"(?:{_VC}){{8,}}(?!{_VC}|\()")
_ASSIGNED_SECRET = re.compile(rf"""((?<![\w.-])[\w.-]*(?:{_SECRET_WORDS})S?\b["']?\s*[:=]\s*["']?(?:Bearer\s+|Basic\s+|token\s+)?)({_VALUE})""", re.I)
_BEARER = re.compile(rf"(\b(?:Bearer|Basic)\s+)({_VALUE})")
SECRET = "<secret>"


def secret_var(name: str) -> bool:
    """Does an environment variable's name say that it holds a secret (a token, key, password)?"""
    return bool(_SECRET_VAR.search(name))


def hide_secrets(text: str, placeholder: str = SECRET, *, assigned: bool = True) -> str:
    """``text`` without the token shapes of ``TOKEN_SHAPES``, a URL's ``user:password@`` and the
    values of ``NAME=value`` where NAME says it is a secret (``assigned=False``: not these, for code)."""
    if not text:
        return text
    text = _TOKENS.sub(placeholder, text)
    text = _URL_CREDENTIALS.sub(placeholder + "@", text)
    if not assigned:  # code: ``tokens = ...`` is a graph's own assignment
        return text
    text = _ASSIGNED_SECRET.sub(lambda m: m[1] + placeholder, text)
    return _BEARER.sub(lambda m: m[1] + placeholder, text)


# Names too common to remove from free text (they stay removed from ``user@host`` and home paths).
# A name that is also a module or a word of the dump's own text (``torch``, ``model``) would
# rewrite graph op names and backends; it stays, and is removed only where its place says it's a name.
_COMMON_NAMES = frozenset({"root", "user", "users", "runner", "admin", "ubuntu", "guest", "test", "tests", "home", "local",
                           "localhost", "none", "null", "nobody", "default", "master", "main", "node", "host", "server",
                           "worker", "python", "torch", "triton", "cuda", "nvidia", "model", "models", "data", "train",
                           "build", "docker", "jenkins", "linux", "graph", "dump", "dumps", "input", "inputs", "output"})


@dataclass
class Redactor:
    """Rewrites text: secrets, then absolute paths by where they point, then the user, host and
    home of the capturing machine (and of this one)."""

    root: PurePosixPath | None
    users: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    homes: list[str] = field(default_factory=list)
    paths: int = 0

    def __post_init__(self) -> None:
        users = sorted({u for u in self.users if _free_text_name(u)}, key=len, reverse=True)
        shorts = sorted({h.split(".")[0] for h in self.hosts if h} | {h for h in self.hosts if h}, key=len, reverse=True)
        shorts = [h for h in shorts if _free_text_name(h)]
        self._hosts = re.compile(rf"(?<![\w-])(?:{'|'.join(map(re.escape, shorts))})(?:\.[A-Za-z0-9-]+)*(?![\w-])", re.I) \
            if shorts else None
        self._users = re.compile(rf"(?<![\w-])(?:{'|'.join(map(re.escape, users))})(?![\w-])", re.I) if users else None
        self._homes = {PurePosixPath(h) for h in self.homes if h and h.startswith("/") and h != "/"}

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
        if p in self._homes or _HOME.fullmatch(text):
            return "<home>"  # its last part is the user's name
        return f"<path>/{p.name}"

    def text(self, text: str) -> str:
        """``text`` rewritten, and each URL-encoded run in it read decoded (``user%40host``,
        ``token%3Dghp_...``), rewritten and encoded again."""
        if not text:
            return text
        if "%" in text:
            text = _URL_ENCODED.sub(self._encoded, text)
        return self._plain(text)

    def _encoded(self, m: re.Match[str]) -> str:
        decoded = urllib.parse.unquote(m.group())
        if decoded == m.group():
            return decoded
        new = self._plain(decoded)
        return m.group() if new == decoded else urllib.parse.quote(new, safe="/:=&?,;~._-")

    def _plain(self, text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            self.paths += 1
            return self.path(m.group())

        text = hide_secrets(text)
        text = _FILE_URL.sub(lambda m: "file://" + repl(m), text)
        text = _ABS_PATH.sub(repl, text)
        text = _HOME.sub(lambda m: m[1] + "<user>", text)
        text = _USER_AT_HOST.sub("<user>@<host>", text)
        if self._hosts is not None:
            text = self._hosts.sub("<host>", text)
        if self._users is not None:
            text = self._users.sub("<user>", text)
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


def _free_text_name(name: str) -> bool:
    """A user or host name long and rare enough to remove wherever it stands in text."""
    return len(name) >= 4 and not name.isdigit() and name.lower() not in _COMMON_NAMES


# The keys graphdbg writes beyond those the schema types, by model (``store.schema`` keeps
# unknown keys, so that a format may add its own): redact keeps these and drops every other key
# the schema does not know, at any depth (a field a hostile or newer tool added is not read by
# this graphdbg, and nothing says what it holds).
OWN_EXTRAS: dict[str, frozenset[str]] = {
    "Manifest": frozenset({"accuracy_checks", "shared"}),
    "Env": frozenset({"platform", "device_name", "pid", "user", "home"}),  # pid, user, home: removed with hostname below
    "Failure": frozenset({"backend"}),
    "Mismatch": frozenset({"name"}),  # judge.mutations' InputMismatch and GradientMismatch
    "Minified": frozenset({"accuracy", "budget_ended", "cache_hits", "failure_rate", "pass_stats", "seconds", "signature",
                           "status", "stopped"}),  # minify.shrinker's MinifyResult.to_dict()
    "MinifyStep": frozenset({"elements_before", "elements_after"}),  # minify.shrink_passes' Step
    "BackendSource": frozenset({"path"}),
    "ValueDesc": frozenset({"value", "repr", "parameter", "leaf", "subclass", "alias_of", "ranks", "group_name", "device_index",
                            "device_type", "priority", "stream_id", "used_by", "storage", "storage_dtype", "storage_nbytes",
                            "sums_to", "dtype_hint", "synthesized"}),
}


def known_fields(manifest: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(``manifest`` with only the keys ``store.schema.Manifest`` types and ``OWN_EXTRAS`` names,
    the dropped keys' paths)."""
    # lazy: pydantic and the schema's models (0.1 s) only where a manifest is redacted
    from graphdbg.store.schema import Manifest

    dropped: list[str] = []
    return _known(Manifest, manifest, "", dropped), dropped


def _known(model: Any, data: Any, where: str, dropped: list[str]) -> Any:
    if not isinstance(data, dict):
        return data
    fields = {(f.alias or name): f.annotation for name, f in model.model_fields.items()}
    extras = OWN_EXTRAS.get(model.__name__, frozenset())
    out = {}
    for key, value in data.items():
        here = f"{where}.{key}" if where else str(key)
        if key in fields:
            out[key] = _known_value(fields[key], value, here, dropped)
        elif key in extras:
            out[key] = value
        else:
            dropped.append(here)
    return out


def _known_value(annotation: Any, value: Any, where: str, dropped: list[str]) -> Any:
    """``value`` of a field typed ``annotation``: a model's keys filtered, in lists and dicts too."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _known_value(args[0], value, where, dropped)
    if origin is typing.Union:
        for arg in args:
            if _holds_model(arg):
                return _known_value(arg, value, where, dropped)
        return value
    if origin is list and isinstance(value, list) and args and _holds_model(args[0]):
        return [_known_value(args[0], v, f"{where}[{i}]", dropped) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict) and len(args) == 2 and _holds_model(args[1]):
        return {k: _known_value(args[1], v, f"{where}.{k}", dropped) for k, v in value.items()}
    if _is_model(annotation):
        return _known(annotation, value, where, dropped)
    return value


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and hasattr(annotation, "model_fields")  # a pydantic model of the schema


def _holds_model(annotation: Any) -> bool:
    return _is_model(annotation) or any(_holds_model(a) for a in typing.get_args(annotation))


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


def redact_folder(folder: Path, *, root: Path | str | None = None, redactor: Redactor | None = None,
                  also: Identity | None = None) -> dict[str, Any]:
    """Redact one dump folder in place: its manifest, graph file, tensor file's header, nested
    dumps and every other file; returns what changed. ``redactor``: the enclosing dump's (its
    root and names, this dump's names added); ``also``: more names to remove (other dumps')."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    graph_name = (manifest.get("graph") or {}).get("file") or GRAPH
    inputs_name = manifest.get("inputs_file") or INPUTS
    graph = read_inside(folder, graph_name, max_bytes=MAX_GRAPH_BYTES, text=True)
    users, hosts, homes = (a | b for a, b in zip(identity(manifest), also or (set(), set(), set())))
    if redactor is None:
        redactor = Redactor(PurePosixPath(root) if root is not None else project_root(source_paths(manifest, graph)),
                            users=sorted(users), hosts=sorted(hosts), homes=sorted(homes))
    else:
        redactor = Redactor(redactor.root, users=sorted(users | set(redactor.users)), hosts=sorted(hosts | set(redactor.hosts)),
                            homes=sorted(homes | set(redactor.homes)))
    manifest, removed = known_fields(manifest)
    removed = [f"unknown:{where}" for where in removed]
    env = manifest.get("env") or {}
    removed += sorted(k for k in env if k not in (*KEPT_ENV, "argv"))
    kept_env = {k: v for k, v in env.items() if k in KEPT_ENV}
    if isinstance(kept_env.get("vars"), dict):
        kept_env["vars"], hidden = _hidden_vars(kept_env["vars"])
        removed += hidden
    argv = env.get("argv")
    if isinstance(argv, list) and argv:
        program = PurePosixPath(str(argv[0])).name  # the program, not its arguments or path
        kept_env["argv"] = [program]
        if argv != [program]:
            removed.append("argv")
    redacted = {k: redactor.value(kept_env if k == "env" else v) for k, v in manifest.items()}
    redacted["redacted"] = True
    check_manifest_bytes(json.dumps(redacted, default=str), f"{folder / MANIFEST} (redacted)")  # before any file changes
    lines = [redactor.text(line) if line.lstrip().startswith("#") else hide_secrets(line, CODE_SECRET, assigned=False)
             for line in graph.splitlines(keepends=True)]
    _replace(folder, graph_name, "".join(lines))
    if os.path.lexists(folder / inputs_name):
        removed += _redact_tensor_header(folder / inputs_name, redactor)
    texts, dropped = _redact_other_files(folder, {graph_name, MANIFEST, inputs_name}, redactor)
    removed += [f"file:{name}" for name in dropped + _remove_unread(folder)]
    write_manifest(folder, redacted)  # checked against the schema, then written through the gate's writer
    return {"path": str(folder), "paths": redactor.paths, "removed": removed, "texts": texts,
            "root": "<given>" if root is not None else ("<found>" if redactor.root else None)}


CODE_SECRET = "redacted_secret"  # a secret's place in graph code: a name and string text alike, so the graph still parses


def _hidden_vars(env_vars: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The environment variables with those naming a place or holding a secret ``<redacted>``, their names."""
    out, hidden = redacted_vars(env_vars)
    for name, value in out.items():
        if secret_var(str(name)) and value not in ("", "<redacted>"):
            out[name] = "<redacted>"
            hidden.append(f"vars.{name}")
    return out, hidden


def _redact_tensor_header(path: Path, redactor: Redactor) -> list[str]:
    """The tensor file's header: ``__metadata__`` keeps graphdbg's own key (the dump's id, redacted)
    and nothing else; tensor names are redacted as the manifest's ``stored`` names are."""
    removed: list[str] = []

    def change(header: dict[str, Any]) -> dict[str, Any]:
        meta = header.pop("__metadata__", None) or {}
        removed.extend(f"tensor_metadata:{k}" for k in meta if k not in TENSOR_METADATA)
        renamed = {redactor.text(k): v for k, v in header.items()}
        if len(renamed) != len(header):
            raise DumpError(f"{path}: two tensor names are the same once redacted; not redacted")
        kept = {k: redactor.text(v) for k, v in meta.items() if k in TENSOR_METADATA}
        return {**({"__metadata__": kept} if kept else {}), **renamed}

    rewrite_header(path, change)
    return removed


TENSOR_METADATA = ("graphdbg.dump",)  # the __metadata__ keys graphdbg writes (store/write.py, share)
# Files no text pass can read: what they hold can't be checked, so they are not kept.
_BINARY_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".npy", ".npz", ".zip", ".gz", ".tgz", ".bz2", ".xz", ".zst",
                    ".tar", ".7z", ".so", ".o", ".a", ".db", ".sqlite", ".safetensors", ".ckpt", ".h5", ".onnx", ".png", ".jpg")
MAX_FILES = 10_000  # files of one dump folder redact copies and rewrites


def redact_dumps(path: Path | str, *, out: Path | str | None = None, root: Path | str | None = None) -> list[dict[str, Any]]:
    """Redact every dump under ``path``, in place or into a copy under ``out``."""
    path = Path(path)
    dumps = find_dumps(path)
    if not dumps:
        raise DumpError(f"{path}: no graphdbg dump here (printed graphs and other tools' files are not dumps)")
    report = []
    outer: list[Path] = []
    everyone = _everyone(dumps)  # a log of one rank may name another rank's host
    for dump in sorted(dumps, key=lambda d: (len(d.parts), d)):
        if any(dump.is_relative_to(o) for o in outer):
            continue  # a dump inside another (a backward dump's forward/): redacted and copied with it
        outer.append(dump)
        target = dump
        if out is not None:
            target = Path(out) / dump.relative_to(path)
            _copy_dump(dump, target)
        report.append(redact_folder(target, root=root, also=everyone))
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
        for path in _all_files(src):
            name = path.relative_to(src).as_posix()
            top.put(check_name(src, name), read_inside(src, name, max_bytes=MAX_COPY_BYTES), make_folders=True)


def _all_files(folder: Path) -> list[Path]:
    found = files_under(folder, "*", limit=MAX_FILES + 1)
    if len(found) > MAX_FILES:
        raise DumpError(f"{folder}: more than {MAX_FILES} files in one dump folder; not redacted")
    return found


def _replace(folder: Path, name: str, text: str | bytes) -> None:
    """Write ``name`` (a checked name inside ``folder``) through the gate's writer: a fresh
    O_EXCL|O_NOFOLLOW file renamed over it, so a planted link is replaced, never written through."""
    with Folder.open(folder) as top:
        top.put(check_name(folder, name), text, replace=True)


def _redact_other_files(folder: Path, done: set[str], redactor: Redactor) -> tuple[list[str], list[str]]:
    """Every other file of the dump (notes, fault.txt, run logs, graph files the manifest names
    elsewhere) rewritten like the graph's comments; (the files changed, the files removed).
    A file that is not text (a NUL byte, a binary kind by its suffix), is larger than a graph
    may be, or whose name names someone, is removed: what it holds can't be redacted. Links
    and non-files are left alone (``-o`` copies none)."""
    changed, removed = [], []
    nested = sorted({p.parent for p in files_under(folder, MANIFEST, limit=1000) if p.parent != folder})
    for sub in nested:  # a dump inside this one (a backward dump's forward): redacted as a dump
        redactor.paths += redact_folder(sub, redactor=redactor)["paths"]
        changed.append(sub.relative_to(folder).as_posix() + "/")
    for path in _all_files(folder):
        name = path.relative_to(folder).as_posix()
        if name in done or any(path.is_relative_to(sub) for sub in nested):
            continue
        data = None
        if path.suffix.lower() not in _BINARY_SUFFIXES and hide_secrets(name) == name and redactor.text(name) == name:
            try:
                data = bytes(read_inside(folder, name, max_bytes=MAX_GRAPH_BYTES))
            except DumpError:
                data = None  # larger than a graph may be
        if data is None or b"\0" in data:
            with Folder.open(path.parent) as there:
                there.remove(path.name)
            removed.append(name)
            continue
        text = data.decode("utf-8", "surrogateescape")  # any bytes, and back unchanged where nothing is redacted
        new = redactor.text(text)
        if new != text:
            _replace(folder, name, new.encode("utf-8", "surrogateescape"))
            changed.append(name)
    return changed, removed


def _remove_unread(folder: Path) -> list[str]:
    """Remove what no pass read: hidden folders, links and other non-files (``redact -o`` copies
    none of them; in place, a link would lead an archiver to a file outside the dump)."""
    gone = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        for name in list(dirnames):
            path, link = here / name, (here / name).is_symlink()
            if link or name.startswith("."):
                dirnames.remove(name)
                if link:
                    path.unlink()
                else:
                    shutil.rmtree(path)  # never follows a link inside (``shutil.rmtree.avoids_symlink_attacks``)
                gone.append(path.relative_to(folder).as_posix() + ("" if link else "/"))
        for name in filenames:
            path = here / name
            if not stat.S_ISREG(path.lstat().st_mode):
                path.unlink()
                gone.append(path.relative_to(folder).as_posix())
    return gone


Identity = tuple[set[str], set[str], set[str]]  # user names, host names, home folders


def _everyone(dumps: list[Path]) -> Identity:
    """The names every dump under a folder recorded."""
    users: set[str] = set()
    hosts: set[str] = set()
    homes: set[str] = set()
    for dump in dumps:
        u, h, m = identity(read_manifest(dump))
        users, hosts, homes = users | u, hosts | h, homes | m
    return users, hosts, homes


def identity(manifest: dict[str, Any]) -> Identity:
    """(user names, host names, home folders) to remove: those the capture recorded
    (``store.environment.captured_by``) and this machine's own."""
    env = manifest.get("env") if isinstance(manifest.get("env"), dict) else {}
    users = {str(env.get("user") or "")}
    hosts = {str(env.get("hostname") or ""), socket_hostname()}
    homes = {str(env.get("home") or "")}
    try:
        users.add(getpass.getuser())
    except Exception:
        pass
    try:
        homes.add(str(Path.home()))
    except Exception:
        pass
    users |= {PurePosixPath(h).name for h in homes if h.startswith("/") and h.count("/") >= 2}
    return {u for u in users if u}, {h for h in hosts if h}, {h for h in homes if h}


def socket_hostname() -> str:
    try:
        return socket.gethostname()
    except OSError:
        return ""


__all__ = ["redact_dumps", "redact_folder", "Redactor", "project_root", "known_fields", "hide_secrets", "secret_var",
           "TOKEN_SHAPES", "OWN_EXTRAS"]
