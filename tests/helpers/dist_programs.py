"""A tensor-parallel block (column- then row-parallel linear, all-reduce) compiled on every rank."""

from __future__ import annotations

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
