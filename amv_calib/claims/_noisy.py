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
from numpy.typing import NDArray

from amv_calib.claims._arrow import BoolArray, FloatArray, IntArray
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


def posterior(p_logged: FloatArray, llr: FloatArray) -> FloatArray:
    """A verifier label's ``q = sigmoid(logit(prior) + LLR)``; the prior is the gate's ``p``
    clipped to [1e-6, 1 - 1e-6] (0.5 when missing), a NaN LLR counts as 0."""
    prior = np.where(np.isfinite(p_logged), np.clip(p_logged, 1e-6, 1 - 1e-6), 0.5)
    return np.asarray(sigmoid(np.log(prior) - np.log1p(-prior)
                              + np.where(np.isnan(llr), 0.0, llr)), dtype=np.float64)


def label_rows(hard: BoolArray, soft: BoolArray, label: BoolArray, q_soft: FloatArray
               ) -> tuple[IntArray, BoolArray, FloatArray, NDArray[np.int8]]:
    """The claim rows of some uses, in use order (violated first): one per outcome-labelled
    (``hard``) use, two (weights ``q``, ``1 - q``; weight 0 dropped) per verifier-labelled
    (``soft``) one, ``q_soft`` holding ``q`` of the soft uses in order. Returns the use
    position, ``violated``, the weight and whether the row comes from a verifier (0/1) of
    each row."""
    hi = np.flatnonzero(hard)
    si = np.flatnonzero(soft)
    q = np.asarray(q_soft, dtype=np.float64)
    if q.size != si.size:
        raise ValueError(f"q_soft: {q.size} values for {si.size} soft uses")
    pos_rows = si[q > 0]
    neg_rows = si[q < 1]
    n_h, n_s = hi.size, pos_rows.size + neg_rows.size
    idx = np.concatenate([hi, pos_rows, neg_rows])
    # filled in place: a big log's rows are millions, each array of them a copy less
    viol = np.zeros(idx.size, dtype=bool)
    viol[:n_h] = label[hi]
    viol[n_h:n_h + pos_rows.size] = True
    weight = np.empty(idx.size)
    weight[:n_h] = 1.0
    weight[n_h:n_h + pos_rows.size] = q[q > 0]
    weight[n_h + pos_rows.size:] = 1.0 - q[q < 1]
    from_verifier = np.zeros(idx.size, dtype=np.int8)
    from_verifier[n_h:] = 1
    if not n_s:  # the outcome rows alone: in use order already
        return idx, viol, weight, from_verifier
    # Use order, a verifier-labelled use's violated row first: the hard and soft uses are
    # distinct, and a soft use's rows were concatenated violated first (stable sort).
    order = np.argsort(idx, kind="stable")
    return idx[order], viol[order], weight[order], from_verifier[order]
