// Runs the TypeScript gate (clients/typescript/dist) on requests read as JSON lines, for the
// cross-language test: one node process answers every case.
//
// usage: node harness.mjs < requests.jsonl > answers.jsonl
//   {"id", "kind": "decide", "ref", "trusted_keys", "gate": {snake_case settings},
//    "action", "verifiers", "run": null | {"answers": {verifier id: signals}, "budget"}}
//       -> {"id", "decision": Decision.toDict()} or {"id", "trace": RunTrace.toDict()}
//          or {"id", "error": message} when the input is refused
//   {"id", "kind": "load", "ref", "trusted_keys", "env": {NAME: value or null}}
//       -> {"id", "refusal": reason or null, "code": its reason code, "name", "version",
//           "thresholds", "signed_by"}
//   {"id", "kind": "predict", "calibrator": calibrator.json object, "features": [{...}],
//    "memory_kinds": [kind or null, ...] (optional, one per feature row)}
//       -> {"id", "p": [...]}
//   {"id", "kind": "math", "fn": "log" | "log1p" | "exp", "bits": ["16 hex digits", ...]}
//       -> {"id", "bits": [...]} (the portable function of each double, given and answered
//          by its bits: JSON holds no NaN, infinity or -0.0)
//   {"id", "kind": "premise", "premise": {...}}
//       -> {"id", "memory_kind": kind or null} or {"id", "error": message} (checkPremise)
import { readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, "../../../clients/typescript/dist/index.js");
const gateLib = await import(pathToFileURL(dist).href);

const OPTION = {
  mode: "mode", planner: "planner", lambda_cost_scale: "lambdaCostScale",
  delta_loss_threshold: "deltaLossThreshold", epsilon_harm_bound: "epsilonHarmBound",
  harm_price: "harmPrice", max_verifications: "maxVerifications", reuse_verifiers: "reuseVerifiers",
  decision_log: "decisionLog",
};

// each artifact is read (and its signature verified) once; gates with other settings are made
// from it as loadArtifact makes them (gateFrom), a refused one as loadArtifact refuses it
const arts = new Map();
const gates = new Map();
function gateFor(req) {
  const key = JSON.stringify([req.ref, req.trusted_keys ?? null, req.gate ?? {}]);
  let gate = gates.get(key);
  if (gate === undefined) {
    const opts = {};
    for (const [k, v] of Object.entries(req.gate ?? {})) {
      if (!(k in OPTION)) throw new Error(`unknown gate setting ${k}`);
      opts[OPTION[k]] = v;
    }
    const artKey = JSON.stringify([req.ref, req.trusted_keys ?? null]);
    if (!arts.has(artKey)) {
      try {
        arts.set(artKey, gateLib.readArtifact(req.ref, { trustedKeys: req.trusted_keys ?? undefined }));
      } catch (exc) {
        if (!(exc instanceof gateLib.ArtifactError)) throw exc;
        arts.set(artKey, null);
      }
    }
    const art = arts.get(artKey);
    gate = art === null ? gateLib.loadArtifact(req.ref, { ...opts, trustedKeys: req.trusted_keys ?? undefined })
      : gateLib.gateFrom(art, opts);
    gates.set(key, gate);
  }
  return gate;
}

function withEnv(env, fn) {
  const saved = {};
  for (const [k, v] of Object.entries(env ?? {})) {
    saved[k] = process.env[k];
    if (v === null) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    return fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

async function answer(req) {
  if (req.kind === "load") {
    return withEnv(req.env, () => {
      try {
        const art = gateLib.readArtifact(req.ref, { trustedKeys: req.trusted_keys ?? undefined });
        return { id: req.id, refusal: null, name: art.name, version: art.version, thresholds: art.thresholds,
          signed_by: art.signedBy };
      } catch (exc) {
        if (!(exc instanceof gateLib.ArtifactError)) throw exc;
        // what a caller sees: loadArtifact's gate abstains with the reason
        const gate = gateLib.loadArtifact(req.ref, { trustedKeys: req.trusted_keys ?? undefined });
        const d = gate.evaluate({ actionId: "probe", impactCostTheta: 1, abstentionCostKappa: 1, premises: [] }, []);
        return { id: req.id, refusal: exc.message, code: exc.code, regime: d.regime, reason: d.reason };
      }
    });
  }
  if (req.kind === "math") {
    const fn = { log: gateLib.portableLog, log1p: gateLib.portableLog1p, exp: gateLib.portableExp }[req.fn];
    const view = new DataView(new ArrayBuffer(8));
    return { id: req.id, bits: req.bits.map((b) => {
      view.setBigUint64(0, BigInt(`0x${b}`));
      view.setFloat64(0, fn(view.getFloat64(0)));
      return view.getBigUint64(0).toString(16).padStart(16, "0");
    }) };
  }
  if (req.kind === "predict") {
    const cal = gateLib.PortableCalibrator.fromDict(req.calibrator);
    const kinds = req.memory_kinds ?? [];
    return { id: req.id, p: req.features.map((f, i) => cal.predictOne(f, kinds[i] ?? null)) };
  }
  if (req.kind === "premise") {
    try {
      return { id: req.id, memory_kind: gateLib.checkPremise(req.premise).memoryKind };
    } catch (exc) {
      if (exc instanceof RangeError || exc instanceof TypeError) return { id: req.id, error: exc.message };
      throw exc;
    }
  }
  const gate = gateFor(req);
  try {
    if (req.run) {
      const answers = req.run.answers;
      const trace = await gate.run(req.action, req.verifiers, (v) => answers[v.id ?? v.verifier_id], {
        budget: req.run.budget ?? null,
      });
      return { id: req.id, trace: trace.toDict() };
    }
    return { id: req.id, decision: gate.evaluate(req.action, req.verifiers).toDict() };
  } catch (exc) {
    if (exc instanceof RangeError || exc instanceof TypeError) return { id: req.id, error: exc.message };
    throw exc;
  }
}

const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (!line.trim()) continue;
  out.push(JSON.stringify(await answer(JSON.parse(line))));
}
process.stdout.write(out.join("\n") + "\n");
