"""The portable ``log``, ``log1p`` and ``exp``: the same bits in every language.

A portable calibrator's probability (its ``logit``, ``log``, ``log1m`` and ``log1p`` terms
and its sigmoid) and the planner's evidence score need a logarithm and an exponential.
The platform's are not the same function everywhere: glibc's ``log`` (Python's ``math``,
numba) and V8's ``Math.log`` (fdlibm in node 20, LLVM's libc in later releases) differ in
the last bit now and then, so three gates computing "the same" probability could disagree
by an ulp and, at a tie, decide apart.

These three functions are that definition, written once: fdlibm 5.3's ``e_log.c``,
``s_log1p.c`` and ``e_exp.c`` (as FreeBSD's msun and V8 carry them), every operation an
IEEE-754 double ``+``, ``-``, ``*`` or ``/`` in the order fdlibm writes it, so any language
with IEEE doubles gets the same bits. fdlibm reads and writes the words of a double; here
the same quantities come from exact operations instead (``frexp`` splits a double into
significand and exponent without rounding, a power of two from ``ldexp`` is exact, and a
test on a high word is a comparison with the double whose high word that is), which
CPython runs about twice as fast as packing bytes. The error of each is below one ulp
(fdlibm's bound).

The numba engine compiles these very functions (``amv_calib.gate._compiled``), and the
TypeScript client transcribes them line for line (``clients/typescript/src/portableMath.ts``);
the tests hold all three equal bit for bit. Changing a line changes the bits of every
calibrator evaluation in every language: it is a change of the portable format.
"""

from __future__ import annotations

import math
import struct
from typing import Final

__all__ = ["portable_exp", "portable_log", "portable_log1p"]


def _from_words(hi: int, lo: int) -> float:
    """The double whose high and low 32-bit words are ``hi`` and ``lo`` (constants only)."""
    value: float = struct.unpack("<d", struct.pack("<Q", (hi << 32) | lo))[0]
    return value


_LN2_HI: Final = _from_words(0x3FE62E42, 0xFEE00000)  # 6.93147180369123816490e-01
_LN2_LO: Final = _from_words(0x3DEA39EF, 0x35793C76)  # 1.90821492927058770002e-10
# log's and log1p's polynomial (fdlibm's Lg1..Lg7 = Lp1..Lp7)
_L1: Final = _from_words(0x3FE55555, 0x55555593)
_L2: Final = _from_words(0x3FD99999, 0x9997FA04)
_L3: Final = _from_words(0x3FD24924, 0x94229359)
_L4: Final = _from_words(0x3FCC71C5, 0x1D8E78AF)
_L5: Final = _from_words(0x3FC74664, 0x96CB03DE)
_L6: Final = _from_words(0x3FC39A09, 0xD078C69F)
_L7: Final = _from_words(0x3FC2F112, 0xDF3E5244)
# exp's
_INVLN2: Final = _from_words(0x3FF71547, 0x652B82FE)
_P1: Final = _from_words(0x3FC55555, 0x5555553E)
_P2: Final = _from_words(0xBF66C16C, 0x16BEBD93)
_P3: Final = _from_words(0x3F11566A, 0xAF25DE2C)
_P4: Final = _from_words(0xBEBBBD41, 0xC5D26BF1)
_P5: Final = _from_words(0x3E663769, 0x72BEA4D0)
_O_THRESHOLD: Final = _from_words(0x40862E42, 0xFEFA39EF)  # 7.09782712893383973096e+02
_U_THRESHOLD: Final = _from_words(0xC0874910, 0xD52D3051)  # -7.45133219101941108420e+02
_TWOM1000: Final = _from_words(0x01700000, 0)  # 2**-1000
_TWO1023: Final = _from_words(0x7FE00000, 0)  # 2**1023
_TWO20: Final = 1048576.0
_TWOM28: Final = _from_words(0x3E300000, 0)
_TWOM29: Final = _from_words(0x3E200000, 0)
_TWOM54: Final = _from_words(0x3C900000, 0)

# fdlibm's tests on a high word ``hx``, as comparisons of |x| with the double whose high
# word is the bound (low word 0): ``hx >= H`` is ``|x| >= _from_words(H, 0)``.
_LOG_SQRT2_HX: Final = 0x6A09C  # log: 1 + f past this high fraction is halved (0x95f64)
_LOG1P_SQRT2_HX: Final = 0x6A09E
_LOG1P_SMALL_HI: Final = _from_words(0x3FDA827A, 0)  # log1p: x below ~0.41422, k may be 0
_LOG1P_SMALL_LO: Final = _from_words(0x3FD2BEC5, 0)  # ... and above ~-0.29289
_TWO53: Final = _from_words(0x43400000, 0)
_EXP_BIG: Final = _from_words(0x40862E42, 0)  # |x| >= ~709.78
_EXP_HALF_LN2: Final = _from_words(0x3FD62E43, 0)  # |x| > 0.5 ln2 (hx > 0x3fd62e42)
_EXP_3HALF_LN2: Final = _from_words(0x3FF0A2B2, 0)  # |x| < 1.5 ln2


def portable_log(x: float) -> float:
    """Natural logarithm, fdlibm's ``__ieee754_log`` operation for operation.

    ``log(0) = -inf``, ``log(x < 0) = nan``, ``log(inf) = inf``, ``log(1) = 0``;
    subnormals are exact inputs. Error below one ulp.
    """
    if not x > 0.0:
        if x == 0.0:
            return -math.inf
        return math.nan  # x < 0 or NaN
    if x == math.inf:
        return x
    # x = m 2^e, m in [0.5, 1): fdlibm's x = (1 + f) 2^k with 1 + f in [sqrt2/2, sqrt2),
    # decided on the 20 high bits of the fraction (hx) as fdlibm does
    m, e = math.frexp(x)
    m2 = m + m
    hx = int((m2 - 1.0) * _TWO20)
    if hx >= _LOG_SQRT2_HX:
        k = e
        f = m - 1.0
    else:
        k = e - 1
        f = m2 - 1.0
    if hx == 0 or hx >= 0xFFFFE:  # (0x000fffff & (2 + hx)) < 3: |f| < 2^-20
        if f == 0.0:
            if k == 0:
                return 0.0
            dk = float(k)
            return dk * _LN2_HI + dk * _LN2_LO
        r = f * f * (0.5 - 0.33333333333333333 * f)
        if k == 0:
            return f - r
        dk = float(k)
        return dk * _LN2_HI - ((r - dk * _LN2_LO) - f)
    s = f / (2.0 + f)
    dk = float(k)
    z = s * s
    w = z * z
    t1 = w * (_L2 + w * (_L4 + w * _L6))
    t2 = z * (_L1 + w * (_L3 + w * (_L5 + w * _L7)))
    r = t2 + t1
    if 0x6147A <= hx <= 0x6B851:  # ((hx - 0x6147a) | (0x6b851 - hx)) > 0
        hfsq = 0.5 * f * f
        if k == 0:
            return f - (hfsq - s * (hfsq + r))
        return dk * _LN2_HI - ((hfsq - (s * (hfsq + r) + dk * _LN2_LO)) - f)
    if k == 0:
        return f - s * (f - r)
    return dk * _LN2_HI - ((s * (f - r) - dk * _LN2_LO) - f)


def portable_log1p(x: float) -> float:
    """``log(1 + x)``, fdlibm's ``log1p`` (FreeBSD's thresholds) operation for operation.

    ``log1p(-1) = -inf``, ``log1p(x < -1) = nan``, ``log1p(inf) = inf``, ``log1p(-0.0) =
    -0.0``. Error below one ulp.
    """
    if x != x:
        return x + x
    k = 1
    hu = 0
    f = 0.0
    c = 0.0
    if x < _LOG1P_SMALL_HI:  # hx < 0x3FDA827A: every negative x, and x below ~0.41422
        ax = abs(x)
        if x <= -1.0:
            if x == -1.0:
                return -math.inf
            return math.nan
        if ax < _TWOM29:
            if ax < _TWOM54:
                return x
            return x - x * x * 0.5
        if x > 0.0 or ax < _LOG1P_SMALL_LO:  # hx > 0 || hx <= (int)0xbfd2bec4
            k = 0
            f = x
            hu = 1
    elif x == math.inf:
        return x + x
    if k != 0:
        if x < _TWO53:
            u = 1.0 + x
            m, e = math.frexp(u)
            k = e - 1
            c = 1.0 - (u - x) if k > 0 else x - (u - 1.0)  # the rounding of 1 + x
            c /= u
        else:
            m, e = math.frexp(x)
            k = e - 1
            c = 0.0
        m2 = m + m
        hu = int((m2 - 1.0) * _TWO20)
        if hu < _LOG1P_SQRT2_HX:
            u = m2  # u with exponent 0
        else:
            k += 1
            u = m  # u / 2
            hu = (0x00100000 - hu) >> 2
        f = u - 1.0
    hfsq = 0.5 * f * f
    if hu == 0:  # |f| < 2^-20
        if f == 0.0:
            if k == 0:
                return 0.0
            c += k * _LN2_LO
            return k * _LN2_HI + c
        r = hfsq * (1.0 - 0.66666666666666666 * f)
        if k == 0:
            return f - r
        return k * _LN2_HI - ((r - (k * _LN2_LO + c)) - f)
    s = f / (2.0 + f)
    z = s * s
    r = z * (_L1 + z * (_L2 + z * (_L3 + z * (_L4 + z * (_L5 + z * (_L6 + z * _L7))))))
    if k == 0:
        return f - (hfsq - s * (hfsq + r))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + (k * _LN2_LO + c))) - f)


def portable_exp(x: float) -> float:
    """``e**x``, fdlibm's ``__ieee754_exp`` operation for operation.

    ``exp(-inf) = 0``, ``exp(inf) = inf``, ``exp(nan) = nan``, ``exp(0) = 1``; overflow
    past ~709.78 gives ``inf``, underflow below ~-745.13 gives 0. Error below one ulp.
    """
    if x != x:
        return x + x
    ax = abs(x)
    if ax >= _EXP_BIG:
        if x == math.inf:
            return x
        if x == -math.inf:
            return 0.0
        if x > _O_THRESHOLD:
            return math.inf
        if x < _U_THRESHOLD:
            return 0.0
    hi = 0.0
    lo = 0.0
    if ax >= _EXP_HALF_LN2:  # reduce x to hi - lo = x - k ln2, |hi - lo| <= 0.5 ln2
        if ax < _EXP_3HALF_LN2:
            if x > 0.0:
                hi = x - _LN2_HI
                lo = _LN2_LO
                k = 1
            else:
                hi = x + _LN2_HI
                lo = -_LN2_LO
                k = -1
        else:
            k = int(_INVLN2 * x + (0.5 if x > 0.0 else -0.5))  # C's cast: toward zero
            t = float(k)
            hi = x - t * _LN2_HI  # exact
            lo = t * _LN2_LO
        x = hi - lo
    elif ax < _TWOM28:
        return 1.0 + x
    else:
        k = 0
    t = x * x
    c = x - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))
    if k == 0:
        return 1.0 - ((x * c) / (c - 2.0) - x)
    y = 1.0 - ((lo - (x * c) / (2.0 - c)) - hi)
    # times 2^k: exact while the result is normal; past 2^-1021 one rounding, as fdlibm
    if k >= -1021:
        if k == 1024:
            return y * 2.0 * _TWO1023
        return y * math.ldexp(1.0, k)
    return y * math.ldexp(1.0, k + 1000) * _TWOM1000
