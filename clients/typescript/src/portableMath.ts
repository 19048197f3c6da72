/**
 * The portable `log`, `log1p` and `exp`: `amv_calib/contract/_portable_math.py` line for
 * line (read its docstring), so that a calibrator's probability is the Python gate's bits.
 *
 * They are fdlibm's `e_log.c`, `s_log1p.c` and `e_exp.c`, every operation an IEEE double
 * `+`, `-`, `*` or `/` in fdlibm's order. `Math.log`, `Math.log1p` and `Math.exp` are not
 * used: they are the engine's (fdlibm in node 20, LLVM's libc in later V8 releases, the
 * system's libm elsewhere) and may differ from another language's in the last bit.
 * `frexp` and `twoTo` below are exact (they move the exponent field of a double), as
 * Python's `math.frexp` and `math.ldexp(1.0, k)` are.
 */

const words = new DataView(new ArrayBuffer(8));

/** The double whose high and low 32-bit words are `hi` and `lo`. */
function fromWords(hi: number, lo: number): number {
  words.setUint32(0, hi >>> 0);
  words.setUint32(4, lo >>> 0);
  return words.getFloat64(0);
}

const TWO54 = fromWords(0x43500000, 0);

/** Python's `math.frexp` of a positive finite `x`: `[m, e]`, `x = m 2^e`, `m` in [0.5, 1). */
function frexp(x: number): [number, number] {
  words.setFloat64(0, x);
  let hi = words.getUint32(0);
  let e = -1022;
  if (hi < 0x00100000) { // subnormal: scaled into the normal range, exactly
    words.setFloat64(0, x * TWO54);
    hi = words.getUint32(0);
    e -= 54;
  }
  e += hi >>> 20;
  words.setUint32(0, (hi & 0x000fffff) | 0x3fe00000);
  return [words.getFloat64(0), e];
}

/** `2^k` for `k` in [-1022, 1023] (Python's `math.ldexp(1.0, k)`). */
function twoTo(k: number): number {
  return fromWords((k + 1023) << 20, 0);
}

const LN2_HI = fromWords(0x3FE62E42, 0xFEE00000);
const LN2_LO = fromWords(0x3DEA39EF, 0x35793C76);
const L1 = fromWords(0x3FE55555, 0x55555593);
const L2 = fromWords(0x3FD99999, 0x9997FA04);
const L3 = fromWords(0x3FD24924, 0x94229359);
const L4 = fromWords(0x3FCC71C5, 0x1D8E78AF);
const L5 = fromWords(0x3FC74664, 0x96CB03DE);
const L6 = fromWords(0x3FC39A09, 0xD078C69F);
const L7 = fromWords(0x3FC2F112, 0xDF3E5244);
const INVLN2 = fromWords(0x3FF71547, 0x652B82FE);
const P1 = fromWords(0x3FC55555, 0x5555553E);
const P2 = fromWords(0xBF66C16C, 0x16BEBD93);
const P3 = fromWords(0x3F11566A, 0xAF25DE2C);
const P4 = fromWords(0xBEBBBD41, 0xC5D26BF1);
const P5 = fromWords(0x3E663769, 0x72BEA4D0);
const O_THRESHOLD = fromWords(0x40862E42, 0xFEFA39EF);
const U_THRESHOLD = fromWords(0xC0874910, 0xD52D3051);
const TWOM1000 = fromWords(0x01700000, 0);
const TWO1023 = fromWords(0x7FE00000, 0);
const TWO20 = 1048576.0;
const TWOM28 = fromWords(0x3E300000, 0);
const TWOM29 = fromWords(0x3E200000, 0);
const TWOM54 = fromWords(0x3C900000, 0);
const LOG_SQRT2_HX = 0x6A09C;
const LOG1P_SQRT2_HX = 0x6A09E;
const LOG1P_SMALL_HI = fromWords(0x3FDA827A, 0);
const LOG1P_SMALL_LO = fromWords(0x3FD2BEC5, 0);
const TWO53 = fromWords(0x43400000, 0);
const EXP_BIG = fromWords(0x40862E42, 0);
const EXP_HALF_LN2 = fromWords(0x3FD62E43, 0);
const EXP_3HALF_LN2 = fromWords(0x3FF0A2B2, 0);

/** Natural logarithm (Python's `portable_log`). */
export function portableLog(x: number): number {
  if (!(x > 0.0)) {
    if (x === 0.0) return -Infinity;
    return NaN;
  }
  if (x === Infinity) return x;
  const [m, e] = frexp(x);
  const m2 = m + m;
  const hx = Math.trunc((m2 - 1.0) * TWO20);
  let k: number;
  let f: number;
  if (hx >= LOG_SQRT2_HX) {
    k = e;
    f = m - 1.0;
  } else {
    k = e - 1;
    f = m2 - 1.0;
  }
  if (hx === 0 || hx >= 0xFFFFE) {
    if (f === 0.0) {
      if (k === 0) return 0.0;
      return k * LN2_HI + k * LN2_LO;
    }
    const r = f * f * (0.5 - 0.33333333333333333 * f);
    if (k === 0) return f - r;
    return k * LN2_HI - ((r - k * LN2_LO) - f);
  }
  const s = f / (2.0 + f);
  const z = s * s;
  const w = z * z;
  const t1 = w * (L2 + w * (L4 + w * L6));
  const t2 = z * (L1 + w * (L3 + w * (L5 + w * L7)));
  const r = t2 + t1;
  if (hx >= 0x6147A && hx <= 0x6B851) {
    const hfsq = 0.5 * f * f;
    if (k === 0) return f - (hfsq - s * (hfsq + r));
    return k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f);
  }
  if (k === 0) return f - s * (f - r);
  return k * LN2_HI - ((s * (f - r) - k * LN2_LO) - f);
}

/** `log(1 + x)` (Python's `portable_log1p`). */
export function portableLog1p(x: number): number {
  if (x !== x) return x + x;
  let k = 1;
  let hu = 0;
  let f = 0.0;
  let c = 0.0;
  if (x < LOG1P_SMALL_HI) {
    const ax = Math.abs(x);
    if (x <= -1.0) {
      if (x === -1.0) return -Infinity;
      return NaN;
    }
    if (ax < TWOM29) {
      if (ax < TWOM54) return x;
      return x - x * x * 0.5;
    }
    if (x > 0.0 || ax < LOG1P_SMALL_LO) {
      k = 0;
      f = x;
      hu = 1;
    }
  } else if (x === Infinity) {
    return x + x;
  }
  if (k !== 0) {
    let m: number;
    let e: number;
    if (x < TWO53) {
      const u = 1.0 + x;
      [m, e] = frexp(u);
      k = e - 1;
      c = k > 0 ? 1.0 - (u - x) : x - (u - 1.0);
      c /= u;
    } else {
      [m, e] = frexp(x);
      k = e - 1;
      c = 0.0;
    }
    const m2 = m + m;
    hu = Math.trunc((m2 - 1.0) * TWO20);
    let u: number;
    if (hu < LOG1P_SQRT2_HX) {
      u = m2;
    } else {
      k += 1;
      u = m;
      hu = (0x00100000 - hu) >> 2;
    }
    f = u - 1.0;
  }
  const hfsq = 0.5 * f * f;
  if (hu === 0) {
    if (f === 0.0) {
      if (k === 0) return 0.0;
      c += k * LN2_LO;
      return k * LN2_HI + c;
    }
    const r = hfsq * (1.0 - 0.66666666666666666 * f);
    if (k === 0) return f - r;
    return k * LN2_HI - ((r - (k * LN2_LO + c)) - f);
  }
  const s = f / (2.0 + f);
  const z = s * s;
  const r = z * (L1 + z * (L2 + z * (L3 + z * (L4 + z * (L5 + z * (L6 + z * L7))))));
  if (k === 0) return f - (hfsq - s * (hfsq + r));
  return k * LN2_HI - ((hfsq - (s * (hfsq + r) + (k * LN2_LO + c))) - f);
}

/** `e**x` (Python's `portable_exp`). */
export function portableExp(x: number): number {
  if (x !== x) return x + x;
  const ax = Math.abs(x);
  if (ax >= EXP_BIG) {
    if (x === Infinity) return x;
    if (x === -Infinity) return 0.0;
    if (x > O_THRESHOLD) return Infinity;
    if (x < U_THRESHOLD) return 0.0;
  }
  let hi = 0.0;
  let lo = 0.0;
  let k: number;
  if (ax >= EXP_HALF_LN2) {
    if (ax < EXP_3HALF_LN2) {
      if (x > 0.0) {
        hi = x - LN2_HI;
        lo = LN2_LO;
        k = 1;
      } else {
        hi = x + LN2_HI;
        lo = -LN2_LO;
        k = -1;
      }
    } else {
      k = Math.trunc(INVLN2 * x + (x > 0.0 ? 0.5 : -0.5));
      const t = k;
      hi = x - t * LN2_HI;
      lo = t * LN2_LO;
    }
    x = hi - lo;
  } else if (ax < TWOM28) {
    return 1.0 + x;
  } else {
    k = 0;
  }
  const t = x * x;
  const c = x - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
  if (k === 0) return 1.0 - ((x * c) / (c - 2.0) - x);
  const y = 1.0 - ((lo - (x * c) / (2.0 - c)) - hi);
  if (k >= -1021) {
    if (k === 1024) return y * 2.0 * TWO1023;
    return y * twoTo(k);
  }
  return y * twoTo(k + 1000) * TWOM1000;
}
