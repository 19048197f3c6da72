"""Leakage-safe comparison of calibrators: shared folds, out-of-fold metrics, a champion.

Folds (every calibrator gets the same ones, and one ``claim_id`` never sits on both sides):

- ``split="time"``: *blocked* k-fold in time. Each claim is placed at its first use (its
  smallest ``timestamp``); claims are ordered by that time (ties by ``claim_id``) and cut
  into ``folds`` contiguous blocks of about equal row counts: a claim goes to block
  ``floor(folds * m / n)``, ``m`` being the running row count at the claim's middle. Each
  block is a test fold once and the others are its training rows, so every row gets one
  out-of-fold prediction (forward chaining would leave the first block without one, and the
  oracle comparison needs all rows). All rows of a claim, including its later uses, stay in
  its block.
- ``split="group"``: :class:`sklearn.model_selection.GroupKFold` by ``claim_id``.

The champion minimises a proper scoring rule of the pooled out-of-fold predictions
(``log_loss`` by default, ``brier`` possible), with the other as tie-break (values equal to
a relative 1e-9); ECE and MCE only describe. Intervals are bootstrap intervals over rows, from
the same resamples for every calibrator (see :mod:`amv_calib.calibration._metrics`): percentile
intervals for log loss, Brier and AUC; for the calibration errors (ECE, equal-mass ECE, MCE,
smooth ECE), whose resamples are biased upward, the basic interval centred on the value, with
the bootstrap's median bias in ``<metric>_bias``.
When the claims carry ``p_true`` (synthetic data), the oracle's metrics and each
calibrator's excess log loss over it (absolute, with a paired bootstrap interval, and
relative) are reported too; ``p_true`` is never used for fitting.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import numpy as np
from numpy.typing import NDArray

from amv_calib.calibration import _calibrators as calibrators
from amv_calib.calibration._compare_text import _CALIBRATION_ERRORS, _num
from amv_calib.calibration._compare_text import METRIC_NAMES as METRIC_NAMES
from amv_calib.calibration._select import choose_variants, variants, with_kinds
from amv_calib.contract import CLAIM_FEATURES, canonical_name
from amv_calib.exceptions import (
    DataContractError,
    InsufficientDataError,
    MissingColumnsError,
    check_choice,
)
from amv_calib.settings import (
    CALIBRATOR_NAMES,
    DEFAULT_CALIBRATORS,
    DEFAULT_SEED,
    FIELD_RULES,
    CompareOptions,
)

if TYPE_CHECKING:
    import pandas as pd


_log = logging.getLogger(__name__)
#: The defaults of :func:`compare_calibrators` (its command line's, its step's and, through
#: :func:`compare_arguments`, the Spark engine's too).
_OPT: Final = CompareOptions()

FloatArray = NDArray[np.float64]
Split = Literal["time", "group"]
Scoring = Literal["log_loss", "brier"]



def _factories() -> dict[str, Callable[[], Any]]:
    from amv_calib.calibration import _baselines, _kinds

    c = calibrators
    rich = c.RICH_PLATT_MAP
    return {
        "platt_kind": _kinds.KindPlattCalibrator,
        "beta_kind": _kinds.KindBetaCalibrator,
        "isotonic_kind": _kinds.KindIsotonicCalibrator,
        **{rule: (lambda rule=rule: _baselines.FieldRuleBaseline(rule=rule))  # type: ignore[misc]
           for rule in FIELD_RULES},
        "platt": lambda: c.PlattCalibrator(feature_map=rich),
        "platt_seed": c.PlattCalibrator,
        "beta": lambda: c.BetaCalibrator(extra_map=c.RICH_BETA_EXTRA_MAP),
        "beta_seed": c.BetaCalibrator,
        "isotonic": lambda: c.IsotonicCalibrator(feature_map=rich, strict=True),
        "isotonic_step": lambda: c.IsotonicCalibrator(feature_map=rich),
        "seed_prior": c.SeedPriorCalibrator,
    }


_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# -- result -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ComparisonResult:
    """Everything :func:`compare_calibrators` measured.

    Attributes
    ----------
    champion : str
        Name of the calibrator with the best out-of-fold score.
    table : pandas.DataFrame
        One row per calibrator (then ``oracle`` when ``p_true`` is present): ``name``, each
        metric (its value on the pooled out-of-fold predictions) with ``<metric>_low`` /
        ``<metric>_high`` bootstrap bounds, and for ECE, equal-mass ECE, MCE and smooth ECE
        ``<metric>_bias`` (median resample minus value: value minus bias is a debiased
        estimate), the excess log loss columns when there is an oracle, and ``champion``.
    per_fold : pandas.DataFrame
        ``calibrator``, ``fold`` and each metric on that fold's test rows.
    folds : pandas.DataFrame
        ``fold``, ``n_train``, ``n_test``, ``n_test_claims`` and, for time splits, the first
        and last test timestamp (epoch seconds) of each fold.
    reliability : pandas.DataFrame
        Reliability bins (``calibrator``, ``strategy`` and the columns of
        :func:`amv_calib.calibration._metrics.reliability_curve`) of the out-of-fold predictions.
    oof : dict of str to ndarray
        Out-of-fold ``P(violated)`` per calibrator, in input row order.
    y : ndarray
        The ``violated`` labels (0/1) in input row order.
    estimators : dict
        Each calibrator refitted on all rows (empty when ``refit=False``).
    config : dict
        The settings of the run.
    timings : dict
        Seconds spent fitting per calibrator (summed over folds) and in the bootstrap; kept
        out of the written files so those are identical for identical inputs.
    kind_curves, kind_ages : pandas.DataFrame or None
        With a refitted ``platt_kind``: p(stale) against age per kind with its interval, and
        the age at which a typical action is verified or abstained from
        (:mod:`amv_calib.calibration._kindcurves`).
    """

    champion: str
    table: pd.DataFrame
    per_fold: pd.DataFrame
    folds: pd.DataFrame
    reliability: pd.DataFrame
    oof: dict[str, FloatArray]
    y: FloatArray
    estimators: dict[str, Any]
    config: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    kind_curves: pd.DataFrame | None = None
    kind_ages: pd.DataFrame | None = None

    @property
    def champion_estimator(self) -> Any:
        """The champion refitted on all rows."""
        if self.champion not in self.estimators:
            raise KeyError("the comparison ran with refit=False: no refitted champion")
        return self.estimators[self.champion]

    @property
    def has_oracle(self) -> bool:
        """True when the claims carried ``p_true``."""
        return bool((self.table["name"] == "oracle").any())

    def summary(self) -> dict[str, Any]:
        """The object ``amv-calib compare --json`` prints.

        ``{"champion", "scoring", "calibrators": [{"name", <metrics>, "ci": {metric:
        [low, high]}, ...}], "oracle": {...} or null}``; ``ece`` is equal-width,
        ``ece_mass`` equal-mass. Non-finite numbers are ``null``.
        """
        rows: dict[str, dict[str, Any]] = {
            str(r["name"]): {str(k): v for k, v in r.items()}
            for r in self.table.to_dict(orient="records")
        }
        cals = [self._entry(rows[name]) for name in self.oof]
        oracle = self._entry(rows["oracle"]) if "oracle" in rows else None
        return {
            "champion": self.champion,
            "scoring": self.config["scoring"],
            "calibrators": cals,
            "oracle": oracle,
        }

    def _entry(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": row["name"]}
        if row.get("baseline") is True:
            out["baseline"] = True
        for m in METRIC_NAMES:
            out[m] = _num(row[m])
        out["ci"] = {m: [_num(row[f"{m}_low"]), _num(row[f"{m}_high"])] for m in METRIC_NAMES}
        if "excess_log_loss" in row and row["name"] != "oracle":
            out["excess_log_loss"] = _num(row["excess_log_loss"])
            out["excess_log_loss_ci"] = [
                _num(row["excess_log_loss_low"]), _num(row["excess_log_loss_high"])
            ]
            out["excess_log_loss_rel"] = _num(row["excess_log_loss_rel"])
        return out

    def to_dict(self) -> dict[str, Any]:
        """``comparison.json``: :meth:`summary` plus folds, per-fold metrics and config."""
        out = self.summary()
        out["config"] = self.config
        out["folds"] = _records(self.folds)
        out["per_fold"] = _records(self.per_fold)
        return out


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in frame.to_dict(orient="records"):
        out.append({str(k): (v if isinstance(v, str) else _num(v)) for k, v in rec.items()})
    return out


# -- input ------------------------------------------------------------------------------------
def weight_column(columns: Sequence[str], sample_weight: str | None) -> tuple[str | None,
                                                                              bool]:
    """``(column, fill)``: the weight column ``sample_weight`` names among ``columns``, and
    whether its missing values count 1.

    ``"auto"``: ``label_weight`` when present (the soft labels of ``amv-calib label``: rows
    without one count once), else none; ``None`` or ``"none"``: none; any other value: that
    column, every value a number >= 0.
    """
    if sample_weight is None or sample_weight == "none":
        return None, False
    if sample_weight == "auto":
        return ("label_weight", True) if "label_weight" in columns else (None, False)
    return sample_weight, False


def row_weights(table: pd.DataFrame, raw: pd.DataFrame, column: str | None, fill: bool
                ) -> FloatArray:
    """The weights of ``column`` (from the validated ``table``, else the ``raw`` rows it
    came from), missing ones 1 when ``fill``; a negative or missing one is an error."""
    if column is None:
        return np.ones(len(table))
    source = table if column in table.columns else raw
    w = source[column].to_numpy(dtype=np.float64)
    if fill:
        w = np.where(np.isnan(w), 1.0, w)
    bad = ~np.isfinite(w) | (w < 0)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise DataContractError(f"{column} of row {i + 1} (1-based) is {float(w[i])!r}; "
                                "must be a number >= 0")
    return w


def _claims_table(claims: pd.DataFrame, split: str, sample_weight: str | None
                  ) -> tuple[pd.DataFrame, FloatArray]:
    """The claims typed by the ingest's validator, and the row weights.

    Every row must meet the data contract (a row that does not is an error naming it: a
    comparison never drops rows silently). The weight column may lie outside the contract;
    it is read from ``claims`` as given.
    """
    from amv_calib.claims import load_claims

    column, fill = weight_column([str(c) for c in claims.columns], sample_weight)
    present = {canonical_name(str(c)) or str(c) for c in claims.columns}
    missing = [c for c in ("claim_id", "violated", *CLAIM_FEATURES, "timestamp")
               if c not in present]
    if column is not None and column not in claims.columns:
        missing.append(column)
    if missing:
        raise MissingColumnsError(
            f"claims lack column(s) {missing}"
            + (" (every split needs timestamp: it keys a claim's uses)"
               if split != "time" and "timestamp" in missing else ""))
    table, _ = load_claims(claims, on_reject="raise")
    return table, row_weights(table, claims, column, fill)


def tie_break_of(scoring: str) -> Scoring:
    """The proper scoring rule that breaks ties: the one ``scoring`` is not."""
    check_choice("scoring", scoring, ("log_loss", "brier"))
    return "brier" if scoring == "log_loss" else "log_loss"


def _features(table: pd.DataFrame) -> pd.DataFrame:
    """The four features as float64 and the claim ids as integer codes (cheap to group by)."""
    import pandas as pd

    cols = {c: table[c].to_numpy(dtype=np.float64) for c in CLAIM_FEATURES}
    cols["claim_id"] = pd.factorize(table["claim_id"].astype(str))[0].astype(np.int64)
    if "memory_kind" in table.columns:
        cols["memory_kind"] = table["memory_kind"].to_numpy(dtype=object)
    return pd.DataFrame(cols)


def _epoch_seconds(col: pd.Series[Any]) -> FloatArray:
    """Times as epoch seconds, by the data contract's rule; an error names a bad one."""
    from amv_calib.claims import parse_timestamps

    t = parse_timestamps(col)
    bad = t.bad
    if np.any(bad):
        i = int(np.argmax(bad))
        raise DataContractError(f"row {i + 1} (1-based): {t.reason(i)}")
    return t.us() / 1e6


# -- folds ------------------------------------------------------------------------------------
def newest_split(claims: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(older, newest)``: the claims used at or after the time that leaves ``fraction`` of
    the rows newest, and the rest (a time split: every held-out use is later than every
    training use, so promotion can judge a calibrator on a future it never saw).
    ``fraction = 0`` holds nothing out."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"holdout fraction={fraction!r} must lie in [0, 1)")
    if fraction == 0.0 or len(claims) == 0:
        return claims, claims.iloc[:0]
    ts = _epoch_seconds(claims["timestamp"])
    cut = np.sort(ts)[len(ts) - max(1, int(round(fraction * len(ts))))]
    newest = ts >= cut
    if newest.all():
        raise InsufficientDataError(
            f"every claim is used at the same time: no time split holds out {fraction:.0%}")
    return claims[~newest], claims[newest]


def make_folds(
    claims: pd.DataFrame, *, folds: int = 5, split: Split = "time"
) -> NDArray[np.intp]:
    """Test-fold number (``0 .. folds - 1``) of every row; see the module docstring."""
    import pandas as pd

    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds={folds!r} must be an integer >= 2")
    check_choice("split", split, ("time", "group"))
    n = len(claims)
    if n < folds:
        raise InsufficientDataError(f"{n} rows are fewer than folds={folds}")
    codes, uniques = pd.factorize(claims["claim_id"].astype(str), sort=False)
    n_claims = len(uniques)
    if n_claims < folds:
        raise InsufficientDataError(
            f"only {n_claims} distinct claim_id values for folds={folds}: one claim may not "
            "sit on both sides of a split, so each fold needs its own claims"
        )
    sizes = np.bincount(codes, minlength=n_claims)
    if split == "group":
        from sklearn.model_selection import GroupKFold

        out = np.empty(n, dtype=np.intp)
        dummy = np.zeros((n, 1))
        for k, (_, test) in enumerate(GroupKFold(n_splits=folds).split(dummy, groups=codes)):
            out[test] = k
        return out
    ts = _epoch_seconds(claims["timestamp"])
    first = np.full(n_claims, np.inf)
    np.minimum.at(first, codes, ts)
    return time_folds_of_claims(first, sizes, np.asarray(uniques, dtype=str), folds)[codes]


def time_folds_of_claims(first: FloatArray, sizes: NDArray[Any], claim_ids: NDArray[Any],
                         folds: int) -> NDArray[np.intp]:
    """The time split's test fold of each claim, from per-claim aggregates: its first use
    (epoch seconds), its row count and its id (as text); see the module docstring."""
    n = int(sizes.sum())
    order = np.lexsort((np.asarray(claim_ids, dtype=str), first))
    mid = np.cumsum(sizes[order]) - 0.5 * sizes[order]
    claim_fold = np.empty(first.size, dtype=np.intp)
    claim_fold[order] = np.minimum(folds - 1, np.floor(folds * mid / n)).astype(np.intp)
    counts = np.bincount(claim_fold, weights=sizes, minlength=folds)
    if np.any(counts == 0):
        k = int(np.argmax(counts == 0))
        big = int(np.argmax(sizes))
        raise InsufficientDataError(
            f"time fold {k} of {folds} is empty: claim {claim_ids[big]!r} alone holds "
            f"{int(sizes[big])} of {n} rows; use fewer folds or split='group'"
        )
    return claim_fold


def check_fold_labels(y: FloatArray, fold: NDArray[np.intp], folds: int, split: str) -> None:
    for k in range(folds):
        for side, mask in (("test", fold == k), ("training", fold != k)):
            rate = y[mask].mean()
            if rate in (0.0, 1.0):
                value = "True" if rate == 1.0 else "False"
                raise InsufficientDataError(
                    f"fold {k} of {folds} (split={split!r}): all {int(mask.sum())} {side} "
                    f"rows have violated={value}; both outcomes are needed on each side "
                    "(use fewer folds, another split, or more data)"
                )


# -- the comparison ---------------------------------------------------------------------------
def resolve_calibrators(calibrators: Any = None) -> dict[str, Any]:
    """``{name: unfitted estimator}`` of a ``calibrators`` argument of
    :func:`compare_calibrators` (None: the defaults)."""
    from sklearn.base import clone

    factories = _factories()
    if calibrators is None:
        return {name: factories[name]() for name in DEFAULT_CALIBRATORS}
    if isinstance(calibrators, Mapping):
        items = list(calibrators.items())
    elif isinstance(calibrators, (str, bytes)) or not isinstance(calibrators, Sequence):
        raise ValueError("calibrators must be a mapping name -> estimator or a sequence")
    else:
        items = []
        for c in calibrators:
            if isinstance(c, str):
                if c not in factories:
                    raise ValueError(
                        f"unknown calibrator {c!r}; expected one of {list(CALIBRATOR_NAMES)}"
                    )
                items.append((c, factories[c]()))
            else:
                base = re.sub(r"(?<!^)(?=[A-Z])", "_", type(c).__name__).lower()
                base = base.removesuffix("_calibrator")
                name, i = base, 2
                while name in {n for n, _ in items}:
                    name, i = f"{base}_{i}", i + 1
                items.append((name, c))
    out: dict[str, Any] = {}
    for name, est in items:
        if not _NAME_RE.match(str(name)) or name == "oracle":
            raise ValueError(f"calibrator name {name!r} must be a plain file name, not 'oracle'")
        if name in out:
            raise ValueError(f"calibrator name {name!r} is given twice")
        out[str(name)] = clone(est)
    if not out:
        raise ValueError("no calibrators to compare")
    return out


def _metric_values(y: FloatArray, p: FloatArray, w: FloatArray) -> dict[str, float]:
    from amv_calib.calibration._metrics import METRICS, bootstrap_metrics

    # One sort of the rows serves all seven metrics.
    res = bootstrap_metrics({m: METRICS[m] for m in METRIC_NAMES}, y, p, w, n_boot=0)
    return {m: res[m].estimate for m in METRIC_NAMES}


def compare_calibrators(
    claims: pd.DataFrame,
    *,
    calibrators: Mapping[str, Any] | Sequence[Any] | None = _OPT.calibrators,
    folds: int = _OPT.folds,
    split: Split = _OPT.split,
    scoring: Scoring = _OPT.scoring,
    tie_break: Scoring | None = None,
    n_bins: int = _OPT.n_bins,
    n_boot: int = _OPT.n_boot,
    alpha: float = 0.05,
    seed: int = DEFAULT_SEED,
    sample_weight: str | None = _OPT.weights,
    refit: bool = True,
    allow_constant_features: bool = _OPT.allow_constant_features,
    prior: Any = None,
) -> ComparisonResult:
    """Cross-validate calibrators on the same leakage-safe folds and pick a champion.

    The defaults are :class:`~amv_calib.calibration.CompareOptions`' (the command line's
    and the pipeline step's too).

    Parameters
    ----------
    claims : pandas.DataFrame
        Claim outcomes in the data contract (``claim_id``, ``timestamp``, the four claim
        features, ``violated``; camelCase aliases accepted), validated by
        :func:`amv_calib.claims.load_claims`: a row that breaks the contract is a
        :class:`DataContractError` naming it, never dropped. ``p_true`` adds the oracle rows.
    calibrators : mapping or sequence, optional
        ``{name: estimator}``, or estimators and/or names of
        :data:`~amv_calib.settings.CALIBRATOR_NAMES`;
        default :data:`~amv_calib.settings.DEFAULT_CALIBRATORS`. Each is cloned before fitting.
    folds, split
        See the module docstring.
    scoring : {"log_loss", "brier"}
        Proper scoring rule that chooses the champion.
    tie_break : {"log_loss", "brier"}, optional
        Breaks ties; default the rule ``scoring`` is not (:func:`tie_break_of`).
    n_bins : int
        Bins of the reliability curves (ECE and MCE use 15).
    n_boot, alpha, seed
        Bootstrap resamples, interval level and seed (``n_boot=0``: no intervals).
    sample_weight : str, optional
        ``"auto"`` (``label_weight`` when present, missing values 1), ``None`` / ``"none"``
        (unweighted), or the name of a non-negative weight column; used in fitting and in
        every metric (:func:`weight_column`).
    refit : bool
        Refit every calibrator on all rows (for export); default True.
    allow_constant_features : bool
        A claim feature constant over all rows is an error by default: no calibrator can
        learn its effect, and the champion would ignore it in production. True compares
        anyway (its terms get weight 0).
    prior : str, path or PortableCalibrator, optional
        An artifact (loaded and verified as the gate loads it) or a calibrator: adds the
        candidates ``prior`` (it as it is) and, when linear, ``platt_prior`` (a fit shrunk
        towards it, the pull chosen by its marginal likelihood); see
        :mod:`amv_calib.calibration._prior`.

    Raises
    ------
    MissingColumnsError
        A contract column or the weight column is absent.
    ConfigError
        The ``prior`` artifact is refused (the message names it and why).
    DataContractError
        A row breaks the data contract (the message names the row, the field, the value
        and the reason), or a weight is negative or not a number.
    InsufficientDataError
        Too few rows, claims or outcomes for the folds, or a constant feature.
    """
    tie_break = _tie_break(scoring, tie_break)
    table, w = _claims_table(claims, split, sample_weight)
    cals = resolve_calibrators(with_kinds(calibrators, table))
    if prior is not None:
        from amv_calib.calibration._prior import prior_calibrators

        cals.update(prior_calibrators(prior))
    y = table["violated"].to_numpy(dtype=np.float64)
    X = _features(table)
    check_enough_data(y, X, folds, allow_constant_features)
    fold = make_folds(table, folds=folds, split=split)
    check_fold_labels(y, fold, folds, split)
    cv = _cross_validate(cals, X, y, w, fold, folds, scoring)
    estimators = _refit(cals, X, y, w, cv.fit_seconds) if refit else {}
    result = comparison_result(
        oof=cv.oof, y=y, w=w, fold=fold, folds=folds,
        claim_codes=X["claim_id"].to_numpy(),
        ts=_epoch_seconds(table["timestamp"]) if split == "time" else None,
        p_true=_oracle(table), estimators=estimators,
        descriptions={name: describe_calibrator(est) for name, est in cals.items()},
        fit_seconds=cv.fit_seconds, split=split, scoring=scoring, tie_break=tie_break,
        n_bins=n_bins, n_boot=n_boot, alpha=alpha, seed=seed,
        sample_weight=weight_column([str(c) for c in claims.columns], sample_weight)[0],
        allow_constant_features=allow_constant_features, chosen=cv.chosen,
        evidence=_chosen_by_evidence(estimators),
        baselines=[n for n, e in cals.items() if getattr(e, "is_baseline", False)])
    from amv_calib.calibration._kindcurves import kind_outputs

    kinds = kind_outputs(estimators, table)
    if kinds is None:
        return result
    return dataclasses.replace(result, kind_curves=kinds[0], kind_ages=kinds[1])


def _tie_break(scoring: str, tie_break: str | None) -> Scoring:
    """``tie_break``, by default :func:`tie_break_of` ``scoring``; both checked."""
    if tie_break is None and scoring in ("log_loss", "brier"):
        tie_break = tie_break_of(scoring)
    if scoring not in ("log_loss", "brier") or tie_break not in ("log_loss", "brier"):
        raise ValueError(
            f"scoring={scoring!r} and tie_break={tie_break!r} must be proper scoring rules: "
            "'log_loss' or 'brier' (ECE is never used to choose)"
        )
    return cast(Scoring, tie_break)


def compare_arguments(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` as :func:`compare_calibrators` takes them, its defaults filled in and
    ``tie_break`` decided: how another engine
    (:func:`~amv_calib.spark.compare_calibrators_spark`) takes the same keyword arguments
    without writing its parameters a second time.

    Raises
    ------
    TypeError
        A keyword :func:`compare_calibrators` does not take (as a call would raise).
    ValueError
        ``scoring`` or ``tie_break`` is not a proper scoring rule.
    """
    bound = inspect.signature(compare_calibrators).bind(None, **kwargs)
    bound.apply_defaults()
    arguments = {k: v for k, v in bound.arguments.items() if k != "claims"}
    arguments["tie_break"] = _tie_break(arguments["scoring"], arguments["tie_break"])
    return arguments


def compare_signature(engine: Callable[..., Any]) -> inspect.Signature:
    """The signature of ``engine`` with its ``**kwargs`` spelt out as the keyword parameters
    of :func:`compare_calibrators` (those :func:`compare_arguments` binds them to): set as
    ``engine.__signature__``, ``help()`` and :mod:`inspect` show them."""
    own = inspect.signature(engine)
    shared = [p for p in inspect.signature(compare_calibrators).parameters.values()
              if p.kind is p.KEYWORD_ONLY]
    return own.replace(parameters=[*(p for p in own.parameters.values()
                                     if p.kind is not p.VAR_KEYWORD), *shared])


def comparison_result(
    *,
    oof: Mapping[str, FloatArray],
    y: FloatArray,
    w: FloatArray,
    fold: NDArray[np.intp],
    folds: int,
    claim_codes: NDArray[Any],
    ts: FloatArray | None,
    p_true: FloatArray | None,
    estimators: Mapping[str, Any],
    descriptions: Mapping[str, str],
    fit_seconds: Mapping[str, float],
    split: str,
    scoring: str,
    tie_break: str,
    n_bins: int,
    n_boot: int,
    alpha: float,
    seed: int,
    sample_weight: str | None,
    allow_constant_features: bool,
    engine: str | None = None,
    chosen: Mapping[str, Any] | None = None,
    evidence: Mapping[str, Any] | None = None,
    baselines: Sequence[str] = (),
) -> ComparisonResult:
    """The comparison of out-of-fold predictions made elsewhere (the scoring half of
    :func:`compare_calibrators`, shared with the Spark engine, whose predictions are
    collected here): per-fold and pooled metrics with bootstrap intervals, the champion,
    the reliability bins.

    ``oof`` maps each calibrator to its out-of-fold ``P(violated)`` in row order; ``y``,
    ``w``, ``fold``, ``claim_codes`` (integer claim codes) and ``ts`` (epoch seconds, for a
    time split) are per row in the same order; ``p_true`` adds the oracle rows;
    ``estimators`` are the calibrators refitted on all rows and ``descriptions`` their
    settings for ``config``; ``engine`` (when given) is recorded in ``config``, as are the
    settings ``chosen`` by the folds and those the refits chose by their marginal
    likelihood (``evidence``). ``baselines`` name rows reported beside the
    calibrators that never become the champion.
    """
    import pandas as pd

    oof = {name: np.asarray(p, dtype=np.float64) for name, p in oof.items()}
    per_fold, fold_rows = _fold_tables(oof, y, w, fold, folds, claim_codes, ts)
    # Pooled out-of-fold metrics with intervals from shared resamples.
    t = time.perf_counter()
    preds: dict[str, FloatArray] = dict(oof)
    if p_true is not None:
        preds["oracle"] = p_true
    sorted_rows = {name: _sorted_by_p(y, p, w) for name, p in preds.items()}
    rows = [_interval_row(name, *sorted_rows[name], n_boot=n_boot, seed=seed, alpha=alpha)
            for name in preds]
    if p_true is not None:
        _add_excess_log_loss(rows, preds, y, w, n_boot=n_boot, seed=seed, alpha=alpha)
    boot_seconds = time.perf_counter() - t

    champion = _choose([r for r in rows[: len(oof)] if r["name"] not in baselines], scoring,
                       tie_break)
    for row in rows:
        row["champion"] = row["name"] == champion
        if baselines:
            row["baseline"] = row["name"] in baselines
    config: dict[str, Any] = {
        "n_rows": int(y.size),
        "n_claims": int(np.unique(claim_codes).size),
        "violation_rate": float(np.average(y, weights=w)),
        "folds": int(folds),
        "split": split,
        "scoring": scoring,
        "tie_break": tie_break,
        "n_bins": int(n_bins),
        "n_boot": int(n_boot),
        "alpha": float(alpha),
        "seed": int(seed),
        "sample_weight": sample_weight,
        "allow_constant_features": bool(allow_constant_features),
        "calibrators": dict(descriptions),
        "oracle": p_true is not None,
    }
    if engine is not None:
        config["engine"] = engine
    if chosen:
        config["chosen_by_folds"] = dict(chosen)
    if evidence:
        config["chosen_by_evidence"] = dict(evidence)
    if baselines:
        config["baselines"] = list(baselines)
    return ComparisonResult(
        champion=champion,
        table=pd.DataFrame(rows),
        per_fold=pd.DataFrame(per_fold),
        folds=pd.DataFrame(fold_rows),
        reliability=_reliability_bins(oof, sorted_rows, n_bins=n_bins, alpha=alpha),
        oof=oof,
        y=y,
        estimators=dict(estimators),
        config=config,
        timings={**{f"fit_{k}": v for k, v in fit_seconds.items()},
                 "bootstrap": boot_seconds},
    )


def check_enough_data(y: FloatArray, X: pd.DataFrame, folds: int,
                      allow_constant_features: bool) -> None:
    """Rows for the folds, both outcomes, and no constant feature (unless allowed)."""
    n = y.size
    if isinstance(folds, (int, np.integer)) and not isinstance(folds, bool) and n < folds:
        raise InsufficientDataError(f"{n} rows are fewer than folds={folds}")
    if n and y.min() == y.max():
        raise InsufficientDataError(
            f"all {n} rows have violated={'True' if y[0] == 1 else 'False'}; "
            "a calibrator needs both outcomes"
        )
    for c in CLAIM_FEATURES:
        col = X[c].to_numpy()
        if n and col.min() == col.max() and not allow_constant_features:
            raise InsufficientDataError(
                f"feature {c} is constant ({float(col[0])!r}) over all {n} rows: no calibrator can "
                "learn its effect (pass allow_constant_features=True, or "
                "--allow-constant-features, to compare anyway)"
            )


@dataclass(kw_only=True)
class _CrossValidation:
    oof: dict[str, FloatArray]  # out-of-fold P(violated) per calibrator, input row order
    fit_seconds: dict[str, float]
    chosen: dict[str, Any] = field(default_factory=dict)  # settings chosen by the folds


def _cross_validate(cals: dict[str, Any], X: pd.DataFrame, y: FloatArray, w: FloatArray,
                    fold: NDArray[np.intp], folds: int, scoring: str) -> _CrossValidation:
    """Fit every calibrator (each candidate setting of one that has them, keeping the best
    in ``cals``) on each fold's training rows and predict its test rows."""
    from sklearn.base import clone

    found = variants(cals)
    oof = {key: np.full(y.size, np.nan) for key in found}
    cv = _CrossValidation(oof={}, fit_seconds=dict.fromkeys(cals, 0.0))
    for k in range(folds):
        test = fold == k
        train = ~test
        t0 = time.perf_counter()
        Xtr, Xte = X[train], X[test]
        for key, est in found.items():
            t = time.perf_counter()
            fitted = clone(est).fit(Xtr, y[train], sample_weight=w[train])
            cv.fit_seconds[key[0]] += time.perf_counter() - t
            oof[key][test] = fitted.predict_proba(Xte)[:, 1]
        _log.info(
            "fold %d/%d: %d training rows, %d test rows, %.1f s",
            k + 1, folds, int(train.sum()), int(test.sum()), time.perf_counter() - t0,
        )
    cv.oof, cv.chosen = choose_variants(cals, found, oof, y, w, scoring)
    return cv


def _chosen_by_evidence(estimators: Mapping[str, Any]) -> dict[str, Any]:
    """What each refit that chooses its own penalty by its marginal likelihood chose
    (``platt_prior``): ``{name: {"chosen": {"prior_penalty": ...}, "candidates":
    [{"prior_penalty": ..., "log_evidence": ...}]}}``."""
    out: dict[str, Any] = {}
    for name, est in estimators.items():
        ev = getattr(est, "log_evidence_", None)
        if ev:
            out[name] = {"chosen": {"prior_penalty": est.prior_penalty_},
                         "candidates": [{"prior_penalty": k, "log_evidence": v}
                                        for k, v in ev.items()]}
    return out


def _fold_tables(oof: Mapping[str, FloatArray], y: FloatArray, w: FloatArray,
                 fold: NDArray[np.intp], folds: int, claim_codes: NDArray[Any],
                 ts: FloatArray | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-fold metrics of each calibrator's test predictions, and each fold's sizes (with
    the first and last test time, epoch seconds, when ``ts`` is given)."""
    per_fold: list[dict[str, Any]] = []
    fold_rows: list[dict[str, Any]] = []
    for k in range(folds):
        test = fold == k
        for name, p in oof.items():
            per_fold.append({"calibrator": name, "fold": k,
                             **_metric_values(y[test], p[test], w[test])})
        info: dict[str, Any] = {
            "fold": k,
            "n_train": int((~test).sum()),
            "n_test": int(test.sum()),
            "n_test_claims": int(np.unique(claim_codes[test]).size),
        }
        if ts is not None:
            info["test_first_timestamp"] = float(ts[test].min())
            info["test_last_timestamp"] = float(ts[test].max())
        fold_rows.append(info)
    return per_fold, fold_rows


def _sorted_by_p(y: FloatArray, p: FloatArray, w: FloatArray
                 ) -> tuple[FloatArray, FloatArray, FloatArray]:
    # Sorted once by p, the rows serve the bootstrap and both reliability curves.
    order = np.argsort(p, kind="stable")
    return y[order], p[order], w[order]


def _interval_row(name: str, ys: FloatArray, ps: FloatArray, ws: FloatArray, *,
                  n_boot: int, seed: int, alpha: float) -> dict[str, Any]:
    """``name``, each metric and its bootstrap bounds (rows sorted by ``ps``)."""
    from amv_calib.calibration._metrics import METRICS, bootstrap_metrics

    ints = bootstrap_metrics({m: METRICS[m] for m in METRIC_NAMES}, ys, ps, ws, n_boot=n_boot,
                             seed=seed, alpha=alpha)
    row: dict[str, Any] = {"name": name}
    for m in METRIC_NAMES:
        row[m] = ints[m].estimate
        row[f"{m}_low"] = ints[m].low
        row[f"{m}_high"] = ints[m].high
        if m in _CALIBRATION_ERRORS:
            row[f"{m}_bias"] = ints[m].bias
    return row


def _add_excess_log_loss(rows: list[dict[str, Any]], preds: Mapping[str, FloatArray],
                         y: FloatArray, w: FloatArray, *, n_boot: int, seed: int,
                         alpha: float) -> None:
    """Each row's log loss above the oracle's (the last row), with a paired interval."""
    from amv_calib.calibration._metrics import bootstrap_counts

    ll_oracle = _row_log_loss(y, preds["oracle"])
    base = rows[-1]["log_loss"]
    for row in rows:
        d = _row_log_loss(y, preds[row["name"]]) - ll_oracle
        est_, lo, hi = _paired_mean(d, w, n_boot, seed, alpha, bootstrap_counts)
        row["excess_log_loss"] = est_
        row["excess_log_loss_low"] = lo
        row["excess_log_loss_high"] = hi
        row["excess_log_loss_rel"] = est_ / base if base > 0 else math.nan


def _reliability_bins(
    cals: Mapping[str, Any],
    sorted_rows: Mapping[str, tuple[FloatArray, FloatArray, FloatArray]],
    *, n_bins: int, alpha: float,
) -> pd.DataFrame:
    """Equal-width, equal-mass and tail-split equal-mass reliability bins of each
    calibrator's predictions (the figure draws the last; ECE uses the first two)."""
    import pandas as pd

    from amv_calib.calibration._metrics import reliability_curve

    rel = []
    for name in cals:
        for strategy in ("uniform", "quantile", "quantile_tail"):
            ys, ps, ws = sorted_rows[name]
            rc = reliability_curve(ys, ps, ws, n_bins=n_bins, strategy=strategy, alpha=alpha)
            rc.insert(0, "strategy", strategy)
            rc.insert(0, "calibrator", name)
            rel.append(rc)
    return pd.concat(rel, ignore_index=True)


def _refit(cals: Mapping[str, Any], X: pd.DataFrame, y: FloatArray, w: FloatArray,
           fit_seconds: dict[str, float]) -> dict[str, Any]:
    """Every calibrator refitted on all rows (for export); adds to ``fit_seconds``."""
    from sklearn.base import clone

    estimators: dict[str, Any] = {}
    for name, est in cals.items():
        t = time.perf_counter()
        estimators[name] = clone(est).fit(X, y, sample_weight=w)
        fit_seconds[name] += time.perf_counter() - t
    _log.info("refitted %d calibrators on all %d rows", len(cals), y.size)
    return estimators


def describe_calibrator(est: Any) -> str:
    """``Class(param=value, ...)``: how ``comparison.json`` names a calibrator's settings."""
    return f"{type(est).__name__}({_params(est)})"


def _params(est: Any) -> str:
    parts = []
    for k, v in sorted(est.get_params(deep=False).items()):
        parts.append(f"{k}={getattr(v, 'names', v)!r}")
    return ", ".join(parts)


def _oracle(claims: pd.DataFrame) -> FloatArray | None:
    if "p_true" not in claims.columns:
        return None
    try:
        p = claims["p_true"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        _log.warning("p_true is not numeric: no oracle rows")
        return None
    if not np.all(np.isfinite(p) & (p >= 0) & (p <= 1)):
        _log.warning("p_true is missing or outside [0, 1] on some rows: no oracle rows")
        return None
    return p


def _row_log_loss(y: FloatArray, p: FloatArray) -> FloatArray:
    from amv_calib.calibration._metrics import LOG_EPS

    pc = np.clip(p, LOG_EPS, 1.0 - LOG_EPS)
    out: FloatArray = -(y * np.log(pc) + (1.0 - y) * np.log1p(-pc))
    return out


def _paired_mean(
    d: FloatArray, w: FloatArray, n_boot: int, seed: int, alpha: float,
    counts: Callable[[int, int, int], Any],
) -> tuple[float, float, float]:
    """Weighted mean of ``d`` and its bootstrap interval over the shared resamples."""
    est = float((w * d).sum() / w.sum())
    vals = []
    for c in counts(d.size, n_boot, seed):
        wb = c * w
        s = wb.sum()
        if s > 0:
            vals.append(float((wb * d).sum() / s))
    if not vals:
        return est, math.nan, math.nan
    lo, hi = np.quantile(vals, [alpha / 2.0, 1.0 - alpha / 2.0])
    return est, float(lo), float(hi)


def _choose(rows: list[dict[str, Any]], scoring: str, tie_break: str) -> str:
    best = min(r[scoring] for r in rows)
    tied = [r for r in rows if math.isclose(r[scoring], best, rel_tol=1e-9, abs_tol=0.0)]
    return str(min(tied, key=lambda r: r[tie_break])["name"])


# -- writing ----------------------------------------------------------------------------------
def _reliability_figure(result: ComparisonResult, histogram: Any) -> Any:
    """The comparison's reliability diagram: every calibrator's out-of-fold curve on
    equal-mass bins, the panel titles with equal-mass ECE and log loss and their intervals."""
    from amv_calib.calibration._figures import comparison_figure

    return comparison_figure(result.reliability, result.table, histogram=histogram,
                             config=result.config, champion=result.champion)


def write_comparison(result: ComparisonResult, out_dir: str | Path) -> dict[str, Path]:
    """Write the compare directory layout; returns ``{file name: path}``.

    Files: ``comparison.csv``, ``comparison.md``, ``comparison.json``, ``reliability.png``,
    ``reliability_bins.csv``, ``prediction_histogram.csv`` (the figure's histogram),
    ``champion.json`` (portable form of the refitted champion),
    ``champion.joblib``, and ``calibrators/<name>.json`` / ``.joblib`` for every calibrator
    (never a baseline); with memory kinds ``kinds.md``, ``kinds.csv``,
    ``kinds_staleness.csv`` and ``kinds_staleness.png``.
    """
    import joblib

    from amv_calib.calibration._compare_text import comparison_markdown
    from amv_calib.calibration._figures import prediction_histogram, write_figure_png

    out = Path(out_dir)
    (out / "calibrators").mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    def put(name: str, text: str) -> None:
        p = out / name
        p.write_text(text, encoding="utf-8")
        paths[name] = p

    put("comparison.csv", result.table.to_csv(index=False, lineterminator="\n"))
    put("comparison.md", comparison_markdown(result))
    put("comparison.json", json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
    put("reliability_bins.csv", result.reliability.to_csv(index=False, lineterminator="\n"))
    histogram = prediction_histogram(result.oof)
    put("prediction_histogram.csv", histogram.to_csv(index=False, lineterminator="\n"))
    paths["reliability.png"] = write_figure_png(_reliability_figure(result, histogram),
                                                out / "reliability.png")
    if result.kind_curves is not None and result.kind_ages is not None:
        from amv_calib.calibration import _kindcurves as kc

        put("kinds_staleness.csv", result.kind_curves.to_csv(index=False, lineterminator="\n"))
        put("kinds.csv", result.kind_ages.to_csv(index=False, lineterminator="\n"))
        put("kinds.md", kc.kind_age_markdown(result.kind_ages))
        paths["kinds_staleness.png"] = write_figure_png(
            kc.kind_age_figure(result.kind_curves, result.kind_ages),
            out / "kinds_staleness.png")
    if result.estimators:
        for name, est in result.estimators.items():
            if getattr(est, "is_baseline", False):
                continue
            portable = est.to_portable().to_dict()
            put(f"calibrators/{name}.json", json.dumps(portable, indent=2) + "\n")
            joblib.dump(est, out / "calibrators" / f"{name}.joblib")
            paths[f"calibrators/{name}.joblib"] = out / "calibrators" / f"{name}.joblib"
        champ = result.champion_estimator
        put("champion.json", json.dumps(champ.to_portable().to_dict(), indent=2) + "\n")
        joblib.dump(champ, out / "champion.joblib")
        paths["champion.joblib"] = out / "champion.joblib"
    return paths
