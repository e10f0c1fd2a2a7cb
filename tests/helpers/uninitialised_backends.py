"""A backend whose allocator hands out other bytes than eager's, as Inductor's does on a GPU.

Importable by name by isolated replays (``--backend uninitialised_backends:poisons_empty``).
"""

import torch


def poisons_empty(gm, example_inputs):
    """Runs the graph with torch's deterministic mode, which fills every ``torch.empty`` with
    NaN (and integers with their largest value): what is computed is the same, what nobody
    wrote is not."""
    def run(*args):
        before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            return gm(*args)
        finally:
            torch.use_deterministic_algorithms(before)

    return run


def refuses(gm, example_inputs):
    raise RuntimeError("refuses every graph, so that it is dumped")
