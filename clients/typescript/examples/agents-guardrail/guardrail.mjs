// The AMV gate as a tool input guardrail of the OpenAI Agents JS SDK.
//
// Before the agent's tool runs, the guardrail states what the call rests on (the memory
// claims behind its arguments, as premises) and which checks could confirm them (verifiers),
// and lets the gate decide: PROCEED lets the call through; VERIFY runs the chosen check and
// decides again with what it answered (Gate.run, sequential stopping); ABSTAIN rejects the
// call, and the model sees the gate's reason as the tool's output instead of a result. A gate
// whose artifact was refused abstains on every call, with the reason: the tool never runs on
// a calibrator nobody can vouch for.
import { defineToolInputGuardrail, ToolGuardrailFunctionOutputFactory } from "@openai/agents";

/**
 * @param {object} options
 * @param {import("@amv-calib/gate").Gate} options.gate the gate (from loadArtifact)
 * @param {(toolName: string, args: any, context: any) => {action: object, verifiers: object[]}} options.describe
 *   the premises of a call to `toolName` with `args` (an action of the gate) and the checks on offer
 * @param {(verifier: object, action: object) => Promise<Record<string, boolean> | boolean>} options.verify
 *   performs a check: for each premise it resolves, true when it confirms the premise valid
 * @param {(record: object) => void} [options.onDecision] sees every decision (a log, a metric)
 */
export function amvGuardrail({ gate, describe, verify, onDecision }) {
  return defineToolInputGuardrail({
    name: "amv_gate",
    async run({ toolCall, context }) {
      let args;
      try {
        args = JSON.parse(toolCall.arguments || "{}");
      } catch {
        return ToolGuardrailFunctionOutputFactory.rejectContent("AMV gate: the tool call's arguments are not JSON");
      }
      const { action, verifiers } = describe(toolCall.name, args, context.context);
      const trace = await gate.run(action, verifiers, verify);
      const final = trace.final;
      const info = {
        regime: final.regime,
        reason: final.reason,
        verified: trace.steps.map((s) => ({ verifier: s.verifierId, signals: s.signals })),
        probabilities: [...final.probabilities],
      };
      onDecision?.(info);
      if (final.regime === "PROCEED") return ToolGuardrailFunctionOutputFactory.allow(info);
      return ToolGuardrailFunctionOutputFactory.rejectContent(
        `AMV gate: ${toolCall.name} not executed (${final.regime}): ${final.reason}`, info);
    },
  });
}
