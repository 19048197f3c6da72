// Runs the seed document's TypeScript AMV-Guard engine under plain node (no TypeScript
// compiler): the engine is cut out of the seed text at run time, its type annotations are
// stripped by the small transform below, and the result is evaluated as a script. Nothing
// of the seed's code is stored in this repository.
//
// usage: node run_seed.mjs SEED_FILE < request.json > response.json
//        node run_seed.mjs SEED_FILE --print-source   (the stripped JavaScript)
//   request  {"mode": "cases", "cases": [CASE, ...]}
//            {"mode": "bench", "cases": [CASE, ...], "calls": N, "rounds": K}
//   CASE     {"engine": {"lambda", "delta", "epsilon"}, "action": {...camelCase...},
//             "verifiers": [{...camelCase...}]}; a premise without
//             calibratedViolationProbability carries a "claim" that the engine calibrates.
//   response {"results": [{"p", "vStop", "rExpected", "hHarm", "vois", "regime", "selected"}]}
//            or {"nsPerCall": [wall, per round], "cpuNsPerCall": [CPU time, per round],
//                "calls", "rounds", "warmup", "checksum", "decisions": [[regime, selected]]}
//            in bench mode (process CPU: V8's helper threads count, as the caller's
//            process CPU counts all of its threads).
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";

function matchBrace(src, open) {
  // index just past the "}" matching the "{" at `open`
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    if (src[i] === "{") depth++;
    else if (src[i] === "}") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  throw new Error("unbalanced braces in the seed engine");
}

function splitTopLevel(text) {
  // split a parameter list at commas that are not inside brackets
  const parts = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if ("([{<".includes(ch)) depth++;
    if (")]}>".includes(ch)) depth--;
    if (ch === "," && depth === 0) {
      parts.push(cur);
      cur = "";
    } else cur += ch;
  }
  if (cur.trim()) parts.push(cur);
  return parts;
}

function stripParam(param) {
  // "name?: Type = default" -> "name = default"
  const m = param.match(/^\s*(?:(?:public|private|protected|readonly)\s+)*(\w+)\??\s*(?::\s*([^=]+))?(=.*)?$/s);
  if (!m) throw new Error(`cannot strip parameter ${JSON.stringify(param)}`);
  return m[1] + (m[3] ? " " + m[3].trim() : "");
}

export function stripTypes(seedText) {
  const start = seedText.indexOf("export type ActionRegime");
  const classAt = seedText.indexOf("export class AMVGuardEngine");
  if (start < 0 || classAt < 0) throw new Error("the seed text has no AMVGuardEngine");
  const end = matchBrace(seedText, seedText.indexOf("{", classAt));
  let src = seedText.slice(start, end);

  src = src.replace(/export type [^;]*;/g, "");
  for (let at = src.indexOf("export interface"); at >= 0; at = src.indexOf("export interface")) {
    src = src.slice(0, at) + src.slice(matchBrace(src, src.indexOf("{", at)));
  }
  src = src.replace("export class", "class");

  // constructor parameter properties -> plain parameters assigned in the body
  src = src.replace(/constructor\s*\(([\s\S]*?)\)\s*\{\s*\}/, (_, params) => {
    const names = [];
    const plain = splitTopLevel(params).map((p) => {
      const s = stripParam(p);
      names.push(s.split(/[\s=]/)[0]);
      return s;
    });
    return `constructor(${plain.join(", ")}) { ${names.map((n) => `this.${n} = ${n};`).join(" ")} }`;
  });

  // method headers: drop modifiers, parameter types and the return type
  src = src.replace(
    /^(\s*)(?:(?:public|private|protected)\s+)(\w+)\(([^)]*)\)\s*(?::[^\n]*)?\{\s*$/gm,
    (_, indent, name, params) =>
      `${indent}${name}(${splitTopLevel(params).map(stripParam).join(", ")}) {`,
  );

  // annotated declarations: "let x: T | undefined;" -> "let x;"
  src = src.replace(/\b(let|const|var)\s+(\w+)\s*:\s*[^=;]+/g, "$1 $2 ");
  return src;
}

export function loadEngine(seedPath) {
  const js = stripTypes(readFileSync(seedPath, "utf8"));
  return new Function(`${js}\nreturn AMVGuardEngine;`)();
}

function prepare(Engine, c) {
  const engine = new Engine(c.engine.lambda, c.engine.delta, c.engine.epsilon);
  const premises = c.action.premises.map((pm) => {
    const { claim, ...rest } = pm;
    const p = rest.calibratedViolationProbability;
    return {
      ...rest,
      calibratedViolationProbability:
        p === null || p === undefined ? engine.calibratePremiseFailureProbability(claim) : p,
    };
  });
  return { engine, action: { ...c.action, premises }, verifiers: c.verifiers };
}

function main() {
  if (process.argv[3] === "--print-source") {
    process.stdout.write(stripTypes(readFileSync(process.argv[2], "utf8")));
    return;
  }
  const Engine = loadEngine(process.argv[2]);
  const req = JSON.parse(readFileSync(0, "utf8"));
  const prepared = req.cases.map((c) => prepare(Engine, c));
  if (req.mode === "bench") {
    // per-call time of evaluate(), measured inside node: `rounds` rounds of `calls` calls
    // over the prepared cases (probabilities calibrated beforehand, as a caller would)
    const calls = req.calls ?? 200000;
    const rounds = req.rounds ?? 5;
    const n = prepared.length;
    let checksum = 0;
    const warmup = Math.min(calls, 50000);
    for (let i = 0; i < warmup; i++) {
      const { engine, action, verifiers } = prepared[i % n];
      checksum += engine.evaluate(action, verifiers).regime.length;
    }
    const nsPerCall = [];
    const cpuNsPerCall = [];
    for (let k = 0; k < rounds; k++) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < calls; i++) {
        const { engine, action, verifiers } = prepared[i % n];
        checksum += engine.evaluate(action, verifiers).regime.length;
      }
      nsPerCall.push(((performance.now() - t0) * 1e6) / calls);
      const c = process.cpuUsage(c0);
      cpuNsPerCall.push(((c.user + c.system) * 1e3) / calls);
    }
    // what the timed calls decided, once per case (untimed), for the caller to compare
    const decisions = prepared.map(({ engine, action, verifiers }) => {
      const d = engine.evaluate(action, verifiers);
      return [d.regime, d.selectedVerifier ? d.selectedVerifier.id : null];
    });
    process.stdout.write(
      JSON.stringify({ nsPerCall, cpuNsPerCall, calls, rounds, warmup, checksum, decisions }),
    );
    return;
  }
  const results = prepared.map(({ engine, action, verifiers }) => {
    const stop = engine.computeStoppingValue(action);
    const vois = verifiers.map((v) => engine.computeOneStepVOI(action, v, stop.vStop));
    const d = engine.evaluate(action, verifiers);
    return {
      p: action.premises.map((pm) => pm.calibratedViolationProbability),
      vStop: stop.vStop,
      rExpected: stop.rExpected,
      hHarm: stop.hHarm,
      vois,
      regime: d.regime,
      selected: d.selectedVerifier ? d.selectedVerifier.id : null,
    };
  });
  process.stdout.write(JSON.stringify({ results }));
}

// run as a script; imported (bench/bench_ts_gate.mjs uses loadEngine), it only defines
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
