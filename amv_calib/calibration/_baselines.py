"""The hand-set staleness rules of open-source agent-memory projects, as comparison baselines.

Each rule gives a claim a *freshness* score from its age (``recency_hours``), and for some
rules its kind and the model's confidence; :class:`FieldRuleBaseline` maps the score to a
probability by a centred isotonic fit on its training rows only (decreasing: the fresher,
the less often violated), so that each rule is judged at its best. The rules:

- ``halflife-45d``: ``0.5 ** (age / 45 days)`` (exponential decay, a fact's age restarting
  when it is saved again, as ``recency_hours`` does);
- ``halflife-90d-weighted``: ``confidence * 0.5 ** (age / 90 days) * weight[category]``;
- ``windows-per-kind``: facts and preferences never expire, behaviour after 90 days, events
  after 30, opinions after 60. The score is minus the age as a share of the kind's window
  (the rule expires a memory at -1; the monotone fit may choose any other cut, and a
  window that never closes scores 0);
- ``power-law``: ``(1 + age / 1 day) ** -rate[category]`` with per-category rates.

Our kinds are mapped to the rules' categories by one table, :data:`KIND_CATEGORIES`; a kind
it does not name (and a claim without a kind) is a ``fact``. The constants are those the
rules' authors ship or propose; the rules are baselines: never a champion, never exported.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from amv_calib.calibration._calibrators import IsotonicCalibrator, _claim_matrix
from amv_calib.calibration._kinds import kind_values
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.settings import FIELD_RULES

FloatArray = NDArray[np.float64]


#: Our memory kinds -> the categories the rules know (fact, preference, behaviour, event,
#: opinion). Any other kind, and a claim without one, is a ``fact``.
KIND_CATEGORIES: Final[dict[str, str]] = {
    "fact": "fact", "deployment": "fact", "configuration": "fact", "config": "fact",
    "account": "fact", "contact": "fact", "identity": "fact", "credential": "fact",
    "preference": "preference", "setting": "preference",
    "behaviour": "behaviour", "behavior": "behaviour", "habit": "behaviour",
    "routine": "behaviour",
    "event": "event", "plan": "event", "schedule": "event", "task": "event",
    "opinion": "opinion", "belief": "opinion", "sentiment": "opinion",
}
#: ``halflife-90d-weighted``'s weight per category.
CATEGORY_WEIGHTS: Final = {"fact": 1.0, "preference": 0.9, "behaviour": 0.8, "event": 0.6,
                           "opinion": 0.7}
#: ``windows-per-kind``'s freshness windows, in days (inf: never expires).
CATEGORY_WINDOWS_DAYS: Final = {"fact": math.inf, "preference": math.inf, "behaviour": 90.0,
                                "event": 30.0, "opinion": 60.0}
#: ``power-law``'s decay rates per category ("provisional, to be tuned").
CATEGORY_POWER_RATES: Final = {"fact": 0.05, "preference": 0.1, "behaviour": 0.3,
                               "event": 0.6, "opinion": 0.2}

__all__ = ["CATEGORY_POWER_RATES", "CATEGORY_WEIGHTS", "CATEGORY_WINDOWS_DAYS", "FIELD_RULES",
           "KIND_CATEGORIES", "FieldRuleBaseline", "category_of", "field_rule_score"]

_HOURS_PER_DAY: Final = 24.0


def category_of(kind: str | None) -> str:
    """The rules' category of one of our kinds (:data:`KIND_CATEGORIES`; else ``fact``)."""
    if kind is None:
        return "fact"
    return KIND_CATEGORIES.get(kind.strip().lower(), "fact")


def field_rule_score(rule: str, X: Any) -> FloatArray:
    """The freshness score of ``rule`` for each claim of the frame ``X`` (the claim features
    and, when present, ``memory_kind``): the higher, the fresher."""
    if rule not in FIELD_RULES:
        raise ValueError(f"rule={rule!r} must be one of {list(FIELD_RULES)}")
    arr, _ = _claim_matrix(X)
    arr = np.asarray(arr, dtype=np.float64)
    age = arr[:, CLAIM_FEATURES.index("recency_hours")]
    days = age / _HOURS_PER_DAY
    kinds = kind_values(X)
    cats = (["fact"] * age.size if kinds is None
            else [category_of(k) for k in kinds])
    if rule == "halflife-45d":
        return np.asarray(np.exp2(-days / 45.0))
    if rule == "halflife-90d-weighted":
        conf = arr[:, CLAIM_FEATURES.index("model_confidence")]
        weight = np.array([CATEGORY_WEIGHTS[c] for c in cats])
        return np.asarray(conf * np.exp2(-days / 90.0) * weight)
    if rule == "windows-per-kind":
        window = np.array([CATEGORY_WINDOWS_DAYS[c] for c in cats])
        return np.asarray(-(days / window))
    rate = np.array([CATEGORY_POWER_RATES[c] for c in cats])
    return np.asarray(np.power(1.0 + age / _HOURS_PER_DAY, -rate))


class FieldRuleBaseline(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """One field rule's freshness score, mapped to ``P(violated)`` by a centred isotonic
    fit on the training rows (decreasing in the score).

    Parameters
    ----------
    rule : str
        One of :data:`FIELD_RULES`.

    Attributes
    ----------
    isotonic_ : IsotonicCalibrator
        The monotone map of the score.
    classes_ : ndarray
    """

    #: The comparison reports it beside the calibrators and never makes it the champion.
    is_baseline: Final = True

    def __init__(self, *, rule: str = "halflife-45d") -> None:
        self.rule = rule

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FieldRuleBaseline:
        """Fit the monotone map of the rule's score; returns ``self``."""
        score = field_rule_score(self.rule, X)
        self.isotonic_ = IsotonicCalibrator(plain_score="decreasing", strict=True).fit(
            score, y, sample_weight=sample_weight)
        self.classes_ = self.isotonic_.classes_
        return self

    def predict_proba(self, X: Any) -> FloatArray:
        """Probabilities of ``classes_``, shape (n, 2); column 1 is ``P(violated)``."""
        check_is_fitted(self)
        return np.asarray(self.isotonic_.predict_proba(field_rule_score(self.rule, X)))

    def predict(self, X: Any) -> NDArray[Any]:
        """``classes_[1]`` where ``P(violated) > 0.5``, else ``classes_[0]``."""
        p1 = self.predict_proba(X)[:, 1]
        return np.asarray(self.classes_[(p1 > 0.5).astype(np.intp)])

    def to_portable(self, **_: Any) -> Any:
        """A baseline has no portable form: it is compared, never exported."""
        raise TypeError(f"the field rule {self.rule!r} is a comparison baseline; it is never "
                        "exported")
