"""What the kinds mean to a user: p(stale) against age per kind, and the age at which a
typical action stops proceeding.

From the kind-aware Platt fit (:class:`~amv_calib.calibration.KindPlattCalibrator`), for each
kind of its vocabulary and a typical claim of that kind (the kind's median trust and
confidence, no contradiction):

- ``kind_age_curves``: ``P(violated)`` over ages from an hour to two years, with a pointwise
  interval from the fit's penalised Hessian (the Laplace approximation of the logit's
  standard error, the L2 penalty read as a Gaussian prior), mapped through the sigmoid;
- ``kind_age_table``: the youngest age at which the gate (its default thresholds) no longer
  PROCEEDs with a typical action: VERIFY with a verifier at hand, ABSTAIN without one. The
  learned answer to "what half-life should I set".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit
from scipy.stats import norm

from amv_calib.contract import CLAIM_FEATURES

if TYPE_CHECKING:
    import pandas as pd

FloatArray = NDArray[np.float64]

#: Ages of the curves and of the table's search, in hours (1 h to two years, log-spaced).
AGES_HOURS: Final = np.round(np.geomspace(1.0, 2 * 8760.0, 121), 6)
#: The typical action of the age table: a medium-impact action (a wrong one costs 10, not
#: acting 2) and a cheap, fairly reliable verifier (cost 0.2, symmetric reliability 0.95).
TYPICAL_ACTION: Final = {"impact_cost_theta": 10.0, "abstention_cost_kappa": 2.0,
                         "verifier_cost": 0.2, "verifier_reliability": 0.95}


def _typical(claims: pd.DataFrame, kind: str, known: bool) -> dict[str, float]:
    rows = claims[claims["memory_kind"] == kind] if known else claims
    if len(rows) == 0:
        rows = claims
    return {"source_trust_score": float(rows["source_trust_score"].median()),
            "model_confidence": float(rows["model_confidence"].median()),
            "contradiction_flag": 0.0}


def _grid(features: dict[str, float], kind: str, ages: FloatArray) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame({c: np.full(ages.size, features.get(c, 0.0)) for c in CLAIM_FEATURES})
    frame["recency_hours"] = ages
    frame["memory_kind"] = kind
    return frame


def kind_age_curves(estimator: Any, claims: pd.DataFrame, *, alpha: float = 0.05,
                    ages: FloatArray = AGES_HOURS) -> pd.DataFrame:
    """``memory_kind``, ``age_hours``, ``p``, ``p_low``, ``p_high`` of a typical claim of
    each kind of the fitted kind-aware Platt ``estimator`` (whose ``cov_`` is the inverse
    penalised Hessian) that had training uses, over ``ages``."""
    import pandas as pd

    z_crit = float(norm.ppf(1.0 - alpha / 2.0))
    known = set(claims["memory_kind"].dropna().astype(str)) if "memory_kind" in claims \
        else set()
    out = []
    # A kind without training uses (``other``, when every claim named a kept kind) is the
    # pooled fit with unshrunk doubt: no curve to read.
    uses = getattr(estimator, "kind_uses_", {})
    for kind in (k for k in estimator.kinds_ if uses.get(k, 1) > 0):
        X = _grid(_typical(claims, kind, kind in known), kind, ages)
        A = estimator.design_rows(X)
        z = estimator.decision_function(X)
        se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", A, estimator.cov_, A), 0.0))
        out.append(pd.DataFrame({"memory_kind": kind, "age_hours": ages, "p": expit(z),
                                 "p_low": expit(z - z_crit * se),
                                 "p_high": expit(z + z_crit * se)}))
    return pd.concat(out, ignore_index=True)


def kind_age_table(estimator: Any, claims: pd.DataFrame,
                   ages: FloatArray = AGES_HOURS) -> pd.DataFrame:
    """Per kind: its typical claim, ``p`` at one day, 30 and 365 days, and the youngest ages
    (hours, on the ``ages`` grid; NaN: not within it) at which the gate with its default
    thresholds and the fitted calibrator VERIFYs the typical action (a verifier at hand) and
    ABSTAINs from it (none)."""
    import pandas as pd

    from amv_calib.gate import CandidateAction, Gate, MemoryClaim, Premise, Verifier

    gate = Gate(calibrator=estimator.to_portable())
    act = TYPICAL_ACTION
    verifier = Verifier(id="typical-verifier", resolves_premise_ids=("p1",),
                        execution_cost=act["verifier_cost"],
                        symmetric_reliability=act["verifier_reliability"])
    known = set(claims["memory_kind"].dropna().astype(str)) if "memory_kind" in claims \
        else set()
    rows = []
    for kind in estimator.kinds_:
        typical = _typical(claims, kind, kind in known)

        def regime(age: float, verifiers: tuple[Verifier, ...], kind: str = kind,
                   typical: dict[str, float] = typical) -> str:
            claim = MemoryClaim(id="typical", recency_hours=float(age),
                                source_trust_score=typical["source_trust_score"],
                                model_confidence=typical["model_confidence"],
                                contradiction_flag=False)
            action = CandidateAction(
                action_id="typical", tool_name="typical",
                impact_cost_theta=act["impact_cost_theta"],
                abstention_cost_kappa=act["abstention_cost_kappa"],
                premises=(Premise(id="p1", claim=claim, memory_kind=kind),))
            return str(gate.evaluate(action, verifiers).regime)

        def first(want: str, verifiers: tuple[Verifier, ...]) -> float:
            for age in ages:
                if regime(float(age), verifiers) == want:
                    return float(age)
            return math.nan

        X = _grid(typical, kind, np.array([24.0, 720.0, 8760.0]))
        p = estimator.predict_proba(X)[:, 1]
        rows.append({"memory_kind": kind, **typical, "p_1d": float(p[0]),
                     "p_30d": float(p[1]), "p_365d": float(p[2]),
                     "verify_from_hours": first("VERIFY", (verifier,)),
                     "abstain_from_hours": first("ABSTAIN", ())})
    return pd.DataFrame(rows)


def kind_age_figure(curves: pd.DataFrame, table: pd.DataFrame | None = None) -> Any:
    """p(stale) against age (days, log scale) per kind, with its interval band, and the
    age at which the typical action is VERIFIED marked on each curve."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8.0, 5.0))
    ax = fig.add_subplot(1, 1, 1)
    for kind, part in curves.groupby("memory_kind", sort=True):
        days = part["age_hours"].to_numpy() / 24.0
        line = ax.plot(days, part["p"], label=str(kind))[0]
        ax.fill_between(days, part["p_low"], part["p_high"], color=line.get_color(),
                        alpha=0.2, linewidth=0)
        if table is not None:
            hit = table.loc[table["memory_kind"] == kind, "verify_from_hours"]
            if len(hit) and math.isfinite(float(hit.iloc[0])):
                at = float(hit.iloc[0])
                ax.plot([at / 24.0], [float(np.interp(at, part["age_hours"], part["p"]))],
                        marker="o", color=line.get_color())
    ax.set_xscale("log")
    # plain numbers: the default 10^k labels go through mathtext, whose font lookups warn on
    # stderr where its fonts are missing
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_xlabel("age of the memory (days)")
    ax.set_ylabel("P(stale) of a typical claim")
    ax.set_title("Learned staleness per memory kind (band: 95% interval; dot: VERIFY from)")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(True, alpha=0.3)
    return fig


def kind_outputs(estimators: Any, claims: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The curves and the age table of the refitted ``platt_kind``, when there is one."""
    est = estimators.get("platt_kind") if hasattr(estimators, "get") else None
    if est is None or not hasattr(est, "cov_"):
        return None
    return kind_age_curves(est, claims), kind_age_table(est, claims)


def kind_age_markdown(table: pd.DataFrame) -> str:
    """``kinds.md``: the age table as text."""
    act = TYPICAL_ACTION

    def days(hours: float) -> str:
        return "beyond 2 years" if not math.isfinite(hours) else f"{hours / 24.0:.1f} d"

    lines = ["# Staleness per memory kind", "",
             "A typical claim of each kind (its median trust and confidence, no "
             "contradiction), scored by the kind-aware Platt fit; the gate with its default "
             f"thresholds on an action with impact cost {act['impact_cost_theta']:g} and "
             f"abstention cost {act['abstention_cost_kappa']:g}, with a verifier (cost "
             f"{act['verifier_cost']:g}, reliability {act['verifier_reliability']:g}) or "
             "without one. The youngest age at which it no longer proceeds is the learned "
             "answer to \"what half-life should I set\".", "",
             "| kind | p at 1 d | p at 30 d | p at 365 d | VERIFY from | ABSTAIN from (no "
             "verifier) |", "|---|---:|---:|---:|---:|---:|"]
    for r in table.to_dict(orient="records"):
        lines.append(f"| {r['memory_kind']} | {r['p_1d']:.4f} | {r['p_30d']:.4f} | "
                     f"{r['p_365d']:.4f} | {days(r['verify_from_hours'])} | "
                     f"{days(r['abstain_from_hours'])} |")
    return "\n".join(lines) + "\n"
