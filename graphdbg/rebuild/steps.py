"""The steps ``Dump.case()`` runs, the same for every source, each callable on its own.

    >>> rb = Rebuild.start(dump.printed, dump.manifest_data, dump.contents.read, dev, seed, sizes, where=str(dump.path))
    >>> gm = build_module(rb, dump.printed, dump.manifest_data)      # attributes stored or built, the rest made up
    >>> enter_caller_autocast(rb, gm, dump.manifest_data)            # the caller's autocast around the body
    >>> arrange_synthesis(rb, gm, dump.manifest_data["inputs"])      # what the file lacks, planned and checked to fit
    >>> inputs = build_inputs(rb, gm, dump.manifest_data)            # stored, views, statistics, else synthesized
    >>> install_for_one_rank(rb, gm)                            # missing ops and collectives stood in for
    >>> move_device_literals(rb, gm, captured_device)

Every value or call that is not the captured one is appended to ``rb.stand_ins``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from graphdbg.errors import DumpError
from graphdbg.graph.autocast import enter_autocast
from graphdbg.rebuild.attributes import build_attribute, synthesized_attribute
from graphdbg.rebuild.devices import retarget_devices
from graphdbg.rebuild.external_objects import place_external_objects
from graphdbg.rebuild.inputs import InputBuilder, StandIn, made_up
from graphdbg.rebuild.memory_budget import check_fits
from graphdbg.rebuild.size_symbols import bind_sizes, bound_spec, size_env
from graphdbg.rebuild.stand_ins import install_stand_ins
from graphdbg.rebuild.synthesize import plan_inputs, planned_bytes, synthesize

if TYPE_CHECKING:
    from graphdbg.graph.parser import PrintedGraph


@dataclass
class Rebuild:
    """What the steps share: the device, the seed, the size symbols' values, the input builder
    and the stand-ins recorded so far."""

    dev: torch.device
    seed: int
    env: dict
    builder: InputBuilder
    stand_ins: list[StandIn]
    where: str

    @classmethod
    def start(cls, printed: PrintedGraph, manifest: Mapping[str, Any], read: Callable, dev: torch.device,
              seed: int, sizes: dict[str, int] | None, *, where: str) -> Rebuild:
        """Step 1: check the graph's inputs against the manifest and give the size symbols values."""
        descs = manifest["inputs"]
        placeholders = [n for n in printed.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(descs):
            raise DumpError(f"{where}: the graph has {len(placeholders)} inputs, the manifest describes {len(descs)}")
        env, stand_ins = size_env(placeholders, descs, sizes)
        builder = InputBuilder(dev, read, env, seed=seed, stand_ins=stand_ins, where=where)
        return cls(dev=dev, seed=seed, env=env, builder=builder, stand_ins=stand_ins, where=where)


def _placeholder_names(gm: fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op == "placeholder"]


def build_module(rb: Rebuild, printed: PrintedGraph, manifest: Mapping[str, Any]) -> fx.GraphModule:
    """Step 2: the module: attributes the file builds or stores, the rest made from their annotations."""
    attrs: dict[str, Any] = {}
    for c in printed.inits:
        attrs[c.name], made = build_attribute(c, rb.dev, rb.seed, rb.where)
        rb.stand_ins += [made] if made else []
    attr_descs = {q: d for q, d in manifest.get("attrs", {}).items() if q not in attrs}
    keys = [d["stored"] for d in attr_descs.values() if d.get("stored")]
    attr_tensors = rb.builder.read(keys) if keys else {}
    attrs.update({q: rb.builder.build(q, d, attr_tensors) for q, d in attr_descs.items()})

    def missing_attr(qualname: str, spec: Any) -> Any:
        value, made = synthesized_attribute(qualname, bound_spec(spec, rb.env), rb.dev, rb.seed, rb.where)
        rb.stand_ins.append(made)
        return value

    gm = printed.to_module(attrs, missing_attr=missing_attr)
    bind_sizes(gm, rb.env)
    return gm


def enter_caller_autocast(rb: Rebuild, gm: fx.GraphModule, manifest: Mapping[str, Any]) -> None:
    """Step 2b: the autocast the caller had around the graph, put back around its body
    (``graph/autocast.py``), so the graph computes in the dtypes it was captured in."""
    for moved in enter_autocast(gm, manifest.get("autocast"), rb.dev):
        rb.stand_ins.append(StandIn("graph", "device", moved))


def arrange_synthesis(rb: Rebuild, gm: fx.GraphModule, descs: list[dict]) -> None:
    """Step 3a: inputs the file did not record are synthesized from the graph's own annotations;
    all of them are checked against the device's memory at once, before any is made."""
    if not any(made_up(d) for d in descs):
        return
    names = _placeholder_names(gm)
    plans = {p.name: p for p in plan_inputs(gm, made_up={n for n, d in zip(names, descs) if made_up(d)})}
    made_up_plans = [plans[n] for n, d in zip(names, descs) if made_up(d) and n in plans]
    check_fits(planned_bytes(made_up_plans, rb.dev), rb.dev)

    def synthesize_one(name: str) -> tuple[Any, list[StandIn]] | None:
        if name not in plans:
            return None
        (value,), made = synthesize([plans[name]], rb.dev, seed=rb.seed)
        return value, made

    rb.builder.synthesize = synthesize_one


def build_inputs(rb: Rebuild, gm: fx.GraphModule, manifest: Mapping[str, Any]) -> list[Any]:
    """Step 3b: the inputs from the manifest's descriptors (stored values, else storage views,
    else statistics, else synthesis), and the runtime objects placed where they were."""
    inputs = rb.builder.build_all(manifest["inputs"], names=_placeholder_names(gm))
    externals = {int(d["index"]): rb.builder.build(f"external object {d['index']}", d, {})
                 for d in manifest.get("external_objects", []) if d.get("kind") not in ("missing", None)}
    inputs += place_external_objects(gm, externals, piece=bool((manifest.get("parent") or {}).get("piece")))
    return inputs


def install_for_one_rank(rb: Rebuild, gm: fx.GraphModule) -> None:
    """Step 4: one rank on its own: collectives act as on a world of one, missing ops are stood
    in for. A graph whose inputs were made up from annotations returns buffers that kernels
    elsewhere would fill: zero them, so that two runs of it agree."""
    rb.stand_ins += install_stand_ins(gm, rb.dev, zero_uninitialized=bool(rb.builder.synthesized))


def move_device_literals(rb: Rebuild, gm: fx.GraphModule, captured: torch.device) -> None:
    """Step 5: device literals in the graph follow the replay device; recorded as a stand-in."""
    moved = retarget_devices(gm, captured, rb.dev)
    if rb.dev != captured or moved:
        what = f"captured on {captured}, replayed on {rb.dev}"
        if moved:
            what += f"; device literals moved in {', '.join(moved[:5])}" + (" ..." if len(moved) > 5 else "")
        rb.stand_ins.append(StandIn("graph", "device", what))
