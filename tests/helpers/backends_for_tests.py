"""Backends that fail the hard way, for isolation tests. Importable by child processes."""

import ctypes
import os
import time


def segfault(gm, example_inputs):
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def abort(gm, example_inputs):
    os.abort()


def hang(gm, example_inputs):
    time.sleep(3600)


def crash_on_call(gm, example_inputs):
    def run(*args):
        raise ValueError(f"compiled code failed on {len(args)} inputs at 0x{id(args):x}")

    return run


def refuses_collectives(gm, example_inputs):
    for node in gm.graph.nodes:
        if "_c10d_functional" in str(node.target):
            raise NotImplementedError(f"no lowering for {node.target}")
    return gm.forward


def crash_on_rank1(gm, example_inputs):
    """Rank 1 fails to compile; the other ranks go on into the graph's all-reduce and wait."""
    if os.environ.get("RANK") == "1":
        raise RuntimeError("rank 1 backend failure")
    return gm.forward


def hang_on_rank1(gm, example_inputs):
    """Rank 1 never finishes compiling; the other ranks wait in the graph's all-reduce."""
    if os.environ.get("RANK") == "1":
        time.sleep(3600)
    return gm.forward


# For minify and bisect tests ---------------------------------------------------------
def _calls(gm, name):
    return any(n.op in ("call_function", "call_method") and getattr(n.target, "__name__", n.target) == name
               for n in gm.graph.nodes)


def refuses_rsqrt_with_gelu(gm, example_inputs):
    """Fails only when the graph holds an rsqrt and a gelu together (a fusion-pair bug)."""
    if _calls(gm, "rsqrt") and _calls(gm, "gelu"):
        raise NotImplementedError("no fused lowering for rsqrt feeding gelu")
    return gm.forward


def segfault_on_softmax_refuses_gelu(gm, example_inputs):
    """Refuses gelu; but a graph with a softmax and no gelu crashes the process (SIGSEGV)."""
    if _calls(gm, "gelu"):
        raise NotImplementedError("no lowering for gelu")
    if _calls(gm, "softmax"):
        segfault(gm, example_inputs)
    return gm.forward


def fixed(gm, example_inputs):
    """The backend once the bug is fixed: runs the graph as it is."""
    return gm.forward


def refuses_copy_(gm, example_inputs):
    """Fails on an in-place copy_, a node no other node reads: only its effect matters."""
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target == "copy_":
            raise NotImplementedError("no lowering for copy_")
    return gm.forward


def refuses_wait_stream(gm, example_inputs):
    """Fails as Thunder 0.2.6 does on a graph that calls stream.wait_stream."""
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target == "wait_stream":
            raise AssertionError("Failed to find method wait_stream")
    return gm.forward


def transposes_biased_linear_weights(gm, example_inputs):
    """broken_transpose_backend's bug on the linears that have a bias only (an MLP's, not
    attention's): on a block the failure is in a later graph after a graph break."""
    import torch

    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch._C._nn.linear and len(node.args) > 2 and node.args[2] is not None:
            with gm.graph.inserting_before(node):
                t = gm.graph.call_method("t", (node.args[1],))
            node.args = (node.args[0], t, *node.args[2:])
    gm.recompile()
    return gm.forward


def transposes_biased_linear_weights_called_as_module(gm, example_inputs):
    """The same, returning the GraphModule: its ``__call__`` cuts the generated code's frames
    from the traceback, so only an interpreter run can tell the node."""
    transposes_biased_linear_weights(gm, example_inputs)
    return gm
