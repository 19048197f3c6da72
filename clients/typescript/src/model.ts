/**
 * The gate's inputs: memory claims, premises, candidate actions and verifiers.
 *
 * The seed engine's TypeScript interfaces (camelCase) are accepted as they are, and so are
 * the snake_case objects of the Python package and its action files (`from_dict` there). Each
 * input is checked into a frozen `Checked*` object, the form the engine reads: a bad value
 * throws a `RangeError`/`TypeError` naming the field, the object and the value, as Python's
 * constructors raise `ValueError`. `Gate.prepare` checks an action once for many decisions.
 */

import { reprJson, reprStr, reprList } from "./pyfmt.js";

export type DependencyType = "direct" | "transitive" | "joint";

/** A remembered fact the agent acts on, with the four features calibrators read. */
export interface MemoryClaim {
  id: string;
  statement?: string;
  timestamp?: number;
  /** In [0, 1]. */
  sourceTrustScore: number;
  /** In [0, 1]. */
  modelConfidence: number;
  /** Age of the claim when used, >= 0. */
  recencyHours: number;
  contradictionFlag: boolean;
}

/** A critical premise of an action: the claim it rests on and its violation probability. */
export interface Premise {
  id: string;
  claimId?: string;
  dependencyType?: DependencyType;
  parameterTarget?: string;
  /** `p_i` in [0, 1]; absent or null: computed from `claim` by the gate's calibrator. */
  calibratedViolationProbability?: number | null;
  claim?: MemoryClaim | null;
}

/** An irreversible tool call the agent wants to make, and the premises it rests on. */
export interface CandidateAction {
  actionId: string;
  toolName?: string;
  arguments?: Record<string, unknown>;
  /** theta > 0: loss of executing when any premise is violated. */
  impactCostTheta: number;
  /** kappa > 0: cost of abstaining. */
  abstentionCostKappa: number;
  premises: Premise[];
}

/** A check (an API read, a question to the user) that returns one signal per premise. */
export interface Verifier {
  id: string;
  resolvesPremiseIds: string[];
  /** c >= 0; the gate charges lambda * c. */
  executionCost: number;
  /** r in (0.5, 1]: P(confirm | valid) = P(refute | violated). */
  symmetricReliability: number;
}

/** What `evaluate` accepts: the interfaces above, their snake_case spelling, or a checked one. */
export type ActionInput = CandidateAction | CheckedAction | Readonly<Record<string, unknown>>;
export type VerifierInput = Verifier | CheckedVerifier | Readonly<Record<string, unknown>>;

export class CheckedClaim {
  constructor(
    readonly id: string,
    readonly statement: string,
    readonly timestamp: number,
    readonly sourceTrustScore: number,
    readonly modelConfidence: number,
    readonly recencyHours: number,
    readonly contradictionFlag: boolean,
  ) {
    Object.freeze(this);
  }

  /** The four calibrator inputs, keyed by canonical feature name. */
  features(): Record<string, number> {
    return {
      recency_hours: this.recencyHours,
      source_trust_score: this.sourceTrustScore,
      model_confidence: this.modelConfidence,
      contradiction_flag: this.contradictionFlag ? 1.0 : 0.0,
    };
  }
}

export class CheckedPremise {
  constructor(
    readonly id: string,
    readonly claimId: string,
    readonly dependencyType: DependencyType,
    readonly parameterTarget: string,
    readonly p: number | null,
    readonly claim: CheckedClaim | null,
  ) {
    Object.freeze(this);
  }
}

export class CheckedAction {
  /** Premise id -> position. */
  readonly index: ReadonlyMap<string, number>;
  /** The probabilities when every premise carries one, else null. */
  readonly explicit: readonly number[] | null;

  constructor(
    readonly actionId: string,
    readonly toolName: string,
    readonly arguments_: Readonly<Record<string, unknown>>,
    readonly theta: number,
    readonly kappa: number,
    readonly premises: readonly CheckedPremise[],
    /** The object the caller gave (handed back to `run`'s verify callback). */
    readonly source: object,
  ) {
    const where = `of action ${reprStr(actionId)}`;
    const index = new Map<string, number>();
    const ps: number[] = [];
    let all = true;
    premises.forEach((pm, i) => {
      if (index.has(pm.id)) throw new RangeError(`premise id ${reprStr(pm.id)} ${where} is repeated`);
      index.set(pm.id, i);
      if (pm.p === null) all = false;
      else ps.push(pm.p);
    });
    this.index = index;
    this.explicit = all ? Object.freeze(ps) : null;
    Object.freeze(this);
  }
}

export class CheckedVerifier {
  /** The premise id when the verifier resolves exactly one. */
  readonly single: string | null;

  constructor(
    readonly id: string,
    readonly ids: readonly string[],
    readonly cost: number,
    readonly r: number,
    /** The object the caller gave (what a decision names and `run` hands to verify). */
    readonly source: object,
  ) {
    this.single = ids.length === 1 ? (ids[0] as string) : null;
    Object.freeze(this);
  }
}

// -- checks -------------------------------------------------------------------------------

function number(value: unknown, name: string, where: string): number {
  if (typeof value !== "number") throw new TypeError(`${name}=${reprJson(value)} ${where} is not a number`);
  if (!Number.isFinite(value)) throw new RangeError(`${name}=${reprJson(value)} ${where} is not finite`);
  return value;
}

function flag(value: unknown, name: string, where: string): boolean {
  if (typeof value === "boolean") return value;
  if (value === 0 || value === 1) return value === 1;
  throw new TypeError(`${name}=${reprJson(value)} ${where} is not a boolean`);
}

function text(value: unknown, name: string, where: string): string {
  if (typeof value !== "string") throw new TypeError(`${name}=${reprJson(value)} ${where} must be a string`);
  return value;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** snake_case field -> the spellings accepted for it. */
function aliases(...pairs: [string, string][]): Map<string, string> {
  const out = new Map<string, string>();
  for (const [snake, camel] of pairs) {
    out.set(snake, snake);
    out.set(camel, snake);
  }
  return out;
}

const CLAIM_KEYS = aliases(
  ["id", "id"], ["statement", "statement"], ["timestamp", "timestamp"],
  ["source_trust_score", "sourceTrustScore"], ["model_confidence", "modelConfidence"],
  ["recency_hours", "recencyHours"], ["contradiction_flag", "contradictionFlag"],
);
const CLAIM_FEATURE_KEYS = new Set([
  "source_trust_score", "sourceTrustScore", "model_confidence", "modelConfidence",
  "recency_hours", "recencyHours", "contradiction_flag", "contradictionFlag",
]);
const PREMISE_KEYS = aliases(
  ["id", "id"], ["claim_id", "claimId"], ["dependency_type", "dependencyType"],
  ["parameter_target", "parameterTarget"],
  ["calibrated_violation_probability", "calibratedViolationProbability"], ["claim", "claim"],
);
/** Ground-truth fields of an episode premise: a gate input may carry them, the gate never reads them. */
const IGNORED_PREMISE_KEYS = new Set(["violated", "p_true", "pTrue"]);
const ACTION_KEYS = aliases(
  ["action_id", "actionId"], ["tool_name", "toolName"], ["arguments", "arguments"],
  ["impact_cost_theta", "impactCostTheta"], ["abstention_cost_kappa", "abstentionCostKappa"],
  ["premises", "premises"],
);
const VERIFIER_KEYS = aliases(
  ["id", "id"], ["resolves_premise_ids", "resolvesPremiseIds"],
  ["execution_cost", "executionCost"], ["symmetric_reliability", "symmetricReliability"],
);
const DEPENDENCY_TYPES: readonly string[] = ["direct", "transitive", "joint"];

/** Rename camelCase keys to field names; refuse unknown and repeated keys (undefined = absent). */
function keys(data: unknown, cls: string, names: Map<string, string>,
  ignored?: Set<string>, skip?: Set<string>): Map<string, unknown> {
  if (!isRecord(data)) throw new TypeError(`${cls} must be an object, got ${reprJson(data)}`);
  const out = new Map<string, unknown>();
  for (const key of Object.keys(data)) {
    const value = data[key];
    if (value === undefined || ignored?.has(key) || skip?.has(key)) continue;
    const name = names.get(key);
    if (name === undefined) {
      throw new RangeError(`${cls} has unknown key ${reprStr(key)}; expected one of ${reprList([...names.keys()].sort())}`);
    }
    if (out.has(name)) throw new RangeError(`${cls} gives ${reprStr(name)} twice (as ${reprStr(key)} and another spelling)`);
    out.set(name, value);
  }
  return out;
}

/** Check a claim given in camelCase or snake_case. */
export function checkClaim(data: unknown): CheckedClaim {
  const kw = keys(data, "claim", CLAIM_KEYS);
  for (const name of ["id", "source_trust_score", "model_confidence", "recency_hours", "contradiction_flag"]) {
    if (!kw.has(name)) throw new RangeError(`claim ${reprJson(data)} lacks ${reprStr(name)}`);
  }
  const id = text(kw.get("id"), "id", "of a claim");
  const where = `of claim ${reprStr(id)}`;
  const trust = number(kw.get("source_trust_score"), "source_trust_score", where);
  const conf = number(kw.get("model_confidence"), "model_confidence", where);
  for (const [name, v] of [["source_trust_score", trust], ["model_confidence", conf]] as const) {
    if (!(v >= 0 && v <= 1)) throw new RangeError(`${name}=${reprJson(v)} ${where} must lie in [0, 1]`);
  }
  const hours = number(kw.get("recency_hours"), "recency_hours", where);
  if (hours < 0) throw new RangeError(`recency_hours=${reprJson(hours)} ${where} must be >= 0`);
  const ts = kw.has("timestamp") ? number(kw.get("timestamp"), "timestamp", where) : 0;
  const stmt = kw.has("statement") ? text(kw.get("statement"), "statement", where) : "";
  return new CheckedClaim(id, stmt, ts, trust, conf, hours,
    flag(kw.get("contradiction_flag"), "contradiction_flag", where));
}

/**
 * Check a premise. Its claim may be embedded under `claim`, or its four features may sit in
 * the premise itself (the episodes format); `violated` and `p_true` are ignored.
 */
export function checkPremise(data: unknown): CheckedPremise {
  if (!isRecord(data)) throw new TypeError(`premise must be an object, got ${reprJson(data)}`);
  const flat: Record<string, unknown> = {};
  let anyFlat = false;
  for (const key of Object.keys(data)) {
    if (CLAIM_FEATURE_KEYS.has(key) && data[key] !== undefined) {
      flat[key] = data[key];
      anyFlat = true;
    }
  }
  const kw = keys(data, "premise", PREMISE_KEYS, IGNORED_PREMISE_KEYS, CLAIM_FEATURE_KEYS);
  if (!kw.has("id")) throw new RangeError(`premise ${reprJson(data)} lacks 'id'`);
  const id = text(kw.get("id"), "id", "of a premise");
  const where = `of premise ${reprStr(id)}`;
  let claimId = kw.has("claim_id") ? text(kw.get("claim_id"), "claim_id", where) : "";
  const target = kw.has("parameter_target") ? text(kw.get("parameter_target"), "parameter_target", where) : "";
  const dep = kw.has("dependency_type") ? kw.get("dependency_type") : "direct";
  if (typeof dep !== "string" || !DEPENDENCY_TYPES.includes(dep)) {
    throw new RangeError(`dependency_type=${reprJson(dep)} ${where} must be one of ${reprList(DEPENDENCY_TYPES)}`);
  }
  const rawP = kw.get("calibrated_violation_probability");
  let p: number | null = null;
  if (rawP !== null && rawP !== undefined) {
    p = number(rawP, "calibrated_violation_probability", where);
    if (!(p >= 0 && p <= 1)) throw new RangeError(`calibrated_violation_probability=${reprJson(p)} ${where} must lie in [0, 1]`);
  }
  const rawClaim = kw.get("claim");
  if (rawClaim !== null && rawClaim !== undefined && anyFlat) {
    throw new RangeError(`premise ${reprStr(id)} gives claim features both in 'claim' and beside it`);
  }
  let claim: CheckedClaim | null = null;
  if (rawClaim instanceof CheckedClaim) claim = rawClaim;
  else if (isRecord(rawClaim)) claim = checkClaim(rawClaim);
  else if (rawClaim !== null && rawClaim !== undefined) {
    throw new TypeError(`claim ${where} must be an object, got ${reprJson(rawClaim)}`);
  } else if (anyFlat) claim = checkClaim({ id: claimId || id, ...flat });
  if (claim !== null) {
    if (!claimId) claimId = claim.id;
    else if (claimId !== claim.id) {
      throw new RangeError(`claim_id=${reprStr(claimId)} ${where} differs from its claim's id=${reprStr(claim.id)}`);
    }
  }
  return new CheckedPremise(id, claimId, dep as DependencyType, target, p, claim);
}

/** Check an action given in camelCase or snake_case (premises as objects). */
export function checkAction(data: ActionInput): CheckedAction {
  if (data instanceof CheckedAction) return data;
  const kw = keys(data, "action", ACTION_KEYS);
  for (const name of ["action_id", "impact_cost_theta", "abstention_cost_kappa", "premises"]) {
    if (!kw.has(name)) throw new RangeError(`action lacks ${reprStr(name)}`);
  }
  const id = text(kw.get("action_id"), "action_id", "of an action");
  const where = `of action ${reprStr(id)}`;
  const tool = kw.has("tool_name") ? text(kw.get("tool_name"), "tool_name", where) : "";
  const raw = kw.get("premises");
  if (!Array.isArray(raw)) throw new TypeError(`premises of action ${reprStr(id)} must be a list`);
  const args = kw.has("arguments") ? kw.get("arguments") : {};
  if (!isRecord(args)) throw new TypeError(`arguments of action ${reprStr(id)} must be an object`);
  const theta = number(kw.get("impact_cost_theta"), "impact_cost_theta", where);
  if (!(theta > 0)) throw new RangeError(`impact_cost_theta=${reprJson(theta)} ${where} must be > 0`);
  const kappa = number(kw.get("abstention_cost_kappa"), "abstention_cost_kappa", where);
  if (!(kappa > 0)) throw new RangeError(`abstention_cost_kappa=${reprJson(kappa)} ${where} must be > 0`);
  const premises = raw.map((pm) => (pm instanceof CheckedPremise ? pm : checkPremise(pm)));
  return new CheckedAction(id, tool, args, theta, kappa, Object.freeze(premises), data);
}

/** Check a verifier given in camelCase or snake_case. */
export function checkVerifier(data: VerifierInput): CheckedVerifier {
  if (data instanceof CheckedVerifier) return data;
  const kw = keys(data, "verifier", VERIFIER_KEYS);
  for (const name of ["id", "resolves_premise_ids", "execution_cost", "symmetric_reliability"]) {
    if (!kw.has(name)) throw new RangeError(`verifier ${reprJson(data)} lacks ${reprStr(name)}`);
  }
  const id = text(kw.get("id"), "id", "of a verifier");
  const where = `of verifier ${reprStr(id)}`;
  const ids = kw.get("resolves_premise_ids");
  if (!Array.isArray(ids)) throw new TypeError(`resolves_premise_ids ${where} must be a list of ids, got ${reprJson(ids)}`);
  const seen = new Set<string>();
  for (const pid of ids) {
    text(pid, "resolves_premise_ids entry", where);
    if (seen.has(pid)) throw new RangeError(`resolves_premise_ids=${reprList(ids)} ${where} repeats an id`);
    seen.add(pid);
  }
  const cost = number(kw.get("execution_cost"), "execution_cost", where);
  if (cost < 0) throw new RangeError(`execution_cost=${reprJson(cost)} ${where} must be >= 0`);
  const r = number(kw.get("symmetric_reliability"), "symmetric_reliability", where);
  if (!(r > 0.5 && r <= 1)) throw new RangeError(`symmetric_reliability=${reprJson(r)} ${where} must lie in (0.5, 1]`);
  return new CheckedVerifier(id, Object.freeze([...ids] as string[]), cost, r, data);
}
