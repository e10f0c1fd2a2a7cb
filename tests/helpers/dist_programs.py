"""Programs compiled on every rank: a tensor-parallel block (column- then row-parallel linear,
all-reduce), and data parallel ones (DDP's bucket split, FSDP2, FSDP-style sharded parameters)."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import graphdbg


class TPBlock(torch.nn.Module):
    def __init__(self, dim: int, hidden: int, world: int):
        super().__init__()
        self.col = torch.nn.Linear(dim, hidden // world)  # column-parallel: this rank's slice of the hidden units
        self.row = torch.nn.Linear(hidden // world, dim, bias=False)  # row-parallel: partial sums

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.col(x))
        return fc.all_reduce(self.row(h), "sum", dist.group.WORLD) + x


def capture_rank(rank: int, world: int, store: str, dump_dir: str, backend: str, differ_rank: int = -1,
                 device: str = "cpu") -> None:
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)
        hidden = 64 if rank != differ_rank else 96  # one rank built with the wrong shard size
        model = TPBlock(16, hidden, world).eval().to(device)
        torch.manual_seed(1234)
        x = torch.randn(4, 16, device=device)
        module, _, attr = backend.partition(":")
        be = getattr(__import__(module, fromlist=[attr]), attr) if attr else backend
        try:
            with torch.no_grad():
                torch.compile(model, backend=graphdbg.capture(be, dump_dir=dump_dir))(x)
        except Exception as e:  # noqa: BLE001 - the failure is the point; the dump holds it
            print(f"rank {rank}: {type(e).__name__}", file=sys.stderr)
    finally:
        dist.destroy_process_group()


def capture_world(world: int, tmp: str, backend: str, differ_rank: int = -1, device: str = "cpu") -> str:
    import torch.multiprocessing as mp

    dump_dir = f"{tmp}/dumps"
    mp.spawn(capture_rank, args=(world, f"{tmp}/store", dump_dir, backend, differ_rank, device), nprocs=world, join=True)
    return dump_dir


# Data parallel: DDP's bucket split, and FSDP-style sharded parameters --------------------------
def _backend(name: str):
    module, _, attr = name.partition(":")
    return getattr(__import__(module, fromlist=[attr]), attr) if attr else name


def _join(rank: int, world: int, store: str, device: str) -> None:
    import datetime

    if device == "cuda":
        torch.cuda.set_device(rank)
    # a peer that failed ends this rank's collective in a minute at most, not gloo's 30
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))


def _failed(rank: int, e: Exception) -> None:
    """A rank whose step failed ends here, its dumps written: its peers see it gone. Nothing is
    torn down: DDP's reducer, its all-reduce cut off by a gone peer, may abort the process in
    its destructors (``terminate called without an active exception``), which mp.spawn reports
    as a failed world."""
    print(f"rank {rank}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr, flush=True)
    os._exit(0)


def _rows(rank: int, short_rank: int | str) -> int:
    return 6 if short_rank in (rank, "all") else 8  # the short rank got the epoch's last, smaller batch


class Blocks(torch.nn.Module):
    """Four 512-wide blocks, the third with a GELU (the others ReLU): 1 MB of weight each, so one
    DDP bucket each at ``bucket_cap_mb=1``. A module of the user's own: after the graph break in
    DDP's forward, Dynamo compiles its ``forward`` as a frame of its own (a torch module such as
    ``nn.Sequential`` would be skipped there, being torch's code)."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(512, 512) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = torch.nn.functional.gelu(layer(x)) if i == 2 else torch.relu(layer(x))
        return x


def ddp_rank(rank: int, world: int, store: str, dump_dir: str, backend: str, short_rank: int | str, mode: str,
             device: str = "cpu", outside: bool = True) -> None:
    """``Blocks`` under DDP with 1 MB buckets, compiled as ``torch.compile(DDP(model))`` (``outside``)
    or ``DDP(torch.compile(model))``: either way Dynamo's DDP optimizer splits the graph into one
    piece per bucket and hands each to the backend. One training step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    _join(rank, world, store, device)
    try:
        torch.manual_seed(0)
        model = Blocks().to(device)
        backend_ = graphdbg.capture(_backend(backend), dump_dir=dump_dir, mode=mode)
        if outside:
            ddp = torch.compile(DDP(model, bucket_cap_mb=1), backend=backend_)
        else:
            ddp = DDP(torch.compile(model, backend=backend_), bucket_cap_mb=1)
        torch.manual_seed(100 + rank)
        x = torch.randn(_rows(rank, short_rank), 512, device=device)
        try:
            ddp(x).square().mean().backward()
        except Exception as e:  # noqa: BLE001 - the failure is the point; the dump holds it
            _failed(rank, e)
    finally:
        dist.destroy_process_group()


class ShardedLinear(torch.nn.Module):
    """FSDP's layout written with functional collectives, as SimpleFSDP does: each rank keeps a
    dim-0 shard of the weight and bias, all-gathers them in the forward, and the all-gather's
    autograd reduce-scatters their gradients in the backward. Compiled, both collectives are in
    the graphs (forward: all_gather_into_tensor, wait_tensor; backward: reduce_scatter_tensor)."""

    def __init__(self, fin: int, fout: int, world: int, rank: int):
        super().__init__()
        full = torch.nn.Linear(fin, fout)
        self.weight = torch.nn.Parameter(full.weight.detach().chunk(world)[rank].clone())
        self.bias = torch.nn.Parameter(full.bias.detach().chunk(world)[rank].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = fc.all_gather_tensor_autograd(self.weight, 0, dist.group.WORLD)
        b = fc.all_gather_tensor_autograd(self.bias, 0, dist.group.WORLD)
        return torch.nn.functional.linear(x, w, b)


def sharded_rank(rank: int, world: int, store: str, dump_dir: str, fw: str, bw: str, short_rank: int,
                 device: str = "cpu") -> None:
    """A two-layer MLP with sharded parameters, compiled with ``aot_autograd(fw, bw)`` under
    capture; one training step, the batch of ``short_rank`` shorter."""
    from torch._dynamo.backends.common import aot_autograd

    _join(rank, world, store, device)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(ShardedLinear(16, 32, world, rank), torch.nn.SiLU(),
                                    ShardedLinear(32, 8, world, rank)).to(device)
        backend = graphdbg.capture(aot_autograd(fw_compiler=_backend(fw), bw_compiler=_backend(bw)), dump_dir=dump_dir)
        torch.manual_seed(100 + rank)
        x = torch.randn(_rows(rank, short_rank), 16, device=device)
        try:
            torch.compile(model, backend=backend)(x).square().mean().backward()
        except Exception as e:  # noqa: BLE001 - the failure is the point; the dump holds it
            _failed(rank, e)
    finally:
        dist.destroy_process_group()


class Tower(torch.nn.Module):
    """Two SiLU blocks of the user's, for FSDP2."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.up(x))) + x


def fsdp2_rank(rank: int, world: int, store: str, dump_dir: str, fw: str, bw: str, short_rank: int) -> None:
    """FSDP2 as torch ships it: ``fully_shard(model)``, then ``torch.compile(model)`` with
    ``aot_autograd(fw, bw)`` under capture; one training step, the batch of ``short_rank`` shorter. On torch 2.13 FSDP2's hooks run
    eagerly: the graphs hold the compute, the all-gather and reduce-scatter stay outside."""
    from torch._dynamo.backends.common import aot_autograd
    from torch.distributed.fsdp import fully_shard

    _join(rank, world, store, "cpu")
    try:
        torch.manual_seed(0)
        model = fully_shard(Tower())
        backend = graphdbg.capture(aot_autograd(fw_compiler=_backend(fw), bw_compiler=_backend(bw)), dump_dir=dump_dir)
        torch.manual_seed(100 + rank)
        x = torch.randn(_rows(rank, short_rank), 16)
        try:
            torch.compile(model, backend=backend)(x).square().mean().backward()
        except Exception as e:  # noqa: BLE001 - the failure is the point; the dump holds it
            _failed(rank, e)
    finally:
        dist.destroy_process_group()


def spawn_world(fn, world: int, tmp: str, *args) -> str:
    """Run ``fn(rank, world, store, dump_dir, *args)`` on ``world`` spawned processes; the dumps' folder."""
    import torch.multiprocessing as mp

    dump_dir = f"{tmp}/dumps"
    mp.spawn(fn, args=(world, f"{tmp}/store", dump_dir, *args), nprocs=world, join=True)
    return dump_dir
