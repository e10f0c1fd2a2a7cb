"""What a replay reads of a (checked) manifest, typed once (``ReplayFacts``): a module of its
own, so that reading manifests (``ls``) doesn't make its class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphdbg.store.manifest import INPUTS


@dataclass(frozen=True)
class ReplayFacts:
    """What a replay reads of a (checked) manifest, typed once: the grad mode the graph was
    captured under, its place in a training step, and whether it is a piece of a nested compile.

        >>> facts = ReplayFacts.of(dump.manifest)
        >>> facts.grad_enabled, facts.is_backward, facts.fails_in_backward
    """

    grad_enabled: bool = False
    stage: str | None = None  # "forward" or "backward" for a training dump
    failed: str | None = None  # "backward": the forward's failure was in its backward
    backward_dump: str | None = None  # where the backward dump a forward belongs to is, from it ("..")
    piece: bool = False  # a piece of a nested compile: it reached its compiler as a GraphModule, never through Dynamo
    inputs_file: str = INPUTS

    @classmethod
    def of(cls, manifest: dict[str, Any] | None) -> ReplayFacts:
        if manifest is None:
            return cls()
        return cls(grad_enabled=bool(manifest.get("grad_enabled", False)), stage=manifest.get("stage"),
                   failed=manifest.get("failed"), backward_dump=manifest.get("backward_dump") or None,
                   piece=bool((manifest.get("parent") or {}).get("piece")),
                   inputs_file=manifest.get("inputs_file") or INPUTS)

    @property
    def is_backward(self) -> bool:
        """A backward dump: its graph is the backward itself, replayed alone."""
        return self.stage == "backward"

    @property
    def fails_in_backward(self) -> bool:
        """A forward whose failure was in its backward: it replays forward then backward."""
        return self.stage == "forward" and self.failed == "backward"
