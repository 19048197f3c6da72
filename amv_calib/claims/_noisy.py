"""Training on verifier soft labels: EM over the signal likelihood.

:func:`fit_noisy_labels` fits a calibrator on the claim rows of the label join
(:func:`amv_calib.claims._join.label_claims`), refining each verifier label's posterior with
the model's own prediction until it settles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from amv_calib.contract import CLAIM_FEATURES, sigmoid
from amv_calib.exceptions import MissingColumnsError


# ---------------------------------------------------------------------------------------------
# Training on verifier soft labels: EM over the signal likelihood
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class NoisyLabelFit:
    """Result of :func:`fit_noisy_labels`: the fitted estimator and how EM went."""

    estimator: Any
    n_iter: int
    converged: bool
    max_delta: float


def fit_noisy_labels(
    estimator: Any,
    claims: pd.DataFrame,
    *,
    max_iter: int = 50,
    tol: float = 1e-5,
) -> NoisyLabelFit:
    """Fit ``estimator`` on claims whose verifier labels are refined by EM.

    Rows with ``label_source == "outcome"`` are fixed labels. Each verifier-labelled use
    (two rows sharing a ``use_id``) gets ``q = sigmoid(logit(p(x)) + signal_llr)`` where
    ``p`` is the current model's prediction (starting from the weights in ``claims``, i.e.
    the gate's logged prior); the estimator is refitted with ``sample_weight`` until no
    ``q`` moves by more than ``tol``. This maximises the likelihood of the observed signals
    given the known reliabilities, so it recovers the calibrator even when the logging gate
    was miscalibrated.

    Parameters
    ----------
    estimator : scikit-learn classifier
        Takes the four claim features and ``fit(X, y, sample_weight=...)``; refitted in place.
    claims : DataFrame
        Output of :func:`label_claims` (needs ``label_weight``, ``label_source``,
        ``use_id`` and ``signal_llr``).
    max_iter : int, default 50
        EM iterations at most.
    tol : float, default 1e-5
        Stop when the largest change of a soft label is below this.
    """
    need = {"label_weight", "label_source", "use_id", "signal_llr", *CLAIM_FEATURES, "violated"}
    missing = sorted(need - set(claims.columns))
    if missing:
        raise MissingColumnsError(f"fit_noisy_labels needs columns {missing}")
    feats = list(CLAIM_FEATURES)
    hard = claims.loc[claims["label_source"] != "verifier"]
    soft = claims.loc[claims["label_source"] == "verifier"]
    uses = soft.drop_duplicates("use_id", keep="first")
    Xs = uses[feats].reset_index(drop=True)
    llr = uses["signal_llr"].to_numpy(dtype=np.float64)
    q0 = soft.loc[soft["violated"].to_numpy(dtype=bool)].set_index("use_id")["label_weight"]
    q = q0.reindex(uses["use_id"].to_numpy()).fillna(0.0).to_numpy(dtype=np.float64)
    Xh = hard[feats].reset_index(drop=True)
    yh = hard["violated"].to_numpy(dtype=bool)
    wh = hard["label_weight"].to_numpy(dtype=np.float64)
    X = pd.concat([Xh, Xs, Xs], ignore_index=True)
    y = np.concatenate([yh, np.ones(len(Xs), bool), np.zeros(len(Xs), bool)])
    delta = math.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        w = np.concatenate([wh, q, 1.0 - q])
        estimator.fit(X, y, sample_weight=w)
        if len(Xs) == 0:
            delta = 0.0
            break
        p = np.clip(estimator.predict_proba(Xs)[:, 1], 1e-12, 1 - 1e-12)
        q_new = sigmoid(np.log(p) - np.log1p(-p) + llr)
        delta = float(np.max(np.abs(q_new - q)))
        q = q_new
        if delta < tol:
            break
    return NoisyLabelFit(estimator=estimator, n_iter=n_iter, converged=delta < tol,
                         max_delta=delta)
