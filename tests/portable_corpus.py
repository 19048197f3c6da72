"""Inputs for the portable ``log``, ``log1p`` and ``exp``: the odd doubles and random ones.

The odd ones: zeros of both signs, subnormals, 1 and its neighbours, the largest and
smallest doubles, infinities, NaN, negatives, and both sides of every threshold at which
fdlibm changes its path (``amv_calib/contract/_portable_math.py``). The random ones: bit
patterns over the whole range and values drawn where each function is used (probabilities,
ages over scales, linear indices), seeded.
"""

from __future__ import annotations

import math
import struct

import numpy as np


def _from_words(hi: int, lo: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", (hi << 32) | lo))[0]
    return value


def _around(x: float, steps: int = 2) -> list[float]:
    """``x`` and its ``steps`` neighbours on each side."""
    out = [x]
    lo = hi = x
    for _ in range(steps):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    return out


def odd_values() -> list[float]:
    """Special and boundary inputs (each function's own thresholds included)."""
    base = [0.0, -0.0, 5e-324, -5e-324, 1e-310, 2.2250738585072009e-308,
            2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
            math.inf, -math.inf, math.nan, 1e-300, 1e300, -1e-300, 0.5, 2.0, 3.0, 10.0,
            1e-5, 1.0 - 1e-5, 0.1, 0.3, 0.7, 0.9, 0.99999, 1e-16, 2.0**53, 2.0**53 + 2.0,
            2.0**-1022, 2.0**-1074, 720.0, 2160.0, 1e5, 1e6]
    thresholds = [1.0, -1.0, 2.0**-28, -(2.0**-28), 2.0**-29, -(2.0**-29), 2.0**-54,
                  -(2.0**-54), 2.0**-20, 1.0 + 2.0**-20, 1.0 - 2.0**-20, math.sqrt(2.0),
                  math.sqrt(0.5), 0.5 * math.log(2.0), -0.5 * math.log(2.0),
                  1.5 * math.log(2.0), -1.5 * math.log(2.0), math.log(2.0),
                  7.09782712893383973096e02, -7.45133219101941108420e02, 709.78, -745.13,
                  -708.4, -708.3964185322641, -744.44, 0.41421356, -0.29289321]
    thresholds += [_from_words(hi, 0) for hi in (
        0x3FDA827A, 0x3FD2BEC4, 0x3FD2BEC5, 0x43400000, 0x40862E42, 0x3FD62E42, 0x3FD62E43,
        0x3FF0A2B2, 0x3E300000, 0x3E200000, 0x3C900000, 0x3FF6A09C, 0x3FF6A09E, 0x3FF6147A,
        0x3FF6B851, 0x3FEFFFFE, 0x3FF00001)]
    out: list[float] = []
    for x in base + thresholds:
        for y in _around(x):
            out += [y, -y]
    return out


def math_corpus(fn: str, n: int, seed: int = 20261207) -> list[float]:
    """:func:`odd_values` and ``n`` random inputs for ``fn`` ("log", "log1p" or "exp")."""
    rng = np.random.default_rng([seed, ("log", "log1p", "exp").index(fn)])
    k = n // 4
    anywhere = rng.integers(0, 0x7FF0000000000000, k, dtype=np.int64).view(np.float64)
    if fn == "log":
        rand = [anywhere, rng.uniform(0.0, 1.0, k), rng.uniform(0.7, 1.45, k),
                1.0 + rng.normal(0.0, 1e-7, n - 3 * k)]
    elif fn == "log1p":
        rand = [np.exp(rng.uniform(-40.0, 40.0, k)), rng.uniform(-1.0, 1.0, k),
                -np.exp(rng.uniform(-40.0, 0.0, k)), rng.exponential(0.5, n - 3 * k)]
    else:
        rand = [rng.uniform(-746.0, 710.0, k), rng.uniform(-2.0, 2.0, k),
                rng.normal(0.0, 12.0, k), rng.normal(0.0, 1e-9, n - 3 * k)]
    return odd_values() + [float(x) for x in np.concatenate(rand)]
