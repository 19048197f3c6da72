/**
 * Load exported artifacts safely: the Node gate's side of `models/<name>/<version>/`.
 *
 * The checks and refusals of the Python loader (`amv_calib/contract/_artifact.py`,
 * models/README.md "What a loader checks"), in its order: the reference resolves (a version
 * folder, or `MODEL_DIR@ALIAS` through `aliases.json` with its recorded manifest sha256; a
 * bare model folder is refused); `manifest.json` is UTF-8 JSON without non-finite numbers or
 * repeated keys, nested at most 32 levels, of a known format, with the required keys and no
 * unknown ones, a version matching its folder; every listed file is a plain relative name,
 * a regular file within its size cap and of the listed sha256; no unlisted file sits beside
 * them; under trusted keys `model.sig` verifies over the bytes read; `calibrator.json` is a
 * valid portable calibrator agreeing with the manifest's feature map, kind and clamp; the
 * gate thresholds are valid; and a Learn-then-Test certificate, when the manifest has one, is
 * bound to this calibrator (`calibrator_sha256`) and to these thresholds. Every file is read
 * once (files.ts). Nothing is ever executed or unpickled.
 *
 * `loadArtifact` never throws for a refused artifact: it gives a gate whose every decision
 * is ABSTAIN with the reason. `readArtifact` throws the `ArtifactError` instead.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { featureMapFromList, PortableCalibrator, PortableFormatError, sameFeatureMap, checkFormat } from "./calibrator.js";
import { Gate, type GateOptions } from "./engine.js";
import { ArtifactError, Folder, MAX_JSON_BYTES, sha256Hex } from "./files.js";
import { decodeUtf8, has, isObject, JsonError, parseJson, writtenAsFloat, type Json, type JsonObject } from "./json.js";
import { formatG, reprJson, reprList, reprStr } from "./pyfmt.js";
import { readTrustedKey, SIGNATURE_FILE, verifySignature, type TrustedKey } from "./signature.js";

export { ArtifactError } from "./files.js";

/** The artifact rules that are data, as `artifact_rules.json` (copied beside this file at build). */
interface Rules {
  codes: Record<string, string>;
  json: { max_depth: number; max_safe_integer: number };
  manifest: {
    format: string; format_version: number; allowed: string[]; required: string[]; objects: string[];
    sha256_pattern: string; version_pattern: string;
  };
  gate: {
    keys: string[]; defaults: Record<string, Json>; numbers: Record<string, [number, number | null]>;
    choices: Record<string, string[]>; integers: Record<string, number>; clamp: [number, number];
  };
  certificate: { numbers: string[] };
  tuning: { members: string; fingerprint: string };
}

/**
 * The rules the Python loader reads too (`amv_calib/contract/artifact_rules.json`, one copy
 * in the repository; `npm run build` copies it here): fields, types, ranges, reason codes.
 */
export const RULES: Readonly<Rules> = Object.freeze(JSON.parse(
  fs.readFileSync(new URL("./artifact_rules.json", import.meta.url), "utf8")) as Rules);
/** The reason codes an {@link ArtifactError} of the loader may carry. */
export const REASON_CODES: ReadonlySet<string> = new Set(Object.keys(RULES.codes));

export const ARTIFACT_FORMAT = RULES.manifest.format;
export const ARTIFACT_FORMAT_VERSION = RULES.manifest.format_version;
export const ALIASES_FORMAT = "amv-calib/aliases";
export const ALIASES_FORMAT_VERSION = 1;
export const MANIFEST_FILE = "manifest.json";
export const CALIBRATOR_FILE = "calibrator.json";
export const ALIASES_FILE = "aliases.json";
/** Deeper JSON is refused (the format nests four levels). */
export const MAX_JSON_DEPTH = RULES.json.max_depth;
/** Where relative references are looked up when they do not exist from the current folder. */
export const MODELS_DIR_ENV = "AMV_CALIB_MODELS_DIR";
/** Public keys (PEM files separated by ':') a deployed gate trusts. */
export const TRUSTED_KEYS_ENV = "AMV_CALIB_TRUSTED_KEYS";
export const DEFAULT_REFERENCE = "amv-guard@production";

/**
 * The keys a manifest may hold, and the only list of them here: a manifest with another key
 * is refused (a reader that does not know a key cannot vouch for what it means).
 */
export const MANIFEST_KEYS: ReadonlySet<string> = new Set(RULES.manifest.allowed);
const REQUIRED_MANIFEST_KEYS = RULES.manifest.required;

/** The gate thresholds a manifest's `gate` object holds. */
export const GATE_KEYS: readonly string[] = Object.freeze([...RULES.gate.keys]);
/** Keys an older manifest may lack, and what they mean then. */
export const GATE_DEFAULTS: Readonly<Record<string, Json>> = Object.freeze({ ...RULES.gate.defaults });

const SHA256_RE = new RegExp(RULES.manifest.sha256_pattern);
const VERSION_RE = new RegExp(RULES.manifest.version_pattern);

/** A value that breaks an artifact rule: a `RangeError` carrying its reason code (Python's `RuleError`). */
export class RuleError extends RangeError {
  override name = "RuleError";
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

/** The manifest's `gate` object, checked. */
export interface Thresholds {
  lambda_cost_scale: number;
  delta_loss_threshold: number;
  epsilon_harm_bound: number;
  /** Absent in a manifest written before the harm price (which then means 0). */
  harm_price?: number;
  planner: "lookahead" | "myopic";
  max_verifications: number;
  clamp: [number, number] | null;
}

/** A verified artifact version. */
export interface LoadedArtifact {
  readonly path: string;
  readonly manifest: JsonObject;
  /** `calibrator.json` checked, under the gate's clamp. */
  readonly calibrator: PortableCalibrator;
  readonly thresholds: Thresholds;
  readonly name: string;
  readonly version: string;
  readonly alias: string | null;
  /** The manifest's `files`: name -> sha256, every one checked. */
  readonly files: Readonly<Record<string, string>>;
  /** The trusted key that verified `model.sig`, or null when no key was configured. */
  readonly signedBy: string | null;
}

export interface LoadOptions {
  /**
   * Public keys (PEM files, or PEM text) of whoever may sign artifacts: the version must
   * carry a `model.sig` one of them verifies. Absent or empty: `$AMV_CALIB_TRUSTED_KEYS`
   * (separated by ':'); that variable set but naming no key refuses every artifact.
   */
  trustedKeys?: readonly string[] | null;
}

function parse(raw: Buffer, where: string, allowNonFinite = false): JsonObject {
  let obj: Json;
  try {
    obj = parseJson(decodeUtf8(raw), {
      maxDepth: MAX_JSON_DEPTH, allowNonFinite, maxSafeInteger: RULES.json.max_safe_integer, markFloats: true,
    });
  } catch (exc) {
    if (exc instanceof TypeError) throw new ArtifactError(`${where}: not UTF-8 text (${exc.message})`, "not_utf8");
    if (exc instanceof JsonError) {
      if (exc.problem === "depth") throw new ArtifactError(`${where}: ${exc.message}`, "too_deep");
      throw new ArtifactError(`${where}: not valid JSON (${exc.message})`, exc.problem === "integer" ? "bad_number" : "bad_json");
    }
    throw exc;
  }
  if (!isObject(obj)) throw new ArtifactError(`${where}: must hold a JSON object, got ${Array.isArray(obj) ? "list" : typeof obj}`, "bad_type");
  return obj;
}

function checkFileFormat(data: JsonObject, name: string, version: number, where: string): void {
  try {
    checkFormat(data, name, version);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${where}: ${exc.message}`, "format");
    throw exc;
  }
}

// -- references and aliases ------------------------------------------------------------------

function modelsDir(): string {
  return process.env[MODELS_DIR_ENV] || "models";
}

function isDir(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** The first existing spelling of a (possibly relative) model or version folder. */
function locate(given: string): string {
  const candidates = [given];
  if (!path.isAbsolute(given)) {
    const base = modelsDir();
    candidates.push(path.join(base, given));
    const parts = given.split(/[\\/]+/).filter(Boolean);
    if (parts[0] === "models" && parts.length > 1) candidates.push(path.join(base, ...parts.slice(1)));
  }
  for (const c of candidates) if (isDir(c)) return c;
  throw new ArtifactError(`${given}: artifact folder does not exist (looked in ${[...new Set(candidates)].join(", ")})`);
}

function splitAlias(ref: string): [string, string | null] {
  const at = ref.lastIndexOf("@");
  if (at > 0) {
    const head = ref.slice(0, at);
    const tail = ref.slice(at + 1);
    if (tail && !tail.includes("/") && !tail.includes(path.sep)) return [head, tail];
  }
  return [ref, null];
}

interface AliasEntry {
  version: string;
  manifest_sha256: string | null;
}

/** Read and check `MODEL_DIR/aliases.json`; no aliases when the file is absent. */
export function readAliases(modelDir: string): Map<string, AliasEntry> {
  const file = path.join(modelDir, ALIASES_FILE);
  const out = new Map<string, AliasEntry>();
  let exists = true;
  try {
    fs.lstatSync(file);
  } catch {
    exists = false;
  }
  if (!exists) return out;
  const folder = new Folder(modelDir);
  let data: JsonObject;
  try {
    data = parse(folder.read(ALIASES_FILE, "alias file"), file);
  } finally {
    folder.close();
  }
  checkFileFormat(data, ALIASES_FORMAT, ALIASES_FORMAT_VERSION, file);
  const aliases = has(data, "aliases") ? data["aliases"] : null;
  if (!isObject(aliases)) throw new ArtifactError(`${file}: 'aliases' must be an object`);
  for (const [alias, entry] of Object.entries(aliases)) {
    const where = `${file}: alias ${reprStr(alias)}`;
    if (!isObject(entry) || typeof entry["version"] !== "string") throw new ArtifactError(`${where} must be an object with a 'version' string`);
    const version = entry["version"];
    if (!VERSION_RE.test(version)) throw new ArtifactError(`${where}: version=${reprStr(version)} is not vN`);
    const history = has(entry, "history") ? entry["history"] : [];
    if (!Array.isArray(history) || !history.every((h) => isObject(h) && typeof h["version"] === "string")) {
      throw new ArtifactError(`${where}: 'history' must be a list of {'version': ...}`);
    }
    const last = history.length ? ((history[history.length - 1] as JsonObject)["version"] as string) : null;
    if (last !== null && last !== version) {
      throw new ArtifactError(`${where}: version=${reprStr(version)} differs from the last history entry ${reprStr(last)}`);
    }
    const sha = has(entry, "manifest_sha256") ? entry["manifest_sha256"] : null;
    if (sha !== null && !(typeof sha === "string" && SHA256_RE.test(sha))) {
      throw new ArtifactError(`${where}: manifest_sha256=${reprJson(sha)} is not a sha256 hex digest`);
    }
    out.set(alias, { version, manifest_sha256: sha as string | null });
  }
  return out;
}

interface Resolved {
  path: string;
  alias: string | null;
  manifestSha256: string | null;
}

function resolve(ref: string | undefined): Resolved {
  const text = ref === undefined ? path.join(modelsDir(), DEFAULT_REFERENCE) : ref;
  if (!text) throw new ArtifactError("empty artifact reference");
  const [head, alias] = splitAlias(text);
  const folder = locate(head);
  if (alias === null) {
    if (!fs.existsSync(path.join(folder, MANIFEST_FILE))) {
      const versions = fs.readdirSync(folder, { withFileTypes: true }).some((e) => VERSION_RE.test(e.name) && isDir(path.join(folder, e.name)));
      if (fs.existsSync(path.join(folder, ALIASES_FILE)) || versions) {
        throw new ArtifactError(`${folder}: is a model folder, not an artifact version; name a version (${folder}/vN) or an alias (${folder}@production)`);
      }
    }
    return { path: folder, alias: null, manifestSha256: null };
  }
  const entry = readAliases(folder).get(alias);
  if (entry === undefined) {
    const known = [...readAliases(folder).keys()].sort();
    throw new ArtifactError(`${path.join(folder, ALIASES_FILE)}: no alias ${reprStr(alias)} (known aliases: ${known.length ? reprList(known) : "none"}); promote a version first: amv-calib promote ${path.basename(folder)} vN --alias ${alias}`);
  }
  const target = path.join(folder, entry.version);
  if (!isDir(target)) {
    throw new ArtifactError(`${path.join(folder, ALIASES_FILE)}: alias ${reprStr(alias)} names ${entry.version}, but ${target} does not exist`);
  }
  return { path: target, alias, manifestSha256: entry.manifest_sha256 };
}

/** The version folder a reference names (its contents unchecked; `readArtifact` checks them). */
export function resolveReference(ref?: string): string {
  return resolve(ref).path;
}

// -- thresholds and the certificate ----------------------------------------------------------

function num(value: Json | undefined, key: string, lo: number, hi: number | null = null): number {
  if (typeof value !== "number") throw new RuleError("bad_type", `${key}=${reprJson(value)} is not a number`);
  if (!Number.isFinite(value) || value < lo || (hi !== null && value > hi)) {
    const bound = hi === null ? `>= ${formatG(lo)}` : `in [${formatG(lo)}, ${formatG(hi)}]`;
    throw new RuleError("bad_value", `${key}=${reprJson(value)} must be finite and ${bound}`);
  }
  return value;
}

function choice(value: Json | undefined, key: string, choices: readonly string[]): string {
  if (typeof value !== "string") throw new RuleError("bad_type", `${key}=${reprJson(value)} must be a string`);
  if (!choices.includes(value)) {
    const allowed = choices.length === 1 ? reprStr(choices[0] as string)
      : `${choices.slice(0, -1).map(reprStr).join(", ")} or ${reprStr(choices[choices.length - 1] as string)}`;
    throw new RuleError("bad_value", `${key}=${reprJson(value)} must be ${allowed}`);
  }
  return value;
}

/** An integer >= `least`; a float of integral value (`3.0`) counts as one, as in Python. */
function integer(value: Json | undefined, key: string, least: number): number {
  if (typeof value !== "number") throw new RuleError("bad_type", `${key}=${reprJson(value)} must be an integer >= ${least}`);
  if (!Number.isInteger(value) || value < least) throw new RuleError("bad_value", `${key}=${reprJson(value)} must be an integer >= ${least}`);
  return value;
}

function clampOf(c: Json | undefined, bounds: readonly [number, number]): [number, number] | null {
  if (c === null) return null;
  if (!Array.isArray(c)) throw new RuleError("bad_type", `clamp=${reprJson(c)} must be [lo, hi] or null`);
  if (c.length !== 2) throw new RuleError("bad_value", `clamp=${reprJson(c)} must be [lo, hi] or null`);
  const lo = num(c[0], "clamp[0]", bounds[0], bounds[1]);
  const hi = num(c[1], "clamp[1]", bounds[0], bounds[1]);
  if (!(lo < hi)) throw new RuleError("bad_value", `clamp=${reprJson(c)} must satisfy lo < hi`);
  return [lo, hi];
}

/**
 * Validate a `thresholds.json` / manifest `gate` object (Python's `check_thresholds`): key by
 * key in the order of {@link GATE_KEYS}, so that both loaders name the same first bad key.
 * Throws {@link RuleError} with the reason code.
 */
export function checkThresholds(data: Json): Thresholds {
  if (!isObject(data)) throw new RuleError("bad_type", `thresholds must be a JSON object, got ${Array.isArray(data) ? "list" : typeof data}`);
  const missing = GATE_KEYS.filter((k) => !has(data, k) && !has(GATE_DEFAULTS, k));
  if (missing.length) throw new RuleError("missing_field", `thresholds lack keys ${reprList(missing)}`);
  const unknown = Object.keys(data).filter((k) => !GATE_KEYS.includes(k)).sort();
  if (unknown.length) throw new RuleError("unknown_field", `thresholds have unknown keys ${reprList(unknown)}; expected ${reprList(GATE_KEYS)}`);
  const rules = RULES.gate;
  const out: Record<string, Json> = {};
  for (const key of GATE_KEYS) {
    if (!has(data, key)) continue;
    const v = data[key];
    if (has(rules.numbers, key)) {
      const [lo, hi] = rules.numbers[key] as [number, number | null];
      out[key] = num(v, key, lo, hi);
    } else if (has(rules.choices, key)) out[key] = choice(v, key, rules.choices[key] as string[]);
    else if (has(rules.integers, key)) out[key] = integer(v, key, rules.integers[key] as number);
    else out[key] = clampOf(v, rules.clamp);
  }
  return out as unknown as Thresholds;
}

/**
 * Equal as JSON values, as Python's `json_equal`: a boolean is never a number, numbers by
 * value (`3` and `3.0` alike, as both parse them), lists item by item, objects key by key.
 */
export function jsonEqual(a: Json | undefined, b: Json | undefined): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (isObject(a) || isObject(b)) {
    if (!isObject(a) || !isObject(b)) return false;
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => has(b, k) && jsonEqual(a[k], b[k]));
  }
  return a === b;
}

/**
 * The canonical form of checked thresholds that Python hashes (`thresholds_sha256`): every
 * key of {@link GATE_KEYS}, an absent harm price 0. Two configurations are the same when
 * these are equal key by key, a float's sign of zero included (Python writes `-0.0`).
 */
function sameThresholds(a: Thresholds, b: Thresholds): string[] {
  const full = (t: Thresholds): Record<string, Json> => ({ ...GATE_DEFAULTS, ...(t as unknown as Record<string, Json>) });
  const x = full(a);
  const y = full(b);
  const same = (u: Json | undefined, v: Json | undefined): boolean => (Array.isArray(u) && Array.isArray(v)
    ? u.length === v.length && u.every((e, i) => Object.is(e, v[i])) : Object.is(u, v));
  return GATE_KEYS.filter((k) => !same(x[k], y[k])).sort();
}

function isSha256(v: Json | undefined): v is string {
  return typeof v === "string" && SHA256_RE.test(v);
}

/**
 * A certificate binds the version (Python's `check_certificate_binding`): its
 * `calibrator_sha256` is the calibrator the manifest lists; its `thresholds` are the entry
 * `chosen` (a JSON integer, not `true`, not `21.0`) of its list `path`, valid thresholds equal
 * to the manifest's `gate` key by key (a missing `harm_price` meaning 0); and a `seen` record
 * is named by the fingerprint of the tuning record the version carries. Throws
 * {@link RuleError} with code `certificate_binding` or `tuning_binding`.
 */
function checkCertificate(cert: JsonObject, gate: Thresholds, tuning: JsonObject | null, calSha: string): void {
  const sha = cert["calibrator_sha256"];
  if (!isSha256(sha)) {
    throw new RuleError("certificate_binding", "certificate does not name the calibrator it certified (no calibrator_sha256; made before certificates were bound?): certify this version again (amv-calib certify) and export the result");
  }
  if (sha !== calSha) {
    throw new RuleError("certificate_binding", `certificate was made for calibrator sha256 ${sha}, but this calibrator.json has sha256 ${calSha}: a certificate vouches for one calibrator only`);
  }
  const chosen = cert["thresholds"];
  if (!isObject(chosen)) throw new RuleError("certificate_binding", "certificate certified no configuration");
  const pathList = cert["path"];
  const index = cert["chosen"];
  if (!(Array.isArray(pathList) && typeof index === "number" && Number.isInteger(index) && !writtenAsFloat(cert, "chosen")
        && index >= 0 && index < pathList.length && jsonEqual(pathList[index], chosen))) {
    throw new RuleError("certificate_binding", `certificate's thresholds are not its path's chosen configuration (chosen=${reprJson(index ?? null)})`);
  }
  let theirs: Thresholds;
  try {
    theirs = checkThresholds(chosen);
  } catch (exc) {
    if (exc instanceof RangeError) throw new RuleError("certificate_binding", `certificate's chosen thresholds are invalid: ${exc.message}`);
    throw exc;
  }
  const differ = sameThresholds(theirs, gate);
  if (differ.length) {
    throw new RuleError("certificate_binding", `certificate certified other thresholds than this gate's (they differ in ${reprList(differ)}): a certificate vouches for its chosen thresholds only`);
  }
  const seen = has(cert, "seen") ? cert["seen"] : null;
  if (seen !== null) {
    const want = isObject(seen) && has(seen, "fingerprint") ? seen["fingerprint"] : null;
    const have = tuning !== null && has(tuning, RULES.tuning.fingerprint) ? tuning[RULES.tuning.fingerprint] : null;
    if (!isSha256(want) || want !== have) {
      throw new RuleError("tuning_binding", `certificate's thresholds have seen the episodes of record ${String(want)}, but this version carries record ${String(have)}: export the certify step's tuning.json with its certificate`);
    }
  }
}

/** The tuning record is a listed file (`members`) whose sha256 is its `fingerprint`. */
function checkTuning(tuning: JsonObject, files: Readonly<Record<string, string>>, where: string): void {
  const members = has(tuning, RULES.tuning.members) ? tuning[RULES.tuning.members] : null;
  if (typeof members !== "string" || !has(files, members)) {
    throw new ArtifactError(`${where}: tuning: members=${reprJson(members ?? null)} must name a file the manifest lists`, "tuning_binding");
  }
  const fp = has(tuning, RULES.tuning.fingerprint) ? tuning[RULES.tuning.fingerprint] : null;
  if (fp !== files[members]) {
    throw new ArtifactError(`${where}: tuning: fingerprint ${reprJson(fp ?? null)} is not the sha256 of ${members} (${files[members]})`, "tuning_binding");
  }
}

// -- loading -----------------------------------------------------------------------------------

function checkRelPath(rel: string, where: string): string {
  if (!rel) throw new ArtifactError(`${where}: 'files' has a non-string or empty name ${reprJson(rel)}`, "bad_path");
  const parts = rel.split("/");
  if (rel.startsWith("/") || rel.includes("\\") || parts.some((p) => p === "" || p === "." || p === "..")) {
    throw new ArtifactError(`${where}: 'files' entry ${reprStr(rel)} is not a plain relative path inside the artifact folder`, "bad_path");
  }
  if (rel === MANIFEST_FILE) throw new ArtifactError(`${where}: 'files' must not list ${MANIFEST_FILE} itself`, "bad_path");
  return rel;
}

/** The trusted keys in force: those given, else the environment's; null when none is configured. */
function keysInForce(given: readonly string[] | null | undefined): TrustedKey[] | null {
  if (given && given.length) return given.map(readTrustedKey);
  const raw = process.env[TRUSTED_KEYS_ENV];
  if (raw === undefined) return null;
  const specs = raw.split(path.delimiter).map((s) => s.trim()).filter(Boolean);
  if (!specs.length) {
    throw new ArtifactError(`$${TRUSTED_KEYS_ENV} is set but names no key: every artifact is refused (unset it to load unsigned artifacts, or name the signers' public keys)`);
  }
  return specs.map(readTrustedKey);
}

/**
 * Load and verify one artifact version; throws {@link ArtifactError} naming the file and the
 * problem when it is refused.
 *
 * @param ref a version folder or `MODEL_DIR@ALIAS`; default `amv-guard@production` under
 *   `$AMV_CALIB_MODELS_DIR` (else `./models`)
 */
export function readArtifact(ref?: string, options: LoadOptions = {}): LoadedArtifact {
  const res = resolve(ref);
  const keys = keysInForce(options.trustedKeys);
  const folder = new Folder(res.path);
  try {
    const manifestPath = path.join(res.path, MANIFEST_FILE);
    const rawManifest = folder.read(MANIFEST_FILE, "manifest");
    const manifestSha = sha256Hex(rawManifest);
    const manifest = readManifest(res, manifestPath, rawManifest, manifestSha);
    const files = listedFiles(manifest["files"] as Json, manifestPath);
    // every file read once: the calibrator's bytes are hashed and then parsed, the others hashed
    const digests = new Map<string, string>([[MANIFEST_FILE, manifestSha]]);
    let rawCalibrator: Buffer = Buffer.alloc(0);
    for (const rel of Object.keys(files).sort()) {
      const shown = path.join(res.path, rel);
      let got: string;
      if (rel === CALIBRATOR_FILE) {
        rawCalibrator = folder.read(rel, `file listed in ${MANIFEST_FILE}`, MAX_JSON_BYTES);
        got = sha256Hex(rawCalibrator);
      } else {
        if (!folder.lexists(rel)) throw new ArtifactError(`${shown}: listed in ${MANIFEST_FILE} but missing`, "missing_file");
        got = folder.sha256(rel, `file listed in ${MANIFEST_FILE}`);
      }
      if (got !== files[rel]) {
        throw new ArtifactError(`${shown}: sha256 mismatch (tampered or truncated): ${MANIFEST_FILE} lists ${files[rel]}, the file has ${got}`, "hash_mismatch");
      }
      digests.set(rel, got);
    }
    const entries = folder.entries();
    const extra = [...entries].filter((f) => !has(files, f) && f !== MANIFEST_FILE && f !== SIGNATURE_FILE).sort();
    if (extra.length) {
      throw new ArtifactError(`${path.join(res.path, extra[0] as string)}: not listed in ${MANIFEST_FILE} (unlisted files: ${reprList(extra)}); an artifact folder is immutable, export a new version instead`, "unlisted_file");
    }
    let signedBy: string | null = null;
    if (keys !== null) {
      const sig = entries.has(SIGNATURE_FILE) ? folder.read(SIGNATURE_FILE, "signature", MAX_JSON_BYTES) : null;
      signedBy = verifySignature(res.path, sig, digests, keys);
    }
    const calibrator = readCalibrator(rawCalibrator, path.join(res.path, CALIBRATOR_FILE), manifest, manifestPath);
    let thresholds: Thresholds;
    try {
      thresholds = checkThresholds(manifest["gate"] as Json);
    } catch (exc) {
      if (exc instanceof RuleError) throw new ArtifactError(`${manifestPath}: gate: ${exc.message}`, exc.code);
      throw exc;
    }
    // the bindings, in Python's order: the tuning record, then the certificate
    const tuning = has(manifest, "tuning") ? manifest["tuning"] as JsonObject | null : null;
    if (tuning !== null) checkTuning(tuning, files, manifestPath);
    const cert = has(manifest, "certificate") ? manifest["certificate"] as JsonObject | null : null;
    if (cert !== null) {
      try {
        checkCertificate(cert, thresholds, tuning, files[CALIBRATOR_FILE] as string);
      } catch (exc) {
        if (exc instanceof RuleError) throw new ArtifactError(`${manifestPath}: ${exc.message}`, exc.code);
        throw exc;
      }
    }
    return Object.freeze({
      path: res.path, manifest, calibrator: withGateClamp(calibrator, thresholds.clamp, manifestPath), thresholds,
      name: manifest["name"] as string, version: manifest["version"] as string, alias: res.alias, files, signedBy,
    });
  } finally {
    folder.close();
  }
}

function readManifest(res: Resolved, where: string, raw: Buffer, sha: string): JsonObject {
  if (res.manifestSha256 !== null && sha !== res.manifestSha256) {
    throw new ArtifactError(`${where}: sha256 ${sha} differs from ${res.manifestSha256} recorded when alias ${reprStr(res.alias as string)} was promoted (manifest edited after promotion?); verify the artifact and promote it again`, "alias_binding");
  }
  const manifest = parse(raw, where);
  checkFileFormat(manifest, ARTIFACT_FORMAT, ARTIFACT_FORMAT_VERSION, where);
  const missing = REQUIRED_MANIFEST_KEYS.filter((k) => !has(manifest, k));
  if (missing.length) throw new ArtifactError(`${where}: lacks keys ${reprList(missing)}`, "missing_field");
  const unknown = Object.keys(manifest).filter((k) => !MANIFEST_KEYS.has(k)).sort();
  if (unknown.length) throw new ArtifactError(`${where}: unknown keys ${reprList(unknown)}`, "unknown_field");
  for (const key of RULES.manifest.objects) {
    const v = has(manifest, key) ? manifest[key] : null;
    if (v !== null && !isObject(v)) throw new ArtifactError(`${where}: ${key} must be an object`, "bad_type");
  }
  const cert = has(manifest, "certificate") ? manifest["certificate"] : null;
  if (isObject(cert) && !RULES.certificate.numbers.every((k) => typeof cert[k] === "number")) {
    throw new ArtifactError(`${where}: certificate must be an object with numbers alpha, delta and n`, "bad_type");
  }
  const name = manifest["name"];
  const version = manifest["version"];
  if (typeof name !== "string") throw new ArtifactError(`${where}: name=${reprJson(name)} must be a non-empty string`, "bad_type");
  if (!name) throw new ArtifactError(`${where}: name=${reprJson(name)} must be a non-empty string`, "bad_value");
  if (typeof version !== "string") throw new ArtifactError(`${where}: version=${reprJson(version)} must look like 'v1'`, "bad_type");
  if (!VERSION_RE.test(version)) throw new ArtifactError(`${where}: version=${reprJson(version)} must look like 'v1'`, "bad_value");
  const folder = path.basename(res.path);
  if (VERSION_RE.test(folder) && folder !== version) {
    throw new ArtifactError(`${where}: version=${reprStr(version)} but the folder is ${reprStr(folder)} (copied or renamed by hand?)`, "folder_mismatch");
  }
  return manifest;
}

function listedFiles(field: Json, where: string): Record<string, string> {
  if (!isObject(field)) throw new ArtifactError(`${where}: 'files' must map file names to sha256 digests`, "bad_type");
  const files: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [rel, digest] of Object.entries(field)) {
    checkRelPath(rel, where);
    if (typeof digest !== "string" || !SHA256_RE.test(digest)) {
      throw new ArtifactError(`${where}: 'files'[${reprStr(rel)}]=${reprJson(digest)} is not a sha256 hex digest`, typeof digest === "string" ? "bad_value" : "bad_type");
    }
    files[rel] = digest;
  }
  if (!has(files, CALIBRATOR_FILE)) throw new ArtifactError(`${where}: 'files' does not list ${CALIBRATOR_FILE}`, "missing_field");
  return files;
}

function readCalibrator(raw: Buffer, calPath: string, manifest: JsonObject, manifestPath: string): PortableCalibrator {
  // NaN/Infinity tokens parse so that the calibrator's own check names the field
  const data = parse(raw, calPath, true);
  let cal: PortableCalibrator;
  try {
    cal = PortableCalibrator.fromDict(data);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${calPath}: ${exc.message}`, "calibrator");
    throw exc;
  }
  let map;
  try {
    map = featureMapFromList(manifest["feature_map"] as Json);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${manifestPath}: feature_map: ${exc.message}`, "calibrator");
    throw exc;
  }
  if (!sameFeatureMap(map, cal.featureMap)) {
    throw new ArtifactError(`${manifestPath}: feature_map ${reprList(map.map((t) => t.name))} differs from ${CALIBRATOR_FILE}'s ${reprList(cal.featureMap.map((t) => t.name))}`, "calibrator_binding");
  }
  if (manifest["calibrator_kind"] !== cal.kind) {
    throw new ArtifactError(`${manifestPath}: calibrator_kind=${reprJson(manifest["calibrator_kind"])} but ${CALIBRATOR_FILE} has kind=${reprStr(cal.kind)}`, "calibrator_binding");
  }
  return cal;
}

function withGateClamp(cal: PortableCalibrator, clamp: [number, number] | null, where: string): PortableCalibrator {
  if (clamp === null) return cal;
  if (cal.clamp !== null && (cal.clamp[0] !== clamp[0] || cal.clamp[1] !== clamp[1])) {
    throw new ArtifactError(`${where}: gate clamp ${reprJson(clamp)} differs from ${CALIBRATOR_FILE}'s clamp ${reprJson(cal.clamp)}`, "calibrator_binding");
  }
  return cal.clamp === null ? cal.withClamp(clamp) : cal;
}

/** Options of {@link loadArtifact}: the trusted keys, and settings that win over the artifact's. */
export type ArtifactGateOptions = LoadOptions & Omit<GateOptions, "calibrator" | "refusal" | "artifactName" | "artifactVersion">;

/**
 * A gate using an artifact's calibrator and thresholds. A refused artifact never throws: it
 * gives a gate whose every decision is ABSTAIN with `reason` "artifact refused: ...".
 * Settings given here (mode, planner, a threshold, the decision log) win over the artifact's.
 */
export function loadArtifact(ref?: string, options: ArtifactGateOptions = {}): Gate {
  const { trustedKeys, ...overrides } = options;
  let art: LoadedArtifact;
  try {
    art = readArtifact(ref, { trustedKeys });
  } catch (exc) {
    // any failure refuses (fail closed); the reason names the code as Python's gate does
    const why = exc instanceof ArtifactError ? `[${exc.code}] ${exc.message}` : `[refused] unexpected ${(exc as Error).name}: ${(exc as Error).message}`;
    return new Gate({ ...overrides, refusal: `artifact refused: ${why}` });
  }
  return gateFrom(art, overrides);
}

/** A gate from a loaded artifact, `overrides` winning over its thresholds. */
export function gateFrom(art: LoadedArtifact, overrides: GateOptions = {}): Gate {
  const t = art.thresholds;
  const base: GateOptions = {
    calibrator: art.calibrator,
    lambdaCostScale: t.lambda_cost_scale,
    deltaLossThreshold: t.delta_loss_threshold,
    epsilonHarmBound: t.epsilon_harm_bound,
    planner: t.planner,
    maxVerifications: t.max_verifications,
    artifactName: art.name,
    artifactVersion: art.version,
  };
  if (t.harm_price !== undefined) base.harmPrice = t.harm_price;
  const given = Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined));
  return new Gate({ ...base, ...given });
}
