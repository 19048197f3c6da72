/**
 * The portable calibrator (`calibrator.json`, models/README.md): a linear model over a
 * feature map, or an isotonic table over such a linear index, with the same checks, floors
 * and clamps as `amv_calib.contract._features`.
 *
 * `predictOne` repeats `PortableCalibrator.predict_one` operation for operation: the terms
 * summed in order from the intercept, the sigmoid in its two stable branches, numpy's
 * `interp` (including its equal-knot and NaN fall-backs) and the final clip, with the
 * portable `log`, `log1p` and `exp` of `portableMath.ts` (never the platform's `Math.log`,
 * `Math.log1p` or `Math.exp`): the probability is Python's, bit for bit.
 */

import fs from "node:fs";

import { has, isObject, writtenAsFloat, type Json } from "./json.js";
import { portableExp, portableLog, portableLog1p } from "./portableMath.js";
import { formatG, reprJson, reprList, reprStr } from "./pyfmt.js";

export const PORTABLE_FORMAT = "amv-calib/portable-calibrator";
export const PORTABLE_FORMAT_VERSION = 1;
/** The version of a calibrator with memory kinds; one without them keeps version 1. */
export const PORTABLE_FORMAT_VERSION_KINDS = 2;

/** The memory-kind rules of `artifact_rules.json` (copied beside this file at build). */
const KIND_RULES = (JSON.parse(fs.readFileSync(new URL("./artifact_rules.json", import.meta.url), "utf8")) as
  { calibrator: { kinds: { max_length: number; other: string } } }).calibrator.kinds;
/** The kind a claim whose kind is absent or outside the vocabulary is evaluated as. */
export const OTHER_KIND: string = KIND_RULES.other;
/** Longest memory kind of a vocabulary, in characters (code points). */
export const MAX_KIND_LENGTH: number = KIND_RULES.max_length;
/** The four raw claim features, in canonical order. */
export const CLAIM_FEATURES = ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"] as const;
export const TRANSFORMS = ["identity", "logit", "log", "log1m", "ramp", "log1p", "indicator"] as const;
/** Default floor of `logit`, `log` and `log1m` (the seed clips confidence at 1e-5). */
export const DEFAULT_EPS = 1e-5;

export type Transform = (typeof TRANSFORMS)[number];
export type Feature = (typeof CLAIM_FEATURES)[number];

const NEEDS_SCALE = new Set(["ramp", "log1p"]);
const NEEDS_EPS = new Set(["logit", "log", "log1m"]);

/** A calibrator description that breaks the format (Python's `PortableFormatError`). */
export class PortableFormatError extends Error {
  override name = "PortableFormatError";
}

function finiteFloat(value: unknown, what: string): number {
  if (typeof value !== "number") throw new PortableFormatError(`${what}=${reprJson(value)} is not a number`);
  if (!Number.isFinite(value)) throw new PortableFormatError(`${what}=${reprJson(value)} is not finite`);
  return value;
}

function floatList(value: unknown, what: string): number[] {
  if (!Array.isArray(value)) throw new PortableFormatError(`${what} must be a list of numbers, got ${reprJson(value)}`);
  return value.map((v, i) => finiteFloat(v, `${what}[${i}]`));
}

function choice(name: string, value: unknown, choices: readonly string[]): void {
  if (typeof value !== "string" || !choices.includes(value)) {
    const allowed = choices.length === 1 ? reprStr(choices[0] as string)
      : choices.slice(0, -1).map(reprStr).join(", ") + " or " + reprStr(choices[choices.length - 1] as string);
    throw new PortableFormatError(`${name}=${reprJson(value)} must be ${allowed}`);
  }
}

/** Check that a JSON object declares `format` `name` at `format_version` `version` (or one of a list). */
export function checkFormat(data: Record<string, Json>, name: string, version: number | readonly number[]): void {
  const fmt = has(data, "format") ? data["format"] : null;
  if (fmt !== name) throw new PortableFormatError(`format=${reprJson(fmt)}, expected ${reprStr(name)}`);
  const v = has(data, "format_version") ? data["format_version"] : null;
  const versions: readonly number[] = typeof version === "number" ? [version] : version;
  // a JSON integer: true is not 1, nor (when the parser marked it) is 1.0
  if (typeof v !== "number" || !versions.includes(v) || writtenAsFloat(data, "format_version")) {
    throw new PortableFormatError(`unknown format_version=${reprJson(v)}; this version of amv-calib reads format_version ${versions.join(" or ")}`);
  }
}

/** Python's `len` of a string: its code points (a lone surrogate counts one). */
function codePoints(s: string): number[] {
  return Array.from(s, (c) => c.codePointAt(0) as number);
}

/** Python's `a < b` on strings: code-point order (not the UTF-16 code units of JavaScript's `<`). */
export function codePointLess(a: string, b: string): boolean {
  const x = codePoints(a);
  const y = codePoints(b);
  for (let i = 0; i < x.length && i < y.length; i++) {
    if (x[i] !== y[i]) return (x[i] as number) < (y[i] as number);
  }
  return x.length < y.length;
}

function checkKind(value: unknown, what: string): string {
  if (typeof value !== "string") throw new PortableFormatError(`${what}=${reprJson(value)} is not a string`);
  const n = codePoints(value).length;
  if (n < 1 || n > MAX_KIND_LENGTH) {
    throw new PortableFormatError(`${what}=${reprStr(value)} must have 1 to ${MAX_KIND_LENGTH} characters, not ${n}`);
  }
  return value;
}

/** One feature: `transform` applied to the raw claim feature `column` (times `by`). */
export class Term {
  readonly transform: Transform;
  readonly column: Feature;
  readonly by: Feature | null;
  /** The eps in force (the default when none is given). */
  private readonly floor: number;

  constructor(column: string, transform: string, readonly scale: number | null,
    readonly eps: number | null, by: string | null, readonly kind: string | null = null) {
    if (!(CLAIM_FEATURES as readonly string[]).includes(column)) {
      throw new PortableFormatError(`feature term column=${reprStr(column)} is not a claim feature; expected one of ${reprList(CLAIM_FEATURES)}`);
    }
    if (!(TRANSFORMS as readonly string[]).includes(transform)) {
      throw new PortableFormatError(`feature term transform=${reprStr(transform)} is not in the vocabulary ${reprList(TRANSFORMS)}`);
    }
    if (NEEDS_SCALE.has(transform)) {
      if (scale === null || !Number.isFinite(scale) || scale <= 0) {
        throw new PortableFormatError(`transform ${reprStr(transform)} needs a finite scale > 0, got scale=${reprJson(scale)}`);
      }
    } else if (scale !== null) throw new PortableFormatError(`transform ${reprStr(transform)} takes no scale`);
    if (NEEDS_EPS.has(transform)) {
      if (eps !== null && !(eps > 0 && eps < 0.5)) throw new PortableFormatError(`eps=${reprJson(eps)} must lie in (0, 0.5)`);
    } else if (eps !== null) throw new PortableFormatError(`transform ${reprStr(transform)} takes no eps`);
    if (by !== null && (!(CLAIM_FEATURES as readonly string[]).includes(by) || by === column)) {
      throw new PortableFormatError(`feature term by=${reprStr(by)} must be a claim feature other than ${reprStr(column)}; expected one of ${reprList(CLAIM_FEATURES)}`);
    }
    if (kind !== null) checkKind(kind, "feature term kind");
    this.column = column as Feature;
    this.transform = transform as Transform;
    this.by = by as Feature | null;
    this.floor = eps ?? DEFAULT_EPS;
    Object.freeze(this);
  }

  /** Readable name such as `logit(model_confidence)` or `ramp(recency_hours, 720)[kind=event]`. */
  get name(): string {
    let base = this.scale !== null ? `${this.transform}(${this.column}, ${formatG(this.scale)})` : `${this.transform}(${this.column})`;
    if (this.by !== null) base = `${base}*${this.by}`;
    return this.kind === null ? base : `${base}[kind=${this.kind}]`;
  }

  /** The transform of one raw value (Python's `apply_scalar`). */
  apply(x: number): number {
    const eps = this.floor;
    switch (this.transform) {
      case "identity": return x;
      case "logit": return portableLog(pyMax(eps, x)) - portableLog(pyMax(eps, 1.0 - x));
      case "log": return portableLog(pyMax(eps, x));
      case "log1m": return -portableLog(pyMax(eps, 1.0 - x));
      case "ramp": return pyMin(1.0, x / (this.scale as number));
      case "log1p": return portableLog1p(x / (this.scale as number));
      default: return x > 0.5 ? 1.0 : 0.0;
    }
  }

  equals(o: Term): boolean {
    return this.column === o.column && this.transform === o.transform && this.scale === o.scale
      && this.eps === o.eps && this.by === o.by && this.kind === o.kind;
  }

  toDict(): Record<string, Json> {
    const out: Record<string, Json> = { column: this.column, transform: this.transform };
    if (this.scale !== null) out["scale"] = this.scale;
    if (this.eps !== null) out["eps"] = this.eps;
    if (this.by !== null) out["by"] = this.by;
    if (this.kind !== null) out["kind"] = this.kind;
    return out;
  }

  /** Build a term from its plain-data form, refusing unknown keys. */
  static fromDict(data: Json): Term {
    if (!isObject(data)) throw new PortableFormatError(`feature term must be an object, got ${reprJson(data)}`);
    const unknown = Object.keys(data).filter((k) => !["column", "transform", "scale", "eps", "by", "kind"].includes(k)).sort();
    if (unknown.length) throw new PortableFormatError(`feature term has unknown keys ${reprList(unknown)}`);
    for (const key of ["column", "transform"]) {
      if (!has(data, key)) throw new PortableFormatError(`feature term lacks ${reprStr(key)}: ${reprJson(data)}`);
    }
    const opt = (k: string): Json => (has(data, k) ? (data[k] as Json) : null);
    const scale = opt("scale");
    const eps = opt("eps");
    const by = opt("by");
    const kind = opt("kind");
    if (kind !== null && typeof kind !== "string") throw new PortableFormatError(`feature term kind=${reprJson(kind)} is not a string`);
    return new Term(pyStr(data["column"] as Json), pyStr(data["transform"] as Json),
      scale === null ? null : finiteFloat(scale, "scale"), eps === null ? null : finiteFloat(eps, "eps"),
      by === null ? null : pyStr(by), kind);
  }
}

/** `str(value)` of a JSON string; other values are refused (Python would stringify them). */
function pyStr(v: Json): string {
  if (typeof v !== "string") throw new PortableFormatError(`${reprJson(v)} must be a string`);
  return v;
}

/** Python's `max(a, b)` / `min(a, b)`: the first argument unless the second is strictly beyond. */
export function pyMax(a: number, b: number): number {
  return b > a ? b : a;
}
export function pyMin(a: number, b: number): number {
  return b < a ? b : a;
}

/** An ordered, non-empty list of terms without repeats. */
export function featureMapFromList(data: Json): Term[] {
  if (!Array.isArray(data)) throw new PortableFormatError(`feature_map must be a list of terms, got ${reprJson(data)}`);
  const terms = data.map((t) => Term.fromDict(t));
  if (terms.length === 0) throw new PortableFormatError("a feature map needs at least one term");
  const names = terms.map((t) => t.name);
  if (new Set(names).size !== names.length) throw new PortableFormatError(`feature map repeats a term: ${reprList(names)}`);
  return terms;
}

export function sameFeatureMap(a: readonly Term[], b: readonly Term[]): boolean {
  return a.length === b.length && a.every((t, i) => t.equals(b[i] as Term));
}

/** numpy's `interp(z, xs, ys)` for one point (numpy/_core/src/multiarray/compiled_base.c). */
export function interp(z: number, xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  const left = ys[0] as number;
  const right = ys[n - 1] as number;
  if (n === 1) {
    const x0 = xs[0] as number;
    return z < x0 ? left : z > x0 ? right : (ys[0] as number);
  }
  if (Number.isNaN(z)) return z;
  if (z > (xs[n - 1] as number)) return right;
  if (z < (xs[0] as number)) return left;
  // the largest j with xs[j] <= z
  let lo = 0;
  let hi = n;
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if ((xs[mid] as number) <= z) lo = mid;
    else hi = mid;
  }
  const j = lo;
  if (j === n - 1) return ys[j] as number;
  const xj = xs[j] as number;
  if (xj === z) return ys[j] as number;
  const yj = ys[j] as number;
  const yj1 = ys[j + 1] as number;
  const xj1 = xs[j + 1] as number;
  const slope = (yj1 - yj) / (xj1 - xj);
  let out = slope * (z - xj) + yj;
  if (Number.isNaN(out)) {
    out = slope * (z - xj1) + yj1;
    if (Number.isNaN(out) && yj === yj1) out = yj;
  }
  return out;
}

export type Kind = "linear" | "isotonic";

/** A fitted calibrator as plain data (`calibrator.json`). */
export class PortableCalibrator {
  /** Kind -> index in `kinds`. */
  private readonly codes: ReadonlyMap<string, number>;
  /** Per term, the index of its kind in `kinds`, or -1 for a term of every kind. */
  readonly termKindCodes: readonly number[];

  constructor(
    readonly kind: Kind,
    readonly featureMap: readonly Term[],
    readonly intercept: number,
    readonly coef: readonly number[],
    readonly xKnots: readonly number[],
    readonly yKnots: readonly number[],
    readonly clamp: readonly [number, number] | null,
    readonly source: string,
    /** The memory kinds (sorted, with "other"); empty for a calibrator without kinds. */
    readonly kinds: readonly string[] = [],
    readonly kindIntercept: readonly number[] = [],
  ) {
    choice("kind", kind, ["linear", "isotonic"]);
    if (coef.length !== featureMap.length) {
      throw new PortableFormatError(`coef has ${coef.length} entries for ${featureMap.length} terms`);
    }
    [intercept, ...coef].forEach((c, i) => {
      if (!Number.isFinite(c)) throw new PortableFormatError(`coefficient ${i} = ${reprJson(c)} is not finite`);
    });
    if (clamp !== null) {
      const [lo, hi] = clamp;
      if (!(lo >= 0 && lo < hi && hi <= 1)) throw new PortableFormatError(`clamp=${reprJson(clamp)} must satisfy 0 <= lo < hi <= 1`);
    }
    if (kind === "isotonic") {
      const x = xKnots;
      const y = yKnots;
      if (x.length === 0 || x.length !== y.length) {
        throw new PortableFormatError(`isotonic table needs as many x_knots as y_knots, at least one (got ${x.length} and ${y.length})`);
      }
      if (!x.every(Number.isFinite) || !y.every(Number.isFinite)) throw new PortableFormatError("isotonic table has non-finite knots");
      for (let i = 0; i + 1 < x.length; i++) {
        if (!((x[i + 1] as number) - (x[i] as number) > 0)) {
          throw new PortableFormatError(`isotonic x_knots are not strictly increasing at index ${i + 1}: ${reprJson(x[i])} then ${reprJson(x[i + 1])}`);
        }
      }
      for (let i = 0; i + 1 < y.length; i++) {
        if ((y[i + 1] as number) - (y[i] as number) < 0) {
          throw new PortableFormatError(`isotonic table is not monotone: y_knots[${i}]=${reprJson(y[i])} > y_knots[${i + 1}]=${reprJson(y[i + 1])}`);
        }
      }
      if (y.some((v) => v < 0 || v > 1)) throw new PortableFormatError("isotonic y_knots must lie in [0, 1]");
    } else if (xKnots.length || yKnots.length) throw new PortableFormatError("a linear calibrator takes no knots");
    kinds.forEach((k, i) => checkKind(k, `kinds[${i}]`));
    for (let i = 1; i < kinds.length; i++) {
      const a = kinds[i - 1] as string;
      const b = kinds[i] as string;
      if (a === b) throw new PortableFormatError(`kinds repeats ${reprStr(b)} (kinds[${i}])`);
      if (codePointLess(b, a)) {
        throw new PortableFormatError(`kinds are not sorted: kinds[${i - 1}]=${reprStr(a)} comes before kinds[${i}]=${reprStr(b)}`);
      }
    }
    if (kinds.length && !kinds.includes(OTHER_KIND)) throw new PortableFormatError(`kinds=${reprList(kinds)} lacks ${reprStr(OTHER_KIND)}`);
    if (kindIntercept.length !== kinds.length) {
      throw new PortableFormatError(`kind_intercept has ${kindIntercept.length} entries for ${kinds.length} kinds`);
    }
    kindIntercept.forEach((c, i) => {
      if (typeof c !== "number" || !Number.isFinite(c)) throw new PortableFormatError(`kind_intercept[${i}]=${reprJson(c)} is not a finite number`);
    });
    const codes = new Map(kinds.map((k, i) => [k, i] as const));
    this.termKindCodes = featureMap.map((t, j) => {
      if (t.kind === null) return -1;
      const c = codes.get(t.kind);
      if (c === undefined) {
        throw new PortableFormatError(`feature term ${j} (${t.name}) has kind=${reprStr(t.kind)}, which is not in kinds=${reprList(kinds)}`);
      }
      return c;
    });
    this.codes = codes;
    Object.freeze(this);
  }

  /** Whether the calibrator reads the claims' memory kind (format_version 2). */
  get hasKinds(): boolean {
    return this.kinds.length > 0;
  }

  /** The index in `kinds` a claim of `memoryKind` is evaluated as: "other" when absent or unknown; -1 without kinds. */
  kindCode(memoryKind: string | null): number {
    if (this.kinds.length === 0) return -1;
    const c = memoryKind === null ? undefined : this.codes.get(memoryKind);
    return c === undefined ? (this.codes.get(OTHER_KIND) as number) : c;
  }

  /** The same calibrator under another clamp. */
  withClamp(clamp: readonly [number, number] | null): PortableCalibrator {
    return new PortableCalibrator(this.kind, this.featureMap, this.intercept, this.coef, this.xKnots,
      this.yKnots, clamp, this.source, this.kinds, this.kindIntercept);
  }

  /**
   * Probability for one claim given as `{feature: value}` (Python's `predict_one`): the
   * intercept, the kind's intercept, then the terms in order, those of other kinds skipped.
   */
  predictOne(features: Readonly<Record<string, number>>, memoryKind: string | null = null): number {
    let z = this.intercept;
    const terms = this.featureMap;
    let k = -1;
    if (this.kinds.length) {
      k = this.kindCode(memoryKind);
      z += this.kindIntercept[k] as number;
    }
    for (let j = 0; j < terms.length; j++) {
      const tk = this.termKindCodes[j] as number;
      if (tk >= 0 && tk !== k) continue;
      const t = terms[j] as Term;
      const v = t.apply(features[t.column] as number);
      z += (this.coef[j] as number) * (t.by === null ? v : v * (features[t.by] as number));
    }
    let p: number;
    if (this.kind === "isotonic") p = interp(z, this.xKnots, this.yKnots);
    else if (z >= 0) p = 1.0 / (1.0 + portableExp(-z));
    else {
      const e = portableExp(z);
      p = e / (1.0 + e);
    }
    if (this.clamp !== null) p = pyMin(this.clamp[1], pyMax(this.clamp[0], p));
    return p;
  }

  /** Validate and build from the `calibrator.json` object; never executes code. */
  static fromDict(data: Json): PortableCalibrator {
    if (!isObject(data)) throw new PortableFormatError("calibrator description must be a JSON object");
    checkFormat(data, PORTABLE_FORMAT, [PORTABLE_FORMAT_VERSION, PORTABLE_FORMAT_VERSION_KINDS]);
    const allowed = ["format", "format_version", "kind", "source", "feature_map", "intercept", "coef", "clamp", "x_knots", "y_knots",
      "kinds", "kind_intercept"];
    const unknown = Object.keys(data).filter((k) => !allowed.includes(k)).sort();
    if (unknown.length) throw new PortableFormatError(`calibrator description has unknown keys ${reprList(unknown)}`);
    for (const key of ["kind", "feature_map", "intercept", "coef"]) {
      if (!has(data, key)) throw new PortableFormatError(`calibrator description lacks ${reprStr(key)}`);
    }
    let clamp: [number, number] | null = null;
    const rawClamp = has(data, "clamp") ? (data["clamp"] as Json) : null;
    if (rawClamp !== null) {
      const c = floatList(rawClamp, "clamp");
      if (c.length !== 2) throw new PortableFormatError(`clamp must be [lo, hi], got ${reprJson(rawClamp)}`);
      clamp = [c[0] as number, c[1] as number];
    }
    const kind = data["kind"];
    choice("kind", kind, ["linear", "isotonic"]);
    const terms = featureMapFromList(data["feature_map"] as Json);
    const [kinds, kindIntercept] = kindFields(data, terms);
    const source = has(data, "source") ? data["source"] : "";
    return new PortableCalibrator(kind as Kind, terms, finiteFloat(data["intercept"], "intercept"),
      floatList(data["coef"], "coef"),
      floatList(has(data, "x_knots") ? data["x_knots"] : [], "x_knots"),
      floatList(has(data, "y_knots") ? data["y_knots"] : [], "y_knots"),
      clamp, typeof source === "string" ? source : JSON.stringify(source), kinds, kindIntercept);
  }
}

/**
 * `kinds` and `kind_intercept` of a `calibrator.json` object, checked against its
 * `format_version`: 2 exactly when the memory-kind fields are there (Python's `_kind_fields`).
 */
function kindFields(data: Record<string, Json>, terms: readonly Term[]): [string[], number[]] {
  const opt = (k: string): Json => (has(data, k) ? (data[k] as Json) : null);
  if (data["format_version"] === PORTABLE_FORMAT_VERSION) {
    const given = ["kinds", "kind_intercept"].filter((k) => has(data, k));
    terms.forEach((t, j) => {
      if (t.kind !== null) given.push(`feature_map[${j}].kind`);
    });
    if (given.length) {
      throw new PortableFormatError(`format_version=1 takes no memory kinds, got ${given.join(", ")}; a calibrator with kinds has format_version ${PORTABLE_FORMAT_VERSION_KINDS}`);
    }
    return [[], []];
  }
  const rawKinds = opt("kinds");
  const rawIntercept = opt("kind_intercept");
  if (rawKinds === null) throw new PortableFormatError(`format_version=${PORTABLE_FORMAT_VERSION_KINDS} needs 'kinds'`);
  if (rawIntercept === null) throw new PortableFormatError(`format_version=${PORTABLE_FORMAT_VERSION_KINDS} needs 'kind_intercept'`);
  if (!Array.isArray(rawKinds)) throw new PortableFormatError(`kinds=${reprJson(rawKinds)} must be a list of strings`);
  if (rawKinds.length === 0) throw new PortableFormatError(`kinds=[] lacks ${reprStr(OTHER_KIND)}`);
  const kinds = rawKinds.map((k, i) => checkKind(k, `kinds[${i}]`));
  return [kinds, floatList(rawIntercept, "kind_intercept")];
}

/**
 * The seed engine's `calibratePremiseFailureProbability`, operation by operation (the
 * gate's `mode: "seed"` without a calibrator).
 */
export function seedCalibrate(recencyHours: number, sourceTrustScore: number, modelConfidence: number,
  contradictionFlag: boolean): number {
  const recencyPenalty = pyMin(1.0, recencyHours / (24 * 30));
  const logitConf = Math.log(pyMax(1e-5, modelConfidence) / pyMax(1e-5, 1 - modelConfidence));
  const z = -0.85 - (1.42 * logitConf) + (2.15 * recencyPenalty) - (1.80 * sourceTrustScore) + (contradictionFlag ? 2.5 : 0.0);
  return pyMax(0.001, pyMin(0.999, 1.0 / (1.0 + Math.exp(-z))));
}
