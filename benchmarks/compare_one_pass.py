"""How much does judging outputs cost when they are close? (issue 26: one pass, not ten)

    python benchmarks/compare_one_pass.py [--mib 256]

Compares graphdbg's output comparison (output dtype first, float64 only where that can't
decide) with the float64-for-every-element comparison it replaced, on outputs that differ by
compiler-sized noise (not bit-identical, within tolerance) and on bit-identical ones; prints
seconds and the ratio. Both give the same verdict (tests/test_accuracy_one_pass.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from graphdbg.judge.accuracy import _compare_exactly, compare_value, tolerance  # noqa: E402


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        n = args.mib * (1 << 20) // torch.empty(0, dtype=dtype).element_size()
        e = torch.randn(n // 1024, 1024).to(dtype)
        r, t = tolerance(dtype)
        a = (e.float() * (1 + r * 0.5 * (torch.rand_like(e, dtype=torch.float32) * 2 - 1))).to(dtype)
        assert compare_value(0, e, a) is None and _compare_exactly(0, e, a, r, t) is None
        new, old = best(lambda: compare_value(0, e, a)), best(lambda: _compare_exactly(0, e, a, r, t))
        print(f"{dtype} {args.mib} MiB, close outputs: one pass {new:.2f} s, float64 everywhere {old:.2f} s, "
              f"ratio {new / old:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
