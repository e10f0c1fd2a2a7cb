"""The log of the run that printed the graphs: its failures, per rank, as signatures.

A serving engine under tensor parallelism prints one traceback per rank, often twice (the
backend's error, then the engine's wrapper around it), and often interleaved line by line.
``read_log`` streams the log once, with bounded memory, and returns each distinct failure
with its ranks, its backend and the signature a captured dump of it would have. Nothing in
the log is executed; lines are cut at ``MAX_LINE`` bytes and a log over ``MAX_SCAN`` bytes is
read from its tail, where the failures are.

    >>> log = read_log("corpus/Qwen/Qwen3-Next-80B-A3B-Instruct/log.txt")
    >>> f = log.failures[0]
    >>> f.signature, f.backend, f.ranks, f.rank_source
    ("NotImplementedError: argument of type: <class 'torch.cuda.streams.Stream'>",
     'thunder.dynamo.compiler:ThunderCompiler', [0, 1, 2, 3, 4, 5, 6, 7], 'instances')

``attach_log(log, dumps)`` then gives the printed graphs beside the log the failure they
belong to, and says how it knows: the log names the file, or (inferred) the last graph file
it names before the failure, the graph holding what the error names (a Stream), or the
rank's last graph.

A log is not a graph: nothing here registers a reader. The module imports no torch.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from graphdbg.errors import GraphdbgError
from graphdbg.judge.signature import signature
from graphdbg.store.safe_files import open_stream

__all__ = ["RunLog", "LogFailure", "read_log", "find_logs", "attach_log", "MAX_LINE", "MAX_SCAN"]

MAX_LINE = 16 << 10  # bytes of one line kept; the rest of a giant line is skipped
MAX_SCAN = 256 << 20  # a longer log is read from its tail
MAX_FAILURES = 256  # distinct failures kept per log
MAX_OPEN = 256  # tracebacks open at once (interleaved ranks); the oldest is dropped past it
MAX_TEXT = 2000  # characters of an exception's own lines kept for show
MAX_RANK = 1 << 16  # a larger number in a rank prefix is not a rank
LOG_NAMES = ("log.txt",)
LOG_SUFFIXES = (".log",)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PLAIN_NAME = re.compile(r"[\w.]+")  # a graph name of word characters and dots, and a run of them in a line
# A leading [..] or (..) group of a log line: torch's [rank3]:, torchrun's [default3]:, SGLang's
# [2025-10-21 19:07:30 TP3], vLLM's (VllmWorker rank=3 pid=12) or (Worker_TP3 pid=12), mpirun's
# [1,3]<stderr>:. Groups without a rank (timestamps, [Gloo], [W1021 ...]) are stripped as well.
_GROUP = re.compile(r"(?:\[(?P<sq>[^\]\n]{0,200})\]|\((?P<par>[^)\n]{0,200})\))(?P<tag><std(?:out|err)>)?:?")
_RANK_IN_GROUP = re.compile(r"(?:\brank\s*[=:]?\s*|\bRANK\s*[=:]?\s*|(?:^|(?<=[\s_(\[-]))TP[_-]?|\bdefault)(\d{1,9})\b", re.I)
_MPI_GROUP = re.compile(r"^\d{1,9},(\d{1,9})$")
_BARE_RANK = re.compile(r"^rank(?:\s?(\d{1,9})\s*[:|]|\s*=\s*(\d{1,9})\b:?)\s?", re.I)  # "rank3: ...", "rank=3 ..."
_PROCESS_HEADER = re.compile(r"^Process (\w*Process-(\d{1,9})(?::\d+)*):$")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
_FRAME = re.compile(r'^\s+File "([^"]*)", line \d+, in (\S+)')
_EXCEPTION = re.compile(r"^(?P<qual>(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*))(?::\s?(?P<msg>.*))?$")
_EXC_NAME = re.compile(r"(?:Error|Exception|Failed|Failure|Exit|Interrupt|Iteration|Unsupported|Timeout|Fault)$")
_RAISED = re.compile(r"""(?:^|\s)backend=(?P<q>['"]?)(?P<backend>.+?)(?P=q)\s+raised:\s*(?P<rest>.*)$""")
_RAISED_OLD = re.compile(r"^(?P<backend>[\w.<>]+) raised (?P<type>[A-Z]\w*): (?P<msg>.*)$")
_OBJECT_REPR = re.compile(r"^<(?P<dotted>[\w.]+) object at (?P<addr>0x[0-9a-fA-F]+)>$")
_FUNCTION_REPR = re.compile(r"^<function (?P<name>[\w.<>]+) at (?P<addr>0x[0-9a-fA-F]+)>$")
_RANK_FILE = re.compile(r"(?<![a-z])rank[_-]?(\d{1,9})", re.I)
# Frames that say the failing code was compiling a graph, or running a compiled one.
_COMPILE_FRAMES = re.compile(r"_call_user_compiler|compile_fx|standalone_compile|aot_autograd|/_dynamo/backends/"
                             r"|thunder/dynamo/(?:compiler|splitter)|/compilation/|_inductor/__init__")
_RUNTIME_FRAMES = re.compile(r"_inductor/output_code|torchinductor_|<eval_with_key>|runtime_wrappers|__compiled_fn")
# Names an error message may share with the graph it came from: dotted names, snake_case, CamelCase.
_CODE_TOKEN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z]\w*_\w+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")


@dataclass
class LogFailure:
    """One distinct failure of the run: every rank and every repeat of it collapse here."""

    type: str
    qualified_type: str
    message: str
    signature: str
    backend: str | None
    kind: str  # compile_error | runtime_error | error (outside compilation: not a graph's)
    first_line: int
    text: str  # the exception's own lines as the log has them, cut at MAX_TEXT
    occurrences: int = 0
    ranks: list[int] | None = None  # None: the log doesn't say
    rank_source: str = "unknown"  # prefix | file_name | process | instances | unknown
    rank_how: str = ""
    names: list[str] = field(default_factory=list)  # graph files named inside its tracebacks
    named_before: dict[int | None, tuple[str, int]] = field(default_factory=dict)  # rank -> (file, line)
    _prefix_ranks: set[int] = field(default_factory=set, repr=False)
    _process_names: set[int] = field(default_factory=set, repr=False)
    _instances: set[str] = field(default_factory=set, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "qualified_type": self.qualified_type, "message": self.message,
                "signature": self.signature, "backend": self.backend, "kind": self.kind,
                "ranks": self.ranks, "rank_source": self.rank_source, "rank_how": self.rank_how,
                "occurrences": self.occurrences, "first_line": self.first_line}


@dataclass
class RunLog:
    """What a run's log says went wrong: distinct failures, and the ranks the log shows."""

    path: Path
    ranks: list[int] = field(default_factory=list)
    failures: list[LogFailure] = field(default_factory=list)
    lines: int = 0
    truncated: bool = False  # only the tail was read
    attachments: list[dict[str, Any]] = field(default_factory=list)  # filled by attach_log

    def failures_by_rank(self) -> dict[int | None, list[LogFailure]]:
        """Each rank's distinct failures in log order; None holds those of unknown rank."""
        out: dict[int | None, list[LogFailure]] = {}
        for f in self.failures:
            for r in (f.ranks if f.ranks is not None else [None]):
                out.setdefault(r, []).append(f)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "ranks": self.ranks, "lines": self.lines, "truncated": self.truncated,
                "failures": [f.to_json() for f in self.failures], "attached": self.attachments}

    def to_cache(self) -> dict[str, Any]:
        """Everything ``from_cache`` needs to give back this log as ``read_log`` made it (before
        ``attach_log``): what ``ls``'s cache keeps of a log, so a second listing doesn't scan it."""
        return {"ranks": self.ranks, "lines": self.lines, "truncated": self.truncated,
                "failures": [{**{k: getattr(f, k) for k in _CACHED_FIELDS},
                              "named_before": [[rank, *where] for rank, where in f.named_before.items()]}
                             for f in self.failures]}

    @classmethod
    def from_cache(cls, path: Path, data: dict[str, Any]) -> RunLog:
        """The log ``to_cache`` kept, as read from ``path``; KeyError/TypeError/ValueError if ``data`` isn't one."""
        failures = [LogFailure(**{k: d[k] for k in _CACHED_FIELDS},
                               named_before={rank: (str(file), int(line)) for rank, file, line in d["named_before"]})
                    for d in data["failures"]]
        return cls(Path(path), ranks=list(data["ranks"]), failures=failures, lines=int(data["lines"]),
                   truncated=bool(data["truncated"]))


# A failure's fields a cached log keeps (the scanner's own sets are only used until it finishes).
_CACHED_FIELDS = ("type", "qualified_type", "message", "signature", "backend", "kind", "first_line", "text",
                  "occurrences", "ranks", "rank_source", "rank_how", "names")


def find_logs(folder: Path) -> list[Path]:
    """The run logs in ``folder``: ``log.txt`` and ``*.log``, and the per-rank files torchrun's
    ``--log-dir`` writes below it (``RUN/attempt_K/LOCAL_RANK/stderr.log``; the last attempt
    of each run, at most three folders down)."""
    try:
        with os.scandir(folder) as it:  # a listing's every folder: no stat per entry (d_type says)
            entries = list(it)
    except OSError:
        return []
    found = sorted(Path(e.path) for e in entries if _log_name(e.name)
                   and e.is_file(follow_symlinks=False))  # a Path for the logs only: a folder holds thousands of graphs
    attempts: dict[Path, list[Path]] = {}
    subfolders = any(e.is_dir() for e in entries)
    for pattern in _TORCHRUN_LOGS if subfolders else ():
        try:
            for log in folder.glob(pattern):
                if log.is_file() and not log.is_symlink() and torchrun_rank(log) is not None:
                    attempts.setdefault(log.parent.parent.parent, []).append(log)
        except OSError:
            continue
    for logs in attempts.values():
        last = max(int(p.parent.parent.name.partition("_")[2]) for p in logs)
        found += sorted(p for p in logs if int(p.parent.parent.name.partition("_")[2]) == last)
    return found


def _log_name(name: str) -> bool:
    """``name in LOG_NAMES or Path(name).suffix in LOG_SUFFIXES``, without making a Path."""
    return name in LOG_NAMES or (name.endswith(LOG_SUFFIXES) and name.rfind(".") > 0)


_TORCHRUN_LOGS = ("attempt_*/*/*.log", "*/attempt_*/*/*.log", "*/*/attempt_*/*/*.log")
_ATTEMPT = re.compile(r"attempt_\d{1,6}")


def torchrun_rank(path: Path) -> int | None:
    """The local rank of a file torchrun wrote under ``--log-dir`` (``attempt_0/3/stderr.log``)."""
    if path.parent.name.isdigit() and len(path.parent.name) < 7 and _ATTEMPT.fullmatch(path.parent.parent.name):
        return int(path.parent.name)
    return None


def read_log(path: str | Path, graph_names: Iterable[str] = ()) -> RunLog:
    """Read a run's log; GraphdbgError (exit 2) if it can't be read or is binary.

    ``graph_names`` are file names (and stems) of printed graphs the log may mention; where
    it does, failures remember it.
    """
    path = Path(path)
    try:
        f = open_stream(path)
        size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise GraphdbgError(f"{path}: cannot read the log ({e.strerror or type(e).__name__})") from None
    with f:
        head = f.read(8192)
        if _binary(head):
            raise GraphdbgError(f"{path}: not a text log (binary data)")
        f.seek(0)
        truncated = size > MAX_SCAN
        if truncated:  # failures are at the end; line numbers then count from where reading began
            f.seek(size - MAX_SCAN)
            _skip_rest_of_line(f)
        scan = _Scanner(path, graph_names)
        for lineno, text in log_lines(f):
            scan.line(lineno, text)
        log = scan.finish()
    log.truncated = truncated
    return log


def file_rank(path: Path) -> int | None:
    """The rank a log's name or place gives its unprefixed lines: ``rank3.log``, or torchrun's
    ``attempt_0/3/stderr.log``."""
    m = _RANK_FILE.search(path.name)
    return int(m.group(1)) if m else torchrun_rank(path)


def _binary(head: bytes) -> bool:
    if not head:
        return False
    if head.count(b"\x00") > len(head) // 200:
        return True
    control = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return control > len(head) // 20


def _skip_rest_of_line(f) -> None:
    while True:
        rest = f.readline(1 << 20)
        if not rest or rest.endswith(b"\n"):
            return


def log_lines(f, max_line: int = MAX_LINE) -> Iterator[tuple[int, str]]:
    """(line number, text) of a log opened in binary: lines cut at ``max_line`` bytes (the rest
    skipped), undecodable bytes replaced, what a progress bar's ``\\r`` left standing, no
    terminal escapes."""
    lineno = 0
    while True:
        raw = f.readline(max_line)
        if not raw:
            return
        lineno += 1
        if len(raw) == max_line and not raw.endswith(b"\n"):
            _skip_rest_of_line(f)
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if "\r" in text:  # progress bars redraw with \r: what stands last is what was seen
            text = text.rsplit("\r", 1)[-1]
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        yield lineno, text


def split_prefix(text: str) -> tuple[int | None, str]:
    """A log line's rank (from its prefix, if any) and the line without its prefix.

        >>> split_prefix("[rank3]:  File \\"x.py\\", line 1, in f")
        (3, ' File "x.py", line 1, in f')
        >>> split_prefix("[2025-10-21 19:07:30 TP5] Load weight begin.")
        (5, 'Load weight begin.')
    """
    if text[:1] not in ("[", "(", "r", "R"):
        return None, text  # no prefix starts otherwise (most lines: tracebacks, messages)
    rank: int | None = None
    body = text
    for _ in range(4):
        m = _GROUP.match(body)
        if m is None:
            break
        inner = m.group("sq") if m.group("sq") is not None else m.group("par")
        if m.group("par") is not None and not re.search(r"pid=|rank|TP\d|Worker", inner, re.I):
            break  # a parenthesised remark, not a prefix
        if rank is None:
            if (mpi := _MPI_GROUP.match(inner)) and m.group("tag"):
                rank = int(mpi.group(1))
            elif (r := _RANK_IN_GROUP.search(inner)) is not None:
                rank = int(r.group(1))
        body = body[m.end():]
        body = body[1:] if body.startswith(" ") else body
    if rank is None and (m := _BARE_RANK.match(body)):
        rank, body = int(m.group(1) or m.group(2)), body[m.end():]
    return rank, body


@dataclass
class _Traceback:
    owner: int | None  # rank from the prefix
    process: int | None  # number of the Process-N header right above it
    line: int
    compile: bool = False
    runtime: bool = False
    names: set[str] = field(default_factory=set)
    named_before: tuple[str, int] | None = None


def _name_heads(names: set[str]) -> re.Pattern[str]:
    """A pattern of the names' first characters, as many of them as keep the kinds of heads few
    (``rank0_``, ``rank1_``, ``graph_module_1``: not ``rank``, which every "peer ranks" holds)."""
    heads = {""}
    for k in range(min(map(len, names), default=0), 0, -1):
        if len(heads := {n[:k] for n in names}) <= 16:
            break
    return re.compile("|".join(map(re.escape, sorted(heads))))


class _Scanner:
    """One pass over the lines: tracebacks open and close, exception lines become occurrences."""

    def __init__(self, path: Path, graph_names: Iterable[str]):
        self.path = path
        self.file_rank = file_rank(path)
        self.ranks: set[int] = set()
        self.processes: set[int] = set()
        self.open: deque[_Traceback] = deque()
        self.pending_headers: list[tuple[int, int]] = []  # (process number, line)
        self.last_line_with_text = 0
        self.expect_inner: dict[int | None, tuple[int, dict[str, Any]]] = {}  # rank -> (line, occurrence)
        self.failures: dict[tuple, LogFailure] = {}
        self.last_named: dict[int | None, tuple[str, int]] = {}
        self.names = {n for n in graph_names if n}
        self.heads = _name_heads(self.names)  # most lines hold no name: one that holds none of their heads is not looked into
        self.names_re = None if all(map(_PLAIN_NAME.fullmatch, self.names)) else re.compile(
            r"(?<![\w.])(" + "|".join(map(re.escape, sorted(self.names, key=len, reverse=True))) + r")(?![\w])")
        self.lineno = 0
        self.last_by_rank: dict[int | None, int] = {}
        self.last_closed: _Traceback | None = None
        self.chained: tuple[int, _Traceback | None] | None = None  # (line, traceback it continues)

    def line(self, lineno: int, text: str) -> None:
        self.lineno = lineno
        rank, body = split_prefix(text)
        if rank is not None and rank >= MAX_RANK:
            rank = None  # not a rank: a hostile or garbled prefix must not grow the tables
        if rank is None:
            rank = self.file_rank
        else:
            self.ranks.add(rank)
        stripped = body.strip()
        if not stripped:
            return
        pending = self.expect_inner.pop(rank, None)
        if pending is not None:
            occ = pending[1]
            inner = pending[0] == self.last_by_rank.get(rank) and self._inner(occ, body)
            self._record(occ)
            if inner:
                self._note_line(lineno, rank)
                return
        if self.names and len(body) < 4096:
            tb = self._current(rank)
            for name in self._names_in(body):
                self.last_named[rank] = (name, lineno)
                if tb is not None and len(tb.names) < 16:
                    tb.names.add(name)
        if (h := _PROCESS_HEADER.match(stripped)) is not None:
            number = int(h.group(2))
            if len(self.processes) < MAX_RANK:
                self.processes.add(number)
            self.pending_headers = [*self.pending_headers[-15:], (number, lineno)]
        elif stripped.endswith(_TRACEBACK):
            self._open(rank, lineno)
        elif stripped in _CHAINED:
            # the next traceback is the same process's: it inherits the closed one's rank
            self.chained = (lineno, self.last_closed)
        elif (fr := _FRAME.match(body)) is not None:
            tb = self._current(rank)
            if tb is not None:
                where = f"{fr.group(1)} {fr.group(2)}"
                tb.compile = tb.compile or bool(_COMPILE_FRAMES.search(where))
                tb.runtime = tb.runtime or bool(_RUNTIME_FRAMES.search(where))
        elif (m := _EXCEPTION.match(body)) is not None and _EXC_NAME.search(m.group("name")):
            self._exception(rank, lineno, m)
        self._note_line(lineno, rank)

    # Bookkeeping -------------------------------------------------------------------
    def _note_line(self, lineno: int, rank: int | None) -> None:
        self.last_line_with_text = lineno
        self.last_by_rank[rank] = lineno

    def _open(self, rank: int | None, lineno: int) -> None:
        process = None
        # A "Process Process-N:" header right above its own traceback names the process; a run of
        # headers followed by interleaved tracebacks names none of them.
        if len(self.pending_headers) == 1 and self.pending_headers[0][1] == self.last_line_with_text and rank is None:
            process = self.pending_headers[0][0]
        elif rank is None and self.chained is not None and self.chained[0] == self.last_line_with_text and self.chained[1]:
            rank, process = self.chained[1].owner, self.chained[1].process
        self.pending_headers = []
        self.chained = None
        tb = _Traceback(rank, process, lineno, named_before=self.last_named.get(rank) or self.last_named.get(None))
        self.open.append(tb)
        if len(self.open) > MAX_OPEN:
            self.open.popleft()

    def _names_in(self, text: str) -> list[str]:
        """The graph names ``text`` names, each longest first, not inside a longer word or dotted
        name (``rank0_0.py``, ``rank0_0`` of ``rank0_0.pyc``); for names of word characters and dots
        alone, from the text's runs of them (no regex of every name to compile per log, a third faster)."""
        if self.heads.search(text) is None:
            return []
        if self.names_re is not None:
            return self.names_re.findall(text)
        out = []
        for run in _PLAIN_NAME.findall(text):
            k = len(run)
            while k > 0 and run[:k] not in self.names:
                k = run.rfind(".", 0, k)
            if k > 0:
                out.append(run[:k])
        return out

    def _current(self, rank: int | None) -> _Traceback | None:
        for tb in reversed(self.open):
            if tb.owner == rank:
                return tb
        return self.open[-1] if self.open and rank is None else None

    def _close(self, rank: int | None) -> _Traceback | None:
        tb = self._current(rank)
        if tb is not None:
            self.open.remove(tb)
            self.last_closed = tb
        return tb

    # Exceptions ---------------------------------------------------------------------
    def _exception(self, rank: int | None, lineno: int, m: re.Match[str]) -> None:
        tb = self._close(rank)
        if tb is None:
            return  # an error-like line outside any traceback: a log message, not a failure
        # a logger may prefix only a traceback's first line: the rest is that rank's
        owner = rank if rank is not None else tb.owner
        occ = {"qual": m.group("qual"), "type": m.group("name"), "msg": (m.group("msg") or "")[:1000],
               "backend": None, "instance": None, "text": m.group(0)[:MAX_TEXT], "tb": tb, "rank": owner, "line": lineno}
        raised = _RAISED.search(occ["msg"])
        if raised is not None:
            self._backend(occ, raised.group("backend"))
            rest = raised.group("rest")
            if not rest or not self._inner(occ, rest):
                occ["msg"] = rest
                # the wrapped exception is on the next line: record once it has been seen (or not)
                self.expect_inner[rank] = (lineno, occ)
                return
        elif (old := _RAISED_OLD.match(occ["msg"])) is not None:
            self._backend(occ, old.group("backend"))
            occ["type"] = occ["qual"] = old.group("type")
            occ["msg"] = old.group("msg")
        self._record(occ)

    @staticmethod
    def _inner(occ: dict[str, Any], body: str) -> bool:
        """The exception a ``backend=... raised:`` line wraps, on the line after it."""
        m = _EXCEPTION.match(body)
        if m is None or not _EXC_NAME.search(m.group("name")):
            return False
        occ["qual"], occ["type"], occ["msg"] = m.group("qual"), m.group("name"), (m.group("msg") or "")[:1000]
        occ["text"] = (occ["text"] + "\n" + m.group(0))[:MAX_TEXT]
        return True

    @staticmethod
    def _backend(occ: dict[str, Any], text: str) -> None:
        """``<thunder.dynamo.compiler.ThunderCompiler object at 0x7f..>`` -> module:qualname, and its
        address: one backend object per process, so distinct addresses count processes."""
        if (m := _OBJECT_REPR.match(text)) is not None:
            module, _, cls = m.group("dotted").rpartition(".")
            occ["backend"] = f"{module}:{cls}" if module else cls
            occ["instance"] = m.group("addr")
        elif (m := _FUNCTION_REPR.match(text)) is not None:
            occ["backend"] = m.group("name")
            occ["instance"] = m.group("addr")
        else:
            occ["backend"] = text[:200]

    def _record(self, occ: dict[str, Any]) -> None:
        kind = _kind(occ)
        key = (signature(occ["type"], occ["msg"]), occ["backend"], kind)
        f = self.failures.get(key)
        if f is None:
            if len(self.failures) >= MAX_FAILURES:
                return
            f = self.failures[key] = LogFailure(type=occ["type"], qualified_type=occ["qual"], message=occ["msg"],
                                                signature=key[0], backend=occ["backend"], kind=kind,
                                                first_line=occ["line"], text=occ["text"])
        f.occurrences += 1
        tb: _Traceback = occ["tb"]
        if occ["rank"] is not None:
            f._prefix_ranks.add(occ["rank"])
        elif tb.process is not None:
            f._process_names.add(tb.process)
        if occ["instance"]:
            f._instances.add(occ["instance"])
        for name in sorted(tb.names):
            if name not in f.names and len(f.names) < 16:
                f.names.append(name)
        if tb.named_before is not None:
            f.named_before.setdefault(occ["rank"], tb.named_before)

    # The end ------------------------------------------------------------------------
    def finish(self) -> RunLog:
        for _, occ in self.expect_inner.values():
            self._record(occ)
        self.expect_inner.clear()
        order = sorted(self.processes)
        process_rank = {n: i for i, n in enumerate(order)}
        world = set(self.ranks) | set(process_rank.values())
        failures = sorted(self.failures.values(), key=lambda f: f.first_line)
        for f in failures:
            ranks = set(f._prefix_ranks)
            sources = []
            if f._prefix_ranks:
                by_file = self.file_rank is not None and f._prefix_ranks == {self.file_rank} and not self.ranks
                sources.append("file_name" if by_file else "prefix")
            if f._process_names:
                ranks |= {process_rank[n] for n in f._process_names}
                sources.append("process")
                f.rank_how = (f"the tracebacks follow 'Process Process-N:' headers; Process-N is taken as the "
                              f"N-th of the log's {len(order)} worker processes")
            if not ranks:
                if len(f._instances) > 1 and len(f._instances) == len(world):
                    ranks = world
                    sources.append("instances")
                    f.rank_how = (f"the log interleaves its processes' tracebacks without rank prefixes; "
                                  f"{len(f._instances)} distinct backend objects failed this way and the log "
                                  f"shows {len(world)} ranks")
                elif not world:
                    f.rank_how = "the log names no ranks"
                else:
                    f.rank_how = f"the log has no rank prefix on this failure ({f.occurrences} traceback{'s' if f.occurrences != 1 else ''})"
            f.ranks = sorted(ranks) if ranks else None
            f.rank_source = "+".join(sources) if sources else "unknown"
        log = RunLog(self.path, ranks=sorted(world), failures=failures, lines=self.lineno)
        return log


def _kind(occ: dict[str, Any]) -> str:
    tb: _Traceback = occ["tb"]
    if occ["backend"] is not None or occ["type"] == "BackendCompilerFailed" or tb.compile:
        return "compile_error"
    if tb.runtime or tb.names:  # a traceback through a graph file ran that graph
        return "runtime_error"
    return "error"


# Attaching failures to graph files ------------------------------------------------------

def attach_log(log: RunLog, dumps: list[Any]) -> list[dict[str, Any]]:
    """Give each graph file that has no recorded failure the log failure it belongs to.

    Each failure from compiling or running a graph is attached, on each of its ranks, to one
    file, by the first of these that picks a file on any rank:

    1. ``named``: the failure's traceback names the file;
    2. ``named_before`` (inferred): the last graph file the log names before the failure;
    3. ``construct`` (inferred): the graph that holds what the error message names
       (``torch.cuda.streams.Stream``) where the other graphs don't;
    4. ``last_graph`` (inferred): the rank's last graph (highest graph number), or its only one.

    The dump's manifest ``failure`` is replaced (in memory) by the log's: kind, exception,
    signature, backend, and ``log`` (path, line, ranks, whether and how it was inferred).
    Returns one record per attachment (also kept in ``log.attachments``).
    """
    candidates = [d for d in dumps if not d.signature]
    taken: set[int] = set()
    records: list[dict[str, Any]] = []
    for f in log.failures:
        if f.kind == "error":
            continue  # not from compiling or running a graph (a model that failed to load)
        eligible = [d for d in candidates if id(d) not in taken and (f.ranks is None or d.rank in f.ranks)]
        if not eligible:
            continue
        for strategy in (_by_name, _by_name_before, _by_construct, _by_last_graph):
            picks = strategy(f, eligible)
            if picks:
                break
        # which ranks failed is itself inferred unless prefixes say so; a file the log names needs no rank
        ranks_inferred = f.rank_source not in ("prefix", "file_name") and strategy is not _by_name
        for d, how, inferred in picks:
            inferred = inferred or ranks_inferred
            taken.add(id(d))
            d.change_manifest(failure=failure_entry(log, f, how, inferred))
            records.append({"path": str(d.path), "rank": d.rank, "signature": f.signature, "inferred": inferred, "how": how})
    log.attachments = records
    return records


def failure_entry(log: RunLog, f: LogFailure, how: str, inferred: bool) -> dict[str, Any]:
    """A manifest ``failure`` dict for a graph file, from a log failure."""
    return {
        "kind": f.kind,
        "exception": {"type": f.type, "qualified_type": f.qualified_type, "message": f.message, "traceback": None},
        "signature": f.signature,
        "backend": f.backend,
        "source": "log",
        "log": {"path": str(log.path), "line": f.first_line, "occurrences": f.occurrences, "ranks": f.ranks,
                "rank_source": f.rank_source, "rank_how": f.rank_how, "inferred": inferred, "how": how, "text": f.text},
    }


def _by_rank(dumps: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for d in dumps:
        out.setdefault(d.rank, []).append(d)
    return out


def _names_of(d: Any) -> set[str]:
    return set(name_and_stem(str(d.path)))


def name_and_stem(path: str) -> tuple[str, str]:
    """``Path(path).name`` and ``.stem``, without making a Path (a listing's thousands of files)."""
    name = os.path.basename(path)
    i = name.rfind(".")
    return name, name[:i] if 0 < i < len(name) - 1 else name


def _by_name(f: LogFailure, dumps: list[Any]) -> list[tuple[Any, str, bool]]:
    picks = []
    for rank, ds in _by_rank(dumps).items():
        hit = [d for d in ds if _names_of(d) & set(f.names)]
        if len(hit) == 1:
            picks.append((hit[0], f"the log names {Path(hit[0].path).name} in the failure's traceback (line {f.first_line})", False))
    return picks


def _by_name_before(f: LogFailure, dumps: list[Any]) -> list[tuple[Any, str, bool]]:
    picks = []
    for rank, ds in _by_rank(dumps).items():
        named = f.named_before.get(rank) or f.named_before.get(None)
        if named is None:
            continue
        hit = [d for d in ds if named[0] in _names_of(d)]
        if len(hit) == 1:
            picks.append((hit[0], f"inferred: the last graph file the log names before the failure ({named[0]}, line {named[1]})", True))
    return picks


def _by_construct(f: LogFailure, dumps: list[Any]) -> list[tuple[Any, str, bool]]:
    tokens = {t for t in _CODE_TOKEN.findall(f.message) if t not in (f.type, f.qualified_type)}
    if not tokens or len(dumps) < 2:
        return []
    sources = {}
    for d in dumps:
        try:
            peek = getattr(getattr(d, "contents", None), "peek_text", None)  # not kept: ls holds thousands of dumps
            sources[id(d)] = peek() if peek is not None else d.source
        except Exception:  # a file that can't be read again takes no part
            sources[id(d)] = ""
    held = {t: {i for i, s in sources.items() if t in s} for t in tokens}
    telling = sorted(t for t, ids in held.items() if 0 < len(ids) < len(dumps))  # in some graphs, not all
    if not telling:
        return []
    picks = []
    for rank, ds in _by_rank(dumps).items():
        scores = [(sum(id(d) in held[t] for t in telling), d) for d in ds]
        best = max(s for s, _ in scores)
        hit = [d for s, d in scores if s == best]
        if best > 0 and len(hit) == 1:
            what = ", ".join(t for t in telling if id(hit[0]) in held[t])
            picks.append((hit[0], f"inferred: the error names {what}, which of this rank's graphs beside the log only this one holds", True))
    return picks


def _by_last_graph(f: LogFailure, dumps: list[Any]) -> list[tuple[Any, str, bool]]:
    picks = []
    for rank, ds in _by_rank(dumps).items():
        numbered = [d for d in ds if d.manifest.printed.graph_number is not None]
        if numbered:
            last = max(numbered, key=lambda d: d.manifest.printed.graph_number)
            number = last.manifest.printed.graph_number
            if sum(d.manifest.printed.graph_number == number for d in numbered) == 1:
                picks.append((last, f"inferred: rank {rank}'s last graph (Graph {number}); the log doesn't name the graph", True))
        elif len(ds) == 1:
            picks.append((ds[0], f"inferred: rank {rank}'s only graph beside the log; the log doesn't name the graph", True))
    return picks
