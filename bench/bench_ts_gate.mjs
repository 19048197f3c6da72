// One `evaluate` of the TypeScript gate (clients/typescript/dist) against the seed document's
// TypeScript engine, in ONE node process, on the same cases: the same clock
// (process.cpuUsage, and performance.now for wall time), the same warm-up, rounds alternating
// between the engines so that load on the machine hits both alike.
//
// usage: node bench_ts_gate.mjs < request.json > result.json   (bench/bench_ts_gate.py runs it)
//   request {"seed": SEED_FILE, "cases": [CASE, ...], "calls": N, "rounds": K, "warmup": W}
//   CASE    {"engine": {"lambda", "delta", "epsilon"}, "action": {...camelCase, probabilities
//            given}, "verifiers": [...]} (tests/gate/seed_engine/seed_harness.py draws them)
//   result  {"<side>": {"cpu_ns": [per round], "wall_ns": [...]}, "checksum": ...} for the
//           sides "seed" (the seed engine), "ts_myopic" (this gate, mode "amv", myopic rule,
//           given the same plain objects), "ts_myopic_prepared" (actions and verifiers checked
//           once beforehand) and "ts_seed_mode" (mode "seed").
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const { loadEngine } = await import(pathToFileURL(path.join(root, "tests/gate/seed_engine/run_seed.mjs")).href);
const gateLib = await import(pathToFileURL(path.join(root, "clients/typescript/dist/index.js")).href);

const req = JSON.parse(readFileSync(0, "utf8"));
const Engine = loadEngine(req.seed);
const calls = req.calls;
const rounds = req.rounds;
const cases = req.cases;
const n = cases.length;

const settings = (e, extra) => ({ lambdaCostScale: e.lambda, deltaLossThreshold: e.delta, epsilonHarmBound: e.epsilon, ...extra });
const sides = {
  seed: cases.map((c) => [new Engine(c.engine.lambda, c.engine.delta, c.engine.epsilon), c.action, c.verifiers]),
  ts_myopic: cases.map((c) => [new gateLib.Gate(settings(c.engine, { planner: "myopic" })), c.action, c.verifiers]),
  ts_myopic_prepared: cases.map((c) => {
    const g = new gateLib.Gate(settings(c.engine, { planner: "myopic" }));
    return [g, g.prepare(c.action), c.verifiers.map(gateLib.checkVerifier)];
  }),
  ts_seed_mode: cases.map((c) => [new gateLib.Gate(settings(c.engine, { mode: "seed" })), c.action, c.verifiers]),
};

let checksum = 0;
function round(items, count) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < count; i++) {
    const [engine, action, verifiers] = items[i % n];
    checksum += engine.evaluate(action, verifiers).regime.length;
  }
  const wall = ((performance.now() - t0) * 1e6) / count;
  const c = process.cpuUsage(c0);
  return [((c.user + c.system) * 1e3) / count, wall];
}

// the two engines agree on the seed mode's regimes (a benchmark of wrong answers is no benchmark)
for (let i = 0; i < n; i++) {
  const [e, a, v] = sides.seed[i];
  const [g] = sides.ts_seed_mode[i];
  const want = e.evaluate(a, v);
  const got = g.evaluate(a, v);
  if (want.regime !== got.regime || (want.selectedVerifier?.id ?? null) !== got.verifierId) {
    throw new Error(`case ${i}: seed engine ${want.regime}/${want.selectedVerifier?.id} but the TS gate's seed mode ${got.regime}/${got.verifierId}`);
  }
}
for (const items of Object.values(sides)) round(items, req.warmup);
const out = Object.fromEntries(Object.keys(sides).map((k) => [k, { cpu_ns: [], wall_ns: [] }]));
for (let k = 0; k < rounds; k++) {
  for (const [name, items] of Object.entries(sides)) {
    const [cpu, wall] = round(items, calls);
    out[name].cpu_ns.push(cpu);
    out[name].wall_ns.push(wall);
  }
}
process.stdout.write(JSON.stringify({ ...out, calls, rounds, cases: n, checksum, node: process.version, seed_mode_agrees: true }));
