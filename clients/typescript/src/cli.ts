#!/usr/bin/env node
/**
 * The gate's command line: decisions for actions read as JSON lines.
 *
 *   node dist/cli.js evaluate [--artifact REF] [--trusted-key PEM]... [--mode amv|seed]
 *       [--planner lookahead|myopic] [--lambda X] [--delta X] [--epsilon X] [--harm-price X]
 *       [--max-verifications N] [--decision-log PATH]  < actions.jsonl > decisions.jsonl
 *
 * Each input line is an action file of `amv-calib gate --action` (`{"action": {...},
 * "verifiers": [...]}`, camelCase or snake_case); each output line is what `amv-calib gate`
 * prints for it: the action id, the decision's fields and the gate's settings. A line that
 * cannot be read or checked gives `{"line": N, "error": "..."}` (never a decision) and the
 * exit status 2 once every line is answered; a refused artifact gives ABSTAIN on every line
 * with the reason. Blank lines are skipped.
 */

import { loadArtifact, type ArtifactGateOptions } from "./artifact.js";
import type { Gate, Mode, PlannerName } from "./engine.js";
import { decodeUtf8, isObject, parseJson, type Json } from "./json.js";

const USAGE = `usage: amv-gate evaluate [--artifact REF] [--trusted-key PEM]... [--mode amv|seed]
       [--planner lookahead|myopic] [--lambda X] [--delta X] [--epsilon X] [--harm-price X]
       [--max-verifications N] [--decision-log PATH] < actions.jsonl`;
/** Deepest nesting of an action line (its arguments may nest; far beyond any real action). */
const MAX_ACTION_DEPTH = 128;

class UsageError extends Error {}

function numberArg(flag: string, text: string | undefined): number {
  const v = Number(text);
  if (text === undefined || text.trim() === "" || Number.isNaN(v)) throw new UsageError(`${flag}: expected a number, got ${JSON.stringify(text)}`);
  return v;
}

function parseArgs(argv: string[]): { ref: string | undefined; options: ArtifactGateOptions } {
  if (argv[0] !== "evaluate") throw new UsageError(argv[0] === undefined ? "missing command" : `unknown command ${JSON.stringify(argv[0])}`);
  let ref: string | undefined;
  const keys: string[] = [];
  const o: ArtifactGateOptions = {};
  for (let i = 1; i < argv.length; i++) {
    const flag = argv[i] as string;
    const [name, inline] = flag.includes("=") ? [flag.slice(0, flag.indexOf("=")), flag.slice(flag.indexOf("=") + 1)] : [flag, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new UsageError(`${name} needs a value`);
      return v;
    };
    switch (name) {
      case "--artifact": ref = value(); break;
      case "--trusted-key": keys.push(value()); break;
      case "--mode": o.mode = value() as Mode; break;
      case "--planner": o.planner = value() as PlannerName; break;
      case "--lambda": o.lambdaCostScale = numberArg(name, value()); break;
      case "--delta": o.deltaLossThreshold = numberArg(name, value()); break;
      case "--epsilon": o.epsilonHarmBound = numberArg(name, value()); break;
      case "--harm-price": o.harmPrice = numberArg(name, value()); break;
      case "--max-verifications": o.maxVerifications = numberArg(name, value()); break;
      case "--decision-log": o.decisionLog = value(); break;
      case "-h": case "--help": process.stdout.write(USAGE + "\n"); process.exit(0); break;
      default: throw new UsageError(`unknown option ${JSON.stringify(flag)}`);
    }
  }
  if (keys.length) o.trustedKeys = keys;
  return { ref, options: o };
}

function answer(gate: Gate, line: string): Record<string, unknown> {
  const data: Json = parseJson(line, { maxDepth: MAX_ACTION_DEPTH });
  if (!isObject(data)) throw new TypeError("expected a JSON object");
  const inner = data["action"];
  const rawAction = inner !== undefined ? inner : "premises" in data ? data : null;
  if (!isObject(rawAction)) throw new TypeError("lacks an 'action' object");
  const action = Object.fromEntries(Object.entries(rawAction).filter(([k]) => k !== "verifiers"));
  const verifiers = data["verifiers"] ?? (isObject(inner) ? inner["verifiers"] : undefined) ?? [];
  if (!Array.isArray(verifiers)) throw new TypeError("'verifiers' must be a list");
  const d = gate.evaluate(action, verifiers as Record<string, unknown>[]);
  const s = gate.settings;
  return {
    action_id: action["action_id"] ?? action["actionId"],
    ...d.toDict(),
    gate: {
      mode: s.mode, planner: s.planner, lambda_cost_scale: s.lambdaCostScale,
      delta_loss_threshold: s.deltaLossThreshold, epsilon_harm_bound: s.epsilonHarmBound, harm_price: s.harmPrice,
      max_verifications: s.maxVerifications,
      artifact: gate.artifactName === null ? null : { name: gate.artifactName, version: gate.artifactVersion },
      refusal: gate.refusal,
    },
  };
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs(argv);
  } catch (exc) {
    if (!(exc instanceof UsageError)) throw exc;
    process.stderr.write(`${USAGE}\namv-gate: error: ${exc.message}\n`);
    return 2;
  }
  const gate = loadArtifact(parsed.ref, parsed.options);
  if (gate.refusal !== null) process.stderr.write(`amv-gate: ${gate.refusal}; every decision is ABSTAIN\n`);
  let status = 0;
  let lineNo = 0;
  const emit = async (line: Buffer): Promise<void> => {
    lineNo += 1;
    let text: string;
    try {
      text = decodeUtf8(line);
    } catch {
      status = 2;
      await write({ line: lineNo, error: "not UTF-8 text" });
      return;
    }
    if (!text.trim()) return;
    let out: Record<string, unknown>;
    try {
      out = answer(gate, text);
    } catch (exc) {
      status = 2;
      out = { line: lineNo, error: (exc as Error).message };
    }
    await write(out);
  };
  // lines split on the bytes, so that invalid UTF-8 is refused rather than replaced
  let rest = Buffer.alloc(0);
  for await (const chunk of process.stdin) {
    let buf = Buffer.concat([rest, chunk as Buffer]);
    for (let nl = buf.indexOf(0x0a); nl >= 0; nl = buf.indexOf(0x0a)) {
      await emit(buf.subarray(0, nl));
      buf = buf.subarray(nl + 1);
    }
    rest = Buffer.from(buf);
  }
  if (rest.length) await emit(rest);
  return status;
}

async function write(out: Record<string, unknown>): Promise<void> {
  if (!process.stdout.write(JSON.stringify(out) + "\n")) await new Promise((r) => process.stdout.once("drain", r));
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code; });
