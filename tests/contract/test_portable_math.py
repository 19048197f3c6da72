"""The portable ``log``, ``log1p`` and ``exp`` against the platform's ``math`` module.

They are fdlibm's algorithms (error below one ulp), not glibc's, so the two may differ in
the last bit: within one ulp on a million random inputs each, and exactly equal on the
special values, where IEEE 754 and C99 fix the result. Where they are further apart (glibc
is not correctly rounded either), the exact value, by ``decimal`` at 120 digits, is
within one ulp of ours.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from portable_corpus import math_corpus, odd_values

from amv_calib.contract import portable_exp, portable_log, portable_log1p

FUNCTIONS = {"log": (portable_log, math.log), "log1p": (portable_log1p, math.log1p),
             "exp": (portable_exp, math.exp)}


def _ordered(x: np.ndarray) -> np.ndarray:
    """Doubles as integers in the order of their values (adjacent doubles differ by 1)."""
    i = x.view(np.int64)
    return np.where(i < 0, np.int64(-0x8000000000000000) - i, i)


def _reference(fn: str, x: float) -> float:
    """The ``math`` module's value, with C99's results where Python raises instead."""
    try:
        return FUNCTIONS[fn][1](x)
    except OverflowError:
        return math.inf
    except ValueError:  # log(0), log1p(-1); a negative argument
        return -math.inf if (fn == "log" and x == 0.0) or (fn == "log1p" and x == -1.0) \
            else math.nan


def _exact_ulps(fn: str, x: float, got: float) -> float:
    """``|got - fn(x)|`` in ulps of ``got``, ``fn(x)`` computed with 120 digits."""
    with localcontext() as ctx:
        ctx.prec = 120
        d = Decimal(x)
        exact = d.ln() if fn == "log" else (1 + d).ln() if fn == "log1p" else d.exp()
        return float(abs(Decimal(got) - exact) / Decimal(math.ulp(got)))


def _check_within_an_ulp(fn: str, xs: list[float]) -> int:
    """Assert ours within one ulp of ``math`` (or of the exact value); the count apart."""
    ours = np.array([FUNCTIONS[fn][0](x) for x in xs])
    want = np.array([_reference(fn, x) for x in xs])
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(ours), nan)
    finite = np.isfinite(want) & (want != 0.0)
    exact = ~nan & ~finite  # infinities and zeros: exactly, sign included
    np.testing.assert_array_equal(ours[exact], want[exact])
    np.testing.assert_array_equal(np.signbit(ours[~nan]), np.signbit(want[~nan]))
    ulps = np.abs(_ordered(ours) - _ordered(want))
    far = np.flatnonzero(finite & (ulps > 1))
    assert far.size <= 10, (fn, far.size)
    for i in far:
        assert _exact_ulps(fn, xs[i], float(ours[i])) < 1.0, (fn, xs[i], ours[i], want[i])
    return int(np.count_nonzero(ulps[finite]))


@pytest.mark.slow
@pytest.mark.parametrize("fn", list(FUNCTIONS))
def test_within_one_ulp_of_math_on_a_million_inputs(fn: str) -> None:
    xs = math_corpus(fn, 1_000_000)
    apart = _check_within_an_ulp(fn, xs)
    # not glibc under another name: fdlibm rounds apart from it now and then
    assert 0 < apart < 0.2 * len(xs)


@pytest.mark.parametrize(("fn", "x", "want"), [
    ("log", 0.0, -math.inf), ("log", -0.0, -math.inf), ("log", 1.0, 0.0),
    ("log", math.inf, math.inf), ("log", -1.0, math.nan), ("log", -math.inf, math.nan),
    ("log", -5e-324, math.nan), ("log", math.nan, math.nan), ("log", 2.0, math.log(2.0)),
    ("log1p", 0.0, 0.0), ("log1p", -0.0, -0.0), ("log1p", -1.0, -math.inf),
    ("log1p", -1.5, math.nan), ("log1p", -math.inf, math.nan), ("log1p", math.inf, math.inf),
    ("log1p", math.nan, math.nan), ("log1p", 5e-324, 5e-324), ("log1p", -5e-324, -5e-324),
    ("log1p", 1e-20, 1e-20),
    ("exp", 0.0, 1.0), ("exp", -0.0, 1.0), ("exp", math.inf, math.inf),
    ("exp", -math.inf, 0.0), ("exp", math.nan, math.nan), ("exp", 710.0, math.inf),
    ("exp", 1e308, math.inf), ("exp", -746.0, 0.0), ("exp", -1e308, 0.0),
    ("exp", -745.1, 5e-324), ("exp", 5e-324, 1.0), ("exp", 1e-20, 1.0),
], ids=lambda v: repr(v))
def test_special_values_are_exact(fn: str, x: float, want: float) -> None:
    got = FUNCTIONS[fn][0](x)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert (got, math.copysign(1.0, got)) == (want, math.copysign(1.0, want))


@pytest.mark.parametrize("fn", list(FUNCTIONS))
def test_odd_values_are_within_one_ulp(fn: str) -> None:
    """Every boundary of fdlibm's paths, both sides: within an ulp, special results exact."""
    _check_within_an_ulp(fn, odd_values())
