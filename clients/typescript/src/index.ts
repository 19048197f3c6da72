/**
 * @amv-calib/gate: the AMV runtime gate for Node agents.
 *
 * ```ts
 * import { loadArtifact } from "@amv-calib/gate";
 * const gate = loadArtifact("models/amv-guard@production", { trustedKeys: ["keys/amv-calib-signing.pub"] });
 * const d = gate.evaluate(action, verifiers);   // d.regime: "PROCEED" | "VERIFY" | "ABSTAIN"
 * ```
 */

export {
  ARTIFACT_FORMAT, ARTIFACT_FORMAT_VERSION, CALIBRATOR_FILE, DEFAULT_REFERENCE, GATE_KEYS, MANIFEST_FILE,
  MANIFEST_KEYS, MAX_JSON_DEPTH, MODELS_DIR_ENV, REASON_CODES, RULES, TRUSTED_KEYS_ENV, ArtifactError, RuleError,
  checkThresholds, gateFrom, jsonEqual, loadArtifact, readAliases, readArtifact, resolveReference,
  type ArtifactGateOptions, type LoadOptions, type LoadedArtifact, type Thresholds,
} from "./artifact.js";
export {
  CLAIM_FEATURES, DEFAULT_EPS, MAX_KIND_LENGTH, OTHER_KIND, PORTABLE_FORMAT, PORTABLE_FORMAT_VERSION,
  PORTABLE_FORMAT_VERSION_KINDS, PortableCalibrator, PortableFormatError, Term, TRANSFORMS, codePointLess, interp,
  seedCalibrate,
} from "./calibrator.js";
export { DecisionLogWriter, encodeRecord, utcNowIso, type DecisionRecord } from "./decisionLog.js";
export {
  Decision, Gate, REGIME_CODES, RunTrace, UncalibratedPremiseError, VOI_TOLERANCE, checkSettings,
  posteriorConfirm, posteriorRefute,
  type GateOptions, type GateSettings, type Mode, type PlannerName, type Regime, type RunStep, type Signals,
} from "./engine.js";
export { JsonError, parseJson, writtenAsFloat, type Json } from "./json.js";
export {
  CheckedAction, CheckedClaim, CheckedPremise, CheckedVerifier, checkAction, checkClaim, checkMemoryKind, checkPremise,
  checkVerifier, premiseMemoryKind,
  type ActionInput, type CandidateAction, type MemoryClaim, type Premise, type Verifier, type VerifierInput,
} from "./model.js";
export { portableExp, portableLog, portableLog1p } from "./portableMath.js";
export { MAX_EXACT_VERIFIERS, MAX_HORIZON, MAX_OUTCOMES, MAX_WORK, RECEDING_WORK, enumerable, plan } from "./planner.js";
export { SIGNATURE_FILE, verifySignature } from "./signature.js";
