/**
 * The runtime gate: screened stopping value, corrected VOI, sequential stopping, planning.
 *
 * A transcription of the Python reference engine (`amv_calib/gate/_engine.py`; its module
 * docstring gives the arithmetic): the same screen, the same joint-outcome enumeration and
 * operation order for the one-step VOIs, the work bound with its upper bounds and reasons,
 * the harm price, the seed mode operation by operation, and the lookahead planner of
 * `planner.ts`. Every decision carries the same fields and the same reason text as Python's
 * `Decision`; `Decision.toDict()` is Python's `Decision.to_dict()`.
 */

import { PortableCalibrator, pyMax, pyMin, seedCalibrate } from "./calibrator.js";
import { DecisionLogWriter, utcNowIso, type DecisionRecord } from "./decisionLog.js";
import {
  checkAction, checkVerifier, CheckedAction, CheckedPremise, CheckedVerifier,
  type ActionInput, type VerifierInput,
} from "./model.js";
import { MAX_OUTCOMES, enumerable, plan, type Spec } from "./planner.js";
import { formatG, reprJson, reprList, reprStr } from "./pyfmt.js";

export type Regime = "PROCEED" | "VERIFY" | "ABSTAIN";
export type PlannerName = "lookahead" | "myopic";
export type Mode = "amv" | "seed";

/** 0 = PROCEED, 1 = VERIFY, 2 = ABSTAIN (the batch arrays' codes). */
export const REGIME_CODES: Readonly<Record<Regime, number>> = Object.freeze({ PROCEED: 0, VERIFY: 1, ABSTAIN: 2 });
/** VERIFY needs a VOI above `VOI_TOLERANCE * (theta + kappa)` (mode "amv"). */
export const VOI_TOLERANCE = 1e-12;

/** Most verifier ids a reason lists (the rest are counted). */
const LISTED = 5;

const R_PROCEED = "admissible (R <= min(delta, kappa) and H <= epsilon) and no verification is worth its cost";
const R_PROCEED_NONE = "admissible (R <= min(delta, kappa) and H <= epsilon); no verifier left";
const R_ABSTAIN_H = "harm H = P_any exceeds epsilon and no verification is worth its cost";
const R_ABSTAIN_R = "expected loss R = theta * P_any exceeds min(delta, kappa) and no verification is worth its cost";
const R_ABSTAIN_R_PRICED = "expected loss R = (theta + harm_price) * P_any exceeds min(delta, kappa) and no verification is worth its cost";
const R_ABSTAIN_NONE = "not admissible (R > min(delta, kappa) or H > epsilon); no verifier left";
const R_VERIFY = "has the largest one-step VOI, and it is positive";
const R_VERIFY_PLAN = "is the first call of the verification plan that beats stopping";
const R_ABSTAIN_BOUND = "admissible, but the work bound left out verifiers that could be worth calling; the gate does not proceed on a value it could not compute";

/** A premise the gate cannot give a probability (it fails closed: ABSTAIN). */
export class UncalibratedPremiseError extends Error {
  override name = "UncalibratedPremiseError";
}

/** What the gate decided for one action, and why (Python's `Decision`, camelCase). */
export class Decision {
  constructor(
    readonly regime: Regime,
    /** The verifier to call now (VERIFY only): the object the caller gave. */
    readonly verifier: object | null,
    readonly verifierId: string | null,
    /** Myopic: the largest one-step VOI; lookahead: `vStop - plannerValue`; null without a verifier. */
    readonly voi: number | null,
    readonly vStop: number,
    /** `(theta + harm_price) * P_any`. */
    readonly rExpected: number,
    /** `P_any`. */
    readonly hHarm: number,
    readonly probabilities: readonly number[],
    readonly reason: string,
    readonly plannerValue: number | null,
    /** One-step VOI of each verifier offered, in order; NaN for one the work bound left out. */
    readonly vois: readonly number[],
    /** Joint outcomes enumerated for the one-step VOIs. */
    readonly outcomes: number,
    /** Ids of the verifiers the work bound left out. */
    readonly leftOut: readonly string[],
    /** Beliefs the lookahead planner valued. */
    readonly plannerStates: number,
  ) {}

  /** 0 = PROCEED, 1 = VERIFY, 2 = ABSTAIN. */
  get regimeCode(): number {
    return REGIME_CODES[this.regime];
  }

  /** Python's `Decision.to_dict()`: snake_case, the verifier by id, NaN VOIs as null. */
  toDict(): Record<string, unknown> {
    return {
      regime: this.regime,
      verifier: this.verifierId,
      voi: this.voi,
      v_stop: this.vStop,
      r_expected: this.rExpected,
      h_harm: this.hHarm,
      probabilities: [...this.probabilities],
      reason: this.reason,
      planner_value: this.plannerValue,
      vois: this.vois.map((x) => (Number.isNaN(x) ? null : x)),
      outcomes: this.outcomes,
      left_out: [...this.leftOut],
      planner_states: this.plannerStates,
    };
  }
}

function decision(regime: Regime, v: CheckedVerifier | null, voi: number | null, vStop: number, rx: number,
  h: number, probs: readonly number[], reason: string, value: number | null, vois: readonly number[],
  spent = 0, out: readonly string[] = [], states = 0): Decision {
  return new Decision(regime, v === null ? null : v.source, v === null ? null : v.id, voi, vStop, rx, h,
    probs, reason, value, vois, spent, out, states);
}

/** Signals of one verifier call: premise id -> true when it confirms the premise valid. */
export type Signals = Readonly<Record<string, boolean>>;

/** One verification of a sequential run. */
export interface RunStep {
  readonly decision: Decision;
  readonly verifier: object;
  readonly verifierId: string;
  readonly signals: Signals;
  readonly posteriorsBefore: readonly number[];
  readonly posteriorsAfter: readonly number[];
  readonly costSpent: number;
}

/** A sequential run: every verification, and the decision it stopped with. */
export class RunTrace {
  constructor(
    readonly steps: readonly RunStep[],
    readonly final: Decision,
    /** Summed execution cost (not scaled by lambda). */
    readonly totalCost: number,
    readonly prior: readonly number[],
    readonly posteriors: readonly number[],
  ) {
    Object.freeze(this);
  }

  get verifications(): number {
    return this.steps.length;
  }

  /** Python's `RunTrace.to_dict()`. */
  toDict(): Record<string, unknown> {
    return {
      steps: this.steps.map((s) => ({
        decision: s.decision.toDict(),
        verifier: s.verifierId,
        signals: { ...s.signals },
        posteriors_before: [...s.posteriorsBefore],
        posteriors_after: [...s.posteriorsAfter],
        cost_spent: s.costSpent,
      })),
      final: this.final.toDict(),
      total_cost: this.totalCost,
      prior: [...this.prior],
      posteriors: [...this.posteriors],
    };
  }
}

// -- posterior updates ----------------------------------------------------------------------

/** `P(violated | confirm) = p(1-r) / (p(1-r) + (1-p)r)`; 0 for a confirmation of probability 0. */
export function posteriorConfirm(p: number, r: number): number {
  const num = p * (1.0 - r);
  const den = num + (1.0 - p) * r;
  return den > 0.0 ? num / den : 0.0;
}

/** `P(violated | refute) = p r / (p r + (1-p)(1-r))`; 1 for a refutation of probability 0. */
export function posteriorRefute(p: number, r: number): number {
  const num = p * r;
  const den = num + (1.0 - p) * (1.0 - r);
  return den > 0.0 ? num / den : 1.0;
}

function seedPosterior(p: number, r: number, confirm: boolean): number {
  // the seed's own arithmetic: P(refute) = 1 - P(confirm), clipped to [0, 1]
  const pc = (1.0 - p) * r + p * (1.0 - r);
  if (confirm) return pc > 0.0 ? pyMin(1.0, pyMax(0.0, (p * (1.0 - r)) / pc)) : 0.0;
  const pr = 1.0 - pc;
  return pr > 0.0 ? pyMin(1.0, pyMax(0.0, (p * r) / pr)) : 1.0;
}

function signalsOf(v: CheckedVerifier, raw: unknown): Record<string, boolean> {
  const ids = v.ids;
  if (typeof raw === "boolean") {
    if (ids.length === 1) return { [ids[0] as string]: raw };
    throw new RangeError(`verifier ${reprStr(v.id)} resolves ${ids.length} premises; its signals must be a mapping premise id -> bool, got ${reprJson(raw)}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new TypeError(`signals of verifier ${reprStr(v.id)} must be a mapping premise id -> bool, got ${reprJson(raw)}`);
  }
  const out: Record<string, boolean> = {};
  for (const [pid, val] of Object.entries(raw as Record<string, unknown>)) {
    if (!ids.includes(pid)) {
      throw new RangeError(`signals of verifier ${reprStr(v.id)} name premise ${reprStr(pid)}, which it does not resolve (${reprList(ids)})`);
    }
    if (typeof val !== "boolean") {
      throw new TypeError(`signal for premise ${reprStr(pid)} of verifier ${reprStr(v.id)}=${reprJson(val)} must be a boolean (True = confirms valid)`);
    }
    out[pid] = val;
  }
  return out;
}

// -- the gate -------------------------------------------------------------------------------

function unknownPremise(v: CheckedVerifier, pid: string, action: CheckedAction): RangeError {
  return new RangeError(`resolves_premise_ids of verifier ${reprStr(v.id)} names premise ${reprStr(pid)}, which action ${reprStr(action.actionId)} does not have (its premises: ${reprList([...action.index.keys()])})`);
}

function expectation(probs: readonly number[], q: number, idx: readonly number[], r: number, theta: number,
  kappa: number, lim: number, eps: number): number {
  // E[V_stop after the verifier] over its 2^k joint outcomes
  const s = 1.0 - r;
  if (idx.length === 2) { // unrolled; the same products in the same order as the loop below
    const p1 = probs[idx[0] as number] as number;
    const p2 = probs[idx[1] as number] as number;
    const a1 = 1.0 - p1;
    const a2 = 1.0 - p2;
    const c1 = a1 * r + p1 * s;
    const e1 = p1 * r + a1 * s;
    const c2 = a2 * r + p2 * s;
    const e2 = p2 * r + a2 * s;
    const f1s = [c1 > 0.0 ? r / c1 : 0.0, e1 > 0.0 ? s / e1 : 0.0];
    const f2s = [c2 > 0.0 ? r / c2 : 0.0, e2 > 0.0 ? s / e2 : 0.0];
    const w1s = [c1, e1];
    const w2s = [c2, e2];
    let e = 0.0;
    for (let o1 = 0; o1 < 2; o1++) {
      const w1 = w1s[o1] as number;
      if (w1 > 0.0) {
        const g = q * (f1s[o1] as number);
        for (let o2 = 0; o2 < 2; o2++) {
          const w2 = w2s[o2] as number;
          if (w2 > 0.0) {
            const h = 1.0 - g * (f2s[o2] as number);
            const rx = theta * h;
            e += (1.0 * w1 * w2) * (rx <= lim && h <= eps ? rx : kappa);
          }
        }
      }
    }
    return e;
  }
  let ws = [1.0];
  let fs = [q];
  for (const i of idx) {
    const p = probs[i] as number;
    const a = 1.0 - p;
    const pc = a * r + p * s;
    const pr = p * r + a * s;
    const nw: number[] = [];
    const nf: number[] = [];
    const fc = pc > 0.0 ? r / pc : 0.0;
    const fr = pr > 0.0 ? s / pr : 0.0;
    for (let t = 0; t < ws.length; t++) {
      const w = ws[t] as number;
      const f = fs[t] as number;
      if (pc > 0.0) {
        nw.push(w * pc);
        nf.push(f * fc);
      }
      if (pr > 0.0) {
        nw.push(w * pr);
        nf.push(f * fr);
      }
    }
    ws = nw;
    fs = nf;
  }
  let e = 0.0;
  for (let t = 0; t < ws.length; t++) {
    const h = 1.0 - (fs[t] as number);
    const rx = theta * h;
    e += (ws[t] as number) * (rx <= lim && h <= eps ? rx : kappa);
  }
  return e;
}

interface Screen {
  theta: number;
  kappa: number;
  lim: number;
  q: number;
  h: number;
  rx: number;
  adm: boolean;
  vStop: number;
}

/** A decision-log sink: a path (one JSON line per decision) or a function given each record. */
export type DecisionLogOption = string | ((record: DecisionRecord) => void);

/** The gate's settings (Python's `Gate` keyword arguments, camelCase). */
export interface GateOptions {
  /** lambda: weight of a verifier's execution cost in the loss (default 1). */
  lambdaCostScale?: number;
  /** delta: largest expected loss R an admissible action may carry (default 10). */
  deltaLossThreshold?: number;
  /** epsilon: largest harm probability H = P_any an admissible action may carry (default 0.05). */
  epsilonHarmBound?: number;
  /** mu >= 0: the price of harm, added to theta when planning (mode "amv"; default 0). */
  harmPrice?: number;
  planner?: PlannerName;
  mode?: Mode;
  /** Verifier calls allowed per action (default 8). */
  maxVerifications?: number;
  /** Whether `run` may call a verifier again (default false). */
  reuseVerifiers?: boolean;
  /** Computes p for premises that carry a claim but no probability. */
  calibrator?: PortableCalibrator | null;
  /** When set, every decision is ABSTAIN with this reason (a refused artifact). */
  refusal?: string | null;
  artifactName?: string | null;
  artifactVersion?: string | null;
  decisionLog?: DecisionLogOption | null;
}

/** A gate's thresholds and planner, checked. */
export interface GateSettings {
  readonly lambdaCostScale: number;
  readonly deltaLossThreshold: number;
  readonly epsilonHarmBound: number;
  readonly harmPrice: number;
  /** The planner in effect ("myopic" whenever mode is "seed"). */
  readonly planner: PlannerName;
  readonly mode: Mode;
  readonly maxVerifications: number;
  readonly reuseVerifiers: boolean;
}

function gateNumber(value: unknown, what: string): number {
  if (typeof value !== "number" || Number.isNaN(value)) throw new TypeError(`${what}=${reprJson(value)} is not a number`);
  return value;
}

function oneOf(name: string, value: unknown, choices: readonly string[]): void {
  if (typeof value !== "string" || !choices.includes(value)) {
    throw new RangeError(`${name}=${reprJson(value)} must be ${choices.slice(0, -1).map(reprStr).join(", ")} or ${reprStr(choices[choices.length - 1] as string)}`);
  }
}

/** Check a gate's settings (Python's `GateSettings`); a bad value names the option and the value. */
export function checkSettings(o: GateOptions): GateSettings {
  const lam = gateNumber(o.lambdaCostScale ?? 1.0, "lambda_cost_scale");
  if (!(lam >= 0.0 && Number.isFinite(lam))) throw new RangeError(`lambda_cost_scale=${reprJson(lam)} must be finite and >= 0`);
  const delta = gateNumber(o.deltaLossThreshold ?? 10.0, "delta_loss_threshold");
  if (!(delta >= 0.0)) throw new RangeError(`delta_loss_threshold=${reprJson(delta)} must be >= 0`);
  const eps = gateNumber(o.epsilonHarmBound ?? 0.05, "epsilon_harm_bound");
  if (!(eps >= 0.0 && eps <= 1.0)) throw new RangeError(`epsilon_harm_bound=${reprJson(eps)} must lie in [0, 1]`);
  const mu = gateNumber(o.harmPrice ?? 0.0, "harm_price");
  if (!(mu >= 0.0 && Number.isFinite(mu))) throw new RangeError(`harm_price=${reprJson(mu)} must be finite and >= 0`);
  const planner = o.planner ?? "lookahead";
  oneOf("planner", planner, ["lookahead", "myopic"]);
  const mode = o.mode ?? "amv";
  oneOf("mode", mode, ["amv", "seed"]);
  const m = o.maxVerifications ?? 8;
  if (typeof m !== "number" || !Number.isInteger(m) || m < 0) throw new RangeError(`max_verifications=${reprJson(m)} must be an int >= 0`);
  return Object.freeze({
    lambdaCostScale: lam, deltaLossThreshold: delta, epsilonHarmBound: eps, harmPrice: mu + 0.0,
    planner: mode === "seed" ? "myopic" : planner, mode, maxVerifications: m,
    reuseVerifiers: Boolean(o.reuseVerifiers ?? false),
  });
}

/** The AMV runtime gate: PROCEED, VERIFY or ABSTAIN for one candidate action. */
export class Gate {
  readonly settings: GateSettings;
  readonly calibrator: PortableCalibrator | null;
  /** Why this gate abstains on everything (a refused artifact), or null. */
  readonly refusal: string | null;
  readonly artifactName: string | null;
  readonly artifactVersion: string | null;
  private readonly lam: number;
  private readonly delta: number;
  private readonly eps: number;
  private readonly seed: boolean;
  /** What decisions add to theta: the seed engine knows no harm price. */
  private readonly price: number;
  private readonly lookahead: boolean;
  private readonly max: number;
  private readonly reuse: boolean;
  private readonly sink: ((record: DecisionRecord) => void) | null;

  constructor(options: GateOptions = {}) {
    const st = checkSettings(options);
    const cal = options.calibrator ?? null;
    if (cal !== null && !(cal instanceof PortableCalibrator)) throw new TypeError("calibrator must be a PortableCalibrator");
    const refusal = options.refusal ?? null;
    if (refusal !== null && typeof refusal !== "string") throw new TypeError(`refusal=${reprJson(refusal)} must be a string`);
    this.settings = st;
    this.lam = st.lambdaCostScale;
    this.delta = st.deltaLossThreshold;
    this.eps = st.epsilonHarmBound;
    this.seed = st.mode === "seed";
    this.price = this.seed ? 0.0 : st.harmPrice;
    this.lookahead = st.planner === "lookahead";
    this.max = st.maxVerifications;
    this.reuse = st.reuseVerifiers;
    this.calibrator = cal;
    this.refusal = refusal;
    this.artifactName = options.artifactName ?? null;
    this.artifactVersion = options.artifactVersion ?? null;
    const log = options.decisionLog ?? null;
    if (log === null) this.sink = null;
    else if (typeof log === "function") this.sink = log;
    else if (typeof log === "string") {
      const writer = new DecisionLogWriter(log);
      this.sink = (rec) => writer.append(rec);
    } else throw new TypeError(`decisionLog=${reprJson(log)} must be a path, a function or null`);
    Object.freeze(this);
  }

  get planner(): PlannerName {
    return this.settings.planner;
  }

  get mode(): Mode {
    return this.settings.mode;
  }

  /** Check an action once, for many decisions (evaluate checks a plain object on every call). */
  prepare(action: ActionInput): CheckedAction {
    return checkAction(action);
  }

  // -- probabilities ------------------------------------------------------------------------
  private calibrate(pm: CheckedPremise): number {
    const claim = pm.claim;
    if (claim === null) {
      throw new UncalibratedPremiseError(`premise ${reprStr(pm.id)} has no calibrated_violation_probability and no claim`);
    }
    const cal = this.calibrator;
    if (cal === null) {
      if (!this.seed) {
        throw new UncalibratedPremiseError(`premise ${reprStr(pm.id)} has no calibrated_violation_probability and the gate has no calibrator`);
      }
      return seedCalibrate(claim.recencyHours, claim.sourceTrustScore, claim.modelConfidence, claim.contradictionFlag);
    }
    const p = cal.predictOne(claim.features(), pm.memoryKind);
    if (!(p >= 0.0 && p <= 1.0)) {
      throw new UncalibratedPremiseError(`calibrator gave p=${reprJson(p)} for premise ${reprStr(pm.id)}, outside [0, 1]`);
    }
    return p;
  }

  private probs(action: CheckedAction): number[] {
    return action.premises.map((pm) => (pm.p === null ? this.calibrate(pm) : pm.p));
  }

  /** Violation probability of each premise, in premise order; throws UncalibratedPremiseError. */
  probabilities(action: ActionInput): number[] {
    return this.probs(checkAction(action));
  }

  /** `{vStop, rExpected, hHarm, admissible}`: the decision with no verifier offered. */
  stoppingValue(action: ActionInput): { vStop: number; rExpected: number; hHarm: number; admissible: boolean } {
    const a = checkAction(action);
    const d = this.decide(a, this.probs(a), [], 0, null);
    return { vStop: d.vStop, rExpected: d.rExpected, hHarm: d.hHarm, admissible: d.regime === "PROCEED" };
  }

  /** `V_stop - E_o[V_stop(b | o)] - lambda c` for one verifier (NaN past the work bound). */
  oneStepVoi(action: ActionInput, verifier: VerifierInput): number {
    const a = checkAction(action);
    const d = this.decide(a, this.probs(a), [checkVerifier(verifier)], 1, null);
    return d.vois[0] as number;
  }

  private indices(action: CheckedAction, v: CheckedVerifier): number[] {
    const out: number[] = [];
    for (const pid of v.ids) {
      const i = action.index.get(pid);
      if (i === undefined) throw unknownPremise(v, pid, action);
      out.push(i);
    }
    return out.sort((x, y) => x - y);
  }

  // -- decisions ------------------------------------------------------------------------------
  /**
   * Decide PROCEED, VERIFY (with which verifier) or ABSTAIN for `action`.
   *
   * Throws (RangeError/TypeError) for an input out of range or a verifier naming a premise
   * the action does not have; never for anything about the artifact or the probabilities,
   * which make the gate ABSTAIN with the reason.
   */
  evaluate(action: ActionInput, verifiers: readonly VerifierInput[] = []): Decision {
    const a = checkAction(action);
    const vs = verifiers.map(checkVerifier);
    let d: Decision | null = null;
    if (this.refusal !== null) {
      for (const v of vs) this.indices(a, v);
      d = this.closed(a, this.refusal);
    } else {
      let probs = a.explicit;
      if (probs === null) {
        try {
          probs = this.probs(a);
        } catch (exc) {
          if (!(exc instanceof UncalibratedPremiseError)) throw exc;
          for (const v of vs) this.indices(a, v);
          d = this.closed(a, `failing closed: ${exc.message}`);
        }
      }
      if (d === null) {
        d = this.seed ? this.decideSeed(a, probs as readonly number[], vs, this.max, a.theta, a.kappa)
          : this.decide(a, probs as readonly number[], vs, this.max, null);
      }
    }
    if (this.sink !== null) this.sink(this.record(a, d, null, vs));
    return d;
  }

  private closed(action: CheckedAction, reason: string): Decision {
    // fail closed as if every premise were violated: P_any = 1
    return decision("ABSTAIN", null, null, action.kappa, action.theta + this.price, 1.0, [], reason, null, []);
  }

  private decide(action: CheckedAction, probs: readonly number[], verifiers: readonly CheckedVerifier[], left: number,
    budget: number | null, limit = MAX_OUTCOMES): Decision {
    const kappa = action.kappa;
    if (this.seed) {
      const vs = budget === null ? verifiers : verifiers.filter((v) => v.cost <= budget);
      return this.decideSeed(action, probs, vs, left, action.theta, kappa);
    }
    const theta = action.theta + this.price;
    const delta = this.delta;
    const lim = delta < kappa ? delta : kappa;
    const eps = this.eps;
    const lam = this.lam;
    let q = 1.0;
    for (let i = 0; i < probs.length; i++) q *= 1.0 - (probs[i] as number);
    const h = 1.0 - q;
    const rx = theta * h;
    const adm = rx <= lim && h <= eps;
    const vStop = adm ? rx : kappa;
    const index = action.index;
    const look = this.lookahead;
    let best = -Infinity;
    let bestV: CheckedVerifier | null = null;
    let bestJ = -1;
    const vois: number[] = [];
    const specs: Spec[] = [];
    const offered: CheckedVerifier[] = [];
    let spent = 0; // joint outcomes enumerated so far
    if (left > 0) {
      for (let t = 0; t < verifiers.length; t++) {
        const v = verifiers[t] as CheckedVerifier;
        const pid = v.single;
        const r = v.r;
        let e: number;
        let idx: readonly number[];
        if (pid !== null) {
          const i = index.get(pid);
          if (i === undefined) throw unknownPremise(v, pid, action);
          spent += 2;
          if (spent > limit) {
            return this.decideBounded(action, probs, verifiers, left, budget, { theta, kappa, lim, q, h, rx, adm, vStop });
          }
          // one premise, unrolled
          const p = probs[i] as number;
          const s = 1.0 - r;
          const a = 1.0 - p;
          const pc = a * r + p * s;
          const pr = p * r + a * s;
          e = 0.0;
          if (pc > 0.0) {
            const hc = 1.0 - q * (r / pc);
            const rc = theta * hc;
            e = pc * (rc <= lim && hc <= eps ? rc : kappa);
          }
          if (pr > 0.0) {
            const hr = 1.0 - q * (s / pr);
            const rr = theta * hr;
            e += pr * (rr <= lim && hr <= eps ? rr : kappa);
          }
          idx = [i];
        } else {
          idx = this.indices(action, v);
          spent += 2 ** idx.length;
          if (spent > limit) {
            return this.decideBounded(action, probs, verifiers, left, budget, { theta, kappa, lim, q, h, rx, adm, vStop });
          }
          e = expectation(probs, q, idx, r, theta, kappa, lim, eps);
        }
        const cost = v.cost;
        const voi = vStop - e - lam * cost;
        vois.push(voi);
        if (budget !== null && cost > budget) continue;
        if (voi > best) {
          best = voi;
          bestV = v;
          bestJ = offered.length;
        }
        if (look) {
          specs.push({ idx, r, lamCost: lam * cost, cost });
          offered.push(v);
        }
      }
    } else {
      for (const v of verifiers) this.indices(action, v);
    }
    const tol = VOI_TOLERANCE * (theta + kappa);
    if (bestV === null) {
      return decision(adm ? "PROCEED" : "ABSTAIN", null, null, vStop, rx, h, probs,
        adm ? R_PROCEED_NONE : R_ABSTAIN_NONE, null, vois, spent);
    }
    if (look) {
      const pl = plan(probs, theta, kappa, lim, eps, specs, {
        depth: left, budget, reuse: this.reuse, myopicFirst: best > tol ? bestJ : null,
        myopicValue: vStop - best, tol,
      });
      const gain = vStop - pl.value;
      if (pl.first !== null && gain > tol) {
        const v = offered[pl.first] as CheckedVerifier;
        return decision("VERIFY", v, gain, vStop, rx, h, probs, "lookahead: verifier " + v.id + " " + R_VERIFY_PLAN,
          pl.value, vois, spent, [], pl.states);
      }
      return decision(adm ? "PROCEED" : "ABSTAIN", null, gain, vStop, rx, h, probs,
        adm ? R_PROCEED : abstainReason(rx, lim, this.price), pl.value, vois, spent, [], pl.states);
    }
    if (best > tol) {
      return decision("VERIFY", bestV, best, vStop, rx, h, probs, "verifier " + bestV.id + " " + R_VERIFY, null, vois, spent);
    }
    return decision(adm ? "PROCEED" : "ABSTAIN", null, best, vStop, rx, h, probs,
      adm ? R_PROCEED : abstainReason(rx, lim, this.price), null, vois, spent);
  }

  /** `decide` past the work bound (Python's `_decide_bounded`). */
  private decideBounded(action: CheckedAction, probs: readonly number[], verifiers: readonly CheckedVerifier[],
    left: number, budget: number | null, sc: Screen): Decision {
    const { theta, kappa, lim, q, h, rx, adm, vStop } = sc;
    const eps = this.eps;
    const lam = this.lam;
    const look = this.lookahead;
    const tol = VOI_TOLERANCE * (theta + kappa);
    // no policy loses less than the clairvoyant: P_any * min(theta, kappa)
    const lb = h * (theta < kappa ? theta : kappa);
    const idxs = verifiers.map((v) => this.indices(action, v));
    const keep = enumerable(idxs.map((idx) => idx.length));
    let best = -Infinity;
    let bestV: CheckedVerifier | null = null;
    let bestJ = -1;
    const vois: number[] = [];
    const specs: Spec[] = [];
    const offered: CheckedVerifier[] = [];
    const out: string[] = [];
    const could: [string, number][] = []; // left out, affordable, upper bound above tol
    let spent = 0;
    for (let t = 0; t < verifiers.length; t++) {
      const v = verifiers[t] as CheckedVerifier;
      const idx = idxs[t] as number[];
      const cost = v.cost;
      const affordable = budget === null || cost <= budget;
      if (!keep[t]) {
        vois.push(NaN);
        out.push(v.id);
        const ub = vStop - lam * cost - lb;
        if (affordable && ub > tol) could.push([v.id, ub]);
        continue;
      }
      spent += 2 ** idx.length;
      const r = v.r;
      const voi = vStop - expectation(probs, q, idx, r, theta, kappa, lim, eps) - lam * cost;
      vois.push(voi);
      if (!affordable) continue;
      if (voi > best) {
        best = voi;
        bestV = v;
        bestJ = offered.length;
      }
      specs.push({ idx, r, lamCost: lam * cost, cost });
      offered.push(v);
    }
    const note = boundNote(verifiers, idxs, keep, could);
    const stop: Regime = could.length || !adm ? "ABSTAIN" : "PROCEED";
    let states = 0;
    let voiOut: number | null;
    let value: number | null;
    let why: string;
    if (bestV === null) {
      voiOut = null;
      value = null;
      why = adm && could.length ? R_ABSTAIN_BOUND : adm ? R_PROCEED_NONE : R_ABSTAIN_NONE;
    } else if (look) {
      const pl = plan(probs, theta, kappa, lim, eps, specs, {
        depth: left, budget, reuse: this.reuse, myopicFirst: best > tol ? bestJ : null,
        myopicValue: vStop - best, tol,
      });
      voiOut = vStop - pl.value;
      value = pl.value;
      states = pl.states;
      if (pl.first !== null && voiOut > tol) {
        const v = offered[pl.first] as CheckedVerifier;
        return decision("VERIFY", v, voiOut, vStop, rx, h, probs, "lookahead: verifier " + v.id + " " + R_VERIFY_PLAN + note,
          value, vois, spent, out, states);
      }
      why = adm && could.length ? R_ABSTAIN_BOUND : adm ? R_PROCEED : abstainReason(rx, lim, this.price);
    } else {
      voiOut = best;
      value = null;
      if (best > tol) {
        return decision("VERIFY", bestV, best, vStop, rx, h, probs, "verifier " + bestV.id + " " + R_VERIFY + note, null,
          vois, spent, out, 0);
      }
      why = adm && could.length ? R_ABSTAIN_BOUND : adm ? R_PROCEED : abstainReason(rx, lim, this.price);
    }
    return decision(stop, null, voiOut, vStop, rx, h, probs, why + note, value, vois, spent, out, states);
  }

  /** The seed engine's evaluate(), operation by operation. */
  private decideSeed(action: CheckedAction, probs: readonly number[], verifiers: readonly CheckedVerifier[],
    left: number, theta: number, kappa: number): Decision {
    const delta = this.delta;
    const lim = kappa < delta ? kappa : delta;
    const eps = this.eps;
    const lam = this.lam;
    // pre[j]: the seed's running P_any after the first j premises
    const m = probs.length;
    const pre = new Array<number>(m + 1);
    pre[0] = 0.0;
    let h = 0.0;
    for (let j = 0; j < m; j++) {
      h = 1.0 - (1.0 - h) * (1.0 - (probs[j] as number));
      pre[j + 1] = h;
    }
    const rx = h * theta;
    const adm = rx <= lim && h <= eps;
    const vStop = adm ? rx : kappa;
    const index = action.index;
    let best = -Infinity;
    let bestV: CheckedVerifier | null = null;
    const vois: number[] = [];
    for (const v of verifiers) {
      const pid = v.single;
      let t: number | undefined;
      if (pid !== null) {
        t = index.get(pid);
        if (t === undefined) throw unknownPremise(v, pid, action);
      } else {
        const found = this.indices(action, v);
        t = found.length ? found[0] : undefined;
      }
      let voi: number;
      if (t === undefined) voi = -lam * v.cost;
      else {
        const p = probs[t] as number;
        const r = v.r;
        const pc = (1.0 - p) * r + p * (1.0 - r);
        const pr = 1.0 - pc;
        // a zero-probability outcome: the seed's NaN posterior is inadmissible and adds 0
        let e = 0.0;
        const base = 1.0 - (pre[t] as number);
        if (pc !== 0.0) {
          let acc = 1.0 - base * (1.0 - (p * (1.0 - r)) / pc);
          for (let j = t + 1; j < m; j++) acc = 1.0 - (1.0 - acc) * (1.0 - (probs[j] as number));
          const ra = acc * theta;
          e = pc * (ra <= lim && acc <= eps ? ra : kappa);
        }
        if (pr !== 0.0) {
          let acc = 1.0 - base * (1.0 - (p * r) / pr);
          for (let j = t + 1; j < m; j++) acc = 1.0 - (1.0 - acc) * (1.0 - (probs[j] as number));
          const ra = acc * theta;
          e = e + pr * (ra <= lim && acc <= eps ? ra : kappa);
        }
        voi = (vStop - e) - (lam * v.cost);
      }
      vois.push(voi);
      if (voi > best) {
        best = voi;
        bestV = v;
      }
    }
    if (left <= 0 || bestV === null) {
      return decision(adm ? "PROCEED" : "ABSTAIN", null, null, vStop, rx, h, probs, adm ? R_PROCEED_NONE : R_ABSTAIN_NONE, null, vois);
    }
    if (best > 0.0) {
      return decision("VERIFY", bestV, best, vStop, rx, h, probs, "verifier " + bestV.id + " " + R_VERIFY, null, vois);
    }
    return decision(adm ? "PROCEED" : "ABSTAIN", null, best, vStop, rx, h, probs,
      adm ? R_PROCEED : abstainReason(rx, lim, 0.0), null, vois);
  }

  // -- sequential stopping ----------------------------------------------------------------------
  /**
   * Verify, update and decide again until the gate stops.
   *
   * `verify(verifier, action)` performs the check (it may be async) and returns its signals:
   * an object premise id -> boolean (true = confirms valid), or a bare boolean for a verifier
   * resolving one premise (and always in mode "seed"). Each verifier is called at most once
   * unless `reuseVerifiers`; `budget` bounds the summed execution cost.
   */
  async run(action: ActionInput, verifiers: readonly VerifierInput[],
    verify: (verifier: object, action: object) => Signals | boolean | Promise<Signals | boolean>,
    options: { budget?: number | null } = {}): Promise<RunTrace> {
    let budget = options.budget ?? null;
    if (budget !== null) {
      budget = gateNumber(budget, "budget");
      if (budget < 0.0) throw new RangeError(`budget=${reprJson(budget)} must be >= 0`);
    }
    const a = checkAction(action);
    const vs = verifiers.map(checkVerifier);
    for (const v of vs) this.indices(a, v);
    const steps: RunStep[] = [];
    const calls: Record<string, unknown>[] = [];
    let spent = 0.0;
    let probs: number[] = [];
    let final: Decision | null = null;
    if (this.refusal !== null) final = this.closed(a, this.refusal);
    else {
      try {
        probs = this.probs(a);
      } catch (exc) {
        if (!(exc instanceof UncalibratedPremiseError)) throw exc;
        final = this.closed(a, `failing closed: ${exc.message}`);
      }
    }
    const prior = Object.freeze(probs.slice());
    let available = vs;
    while (final === null) {
      const left = this.max - steps.length;
      const d = this.decide(a, probs, available, left, budget === null ? null : budget - spent);
      if (d.regime !== "VERIFY" || d.verifier === null) {
        final = d;
        break;
      }
      const v = available.find((u) => u.source === d.verifier) as CheckedVerifier;
      let raw: unknown = await verify(v.source, a.source);
      if (this.seed && typeof raw === "boolean") {
        // the seed's verifier answers about its first premise in premise order
        raw = { [(a.premises[this.indices(a, v)[0] as number] as CheckedPremise).id]: raw };
      }
      const signals = signalsOf(v, raw);
      const before = Object.freeze(probs.slice());
      probs = this.update(a, probs, v, signals);
      spent += v.cost;
      steps.push(Object.freeze({
        decision: d, verifier: v.source, verifierId: v.id, signals: Object.freeze(signals),
        posteriorsBefore: before, posteriorsAfter: Object.freeze(probs.slice()), costSpent: spent,
      }));
      calls.push({ verifier: v.id, signals: { ...signals }, cost: v.cost, reliability: v.r });
      if (!this.reuse) available = available.filter((u) => u.source !== v.source);
    }
    const trace = new RunTrace(Object.freeze(steps), final, spent, prior, Object.freeze(probs.slice()));
    if (this.sink !== null) {
      const rec = this.record(a, final, prior, vs);
      rec.verifier_calls = calls;
      rec.posteriors = [...probs];
      this.sink(rec);
    }
    return trace;
  }

  private update(action: CheckedAction, probs: readonly number[], v: CheckedVerifier, signals: Signals): number[] {
    const out = probs.slice();
    const r = v.r;
    if (this.seed) {
      const idx = this.indices(action, v);
      if (idx.length) {
        const t = idx[0] as number;
        const sig = signals[(action.premises[t] as CheckedPremise).id];
        if (sig !== undefined) out[t] = seedPosterior(out[t] as number, r, sig);
      }
      return out;
    }
    for (const [pid, confirm] of Object.entries(signals)) {
      const i = action.index.get(pid) as number;
      out[i] = confirm ? posteriorConfirm(out[i] as number, r) : posteriorRefute(out[i] as number, r);
    }
    return out;
  }

  // -- decision log ---------------------------------------------------------------------------
  private record(action: CheckedAction, d: Decision, prior: readonly number[] | null,
    verifiers: readonly CheckedVerifier[]): DecisionRecord {
    const probs = prior === null ? d.probabilities : prior;
    const cal = this.calibrator;
    const kindCal = cal !== null && cal.hasKinds && probs.length ? cal : null;
    return {
      time: utcNowIso(),
      action_id: action.actionId,
      tool_name: action.toolName,
      theta: action.theta,
      kappa: action.kappa,
      premises: action.premises.map((pm, i) => {
        const c = pm.claim;
        const rec: Record<string, unknown> = {
          id: pm.id,
          claim_id: pm.claimId,
          recency_hours: c === null ? null : c.recencyHours,
          source_trust_score: c === null ? null : c.sourceTrustScore,
          model_confidence: c === null ? null : c.modelConfidence,
          contradiction_flag: c === null ? null : c.contradictionFlag,
          p: i < probs.length ? (probs[i] as number) : null,
        };
        // written only when there is something to say: records without kinds are unchanged
        if (pm.memoryKind !== null) rec["memory_kind"] = pm.memoryKind;
        if (kindCal !== null && c !== null && pm.p === null) {
          // the kind the calibrator used: "other" for an absent or unknown kind
          rec["memory_kind_evaluated_as"] = kindCal.kinds[kindCal.kindCode(pm.memoryKind)];
        }
        return rec;
      }),
      calibrator: { name: this.artifactName, version: this.artifactVersion },
      regime: d.regime,
      verifier: d.verifierId,
      voi: d.voi,
      reason: d.reason,
      planner: this.settings.planner,
      mode: this.settings.mode,
      // what was offered, with declared cost and reliability: `amv-calib label` rebuilds the
      // action as a replayable episode from it and measures each verifier's reliability
      verifiers: verifiers.map((v) => ({
        id: v.id, resolves_premise_ids: [...v.ids], execution_cost: v.cost, symmetric_reliability: v.r,
      })),
    };
  }
}

function abstainReason(rx: number, lim: number, price: number): string {
  if (!(rx > lim)) return R_ABSTAIN_H;
  return price === 0.0 ? R_ABSTAIN_R : R_ABSTAIN_R_PRICED;
}

function listed(ids: readonly string[]): string {
  const shown = ids.slice(0, LISTED).join(", ");
  return ids.length <= LISTED ? shown : `${shown} and ${ids.length - LISTED} more`;
}

/** The reason's account of the work bound: who was left out, why, and whether it could matter. */
function boundNote(verifiers: readonly CheckedVerifier[], idxs: readonly (readonly number[])[], keep: readonly boolean[],
  could: readonly [string, number][]): string {
  const out = verifiers.filter((_, t) => !keep[t]).map((v) => v.id);
  if (!out.length) return "";
  const ks = idxs.filter((_, t) => !keep[t]).map((idx) => idx.length);
  const lo = Math.min(...ks);
  const hi = Math.max(...ks);
  const span = lo === hi ? String(lo) : `${lo} to ${hi}`;
  const note = `; work bound: verifier(s) ${listed(out)} (over ${span} premises, 2^k joint outcomes each) not enumerated, at most ${MAX_OUTCOMES} outcomes per decision`;
  if (could.length) {
    let ub = -Infinity;
    for (const [, u] of could) ub = pyMax(ub, u);
    return note + `; upper bound of the one-step VOI, V_stop - lambda c - P_any * min(theta, kappa), positive for ${listed(could.map(([i]) => i))} (up to ${formatG(ub)}): they could be worth calling`;
  }
  return note + "; upper bound of their one-step VOI, V_stop - lambda c - P_any * min(theta, kappa), not positive: they cannot change the decision";
}
