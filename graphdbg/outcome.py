"""Outcome: what one replay did. pass | crash (with a signature) | mismatch | timeout.

A mismatch whose outputs depend on stand-ins (a no-op Triton kernel, a zeroed buffer, a
world-of-one collective) has ``trusted`` False and ``untrusted_because`` naming them: the
difference may come from the stand-ins, not from the backend.

    >>> outcome = case.run("inductor")
    >>> outcome.status, outcome.signature
    ('crash', 'NotImplementedError: argument of type: <class ...Stream> @ torch.cuda.set_stream')
    >>> outcome.exit_code       # 0 pass, 1 a reproduced failure

An Outcome is plain data: it goes to JSON and back, so a child process can hand it to its
parent, and the CLI can print it for CI. It is one pydantic model: the fields below are its
JSON Schema (``graphdbg schema replay``) and the check of what a child wrote (``checked``).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graphdbg.display import Displayed
from graphdbg.judge.difference import recorded_difference, same_difference
from graphdbg.judge.signature import same_signature

Status = Literal["pass", "crash", "mismatch", "timeout"]
STATUSES = get_args(Status)
RECORDED_FAILURES = ("compile_error", "runtime_error", "accuracy", "crash")  # the failure kinds a dump can show again
DIFFERENT_FAILURE = 4  # the exit code of a replay that failed, but not the way the dump recorded: not "the bug is still there"


class Outcome(Displayed, BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Status
    backend: str
    signature: str | None = None
    stage: str | None = None  # where it failed: "pass:<name>", "compile", "run", "reference", "child"
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    node: str | None = None  # the failing node's name, when known
    node_target: str | None = None
    mismatches: list[dict[str, Any]] = Field(default_factory=list)  # each with its output's ``index``
    diverges_at: dict[str, Any] | None = None  # a mismatch's first node off the reference, where cheap (replay/divergence.py)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    reference: str | None = None  # what judged the outputs: "eager", "float64", "float64 on cpu", ...
    reference_error: str | None = None  # why no float64 reference could be computed, when one was needed
    compared: str | None = None  # how many values of how many outputs were compared, and how (judge.accuracy.compared_note)
    trusted: bool = True  # False: a mismatching output depends on stand-ins, so may not be a backend bug
    untrusted_because: str | None = None  # which stand-ins the mismatching outputs depend on
    passes: list[dict[str, Any]] = Field(default_factory=list)
    stand_ins: list[str] = Field(default_factory=list)
    # per custom op and user Triton kernel: {"kernel", "kind", "calls", "ran": real | from the dump | stand-in, "why"}
    kernels: list[dict[str, Any]] = Field(default_factory=list)
    device: str | None = None
    isolated: bool = False
    sandbox: str | None = None  # an isolated child's: "landlock (...)" or "none (why)" (execution/sandbox.py)
    exit_signal: str | None = None
    exit_code_child: int | None = None
    stderr_tail: str | None = None
    generated_code: dict[str, Any] | None = None  # what Inductor generated, hashed (backends/generated_code.py)
    environment: dict[str, Any] | None = None  # the child's versions and settings, when asked (bisect envs; store.environment)
    compile_s: float | None = None
    run_s: float | None = None
    total_s: float | None = None

    @property
    def failed(self) -> bool:
        return self.status != "pass"

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "pass" else 1

    @field_validator("mismatches")
    @classmethod
    def _indexed(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any("index" not in m for m in value):
            raise ValueError("a mismatch without its output's index")
        return value

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        return cls.model_validate(d)

    @classmethod
    def checked(cls, data: Any) -> Outcome:
        """``data`` (JSON another process wrote) as an Outcome, with no value coerced; a
        ValueError naming the first bad field otherwise."""
        try:
            return cls.model_validate(data, strict=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "outcome"
            raise ValueError(f"{where}: {first['msg']}") from None

    def same_failure(self, other: Outcome) -> bool:
        """Do two outcomes show the same bug? Crashes compare by signature, mismatches by output."""
        if self.status != other.status:
            return False
        if self.status == "crash":
            return same_signature(self.signature, other.signature)
        if self.status == "mismatch":
            return {m["index"] for m in self.mismatches} == {m["index"] for m in other.mismatches} or not self.mismatches
        return True

    def reproduces(self, dump: Any, *, same_size: bool = True) -> bool:
        """Does this outcome show the failure ``dump`` recorded? An accuracy failure is shown by
        a mismatch of the same kind (``difference_from``), where the dump recorded its size;
        ``same_size=False``: by any mismatch (minify's smaller graphs have other outputs)."""
        kind = dump.failure_kind
        if kind == "accuracy":
            return self.status == "mismatch" and not (same_size and self.difference_from(dump))
        if kind in ("compile_error", "runtime_error", "crash"):
            return self.status == "crash" and same_signature(self.signature, dump.signature)
        return False

    def fails_differently(self, dump: Any) -> bool:
        """It failed, but not the way ``dump`` recorded (for a dump that recorded no failure, any
        failure is its failure). The one test of the CLI's exit 4, the pytest plugin's error and
        a notebook's ``outcome.fails_differently(dump)``."""
        return self.failed and dump.failure_kind in RECORDED_FAILURES and not self.reproduces(dump)

    def exit_code_for(self, dump: Any) -> int:
        """A replay of ``dump``'s exit code: 0 pass, 1 the captured failure again (any failure, for
        a dump that recorded none), 4 (``DIFFERENT_FAILURE``) another failure."""
        return DIFFERENT_FAILURE if self.fails_differently(dump) else self.exit_code

    def difference_from(self, dump: Any) -> str | None:
        """How this mismatch differs from the accuracy failure ``dump`` recorded (``output 0 off
        by 0.241, captured 0.0025``); None when it is the same kind of difference, or the dump
        didn't record its size (dumps written before graphdbg did)."""
        captured = (dump.manifest_data.get("failure") or {}).get("mismatches")
        if self.status != "mismatch" or dump.failure_kind != "accuracy" or not recorded_difference(captured):
            return None
        replayed = self.mismatches
        if dump.manifest.is_backward:  # a backward graph's outputs are the gradients, whichever word a run used
            captured, replayed = ([{**m, "what": "gradient"} for m in ms] for ms in (captured, replayed))
        return same_difference(captured, replayed)

    def summary(self) -> str:
        if self.status == "pass":
            return f"pass ({self.backend}, {self.total_s or 0:.2f}s)"
        if self.status == "mismatch":
            worst = max(self.mismatches, key=lambda m: m.get("max_abs_error") or 0, default=None)
            where = f"output {worst['index']}" if worst else "outputs"
            text = f"mismatch at {where}: max abs error {self.max_abs_error:.3g}" if self.max_abs_error is not None else f"mismatch at {where}"
            return text if self.trusted else f"{text} (untrusted: {self.untrusted_because})"
        return f"{self.status}: {self.signature}"
