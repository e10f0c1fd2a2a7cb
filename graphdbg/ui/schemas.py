"""JSON Schemas (draft 2020-12) of every command's ``--json`` output, as ``graphdbg schema NAME``
prints them. Each object output carries ``graphdbg`` (the version that wrote it) and ``schema``
(the name here). Keys are only added, never renamed or removed, without a version bump, so the
schemas allow keys they don't list."""

from __future__ import annotations

from typing import Any

from graphdbg.errors import GraphdbgError
from graphdbg.outcome import Outcome

_STR = {"type": ["string", "null"]}
_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_BOOL = {"type": "boolean"}
_LIST = {"type": "array"}
_OBJ = {"type": "object"}
_HEAD = {"graphdbg": {"type": "string"}, "schema": {"type": "string"}}

_OUTCOME: dict[str, Any] = Outcome.model_json_schema()["properties"]  # the model is the one definition
# judge.environment's differences, most likely cause of another outcome first; what --as-captured left
_ENVIRONMENT = {
    "environment_differences": {"type": "array", "items": {"type": "object", "properties": {
        "kind": {"enum": ["generated code", "backend", "compiler setting", "version", "device", "setting", "env var", "threads"]},
        "name": {"type": "string"}, "captured": {}, "now": {}, "restorable": _BOOL, "read_by_backend": _BOOL},
        "required": ["kind", "name", "captured", "now", "restorable"]}},
    "not_restored": {"type": "array", "items": {"type": "string"}},
}
# --repeat N (judge.flaky)
_REPEAT = {"repeat": {"type": "object", "properties": {
    "runs": {"type": "integer"}, "failed": {"type": "integer"}, "reproduced": {"type": "integer"}, "rate": {"type": "number"},
    "interval": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}, "confidence": {"type": "number"},
    "signatures": {"type": "array", "items": {"type": "object", "properties": {
        "signature": {"type": "string"}, "count": {"type": "integer"}, "reproduces": _BOOL}}}, "ran": {"type": "string"}},
    "required": ["runs", "failed", "rate", "interval", "signatures"]}}
_ROW = {"path": {"type": "string"}, "id": _STR, "kind": _STR, "backend": _STR, "nodes": _INT, "signature": _STR,
        "error_type": _STR, "message": _STR, "graph_hash": _STR}

# per custom op and user Triton kernel of the graph, how it ran (rebuild/kernel_source.py: kernels_ran)
_KERNELS = {"type": "array", "items": {"type": "object", "properties": {
    "kernel": {"type": "string"}, "kind": {"enum": ["custom_op", "triton_kernel"]}, "calls": {"type": "integer"},
    "ran": {"enum": ["real", "from the dump", "stand-in"]}, "why": _STR}, "required": ["kernel", "kind", "ran"]}}

# each swap and what its built-in reference assumed (judge/references.py: fit)
_SWAPS = {"type": "array", "items": {"type": "object", "properties": {
    "op": {"type": "string"}, "reference": {"type": "string"}, "assumptions": {"type": "array", "items": {
        "type": "object", "properties": {"choice": {"type": "string"}, "value": {}, "source": {"enum": ["given", "op", "position", "assumed"]},
                                         "says": {"type": "string"}, "spelled": {"type": "string"}}, "required": ["choice", "source", "says"]}}},
    "required": ["op", "reference"]}}
# per output, its measures against the reference (judge/measures.py) and, with --within, each bound
_MEASURED = {"type": "array", "items": {"type": "object", "properties": {
    "output": {"type": "integer"}, "shape": _LIST, "dtype": {"type": "string"}, "max_abs_error": _NUM, "mean_abs_error": _NUM,
    "cosine": _NUM, "rel_l1": _NUM, "rel_l2": _NUM, "rel_error": _NUM, "ulps": _NUM, "compared": {"type": "integer"},
    "nonfinite": {"type": "integer"}, "nonfinite_mismatch": {"type": "integer"}, "close": _BOOL,
    "measure": {"type": "string"}, "differing": {"type": "integer"}, "note": {"type": "string"},
    "within": {"type": "array", "items": {"type": "object", "properties": {
        "bound": {"type": "string"}, "value": _NUM, "holds": _BOOL}, "required": ["bound", "value", "holds"]}}},
    "required": ["output", "max_abs_error", "mean_abs_error", "cosine", "rel_l1", "rel_l2", "ulps", "compared", "close"]}}


def _object(title: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    props = {**_HEAD, **properties}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"https://graphdbg/{title}.schema.json",
            "title": f"graphdbg {title} --json", "type": "object", "properties": props,
            "required": ["graphdbg", "schema", *(required if required is not None else properties)],
            "additionalProperties": True}


OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "ls": _object("ls", {
        "root": {"type": "string"},
        "dumps": {"type": "array", "items": {"type": "object", "properties": _ROW, "required": ["path"]}},
        "groups": {"type": "array", "items": {"type": "object", "properties": {**_ROW, "ranks": _LIST, "paths": _LIST,
                                                                                 "differs": _LIST}}},
        "problems": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"},
                                                                                   "error": {"type": "string"}},
                                                  "required": ["path", "error"]}},
    }),
    "show": _object("show", {**_ROW, "nodes_table": _LIST, "inputs_table": _LIST},
                    ["path", "nodes_table", "inputs_table"]),
    "replay": _object("replay", {"dump": {"type": "string"}, "reproduces": _BOOL, **_OUTCOME, **_ENVIRONMENT, **_REPEAT},
                      ["dump", "reproduces", "status", "backend", "signature", "stand_ins", "total_s", "environment_differences"]),
    "replay-world": _object("replay --all-ranks", {
        "world_size": {"type": "integer"}, "graph": {"type": "string"}, "backend": {"type": "string"},
        "device": {"type": "string"}, "pg_backend": {"type": "string"}, "devices": _OBJ, "nnodes": {"type": "integer"},
        "node_rank": {"type": "integer"}, "seconds": _NUM,
        "ranks": {"type": "array", "items": {"type": "object", "properties": {"rank": {"type": "integer"}, **_OUTCOME}}},
    }),
    "compare": _object("compare", {
        "dump": {"type": "string"},
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "backend": {"type": "string"}, "status": _OUTCOME["status"], "signature": _STR, "stage": _STR, "seconds": _NUM,
            "max_abs_error": _NUM, "max_rel_error": _NUM, "trusted": _BOOL, "reproduces": _BOOL},
            "required": ["backend", "status", "signature", "seconds", "reproduces"]}},
        "own_backend_missing": _STR,  # why the rows can't say whether the captured failure is still there
        **_ENVIRONMENT,
    }),
    "compare-swap": _object("compare --swap", {
        "swaps": _SWAPS, "moved": _BOOL, "judged_by": {"type": "string"}, "within": _LIST, "replaced": _LIST,
        "stand_ins": _LIST, "kernels": _KERNELS, "rows": _MEASURED,
    }),
    "bisect-ops": _object("bisect ops", {
        "culprits": _LIST, "culprit": _STR, "error": _NUM, "error_vs_float64": _NUM, "all_reference_error_vs_float64": _NUM,
        "float64_note": _STR, "stand_ins": _LIST, "note": {"type": "string"}, "kernels": _KERNELS, "within": _LIST,
        "rows": _MEASURED, "assumptions": _SWAPS,
        "ops": {"type": "array", "items": {"type": "object", "properties": {
            "op": {"type": "string"}, "reference": {"type": "string"}, "error_after": _NUM, "accounts_for": _NUM},
            "required": ["op", "reference", "error_after", "accounts_for"]}},
    }, ["culprits", "ops", "error", "note"]),
    "minify": _object("minify", {
        "start_nodes": {"type": "integer"}, "final_nodes": {"type": "integer"}, "oracle_queries": {"type": "integer"},
        "cache_hits": {"type": "integer"}, "seconds": {"type": "number"}, "status": _OUTCOME["status"], "signature": _STR,
        "accuracy": {"type": ["boolean", "null"]}, "interrupted": _BOOL, "steps": _LIST, "out": _STR,
        "failure_rate": {"type": "number"}, **_ENVIRONMENT,
    }, ["start_nodes", "final_nodes", "oracle_queries", "cache_hits", "seconds", "status", "signature", "accuracy",
        "interrupted", "steps", "out"]),
    "bisect-passes": _object("bisect passes", {
        "culprit": _STR, "index": _INT, "outcome": {"type": ["object", "null"]}, "good_outcome": {"type": ["object", "null"]},
        "pattern": _STR, "pattern_index": _INT, "match_index": _INT, "runs": {"type": "integer"}, "note": {"type": "string"},
    }),
    "bisect-nodes": _object("bisect nodes", {
        "node": _STR, "target": _STR, "source": _STR, "code": _STR, "module": _STR, "max_abs_error": _NUM,
        "max_rel_error": _NUM, "replaced": _STR, "new_nodes": _LIST, "method": {"type": "string"},
        "compared": {"type": "integer"}, "note": {"type": "string"},
    }, ["node", "method"]),
    "bisect-envs": _object("bisect envs", {
        "mode": {"enum": ["pythons", "settings"]}, "culprit": _STR, "alone": {"type": ["boolean", "null"]},
        "note": {"type": "string"}, "runs": _LIST, **{"differences": _ENVIRONMENT["environment_differences"]},
    }, ["mode", "culprit", "runs", "differences"]),
    "bisect-ranks": _object("bisect ranks", {"ranks": _LIST, "odd": _LIST, "graphs": {}, "signatures": {},
                                             "differences": _OBJ, "notes": {}}, ["ranks", "odd"]),
    "extract": _object("extract", {"log": {"type": "string"}, "out": {"type": "string"},
                                   "files": {"type": "array", "items": {"type": "string"}}}),
    "error": _object("error", {"error": {"type": "string"}, "exit_code": {"type": "integer"}}),
}


def output_schema(name: str) -> dict[str, Any]:
    """The JSON Schema called ``name``: ``manifest`` (a dump's manifest.json) or a command output."""
    if name == "manifest":
        from graphdbg.store.schema import manifest_json_schema  # pydantic: only for the manifest schema

        return manifest_json_schema()
    if name not in OUTPUT_SCHEMAS:
        raise GraphdbgError(f"no schema {name!r}; there are: manifest, {', '.join(OUTPUT_SCHEMAS)}")
    return OUTPUT_SCHEMAS[name]
