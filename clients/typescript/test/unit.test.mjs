// Unit tests of the package's building blocks (node --test). The engine itself is held
// equal to the Python reference by tests/gate/test_typescript_gate.py on 10,000+ cases.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import {
  DecisionLogWriter, Gate, interp, JsonError, parseJson, checkAction, checkSettings, checkThresholds, jsonEqual,
  REASON_CODES, RuleError, writtenAsFloat, PortableCalibrator, PortableFormatError, codePointLess,
} from "../dist/index.js";
import { Folder, ArtifactError } from "../dist/files.js";
import { formatG, reprFloat, reprStr } from "../dist/pyfmt.js";
import { pae, readTrustedKey } from "../dist/signature.js";

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "amv-gate-"));

test("a JSON type is a JSON type: floats remembered, unsafe integers refused", () => {
  const doc = parseJson('{"a": 21, "b": 21.0, "c": [1, 2e0, true]}', { maxDepth: 32, markFloats: true });
  assert.deepEqual([writtenAsFloat(doc, "a"), writtenAsFloat(doc, "b")], [false, true]);
  assert.deepEqual([0, 1, 2].map((i) => writtenAsFloat(doc.c, i)), [false, true, false]);
  const safe = { maxDepth: 32, maxSafeInteger: Number.MAX_SAFE_INTEGER };
  assert.equal(parseJson("9007199254740991", safe), 9007199254740991);
  for (const t of ["9007199254740992", "-9007199254740992", "9".repeat(4301)]) {
    assert.throws(() => parseJson(t, safe), (e) => e instanceof JsonError && e.problem === "integer", t);
  }
  assert.equal(parseJson("9007199254740993.0", safe), 9007199254740992);  // a float: no limit
  assert.equal(jsonEqual(true, 1), false);
  assert.equal(jsonEqual({ a: [1, 2] }, { a: [1, 2.0] }), true);
  assert.equal(jsonEqual({ a: 1 }, { a: 1, b: 2 }), false);
});

test("threshold refusals carry the reason code Python gives", () => {
  const gate = { lambda_cost_scale: 1, delta_loss_threshold: 1, epsilon_harm_bound: 0.1, planner: "myopic",
    max_verifications: 3, clamp: null };
  const code = (patch) => {
    try {
      checkThresholds({ ...gate, ...patch });
      return "accept";
    } catch (e) {
      assert.ok(e instanceof RuleError && REASON_CODES.has(e.code));
      return e.code;
    }
  };
  assert.equal(code({}), "accept");
  assert.equal(code({ lambda_cost_scale: true }), "bad_type");
  assert.equal(code({ epsilon_harm_bound: 2 }), "bad_value");
  assert.equal(code({ planner: 5 }), "bad_type");
  assert.equal(code({ planner: "greedy" }), "bad_value");
  assert.equal(code({ max_verifications: 2.5 }), "bad_value");
  assert.equal(code({ extra: 1 }), "unknown_field");
});

test("strict JSON refuses what JSON.parse accepts", () => {
  const strict = (t, o = {}) => parseJson(t, { maxDepth: 32, ...o });
  assert.throws(() => strict('{"a": {"b": 1, "b": 2}}'), /key "b" appears twice at line 1 column 16/);
  assert.throws(() => strict('{"a": 1, "\\u0061": 2}'), /appears twice/);  // the same key escaped
  assert.throws(() => strict("[".repeat(33) + "]".repeat(33)), /nested deeper than 32 levels/);
  assert.equal(strict("[".repeat(32) + "]".repeat(32)).length, 1);
  assert.throws(() => strict('{"x": NaN}'), /non-finite number 'NaN' is not allowed/);
  assert.ok(Number.isNaN(strict('{"x": NaN}', { allowNonFinite: true }).x));
  assert.throws(() => strict('\ufeff{"x": 1}'), JsonError);  // a BOM, as Python's json refuses
  assert.throws(() => strict('{"x": 1} x'), /extra data/);
  assert.throws(() => strict('{"x": "a\nb"}'), /invalid control character/);
  assert.throws(() => strict('{"x": 01}'), JsonError);
  assert.ok(Object.is(strict("-0"), 0) && Object.is(strict("-0.0"), -0));  // Python's int -0 is 0
  const o = strict('{"__proto__": {"polluted": true}}');
  assert.equal(Object.getPrototypeOf(o), null);
  assert.deepEqual(Object.keys(o), ["__proto__"]);
  assert.equal({}.polluted, undefined);
});

test("Python's spellings of numbers and strings", () => {
  const g = [[720, "720"], [0.0001, "0.0001"], [1e-5, "1e-05"], [123456789, "1.23457e+08"],
    [0.1 + 0.2, "0.3"], [1e16, "1e+16"], [100000, "100000"], [1e6, "1e+06"], [999999.5, "1e+06"],
    [9.999995, "10"], [-2.5e-7, "-2.5e-07"], [0.5, "0.5"]];
  for (const [x, want] of g) assert.equal(formatG(x), want, String(x));
  const r = [[1e-5, "1e-05"], [100, "100.0"], [1e16, "1e+16"], [0.1, "0.1"], [1.5e-7, "1.5e-07"],
    [1.2345678901234568e17, "1.2345678901234568e+17"], [123.456, "123.456"], [-0, "-0.0"], [1e22, "1e+22"],
    [5e-324, "5e-324"], [0.1 + 0.2, "0.30000000000000004"]];
  for (const [x, want] of r) assert.equal(reprFloat(x), want, String(x));
  assert.equal(reprStr("p1"), "'p1'");
  assert.equal(reprStr("it's"), '"it\'s"');
  assert.equal(reprStr("a\nb\\"), "'a\\nb\\\\'");
});

test("numpy's interp: ends, knots, one knot, flat steps", () => {
  const xs = [0, 1, 2, 4];
  const ys = [0.1, 0.2, 0.2, 0.9];
  assert.equal(interp(-5, xs, ys), 0.1);
  assert.equal(interp(9, xs, ys), 0.9);
  assert.equal(interp(4, xs, ys), 0.9);
  assert.equal(interp(1, xs, ys), 0.2);
  assert.equal(interp(1.5, xs, ys), 0.2);
  assert.equal(interp(3, xs, ys), (0.9 - 0.2) / (4 - 2) * (3 - 2) + 0.2);
  assert.equal(interp(7, [7], [0.3]), 0.3);
  assert.equal(interp(6, [7], [0.3]), 0.3);
});

test("a FIFO, a link and an oversized file are refused before any read", () => {
  const dir = tmp();
  execFileSync("mkfifo", [path.join(dir, "pipe")]);
  fs.writeFileSync(path.join(dir, "real.json"), "{}");
  fs.symlinkSync("real.json", path.join(dir, "link.json"));
  fs.writeFileSync(path.join(dir, "big.json"), "");
  fs.truncateSync(path.join(dir, "big.json"), 2048);
  const f = new Folder(dir);
  try {
    assert.throws(() => f.read("pipe", "file"), (e) => e instanceof ArtifactError && /is a FIFO, not a regular file/.test(e.message));
    assert.throws(() => f.sha256("pipe", "file"), /is a FIFO/);
    assert.throws(() => f.read("link.json", "file"), /is a symbolic link, not a regular file/);
    assert.throws(() => f.read("big.json", "file", 1024), /is larger than 1024 bytes/);
    assert.throws(() => f.read("absent.json", "file"), /file is missing/);
    assert.equal(f.read("real.json", "file").toString(), "{}");
    assert.deepEqual([...f.entries()].sort(), ["big.json", "link.json", "pipe", "real.json"]);
  } finally {
    f.close();
  }
});

test("the decision log: one line per record, a torn tail ended first", () => {
  const file = path.join(tmp(), "logs", "d.jsonl");
  fs.mkdirSync(path.dirname(file));
  fs.writeFileSync(file, '{"torn": ');
  const w = new DecisionLogWriter(file);
  w.append({ action_id: "a", voi: -Infinity });
  w.append({ time: "t", action_id: "b" });
  w.close();
  assert.throws(() => w.append({}), /is closed/);
  const lines = fs.readFileSync(file, "utf8").split("\n");
  assert.equal(lines.length, 4);
  assert.equal(lines[0], '{"torn": ');
  const first = JSON.parse(lines[1]);
  assert.match(first.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
  assert.equal(first.voi, null);
  assert.deepEqual(JSON.parse(lines[2]), { time: "t", action_id: "b" });
});

test("bad input names the field, the object and the value", () => {
  const act = { actionId: "a1", impactCostTheta: 5, abstentionCostKappa: 1, premises: [{ id: "p", calibratedViolationProbability: 1.5 }] };
  assert.throws(() => checkAction(act), /calibrated_violation_probability=1.5 of premise 'p' must lie in \[0, 1\]/);
  assert.throws(() => checkAction({ ...act, premises: [{ id: "p" }, { id: "p" }] }), /premise id 'p' of action 'a1' is repeated/);
  assert.throws(() => checkAction({ ...act, bogus: 1 }), /action has unknown key 'bogus'/);
  assert.throws(() => checkSettings({ epsilonHarmBound: 2 }), /epsilon_harm_bound=2 must lie in \[0, 1\]/);
  const gate = new Gate({ refusal: "artifact refused: test" });
  const ok = { ...act, premises: [{ id: "p", calibratedViolationProbability: 0.1 }] };
  const d = gate.evaluate(ok, []);
  assert.equal(d.regime, "ABSTAIN");
  assert.equal(d.reason, "artifact refused: test");
  assert.throws(() => gate.evaluate(ok, [{ id: "v", resolvesPremiseIds: ["q"], executionCost: 0, symmetricReliability: 0.9 }]),
    /names premise 'q', which action 'a1' does not have/);
});

test("a gate without a calibrator fails closed on a claim-only premise", () => {
  const claim = { id: "c", sourceTrustScore: 0.9, modelConfidence: 0.9, recencyHours: 1, contradictionFlag: false };
  const d = new Gate().evaluate({ actionId: "a", impactCostTheta: 5, abstentionCostKappa: 1, premises: [{ id: "p", claim }] });
  assert.equal(d.regime, "ABSTAIN");
  assert.match(d.reason, /^failing closed: premise 'p' has no calibrated_violation_probability and the gate has no calibrator$/);
});

test("DSSE pre-authentication encoding and PEM keys", () => {
  assert.equal(pae(Buffer.from("{}")).toString(), "DSSEv1 28 application/vnd.in-toto+json 2 {}");
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const pem = publicKey.export({ type: "spki", format: "pem" });
  const k = readTrustedKey(pem);
  assert.equal(k.problem, null);
  const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey;
  assert.match(readTrustedKey(rsa.export({ type: "spki", format: "pem" })).problem, /not an elliptic-curve public key/);
});

test("memory kinds: the kind's intercept and terms, 'other' for the rest, said in the record", () => {
  const cal = PortableCalibrator.fromDict({
    format: "amv-calib/portable-calibrator", format_version: 2, kind: "linear", source: "hand",
    feature_map: [{ column: "source_trust_score", transform: "identity" },
      { column: "recency_hours", transform: "ramp", scale: 100, kind: "event" }],
    intercept: -1, coef: [2, 3], clamp: null, kinds: ["event", "other"], kind_intercept: [0.5, 0],
  });
  const f = { recency_hours: 50, source_trust_score: 0.25, model_confidence: 0.5, contradiction_flag: 0 };
  const sig = (z) => (z >= 0 ? 1 / (1 + Math.exp(-z)) : Math.exp(z) / (1 + Math.exp(z)));
  assert.equal(cal.predictOne(f, "event"), sig(-1 + 0.5 + 0.5 + 1.5));
  for (const k of ["other", null, "opinion"]) assert.equal(cal.predictOne(f, k), sig(-0.5));
  assert.equal(cal.featureMap[1].name, "ramp(recency_hours, 100)[kind=event]");
  const records = [];
  const gate = new Gate({ calibrator: cal, decisionLog: (r) => records.push(r) });
  gate.evaluate({ actionId: "a", impactCostTheta: 5, abstentionCostKappa: 1, premises: [
    { id: "p1", memoryKind: "event", claim: { id: "c1", sourceTrustScore: 0.25, modelConfidence: 0.5,
      recencyHours: 50, contradictionFlag: false } },
    { id: "p2", memory_kind: "opinion", claim: { id: "c2", sourceTrustScore: 0.25, modelConfidence: 0.5,
      recencyHours: 50, contradictionFlag: false } }] }, []);
  assert.deepEqual(records[0].premises.map((p) => [p.memory_kind, p.memory_kind_evaluated_as]),
    [["event", "event"], ["opinion", "other"]]);
  assert.throws(() => checkAction({ actionId: "a", impactCostTheta: 5, abstentionCostKappa: 1, premises: [
    { id: "p", memory_kind: "event", memoryKind: "fact", calibratedViolationProbability: 0.1 }] }), /give one/);
  // Python's str order is by code point: U+FF5E before U+1F600, where UTF-16 units say otherwise
  assert.equal(codePointLess("\uff5e", "\u{1f600}"), true);
  assert.equal("\u{1f600}" < "\uff5e", true);
  assert.throws(() => new PortableCalibrator("linear", cal.featureMap.slice(0, 1), 0, [1], [], [], null, "",
    ["other", "\u{1f600}", "\uff5e"], [0, 0, 0]), PortableFormatError);
});
