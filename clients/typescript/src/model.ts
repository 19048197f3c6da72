/**
 * The gate's inputs: memory claims, premises, candidate actions and verifiers.
 *
 * The seed engine's TypeScript interfaces (camelCase) are accepted as they are, and so are
 * the snake_case objects of the Python package and its action files (`from_dict` there). Each
 * input is checked into a frozen `Checked*` object, the form the engine reads: a bad value
 * throws a `RangeError`/`TypeError` naming the field, the object and the value, as Python's
 * constructors raise `ValueError`. `Gate.prepare` checks an action once for many decisions.
 */

import { MAX_KIND_LENGTH } from "./calibrator.js";
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
  /** The kind of memory the claim is; a calibrator with kinds evaluates it as that kind or "other". */
  memoryKind?: string | null;
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
    readonly memoryKind: string | null = null,
  ) {
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
    const index = new Map<string, number>();
    const ps: number[] = [];
    let all = true;
    premises.forEach((pm, i) => {
      if (index.has(pm.id)) throw new RangeError(`premise id ${reprStr(pm.id)} ${of("action", actionId)} is repeated`);
      index.set(pm.id, i);
      if (pm.p === null) all = false;
      else ps.push(pm.p);
    });
    this.index = index;
    this.explicit = all ? ps : null;
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
  }
}

// -- checks -------------------------------------------------------------------------------

/** "of claim 'c1'" (or "of a claim" before its id is known): built only for a message. */
function of(kind: string, id: string | null): string {
  return id === null ? `of a ${kind}` : `of ${kind} ${reprStr(id)}`;
}

function number(value: unknown, name: string, kind: string, id: string | null): number {
  if (typeof value !== "number") throw new TypeError(`${name}=${reprJson(value)} ${of(kind, id)} is not a number`);
  if (!Number.isFinite(value)) throw new RangeError(`${name}=${reprJson(value)} ${of(kind, id)} is not finite`);
  return value;
}

function flag(value: unknown, name: string, kind: string, id: string): boolean {
  if (typeof value === "boolean") return value;
  if (value === 0 || value === 1) return value === 1;
  throw new TypeError(`${name}=${reprJson(value)} ${of(kind, id)} is not a boolean`);
}

function text(value: unknown, name: string, kind: string, id: string | null): string {
  if (typeof value !== "string") throw new TypeError(`${name}=${reprJson(value)} ${of(kind, id)} must be a string`);
  return value;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Each type's fields: the snake_case name and the seed's camelCase spelling. */
const CLAIM_FIELDS = [["id", "id"], ["statement", "statement"], ["timestamp", "timestamp"],
  ["source_trust_score", "sourceTrustScore"], ["model_confidence", "modelConfidence"],
  ["recency_hours", "recencyHours"], ["contradiction_flag", "contradictionFlag"]] as const;
const PREMISE_FIELDS = [["id", "id"], ["claim_id", "claimId"], ["dependency_type", "dependencyType"],
  ["parameter_target", "parameterTarget"], ["calibrated_violation_probability", "calibratedViolationProbability"],
  ["claim", "claim"]] as const;
const ACTION_FIELDS = [["action_id", "actionId"], ["tool_name", "toolName"], ["arguments", "arguments"],
  ["impact_cost_theta", "impactCostTheta"], ["abstention_cost_kappa", "abstentionCostKappa"], ["premises", "premises"]] as const;
/** Positions of the required fields (id, trust, confidence, recency, contradiction; ...). */
const CLAIM_REQUIRED = [0, 3, 4, 5, 6];
const ACTION_REQUIRED = [0, 3, 4, 5];
const VERIFIER_REQUIRED = [0, 1, 2, 3];
const VERIFIER_FIELDS = [["id", "id"], ["resolves_premise_ids", "resolvesPremiseIds"],
  ["execution_cost", "executionCost"], ["symmetric_reliability", "symmetricReliability"]] as const;

/** Either spelling -> the snake_case field. */
function aliases(pairs: readonly (readonly [string, string])[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const [snake, camel] of pairs) {
    out.set(snake, snake);
    out.set(camel, snake);
  }
  return out;
}

const CLAIM_KEYS = aliases(CLAIM_FIELDS);
const PREMISE_KEYS = aliases(PREMISE_FIELDS);
const ACTION_KEYS = aliases(ACTION_FIELDS);
const VERIFIER_KEYS = aliases(VERIFIER_FIELDS);
/** Claim features a premise may carry beside its own fields (the episodes format). */
const CLAIM_FEATURE_KEYS: ReadonlySet<string> = new Set<string>(CLAIM_FIELDS.slice(3).flat());
/** The spellings of a premise's memory kind, in the order `premiseMemoryKind` checks them. */
const KIND_KEYS = ["memory_kind", "memoryKind"] as const;
/** A kind that is only Unicode White_Space, or that begins or ends with one (the Python
 * contract's `KIND_WHITESPACE`: the same set). */
const KIND_BLANK = /^\p{White_Space}*$/u;
const KIND_PADDED = /^\p{White_Space}|\p{White_Space}$/u;

/**
 * `value` if it is a memory kind, else a `TypeError`/`RangeError` naming `field` and the value:
 * a string of 1 to MAX_KIND_LENGTH code points, not blank, with no whitespace at either end.
 * The rule of the Python contract (`amv_calib.contract.check_memory_kind`), with its messages.
 */
export function checkMemoryKind(value: unknown, field: string = "memory_kind"): string {
  if (typeof value !== "string") {
    throw new TypeError(`${field}=${reprJson(value)} is not a string (a memory kind is a name such as 'preference')`);
  }
  if (KIND_BLANK.test(value)) {
    throw new RangeError(`${field}=${reprStr(value)} is blank (give null, or leave it out, when the kind is unknown)`);
  }
  if (KIND_PADDED.test(value)) throw new RangeError(`${field}=${reprStr(value)} begins or ends with whitespace`);
  const points = [...value];
  if (points.length > MAX_KIND_LENGTH) {
    throw new RangeError(`${field}=${reprStr(points.slice(0, 40).join(""))}... has ${points.length} characters, more than ${MAX_KIND_LENGTH}`);
  }
  return value;
}

/**
 * The memory kind a premise gives, or null: `memory_kind` or `memoryKind`, a null being absent
 * (so null beside a kind gives the kind), both allowed when equal; each value given is checked
 * by `checkMemoryKind`. The rule of the Python contract (`premise_memory_kind`).
 */
export function premiseMemoryKind(data: Readonly<Record<string, unknown>>): string | null {
  const given: [string, string][] = [];
  for (const key of KIND_KEYS) {
    const v = data[key];
    if (v !== undefined && v !== null) given.push([key, checkMemoryKind(v, key)]);
  }
  const [first, second] = given;
  if (first !== undefined && second !== undefined && first[1] !== second[1]) {
    throw new RangeError(`memory_kind=${reprStr(first[1])} and memoryKind=${reprStr(second[1])} differ (give one)`);
  }
  return first === undefined ? null : first[1];
}
/** What `keys` leaves to `checkPremise`: the flat claim features and the kind. */
const PREMISE_SKIP: ReadonlySet<string> = new Set<string>([...CLAIM_FEATURE_KEYS, ...KIND_KEYS]);
/** Ground-truth fields of an episode premise: a gate input may carry them, the gate never reads them. */
const IGNORED_PREMISE_KEYS = new Set(["violated", "p_true", "pTrue"]);
const DEPENDENCY_TYPES: readonly string[] = ["direct", "transitive", "joint"];

/** Rename camelCase keys to field names; refuse unknown and repeated keys (undefined = absent). */
function keys(data: unknown, cls: string, names: Map<string, string>,
  ignored?: ReadonlySet<string>, skip?: ReadonlySet<string>): Map<string, unknown> {
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

/** The field spelt `snake` or `camel` (one of them at most; `TWICE` when both are). */
const TWICE = Symbol("twice");
function either(a: unknown, b: unknown): unknown {
  return a === undefined ? b : b === undefined ? a : TWICE;
}

/*
 * The hot path of `keys`: each type's fields read by name (a keyed loop over an object's keys
 * is slow in V8), accepted when they account for every key of the object. Anything else (an
 * unknown or ignored key, a field spelt twice, an undefined value) returns null, and `keys`
 * decides and words the error.
 */
function readAction(d: Record<string, unknown>): unknown[] | null {
  const f = [either(d["action_id"], d["actionId"]), either(d["tool_name"], d["toolName"]), d["arguments"],
    either(d["impact_cost_theta"], d["impactCostTheta"]), either(d["abstention_cost_kappa"], d["abstentionCostKappa"]),
    d["premises"]];
  return accept(f, d);
}

function readPremise(d: Record<string, unknown>): unknown[] | null {
  const f = [d["id"], either(d["claim_id"], d["claimId"]), either(d["dependency_type"], d["dependencyType"]),
    either(d["parameter_target"], d["parameterTarget"]),
    either(d["calibrated_violation_probability"], d["calibratedViolationProbability"]), d["claim"]];
  return accept(f, d);
}

function readVerifier(d: Record<string, unknown>): unknown[] | null {
  const f = [d["id"], either(d["resolves_premise_ids"], d["resolvesPremiseIds"]),
    either(d["execution_cost"], d["executionCost"]), either(d["symmetric_reliability"], d["symmetricReliability"])];
  return accept(f, d);
}

function readClaim(d: Record<string, unknown>): unknown[] | null {
  const f = [d["id"], d["statement"], d["timestamp"], either(d["source_trust_score"], d["sourceTrustScore"]),
    either(d["model_confidence"], d["modelConfidence"]), either(d["recency_hours"], d["recencyHours"]),
    either(d["contradiction_flag"], d["contradictionFlag"])];
  return accept(f, d);
}

function accept(f: unknown[], d: object): unknown[] | null {
  let found = 0;
  for (let i = 0; i < f.length; i++) {
    const v = f[i];
    if (v === TWICE) return null;
    if (v !== undefined) found++;
  }
  return found === Object.keys(d).length ? f : null;
}

/** The fields of `data` in `names` order (snake_case names), by the fast path or by `keys`. */
function fields(data: unknown, cls: string, names: readonly (readonly [string, string])[], table: Map<string, string>,
  read: (d: Record<string, unknown>) => unknown[] | null): unknown[] {
  if (isRecord(data)) {
    const got = read(data);
    if (got !== null) return got;
  }
  const kw = keys(data, cls, table);
  return names.map(([snake]) => kw.get(snake));
}

/** Refuse an object that lacks a required field (`required`: positions in `names`). */
function lacks(data: unknown, cls: string, required: readonly number[], names: readonly (readonly [string, string])[],
  got: readonly unknown[], quote: boolean): void {
  for (let t = 0; t < required.length; t++) {
    const i = required[t] as number;
    if (got[i] === undefined) {
      const name = reprStr((names[i] as readonly [string, string])[0]);
      throw new RangeError(quote ? `${cls} ${reprJson(data)} lacks ${name}` : `${cls} lacks ${name}`);
    }
  }
}

/** Check a claim given in camelCase or snake_case. */
export function checkClaim(data: unknown): CheckedClaim {
  const f = fields(data, "claim", CLAIM_FIELDS, CLAIM_KEYS, readClaim);
  lacks(data, "claim", CLAIM_REQUIRED, CLAIM_FIELDS, f, true);
  const [rid, rstmt, rts, rtrust, rconf, rhours, rflag] = f;
  const id = text(rid, "id", "claim", null);
  const trust = number(rtrust, "source_trust_score", "claim", id);
  const conf = number(rconf, "model_confidence", "claim", id);
  if (!(trust >= 0 && trust <= 1)) throw new RangeError(`source_trust_score=${reprJson(trust)} ${of("claim", id)} must lie in [0, 1]`);
  if (!(conf >= 0 && conf <= 1)) throw new RangeError(`model_confidence=${reprJson(conf)} ${of("claim", id)} must lie in [0, 1]`);
  const hours = number(rhours, "recency_hours", "claim", id);
  if (hours < 0) throw new RangeError(`recency_hours=${reprJson(hours)} ${of("claim", id)} must be >= 0`);
  const ts = rts === undefined ? 0 : number(rts, "timestamp", "claim", id);
  const stmt = rstmt === undefined ? "" : text(rstmt, "statement", "claim", id);
  return new CheckedClaim(id, stmt, ts, trust, conf, hours, flag(rflag, "contradiction_flag", "claim", id));
}

/**
 * Check a premise. Its claim may be embedded under `claim`, or its four features may sit in
 * the premise itself (the episodes format); `violated` and `p_true` are ignored.
 */
export function checkPremise(data: unknown): CheckedPremise {
  if (!isRecord(data)) throw new TypeError(`premise must be an object, got ${reprJson(data)}`);
  const rawKind = data["memory_kind"];
  const rawCamelKind = data["memoryKind"];
  let f = rawKind === undefined && rawCamelKind === undefined ? readPremise(data) : null;
  const flat: Record<string, unknown> = {};
  let anyFlat = false;
  if (f === null) { // claim features beside the premise, ignored keys, or an error to word
    for (const key of Object.keys(data)) {
      if (CLAIM_FEATURE_KEYS.has(key) && data[key] !== undefined) {
        flat[key] = data[key];
        anyFlat = true;
      }
    }
    const kw = keys(data, "premise", PREMISE_KEYS, IGNORED_PREMISE_KEYS, PREMISE_SKIP);
    f = PREMISE_FIELDS.map(([snake]) => kw.get(snake));
  }
  if (f[0] === undefined) throw new RangeError(`premise ${reprJson(data)} lacks 'id'`);
  const [rid, rcid, rdep, rtarget, rawP, rawClaim] = f;
  const id = text(rid, "id", "premise", null);
  let kind: string | null;
  try {
    kind = premiseMemoryKind(data);
  } catch (exc) {
    if (exc instanceof TypeError) throw new TypeError(`premise ${reprStr(id)}: ${exc.message}`);
    if (exc instanceof RangeError) throw new RangeError(`premise ${reprStr(id)}: ${exc.message}`);
    throw exc;
  }
  let claimId = rcid === undefined ? "" : text(rcid, "claim_id", "premise", id);
  const target = rtarget === undefined ? "" : text(rtarget, "parameter_target", "premise", id);
  const dep = rdep === undefined ? "direct" : rdep;
  if (dep !== "direct" && dep !== "transitive" && dep !== "joint") {
    throw new RangeError(`dependency_type=${reprJson(dep)} of premise ${reprStr(id)} must be one of ${reprList(DEPENDENCY_TYPES)}`);
  }
  let p: number | null = null;
  if (rawP !== null && rawP !== undefined) {
    p = number(rawP, "calibrated_violation_probability", "premise", id);
    if (!(p >= 0 && p <= 1)) throw new RangeError(`calibrated_violation_probability=${reprJson(p)} of premise ${reprStr(id)} must lie in [0, 1]`);
  }
  if (rawClaim !== null && rawClaim !== undefined && anyFlat) {
    throw new RangeError(`premise ${reprStr(id)} gives claim features both in 'claim' and beside it`);
  }
  let claim: CheckedClaim | null = null;
  if (rawClaim instanceof CheckedClaim) claim = rawClaim;
  else if (isRecord(rawClaim)) claim = checkClaim(rawClaim);
  else if (rawClaim !== null && rawClaim !== undefined) {
    throw new TypeError(`claim of premise ${reprStr(id)} must be an object, got ${reprJson(rawClaim)}`);
  } else if (anyFlat) claim = checkClaim({ id: claimId || id, ...flat });
  if (claim !== null) {
    if (!claimId) claimId = claim.id;
    else if (claimId !== claim.id) {
      throw new RangeError(`claim_id=${reprStr(claimId)} of premise ${reprStr(id)} differs from its claim's id=${reprStr(claim.id)}`);
    }
  }
  return new CheckedPremise(id, claimId, dep, target, p, claim, kind);
}

/** Check an action given in camelCase or snake_case (premises as objects). */
export function checkAction(data: ActionInput): CheckedAction {
  if (data instanceof CheckedAction) return data;
  const f = fields(data, "action", ACTION_FIELDS, ACTION_KEYS, readAction);
  lacks(data, "action", ACTION_REQUIRED, ACTION_FIELDS, f, false);
  const [rid, rtool, rargs, rtheta, rkappa, raw] = f;
  const id = text(rid, "action_id", "action", null);
  const tool = rtool === undefined ? "" : text(rtool, "tool_name", "action", id);
  if (!Array.isArray(raw)) throw new TypeError(`premises of action ${reprStr(id)} must be a list`);
  const args = rargs === undefined ? {} : rargs;
  if (!isRecord(args)) throw new TypeError(`arguments of action ${reprStr(id)} must be an object`);
  const theta = number(rtheta, "impact_cost_theta", "action", id);
  if (!(theta > 0)) throw new RangeError(`impact_cost_theta=${reprJson(theta)} of action ${reprStr(id)} must be > 0`);
  const kappa = number(rkappa, "abstention_cost_kappa", "action", id);
  if (!(kappa > 0)) throw new RangeError(`abstention_cost_kappa=${reprJson(kappa)} of action ${reprStr(id)} must be > 0`);
  const premises = new Array<CheckedPremise>(raw.length);
  for (let i = 0; i < raw.length; i++) premises[i] = raw[i] instanceof CheckedPremise ? raw[i] : checkPremise(raw[i]);
  return new CheckedAction(id, tool, args, theta, kappa, premises, data as object);
}

/** Check a verifier given in camelCase or snake_case. */
export function checkVerifier(data: VerifierInput): CheckedVerifier {
  if (data instanceof CheckedVerifier) return data;
  const f = fields(data, "verifier", VERIFIER_FIELDS, VERIFIER_KEYS, readVerifier);
  lacks(data, "verifier", VERIFIER_REQUIRED, VERIFIER_FIELDS, f, true);
  const [rid, ids, rcost, rr] = f;
  const id = text(rid, "id", "verifier", null);
  if (!Array.isArray(ids)) throw new TypeError(`resolves_premise_ids of verifier ${reprStr(id)} must be a list of ids, got ${reprJson(ids)}`);
  for (let i = 0; i < ids.length; i++) {
    const pid = ids[i];
    if (typeof pid !== "string") text(pid, "resolves_premise_ids entry", "verifier", id);
    for (let j = 0; j < i; j++) {
      if (ids[j] === pid) throw new RangeError(`resolves_premise_ids=${reprList(ids)} of verifier ${reprStr(id)} repeats an id`);
    }
  }
  const cost = number(rcost, "execution_cost", "verifier", id);
  if (cost < 0) throw new RangeError(`execution_cost=${reprJson(cost)} of verifier ${reprStr(id)} must be >= 0`);
  const r = number(rr, "symmetric_reliability", "verifier", id);
  if (!(r > 0.5 && r <= 1)) throw new RangeError(`symmetric_reliability=${reprJson(r)} of verifier ${reprStr(id)} must lie in (0.5, 1]`);
  return new CheckedVerifier(id, ids.slice() as string[], cost, r, data as object);
}
