/**
 * The signature of an artifact version: `model.sig`, an OpenSSF model-signing bundle,
 * verified with node:crypto against the bytes the loader read.
 *
 * The layout is the one `model_signing` 1.x writes for a key-based signature (its
 * `_signing/sign_ec_key.py`, `sign_sigstore_pb.py` and `signing.py`): a Sigstore bundle
 * (`mediaType` `application/vnd.dev.sigstore.bundle.v0.3+json`) whose `dsseEnvelope` holds a
 * base64 in-toto statement (`payloadType` `application/vnd.in-toto+json`) and one ECDSA
 * signature (DER, base64) over the DSSE pre-authentication encoding
 * `"DSSEv1 <len(type)> <type> <len(payload)> " + payload`, made with a P-256 key and SHA-256
 * (P-384/SHA-384 and P-521/SHA-512 too, as model_signing accepts). The statement's predicate
 * (`https://model_signing/signature/v1.0`) lists every file of the folder but `model.sig`
 * with its sha256, and its one subject's digest is the sha256 of those digests' bytes in
 * order. `verificationMaterial.publicKey.hint`, when present, is the hex sha256 of the
 * signer's public key in PEM.
 *
 * Verification checks the signature first, then the statement, and then compares every
 * digest it lists with the digests of the bytes the loader read and will use: a file changed
 * after signing, one added or one missing is refused. Pre-1.0 signatures (predicate
 * `https://model_signing/Digests/v0.1`, and the v0.2 PAE bug `model_signing` tolerates) are
 * not accepted: amv-calib never wrote them.
 */

import { createHash, createPublicKey, verify as cryptoVerify, type KeyObject } from "node:crypto";
import * as fs from "node:fs";
import { ArtifactError } from "./files.js";
import { decodeUtf8, has, isObject, parseJson, type Json } from "./json.js";

/** The signature file of a version folder (not listed in the manifest, which it covers). */
export const SIGNATURE_FILE = "model.sig";
export const BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json";
export const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
export const IN_TOTO_STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const MODEL_SIGNING_PREDICATE = "https://model_signing/signature/v1.0";
/** Larger key files are refused. */
const MAX_KEY_BYTES = 64 * 1024;
const HASH_OF_CURVE: Record<string, string> = { prime256v1: "sha256", secp384r1: "sha384", secp521r1: "sha512" };

/** A trusted public key: a label for messages, and the key (or why it could not be read). */
export interface TrustedKey {
  readonly label: string;
  readonly key: KeyObject | null;
  readonly problem: string | null;
}

/** Read a trusted key from a PEM file (a regular file, read once) or from PEM text. */
export function readTrustedKey(spec: string): TrustedKey {
  let pem: string;
  let label: string;
  if (spec.includes("-----BEGIN")) {
    pem = spec;
    label = "PEM key";
  } else {
    label = spec;
    try {
      const fd = fs.openSync(spec, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      try {
        const st = fs.fstatSync(fd);
        if (!st.isFile()) return { label, key: null, problem: `${spec}: trusted key is not a regular file` };
        if (st.size > MAX_KEY_BYTES) return { label, key: null, problem: `${spec}: trusted key is larger than ${MAX_KEY_BYTES} bytes` };
        const buf = Buffer.alloc(st.size);
        let done = 0;
        while (done < st.size) {
          const n = fs.readSync(fd, buf, done, st.size - done, null);
          if (n === 0) break;
          done += n;
        }
        pem = buf.subarray(0, done).toString("utf8");
      } finally {
        fs.closeSync(fd);
      }
    } catch (exc) {
      const code = (exc as NodeJS.ErrnoException).code;
      return { label, key: null, problem: code === "ENOENT" ? `${spec}: trusted key file not found` : `${spec}: cannot read the trusted key (${code})` };
    }
  }
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (exc) {
    return { label, key: null, problem: `${label}: not a PEM public key (${(exc as Error).message})` };
  }
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType !== "ec" || curve === undefined || !(curve in HASH_OF_CURVE)) {
    return { label, key: null, problem: `${label}: not an elliptic-curve public key on P-256, P-384 or P-521` };
  }
  return { label, key, problem: null };
}

/** The DSSE pre-authentication encoding of an in-toto payload. */
export function pae(payload: Buffer): Buffer {
  const head = `DSSEv1 ${Buffer.byteLength(IN_TOTO_PAYLOAD_TYPE)} ${IN_TOTO_PAYLOAD_TYPE} ${payload.length} `;
  return Buffer.concat([Buffer.from(head, "utf8"), payload]);
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function base64(value: Json | undefined, what: string): Buffer {
  if (typeof value !== "string" || !BASE64.test(value)) throw new Error(`${what} is not base64`);
  return Buffer.from(value, "base64");
}

function field(obj: Json | undefined, key: string, what: string): Json {
  if (!isObject(obj) || !has(obj, key)) throw new Error(`${what} lacks ${JSON.stringify(key)}`);
  return obj[key] as Json;
}

interface Bundle {
  hint: string | null;
  payload: Buffer;
  sig: Buffer;
}

function parseBundle(raw: Buffer): Bundle {
  const doc = parseJson(decodeUtf8(raw), { maxDepth: 32 });
  if (!isObject(doc)) throw new Error("not a JSON object");
  if (field(doc, "mediaType", "the bundle") !== BUNDLE_MEDIA_TYPE) {
    throw new Error(`media type ${JSON.stringify(doc["mediaType"])}, expected ${BUNDLE_MEDIA_TYPE}`);
  }
  let hint: string | null = null;
  const vm = field(doc, "verificationMaterial", "the bundle");
  const pk = isObject(vm) && has(vm, "publicKey") ? vm["publicKey"] : null;
  if (isObject(pk) && has(pk, "hint")) {
    const h = pk["hint"];
    if (h !== null && typeof h !== "string") throw new Error("verificationMaterial.publicKey.hint is not a string");
    hint = h || null;
  }
  const env = field(doc, "dsseEnvelope", "the bundle");
  const type = field(env, "payloadType", "dsseEnvelope");
  if (type !== IN_TOTO_PAYLOAD_TYPE) throw new Error(`DSSE payload type ${JSON.stringify(type)}, expected ${IN_TOTO_PAYLOAD_TYPE}`);
  const sigs = field(env, "signatures", "dsseEnvelope");
  if (!Array.isArray(sigs) || sigs.length !== 1) throw new Error("dsseEnvelope must hold exactly one signature");
  return {
    hint,
    payload: base64(field(env, "payload", "dsseEnvelope"), "dsseEnvelope.payload"),
    sig: base64(field(sigs[0], "sig", "dsseEnvelope.signatures[0]"), "dsseEnvelope.signatures[0].sig"),
  };
}

/** The file digests a verified statement lists (name -> sha256 hex), after its own checks. */
function statementDigests(payload: Buffer): Map<string, string> {
  const st = parseJson(decodeUtf8(payload), { maxDepth: 32 });
  if (field(st, "_type", "the statement") !== IN_TOTO_STATEMENT_TYPE) throw new Error(`statement type is not ${IN_TOTO_STATEMENT_TYPE}`);
  const pt = field(st, "predicateType", "the statement");
  if (pt !== MODEL_SIGNING_PREDICATE) throw new Error(`predicate type ${JSON.stringify(pt)}, expected ${MODEL_SIGNING_PREDICATE}`);
  const subjects = field(st, "subject", "the statement");
  if (!Array.isArray(subjects) || subjects.length !== 1) throw new Error("the statement must have exactly one subject");
  const root = field(field(subjects[0], "digest", "the subject"), "sha256", "the subject's digest");
  const pred = field(st, "predicate", "the statement");
  const ser = field(pred, "serialization", "the predicate");
  if (field(ser, "method", "the serialization") !== "files" || field(ser, "hash_type", "the serialization") !== "sha256") {
    throw new Error("serialization must be method 'files' with hash_type 'sha256'");
  }
  const resources = field(pred, "resources", "the predicate");
  if (!Array.isArray(resources)) throw new Error("predicate.resources is not a list");
  const out = new Map<string, string>();
  const h = createHash("sha256");
  for (const r of resources) {
    const name = field(r, "name", "a resource");
    const alg = field(r, "algorithm", "a resource");
    const digest = field(r, "digest", "a resource");
    if (typeof name !== "string" || alg !== "sha256" || typeof digest !== "string" || !/^[0-9a-f]{64}$/.test(digest)) {
      throw new Error(`resource ${JSON.stringify(r)} is not a sha256 file digest`);
    }
    if (out.has(name)) throw new Error(`resource ${JSON.stringify(name)} is listed twice`);
    out.set(name, digest);
    h.update(Buffer.from(digest, "hex"));
  }
  if (h.digest("hex") !== root) throw new Error(`Manifest is inconsistent. Root digest is ${String(root)}, but the included resources hash to another`);
  return out;
}

function compare(signed: Map<string, string>, actual: ReadonlyMap<string, string>): void {
  const diffs: string[] = [];
  const extra = [...actual.keys()].filter((k) => !signed.has(k)).sort();
  if (extra.length) diffs.push(`Extra files found in model: ${extra.join(", ")}`);
  const missing = [...signed.keys()].filter((k) => !actual.has(k)).sort();
  if (missing.length) diffs.push(`Missing files in model: ${missing.join(", ")}`);
  for (const name of [...actual.keys()].filter((k) => signed.has(k)).sort()) {
    if (signed.get(name) !== actual.get(name)) {
      diffs.push(`Hash mismatch for '${name}': Expected '${signed.get(name)}', Actual '${actual.get(name)}'`);
    }
  }
  if (diffs.length) throw new Error(`Signature mismatch: ${diffs.join("; ")}`);
}

/**
 * The label of the first trusted key that verifies `model.sig` over the folder's files.
 *
 * @param sigBytes the bytes of `model.sig`, or null when the folder has none
 * @param digests every file of the folder but `model.sig` (manifest.json included): name -> sha256 hex
 *   of the bytes the loader read
 * @throws ArtifactError unsigned, or no key verifies the signature (each key's reason given)
 */
export function verifySignature(where: string, sigBytes: Buffer | null, digests: ReadonlyMap<string, string>,
  keys: readonly TrustedKey[]): string {
  if (!keys.length) throw new ArtifactError("no trusted key given to check the signature with");
  if (sigBytes === null) {
    throw new ArtifactError(`${where}: unsigned (no ${SIGNATURE_FILE}), and trusted keys are configured; sign it with \`amv-calib sign ${where} --key PRIVATE\``, "signature");
  }
  let bundle: Bundle;
  try {
    bundle = parseBundle(sigBytes);
  } catch (exc) {
    throw new ArtifactError(`${where}: ${SIGNATURE_FILE} is not a model-signing bundle (${(exc as Error).message})`, "signature");
  }
  const reasons: string[] = [];
  for (const tk of keys) {
    if (tk.key === null) {
      reasons.push(tk.problem as string);
      continue;
    }
    const curve = tk.key.asymmetricKeyDetails?.namedCurve as string;
    const pem = tk.key.export({ type: "spki", format: "pem" });
    const hint = createHash("sha256").update(pem).digest("hex");
    if (bundle.hint !== null && bundle.hint !== hint) {
      reasons.push(`${shortLabel(tk.label)}: Key mismatch: the public key hash in the signature's verification material does not match this key`);
      continue;
    }
    let ok = false;
    try {
      ok = cryptoVerify(HASH_OF_CURVE[curve] as string, pae(bundle.payload), { key: tk.key, dsaEncoding: "der" }, bundle.sig);
    } catch {
      ok = false;
    }
    if (!ok) {
      reasons.push(`${shortLabel(tk.label)}: the signature does not verify with this key`);
      continue;
    }
    try {
      compare(statementDigests(bundle.payload), digests);
    } catch (exc) {
      reasons.push(`${shortLabel(tk.label)}: ${(exc as Error).message.slice(0, 300)}`);
      continue;
    }
    return tk.label;
  }
  throw new ArtifactError(`${where}: signature does not verify with any trusted key (${reasons.join("; ")})`, "signature");
}

function shortLabel(label: string): string {
  return label.includes("/") ? label.slice(label.lastIndexOf("/") + 1) : label;
}

