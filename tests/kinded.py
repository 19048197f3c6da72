"""A hand-made calibrator with memory kinds, and an artifact of it, for the gate tests.

The kinds age differently: an "event" grows stale with a steep recency slope, a
"preference" with a gentle one, a "fact" by a log1p of its age; "other" keeps the shared
terms only. The numbers are made up (a fit is calibration's business, not the gate's).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from amv_calib.contract import (
    SEED_CLAMP,
    FeatureMap,
    PortableCalibrator,
    Term,
    calibrator_sha256,
    check_thresholds,
    with_gate_clamp,
)

#: The vocabulary, and kinds a gate input may carry that it does not hold.
KINDS = ("event", "fact", "other", "preference")
UNKNOWN_KINDS = ("opinion", "x", "Event", "\U0001f600")

_SHARED = (
    Term(column="model_confidence", transform="logit"),
    Term(column="recency_hours", transform="ramp", scale=720.0),
    Term(column="source_trust_score", transform="identity"),
    Term(column="contradiction_flag", transform="indicator"),
)
_BY_KIND = (
    Term(column="recency_hours", transform="ramp", scale=720.0, kind="event"),
    Term(column="recency_hours", transform="log1p", scale=2160.0, kind="fact"),
    Term(column="recency_hours", transform="ramp", scale=720.0, kind="preference"),
)


def kinded_calibrator(kind: str = "linear") -> PortableCalibrator:
    """Platt-like (``kind="linear"``) or an isotonic table over the same index."""
    iso = kind == "isotonic"
    return PortableCalibrator(
        kind="isotonic" if iso else "linear",
        feature_map=FeatureMap(_SHARED + _BY_KIND),
        intercept=-0.85,
        coef=(-1.42, 2.15, -1.80, 2.5, 1.7, 0.6, -0.9),
        kinds=KINDS,
        kind_intercept=(0.3, -0.4, 0.0, -0.2),
        x_knots=(-6.0, -3.0, -1.0, 0.5, 2.0, 4.0) if iso else (),
        y_knots=(0.002, 0.02, 0.15, 0.45, 0.8, 0.97) if iso else (),
        clamp=SEED_CLAMP,
        source=f"hand-made kinds ({kind})",
    )


def certificate_for(calibrator: PortableCalibrator, thresholds: dict[str, Any]
                    ) -> dict[str, Any]:
    """A certificate bound to ``calibrator`` and ``thresholds`` (its numbers made up)."""
    cal, gate = with_gate_clamp(calibrator, check_thresholds(thresholds))
    return {"alpha": 0.01, "delta": 0.05, "n": 900, "chosen": 0, "thresholds": gate,
            "path": [gate], "harms": [1], "observed_upper_bound": 0.0052,
            "calibrator_sha256": calibrator_sha256(cal)}


def export_kinded(models: Path, name: str = "amv-kinds",
                  calibrator: PortableCalibrator | None = None, **kwargs: Any) -> Path:
    """Export ``calibrator`` (default :func:`kinded_calibrator`) under ``models/name`` with
    the default thresholds and a certificate; the version folder."""
    from amv_calib.artifacts import DEFAULT_THRESHOLDS, export_artifact

    cal = kinded_calibrator() if calibrator is None else calibrator
    thresholds = dict(DEFAULT_THRESHOLDS)
    res = export_artifact(calibrator=cal, thresholds=thresholds, name=name, models_dir=models,
                          include_joblib=False, certificate=certificate_for(cal, thresholds),
                          **kwargs)
    return Path(res.path)


#: libm-free shared and kind terms: a claim's index is the same double in every language, so
#: an isotonic table over it gives the same probability bit for bit (V8's and glibc's
#: log and exp may differ in the last bit; identity, ramp and indicator use neither).
_EXACT = (
    Term(column="model_confidence", transform="identity"),
    Term(column="recency_hours", transform="ramp", scale=720.0),
    Term(column="source_trust_score", transform="identity", by="model_confidence"),
    Term(column="contradiction_flag", transform="indicator"),
    Term(column="recency_hours", transform="ramp", scale=240.0, kind="event"),
    Term(column="recency_hours", transform="ramp", scale=2160.0, kind="fact"),
    Term(column="source_trust_score", transform="identity", kind="preference"),
)


def exact_kinded_calibrator() -> PortableCalibrator:
    """An isotonic table over a libm-free index with kind intercepts and kind terms."""
    return PortableCalibrator(
        kind="isotonic", feature_map=FeatureMap(_EXACT), intercept=0.4,
        coef=(-3.1, 1.7, -0.9, 2.2, 2.5, 0.8, -1.1), kinds=KINDS,
        kind_intercept=(0.6, -0.5, 0.0, -0.3),
        x_knots=(-3.5, -2.5, -1.5, -0.75, 0.0, 0.5, 1.25, 2.0, 3.0),
        y_knots=(0.0, 0.01, 0.03, 0.06, 0.12, 0.2, 0.45, 0.7, 1.0),
        clamp=(0.002, 0.995), source="hand-made kinds (exact)",
    )


#: The kind-aware calibrators of the comparison that :func:`fitted_kinded_calibrator` fits.
FITTED_KINDS = ("platt_kind", "beta_kind", "isotonic_kind")


@cache
def fitted_kinded_calibrator(name: str) -> PortableCalibrator:
    """A real kind-aware calibrator: ``platt_kind``, ``beta_kind`` or ``isotonic_kind``
    fitted on 3,000 synthetic claims whose kinds age differently, in its portable form. Its
    terms take ``logit``, ``log``, ``log1m`` and ``log1p`` of the claim and its probability
    the sigmoid (the first two) or an isotonic table over that index (the third), so every
    claim goes through the portable ``log`` and ``log1p`` (and ``exp``); its vocabulary
    (behaviour, deployment, event, fact, opinion, other, preference) holds some of
    :func:`kind_cases`' kinds and not others."""
    from amv_calib.calibration import (
        KindBetaCalibrator,
        KindIsotonicCalibrator,
        KindPlattCalibrator,
    )
    from amv_calib.datasets import synth_kind_claims

    cls = {"platt_kind": KindPlattCalibrator, "beta_kind": KindBetaCalibrator,
           "isotonic_kind": KindIsotonicCalibrator}[name]
    claims = synth_kind_claims(3000, seed=5)
    return cls().fit(claims.drop(columns=["violated"]), claims["violated"].to_numpy()
                     ).to_portable()


def kind_cases(n: int, seed: int = 53) -> list[dict[str, Any]]:
    """``n`` actions on 1 to 4 claims each, as gate inputs (plain JSON): every claim with a
    kind of the vocabulary, one outside it, or none (``memory_kind``, ``memoryKind`` or
    both); 0 to 3 verifiers over one or two premises. Each item: ``action``, ``verifiers``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pool: list[str | None] = [*KINDS, *UNKNOWN_KINDS, None, None]
    out = []
    for i in range(n):
        m = int(rng.integers(1, 5))
        premises = []
        for j in range(m):
            conf = float(rng.beta(5.0, 1.2)) if rng.uniform() < 0.9 else float(
                rng.choice([0.0, 1.0, 0.5]))
            hours = float(rng.exponential(600.0)) if rng.uniform() < 0.9 else float(
                rng.choice([0.0, 240.0, 720.0, 2160.0, 1e5]))
            pm: dict[str, Any] = {
                "id": f"a{i}p{j}",
                "claim": {"id": f"c{i}-{j}", "source_trust_score": float(rng.beta(3.0, 1.5)),
                          "model_confidence": conf, "recency_hours": hours,
                          "contradiction_flag": bool(rng.uniform() < 0.15)}}
            kind = pool[int(rng.integers(len(pool)))]
            spelling = int(rng.integers(4))
            if kind is not None or spelling == 3:
                if spelling in (0, 2, 3):
                    pm["memory_kind"] = kind
                if spelling in (1, 2):
                    pm["memoryKind"] = kind
            premises.append(pm)
        ids = [p["id"] for p in premises]
        verifiers = [
            {"id": f"v{v}", "resolves_premise_ids": sorted(
                {ids[int(rng.integers(m))] for _ in range(int(rng.integers(1, 3)))}),
             "execution_cost": float(rng.choice([0.0, 0.05, 0.3, 1.5])),
             "symmetric_reliability": float(rng.choice([1.0, 0.95, 0.8, 0.6]))}
            for v in range(int(rng.integers(0, 4)))]
        out.append({"action": {"action_id": f"a{i}", "tool_name": "t",
                               "impact_cost_theta": float(rng.choice([5.0, 40.0, 300.0])),
                               "abstention_cost_kappa": float(rng.choice([0.5, 2.0, 10.0])),
                               "premises": premises},
                    "verifiers": verifiers})
    return out


def batch_arrays(actions: list[Any], offered: list[list[Any]]) -> dict[str, Any]:
    """The compiled batch gate's arrays for ``actions`` (``CandidateAction``) and the
    ``Verifier`` lists offered with them: ``feat`` (n, m, 4), ``mask``, ``kinds`` (object),
    ``theta``, ``kappa``, ``res`` (n, V, m), ``cost``, ``rel`` and ``avail``, premise slots
    and verifier columns in the given order."""
    import numpy as np

    from amv_calib.contract import CLAIM_FEATURES

    n = len(actions)
    m = max(len(a.premises) for a in actions)
    n_ver = max(1, max(len(v) for v in offered))
    out: dict[str, Any] = {
        "feat": np.zeros((n, m, 4)), "mask": np.zeros((n, m), dtype=bool),
        "kinds": np.full((n, m), None, dtype=object),
        "theta": np.array([a.impact_cost_theta for a in actions]),
        "kappa": np.array([a.abstention_cost_kappa for a in actions]),
        "res": np.zeros((n, n_ver, m), dtype=bool), "cost": np.zeros((n, n_ver)),
        "rel": np.full((n, n_ver), 0.9), "avail": np.zeros((n, n_ver), dtype=bool)}
    for i, (action, verifiers) in enumerate(zip(actions, offered, strict=True)):
        for j, pm in enumerate(action.premises):
            f = pm.claim.features()
            out["feat"][i, j] = [f[k] for k in CLAIM_FEATURES]
            out["mask"][i, j], out["kinds"][i, j] = True, pm.memory_kind
        index = {pm.id: j for j, pm in enumerate(action.premises)}
        for v, ver in enumerate(verifiers):
            out["avail"][i, v] = True
            out["cost"][i, v], out["rel"][i, v] = ver.execution_cost, ver.symmetric_reliability
            for pid in ver.resolves_premise_ids:
                out["res"][i, v, index[pid]] = True
    return out
