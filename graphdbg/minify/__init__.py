"""Shrink and bisect failing graphs; turn them into standalone repros and regression tests.

    >>> from graphdbg.minify import minify, bisect_passes, bisect_nodes, bisect_ranks
    >>> result = minify("dumps/rank0/g0-compile_error-1a2b3c4d", out="minified")
    >>> result.final_nodes, result.queries
    (3, 19)
    >>> bisect_nodes("dumps/rank0/g0-accuracy-3b0e0256").node     # first diverging node
    'mul'

One concept per module: ``oracle`` (the cached "still the same failure?" predicate),
``candidates`` (a candidate is a subset of the original graph), ``shrink_passes`` (the named
passes), ``shrinker`` (the driver and ``minify``), ``bisect`` (passes, nodes, ranks), ``repro``
(a torch-only repro.py) and ``export_test`` (a pytest file from a dump).
"""

from graphdbg.minify.bisect import (
    NodeDivergence,
    PassBisection,
    RankReport,
    bisect_nodes,
    bisect_passes,
    bisect_ranks,
)
from graphdbg.minify.export_test import export_test
from graphdbg.minify.oracle import Oracle
from graphdbg.minify.repro import write_repro
from graphdbg.minify.shrinker import Budget, MinifyInterrupted, MinifyResult, Predicate, minify, shrink

__all__ = [
    "Budget", "MinifyInterrupted", "MinifyResult", "NodeDivergence", "Oracle", "PassBisection", "Predicate", "RankReport",
    "bisect_nodes", "bisect_passes", "bisect_ranks", "export_test", "minify", "shrink", "write_repro",
]
