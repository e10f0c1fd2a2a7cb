"""The manifest's schema: what a dump may say, checked before anything reads it.

A dump is untrusted input (it comes from a bug report or a CI artifact), so every field is
checked for type, range and size by one pydantic model, the same one the dump writer checks
against before it writes. A violation is one line naming the field:

    >>> validate_manifest({"schema": "graphdbg.dump", "dist": {"rank": "zero"}, ...}, where="d/manifest.json")
    DumpError: d/manifest.json: dist.rank: must be an integer (got 'zero')
    >>> print(json.dumps(manifest_json_schema())[:40])      # `graphdbg schema`
    {"$defs": {"Dist": {"additionalProperties"

Readers of other tools' files (printed graphs, minifier repros, compile caches) build their
manifests in memory; they are checked by the same model, so extra keys are allowed where a
format adds its own, but every key graphdbg reads has a type and a bound.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.functional_validators import PlainValidator
from pydantic.json_schema import WithJsonSchema

from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.store.symbolic_sizes import (
    MAX_NUMEL,  # elements of one tensor: 64 Gi elements is past any one device's memory
    check_numel,
    eval_dim,
)

MAX_MANIFEST_BYTES = 64 << 20  # node_info of a 100k-node graph is a few MB
MAX_DEPTH = 24  # deepest real manifest: inputs[i].items[j].items[k].stats (describe_value stops at 3)
MAX_DIM = 1 << 62  # one size, stride or offset
MAX_INT = 1 << 63  # other integers (hints, counts, byte sizes)
MAX_RANKS = 1 << 20
MAX_NAME = 4096  # ids, names, keys, types
MAX_TEXT = 4 << 20  # messages and tracebacks
MAX_ITEMS = 1 << 20  # inputs, ops, node_info entries
MAX_EXPR = 512  # characters of one symbolic size expression

_SYMBOLIC = re.compile(r"[A-Za-z0-9_+\-*/%(), .]{1," + str(MAX_EXPR) + "}")


# Field types -----------------------------------------------------------------------------

def _int_range(lo: int, hi: int):
    return Annotated[int, Field(strict=True, ge=lo, le=hi)]


Name = Annotated[str, Field(strict=True, max_length=MAX_NAME)]
Text = Annotated[str, Field(strict=True, max_length=MAX_TEXT)]
Count = _int_range(0, MAX_INT)
Rank = _int_range(0, MAX_RANKS)
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _dim(value: Any) -> int | str:
    """A size: an int in range, or a short symbolic expression (``s0``, ``8*s27``)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be an integer or a symbolic expression (got {_shown(value)})")
    if isinstance(value, int):
        if not -MAX_DIM <= value <= MAX_DIM:
            raise ValueError(f"must be at most {MAX_DIM} in size (got {_shown(value)})")
        return value
    if not _SYMBOLIC.fullmatch(value):
        raise ValueError(f"not a symbolic size expression (got {_shown(value)})")
    return value


_DIM_SCHEMA = {"anyOf": [{"type": "integer", "minimum": -MAX_DIM, "maximum": MAX_DIM},
                         {"type": "string", "maxLength": MAX_EXPR, "pattern": _SYMBOLIC.pattern}]}
Dim = Annotated[Union[int, str], PlainValidator(_dim), WithJsonSchema(_DIM_SCHEMA)]
Dims = Annotated[list[Dim], Field(max_length=64)]


def _hint(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise ValueError(f"must be at most {MAX_INT} in size (got {_shown(value)})")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number (got {value!r})")
        return value
    raise ValueError(f"must be a number, a bool or null (got {_shown(value)})")


Hint = Annotated[Any, PlainValidator(_hint),
                 WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]})]


_DEVICE = r"^(cpu|cuda|meta|mps|xpu|hpu|mtia|xla|lazy|ipu|privateuseone)(:[0-9]{1,5})?$"


class _Open(BaseModel):
    """Known keys typed, unknown keys kept (a format may add its own). A ``null`` where a key is
    optional means the key is absent: its default (an empty list, None, ...) is what is read."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            optional = _optional_keys(cls)
            data = {k: v for k, v in data.items() if not (v is None and k in optional)}
        return data


def _optional_keys(model: type[BaseModel]) -> frozenset[str]:
    keys = _OPTIONAL.get(model)
    if keys is None:
        keys = _OPTIONAL[model] = frozenset(f.alias or name for name, f in model.model_fields.items() if not f.is_required())
    return keys


_OPTIONAL: dict[type, frozenset[str]] = {}


# The parts of a manifest -----------------------------------------------------------------

class Stats(_Open):
    numel: Optional[Count] = None
    nan: Optional[Count] = None
    inf: Optional[Count] = None
    min: Optional[Finite] = None
    max: Optional[Finite] = None
    mean: Optional[Finite] = None
    std: Optional[Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]] = None
    sampled: Optional[Count] = None  # the statistics are of this many evenly spaced elements

    @field_validator("numel")
    @classmethod
    def _numel_bounded(cls, v: int | None) -> int | None:
        if v is not None and v > MAX_NUMEL:
            raise ValueError(f"{v} elements is more than graphdbg will make (at most 2**36)")
        return v


class ValueDesc(_Open):
    """One input, attribute or external object: a tensor spec, a scalar, a stream, ..."""

    kind: Annotated[str, Field(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
    name: Optional[Name] = None
    node: Optional[Name] = None
    index: Optional[Count] = None
    dtype: Optional[Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.]{1,64}$")]] = None
    shape: Optional[Dims] = None
    stride: Optional[Dims] = None
    symbolic_shape: Optional[Dims] = None
    symbolic_stride: Optional[Dims] = None
    device: Optional[Annotated[str, Field(strict=True, pattern=_DEVICE)]] = None
    requires_grad: Optional[bool] = None
    storage_offset: Optional[Dim] = None
    stored: Optional[Name] = None
    stats: Optional[Stats] = None
    reason: Optional[Text] = None
    expr: Optional[Annotated[str, Field(strict=True, max_length=MAX_EXPR)]] = None
    hint: Hint = None
    type: Optional[Name] = None
    items: Optional[Annotated[list["ValueDesc"], Field(max_length=MAX_ITEMS)]] = None

    @model_validator(mode="after")
    def _tensor_has_spec(self) -> "ValueDesc":
        extra = self.__pydantic_extra__ or {}
        if "value" in extra:
            _check_value(self.kind, extra["value"])
        if self.stride is not None and self.shape is not None and len(self.stride) != len(self.shape):
            raise ValueError(f"stride has {len(self.stride)} dims, shape has {len(self.shape)}")
        for key in ("stride", "symbolic_stride"):
            if any(isinstance(d, int) and d < 0 for d in getattr(self, key) or []):
                raise ValueError(f"{key} has a negative step")
        if isinstance(self.storage_offset, int) and self.storage_offset < 0:
            raise ValueError("storage_offset is negative")
        if self.kind == "tensor":
            if self.dtype is None:
                raise ValueError("a tensor needs a dtype")
            if self.shape is None:
                raise ValueError("a tensor needs a shape")
            n = 1
            for d in self.shape:
                if isinstance(d, int):
                    if d < 0:
                        raise ValueError(f"shape has a negative size ({d})")
                    n *= d
                    if n > MAX_NUMEL:
                        raise ValueError(f"shape {str(self.shape)[:60]} has more than 2**36 elements; "
                                         "graphdbg will not make a tensor that large")
        return self


def _check_value(kind: str, value: Any) -> None:
    """A scalar input's ``value`` has the type its ``kind`` says (replay passes it on as is)."""
    ok = {
        "int": lambda v: type(v) is int and abs(v) <= MAX_INT,
        "bool": lambda v: type(v) is bool,
        "float": lambda v: (type(v) in (int, float) and math.isfinite(v)) or v in ("nan", "inf", "-inf"),
        "str": lambda v: isinstance(v, str) and len(v) <= MAX_TEXT,
        "device": lambda v: isinstance(v, str) and re.fullmatch(_DEVICE, v) is not None,
        "dtype": lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_.]{1,64}", v) is not None,
    }.get(kind)
    if ok is not None and not ok(value):
        raise ValueError(f"value is not a valid {kind} (got {_shown(value)})")


class ExceptionInfo(_Open):
    type: Optional[Name] = None
    qualified_type: Optional[Name] = None
    message: Optional[Text] = None
    traceback: Optional[Text] = None


Error = Annotated[float, Field(strict=False)]  # infinite where infinities differ; an int is a float here


class Mismatch(_Open):
    """One output (or written input) off the reference, and by how much (``judge.accuracy``):
    what a replay's difference is compared with (``judge.difference``)."""

    index: Count
    reason: Name  # value, nan, dtype, shape, type, structure
    what: Optional[Name] = None  # "output" unless an in-place write or a gradient
    max_abs_error: Optional[Error] = None
    max_rel_error: Optional[Error] = None
    rtol: Optional[Error] = None
    atol: Optional[Error] = None
    detail: Optional[Text] = None
    differing: Optional[Count] = None
    at: Optional[Annotated[list[Annotated[list[int], Field(max_length=64)]], Field(max_length=64)]] = None
    off: Optional[Count] = None  # elements outside tolerance, NaN and infinities where eager has none included
    elements: Optional[Count] = None  # of this many


class LogRecord(_Open):
    """Where a printed graph's failure came from: the run's log beside it (``formats/run_log.py``)."""
    path: Text
    line: Optional[Count] = None
    occurrences: Count = 1
    how: Text = ""
    ranks: Annotated[list[Rank], Field(max_length=MAX_RANKS)] = []
    rank_source: Optional[Name] = None
    rank_how: Optional[Text] = None
    inferred: bool = False
    text: Optional[Text] = None


class Calls(_Open):
    """Calls of the failing graph at capture that raised and that did not (``capture.seen``)."""
    passed: Optional[Count] = None
    failed: Optional[Count] = None


class Failure(_Open):
    kind: Name
    exception: Optional[ExceptionInfo] = None
    signature: Optional[Text] = None
    message: Optional[Text] = None
    mismatches: Optional[Annotated[list[Mismatch], Field(max_length=MAX_ITEMS)]] = None
    signal: Optional[Name] = None
    node: Optional[Name] = None  # the graph node the failure happened in, when capture could tell
    seen: Optional[Count] = None  # times this failure was captured into this dump's folder (capture/dedupe.py)
    last_seen: Optional[Name] = None  # when it was last captured, ISO 8601
    calls: Optional[Calls] = None  # a failure of the compiled code: the graph's calls that failed and that did not
    source: Optional[Name] = None  # "log": a printed graph's failure, read from the run's log (``log``)
    backend: Optional[Text] = None  # the backend that run's log names
    log: Optional[LogRecord] = None

    @property
    def from_log(self) -> Optional[LogRecord]:
        """The log record, where the failure came from a run's log."""
        return self.log if self.source == "log" else None


class NodeInfo(_Open):
    module: Optional[Name] = None
    module_type: Optional[Name] = None


class Graph(_Open):
    file: Optional[Name] = None
    hash: Annotated[str, Field(strict=True, pattern=r"^[0-9a-fA-F]{0,128}$")] = ""
    nodes: Count = 0
    ops: Annotated[dict[Name, Count], Field(max_length=MAX_ITEMS)] = {}
    node_info: Annotated[dict[Name, NodeInfo], Field(max_length=MAX_ITEMS)] = {}

    @property
    def node_modules(self) -> dict[str, str]:
        """Node name -> the nn.Module it came from, where capture recorded one."""
        return {name: info.module for name, info in self.node_info.items() if info.module}


class Dist(_Open):
    rank: Rank = 0
    local_rank: Optional[Rank] = None
    world_size: _int_range(1, MAX_RANKS) = 1
    source: Optional[Name] = None
    backend: Optional[Name] = None
    collectives: Optional[Annotated[list[dict[str, Any]], Field(max_length=MAX_ITEMS)]] = None

    @model_validator(mode="after")
    def _rank_in_world(self) -> "Dist":
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        return self


class DeviceInfo(_Open):
    name: Optional[Name] = None
    capability: Optional[Annotated[str, Field(strict=True, pattern=r"^[0-9]{1,3}\.[0-9]{1,3}$")]] = None
    memory_bytes: Optional[Count] = None


Scalar = Optional[Union[bool, Annotated[int, Field(strict=True, ge=-MAX_INT, le=MAX_INT)], Finite, Name]]


class Env(_Open):
    """What decides the outcome besides the graph (``store.environment``); ``judge.environment``
    compares it with a replay's."""
    graphdbg: Optional[Name] = None
    torch: Optional[Name] = None
    triton: Optional[Name] = None
    backend_package: Optional[Name] = None
    backend_version: Optional[Name] = None
    python: Optional[Name] = None
    cuda: Optional[Name] = None
    driver: Optional[Name] = None
    hostname: Optional[Name] = None
    argv: Optional[Annotated[list[Text], Field(max_length=4096)]] = None
    cuda_devices: Optional[Count] = None
    device: Optional[DeviceInfo] = None
    settings: Optional[Annotated[dict[Name, Scalar], Field(max_length=256)]] = None
    device_name: Optional[Name] = None
    vars: Optional[Annotated[dict[Annotated[str, Field(strict=True, max_length=256)], Name], Field(max_length=4096)]] = None


class GeneratedCode(_Open):
    """What Inductor generated for the graph at capture, hashed (``backends.generated_code``)."""
    compiler: Optional[Name] = None
    hash: Optional[Name] = None
    graphs: Optional[Annotated[list[Name], Field(max_length=64)]] = None
    autotune: Optional[Annotated[dict[Name, Name], Field(max_length=1024)]] = None


_SETTING = r"^(inductor|dynamo|functorch)\.[A-Za-z_][A-Za-z0-9_.]{0,200}$"


class Config(_Open):
    """Compiler settings recorded at capture (``backends.compiler_config``): which ones are
    restored is trust's decision; here only their shape is checked."""
    values: Annotated[dict[Annotated[str, Field(strict=True, pattern=_SETTING)], Any], Field(max_length=4096)] = {}
    skipped: Annotated[dict[Name, Text], Field(max_length=4096)] = {}


PieceRef = Optional[Union[Count, Name, bool]]


class Parent(_Open):
    """The graph this one is a piece of (``capture.nested``)."""
    seq: Optional[Count] = None
    graph_hash: Optional[Annotated[str, Field(strict=True, pattern=r"^[0-9a-fA-F]{0,128}$")]] = None
    backend: Optional[Text] = None
    phase: Optional[Name] = None
    piece: PieceRef = None
    position: PieceRef = None
    call: PieceRef = None
    id: Optional[Name] = None
    dir: Optional[Name] = None


class Child(_Open):
    id: Optional[Name] = None
    dir: Optional[Name] = None
    piece: PieceRef = None
    position: PieceRef = None
    call: PieceRef = None
    kind: Optional[Name] = None
    backend: Optional[Text] = None
    signature: Optional[Text] = None


class Origin(_Open):
    """Where Dynamo compiled the graph from."""
    function: Optional[Name] = None
    file: Optional[Text] = None
    line: Optional[Count] = None
    compile_id: Optional[Name] = None


Scalar = Optional[Union[bool, int, Finite, Text]]  # a constexpr, a grid size or a config value: JSON's scalars
ScalarOrList = Union[Scalar, Annotated[list[Union[Scalar, Annotated[list[Scalar], Field(max_length=64)]]], Field(max_length=64)]]


class CustomOp(_Open):
    """A custom op the graph calls (graph/kernels.py): where it came from and whether it has a fake impl."""
    name: Name
    schema_: Optional[Text] = Field(default=None, alias="schema")
    module: Optional[Name] = None
    package: Optional[Name] = None
    version: Optional[Name] = None
    has_fake: Optional[bool] = None
    calls: Optional[Count] = None

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class TritonConfig(_Open):
    kwargs: Optional[Annotated[dict[Name, Scalar], Field(max_length=256)]] = None
    num_warps: Optional[Count] = None
    num_stages: Optional[Count] = None
    num_ctas: Optional[Count] = None


class TritonGlobal(_Open):
    """A global name a kernel's source refers to: a module's name, a constant, or a helper's source."""
    name: Name
    module: Optional[Name] = None
    constexpr: Optional[Scalar] = None
    value: Optional[Scalar] = None
    source: Optional[Text] = None


class TritonKernel(_Open):
    """A user Triton kernel the graph calls by ``kernel_idx``; its source is text, never run on load."""
    kernel_idx: Count
    calls: Optional[Count] = None
    name: Optional[Name] = None
    module: Optional[Name] = None
    source: Optional[Text] = None
    grid: Optional[ScalarOrList] = None
    constant_args: Optional[Annotated[dict[Name, ScalarOrList], Field(max_length=4096)]] = None
    constant_args_by_call: Optional[Annotated[dict[Name, Annotated[dict[Name, ScalarOrList], Field(max_length=4096)]],
                                              Field(max_length=MAX_ITEMS)]] = None  # by constant_args_idx
    autotune_configs: Optional[Annotated[list[TritonConfig], Field(max_length=4096)]] = None
    chosen_config: Optional[TritonConfig] = None
    triton_version: Optional[Name] = None
    globals: Optional[Annotated[list[TritonGlobal], Field(max_length=4096)]] = None


class BackendSource(_Open):
    """Where the backend came from; importing it is trust's decision (``--trust-backend``)."""
    name: Optional[Name] = None
    module: Optional[Name] = None
    qualname: Optional[Name] = None
    instance: Optional[bool] = None
    script: Optional[Text] = None  # the user's script that defines it
    path: Optional[Text] = None  # the module's file, where the backend is a module of the user's


class MinifyStep(_Open):
    pass_name: Optional[Name] = None
    nodes_before: Optional[Count] = None
    nodes_after: Optional[Count] = None
    queries: Optional[Count] = None
    seconds: Optional[Annotated[float, Field(strict=False, allow_inf_nan=False, ge=0)]] = None


class Minified(_Open):
    """What ``minify`` recorded about the run that made this dump."""
    from_: Optional[Text] = Field(default=None, alias="from")
    backend: Optional[Text] = None
    passes: Optional[Union[Text, Annotated[list[Name], Field(max_length=256)]]] = None
    direct: Optional[bool] = None
    start_nodes: Optional[Count] = None
    final_nodes: Optional[Count] = None
    oracle_queries: Optional[Count] = None
    interrupted: bool = False
    steps: Annotated[list[MinifyStep], Field(max_length=MAX_ITEMS)] = []
    out: Optional[Text] = None

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class BackendRecipe(_Open):
    """aot_autograd(...) / partial(...), as ``backends.recipe`` writes it (checked in full there)."""
    kind: Literal["aot_autograd", "partial"]


class Backward(_Open):
    roles: Optional[Annotated[list[Name], Field(max_length=MAX_ITEMS)]] = None
    compiler: Optional[Text] = None
    forward_backend: Optional[Text] = None


class DDPBucket(_Open):
    """One gradient bucket of DDP's split (``capture.ddp``): its parameters' bytes and names."""
    bytes: Optional[Count] = None
    params: Optional[Annotated[list[Name], Field(max_length=MAX_ITEMS)]] = None
    param_count: Optional[Count] = None
    nodes: Optional[Count] = None


class DDPSplit(DDPBucket):
    """Dynamo's DDP optimizer split the graph at bucket boundaries (``capture.ddp``): the whole
    graph's dump lists every bucket; a piece's names its own (``submod_<bucket>``)."""
    bucket_bytes_cap: Optional[Count] = None
    first_bucket_cap: Optional[Count] = None
    buckets: Optional[Annotated[list[DDPBucket], Field(max_length=MAX_ITEMS)]] = None
    piece: Optional[Name] = None
    bucket: Optional[Count] = None
    bucket_count: Optional[Count] = None


class PrintedGraphFacts(_Open):
    """A printed graph's own facts (``formats/printed_file.py``), under ``printed_graph``
    (``foreign`` in manifests saved by earlier versions)."""
    model: Optional[Name] = None  # the model it belongs to: its folder's name
    graph_number: Optional[Count] = None  # G of a printed ``# Rank: R, Graph G`` header
    group_hash: Optional[Name] = None  # the hash with rank-specific literals masked: equal on every rank of one graph
    rank_literals: Annotated[list[Any], Field(max_length=MAX_ITEMS)] = []
    constructs: Annotated[list[Name], Field(max_length=MAX_ITEMS)] = []  # what replay stands in for
    captured_device: Optional[Name] = None  # the device its literals name


class CompileCacheLocation(_Open):
    """Where a compile-cache file sits (``formats/compile_cache.py``: vLLM's or SGLang's cache folder)."""
    rank: Optional[Rank] = None
    dp_rank: Optional[Count] = None
    tag: Optional[Name] = None
    hash: Optional[Name] = None
    root: Optional[Text] = None


class MinifierFacts(_Open):
    """A PyTorch minifier script's own facts (``formats/torch_repro.py``)."""
    variant: Optional[Name] = None  # after_aot or after_dynamo
    store: Optional[Text] = None


class Manifest(_Open):
    """manifest.json of a graphdbg dump (``graphdbg.dump``), or one a reader built (``graphdbg.foreign``)."""

    schema_: Literal["graphdbg.dump", "graphdbg.foreign"] = Field(alias="schema")
    schema_version: Optional[_int_range(1, 1 << 20)] = None
    id: Name
    created: Optional[Name] = None
    format: Optional[Name] = None
    env: Optional[Env] = None
    dist: Dist = Dist()
    backend: Optional[Name] = None
    mode: Optional[Name] = None
    grad_enabled: bool = False
    failure: Failure
    graph: Graph
    inputs_file: Name = "inputs.safetensors"
    inputs_state: Optional[Name] = None
    budget_bytes: Optional[Count] = None
    stored_bytes: Optional[Count] = None
    inputs: Annotated[list[ValueDesc], Field(max_length=MAX_ITEMS)]
    attrs: Annotated[dict[Name, ValueDesc], Field(max_length=MAX_ITEMS)] = {}
    external_objects: Annotated[list[ValueDesc], Field(max_length=MAX_ITEMS)] = []
    custom_ops: Annotated[list[CustomOp], Field(max_length=MAX_ITEMS)] = []
    triton_kernels: Annotated[list[TritonKernel], Field(max_length=MAX_ITEMS)] = []
    redacted: Optional[bool] = None
    config: Config = Config()
    parent: Optional[Parent] = None
    children: Annotated[list[Child], Field(max_length=MAX_ITEMS)] = []
    origin: Optional[Origin] = None
    backend_source: Optional[BackendSource] = None
    minified: Optional[Minified] = None
    backward_dump: Optional[Literal[".."]] = None  # a forward dump lies inside its backward dump
    backward: Optional[Backward] = None
    forward: Optional[Name] = None
    stage: Optional[Name] = None
    failed: Optional[Name] = None
    backend_recipe: Optional[BackendRecipe] = None
    autocast: Optional[Annotated[dict[Name, Name], Field(max_length=8)]] = None  # device type -> dtype, the caller's
    ddp: Optional[DDPSplit] = None
    generated_code: Optional[GeneratedCode] = None  # Inductor's output code, hashed, and its autotune choices
    # a format's own facts, each under its own key (formats/)
    printed_graph: Optional[PrintedGraphFacts] = None
    foreign: Optional[PrintedGraphFacts] = None  # printed_graph, as manifests saved by earlier versions name it
    compile_cache: Optional[CompileCacheLocation] = None
    missing_ops: Annotated[list[Name], Field(max_length=MAX_ITEMS)] = []  # ops this torch lacks (a compile cache's graph)
    minifier: Optional[MinifierFacts] = None

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    # Facts read from the fields above, defined once -----------------------------------------
    @property
    def printed(self) -> PrintedGraphFacts:
        """A printed graph's own facts, under either of its names (all None or empty for other sources)."""
        return self.printed_graph or self.foreign or PrintedGraphFacts()

    @property
    def is_printed(self) -> bool:
        return (self.printed_graph or self.foreign) is not None

    @property
    def failure_kind(self) -> str:
        return "printed_graph" if self.failure.kind == "foreign" else self.failure.kind  # a printed graph's old name

    @property
    def fmt(self) -> str:
        """``dump`` for graphdbg's own folders, else the reader's name (``printed_graph``, ...)."""
        return self.format or "dump"

    @property
    def captured(self) -> bool:
        """A graphdbg capture records its environment; another tool's file doesn't."""
        return self.env is not None and bool(self.env.torch)

    @property
    def needs_trust(self) -> bool:
        """Replaying it imports code the dump names (a module:callable or a recipe): --trust-backend."""
        return ":" in (self.backend or "") or self.backend_recipe is not None

    @property
    def piece(self) -> bool:
        """A piece of a nested compile: it reached its compiler as a GraphModule, never through Dynamo."""
        return self.parent is not None and bool(self.parent.piece)

    @property
    def is_backward(self) -> bool:
        """A backward dump: its graph is the backward itself, replayed alone."""
        return self.stage == "backward"

    @property
    def fails_in_backward(self) -> bool:
        """A forward whose failure was in its backward: it replays forward then backward."""
        return self.stage == "forward" and self.failed == "backward"

    @model_validator(mode="after")
    def _sizes_bounded(self) -> "Manifest":
        """Every size, symbolic or not, evaluates within bounds: a dump's own sizes are integers,
        and an expression (``9**9**9``) is evaluated here, by the bounded evaluator, so a hostile
        one is refused at load instead of hanging whatever reads it later."""
        env = _SmallSymbols({d.expr: d.hint for d in self.inputs if d.kind == "symint" and isinstance(d.hint, int)
                             and not isinstance(d.hint, bool) and d.expr and d.expr.isidentifier()})
        own_dump = self.schema_ == "graphdbg.dump" and self.format is None  # not built by another reader
        described = [(f"inputs[{i}]", d) for i, d in enumerate(self.inputs)]
        described += [(f"attrs.{q}", d) for q, d in (self.attrs or {}).items()]
        described += [(f"external_objects[{i}]", d) for i, d in enumerate(self.external_objects or [])]
        while described:
            where, d = described.pop()
            described += [(f"{where}.items[{i}]", item) for i, item in enumerate(d.items or [])]
            for key in ("shape", "stride", "symbolic_shape", "symbolic_stride"):
                dims = getattr(d, key)
                for j, dim in enumerate(dims or []):
                    if own_dump and key in ("shape", "stride") and not isinstance(dim, int):
                        raise ValueError(f"{where}.{key}[{j}]: must be an integer (got {_shown(dim)})")
                    if isinstance(dim, str):
                        try:
                            eval_dim(dim, env)
                        except GraphdbgError as e:
                            raise ValueError(f"{where}.{key}[{j}]: {e}") from None
                if key in ("shape", "symbolic_shape") and dims and any(isinstance(x, str) for x in dims):
                    try:
                        check_numel([eval_dim(x, env) for x in dims], "tensor")
                    except GraphdbgError as e:
                        raise ValueError(f"{where}.{key}: {e}") from None
        return self


class _SmallSymbols(dict):
    """Symbol values for checking expressions: recorded hints, else 2 (a printed graph's
    symbols have no hint; replay picks their sizes later, within the same bounds)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> int:
        return dict.get(self, key, 2)


# Checking ----------------------------------------------------------------------------------

def load_manifest_text(text: str | bytes, where: str) -> Any:
    """``json.loads`` with bounds: size, and nesting depth checked before parsing."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise DumpError(f"{where}: manifest is {len(text)} bytes, more than graphdbg reads ({MAX_MANIFEST_BYTES})")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DumpError(f"{where}: malformed manifest (not UTF-8 at byte {e.start})") from None
    # A run of MAX_DEPTH + 1 opening brackets is the cheap sign of a nesting attack (found by the
    # regex engine at C speed); only then is the exact, string-aware scan paid for. Deep nesting
    # with keys in between is caught by json's own recursion limit and by validate_manifest.
    depth = _max_depth(text) if _OPENERS.search(text) else 0
    if depth > MAX_DEPTH:
        raise DumpError(f"{where}: malformed manifest (JSON nested {depth} deep; at most {MAX_DEPTH})")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise DumpError(f"{where}: malformed manifest ({type(e).__name__}: {first})") from None


_OPENERS = re.compile(r"[\[{](?:\s*[\[{]){%d}" % MAX_DEPTH)
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _max_depth(text: str) -> int:
    """Deepest bracket nesting outside strings; stops counting past MAX_DEPTH (cheap on 64 MB)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def validate_manifest(data: Any, where: str) -> dict[str, Any]:
    """Check ``data`` against :class:`Manifest`; DumpError naming the first bad field if it fails."""
    manifest_model(data, where)
    return data


def manifest_model(data: Any, where: str) -> Manifest:
    """``data`` as the :class:`Manifest` model (``Dump.manifest``); DumpError naming the first bad field."""
    if _value_depth(data) > MAX_DEPTH:
        raise DumpError(f"{where}: manifest nested more than {MAX_DEPTH} deep")
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise DumpError(f"{where}: {_first_error(e)}") from None
    except RecursionError:
        raise DumpError(f"{where}: manifest nested too deep") from None


def _value_depth(value: Any) -> int:
    """Nesting depth of a JSON-like value, iteratively (a deep value must not blow the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((c, depth + 1) for c in children)
    return deepest


_SAYS = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "missing": "is required",
    "literal_error": "is not a value graphdbg knows",
}


def _first_error(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    field = _field_path(err["loc"])
    kind = err["type"]
    if kind in _SAYS:
        says = _SAYS[kind]
    elif kind in ("value_error", "assertion_error"):
        says = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    else:
        says = err["msg"][:1].lower() + err["msg"][1:]
    quiet = kind == "missing" or "(got " in says or (kind == "value_error" and isinstance(err.get("input"), dict))
    got = "" if quiet else f" (got {_shown(err.get('input'))})"
    if not field and re.match(r"^[\w.\[\]]+: ", says):  # a whole-manifest check names its own field
        return f"{says}"
    return f"{field or 'manifest'}: {says}{got}"


def _field_path(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "schema_":
            text += ".schema" if text else "schema"
        else:
            text += f".{part}" if text else str(part)
    return text


def _shown(value: Any, limit: int = 40) -> str:
    if isinstance(value, (dict, list)):
        kind = "an object" if isinstance(value, dict) else "a list"
        return f"{kind} of {len(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 96:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def manifest_json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema (draft 2020-12), as ``graphdbg schema`` prints it."""
    schema = Manifest.model_json_schema(by_alias=True)
    schema["$id"] = "https://graphdbg/manifest.schema.json"
    schema["title"] = "graphdbg dump manifest"
    return schema


__all__ = ["Manifest", "validate_manifest", "manifest_model", "load_manifest_text", "manifest_json_schema", "MAX_NUMEL"]
