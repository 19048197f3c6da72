/**
 * Non-myopic planning: the exact value of the optimal verification policy.
 *
 * A transcription of `amv_calib/gate/_planner.py` (read its docstring for the model): the
 * same value function, memo keys, traversal order, pruning bounds, beam and receding
 * horizon, and every floating-point expression with the same operands in the same order, so
 * that a plan here is the Python plan bit for bit (the beam's evidence score takes the
 * portable `log` of `portableMath.ts`, as Python's does).
 */

import { pyMin } from "./calibrator.js";
import { portableLog } from "./portableMath.js";

/** Most verifiers the planner treats exactly. */
export const MAX_EXACT_VERIFIERS = 8;
/** Bound on states x outcomes per state of an exact plan (3^8 * 16). */
export const MAX_WORK = 3 ** 8 * 16;
/** Bound on the leaves of a receding-horizon plan (verifiers that may be called again). */
export const RECEDING_WORK = 4096;
/** Bound on the joint outcomes one decision enumerates, summed over the verifiers offered. */
export const MAX_OUTCOMES = 4096;
/** `log2(MAX_OUTCOMES)`: a verifier over more premises than this is never enumerated. */
export const MAX_OUTCOMES_LOG2 = 12;
/** Deepest receding horizon. */
export const MAX_HORIZON = 12;

/** A verifier as the planner sees it (premise positions in premise order). */
export interface Spec {
  readonly idx: readonly number[];
  readonly r: number;
  readonly lamCost: number;
  readonly cost: number;
}

interface Task {
  readonly theta: number;
  readonly kappa: number;
  readonly lim: number;
  readonly eps: number;
  readonly specs: readonly Spec[];
  readonly depth: number;
  readonly budget: number | null;
  readonly tol: number;
}

/** The plan: its expected loss, the verifier to call now (or null), exactness, beliefs valued. */
export interface Plan {
  readonly value: number;
  readonly first: number | null;
  readonly exact: boolean;
  readonly states: number;
}

/**
 * Which verifiers, resolving `ks[j]` premises each, a decision enumerates: in order of
 * `(k, position)` while the running total of their `2^k` outcomes stays within MAX_OUTCOMES.
 */
export function enumerable(ks: readonly number[]): boolean[] {
  const out = ks.map(() => false);
  let left = MAX_OUTCOMES;
  const order = ks.map((_, j) => j).sort((a, b) => (ks[a] as number) - (ks[b] as number) || a - b);
  for (const j of order) {
    const k = ks[j] as number;
    if (k > MAX_OUTCOMES_LOG2 || 2 ** k > left) break;
    left -= 2 ** k;
    out[j] = true;
  }
  return out;
}

function checkBound(specs: readonly Spec[]): void {
  let total = 0;
  for (const sp of specs) total += 2 ** sp.idx.length;
  if (total > MAX_OUTCOMES) {
    throw new RangeError(`the verifiers have ${total} joint outcomes, more than MAX_OUTCOMES = ${MAX_OUTCOMES}; plan only those that enumerable() keeps`);
  }
}

/** One joint outcome: its code, probability, `q` after it and the posteriors after it. */
export interface Outcome {
  code: number;
  w: number;
  q: number;
  post: number[];
}

/** Joint outcomes of one verifier, in `itertools.product` order; probability-0 ones left out. */
export function outcomes(probs: readonly number[], q: number, idx: readonly number[], r: number): Outcome[] {
  const s = 1.0 - r;
  let states: Outcome[] = [{ code: 0, w: 1.0, q, post: probs.slice() }];
  for (const i of idx) {
    const p = probs[i] as number;
    const a = 1.0 - p;
    const pc = a * r + p * s;
    const pr = p * r + a * s;
    const nxt: Outcome[] = [];
    for (const st of states) {
      if (pc > 0.0) {
        const c = st.post.slice();
        c[i] = (p * s) / pc;
        nxt.push({ code: 2 * st.code, w: st.w * pc, q: st.q * (r / pc), post: c });
      }
      if (pr > 0.0) {
        const c = st.post.slice();
        c[i] = (p * r) / pr;
        nxt.push({ code: 2 * st.code + 1, w: st.w * pr, q: st.q * (s / pr), post: c });
      }
    }
    states = nxt;
  }
  return states;
}

function work(specs: readonly Spec[]): [number, number] {
  let states = 1;
  let branch = 0;
  for (const sp of specs) {
    states *= 1 + 2 ** sp.idx.length;
    branch += 2 ** sp.idx.length;
  }
  return [states, branch];
}

function score(probs: readonly number[], sp: Spec): number {
  // evidence per unit of cost: p(1-p) times the signal's log-likelihood ratio, over lambda c
  const llr = sp.r >= 1.0 ? 40.0 : pyMin(40.0, portableLog(sp.r / (1.0 - sp.r)));
  let v = 0.0;
  for (const i of sp.idx) v += (probs[i] as number) * (1.0 - (probs[i] as number));
  return (v * llr) / (sp.lamCost + 1e-12);
}

/** Verifiers kept for the exact plan of a beam, in their given order. */
function beam(probs: readonly number[], specs: readonly Spec[]): number[] {
  const scores = specs.map((sp) => score(probs, sp));
  const order = specs.map((_, j) => j).sort((a, b) => {
    const sa = -(scores[a] as number);
    const sb = -(scores[b] as number);
    return sa < sb ? -1 : sa > sb ? 1 : a - b;
  });
  const keep: number[] = [];
  const fits = (j: number): boolean => {
    const trial = [...keep, j];
    if (trial.length > MAX_EXACT_VERIFIERS) return false;
    const [states, branch] = work(trial.map((t) => specs[t] as Spec));
    return states * branch <= MAX_WORK;
  };
  const covered = new Set<number>();
  const vari = (i: number): number => -(probs[i] as number) * (1.0 - (probs[i] as number));
  const premises = probs.map((_, i) => i).sort((a, b) => {
    const va = vari(a);
    const vb = vari(b);
    return va < vb ? -1 : va > vb ? 1 : a - b;
  });
  for (const i of premises) {
    if (covered.has(i)) continue;
    for (const j of order) {
      const sp = specs[j] as Spec;
      if (sp.idx.includes(i) && !keep.includes(j) && fits(j)) {
        keep.push(j);
        for (const t of sp.idx) covered.add(t);
        break;
      }
    }
  }
  for (const j of order) if (!keep.includes(j) && fits(j)) keep.push(j);
  return keep.sort((a, b) => a - b);
}

type Expand = (probs: number[], q: number, key: number, rem: number, d: number, b: number, j: number, cut: number) => number;

/** The exact plan: `[value, first, states]`; a memoised, pruned recursion (Python's `_exact`). */
function exact(probs: readonly number[], q: number, task: Task): [number, number | null, number] {
  const { theta, kappa, lim, eps, specs } = task;
  const n = specs.length;
  const radix: number[] = [];
  let base = 1;
  for (const sp of specs) {
    radix.push(base);
    base *= 1 + 2 ** sp.idx.length;
  }
  const floor = pyMin(theta, kappa);
  const memo = new Map<number, number>();

  const expand: Expand = (probs, q, key, rem, d, b, j, cut) => {
    // lambda c_j + E_o V(child): exact, or >= cut as soon as the partial sum reaches it
    const sp = specs[j] as Spec;
    let acc = sp.lamCost;
    const rj = rem & ~(1 << j);
    const step = radix[j] as number;
    const d1 = d - 1;
    const b1 = b - sp.cost;
    const idx = sp.idx;
    if (idx.length === 1) { // confirm, then refute
      const i = idx[0] as number;
      const p = probs[i] as number;
      const r = sp.r;
      const s = 1.0 - r;
      const a = 1.0 - p;
      for (let code = 1; code <= 2; code++) {
        const w = code === 1 ? a * r + p * s : p * r + a * s;
        const likeP = code === 1 ? s : r;
        const likeQ = code === 1 ? r : s;
        if (w > 0.0) {
          const ck = key + code * step;
          let got = memo.get(ck);
          if (got === undefined) {
            const post = probs.slice();
            post[i] = (p * likeP) / w;
            got = value(post, q * (likeQ / w), ck, rj, d1, b1);
          }
          acc += w * got;
          if (acc >= cut) break;
        }
      }
      return acc;
    }
    for (const o of outcomes(probs, q, idx, sp.r)) {
      const ck = key + step * (o.code + 1);
      let got = memo.get(ck);
      if (got === undefined) got = value(o.post, o.q, ck, rj, d1, b1);
      acc += o.w * got;
      if (acc >= cut) break;
    }
    return acc;
  };

  const value = (probs: number[], q: number, key: number, rem: number, d: number, b: number): number => {
    const h = 1.0 - q;
    const rx = theta * h;
    let best = rx <= lim && h <= eps ? rx : kappa;
    if (d > 0 && rem) {
      const lb = h * floor; // no policy loses less than the clairvoyant
      for (let j = 0; j < n; j++) {
        if ((rem >> j) & 1) {
          const sp = specs[j] as Spec;
          if (sp.lamCost + lb < best && sp.cost <= b) {
            const got = expand(probs, q, key, rem, d, b, j, best);
            if (got < best) best = got;
          }
        }
      }
    }
    memo.set(key, best);
    return best;
  };

  const [v, first] = root(probs, q, task, expand);
  return [v, first, memo.size];
}

/** The root of `exact`: every first step within `tol` of the best gets an exact value. */
function root(probs: readonly number[], q: number, task: Task, expand: Expand): [number, number | null] {
  const { theta, kappa, lim, eps, specs, depth, budget, tol } = task;
  const n = specs.length;
  const start = probs.slice();
  const b0 = budget === null ? Infinity : budget;
  const h0 = 1.0 - q;
  const rx0 = theta * h0;
  const vStop = rx0 <= lim && h0 <= eps ? rx0 : kappa;
  let best = vStop;
  const qs = new Map<number, number>();
  const rem0 = (1 << n) - 1;
  if (depth > 0) {
    const lb0 = h0 * pyMin(theta, kappa);
    for (let j = 0; j < n; j++) {
      const sp = specs[j] as Spec;
      if (sp.lamCost + lb0 <= best + tol && sp.cost <= b0) {
        const got = expand(start, q, 0, rem0, depth, b0, j, best + tol);
        if (got <= best + tol) {
          qs.set(j, got);
          best = pyMin(best, got);
        }
      }
    }
  }
  if (!(best < vStop)) return [best, null];
  let first = Infinity;
  for (const [j, v] of qs) if (v <= best + tol && j < first) first = j;
  return [best, first];
}

/** A receding-horizon plan (verifiers may be called again): exact over the next calls. */
function receding(probs: readonly number[], q: number, task: Task): [number, number | null, number] {
  const { theta, kappa, lim, eps, specs, depth, budget } = task;
  let branch = 0;
  for (const sp of specs) branch += 2 ** sp.idx.length;
  branch = branch || 1;
  let horizon = 1;
  while (horizon < Math.min(depth, MAX_HORIZON) && branch ** (horizon + 1) <= RECEDING_WORK) horizon += 1;
  horizon = Math.min(horizon, depth);
  const floor = pyMin(theta, kappa);
  // keyed as Python's (tuple(post), d, b): String() of a double round-trips, and -0 and 0
  // share a key as they share a Python tuple key
  const memo = new Map<string, number>();

  const value = (probs: number[], q: number, d: number, b: number): [number, number | null] => {
    const h = 1.0 - q;
    const rx = theta * h;
    let best = rx <= lim && h <= eps ? rx : kappa;
    let first: number | null = null;
    if (d > 0) {
      const lb = h * floor;
      for (let j = 0; j < specs.length; j++) {
        const sp = specs[j] as Spec;
        let acc = sp.lamCost;
        if (acc + lb >= best || sp.cost > b) continue;
        let broke = false;
        for (const o of outcomes(probs, q, sp.idx, sp.r)) {
          const ck = `${o.post.join(",")}|${d - 1}|${b - sp.cost}`;
          let got = memo.get(ck);
          if (got === undefined) {
            got = value(o.post, o.q, d - 1, b - sp.cost)[0];
            memo.set(ck, got);
          }
          acc += o.w * got;
          if (acc >= best) {
            broke = true;
            break;
          }
        }
        if (!broke && acc < best) {
          best = acc;
          first = j;
        }
      }
    }
    return [best, first];
  };

  const [best, first] = value(probs.slice(), q, horizon, budget === null ? Infinity : budget);
  return [best, first, memo.size];
}

/** Options of {@link plan} beyond the action's losses and the verifiers. */
export interface PlanOptions {
  depth: number;
  budget?: number | null;
  reuse?: boolean;
  myopicFirst?: number | null;
  myopicValue?: number | null;
  tol?: number;
}

/** Plan verifications for one action (Python's `plan`). */
export function plan(probs: readonly number[], theta: number, kappa: number, lim: number, eps: number,
  specs: readonly Spec[], opts: PlanOptions): Plan {
  checkBound(specs);
  let q = 1.0;
  for (const p of probs) q *= 1.0 - p;
  const depth = opts.depth;
  if (depth <= 0 || specs.length === 0) {
    const h = 1.0 - q;
    const rx = theta * h;
    return { value: rx <= lim && h <= eps ? rx : kappa, first: null, exact: true, states: 0 };
  }
  const task: Task = { theta, kappa, lim, eps, specs, depth, budget: opts.budget ?? null, tol: opts.tol ?? 0.0 };
  if (opts.reuse) {
    const [value, first, states] = receding(probs, q, task);
    return { value, first, exact: false, states };
  }
  const [states, branch] = work(specs);
  if (specs.length <= MAX_EXACT_VERIFIERS && states * branch <= MAX_WORK) {
    const [value, first, n] = exact(probs, q, task);
    return { value, first, exact: true, states: n };
  }
  // beam: an exact plan over the verifiers beam() keeps, floored by the myopic rule
  const keep = beam(probs, specs);
  const [value, first, n] = exact(probs, q, { ...task, specs: keep.map((t) => specs[t] as Spec) });
  const mapped = first === null ? null : (keep[first] as number);
  const mf = opts.myopicFirst ?? null;
  const mv = opts.myopicValue ?? null;
  if (mf !== null && mv !== null && mv < value) return { value: mv, first: mf, exact: false, states: n };
  return { value, first: mapped, exact: false, states: n };
}
