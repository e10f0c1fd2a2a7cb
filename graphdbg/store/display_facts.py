"""What ``show``, a notebook's display and ``report`` read of a (checked) manifest, typed once.

``ReplayFacts`` (``store/manifest.py``) is what a replay reads; this is what the renderers read:
the failure as captured (how often, from which log), the capture's environment, the pieces of a
nested compile, the compiler settings, each node's module, and what ``minify`` recorded. A key
the manifest lacks is None (or empty), as the renderers always took it; values are the
manifest's own, so what is shown does not change.

    >>> facts = DisplayFacts.of(dump.manifest)
    >>> facts.seen, facts.parent.piece if facts.parent else None, facts.minified.oracle_queries
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Piece:
    """A piece of a nested compile as the manifest names it: the parent a piece dump came from
    (``parent``), or a piece of this graph that failed in its own compiler (``children``)."""

    piece: Any = None
    position: Any = None
    call: Any = None
    dir: str | None = None
    seq: Any = None  # the parent's graph number, where it has no folder of its own
    backend: str | None = None
    kind: str | None = None
    signature: str | None = None

    @classmethod
    def of(cls, d: dict[str, Any]) -> Piece:
        return cls(piece=d.get("piece"), position=d.get("position"), call=d.get("call"), dir=d.get("dir"),
                   seq=d.get("seq"), backend=d.get("backend"), kind=d.get("kind"), signature=d.get("signature"))


@dataclass(frozen=True)
class LogRecord:
    """A printed graph's failure taken from the run's log beside it (``formats/run_log.py``)."""

    path: str
    line: Any
    occurrences: int
    how: str
    rank_how: str | None = None
    ranks: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, d: dict[str, Any]) -> LogRecord:
        return cls(path=d["path"], line=d["line"], occurrences=d["occurrences"], how=d["how"],
                   rank_how=d.get("rank_how"), ranks=d.get("ranks") or [])


@dataclass(frozen=True)
class MinifyStep:
    pass_name: str | None = None
    nodes_before: Any = None
    nodes_after: Any = None
    queries: Any = None
    seconds: Any = None


@dataclass(frozen=True)
class MinifyRecord:
    """What ``minify`` recorded about the run that made this dump (the schema's ``Minified``)."""

    start_nodes: Any = None
    oracle_queries: Any = None
    interrupted: bool = False
    backend: str | None = None
    source: str | None = None  # the dump it started from (the manifest's ``from``)
    steps: tuple[MinifyStep, ...] = ()

    @classmethod
    def of(cls, d: dict[str, Any]) -> MinifyRecord:
        steps = tuple(MinifyStep(s.get("pass_name"), s.get("nodes_before"), s.get("nodes_after"), s.get("queries"),
                                 s.get("seconds")) for s in d.get("steps") or [])
        return cls(start_nodes=d.get("start_nodes"), oracle_queries=d.get("oracle_queries"),
                   interrupted=bool(d.get("interrupted")), backend=d.get("backend"), source=d.get("from"), steps=steps)


@dataclass(frozen=True)
class DisplayFacts:
    backend: str = ""  # the name or module:callable the dump records ("" where none)
    has_recipe: bool = False  # an aot_autograd(...)/partial backend, rebuilt from its recipe
    backend_script: str | None = None  # the user's script that defines the backend
    failure_backend: str | None = None  # the backend a run's log names
    seen: int = 1  # times this failure was captured into this folder (capture/seen.py)
    last_seen: str | None = None
    log: LogRecord | None = None  # where the failure came from the run's log, not a capture
    torch: str | None = None  # the capture's torch; None: not a graphdbg capture
    python: str | None = None
    device_name: str | None = None
    parent: Piece | None = None
    children: tuple[Piece, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # compiler settings the replay restores
    settings_skipped: dict[str, str] = field(default_factory=dict)  # not recorded, and why
    node_modules: dict[str, str] = field(default_factory=dict)  # node name -> the nn.Module it came from
    minified: MinifyRecord | None = None

    @classmethod
    def of(cls, manifest: dict[str, Any] | None) -> DisplayFacts:
        m = _dict(manifest)
        failure, env, config = _dict(m.get("failure")), _dict(m.get("env")), _dict(m.get("config"))
        log = failure.get("log") if failure.get("source") == "log" else None
        modules = {name: info["module"] for name, info in _dict(_dict(m.get("graph")).get("node_info")).items()
                   if _dict(info).get("module")}
        return cls(backend=str(m.get("backend") or ""), has_recipe=bool(m.get("backend_recipe")),
                   backend_script=_dict(m.get("backend_source")).get("script") or None,
                   failure_backend=failure.get("backend"), seen=int(failure.get("seen") or 1),
                   last_seen=failure.get("last_seen"), log=LogRecord.of(log) if log else None,
                   torch=env.get("torch") or None, python=env.get("python"), device_name=env.get("device_name"),
                   parent=Piece.of(m["parent"]) if m.get("parent") else None,
                   children=tuple(Piece.of(c) for c in m.get("children") or []),
                   settings=_dict(config.get("values")), settings_skipped=_dict(config.get("skipped")),
                   node_modules=modules, minified=MinifyRecord.of(m["minified"]) if m.get("minified") else None)

    @property
    def captured(self) -> bool:
        """A graphdbg capture records its environment; another tool's file doesn't."""
        return self.torch is not None

    @property
    def needs_trust(self) -> bool:
        """Replaying it imports code the dump names (a module:callable or a recipe): --trust-backend."""
        return ":" in self.backend or self.has_recipe
