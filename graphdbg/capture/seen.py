"""One dump per distinct failure: the same failure captured again counts in the dump it has.

A program run twice (the quickstart, a test re-run, a job restarted after a crash) fails the same
way each time. A second dump folder of it tells the user nothing new, and it turns every
documented command written with a glob (``graphdbg replay graphdbg_dumps/rank0/g0-*``) into one
that matches two folders. So before a failure is written, its rank's folder is searched for a
dump of the same failure, and when there is one, that dump's manifest counts it instead
(``failure.seen``, ``failure.last_seen``).

The same failure: the same rank (one folder per rank), the same graph (its hash), the same kind
and the same signature; for an accuracy failure, also the same kind of difference
(``judge.difference``): a different bug on the same graph gets its own dump.

    >>> seen_before(Path("graphdbg_dumps"), graph_hash, failure_record("runtime_error", exc, None))
    (PosixPath('graphdbg_dumps/rank0/g0-runtime_error-72323080'), 2)

A failure of the compiled code may happen on some calls only. ``CallCounts`` counts a graph's
calls with the failing call's sizes that raised and those that did not (``failure.calls``), so
a dump says whether its failure was seen every time: counted in memory, added to the manifest
when the dump is written and when the process exits (a process killed by a signal loses the
calls since).
"""

from __future__ import annotations

import atexit
import copy
import datetime as _dt
import re
import threading
from pathlib import Path
from typing import Any

from graphdbg.errors import DumpError
from graphdbg.judge.difference import recorded_difference, same_difference
from graphdbg.store.capture_environment import distributed_info
from graphdbg.store.manifest import read_manifest, update_manifest, write_manifest


def seen_before(dump_dir: Path, graph_hash: str, failure: dict[str, Any]) -> tuple[Path, int] | None:
    """(the dump of the same failure, how many times it has now been seen), after counting this
    time in its manifest; None when this failure has no dump yet. ``failure``: the manifest's
    ``failure`` this one would be written with (``store.write.failure_record``)."""
    folder = Path(dump_dir) / f"rank{distributed_info()['rank']}"
    found = _same_failure(folder, graph_hash, failure["kind"], failure.get("signature"), failure.get("mismatches"))
    if found is None:
        return None
    path, manifest = found
    manifest = copy.deepcopy(manifest)  # read_manifest's dict may be the one it remembers
    failure = manifest["failure"]
    failure["seen"] = int(failure.get("seen") or 1) + 1
    failure["last_seen"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    write_manifest(path, manifest)
    return path, failure["seen"]


def _same_failure(folder: Path, graph_hash: str, kind: str, signature: str | None,
                  mismatches: list[dict[str, Any]] | None) -> tuple[Path, dict[str, Any]] | None:
    if not folder.is_dir():
        return None
    # dump ids are g<seq>-<kind>-<hash[:8]>, with -1, -2 for a name taken: only those are read
    named = re.compile(rf"g[0-9.]+-{re.escape(kind)}-{re.escape(graph_hash[:8])}(-\d+)?")
    for path in sorted(p for p in folder.iterdir() if named.fullmatch(p.name)):
        try:
            manifest = read_manifest(path)
        except DumpError:  # a damaged dump is not this failure; ls and load report it
            continue
        failure = manifest.get("failure") or {}
        if (manifest.get("graph", {}).get("hash") != graph_hash or failure.get("kind") != kind
                or failure.get("signature") != signature or manifest.get("parent")):
            continue
        captured = failure.get("mismatches")
        if mismatches and recorded_difference(captured) and same_difference(captured, mismatches):
            continue
        return path, manifest
    return None


class CallCounts:
    """Calls of one compiled graph that raised and that did not, from its first call, counted
    apart for each set of sizes the graph was called with (its int inputs: a dynamic-shape
    graph gets its symbolic sizes as ints). Only the failing call's sizes go to the manifest:
    a call with other sizes that passed (a shorter sequence) says nothing about whether the
    failure shows on every call with these.

        >>> counts.call(args, raised=False); counts.call(args, raised=True); counts.attach(dump_path)
    """

    def __init__(self) -> None:
        self.by_sizes: dict[tuple[int, ...], list[int]] = {}  # sizes -> [passed, failed]
        self.unsized = self.by_sizes[()] = [0, 0]  # a graph without int inputs
        self.path: Path | None = None
        self.failing: tuple[int, ...] | None = None  # the sizes of the first call that raised
        self.int_at: list[int] | None = None  # where the int inputs are, from the first call
        self._written = (0, 0)  # what the manifest has from this process already
        self._lock = threading.Lock()

    def call(self, args: Any, raised: bool) -> None:
        """Count one call (``args``: the compiled graph's inputs; every call's path: 0.4 us)."""
        at = self.int_at
        if at is None:  # a compiled graph's int inputs (its symbolic sizes) sit at the same places every call
            at = self.int_at = [i for i, a in enumerate(args) if type(a) is int]
        if at:
            sizes = tuple([args[i] for i in at])
            counted = self.by_sizes.get(sizes) or self.by_sizes.setdefault(sizes, [0, 0])
        else:  # one set of sizes
            sizes, counted = (), self.unsized
        counted[raised] += 1
        if raised and self.failing is None:
            self.failing = sizes

    def attach(self, path: Path) -> None:
        """Count into ``path``'s manifest (the runtime failure's dump) now and at exit."""
        if self.path is None:
            atexit.register(self.write)
        self.path = Path(path)
        self.write()

    def write(self) -> None:
        with self._lock:
            now = tuple(self.by_sizes.get(self.failing, (0, 0))) if self.failing is not None else (0, 0)
            if self.path is None or now == self._written:
                return
            passed, failed = now[0] - self._written[0], now[1] - self._written[1]
            def count(manifest: dict[str, Any]) -> None:
                calls = manifest["failure"].get("calls") or {}
                manifest["failure"]["calls"] = {"passed": int(calls.get("passed") or 0) + passed,
                                                "failed": int(calls.get("failed") or 0) + failed}

            try:
                update_manifest(self.path, count)
            except (DumpError, OSError):
                return  # removed or damaged since: nothing to count into
            self._written = now
