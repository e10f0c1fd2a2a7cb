"""Write one dump folder atomically: build it under a hidden name, then rename it into place.

Eight ranks dumping into one directory each own ``rank<R>/``; two failures of one process
that pick the same id get ``-1``, ``-2`` suffixes. A reader never sees a half-written dump,
because ``find_dumps`` skips hidden folders and the rename is atomic on one filesystem.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from graphdbg.judge.fatal_signal import FAULT_FILE
from graphdbg.judge.signature import format_exception, signature
from graphdbg.store.capture_environment import distributed_info, environment
from graphdbg.store.describe import describe_value, tensor_stats
from graphdbg.store.manifest import (
    GRAPH,
    INPUTS,
    MANIFEST,
    SCHEMA,
    SCHEMA_VERSION,
    check_manifest_bytes,
    read_manifest,
    write_manifest,
)
from graphdbg.store.redact import redact_folder
from graphdbg.store.safe_files import MAX_COPY_BYTES, Folder, read_inside, write_file
from graphdbg.store.specs import TensorSpec
from graphdbg.store.tensor_file import storable, write_tensors

if TYPE_CHECKING:  # a snapshot is made above this layer; here only its fields are read
    from graphdbg.graph.snapshot import GraphSnapshot


def write_dump(
    dump_dir: Path,
    *,
    snap: GraphSnapshot,
    inputs: list[Any],
    kind: str,
    exc: BaseException | None,
    backend: str,
    mode: str,
    budget_bytes: int,
    inputs_state: str,
    mismatches: list | None = None,
    manifest_overrides: dict[str, Any] | None = None,
    redact: bool = False,
    budget_reason: str = "over the size budget",
    stats_sample: int | None = None,
    check_manifest: bool = True,
    failure_node: str | None = None,
) -> Path:
    dist = {**distributed_info(), "collectives": snap.collectives}
    # the folder's name is graphdbg's: a kind a loaded dump recorded ("../x", "a/conftest.py") never goes into it
    named = kind if re.fullmatch(r"[a-z_]{1,32}", kind) else "failure"
    # seq is capture's count ("3"), a nested piece's ("0.1") or a stage's ("0-backward"); anything else is a number
    seq = str(snap.seq) if re.fullmatch(r"[0-9]+([.-][0-9a-z]+)*", str(snap.seq)) else str(int(snap.seq))
    dump_id = f"g{seq}-{named}-{snap.graph_hash[:8]}"
    rank_dir = Path(dump_dir) / f"rank{dist['rank']}"
    with Folder.open(dump_dir, create=True) as top:  # rank<R> made here, never a link planted there
        top.sub(rank_dir.name, create=True).close()
    tmp = rank_dir / f".tmp-{dump_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        input_descs, tensors, stored_bytes = _describe_inputs(snap, inputs, budget_bytes, budget_reason, stats_sample)
        attr_descs, stored_bytes = _describe_attrs(snap, tensors, stored_bytes, budget_bytes, stats_sample)
        write_tensors(tmp / INPUTS, tensors, metadata={"graphdbg.dump": dump_id})

        failure = failure_record(kind, exc, mismatches, failure_node)
        header = _graph_header(dump_id, kind, backend, failure, dist)
        write_file(tmp / GRAPH, header + snap.source.rstrip() + "\n", create_parent=False)

        manifest = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "id": dump_id,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "env": environment(backend),
            "dist": dist,
            "backend": backend,
            "mode": mode,
            "grad_enabled": torch.is_grad_enabled(),
            "failure": failure,
            "graph": {
                "file": GRAPH,
                "hash": snap.graph_hash,
                "nodes": snap.node_count,
                "ops": snap.ops,
                "node_info": snap.node_info,
            },
            "inputs_file": INPUTS,
            "inputs_state": inputs_state,
            "budget_bytes": budget_bytes,
            "stored_bytes": stored_bytes,
            "inputs": input_descs,
            "attrs": attr_descs,
            "external_objects": snap.external_objects,
            **({"custom_ops": snap.custom_ops} if snap.custom_ops else {}),
            **({"triton_kernels": snap.triton_kernels} if snap.triton_kernels else {}),
            **({"origin": snap.origin} if snap.origin else {}),  # frame and compile id
            # where it has them: the caller's autocast, DDP's bucket split (capture/ddp.py), Inductor's code hashed
            **{key: getattr(snap, key) for key in ("autocast", "ddp", "generated_code") if getattr(snap, key, None)},
        }
        if snap.config is not None:
            manifest["config"] = snap.config
        manifest.update(manifest_overrides or {})
        write_manifest(tmp, manifest, check=check_manifest)
        if redact:  # before publishing: no reader ever sees the unredacted dump
            redact_folder(tmp)
        return _publish(tmp, rank_dir, dump_id)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_dump(src: Path, dest: Folder, manifest: dict[str, Any] | None = None) -> list[str]:
    """Copy the dump folder ``src`` into ``dest`` under the names graphdbg gives a dump's files
    (``manifest.json``, ``graph.py``, ``inputs.safetensors``, and ``fault.txt`` when it has one),
    whatever its manifest calls them, and nothing else of the folder; returns the names written.

    A dump chooses nothing that is written: a graph file the manifest names ``conftest.py``,
    ``sub/__init__.py`` or ``pytest.py`` is copied as ``graph.py`` (pytest and Python never
    import a file of the dump's naming from the copy), and the copy's manifest names the copies.
    Each file is read once through the gate (inside the dump, no link, a regular file);
    ``manifest``: the one a loaded Dump already read and checked (else it is read here)."""
    manifest = read_manifest(src) if manifest is None else manifest
    files: dict[str, bytes] = {
        GRAPH: bytes(read_inside(src, (manifest.get("graph") or {}).get("file") or GRAPH, max_bytes=MAX_COPY_BYTES)),
        INPUTS: bytes(read_inside(src, manifest.get("inputs_file") or INPUTS, max_bytes=MAX_COPY_BYTES)),
    }
    if os.path.lexists(src / FAULT_FILE):  # an armed dump's crash report: the copy must read as the same crash
        files[FAULT_FILE] = bytes(read_inside(src, FAULT_FILE, max_bytes=MAX_COPY_BYTES))
    copied = {**manifest, "graph": {**(manifest.get("graph") or {}), "file": GRAPH}, "inputs_file": INPUTS}
    text = (json.dumps(copied, indent=1, default=str) + "\n").encode()
    check_manifest_bytes(text, f"{dest.path / MANIFEST} (being written)")
    for name, data in files.items():
        dest.replace(name, data)
    dest.replace(MANIFEST, text)  # last: a reader never sees a manifest whose files are not there yet
    return [*files, MANIFEST]


def _describe_attrs(snap: GraphSnapshot, tensors: dict[str, Any], stored_bytes: int,
                    budget_bytes: int, stats_sample: int | None = None) -> tuple[dict[str, Any], int]:
    """The module's attributes: stored (added to ``tensors``) while the budget lasts, else their statistics."""
    attr_descs = {}
    for qualname, t in snap.attrs.items():
        key = f"attr/{qualname}"
        d = describe_value(t)
        if storable(t) and stored_bytes + _nbytes(t) <= budget_bytes:
            tensors[key] = t
            stored_bytes += _nbytes(t)
            d["stored"] = key
        else:
            d["stored"] = None
            d["stats"] = tensor_stats(t, stats_sample)
        attr_descs[qualname] = d
    return attr_descs, stored_bytes


def failure_record(kind: str, exc: BaseException | None, mismatches: list | None, node: str | None = None) -> dict[str, Any]:
    """The manifest's ``failure``: its kind, the exception and its signature, or the mismatches,
    and the graph node it failed in when capture could tell."""
    failure: dict[str, Any] = {"kind": kind}
    if node:
        failure["node"] = node
    if exc is not None:
        err = format_exception(exc)
        failure["exception"] = err
        failure["signature"] = signature(err["type"], err["message"])
    if mismatches:
        failure["mismatches"] = [m.to_dict() for m in mismatches]
        failure["signature"] = "accuracy: " + "; ".join(f"{getattr(m, 'what', 'output')} {m.index} {m.reason}" for m in mismatches)
        failure["message"] = "; ".join(m.describe() for m in mismatches)
    return failure


def link_children(outer: Path, children: list[dict[str, Any]]) -> None:
    """Link piece dumps and the dump of the graph they are pieces of, both ways: the outer
    manifest lists ``children``, each child's ``parent`` gets the outer's id and folder."""
    outer = Path(outer)
    manifest = read_manifest(outer)
    listed = manifest.setdefault("children", [])
    for child in children:
        path = Path(child["path"])
        child_manifest = read_manifest(path)
        child_manifest.setdefault("parent", {}).update({"id": manifest["id"], "dir": os.path.relpath(outer, path.parent)})
        _replace_manifest(path, child_manifest)
        listed.append({"id": child_manifest["id"], "dir": os.path.relpath(path, outer.parent), "piece": child.get("piece"),
                       "position": child.get("position"), "call": child.get("call"), "kind": child.get("kind"),
                       "backend": child.get("backend"), "signature": child_manifest.get("failure", {}).get("signature")})
        child["linked"] = str(outer)
    _replace_manifest(outer, manifest)


def _replace_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    # A reader must never see half a manifest: the gate's writer writes beside it, then renames over it.
    write_file(folder / MANIFEST, json.dumps(manifest, indent=1, default=str) + "\n", create_parent=False)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _describe_inputs(snap: GraphSnapshot, inputs: list[Any], budget: int, budget_reason: str = "over the size budget",
                     stats_sample: int | None = None) -> tuple[list[dict], dict[str, torch.Tensor], int]:
    """One descriptor per placeholder; tensor values stored smallest first until the budget,
    the others described by statistics (of ``stats_sample`` elements at most, when given).

    Smallest first because the small inputs (indices, lengths, masks) are the ones a
    regenerated stand-in gets wrong, while a large weight is well described by its statistics.
    """
    descs: list[dict[str, Any]] = []
    for i, node in enumerate(snap.placeholders):
        value = inputs[i] if i < len(inputs) else None
        example = node.meta.get("example_value")
        d = describe_value(value, symbolic=example)
        if d["kind"] == "tensor" and isinstance(example, torch.Tensor):
            symbolic = TensorSpec.of(example)
            if not symbolic.is_static():  # dynamic dims, as Dynamo saw them: "s77", "8*s27"
                d["symbolic_shape"], d["symbolic_stride"] = symbolic.shape, symbolic.stride
        descs.append({"name": str(node.target), "node": node.name, "index": i, **d})
    storage_owner: dict[tuple[str, int], str] = {}
    tensors: dict[str, torch.Tensor] = {}
    order = sorted(
        (i for i, v in enumerate(inputs[: len(descs)]) if isinstance(v, torch.Tensor)),
        key=lambda i: _nbytes(inputs[i]),
    )
    stored = 0
    for i in order:
        t, d = inputs[i], descs[i]
        try:
            ptr = (str(t.device), t.untyped_storage().data_ptr())
            if ptr[1] and ptr in storage_owner:
                d["alias_of"] = storage_owner[ptr]
            else:
                storage_owner[ptr] = d["node"]
        except Exception:
            pass
        if not storable(t):
            d["stored"] = None
            d["reason"] = f"{t.dtype}/{t.layout}/{type(t).__name__} cannot be stored in safetensors"
            d["stats"] = _stats_or_none(t)
        elif stored + _nbytes(t) > budget:
            d["stored"] = None
            d["reason"] = budget_reason
            d["stats"] = tensor_stats(t, stats_sample)
        else:
            key = f"input/{d['node']}"
            tensors[key] = t
            d["stored"] = key
            stored += _nbytes(t)
    return descs, tensors, stored


def _stats_or_none(t: torch.Tensor) -> dict[str, Any] | None:
    try:
        return tensor_stats(t)
    except Exception:
        return None


def _graph_header(dump_id: str, kind: str, backend: str, failure: dict[str, Any], dist: dict[str, Any]) -> str:
    lines = [f"# graphdbg dump {dump_id}", f"# {kind} in backend {backend!r}, rank {dist['rank']} of {dist['world_size']}"]
    if failure.get("signature"):
        lines.append(f"# {failure['signature']}")
    return "\n".join(lines) + "\n\n"


def _publish(tmp: Path, rank_dir: Path, dump_id: str) -> Path:
    for n in range(1000):
        final = rank_dir / (dump_id if n == 0 else f"{dump_id}-{n}")
        if final.exists():
            continue
        try:
            os.rename(tmp, final)
            return final
        except OSError:
            if final.exists():  # another writer won the race for this name
                continue
            raise
    raise OSError(f"no free dump name for {dump_id} in {rank_dir}")
