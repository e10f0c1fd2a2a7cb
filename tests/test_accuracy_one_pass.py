"""The one-pass comparison (output dtype first, float64 only where it can't decide) gives the
same verdicts as judging every element in float64, near the tolerance and with NaN/inf."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphdbg.judge.accuracy import BY_DTYPE, _compare_exactly, compare_outputs, compare_value

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(1, 300), seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0, 1.01, 1.1, 2.0, 100.0]),
       specials=st.sampled_from(["none", "nan_both", "nan_one", "inf_both", "inf_one"]))
def test_one_pass_verdict_is_the_float64_verdict(dtype, n, seed, scale, specials):
    g = torch.Generator().manual_seed(seed)
    e = (torch.randn(n, generator=g, dtype=torch.float64) * 10).to(dtype)
    r, t = BY_DTYPE.of(dtype)
    # errors around the tolerance: scale 1.0 sits on the boundary
    noise = (t + r * e.double().abs()) * scale * (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1)
    a = (e.double() + noise).to(dtype)
    if specials != "none":
        i = int(torch.randint(n, (1,), generator=g))
        value = float("nan") if "nan" in specials else float("inf")
        e[i] = value
        a[i] = value if specials.endswith("both") else 1.0
    fast, exact = compare_value(0, e, a), _compare_exactly(0, e, a, *BY_DTYPE.for_value(e))  # atol scaled below magnitude 1
    assert (fast is None) == (exact is None), (fast, exact)
    if exact is not None:
        assert fast == exact  # a failing output is described from every element, as before


def test_a_close_large_output_passes_and_a_far_one_names_its_worst_error():
    e = torch.randn(3, 1 << 20)
    assert compare_outputs((e,), (e + 1e-6,)) == []
    bad = compare_outputs((e,), (e.index_put((torch.tensor([1]), torch.tensor([5])), torch.tensor(50.0)),))
    assert len(bad) == 1 and bad[0].reason == "value" and abs(bad[0].max_abs_error - abs(50.0 - float(e[1, 5]))) < 1e-4
