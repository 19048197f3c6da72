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
import { decodeUtf8, has, isObject, JsonError, parseJson, type Json, type JsonObject } from "./json.js";
import { formatG, reprJson, reprList, reprStr } from "./pyfmt.js";
import { readTrustedKey, SIGNATURE_FILE, verifySignature, type TrustedKey } from "./signature.js";

export { ArtifactError } from "./files.js";

export const ARTIFACT_FORMAT = "amv-calib/artifact";
export const ARTIFACT_FORMAT_VERSION = 1;
export const ALIASES_FORMAT = "amv-calib/aliases";
export const ALIASES_FORMAT_VERSION = 1;
export const MANIFEST_FILE = "manifest.json";
export const CALIBRATOR_FILE = "calibrator.json";
export const ALIASES_FILE = "aliases.json";
/** Deeper JSON is refused (the format nests four levels). */
export const MAX_JSON_DEPTH = 32;
/** Where relative references are looked up when they do not exist from the current folder. */
export const MODELS_DIR_ENV = "AMV_CALIB_MODELS_DIR";
/** Public keys (PEM files separated by ':') a deployed gate trusts. */
export const TRUSTED_KEYS_ENV = "AMV_CALIB_TRUSTED_KEYS";
export const DEFAULT_REFERENCE = "amv-guard@production";

/**
 * The keys a manifest may hold, and the only list of them here: a manifest with another key
 * is refused (a reader that does not know a key cannot vouch for what it means).
 */
export const MANIFEST_KEYS: ReadonlySet<string> = new Set([
  "format", "format_version", "name", "version", "created_utc", "package_version", "git_commit",
  "calibrator_kind", "calibrator_source", "feature_map", "gate", "training_data", "metrics", "files",
  "certificate",
  // where the calibrator was fitted, when not on one machine ("spark")
  "engine",
  // how the thresholds were tuned (an object; its episodes may be listed as tuning-episodes.u64)
  "tuning",
]);
const REQUIRED_MANIFEST_KEYS = ["name", "version", "calibrator_kind", "feature_map", "gate", "files"];

/** The gate thresholds a manifest's `gate` object holds. */
export const GATE_KEYS = ["lambda_cost_scale", "delta_loss_threshold", "epsilon_harm_bound", "harm_price", "planner",
  "max_verifications", "clamp"] as const;
/** Keys an older manifest may lack, and what they mean then. */
export const GATE_DEFAULTS: Readonly<Record<string, Json>> = Object.freeze({ harm_price: 0.0 });

const SHA256_RE = /^[0-9a-f]{64}$/;
const VERSION_RE = /^v[1-9][0-9]*$/;

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
    obj = parseJson(decodeUtf8(raw), { maxDepth: MAX_JSON_DEPTH, allowNonFinite });
  } catch (exc) {
    if (exc instanceof TypeError) throw new ArtifactError(`${where}: not UTF-8 text (${exc.message})`);
    if (exc instanceof JsonError) {
      if (exc.message.startsWith("JSON nested deeper")) throw new ArtifactError(`${where}: ${exc.message}`);
      throw new ArtifactError(`${where}: not valid JSON (${exc.message})`);
    }
    throw exc;
  }
  if (!isObject(obj)) throw new ArtifactError(`${where}: must hold a JSON object, got ${Array.isArray(obj) ? "list" : typeof obj}`);
  return obj;
}

function checkFileFormat(data: JsonObject, name: string, version: number, where: string): void {
  try {
    checkFormat(data, name, version);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${where}: ${exc.message}`);
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
  if (typeof value !== "number") throw new RangeError(`${key}=${reprJson(value)} is not a number`);
  if (!Number.isFinite(value) || value < lo || (hi !== null && value > hi)) {
    const bound = hi === null ? `>= ${formatG(lo)}` : `in [${formatG(lo)}, ${formatG(hi)}]`;
    throw new RangeError(`${key}=${reprJson(value)} must be finite and ${bound}`);
  }
  return value;
}

/** Validate a `thresholds.json` / manifest `gate` object (Python's `check_thresholds`). */
export function checkThresholds(data: Json): Thresholds {
  if (!isObject(data)) throw new RangeError(`thresholds must be a JSON object, got ${Array.isArray(data) ? "list" : typeof data}`);
  const missing = GATE_KEYS.filter((k) => !has(data, k) && !has(GATE_DEFAULTS, k));
  if (missing.length) throw new RangeError(`thresholds lack keys ${reprList(missing)}`);
  const unknown = Object.keys(data).filter((k) => !(GATE_KEYS as readonly string[]).includes(k)).sort();
  if (unknown.length) throw new RangeError(`thresholds have unknown keys ${reprList(unknown)}; expected ${reprList(GATE_KEYS)}`);
  const planner = data["planner"];
  if (planner !== "lookahead" && planner !== "myopic") throw new RangeError(`planner=${reprJson(planner)} must be 'lookahead' or 'myopic'`);
  const mv = data["max_verifications"];
  if (typeof mv !== "number" || !Number.isInteger(mv) || mv < 0) throw new RangeError(`max_verifications=${reprJson(mv)} must be an integer >= 0`);
  let clamp: [number, number] | null = null;
  const c = data["clamp"] as Json;
  if (c !== null) {
    if (!Array.isArray(c) || c.length !== 2) throw new RangeError(`clamp=${reprJson(c)} must be [lo, hi] or null`);
    const lo = num(c[0], "clamp[0]", 0, 1);
    const hi = num(c[1], "clamp[1]", 0, 1);
    if (!(lo < hi)) throw new RangeError(`clamp=${reprJson(c)} must satisfy lo < hi`);
    clamp = [lo, hi];
  }
  const out: Thresholds = {
    lambda_cost_scale: num(data["lambda_cost_scale"], "lambda_cost_scale", 0),
    delta_loss_threshold: num(data["delta_loss_threshold"], "delta_loss_threshold", 0),
    epsilon_harm_bound: num(data["epsilon_harm_bound"], "epsilon_harm_bound", 0, 1),
    planner, max_verifications: mv, clamp,
  };
  if (has(data, "harm_price")) out.harm_price = num(data["harm_price"], "harm_price", 0);
  return out;
}

/** Equal as thresholds: numbers as numbers, lists element by element, anything else exactly. */
function sameValue(a: Json | undefined, b: Json | undefined): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => sameValue(x, b[i]));
  if (typeof a === "number" && typeof b === "number") return a === b;
  return a === b;
}

/**
 * A certificate binds the version: its `calibrator_sha256` is the calibrator the manifest
 * lists, and its chosen configuration (`thresholds`) is the manifest's `gate`, key by key (a
 * missing `harm_price` meaning 0). A certificate for another calibrator or other thresholds
 * certifies nothing about this gate.
 */
function checkCertificate(cert: JsonObject, gate: JsonObject, files: Readonly<Record<string, string>>, where: string): void {
  const sha = has(cert, "calibrator_sha256") ? cert["calibrator_sha256"] : undefined;
  if (sha === undefined) {
    throw new ArtifactError(`${where}: certificate lacks calibrator_sha256, so it is not bound to this version's calibrator; certify and export again`);
  }
  if (sha !== files[CALIBRATOR_FILE]) {
    throw new ArtifactError(`${where}: certificate calibrator_sha256=${reprJson(sha)} differs from the ${CALIBRATOR_FILE} it lists (${files[CALIBRATOR_FILE]}): the certificate is for another calibrator`);
  }
  const chosen = has(cert, "thresholds") ? cert["thresholds"] : undefined;
  if (!isObject(chosen)) throw new ArtifactError(`${where}: certificate has no thresholds object (its chosen configuration)`);
  const withDefaults = (o: JsonObject): JsonObject => ({ ...GATE_DEFAULTS, ...o });
  const c = withDefaults(chosen);
  const g = withDefaults(gate);
  const differ = [...new Set([...Object.keys(c), ...Object.keys(g)])].filter((k) => !sameValue(c[k], g[k])).sort();
  if (differ.length) {
    throw new ArtifactError(`${where}: certificate thresholds differ from the manifest's gate in ${reprList(differ)}: the certificate is for another configuration`);
  }
}

// -- loading -----------------------------------------------------------------------------------

function checkRelPath(rel: string, where: string): string {
  if (!rel) throw new ArtifactError(`${where}: 'files' has a non-string or empty name ${reprJson(rel)}`);
  const parts = rel.split("/");
  if (rel.startsWith("/") || rel.includes("\\") || parts.some((p) => p === "" || p === "." || p === "..")) {
    throw new ArtifactError(`${where}: 'files' entry ${reprStr(rel)} is not a plain relative path inside the artifact folder`);
  }
  if (rel === MANIFEST_FILE) throw new ArtifactError(`${where}: 'files' must not list ${MANIFEST_FILE} itself`);
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
        if (!folder.lexists(rel)) throw new ArtifactError(`${shown}: listed in ${MANIFEST_FILE} but missing`);
        got = folder.sha256(rel, `file listed in ${MANIFEST_FILE}`);
      }
      if (got !== files[rel]) {
        throw new ArtifactError(`${shown}: sha256 mismatch (tampered or truncated): ${MANIFEST_FILE} lists ${files[rel]}, the file has ${got}`);
      }
      digests.set(rel, got);
    }
    const entries = folder.entries();
    const extra = [...entries].filter((f) => !has(files, f) && f !== MANIFEST_FILE && f !== SIGNATURE_FILE).sort();
    if (extra.length) {
      throw new ArtifactError(`${path.join(res.path, extra[0] as string)}: not listed in ${MANIFEST_FILE} (unlisted files: ${reprList(extra)}); an artifact folder is immutable, export a new version instead`);
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
      throw new ArtifactError(`${manifestPath}: gate: ${(exc as Error).message}`);
    }
    const cert = has(manifest, "certificate") ? manifest["certificate"] : null;
    if (cert !== null) checkCertificate(cert as JsonObject, manifest["gate"] as JsonObject, files, manifestPath);
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
    throw new ArtifactError(`${where}: sha256 ${sha} differs from ${res.manifestSha256} recorded when alias ${reprStr(res.alias as string)} was promoted (manifest edited after promotion?); verify the artifact and promote it again`);
  }
  const manifest = parse(raw, where);
  checkFileFormat(manifest, ARTIFACT_FORMAT, ARTIFACT_FORMAT_VERSION, where);
  const missing = REQUIRED_MANIFEST_KEYS.filter((k) => !has(manifest, k));
  if (missing.length) throw new ArtifactError(`${where}: lacks keys ${reprList(missing)}`);
  const unknown = Object.keys(manifest).filter((k) => !MANIFEST_KEYS.has(k)).sort();
  if (unknown.length) throw new ArtifactError(`${where}: unknown keys ${reprList(unknown)}`);
  const cert = has(manifest, "certificate") ? manifest["certificate"] : null;
  if (cert !== null && !(isObject(cert) && ["alpha", "delta", "n"].every((k) => typeof cert[k] === "number"))) {
    throw new ArtifactError(`${where}: certificate must be an object with numbers alpha, delta and n`);
  }
  const tuning = has(manifest, "tuning") ? manifest["tuning"] : null;
  if (tuning !== null && !isObject(tuning)) throw new ArtifactError(`${where}: tuning must be an object`);
  const name = manifest["name"];
  const version = manifest["version"];
  if (typeof name !== "string" || !name) throw new ArtifactError(`${where}: name=${reprJson(name)} must be a non-empty string`);
  if (typeof version !== "string" || !VERSION_RE.test(version)) throw new ArtifactError(`${where}: version=${reprJson(version)} must look like 'v1'`);
  const folder = path.basename(res.path);
  if (VERSION_RE.test(folder) && folder !== version) {
    throw new ArtifactError(`${where}: version=${reprStr(version)} but the folder is ${reprStr(folder)} (copied or renamed by hand?)`);
  }
  return manifest;
}

function listedFiles(field: Json, where: string): Record<string, string> {
  if (!isObject(field)) throw new ArtifactError(`${where}: 'files' must map file names to sha256 digests`);
  const files: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [rel, digest] of Object.entries(field)) {
    checkRelPath(rel, where);
    if (typeof digest !== "string" || !SHA256_RE.test(digest)) {
      throw new ArtifactError(`${where}: 'files'[${reprStr(rel)}]=${reprJson(digest)} is not a sha256 hex digest`);
    }
    files[rel] = digest;
  }
  if (!has(files, CALIBRATOR_FILE)) throw new ArtifactError(`${where}: 'files' does not list ${CALIBRATOR_FILE}`);
  return files;
}

function readCalibrator(raw: Buffer, calPath: string, manifest: JsonObject, manifestPath: string): PortableCalibrator {
  // NaN/Infinity tokens parse so that the calibrator's own check names the field
  const data = parse(raw, calPath, true);
  let cal: PortableCalibrator;
  try {
    cal = PortableCalibrator.fromDict(data);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${calPath}: ${exc.message}`);
    throw exc;
  }
  let map;
  try {
    map = featureMapFromList(manifest["feature_map"] as Json);
  } catch (exc) {
    if (exc instanceof PortableFormatError) throw new ArtifactError(`${manifestPath}: feature_map: ${exc.message}`);
    throw exc;
  }
  if (!sameFeatureMap(map, cal.featureMap)) {
    throw new ArtifactError(`${manifestPath}: feature_map ${reprList(map.map((t) => t.name))} differs from ${CALIBRATOR_FILE}'s ${reprList(cal.featureMap.map((t) => t.name))}`);
  }
  if (manifest["calibrator_kind"] !== cal.kind) {
    throw new ArtifactError(`${manifestPath}: calibrator_kind=${reprJson(manifest["calibrator_kind"])} but ${CALIBRATOR_FILE} has kind=${reprStr(cal.kind)}`);
  }
  return cal;
}

function withGateClamp(cal: PortableCalibrator, clamp: [number, number] | null, where: string): PortableCalibrator {
  if (clamp === null) return cal;
  if (cal.clamp !== null && (cal.clamp[0] !== clamp[0] || cal.clamp[1] !== clamp[1])) {
    throw new ArtifactError(`${where}: gate clamp ${reprJson(clamp)} differs from ${CALIBRATOR_FILE}'s clamp ${reprJson(cal.clamp)}`);
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
    const why = exc instanceof ArtifactError ? exc.message : `unexpected ${(exc as Error).name}: ${(exc as Error).message}`;
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
