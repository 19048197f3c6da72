"""Settings chosen by the comparison's own folds, and the kind-aware additions to it.

A calibrator with a ``candidate_params()`` method (the kind-aware calibrators: their
shrinkage towards the pooled fit) is cross-validated once per candidate setting on the
comparison's folds; the setting whose pooled out-of-fold predictions score best under the
comparison's proper scoring rule is kept, and the calibrator is refitted with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from amv_calib.settings import DEFAULT_CALIBRATORS, FIELD_RULES, KIND_CALIBRATORS

if TYPE_CHECKING:
    import pandas as pd

FloatArray = NDArray[np.float64]
Variant = tuple[str, int]


def with_kinds(calibrators: Any, table: pd.DataFrame) -> Any:
    """``calibrators``, or when none are given and the claims name at least two memory
    kinds, the defaults plus the kind-aware calibrators and the field's rules."""
    from amv_calib.calibration._kinds import KIND_COLUMN

    if calibrators is not None or KIND_COLUMN not in table.columns:
        return calibrators
    if table[KIND_COLUMN].dropna().nunique() < 2:
        return calibrators
    return (*DEFAULT_CALIBRATORS, *KIND_CALIBRATORS, *FIELD_RULES)


def variants(cals: Mapping[str, Any]) -> dict[Variant, Any]:
    """``{(name, i): estimator}``: each calibrator once per candidate setting (``i = 0``
    for a calibrator without candidates)."""
    from sklearn.base import clone

    out: dict[Variant, Any] = {}
    for name, est in cals.items():
        params = est.candidate_params() if hasattr(est, "candidate_params") else [{}]
        for i, p in enumerate(params):
            out[(name, i)] = clone(est).set_params(**p) if p else est
    return out


def _score(y: FloatArray, p: FloatArray, w: FloatArray, scoring: str) -> float:
    from amv_calib.calibration._metrics import LOG_EPS

    if scoring == "brier":
        return float(np.average((p - y) ** 2, weights=w))
    pc = np.clip(p, LOG_EPS, 1.0 - LOG_EPS)
    return float(np.average(-(y * np.log(pc) + (1.0 - y) * np.log1p(-pc)), weights=w))


def choose_variants(cals: dict[str, Any], found: Mapping[Variant, Any],
                    oof: Mapping[Variant, FloatArray], y: FloatArray, w: FloatArray,
                    scoring: str) -> tuple[dict[str, FloatArray], dict[str, Any]]:
    """Each calibrator's out-of-fold predictions under its best setting, and what was
    chosen (``{name: {"chosen": params, "candidates": [{params, scoring: value}]}}``, for
    calibrators with candidates). ``cals[name]`` is replaced by the chosen estimator, so the
    refit uses the chosen setting. The earliest candidate wins a tie."""
    out: dict[str, FloatArray] = {}
    chosen: dict[str, Any] = {}
    for name in cals:
        keys = [key for key in found if key[0] == name]
        if len(keys) == 1:
            out[name] = oof[keys[0]]
            continue
        scores = [_score(y, oof[key], w, scoring) for key in keys]
        best = keys[int(np.argmin(scores))]
        cals[name] = found[best]
        out[name] = oof[best]
        params = cals[name].candidate_params()
        chosen[name] = {"chosen": params[best[1]],
                        "candidates": [{**params[key[1]], scoring: s}
                                       for key, s in zip(keys, scores, strict=True)]}
    return out, chosen
