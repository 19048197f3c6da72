// The guardrail in an agent run, with a scripted model: no network, no API key.
//
// The model is the SDK's `Model` interface (getResponse / getStreamedResponse) replaying
// queued responses, as the SDK's own tests do (packages/agents-core/test/stubs.ts). The artifact is
// written here in the format of models/README.md: the seed's logistic calibrator and thresholds.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { Agent, run, setTracingDisabled, tool, Usage } from "@openai/agents";
import { z } from "zod";
import { loadArtifact } from "@amv-calib/gate";
import { amvGuardrail } from "./guardrail.mjs";

setTracingDisabled(true);

class ScriptedModel {
  constructor(responses) {
    this.responses = responses;
    this.requests = [];
  }

  async getResponse(request) {
    this.requests.push(request);
    const next = this.responses.shift();
    if (!next) throw new Error("the script has no response left");
    return { output: next, usage: new Usage() };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error("not scripted");
  }
}

const transferCall = (args, callId = "call-1") => [{
  type: "function_call", id: `fc-${callId}`, callId, name: "bank_transfer", status: "completed",
  arguments: JSON.stringify(args),
}];
const say = (text) => [{
  type: "message", id: "msg-1", role: "assistant", status: "completed",
  content: [{ type: "output_text", text, providerData: { annotations: [] } }],
}];

/** An artifact version: the seed's calibrator and thresholds, every file hashed in the manifest. */
function writeArtifact(dir, gate) {
  fs.mkdirSync(dir, { recursive: true });
  const featureMap = [
    { column: "model_confidence", eps: 1e-5, transform: "logit" },
    { column: "recency_hours", scale: 720.0, transform: "ramp" },
    { column: "source_trust_score", transform: "identity" },
    { column: "contradiction_flag", transform: "indicator" },
  ];
  const calibrator = JSON.stringify({
    clamp: [0.001, 0.999], coef: [-1.42, 2.15, -1.8, 2.5], feature_map: featureMap,
    format: "amv-calib/portable-calibrator", format_version: 1, intercept: -0.85, kind: "linear", source: "seed-prior",
  }, null, 2) + "\n";
  fs.writeFileSync(path.join(dir, "calibrator.json"), calibrator);
  const manifest = {
    format: "amv-calib/artifact", format_version: 1, name: "amv-guard", version: path.basename(dir),
    calibrator_kind: "linear", calibrator_source: "seed-prior", feature_map: featureMap, gate,
    files: { "calibrator.json": createHash("sha256").update(calibrator).digest("hex") },
  };
  fs.writeFileSync(path.join(dir, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
  return dir;
}

const THRESHOLDS = {
  lambda_cost_scale: 1.0, delta_loss_threshold: 10.0, epsilon_harm_bound: 0.05, harm_price: 0.0,
  planner: "lookahead", max_verifications: 3, clamp: [0.001, 0.999],
};

/** The agent's memory: what it believes about each payee's IBAN. */
const MEMORY = {
  landlord: { id: "iban-landlord", sourceTrustScore: 0.95, modelConfidence: 0.995, recencyHours: 2, contradictionFlag: false },
  plumber: { id: "iban-plumber", sourceTrustScore: 0.6, modelConfidence: 0.9, recencyHours: 900, contradictionFlag: true },
};

function describe(toolName, args) {
  const claim = MEMORY[args.payee];
  return {
    action: {
      actionId: `${toolName}-${args.payee}`, toolName, arguments: args,
      impactCostTheta: args.amount, abstentionCostKappa: 5.0,
      premises: [{ id: "iban", claimId: claim.id, parameterTarget: "iban", claim }],
    },
    verifiers: [{ id: "bank-api", resolvesPremiseIds: ["iban"], executionCost: 0.1, symmetricReliability: 0.99 }],
  };
}

function setup(t, { ref, bankSays = true }) {
  const executed = [];
  const checks = [];
  const decisions = [];
  const gate = loadArtifact(ref);
  const transfer = tool({
    name: "bank_transfer",
    description: "Send money to a payee the agent remembers",
    parameters: z.object({ payee: z.string(), amount: z.number() }),
    inputGuardrails: [amvGuardrail({
      gate, describe,
      verify: async (verifier, action) => {
        checks.push([verifier.id, action.actionId]);
        return bankSays;
      },
      onDecision: (d) => decisions.push(d),
    })],
    execute: async ({ payee, amount }) => {
      executed.push({ payee, amount });
      return `sent ${amount} to ${payee}`;
    },
  });
  return { gate, transfer, executed, checks, decisions };
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "amv-agents-"));
const good = writeArtifact(path.join(tmp, "amv-guard", "v1"), THRESHOLDS);

test("a call on a fresh, trusted memory proceeds: the tool runs", async (t) => {
  const s = setup(t, { ref: good });
  const model = new ScriptedModel([transferCall({ payee: "landlord", amount: 50 }), say("Rent paid.")]);
  const agent = new Agent({ name: "payer", instructions: "Pay bills.", model, tools: [s.transfer] });
  const result = await run(agent, "Pay the landlord 50.");
  assert.equal(result.finalOutput, "Rent paid.");
  assert.deepEqual(s.executed, [{ payee: "landlord", amount: 50 }]);
  assert.deepEqual(s.checks, []);
  assert.equal(s.decisions[0].regime, "PROCEED");
  assert.equal(result.toolInputGuardrailResults[0].output.behavior.type, "allow");
});

test("a stale, contradicted memory is verified first; a confirmation lets the call through", async (t) => {
  const s = setup(t, { ref: good, bankSays: true });
  const model = new ScriptedModel([transferCall({ payee: "plumber", amount: 120 }), say("Plumber paid.")]);
  const agent = new Agent({ name: "payer", instructions: "Pay bills.", model, tools: [s.transfer] });
  const result = await run(agent, "Pay the plumber 120.");
  assert.deepEqual(s.checks, [["bank-api", "bank_transfer-plumber"]]);
  assert.equal(s.decisions[0].regime, "PROCEED");
  assert.ok(s.decisions[0].probabilities[0] < 0.05, "the confirmation lowered p");
  assert.deepEqual(s.executed, [{ payee: "plumber", amount: 120 }]);
  assert.equal(result.finalOutput, "Plumber paid.");
});

test("a refuted memory blocks the call: the model reads the gate's reason instead", async (t) => {
  const s = setup(t, { ref: good, bankSays: false });
  const model = new ScriptedModel([transferCall({ payee: "plumber", amount: 120 }), say("I could not pay the plumber.")]);
  const agent = new Agent({ name: "payer", instructions: "Pay bills.", model, tools: [s.transfer] });
  const result = await run(agent, "Pay the plumber 120.");
  assert.deepEqual(s.executed, []);
  assert.equal(s.decisions[0].regime, "ABSTAIN");
  assert.equal(result.toolInputGuardrailResults[0].output.behavior.type, "rejectContent");
  const seen = JSON.stringify(model.requests[1].input);
  assert.match(seen, /AMV gate: bank_transfer not executed \(ABSTAIN\)/);
  assert.equal(result.finalOutput, "I could not pay the plumber.");
});

test("a tampered artifact blocks every call, naming the refusal", async (t) => {
  const bad = writeArtifact(path.join(tmp, "tampered", "v1"), THRESHOLDS);
  fs.appendFileSync(path.join(bad, "calibrator.json"), " ");
  const s = setup(t, { ref: bad });
  assert.match(s.gate.refusal, /^artifact refused: .*calibrator.json: sha256 mismatch/);
  const model = new ScriptedModel([transferCall({ payee: "landlord", amount: 50 }), say("Blocked.")]);
  const agent = new Agent({ name: "payer", instructions: "Pay bills.", model, tools: [s.transfer] });
  await run(agent, "Pay the landlord 50.");
  assert.deepEqual(s.executed, []);
  assert.equal(s.decisions[0].regime, "ABSTAIN");
  assert.match(s.decisions[0].reason, /artifact refused/);
});
