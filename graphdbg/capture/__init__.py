"""capture: wrap a torch.compile backend so that the graphs it fails on are dumped."""

from graphdbg.capture.hook import DEFAULT_BUDGET, CapturingBackend, capture

__all__ = ["capture", "CapturingBackend", "DEFAULT_BUDGET"]
