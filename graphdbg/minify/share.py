"""share: a copy of a dump without the weights, that still fails the same way.

    >>> share_dump("dumps/rank0/g0-compile_error-1a2b3c4d", "shared/")   # graphdbg share DUMP -o shared
    ShareResult(reproduces=True, kept=['l_input_ids_'], original_bytes=64, ...)

The copy holds the dump's own files under graphdbg's names (``graph.py``, ``inputs.safetensors``,
``manifest.json``, ``fault.txt``), nothing else of its folder, and is redacted as ``graphdbg
redact`` does. Parameters and large floating-point inputs (and tensor constants) lose their
stored values: the manifest keeps each one's statistics (min, max, mean, std, NaN and Inf
counts) and replay regenerates it from them, the way a stand-in for a value over the capture
budget is made. The small inputs that decide control flow stay real:
integer and boolean tensors (indices, masks, lengths), small non-parameter tensors, and every
scalar, shape and dtype (they are in the manifest, not in the tensor file).

The copy is then replayed (isolated, under the dump's backend). If it fails the same way it is
kept. If not, the dropped values that matter are searched for by bisection (restoring halves of
them, then quarters, ...), and the smallest set found stays real; ``kept_for_failure`` names
them. If even with all of them restored the copy does not reproduce, nothing is written (the
failure is not in the dump's values, or it does not reproduce at all) and a GraphdbgError says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from graphdbg.backends.resolve import dump_backend
from graphdbg.errors import GraphdbgError
from graphdbg.execution.entry import replay_dump
from graphdbg.execution.executor import SandboxedWorkers
from graphdbg.formats import load as load_dump
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.store.describe import tensor_stats
from graphdbg.store.manifest import INPUTS, find_dumps, read_manifest, write_manifest
from graphdbg.store.redact import redact_folder
from graphdbg.store.safe_files import Folder
from graphdbg.store.tensor_file import read_tensors, write_tensors
from graphdbg.store.write import copy_dump

SMALL_NUMEL = 16  # a non-parameter float tensor of at most this many elements stays real (a scale, a length)
SHARED_REASON = "dropped by graphdbg share (regenerated from statistics)"


@dataclass
class ShareResult:
    path: str
    reproduces: bool
    signature: str | None
    dropped: list[str] = field(default_factory=list)  # values replaced by statistics
    kept: list[str] = field(default_factory=list)  # values that stay real (control flow, small)
    kept_for_failure: list[str] = field(default_factory=list)  # dropped at first, restored because the failure needs them
    original_bytes: int = 0  # bytes of original values left in the copy
    dropped_bytes: int = 0
    replays: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        restored = f"; restored because the failure needs them: {', '.join(self.kept_for_failure)}" if self.kept_for_failure else ""
        return (f"{self.path}: {len(self.dropped)} values replaced by generated ones ({self.dropped_bytes} bytes), "
                f"{len(self.kept)} kept real; {self.original_bytes} bytes of original values remain; "
                f"replayed {self.replays}x: still {self.signature}{restored}")


def _tensor_descs(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, descriptor) for every stored tensor value of a manifest (inputs, nested items, attrs)."""
    def walk(label: str, d: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        if not isinstance(d, dict):
            return
        if d.get("kind") == "tensor" and d.get("stored"):
            yield label, d
        for i, item in enumerate(d.get("items") or []):
            yield from walk(f"{label}[{i}]", item)

    for i, d in enumerate(manifest.get("inputs") or []):
        yield from walk(str(d.get("node") or d.get("name") or f"input{i}"), d)
    for qualname, d in (manifest.get("attrs") or {}).items():
        yield from walk(f"attr {qualname}", d)


def _keep_real(d: dict[str, Any], t: Any) -> bool:
    """Control flow and small values stay: integer and bool tensors, small non-parameter tensors."""
    if not (t.is_floating_point() or t.is_complex()):
        return True
    return not d.get("parameter") and t.numel() <= SMALL_NUMEL


def _one_failing_dump(src: Path) -> tuple[Path, Any]:
    """(the one dump folder under ``src``, its Dump); a GraphdbgError unless it records a failure."""
    folders = find_dumps(src) if src.is_dir() else []
    if len(folders) != 1:
        raise GraphdbgError(f"{src}: share takes one graphdbg dump folder" + (f" ({len(folders)} under it)" if folders else ""))
    original = load_dump(folders[0])
    if original.failure_kind not in ("compile_error", "runtime_error", "crash", "accuracy"):
        raise GraphdbgError(f"{src}: the dump records no failure ({original.failure_kind}); there is nothing to keep reproducing")
    return folders[0], original


def _fewest_real(restore: list[str], reproduces: Callable[[set[str]], tuple[bool, Any]]) -> list[str]:
    """Of ``restore`` (the values kept real, largest first), the fewest the failure still needs:
    drop halves of them, then quarters, ... while ``reproduces`` says the failure stays."""
    chunk = max(len(restore) // 2, 1)
    while True:
        i = 0
        while i < len(restore):
            trial = restore[:i] + restore[i + chunk:]
            if reproduces(set(trial))[0]:
                restore = trial
            else:
                i += chunk
        if chunk == 1:
            return restore
        chunk = max(chunk // 2, 1)


def _own_files(folder: Path, copy: Path) -> Path:
    """The dump's own files copied to ``copy`` under graphdbg's names: nothing else of the folder goes along."""
    with Folder.open(copy, create=True) as made:
        copy_dump(folder, made)
    return copy


def share_dump(dump: str | Path, out: str | Path, options: ReplayOptions | None = None, *, backend: str | None = None,
               trust_backend: bool = False, root: str | Path | None = None,
               announce: Callable[[str], None] | None = None) -> ShareResult:
    """Write ``out``: a redacted copy of ``dump`` whose weights are generated, replayed with ``options``; see the module."""
    src = Path(dump)
    folder, original = _one_failing_dump(src)
    be = backend or dump_backend(original, trust_backend, "share")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GraphdbgError(f"{out}: already exists and is not empty")

    with _staging(out, options) as (staging, options):
        copy = _own_files(folder, staging / "copy")
        redact_folder(copy, root=root)
        manifest = read_manifest(copy)
        # copies in memory: the file is rewritten below, and a mapped tensor over a rewritten file is a SIGBUS
        values = {k: v.clone() for k, v in read_tensors(copy / INPUTS).items()} if (copy / INPUTS).exists() else {}
        descs = list(_tensor_descs(manifest))
        drop: list[str] = []
        kept: list[str] = []
        for label, d in descs:
            t = values.get(d["stored"])
            if t is None:
                continue
            (kept if _keep_real(d, t) else drop).append(label)
        by_label = dict(descs)
        stats = {label: tensor_stats(values[by_label[label]["stored"]]) for label in drop}
        keys = {label: by_label[label]["stored"] for label in drop}
        replays = [0]

        def write(restore: set[str]) -> None:
            m = json.loads(json.dumps(manifest))
            dropped_keys = {keys[label] for label in drop if label not in restore}
            for label, d in _tensor_descs(m):
                if d["stored"] in dropped_keys:
                    d["stored"], d["reason"], d["stats"] = None, SHARED_REASON, stats[label]
            tensors = {k: v for k, v in values.items() if k not in dropped_keys}
            m["stored_bytes"] = sum(v.numel() * v.element_size() for v in tensors.values())
            m["shared"] = {"dropped": sorted(set(drop) - restore), "kept_real": sorted(set(kept) | restore),
                           "original_bytes": m["stored_bytes"]}
            m["inputs_state"] = m.get("inputs_state") or "before"
            fresh = staging / f"{INPUTS}.next"  # a new file renamed over the old one: readers that mapped it keep theirs
            write_tensors(fresh, tensors, metadata={"graphdbg.dump": str(m.get("id", ""))})
            os.replace(fresh, copy / INPUTS)
            write_manifest(copy, m)

        def reproduces(restore: set[str]) -> tuple[bool, Any]:
            write(restore)
            replays[0] += 1
            outcome = replay_dump(load_dump(copy), be, options)
            return outcome.reproduces(original), outcome

        ok, outcome = reproduces(set())
        restore: list[str] = []
        if not ok:
            if announce:
                announce(f"share: without the original values the copy gives {outcome.summary()}; "
                         f"looking for the values the failure needs ({len(drop)} candidates)")
            ok, outcome = reproduces(set(drop))
            if not ok:
                raise GraphdbgError(f"{src}: even with every value real the copy gives {outcome.summary()}, not the captured "
                                    f"{original.signature or original.failure_kind}; nothing written")
            restore = _fewest_real(sorted(drop, key=lambda label: -values[keys[label]].numel()), reproduces)
            ok, outcome = reproduces(set(restore))  # the copy on disk is the one that was judged
        result_manifest = read_manifest(copy)
        real = set(kept) | set(restore)
        result = ShareResult(
            path=str(out), reproduces=ok, signature=outcome.signature or original.signature,
            dropped=sorted(set(drop) - set(restore)), kept=sorted(kept), kept_for_failure=sorted(restore),
            original_bytes=int(result_manifest["stored_bytes"]),
            dropped_bytes=sum(values[keys[label]].numel() * values[keys[label]].element_size() for label in drop if label not in real),
            replays=replays[0])
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.rmdir()
        shutil.move(str(copy), str(out))
        return result


@contextlib.contextmanager
def _staging(out: Path, options: ReplayOptions | None) -> Iterator[tuple[Path, ReplayOptions | None]]:
    """A folder beside ``out`` for the copy while it is judged, removed after, and the options its
    replays run with. Isolated (unless ``--no-isolate``), they go one after another to one
    sandboxed worker (their executor), not a fresh interpreter each: between them the copy's
    values change, not its graph."""
    staging = Path(tempfile.mkdtemp(prefix=".share-", dir=out.parent if out.parent.exists() else None))
    try:
        if options is not None and options.isolate is False:
            yield staging, options
        else:
            timeout = DEFAULT_TIMEOUT if options is None or options.timeout is None else float(options.timeout)
            with SandboxedWorkers(staging / "copy", timeout=timeout) as workers:
                yield staging, (options or ReplayOptions()).but(executor=workers)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
