"""Real collectives for a graph replayed as a world (every rank at once, under torchrun).

The world-of-one stand-ins in ``stand_ins`` are for one rank alone. Once torch.distributed is
initialised with more than one rank, ``install_stand_ins`` asks this module first:

- an op this machine lacks (SGLang's ``torch.ops.sglang.inplace_all_reduce(x, group_name='tp:0')``,
  ``reg_all_gather_into_tensor(out, x, group_name=...)``) becomes a function that calls
  ``torch.distributed`` on the group of that name;
- a ``_c10d_functional`` op is real already; only a group name this world doesn't have is
  rewritten to the group it stands for, so the backend still sees the op itself.

    >>> dist.init_process_group("gloo")                       # rank 2 of 4
    >>> use_groups([{"name": "tp:0", "ranks": [0, 1, 2, 3]}])  # same call, same order, on every rank
    >>> install_stand_ins(gm, torch.device("cpu"))[0].describe()
    "inductor_0.inplace_all_reduce: collective (torch.ops.sglang.inplace_all_reduce is not on this machine: a real all_reduce (in place) over group 'tp:0' (ranks 0-3, gloo))"

A group name nothing describes (printed graphs don't say who is in ``tp:0``) spans the whole
world. Under gloo, CUDA tensors go through host memory, so ranks that share a GPU still
exchange real values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.fx as fx

__all__ = ["in_world", "use_groups", "group_named", "real_collective"]

_GROUPS: dict[str, Any] = {}  # a group name in the graph -> this world's ProcessGroup
_MEMBERS: dict[str, list[int]] = {}


def in_world() -> bool:
    """Is this process one rank of an initialised world of several?"""
    try:
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    except Exception:
        return False


def use_groups(groups: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Create this world's groups: one per distinct rank set in ``groups`` (``{"name", "ranks"}``
    rows from every rank's manifest), in a sorted order every rank shares, as
    ``dist.new_group`` needs. A name then maps to the group holding this rank. Returns
    name -> ranks, for this rank."""
    world = list(range(dist.get_world_size()))
    me = dist.get_rank()
    made: dict[tuple[int, ...], Any] = {}
    for ranks in sorted({tuple(sorted(g["ranks"])) for g in groups if g.get("ranks")}):
        made[ranks] = dist.group.WORLD if list(ranks) == world else dist.new_group(list(ranks))
    _GROUPS.clear()
    _MEMBERS.clear()
    for g in groups:
        ranks = tuple(sorted(g.get("ranks") or []))
        if me in ranks and str(g["name"]) not in _GROUPS:
            _GROUPS[str(g["name"])] = made[ranks]
            _MEMBERS[str(g["name"])] = list(ranks)
    return dict(_MEMBERS)


def group_named(name: str | None) -> tuple[Any, list[int]]:
    """The group a graph's group name stands for here, and its ranks (the world when unknown)."""
    if name is not None and str(name) in _GROUPS:
        return _GROUPS[str(name)], _MEMBERS[str(name)]
    return dist.group.WORLD, list(range(dist.get_world_size()))


def real_collective(node: fx.Node, qual: str, short: str) -> tuple[bool, str | None]:
    """Make ``node`` a real collective: (changed, what to report), or (False, None) when this
    module has nothing for it and the world-of-one stand-in should stay."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload) or isinstance(target, torch._ops.OpOverloadPacket):
        return _retarget_group(node, qual)
    name_arg = node.kwargs.get("group_name", next((a for a in node.args if isinstance(a, str)), None))
    group, members = group_named(name_arg)
    fn, how = _implementation(node, short, group, len(members))
    if fn is None:
        return False, None
    fn.__name__ = fn.__qualname__ = "real_" + short
    fn.__module__ = __name__
    node.target = fn
    backend = dist.get_backend(group)
    return True, f"{qual} is not on this machine: a real {how} over group {name_arg!r} ({_ranks_text(members)}, {backend})"


def _retarget_group(node: fx.Node, qual: str) -> tuple[bool, str | None]:
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else getattr(node.target, "default", None)
    names = [a.name for a in op._schema.arguments] if op is not None else []
    if "group_name" in node.kwargs:
        old, put = node.kwargs["group_name"], "kw"
    elif "group_name" in names and names.index("group_name") < len(node.args):
        old, put = node.args[names.index("group_name")], names.index("group_name")
    else:  # the group name is the last string argument of every c10d functional op
        old, put = next(((a, i) for i, a in reversed(list(enumerate(node.args))) if isinstance(a, str) and i > 0), (None, None))
    if not isinstance(old, str):
        return False, None
    group, members = group_named(old)
    new = group.group_name
    if new == old:
        return False, None  # the group of that name is this world's: nothing stands in
    if put == "kw":
        node.kwargs = {**node.kwargs, "group_name": new}
    else:
        node.args = tuple(new if i == put else a for i, a in enumerate(node.args))
    return True, f"{qual}: group {old!r} is this world's group {new!r} ({_ranks_text(members)})"


def _ranks_text(ranks: list[int]) -> str:
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(map(str, ranks))


def _implementation(node: fx.Node, short: str, group: Any, size: int) -> tuple[Callable[..., Any] | None, str]:
    tensors = [i for i, a in enumerate(node.args) if isinstance(a, fx.Node)]
    returns = node.meta.get("graphdbg_spec") is not None and not short.startswith("inplace_")
    gloo = dist.get_backend(group) == "gloo"
    if "all_reduce" in short or "allreduce" in short:
        if returns or short.startswith("outplace_"):
            def all_reduce_out(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
                out = x.clone()
                _on_host(gloo, lambda t: dist.all_reduce(t, group=group), out)
                return out

            return all_reduce_out, "all_reduce (returns the sum)"

        def all_reduce_in_place(x: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            _on_host(gloo, lambda t: dist.all_reduce(t, group=group), x)

        return all_reduce_in_place, "all_reduce (in place)"
    if ("all_gather" in short or "allgather" in short) and len(tensors) >= 2:
        out_i, in_i = tensors[0], tensors[1]

        def all_gather_into(*args: Any, **kwargs: Any) -> None:
            _gather(args[out_i], args[in_i], group, gloo)

        return all_gather_into, f"all_gather (argument {in_i} into argument {out_i})"
    if "all_gather" in short or "allgather" in short:
        def all_gather_out(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            out = x.new_empty((x.shape[0] * size, *x.shape[1:]))
            _gather(out, x, group, gloo)
            return out

        return all_gather_out, "all_gather (along dim 0, returns the gathered tensor)"
    if "reduce_scatter" in short and len(tensors) >= 2:
        out_i, in_i = tensors[0], tensors[1]

        def reduce_scatter_into(*args: Any, **kwargs: Any) -> None:
            args[out_i].copy_(_reduce_scatter(args[in_i], group, size, gloo))

        return reduce_scatter_into, f"reduce_scatter (argument {in_i} into argument {out_i})"
    if "reduce_scatter" in short:
        def reduce_scatter_out(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return _reduce_scatter(x, group, size, gloo)

        return reduce_scatter_out, "reduce_scatter (along dim 0, returns this rank's part)"
    return None, ""


def _on_host(gloo: bool, op: Callable[[torch.Tensor], Any], t: torch.Tensor) -> None:
    """Run ``op`` on ``t`` in place; under gloo a CUDA tensor makes the trip through host memory."""
    via_host = gloo and t.is_cuda
    if via_host or not t.is_contiguous():
        staged = t.detach().to("cpu" if via_host else t.device, copy=True).contiguous()
        op(staged)
        t.copy_(staged)
    else:
        op(t)


def _gather(out: torch.Tensor, x: torch.Tensor, group: Any, gloo: bool) -> None:
    size = dist.get_world_size(group)
    src = x.detach().to("cpu").contiguous() if gloo and x.is_cuda else x.contiguous()
    parts = [torch.empty_like(src) for _ in range(size)]
    dist.all_gather(parts, src, group=group)
    out.copy_(torch.cat(parts).reshape(out.shape))


def _reduce_scatter(x: torch.Tensor, group: Any, size: int, gloo: bool) -> torch.Tensor:
    total = x.detach().clone()
    _on_host(gloo, lambda t: dist.all_reduce(t, group=group), total)
    return total.chunk(size)[dist.get_rank(group)].clone()
