"""The TypeScript gate (``clients/typescript``) held equal to the Python gate.

10,000+ random cases go through ONE node process (``ts_gate/harness.mjs``, JSON lines) and
through ``Gate.from_artifact`` here, on four artifacts written by the Python exporter
(``export_artifact``, so that the test follows the format as it grows): the shipped
``amv-guard/v1`` exported again (its calibrator, thresholds and certificate), an isotonic
calibrator over every feature transform (signed; both gates load it under the trusted key),
an isotonic calibrator whose index needs no ``log``/``exp`` (knots placed at claims' exact
indices) and a one-knot isotonic table. The cases cover every planner (myopic, exact
lookahead, beams, receding horizons with reuse) and both modes, harm prices from 0 to 1e6,
budgets, ``max_verifications`` from 0, verifiers over 0 to 13 premises, rows past the work
bound, probabilities at 0, 1, 5e-324 and 1 - 1e-16, claims at their edges, premises that
fail closed, inputs that are refused, and sequential runs with scripted signals.

Equality is exact: regime, verifier, reason, every number and the work counters, bit for
bit (a probability's sign of zero too). Neither gate takes the platform's ``log``,
``log1p`` or ``exp`` (V8's ``Math.log`` and glibc's ``log`` differ in the last bit now and
then): the calibrator's ``logit``, ``log``, ``log1m`` and ``log1p`` terms, its sigmoid and
the planner's evidence score take the portable ones (``amv_calib.contract.portable_log``
and the rest, transcribed in ``portableMath.ts``), the same bits in both languages (held
here on fdlibm's boundaries, subnormals, zeros, infinities, NaN and 300,000 random inputs).
Only the seed mode without a calibrator keeps the seed engine's formula on the platform's
libm (to reproduce that engine); every case here loads an artifact.

The loader's refusals are checked too: a tampered file, an unsigned or wrongly signed
version under a trusted key, a certificate not bound to its calibrator or thresholds, a
FIFO, deep JSON, repeated keys and more.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from kinded import (
    FITTED_KINDS,
    KINDS,
    UNKNOWN_KINDS,
    batch_arrays,
    exact_kinded_calibrator,
    export_kinded,
    fitted_kinded_calibrator,
    kind_cases,
    kinded_calibrator,
)
from portable_corpus import math_corpus
from repo_paths import load_module

import amv_calib.contract._artifact as _artifact_module
from amv_calib.artifacts import export_artifact, keygen
from amv_calib.cli import main as amv_main
from amv_calib.contract import load_artifact, portable_exp, portable_log, portable_log1p
from amv_calib.contract._features import FeatureMap, PortableCalibrator, Term
from amv_calib.exceptions import ArtifactError
from amv_calib.gate import CandidateAction, Gate, Verifier, read_decision_log
from amv_calib.gate._batch import calibrate_batch, evaluate_batch

TS = load_module(Path(__file__).parent / "ts_gate" / "ts_harness.py", "ts_harness")
REPO = TS.REPO_ROOT
SHIPPED = REPO / "models" / "amv-guard" / "v1"
N_CASES = 10_400

# slow: the module builds the Node package (npm ci, tsc) and runs 10,400 cases through it;
# make test runs it, make test-fast does not
pytestmark = [pytest.mark.requires_node, pytest.mark.requires_npm, pytest.mark.slow]


# -- artifacts ---------------------------------------------------------------------------------
def _rich_terms() -> tuple[Term, ...]:
    return (
        Term(column="model_confidence", transform="logit", eps=1e-4),
        Term(column="model_confidence", transform="log"),
        Term(column="source_trust_score", transform="log1m"),
        Term(column="recency_hours", transform="log1p", scale=50.0),
        Term(column="recency_hours", transform="ramp", scale=720.0),
        Term(column="source_trust_score", transform="identity"),
        Term(column="contradiction_flag", transform="indicator"),
        Term(column="contradiction_flag", transform="indicator", by="model_confidence"),
    )


#: libm-free terms: the index of a claim is the same double in both languages
_EXACT_TERMS = (
    Term(column="model_confidence", transform="identity"),
    Term(column="recency_hours", transform="ramp", scale=720.0),
    Term(column="source_trust_score", transform="identity", by="model_confidence"),
    Term(column="contradiction_flag", transform="indicator"),
)
_EXACT_COEF = (-3.1, 1.7, -0.9, 2.2)
_EXACT_INTERCEPT = 0.4


def _knot_claims() -> list[dict[str, Any]]:
    """Claims whose exact isotonic index becomes a knot (numpy's ``x == xp[j]`` branch)."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(12):
        out.append({"id": f"knot{i}", "source_trust_score": float(rng.uniform()),
                    "model_confidence": float(rng.uniform()),
                    "recency_hours": float(rng.choice([0.0, 36.0, 720.0, 5000.0])),
                    "contradiction_flag": bool(rng.uniform() < 0.3)})
    return out


def _exact_index(claim: dict[str, Any]) -> float:
    feats = {k: float(v) for k, v in claim.items() if k != "id"}
    z = _EXACT_INTERCEPT
    for term, w in zip(_EXACT_TERMS, _EXACT_COEF, strict=True):
        z += w * term.evaluate_one(feats)
    return z


def _isotonic(terms: tuple[Term, ...], coef: tuple[float, ...], intercept: float, xs: list[float],
              rng: np.random.Generator, clamp: tuple[float, float] | None) -> PortableCalibrator:
    ys = np.sort(rng.uniform(0.0, 1.0, len(xs)))
    ys[0] = 0.0  # knots at the edges of [0, 1]
    if len(xs) > 2:
        ys[-1] = 1.0
        ys[len(xs) // 2] = ys[len(xs) // 2 - 1]  # a flat step
    return PortableCalibrator(kind="isotonic", feature_map=FeatureMap(terms), intercept=intercept,
                              coef=coef, x_knots=tuple(float(x) for x in xs),
                              y_knots=tuple(float(y) for y in ys), clamp=clamp, source="isotonic")


def _exported_with_certificate(models: Path, name: str, version: Path,
                               manifest: dict[str, Any]) -> Path:
    """The shipped version exported again: its calibrator, thresholds, certificate and
    tuning record (the exporter checks that the certificate is bound to them)."""
    record = models.parent / f"{name}-record"
    record.mkdir(parents=True)
    (record / "tuning.json").write_text(json.dumps(manifest["tuning"]))
    members = manifest["tuning"]["members"]
    shutil.copy(version / members, record / members)
    done = export_artifact(calibrator=version / "calibrator.json", name=name, models_dir=models,
                           thresholds=manifest["gate"], certificate=manifest["certificate"],
                           tuning=record / "tuning.json", include_joblib=False)
    return done.path


@pytest.fixture(scope="module")
def dist() -> Path:
    return Path(TS.built_dist())


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ts_artifacts")
    models = root / "models"
    private, public = keygen(root / "keys")
    other_private, other_public = keygen(root / "other-keys")
    rng = np.random.default_rng(11)
    shipped_manifest = json.loads((SHIPPED / "manifest.json").read_text())
    shipped = _exported_with_certificate(models, "shipped", SHIPPED, shipped_manifest)
    iso_x = sorted(rng.uniform(-6.0, 4.0, 40).tolist())
    iso = export_artifact(
        calibrator=_isotonic(_rich_terms(), tuple(rng.normal(0, 1, 8).tolist()), -1.2, iso_x, rng,
                             None),
        name="iso", models_dir=models, signing_key=private, include_joblib=False,
        thresholds={"lambda_cost_scale": 0.5, "delta_loss_threshold": 12.0,
                    "epsilon_harm_bound": 0.08, "harm_price": 2.5, "planner": "lookahead",
                    "max_verifications": 4, "clamp": [0.001, 0.999]}).path
    knots = sorted({_exact_index(c) for c in _knot_claims()} | set(rng.uniform(-3.0, 3.0, 20)))
    exact = export_artifact(
        calibrator=_isotonic(_EXACT_TERMS, _EXACT_COEF, _EXACT_INTERCEPT, knots, rng, None),
        name="iso-exact", models_dir=models, include_joblib=False,
        thresholds={"lambda_cost_scale": 1.0, "delta_loss_threshold": 8.0,
                    "epsilon_harm_bound": 0.1, "planner": "myopic", "max_verifications": 8,
                    "clamp": [0.02, 0.98]}).path
    one = export_artifact(
        calibrator=_isotonic(_EXACT_TERMS, _EXACT_COEF, _EXACT_INTERCEPT,
                             [_exact_index(_knot_claims()[0])], rng, None),
        name="iso-one", models_dir=models, include_joblib=False,
        thresholds={"lambda_cost_scale": 1.0, "delta_loss_threshold": 10.0,
                    "epsilon_harm_bound": 0.05, "planner": "lookahead", "max_verifications": 2,
                    "clamp": None}).path
    return {"root": root, "models": models, "shipped_manifest": shipped_manifest,
            "public": str(public), "private": str(private), "other_public": str(other_public),
            "other_private": str(other_private),
            "refs": {"shipped": (str(shipped), None), "iso": (str(iso), [str(public)]),
                     "iso_exact": (str(exact), None), "iso_one": (str(one), None)}}


# -- cases -------------------------------------------------------------------------------------
def _spell(rng: np.random.Generator, snake: dict[str, Any], camel: dict[str, str]
           ) -> dict[str, Any]:
    """The object in snake_case or the seed's camelCase, at random."""
    if rng.uniform() < 0.5:
        return snake
    return {camel.get(k, k): v for k, v in snake.items()}


_CLAIM_CAMEL = {"source_trust_score": "sourceTrustScore", "model_confidence": "modelConfidence",
                "recency_hours": "recencyHours", "contradiction_flag": "contradictionFlag"}
_PREMISE_CAMEL = {"claim_id": "claimId", "calibrated_violation_probability":
                  "calibratedViolationProbability", "dependency_type": "dependencyType",
                  "parameter_target": "parameterTarget"}
_VERIFIER_CAMEL = {"resolves_premise_ids": "resolvesPremiseIds", "execution_cost": "executionCost",
                   "symmetric_reliability": "symmetricReliability"}
_ACTION_CAMEL = {"action_id": "actionId", "tool_name": "toolName",
                 "impact_cost_theta": "impactCostTheta",
                 "abstention_cost_kappa": "abstentionCostKappa"}

_P_EDGES = [0.0, 1.0, 1e-300, 5e-324, 1.0 - 1e-16, 0.5, 1e-17, 0.04, 0.05]
_CONF_EDGES = [0.0, 1.0, 1e-7, 1.0 - 1e-9, 0.5, 1e-5, 1.0 - 1e-5, 5e-324, 1e-4]
_HOURS_EDGES = [0.0, 720.0, 1e6, 1e-300, 50.0]


def _claim(rng: np.random.Generator, cid: str, knot_claims: list[dict[str, Any]]) -> dict[str, Any]:
    if rng.uniform() < 0.1:
        c = dict(knot_claims[int(rng.integers(len(knot_claims)))])
    else:
        conf = float(rng.beta(5.0, 1.2))
        if rng.uniform() < 0.08:
            conf = float(rng.choice(_CONF_EDGES))
        hours = float(rng.exponential(200.0))
        if rng.uniform() < 0.08:
            hours = float(rng.choice(_HOURS_EDGES))
        trust = float(rng.beta(3.0, 1.5)) if rng.uniform() < 0.95 else float(rng.choice([0.0, 1.0]))
        c = {"source_trust_score": trust, "model_confidence": conf, "recency_hours": hours,
             "contradiction_flag": bool(rng.uniform() < 0.12)}
    c["id"] = cid
    return _spell(rng, c, _CLAIM_CAMEL)


def _premise(rng: np.random.Generator, pid: str, knot_claims: list[dict[str, Any]]
             ) -> dict[str, Any]:
    pm: dict[str, Any] = {"id": pid, "dependency_type": "direct", "parameter_target": "x"}
    u = rng.uniform()
    if u < 0.4:
        pm["calibrated_violation_probability"] = (
            float(rng.choice(_P_EDGES)) if rng.uniform() < 0.15 else float(rng.beta(0.5, 6.0)))
    elif u < 0.95:
        pm["claim_id"] = f"c-{pid}"
        pm["claim"] = _claim(rng, f"c-{pid}", knot_claims)
        if rng.uniform() < 0.5:
            pm["calibrated_violation_probability"] = None
    elif u < 0.98:  # the claim's features beside the premise (the episodes format)
        claim = _claim(rng, f"c-{pid}", knot_claims)
        pm.update({k: v for k, v in claim.items() if k != "id"})
        pm["claim_id"] = f"c-{pid}"
    # else: neither a probability nor a claim: the gate fails closed
    return _spell(rng, pm, _PREMISE_CAMEL)


def _reliability(rng: np.random.Generator) -> float:
    u = rng.uniform()
    if u < 0.15:
        return 1.0
    if u < 0.18:
        return 0.5 + 1e-12
    if u < 0.2:
        return float(np.nextafter(0.5, 1.0))
    return float(rng.uniform(0.5000001, 0.9999999))


def _cost(rng: np.random.Generator) -> float:
    u = rng.uniform()
    return 0.0 if u < 0.1 else 1e6 if u < 0.12 else float(rng.exponential(0.5))


def _verifier(rng: np.random.Generator, vid: str, ids: list[str]) -> dict[str, Any]:
    v = {"id": vid, "resolves_premise_ids": ids, "execution_cost": _cost(rng),
         "symmetric_reliability": _reliability(rng)}
    return _spell(rng, v, _VERIFIER_CAMEL)


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _settings(rng: np.random.Generator, shape: str) -> dict[str, Any]:
    g: dict[str, Any] = {}
    if shape == "seed" or (shape == "plain" and rng.uniform() < 0.15):
        g["mode"] = "seed"
    elif shape in ("beam", "reuse"):
        g["planner"] = "lookahead"
    elif rng.uniform() < 0.8:
        g["planner"] = "myopic" if rng.uniform() < 0.45 else "lookahead"
    if shape == "reuse" or (g.get("planner") == "lookahead" and rng.uniform() < 0.1):
        g["reuse_verifiers"] = True
    u = rng.uniform()
    if u < 0.2:
        g["harm_price"] = 0.0
    elif u < 0.45:
        g["harm_price"] = _loguniform(rng, 1e-3, 1e3)
    elif u < 0.5:
        g["harm_price"] = 1e6
    if rng.uniform() < 0.5:
        g["max_verifications"] = int(rng.integers(0, 9))
    if rng.uniform() < 0.3:
        g["lambda_cost_scale"] = float(rng.uniform(0.0, 3.0))
    if rng.uniform() < 0.3:
        g["delta_loss_threshold"] = _loguniform(rng, 0.1, 100.0)
    if rng.uniform() < 0.3:
        g["epsilon_harm_bound"] = float(rng.choice([0.0, 1.0])) if rng.uniform() < 0.2 \
            else float(rng.uniform(0.0, 0.6))
    return g


def _losses(rng: np.random.Generator) -> tuple[float, float]:
    u = rng.uniform()
    if u < 0.03:
        return 1e300, float(rng.choice([1e300, 5e-324, 4.0]))
    if u < 0.06:
        x = _loguniform(rng, 0.1, 100.0)
        return x, x  # theta == kappa: the clairvoyant bound's two branches meet
    return _loguniform(rng, 0.1, 1000.0), _loguniform(rng, 0.1, 100.0)


def _shape(rng: np.random.Generator) -> str:
    u = rng.uniform()
    for share, name in ((0.025, "bound"), (0.04, "beam"), (0.06, "reuse"), (0.09, "seed"),
                        (0.10, "unknown"), (0.11, "empty")):
        if u < share:
            return name
    return "plain"


def _case(rng: np.random.Generator, i: int, refs: dict[str, Any],
          knot_claims: list[dict[str, Any]]) -> dict[str, Any]:
    art = str(rng.choice(["shipped", "shipped", "iso", "iso_exact", "iso_one"],
                         p=[0.3, 0.15, 0.3, 0.17, 0.08]))
    ref, keys = refs[art]
    shape = _shape(rng)
    m = {"bound": int(rng.integers(13, 16)), "empty": 0}.get(shape, int(rng.integers(1, 6)))
    ids = [f"a{i}p{j}" for j in range(m)]
    premises = [_premise(rng, pid, knot_claims) for pid in ids]
    verifiers = []
    if shape == "bound":
        if rng.uniform() < 0.5:  # one verifier over many premises among small ones
            wide = [ids[t] for t in rng.permutation(m)[: int(rng.integers(12, m + 1))]]
            verifiers.append(_verifier(rng, "wide", wide))
            for j in range(int(rng.integers(0, 5))):
                verifiers.append(_verifier(rng, f"v{j}", [ids[int(rng.integers(m))]]))
        else:  # many verifiers of 7 premises: more than MAX_OUTCOMES together
            for j in range(int(rng.integers(30, 36))):
                verifiers.append(_verifier(rng, f"v{j}",
                                           [ids[t] for t in rng.permutation(m)[:7]]))
        rng.shuffle(verifiers)
    elif shape == "beam":  # more one-premise verifiers than an exact plan takes
        for j in range(int(rng.integers(9, 12))):
            verifiers.append(_verifier(rng, f"v{j}", [ids[j % m]]))
    else:
        for j in range(int(rng.integers(0, 6))):
            u = rng.uniform()
            size = 0 if (u < 0.05 or not m) else int(rng.integers(1, min(3, m) + 1))
            verifiers.append(_verifier(rng, f"v{j}", [ids[t] for t in rng.permutation(m)[:size]]))
        if shape == "unknown":
            verifiers.append(_verifier(rng, "stray", ["no-such-premise"]))
    theta, kappa = _losses(rng)
    action = _spell(rng, {"action_id": f"a{i}", "tool_name": "transfer",
                          "arguments": {"amount": i}, "impact_cost_theta": theta,
                          "abstention_cost_kappa": kappa, "premises": premises}, _ACTION_CAMEL)
    req: dict[str, Any] = {"id": i, "kind": "decide", "ref": ref, "trusted_keys": keys,
                           "gate": _settings(rng, shape), "action": action,
                           "verifiers": verifiers, "run": None, "shape": shape}
    if rng.uniform() < 0.25 and shape != "bound":
        answers: dict[str, Any] = {}
        for v in verifiers:
            vid = v["id"]
            rids: list[str] = v["resolves_premise_ids" if "resolves_premise_ids" in v
                                else "resolvesPremiseIds"]
            if len(rids) == 1 and rng.uniform() < 0.5 or req["gate"].get("mode") == "seed" \
                    and rng.uniform() < 0.5:
                answers[vid] = bool(rng.uniform() < 0.7)
            else:
                answers[vid] = {pid: bool(rng.uniform() < 0.7) for pid in rids}
        req["run"] = {"answers": answers,
                      "budget": None if rng.uniform() < 0.5 else float(rng.uniform(0.0, 3.0))}
    return req


@pytest.fixture(scope="module")
def cases(artifacts: dict[str, Any]) -> list[dict[str, Any]]:
    rng = np.random.default_rng(20261202)
    knots = _knot_claims()
    return [_case(rng, i, artifacts["refs"], knots) for i in range(N_CASES)]


# -- the Python side ---------------------------------------------------------------------------
class _Python:
    """The Python gate answering the harness's requests.

    Each artifact is loaded (and its signature verified) once: ``Gate.from_artifact`` runs as
    it is, on a ``load_artifact`` that remembers what it loaded, as the harness does with
    ``readArtifact`` and ``gateFrom``.
    """

    def __init__(self) -> None:
        self.gates: dict[str, Gate] = {}
        self.loaded: dict[str, Any] = {}

    def _load(self, ref: Any, *, trusted_keys: Any = None) -> Any:
        key = json.dumps([str(ref), trusted_keys])
        if key not in self.loaded:
            self.loaded[key] = load_artifact(ref, trusted_keys=trusted_keys)
        return self.loaded[key]

    def gate(self, req: dict[str, Any]) -> Gate:
        key = json.dumps([req["ref"], req["trusted_keys"], req["gate"]], sort_keys=True)
        if key not in self.gates:
            with mock.patch.object(_artifact_module, "load_artifact", self._load):
                self.gates[key] = Gate.from_artifact(req["ref"], trusted_keys=req["trusted_keys"],
                                                     **req["gate"])
        return self.gates[key]

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        gate = self.gate(req)
        try:
            action = CandidateAction.from_dict(req["action"])
            verifiers = [Verifier.from_dict(v) for v in req["verifiers"]]
            if req["run"] is not None:
                answers = req["run"]["answers"]
                trace = gate.run(action, verifiers, verify=lambda v, a: answers[v.id],
                                 budget=req["run"]["budget"])
                return {"trace": trace.to_dict()}
            return {"decision": gate.evaluate(action, verifiers).to_dict()}
        except ValueError as exc:
            return {"error": str(exc)}


def _probabilities(ans: dict[str, Any]) -> list[float]:
    if "trace" in ans:
        return list(ans["trace"]["prior"])
    if "decision" in ans:
        return list(ans["decision"]["probabilities"])
    return []


def _decisions(ans: dict[str, Any]) -> list[dict[str, Any]]:
    if "trace" in ans:
        return [s["decision"] for s in ans["trace"]["steps"]] + [ans["trace"]["final"]]
    return [ans["decision"]] if "decision" in ans else []


def _diff(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two answers differ (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in _diff(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for n, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _diff(x, y, f"{where}[{n}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


@pytest.fixture(scope="module")
def compared(cases: list[dict[str, Any]]) -> dict[str, Any]:
    t0 = time.perf_counter()
    ts = TS.run_harness(cases)
    t_node = time.perf_counter() - t0
    py = _Python()
    t0 = time.perf_counter()
    ours = {c["id"]: py.answer(c) for c in cases}
    t_python = time.perf_counter() - t0
    return {"ts": ts, "py": ours, "t_node": t_node, "t_python": t_python}


def test_every_case_decides_as_python(cases: list[dict[str, Any]],
                                      compared: dict[str, Any]) -> None:
    """Every answer equal to the Python gate's, bit for bit (or both refuse the input)."""
    ts, py = compared["ts"], compared["py"]
    assert len(ts) == len(cases) >= 10_000
    refused = 0
    for req in cases:
        i = req["id"]
        a, b = {k: v for k, v in ts[i].items() if k != "id"}, py[i]
        assert a.keys() == b.keys(), (i, a, b)
        if "error" in a:
            refused += 1
            continue  # both refused the input (the messages may be worded apart)
        assert a == b, (i, req["shape"], req["gate"], _diff(a, b))
        pa, pb = _probabilities(a), _probabilities(b)
        assert [_bits_of(x) for x in pa] == [_bits_of(y) for y in pb], (i, pa, pb)
    print(f"\n{len(cases)} cases, {refused} refused by both; node {compared['t_node']:.1f} s, "
          f"python {compared['t_python']:.1f} s; every answer equal bit for bit")


def test_the_cases_reach_every_path(cases: list[dict[str, Any]],
                                    compared: dict[str, Any]) -> None:
    """The generator reaches what the module docstring says it covers (not asserted by luck)."""
    py = compared["py"]
    seen: Counter[str] = Counter()
    for req in cases:
        ans, g = py[req["id"]], req["gate"]
        seen[f"shape:{req['shape']}"] += 1
        if "error" in ans:
            seen["refused input"] += 1
            continue
        seen["run" if req["run"] else "evaluate"] += 1
        for d in _decisions(ans):
            seen[f"regime:{d['regime']}"] += 1
            seen["left out by the work bound"] += bool(d["left_out"])
            seen["abstain: could be worth calling"] += "could be worth calling" in d["reason"]
            seen["failing closed"] += d["reason"].startswith("failing closed")
            seen["planner states > 0"] += d["planner_states"] > 0
            seen["beam-sized plan"] += d["planner_states"] > 0 and req["shape"] == "beam"
        seen[f"mode:{g.get('mode', 'amv')}"] += 1
        seen[f"planner:{g.get('planner', 'artifact')}"] += 1
        seen["reuse"] += bool(g.get("reuse_verifiers"))
        seen["harm price 1e6"] += g.get("harm_price") == 1e6
        seen["max_verifications 0"] += g.get("max_verifications") == 0
        seen["budget"] += bool(req["run"] and req["run"]["budget"] is not None)
    for what in ("regime:PROCEED", "regime:VERIFY", "regime:ABSTAIN", "left out by the work bound",
                 "abstain: could be worth calling", "failing closed", "beam-sized plan",
                 "mode:seed", "planner:myopic", "planner:lookahead", "reuse", "harm price 1e6",
                 "max_verifications 0", "budget", "run", "refused input", "shape:empty"):
        assert seen[what] >= 10, (what, seen)


# -- the calibrator alone ------------------------------------------------------------------------
def test_calibrators_agree_with_numpy_interp_and_predict_one(artifacts: dict[str, Any]) -> None:
    rng = np.random.default_rng(3)
    feats = [{"recency_hours": float(rng.exponential(300.0)),
              "source_trust_score": float(rng.uniform()), "model_confidence": float(rng.uniform()),
              "contradiction_flag": float(rng.uniform() < 0.2)} for _ in range(2000)]
    feats += [{k: float(v) for k, v in c.items() if k != "id"} for c in _knot_claims()]
    # the lowest and highest isotonic index a claim can have (below and above every knot)
    feats += [{"recency_hours": 0.0, "source_trust_score": 1.0, "model_confidence": 1.0,
               "contradiction_flag": 0.0},
              {"recency_hours": 1e6, "source_trust_score": 0.0, "model_confidence": 0.0,
               "contradiction_flag": 1.0}]
    requests, expect = [], {}
    for n, (name, (ref, keys)) in enumerate(artifacts["refs"].items()):
        cal_json = json.loads((Path(ref) / "calibrator.json").read_text())
        cal = load_artifact(ref, trusted_keys=keys).calibrator
        requests.append({"id": n, "kind": "predict", "calibrator": cal_json, "features": feats})
        expect[n] = (name, cal, [cal.predict_one(f) for f in feats])
    got = TS.run_harness(requests)
    for n, (name, cal, want) in expect.items():
        p = got[n]["p"]
        # every calibrator bit for bit: numpy's interp, and the portable log, log1p and exp
        assert [_bits_of(x) for x in p] == [_bits_of(x) for x in want], name
        if name in ("iso_exact", "iso_one"):
            z = [_exact_index({"id": "", **f}) for f in feats]
            hits = sum(x in cal.x_knots for x in z)  # indices exactly at a knot
            assert hits >= (12 if name == "iso_exact" else 1), (name, hits)
            assert min(z) < cal.x_knots[0] and max(z) > cal.x_knots[-1]  # and both ends passed


# -- the loader's refusals -----------------------------------------------------------------------
def _copy(artifacts: dict[str, Any], which: str, name: str) -> Path:
    src = Path(artifacts["refs"][which][0])
    dst = Path(artifacts["root"]) / "refusals" / name / src.name
    shutil.copytree(src, dst)
    return dst


def _no_hint_copy(artifacts: dict[str, Any]) -> Path:
    """The signed isotonic artifact with its signature's key hint removed (made once; two
    tests read it, in either order)."""
    d = Path(artifacts["root"]) / "refusals" / "no-hint" / Path(artifacts["refs"]["iso"][0]).name
    if not d.exists():
        d = _copy(artifacts, "iso", "no-hint")
        bundle = json.loads((d / "model.sig").read_text())
        del bundle["verificationMaterial"]["publicKey"]["hint"]
        (d / "model.sig").write_text(json.dumps(bundle))
    return d


def _rewrite_manifest(folder: Path, edit: Any) -> None:
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")


def _set_file(folder: Path, rel: str, data: bytes) -> None:
    (folder / rel).write_bytes(data)
    _rewrite_manifest(folder, lambda m: m["files"].__setitem__(
        rel, hashlib.sha256(data).hexdigest()))


def _refusal_scenarios(artifacts: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, bool]]:
    """(name, load request, what the TS reason must say, whether Python's loader refuses too)."""
    out: list[tuple[str, dict[str, Any], str, bool]] = []
    pub, other = artifacts["public"], artifacts["other_public"]

    def add(name: str, ref: Path | str, pattern: str, *, keys: list[str] | None = None,
            env: dict[str, Any] | None = None, python: bool = True) -> None:
        out.append((name, {"kind": "load", "ref": str(ref), "trusted_keys": keys, "env": env},
                    pattern, python))

    d = _copy(artifacts, "shipped", "tampered")
    raw = bytearray((d / "calibrator.json").read_bytes())
    raw[raw.index(b'"intercept": -') + 15] ^= 1  # one digit of the intercept
    (d / "calibrator.json").write_bytes(bytes(raw))
    add("tampered calibrator", d, r"calibrator.json: sha256 mismatch \(tampered or truncated\)")
    add("unsigned under a trusted key", Path(artifacts["refs"]["shipped"][0]),
        r"unsigned \(no model.sig\), and trusted keys are configured", keys=[pub])
    add("signed by another key", Path(artifacts["refs"]["iso"][0]),
        "signature does not verify with any trusted key", keys=[other])
    d = _no_hint_copy(artifacts)
    add("signed by another key, no key hint", d, "the signature does not verify with this key",
        keys=[other])
    add("trusted key file missing", Path(artifacts["refs"]["iso"][0]),
        "trusted key file not found", keys=[str(artifacts["root"] / "nope.pub")])
    d = _copy(artifacts, "iso", "changed-after-signing")
    cal = json.loads((d / "calibrator.json").read_text())
    cal["intercept"] += 0.5
    _set_file(d, "calibrator.json", (json.dumps(cal, indent=2, sort_keys=True) + "\n").encode())
    add("changed and re-hashed after signing", d, "Hash mismatch for 'calibrator.json'", keys=[pub])
    d = _copy(artifacts, "iso", "manifest-edited")
    _rewrite_manifest(d, lambda m: m["metrics"].__setitem__("note", "edited"))
    add("manifest edited after signing", d, "Hash mismatch for 'manifest.json'", keys=[pub])
    add("set-but-empty trusted keys", Path(artifacts["refs"]["iso"][0]),
        r"AMV_CALIB_TRUSTED_KEYS is set but names no key", env={"AMV_CALIB_TRUSTED_KEYS": ":"})
    for name, edit, pattern in (
        ("certificate without calibrator_sha256",
         lambda m: m["certificate"].pop("calibrator_sha256"),
         "certificate does not name the calibrator it certified"),
        ("certificate for another calibrator",
         lambda m: m["certificate"].__setitem__("calibrator_sha256", "0" * 64),
         "certificate was made for calibrator sha256 0{64}, but"),
        ("certificate for other thresholds",
         lambda m: _certify_other(m, lambda t: t.__setitem__("harm_price", 3.0)),
         r"they differ in \['harm_price'\]"),
        ("certificate without a harm price, gate priced",
         lambda m: _certify_other(m, lambda t: t.pop("harm_price")),
         r"they differ in \['harm_price'\]"),
        ("certificate's chosen entry not its thresholds",
         lambda m: m["certificate"]["thresholds"].__setitem__("harm_price", 3.0),
         r"not its path's chosen configuration \(chosen=21\)"),
    ):
        d = _copy(artifacts, "shipped", name.replace(" ", "-"))
        _rewrite_manifest(d, edit)
        add(name, d, pattern)  # Python's loader refuses each too (the certificate binding)
    d = _copy(artifacts, "shipped", "fifo")
    os.mkfifo(d / "reliability.csv")
    _rewrite_manifest(d, lambda m: m["files"].__setitem__("reliability.csv", "0" * 64))
    add("FIFO listed as a file", d, "reliability.csv: file listed in manifest.json is a FIFO")
    d = _copy(artifacts, "shipped", "fifo-unlisted")
    os.mkfifo(d / "pipe")
    add("unlisted FIFO", d, r"pipe: not listed in manifest.json")
    d = _copy(artifacts, "shipped", "deep")
    deep: Any = 1
    for _ in range(40):
        deep = {"x": deep}
    _rewrite_manifest(d, lambda m: m["metrics"].__setitem__("deep", deep))
    add("deep JSON", d, "nested deeper than 32 levels")
    d = _copy(artifacts, "shipped", "duplicate-manifest")
    text = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(text.replace('"name": "shipped"',
                                                  '"name": "shipped",\n  "name": "evil"'))
    add("repeated key in the manifest", d, r'key "name" appears twice')
    d = _copy(artifacts, "shipped", "duplicate-calibrator")
    text = (d / "calibrator.json").read_text()
    doubled = text.replace('"kind": "linear"', '"kind": "linear",\n  "kind": "isotonic"')
    _set_file(d, "calibrator.json", doubled.encode())
    add("repeated key in calibrator.json", d, r'key "kind" appears twice')
    d = _copy(artifacts, "shipped", "symlink")
    (d / "calibrator.json").rename(d / "real.json")
    (d / "calibrator.json").symlink_to("real.json")
    _rewrite_manifest(d, lambda m: m["files"].__setitem__(
        "real.json", m["files"]["calibrator.json"]))
    add("calibrator.json a symbolic link", d, "is a symbolic link")
    d = _copy(artifacts, "shipped", "unlisted")
    (d / "notes.txt").write_text("hello")
    add("unlisted file", d, r"notes.txt: not listed in manifest.json")
    d = _copy(artifacts, "shipped", "oversized")
    with open(d / "calibrator.json", "r+b") as fh:  # sparse: no 64 MiB written
        fh.truncate(64 * 1024 * 1024 + 1)
    add("oversized calibrator.json", d, "is larger than 67108864 bytes")
    d = _copy(artifacts, "shipped", "nan")
    _set_file(d, "calibrator.json", re.sub(r'"intercept": [-+0-9.e]+', '"intercept": NaN',
                                           (d / "calibrator.json").read_text()).encode())
    add("NaN in calibrator.json", d, "intercept=nan is not finite")
    d = _copy(artifacts, "shipped", "unknown-key")
    _rewrite_manifest(d, lambda m: m.__setitem__("surprise", 1))
    add("unknown manifest key", d, r"unknown keys \['surprise'\]")
    d = _copy(artifacts, "shipped", "renamed").rename(
        artifacts["root"] / "refusals" / "renamed" / "v7")
    add("version folder renamed", d, "version='v1' but the folder is 'v7'")
    model = artifacts["root"] / "refusals" / "alias"
    shutil.copytree(Path(artifacts["refs"]["shipped"][0]).parent, model / "shipped")
    from amv_calib.artifacts import promote

    promote("shipped", "v1", alias="production", models_dir=model)
    _rewrite_manifest(model / "shipped" / "v1",
                      lambda m: m["metrics"].__setitem__("edited", True))
    add("manifest edited after promotion", f"{model / 'shipped'}@production",
        "recorded when alias 'production' was promoted")
    add("unknown alias", f"{model / 'shipped'}@staging", "no alias 'staging'")
    add("bare model folder", model / "shipped", "is a model folder, not an artifact version")
    return out


@pytest.fixture(scope="module")
def refusals(artifacts: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, bool,
                                                        dict[str, Any]]]:
    scen = _refusal_scenarios(artifacts)
    requests = [{**req, "id": n} for n, (_, req, _, _) in enumerate(scen)]
    got = TS.run_harness(requests)
    return [(name, req, pattern, python, got[n])
            for n, (name, req, pattern, python) in enumerate(scen)]


def test_refused_artifacts_abstain_with_the_reason(refusals: list[Any]) -> None:
    names = []
    for name, req, pattern, python, got in refusals:
        names.append(name)
        assert got["refusal"] is not None, f"{name}: TS loaded it"
        assert re.search(pattern, got["refusal"]), (name, got["refusal"])
        assert got["regime"] == "ABSTAIN" and got["reason"].startswith("artifact refused: "), name
        if python:
            env = req["env"] or {}
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update({k: v for k, v in env.items() if v is not None})
            try:
                with pytest.raises(ArtifactError):
                    load_artifact(req["ref"], trusted_keys=req["trusted_keys"])
            finally:
                for k, v in saved.items():
                    os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert len(names) >= 20


def test_loaded_artifacts_match_python(artifacts: dict[str, Any]) -> None:
    """The artifacts the cases use load alike: name, version, thresholds, signer."""
    requests = [{"id": n, "kind": "load", "ref": ref, "trusted_keys": keys, "env": None}
                for n, (ref, keys) in enumerate(artifacts["refs"].values())]
    got = TS.run_harness(requests)
    for n, (ref, keys) in enumerate(artifacts["refs"].values()):
        art = load_artifact(ref, trusted_keys=keys)
        assert got[n]["refusal"] is None, got[n]
        assert (got[n]["name"], got[n]["version"]) == (art.name, art.version)
        assert got[n]["thresholds"] == art.thresholds
        assert (got[n]["signed_by"] is not None) == (art.signed_by is not None)


def _certify_other(m: dict[str, Any], change: Any) -> None:
    """Change the certificate's thresholds and the path entry it names alike (so that its own
    binding holds and the comparison with the gate is what is tested)."""
    cert = m["certificate"]
    change(cert["thresholds"])
    change(cert["path"][cert["chosen"]])


def test_bound_certificates_and_hintless_signatures_load(artifacts: dict[str, Any]) -> None:
    """A certificate binds when its thresholds equal the gate as numbers, a missing harm price
    meaning 0; a signature without the key hint verifies by the key alone."""
    d = _copy(artifacts, "shipped", "bound-defaults")

    def edit(m: dict[str, Any]) -> None:
        m["gate"].pop("harm_price")

        def bound(t: dict[str, Any]) -> None:
            t["harm_price"] = 0.0
            t["max_verifications"] = 3.0  # a float for the int 3

        _certify_other(m, bound)

    _rewrite_manifest(d, edit)
    requests = [{"id": 0, "kind": "load", "ref": str(d), "trusted_keys": None, "env": None},
                {"id": 1, "kind": "load", "ref": str(_no_hint_copy(artifacts)),
                 "trusted_keys": [artifacts["public"]],
                 "env": None}]
    got = TS.run_harness(requests)
    assert got[0]["refusal"] is None, got[0]
    assert "harm_price" not in got[0]["thresholds"]
    assert got[1]["refusal"] is None and got[1]["signed_by"] == artifacts["public"], got[1]
    assert load_artifact(str(requests[1]["ref"]), trusted_keys=[artifacts["public"]]).signed_by


def test_shipped_production_alias(dist: Path) -> None:
    """``models/amv-guard@production`` as shipped: loaded when its certificate is bound to its
    calibrator, refused naming the missing binding otherwise (a manifest from before it)."""
    ref = str(REPO / "models" / "amv-guard") + "@production"
    got = TS.run_harness([{"id": 0, "kind": "load", "ref": ref, "trusted_keys": None,
                           "env": None}])[0]
    cert = json.loads((SHIPPED / "manifest.json").read_text()).get("certificate")
    if cert is not None and "calibrator_sha256" not in cert:
        assert got["refusal"] is not None
        assert "does not name the calibrator it certified" in got["refusal"]
    else:
        assert got["refusal"] is None, got
        assert got["thresholds"] == load_artifact(ref).thresholds


# -- the decision log and the command line ---------------------------------------------------
def test_ts_decision_log_is_read_by_amv_calib_label(cases: list[dict[str, Any]],
                                                    artifacts: dict[str, Any],
                                                    tmp_path: Path) -> None:
    picked = [c for c in cases if c["ref"] == artifacts["refs"]["shipped"][0]
              and c["shape"] == "plain"
              and all("claim" in p for p in c["action"]["premises"])][:120]
    assert len(picked) == 120
    ts_log, py_log = tmp_path / "ts.jsonl", tmp_path / "py.jsonl"
    requests = [{**c, "gate": {**c["gate"], "decision_log": str(ts_log)}} for c in picked]
    TS.run_harness(requests)
    for c in picked:
        gate = Gate.from_artifact(c["ref"], decision_log=str(py_log), **c["gate"])
        action = CandidateAction.from_dict(c["action"])
        verifiers = [Verifier.from_dict(v) for v in c["verifiers"]]
        if c["run"]:
            def verify(v: Verifier, a: CandidateAction,
                       ans: dict[str, Any] = c["run"]["answers"]) -> Any:
                return ans[v.id]

            gate.run(action, verifiers, verify=verify,
                     budget=c["run"]["budget"])
        else:
            gate.evaluate(action, verifiers)
    ts_recs = [json.loads(line) for line in ts_log.read_text().splitlines()]
    py_recs = [json.loads(line) for line in py_log.read_text().splitlines()]
    assert len(ts_recs) == len(py_recs) == 120
    for a, b in zip(ts_recs, py_recs, strict=True):
        assert list(a) == list(b)  # the same fields in the same order
        assert len(a["time"]) == len(b["time"]) and a["time"].endswith("Z")
        assert {k: v for k, v in a.items() if k != "time"} == \
            {k: v for k, v in b.items() if k != "time"}, _diff(a, b)
    # outcomes for every claim: `amv-calib label` reads the TS log as it reads Python's
    outcomes = tmp_path / "outcomes.csv"
    rows = ["action_id,claim_id,time,violated"]
    for rec in ts_recs:
        for pm in rec["premises"]:
            rows.append(f"{rec['action_id']},{pm['claim_id']},2030-01-01T00:00:00Z,"
                        f"{'true' if hash(pm['claim_id']) % 5 == 0 else 'false'}")
    outcomes.write_text("\n".join(rows) + "\n")
    results = {}
    for name, log in (("ts", ts_log), ("py", py_log)):
        out = tmp_path / f"label-{name}"
        assert amv_main(["-q", "label", "--decisions", str(log), "--outcomes", str(outcomes),
                         "--out", str(out)]) == 0
        results[name] = out
    import pandas as pd

    ts_claims = pd.read_parquet(results["ts"] / "claims.parquet")
    py_claims = pd.read_parquet(results["py"] / "claims.parquet")
    assert len(ts_claims) == sum(len(r["premises"]) for r in ts_recs)
    cols = ["claim_id", "recency_hours", "source_trust_score", "model_confidence",
            "contradiction_flag", "violated"]
    pd.testing.assert_frame_equal(ts_claims[cols].reset_index(drop=True),
                                  py_claims[cols].reset_index(drop=True))
    ts_eps = (results["ts"] / "episodes.jsonl").read_text().splitlines()
    assert len(ts_eps) == len((results["py"] / "episodes.jsonl").read_text().splitlines()) > 0
    assert len(list(read_decision_log(ts_log))) == 120


def test_cli_answers_as_amv_calib_gate(artifacts: dict[str, Any], dist: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    example = json.loads((REPO / "data" / "examples" / "action.json").read_text())
    lines = [example]
    for p in (0.01, 0.3, None):
        doc = copy.deepcopy(example)
        doc["action"]["premises"][0]["calibrated_violation_probability"] = p
        lines.append(doc)
    bad = copy.deepcopy(example)
    bad["action"]["impact_cost_theta"] = -1.0
    ref, keys = artifacts["refs"]["iso"]
    text = "".join(json.dumps(x) + "\n" for x in lines) + "\n" + json.dumps(bad) + "\n{oops\n"
    done = subprocess.run(["node", str(dist / "cli.js"), "evaluate", "--artifact", ref,
                           "--trusted-key", keys[0], "--planner", "myopic"], input=text,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(lines) + 2
    assert out[-2]["line"] == len(lines) + 2 and "impact_cost_theta=-1" in out[-2]["error"]
    assert out[-1]["line"] == len(lines) + 3 and "error" in out[-1]
    for n, doc in enumerate(lines):
        path = tmp_path / f"a{n}.json"
        path.write_text(json.dumps(doc))
        assert amv_main(["gate", "--action", str(path), "--artifact", ref, "--trusted-key",
                         keys[0], "--planner", "myopic"]) == 0
        want = json.loads(capsys.readouterr().out)
        assert out[n] == want


def test_cli_refused_artifact_abstains(dist: Path, artifacts: dict[str, Any]) -> None:
    example = (REPO / "data" / "examples" / "action.json").read_text()
    done = subprocess.run(
        ["node", str(dist / "cli.js"), "evaluate", "--artifact", artifacts["refs"]["iso"][0],
         "--trusted-key", artifacts["other_public"]],
        input=json.dumps(json.loads(example)) + "\n", capture_output=True, text=True,
        timeout=60, check=False)
    assert done.returncode == 0
    d = json.loads(done.stdout)
    assert d["regime"] == "ABSTAIN" and "signature does not verify" in d["reason"]
    assert "every decision is ABSTAIN" in done.stderr


def test_node_unit_tests_pass(dist: Path) -> None:
    """The package's own ``node --test`` suite (strict JSON, formatting, the loader's files)."""
    done = subprocess.run(["npm", "test", "--silent"], cwd=TS.TS_DIR, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.requires_seed
def test_bench_ts_gate_runs(run_bench: Any, dist: Path) -> None:
    """``bench/bench_ts_gate.py --quick --check`` runs (so that it does not rot), and its
    seed-mode side decides every case as the seed engine does."""
    report = run_bench("bench_ts_gate")
    assert report["seed_mode_agrees"] is True and report["cases"] == 200
    for side in ("ts_myopic", "ts_myopic_prepared", "ts_seed_mode"):
        assert len(report[side]["rounds_ns"]) == report["rounds"]


# -- memory kinds --------------------------------------------------------------------------------
N_KIND_CASES = 2_500
#: Gate settings the kind cases cycle through.
_KIND_GATES = ({}, {"planner": "myopic"}, {"harm_price": 3.0, "max_verifications": 2},
               {"mode": "seed"}, {"planner": "lookahead", "reuse_verifiers": True})


@pytest.fixture(scope="module")
def kind_compared(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> dict[str, Any]:
    """2,500 actions on claims with kinds (known, unknown, absent, both spellings), each
    through five kind-aware artifacts in both gates: a libm-free isotonic table, the
    hand-made Platt-like one (``logit`` and ``log1p`` terms, the sigmoid) and three real
    ones, ``platt_kind``, ``beta_kind`` and ``isotonic_kind`` fitted (``logit``, ``log``,
    ``log1m`` and ``log1p`` terms; the sigmoid or an isotonic table); every 10th with a
    decision log."""
    root = tmp_path_factory.mktemp("ts_kinds")
    refs = {"exact": str(export_kinded(root / "models", "kinds-exact",
                                       exact_kinded_calibrator())),
            "linear": str(export_kinded(root / "models", "kinds"))}
    for name in FITTED_KINDS:
        refs[name] = str(export_kinded(root / "models", name.replace("_", "-"),
                                       fitted_kinded_calibrator(name)))
    requests = []
    for i, case in enumerate(kind_cases(N_KIND_CASES)):
        for n, which in enumerate(refs):
            gate = dict(_KIND_GATES[i % len(_KIND_GATES)])
            if i % 10 == 0:
                gate["decision_log"] = str(root / f"{which}-{i}.jsonl")
            requests.append({"id": len(refs) * i + n, "kind": "decide", "ref": refs[which],
                             "trusted_keys": None, "gate": gate, "action": case["action"],
                             "verifiers": case["verifiers"], "run": None, "shape": which})
    ts = TS.run_harness(requests)
    for req in requests:  # the TypeScript logs aside: the Python gate writes its own
        if "decision_log" in req["gate"]:
            log = Path(req["gate"]["decision_log"])
            log.rename(log.with_suffix(".ts"))
    python = _Python()
    py = {r["id"]: python.answer(r) for r in requests}
    return {"requests": requests, "ts": ts, "py": py}


def test_kinds_decide_as_python_bit_for_bit(kind_compared: dict[str, Any]) -> None:
    """Every answer of every artifact equal, bit for bit: the probabilities (the portable
    ``log``, ``log1p`` and ``exp`` on both sides) and so every number and decision."""
    ts, py = kind_compared["ts"], kind_compared["py"]
    seen: Counter[str] = Counter()
    for req in kind_compared["requests"]:
        a, b = {k: v for k, v in ts[req["id"]].items() if k != "id"}, py[req["id"]]
        assert "decision" in a and "decision" in b, (req["id"], a, b)
        assert a == b, (req["id"], req["shape"], _diff(a, b))
        assert [_bits_of(x) for x in a["decision"]["probabilities"]] == \
            [_bits_of(x) for x in b["decision"]["probabilities"]]
        seen[req["shape"]] += 1
        seen[a["decision"]["regime"]] += 1
    print(f"\n{N_KIND_CASES} kind cases on each artifact, equal bit for bit: {dict(seen)}")
    assert all(seen[shape] == N_KIND_CASES for shape in ("exact", "linear", *FITTED_KINDS))
    assert min(seen[r] for r in ("PROCEED", "VERIFY", "ABSTAIN")) >= 100, seen


def test_kind_batches_are_the_ts_gate_s(kind_compared: dict[str, Any]) -> None:
    """The third gate: the compiled batch engine (``calibrate_batch``, ``evaluate_batch``) on
    the same cases through the fitted artifacts, under each gate setting, gives the
    TypeScript gate's probabilities bit for bit and its decisions (regime, verifier, VOI and
    stopping value, bit for bit)."""
    ts = kind_compared["ts"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for req in kind_compared["requests"]:
        if req["shape"] in FITTED_KINDS:
            settings = {k: v for k, v in req["gate"].items() if k != "decision_log"}
            groups.setdefault((req["ref"], json.dumps(settings, sort_keys=True)),
                              []).append(req)
    rows = 0
    for (ref, settings), reqs in groups.items():
        gate = Gate.from_artifact(ref, **json.loads(settings))
        assert gate.calibrator is not None and gate.calibrator.has_kinds
        actions = [CandidateAction.from_dict(r["action"]) for r in reqs]
        offered = [[Verifier.from_dict(v) for v in r["verifiers"]] for r in reqs]
        arr = batch_arrays(actions, offered)
        p = calibrate_batch(gate.calibrator, arr["feat"], arr["mask"], arr["kinds"])
        bd = evaluate_batch(gate, p, arr["mask"], arr["theta"], arr["kappa"], arr["res"],
                            arr["cost"], arr["rel"], arr["avail"])
        for i, req in enumerate(reqs):
            d = ts[req["id"]]["decision"]
            assert [_bits_of(x) for x in p[i, arr["mask"][i]]] == \
                [_bits_of(x) for x in d["probabilities"]], (req["id"], settings)
            want = (d["regime"], d["verifier"], _bits_of(-math.inf if d["voi"] is None
                                                         else d["voi"]), _bits_of(d["v_stop"]))
            got = (("PROCEED", "VERIFY", "ABSTAIN")[int(bd.regime[i])],
                   None if bd.verifier[i] < 0 else offered[i][int(bd.verifier[i])].id,
                   _bits_of(float(bd.voi[i])), _bits_of(float(bd.v_stop[i])))
            assert got == want, (req["id"], settings, got, want)
            rows += 1
    assert rows == len(FITTED_KINDS) * N_KIND_CASES


def _bits_of(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


def test_kind_records_are_python_s(kind_compared: dict[str, Any]) -> None:
    """The decision records of both gates are the same (but the time) on every artifact, and
    name the same kinds: given, and evaluated."""
    seen: Counter[tuple[Any, Any]] = Counter()
    for req in kind_compared["requests"]:
        if "decision_log" not in req["gate"]:
            continue
        log = Path(req["gate"]["decision_log"])
        (a,) = [json.loads(line) for line in log.with_suffix(".ts").read_text().splitlines()]
        (b,) = [json.loads(line) for line in log.read_text().splitlines()]
        assert list(a) == list(b)
        assert {k: v for k, v in a.items() if k != "time"} == \
            {k: v for k, v in b.items() if k != "time"}, (req["shape"], _diff(a, b))
        for pa, pb in zip(a["premises"], b["premises"], strict=True):
            assert list(pa) == list(pb)
            assert (pa.get("memory_kind"), pa["memory_kind_evaluated_as"]) == \
                (pb.get("memory_kind"), pb["memory_kind_evaluated_as"])
            seen[pa.get("memory_kind") is None, pa["memory_kind_evaluated_as"]] += 1
    # known kinds, unknown ones and absent ones all reached "other" or themselves
    assert {(False, "event"), (False, "other"), (True, "other"), (False, "preference")} \
        <= set(seen)


def test_kind_predictions_agree(kind_compared: dict[str, Any]) -> None:
    """``predictOne`` with a kind against ``predict_one``, bit for bit: the libm-free table,
    the hand-made Platt-like and isotonic ones and the two fitted ones."""
    rng = np.random.default_rng(53)
    feats = [{"recency_hours": float(rng.exponential(500.0)),
              "source_trust_score": float(rng.uniform()), "model_confidence": float(rng.uniform()),
              "contradiction_flag": float(rng.uniform() < 0.2)} for _ in range(1000)]
    pool = [*KINDS, *UNKNOWN_KINDS, None]
    kinds = [pool[int(rng.integers(len(pool)))] for _ in feats]
    cals = {"exact": exact_kinded_calibrator(), "linear": kinded_calibrator(),
            "isotonic": kinded_calibrator("isotonic"),
            **{name: fitted_kinded_calibrator(name) for name in FITTED_KINDS}}
    got = TS.run_harness([{"id": n, "kind": "predict", "calibrator": cal.to_dict(),
                           "features": feats, "memory_kinds": kinds}
                          for n, cal in enumerate(cals.values())])
    for n, (name, cal) in enumerate(cals.items()):
        want = [cal.predict_one(f, k) for f, k in zip(feats, kinds, strict=True)]
        assert [_bits_of(x) for x in got[n]["p"]] == [_bits_of(x) for x in want], name


# -- the portable log, log1p and exp -------------------------------------------------------------
def test_portable_math_is_python_s_bit_for_bit(dist: Path) -> None:
    """``portableMath.ts`` against ``amv_calib.contract``'s definition: every boundary of
    fdlibm's paths (both sides), zeros, subnormals, 1 and its neighbours, huge and tiny
    values, infinities, NaN, negatives, and 100,000 random inputs per function, each
    answered with the same bits (NaN as NaN)."""
    fns = {"log": portable_log, "log1p": portable_log1p, "exp": portable_exp}
    corpora = {name: math_corpus(name, 100_000) for name in fns}
    got = TS.run_harness([{"id": n, "kind": "math", "fn": name,
                           "bits": [f"{_bits_of(x):016x}" for x in corpora[name]]}
                          for n, name in enumerate(fns)])
    for n, (name, fn) in enumerate(fns.items()):
        want = [fn(x) for x in corpora[name]]
        answer = [np.uint64(int(b, 16)).view(np.float64) for b in got[n]["bits"]]
        assert len(answer) == len(want)
        apart = [(x, a, w) for x, a, w in zip(corpora[name], answer, want, strict=True)
                 if not (math.isnan(a) and math.isnan(w)) and _bits_of(a) != _bits_of(w)]
        assert not apart, (name, len(apart), apart[:5])
        assert sum(map(math.isnan, want)) >= 10, name  # NaN results were reached
