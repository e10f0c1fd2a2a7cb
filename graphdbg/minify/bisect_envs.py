"""Bisect the environment: which interpreter (another torch, another backend version) or which
recorded setting, flag or environment variable brings a failure.

    >>> r = bisect_envs(dump, "inductor", pythons=["/venvs/torch-2.11/bin/python", "/venvs/torch-2.13/bin/python"])
    >>> r.culprit, [d.line() for d in r.differences]
    ('/venvs/torch-2.13/bin/python', ['version torch: ...'])
    >>> bisect_envs(dump, "inductor").culprit     # the recorded settings that differ from now
    'env var TORCHINDUCTOR_FOO'

With ``pythons``, the dump is replayed under each interpreter in order, each in graphdbg's own
isolated child run by that interpreter (its own torch and backend; graphdbg is found after its
packages when it has none), until one's outcome differs from the first's; that one is named,
with what differs between the two environments (``judge.environment``). One interpreter given:
this one comes first. Listed by version, the first that differs is the release that brought
the change.

Without, the differences between the capture and now that a replay can set (compiler settings,
``torch.backends`` flags and precision, thread counts, environment variables, as
``judge.environment`` ranks them) are bisected: the outcome now, then with every captured value
applied; if they differ, a binary search over prefixes of that list finds the one whose captured
value flips the outcome, which is then tried alone. Versions and the device can't be set: they
take ``--python``.

Each replay's outcome is the one ``judge.rate`` decides for a failure seen on some runs only.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

from graphdbg.backends.compiler_config import ENV_OVERRIDES, ENV_TRUST_CONFIG, restorable
from graphdbg.display import Displayed
from graphdbg.errors import GraphdbgError
from graphdbg.execution.entry import replay_dump
from graphdbg.judge.environment_diff import SET_BY_TORCH, Difference, differences
from graphdbg.judge.rate import RateTest
from graphdbg.outcome import Outcome
from graphdbg.replay.as_captured import ENV_AS_CAPTURED, prepare, setting_restorable, var_can_return
from graphdbg.replay.options import ReplayOptions

SETTABLE = ("compiler setting", "setting", "threads", "env var")
_CHILD_VARS = SET_BY_TORCH | {"CUDA_CACHE_PATH"}  # set by graphdbg for each child (execution.sandbox.child_env)


@dataclass
class EnvRun:
    """One environment's replay: which, and what it did to the dump's failure."""

    label: str
    verdict: str  # "reproduces", "passes" or "fails differently"
    outcome: Outcome
    runs: int

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "verdict": self.verdict, "runs": self.runs, "status": self.outcome.status,
                "signature": self.outcome.signature}


@dataclass
class EnvBisection(Displayed):
    mode: str  # "pythons" or "settings"
    runs: list[EnvRun] = field(default_factory=list)
    culprit: str | None = None  # the interpreter, or the difference (its line), that flips the outcome
    differences: list[Difference] = field(default_factory=list)  # between the first environment and the culprit's
    alone: bool | None = None  # settings: whether the culprit's captured value alone flips it
    note: str = ""

    @property
    def exit_code(self) -> int:
        """``bisect envs``' exit code: 1 when an environment or setting is named, else 0."""
        return 0 if self.culprit is None else 1

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "culprit": self.culprit, "alone": self.alone, "note": self.note,
                "runs": [r.to_dict() for r in self.runs], "differences": [d.to_dict() for d in self.differences]}

    def lines(self) -> list[str]:
        out = [f"{r.label}: {r.verdict} ({r.outcome.summary()}; {r.runs} run{'s' if r.runs != 1 else ''})" for r in self.runs]
        if self.culprit is None:
            out.append(f"no environment changes the outcome{': ' + self.note if self.note else ''}")
            return out
        out.append(f"first to differ: {self.culprit}" + ("" if self.alone is None else
                                                         " (alone)" if self.alone else " (only with the ones before it)"))
        if self.mode == "pythons":
            first = self.runs[0].label if self.runs else "the first"
            out += [f"  {d.kind} {d.name}: {_shown(d.captured)} under {first}, {_shown(d.now)} under this one"
                    for d in self.differences]
        else:
            out += [f"  {d.line()}" for d in self.differences]
        if self.note:
            out.append(self.note)
        return out


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def verdict_of(outcome: Outcome, dump: Any) -> str:
    if outcome.reproduces(dump):
        return "reproduces"
    return "passes" if outcome.status == "pass" else "fails differently"


def _judged(label: str, dump: Any, run: Any, rate: RateTest) -> EnvRun:
    """One environment's verdict: run until ``judge.rate`` decides whether the failure shows."""
    decided = rate.decide(run, lambda o: o.reproduces(dump))
    return EnvRun(label, verdict_of(decided.outcome, dump), decided.outcome, decided.runs)


def bisect_envs(dump: Any, backend: Any, pythons: list[str] | None = None, options: ReplayOptions | None = None,
                failure_rate: float | None = None) -> EnvBisection:
    opts = (options or ReplayOptions()).but(isolate=True)
    rate = RateTest.of(dump.manifest, failure_rate)
    if pythons:
        return _bisect_pythons(dump, backend, pythons, opts, rate)
    return _bisect_settings(dump, backend, opts, rate)


def _bisect_pythons(dump: Any, backend: Any, pythons: list[str], opts: ReplayOptions, rate: RateTest) -> EnvBisection:
    for python in pythons:
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise GraphdbgError(f"--python {python}: not an interpreter this user can run")
    envs = pythons if len(pythons) > 1 else [sys.executable, *pythons]
    result = EnvBisection("pythons")
    for python in envs:
        result.runs.append(_judged(python, dump, lambda p=python: replay_dump(dump, backend, opts.but(python=p)), rate))
        first, last = result.runs[0], result.runs[-1]
        if last.verdict != first.verdict:
            result.culprit = python
            result.differences = differences({"env": _comparable(first.outcome.environment)},
                                             _comparable(last.outcome.environment), {})
            if not result.differences:
                result.note = "nothing graphdbg records differs between the two: the outcome may vary from run to run"
            return result
    result.note = f"under every interpreter it {result.runs[0].verdict}"
    return result


def _comparable(env: dict[str, Any] | None) -> dict[str, Any]:
    """A child's environment without what graphdbg set for that child alone (its cache folders)."""
    env = dict(env or {})
    env["vars"] = {k: v for k, v in (env.get("vars") or {}).items() if k not in _CHILD_VARS}
    return env


def settable(found: list[Difference]) -> list[Difference]:
    """The differences a replay can set to their captured value, and may, by the allow-lists
    ``--as-captured`` restores by: a compiler setting (it differs by ``--no-config`` or
    ``--config``), a flag or a thread count within this machine's bound, an environment
    variable (``replay.as_captured.var_can_return``)."""
    trust = bool(os.environ.get(ENV_TRUST_CONFIG))
    out = []
    for d in found:
        if d.kind not in SETTABLE or d.captured == "<redacted>":
            continue
        if d.kind == "compiler setting" and (d.captured is None or restorable(d.name, d.captured, trust) is not None):
            continue
        if d.kind in ("setting", "threads") and setting_restorable(d.name, d.captured) is not None:
            continue
        if d.kind == "env var" and (d.name in _CHILD_VARS or not var_can_return(d.name, d.captured, trust)):
            continue
        out.append(d)
    return out


@contextlib.contextmanager
def applied(found: list[Difference]) -> Iterator[None]:
    """The captured values of ``found`` for the replay children started inside: compiler settings
    as ``--config`` gives them, flags and thread counts as ``--as-captured`` hands them to a
    child, environment variables in the environment the children inherit."""
    saved = {k: os.environ.get(k) for k in (ENV_OVERRIDES, ENV_AS_CAPTURED, *(d.name for d in found if d.kind == "env var"))}
    try:
        overrides = json.loads(os.environ.get(ENV_OVERRIDES) or "{}")
        overrides.update({d.name: d.captured for d in found if d.kind == "compiler setting"})
        _set(ENV_OVERRIDES, json.dumps(overrides) if overrides else None)
        flags = {d.name: d.captured for d in found if d.kind in ("setting", "threads")}
        _set(ENV_AS_CAPTURED, json.dumps(flags) if flags else None)
        for d in found:
            if d.kind == "env var":
                _set(d.name, d.captured)
        yield
    finally:
        for key, value in saved.items():
            _set(key, value)


def _set(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = str(value)


def _bisect_settings(dump: Any, backend: Any, opts: ReplayOptions, rate: RateTest) -> EnvBisection:
    found, _ = prepare(dump.manifest_data, False)
    can = settable(found)
    result = EnvBisection("settings")
    left = [d for d in found if d not in can]
    if left:
        result.note = (f"not bisected here (--python for versions and the device; recorded, not restored: see replay "
                       f"--as-captured): {', '.join(f'{d.kind} {d.name}' for d in left[:6])}"
                       + (f" and {len(left) - 6} more" if len(left) > 6 else ""))

    def judged(ds: list[Difference], label: str) -> EnvRun:
        def run() -> Outcome:
            with applied(ds):
                return replay_dump(dump, backend, opts)
        r = _judged(label, dump, run, rate)
        result.runs.append(r)
        return r

    base = judged([], "now")
    if not can:
        result.note = "nothing that differs from the capture can be set here" + (f"; {result.note}" if result.note else "")
        return result
    full = judged(can, f"with the {len(can)} captured value{'s' if len(can) > 1 else ''}")
    if full.verdict == base.verdict:
        result.note = (f"with every captured value it still {base.verdict}" + (f"; {result.note}" if result.note else ""))
        return result
    lo, hi = 0, len(can)  # the first lo captured values keep the outcome; the first hi flip it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if judged(can[:mid], f"with the first {mid}: up to {can[mid - 1].kind} {can[mid - 1].name}").verdict != base.verdict:
            hi = mid
        else:
            lo = mid
    culprit = can[hi - 1]
    result.culprit = f"{culprit.kind} {culprit.name}"
    result.differences = [culprit]
    result.alone = hi == 1 or judged([culprit], f"{culprit.kind} {culprit.name} alone").verdict != base.verdict
    return result
