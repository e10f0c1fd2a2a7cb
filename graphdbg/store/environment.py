"""Where a graph was captured: versions, device, and the process's place in a distributed job."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib.metadata import version
from typing import Any

import torch

from graphdbg._version import __version__


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except Exception:
        return None


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "graphdbg": __version__,
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "cuda": torch.version.cuda,
        "device_name": "cpu",
        "cuda_devices": 0,
    }
    try:
        if torch.cuda.is_available():
            env["cuda_devices"] = torch.cuda.device_count()
            env["device_name"] = torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:
        pass
    return env


def distributed_info() -> dict[str, Any]:
    """Rank, local rank, world size and process-group backend, from torch.distributed or the env."""
    env = os.environ
    info: dict[str, Any] = {
        "rank": int(env.get("RANK", 0)),
        "local_rank": int(env.get("LOCAL_RANK", env.get("RANK", 0))),
        "world_size": int(env.get("WORLD_SIZE", 1)),
        "source": "env" if "RANK" in env or "WORLD_SIZE" in env else "default",
        "backend": None,
    }
    try:
        import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

        if dist.is_available() and dist.is_initialized():
            info["rank"] = dist.get_rank()
            info["world_size"] = dist.get_world_size()
            info["backend"] = str(dist.get_backend())
            info["source"] = "torch.distributed"
    except Exception:
        pass
    return info
