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
