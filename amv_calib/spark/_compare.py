"""The calibrator comparison on Spark: the same folds, fits, out-of-fold metrics and champion.

What runs where (docs/scale.md):

- **Spark** (executors): reading the claims, validating each batch by the data contract
  (:func:`amv_calib.claims.load_claims`, so the executors need amv-calib installed), the
  feature maps (the same numpy code), every logistic fit (MLlib ``LogisticRegression``),
  every isotonic fit (MLlib ``IsotonicRegression``) and the out-of-fold predictions
  (through the portable calibrators, the same code the gate runs).
- **The driver**: per-claim aggregates (first use, row count) give the folds and the
  isotonic cross-fitting parts by the single-machine rules; the out-of-fold predictions are
  collected (a few numbers per row) and scored by the single-machine metric code
  (:func:`amv_calib.calibration.comparison_result`), which also chooses the champion.

Same objective: scikit-learn's ``LogisticRegression(C)`` minimises ``C * sum(w * loss) +
|beta|^2 / 2`` (intercept not penalised); MLlib minimises ``sum(w * loss) / sum(w) +
regParam * |beta|^2 / 2``, so ``regParam = 1 / (C * sum(w))`` on the training rows of each
fit, with ``standardization=False`` (the penalty on the terms as the map computes them) and
``elasticNetParam=0``. ``C=None`` fits unpenalised (``regParam=0``). Beta's ``abm``
constraints use the same drop-and-refit rule, each refit an MLlib fit on the kept terms.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.calibration import (
    DEFAULT_PLATT_MAP,
    BetaCalibrator,
    ComparisonResult,
    IsotonicCalibrator,
    PlattCalibrator,
    SeedPriorCalibrator,
    check_enough_data,
    check_fold_labels,
    compare_arguments,
    compare_signature,
    comparison_result,
    describe_calibrator,
    resolve_calibrators,
    row_weights,
    time_folds_of_claims,
    weight_column,
)
from amv_calib.contract import (
    CLAIM_FEATURES,
    FeatureMap,
    PortableCalibrator,
    seed_prior_calibrator,
)
from amv_calib.exceptions import DataContractError, InsufficientDataError, check_choice
from amv_calib.spark._session import DEFAULT_MASTER

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]

#: Convergence of the MLlib logistic fits (L-BFGS): tight, so that the coefficients agree
#: with the single-machine Newton fit.
MLLIB_TOL: Final = 1e-12
MLLIB_MAX_ITER: Final = 2000
#: How the logistic fits run: ``"irls"`` (MLlib's GeneralizedLinearRegression, binomial /
#: logit: Newton's method, as the single-machine fit) or ``"lbfgs"`` (MLlib's
#: LogisticRegression; the same optimum, many more passes). See :func:`_logistic`.
SOLVER: str = "irls"
#: Convergence of the IRLS fits (relative change of the coefficients).
IRLS_TOL: Final = 1e-7
_MAX_OUTER: Final = 20
#: The IRLS weight sum S has settled when a refit moves it by less than this (relative): the
#: penalty is then right to that precision, which moves the coefficients by about as much
#: times their penalty effect (< 1e-5 on the rich map's terms).
_S_RTOL: Final = 1e-5
_ALL: Final = -1  # the fit index of the refit on all rows


@dataclass(frozen=True)
class SparkCalibrator:
    """A calibrator fitted on Spark, kept as its portable form (what the artifact holds).

    ``to_portable()`` and ``predict_proba(X)`` behave as the single-machine calibrators'.
    """

    portable: PortableCalibrator
    name: str

    def to_portable(self, *, clamp: tuple[float, float] | None = None) -> PortableCalibrator:
        """The fitted model as plain data; ``clamp`` replaces its own clamp."""
        if clamp is None:
            return self.portable
        import dataclasses

        return dataclasses.replace(self.portable, clamp=(float(clamp[0]), float(clamp[1])))

    def predict_proba(self, X: Any) -> FloatArray:
        """Probabilities of ``[not violated, violated]``, shape (n, 2)."""
        p1 = self.portable.predict(X)
        return np.column_stack([1.0 - p1, p1])


# -- what each calibrator needs -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class _Plan:
    """How one calibrator is fitted on Spark."""

    kind: str  # "platt", "beta", "isotonic", "seed"
    fmap: FeatureMap | None = None
    C: float | None = None
    constrained: tuple[tuple[int, int, float], ...] = ()
    index: str = "platt"
    cv: int = 2
    strict: bool = False
    increasing: bool = True
    random_state: int = 0


def _plan(name: str, est: Any) -> _Plan:
    unsupported = ValueError(
        f"calibrator {name!r} ({describe_calibrator(est)}) is not supported by the Spark "
        "engine (claim-feature Platt, Beta, isotonic and the seed prior are)")
    if getattr(est, "plain_score", None) is not None:
        raise unsupported
    if isinstance(est, PlattCalibrator):
        return _Plan(kind="platt", C=est.C,
                     fmap=DEFAULT_PLATT_MAP if est.feature_map is None else est.feature_map)
    if isinstance(est, BetaCalibrator):
        fmap, constrained = est.design()
        return _Plan(kind="beta", C=est.C, fmap=fmap, constrained=tuple(constrained))
    if isinstance(est, IsotonicCalibrator):
        if est.index == "seed":
            fmap = seed_prior_calibrator().feature_map
        else:
            fmap = DEFAULT_PLATT_MAP if est.feature_map is None else est.feature_map
        return _Plan(kind="isotonic", C=est.C, fmap=fmap, index=est.index, cv=int(est.cv),
                     strict=bool(est.strict), increasing=bool(est.increasing),
                     random_state=int(est.random_state))
    if isinstance(est, SeedPriorCalibrator):
        return _Plan(kind="seed")
    raise unsupported


# -- reading and preparing the claims ----------------------------------------------------------
def _read(spark: SparkSession, claims: Any) -> DataFrame:
    """A Spark DataFrame of the claims: a path (Parquet file or directory, CSV, JSONL), a
    pandas DataFrame or a Spark DataFrame."""
    import pandas as pd
    from pyspark.sql import DataFrame

    if isinstance(claims, DataFrame):
        return claims
    if isinstance(claims, pd.DataFrame):
        return spark.createDataFrame(claims.reset_index(drop=True))
    path = os.fspath(claims)
    suffix = Path(path).suffix.lower()
    if Path(path).is_dir() or suffix in (".parquet", ".pq"):
        return spark.read.parquet(path)
    if suffix in (".csv", ".tsv"):
        return spark.read.csv(path, header=True, sep="\t" if suffix == ".tsv" else ",")
    if suffix in (".jsonl", ".ndjson", ".json"):
        return spark.read.json(path)
    raise DataContractError(f"{path}: unknown claims file type {suffix!r}")


def _prepared_schema(n_terms: Sequence[int]) -> str:
    cols = ["_row long", "claim_id string", "t_us long", "y double", "w double",
            *(f"x{j} double" for j in range(len(CLAIM_FEATURES))), "p_true double"]
    cols += [f"f{i}_{j} double" for i, n in enumerate(n_terms) for j in range(n)]
    return ", ".join(cols)


def _prepare(maps: Sequence[FeatureMap], weight: str | None, fill: bool) -> Any:
    """The mapInPandas function: validate each batch by the data contract, compute ``y``,
    ``w`` (:func:`~amv_calib.calibration.row_weights`), the use time, the raw features and
    every feature map's terms."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pandas as pd

        from amv_calib.claims import load_claims, parse_timestamps

        for batch in batches:
            rows = batch["_row"].to_numpy(dtype=np.int64)
            raw = batch.drop(columns=["_row"])
            table, _ = load_claims(raw, on_reject="raise")
            w = row_weights(table, raw, weight, fill)
            X = np.column_stack([table[c].to_numpy(dtype=np.float64) for c in CLAIM_FEATURES])
            out: dict[str, Any] = {
                "_row": rows,
                "claim_id": table["claim_id"].astype(str).to_numpy(),
                "t_us": parse_timestamps(table["timestamp"]).us(),
                "y": table["violated"].to_numpy(dtype=np.float64),
                "w": w,
            }
            for j in range(X.shape[1]):
                out[f"x{j}"] = X[:, j]
            if "p_true" in table.columns:
                out["p_true"] = pd.to_numeric(table["p_true"], errors="coerce").to_numpy(
                    dtype=np.float64)
            else:
                out["p_true"] = np.full(len(table), np.nan)
            for i, fmap in enumerate(maps):
                F = fmap.transform(X)
                for j in range(F.shape[1]):
                    out[f"f{i}_{j}"] = F[:, j]
            yield pd.DataFrame(out)

    return run


# -- folds and parts from per-claim aggregates ---------------------------------------------------
def _split_parts_of_claims(codes: NDArray[np.int64], cv: int, seed: int) -> NDArray[np.intp]:
    """Cross-fitting part of each of the (sorted, distinct) claim codes of a fit's training
    rows: the isotonic calibrator's seeded permutation of whole claims."""
    rng = np.random.default_rng(seed)
    part = np.empty(codes.size, dtype=np.intp)
    part[rng.permutation(codes.size)] = np.arange(codes.size) % cv
    return part


def _claim_table(agg: pd.DataFrame, folds: int, split: str,
                 iso: Mapping[str, _Plan]) -> pd.DataFrame:
    """Per claim: its code (order of first appearance), test fold and, for every isotonic
    calibrator and fit, its cross-fitting part (-1 when the claim is not a training claim)."""
    agg = agg.sort_values("first_row", kind="stable").reset_index(drop=True)
    n_claims = len(agg)
    sizes = agg["n"].to_numpy(dtype=np.int64)
    n = int(sizes.sum())
    if n_claims < folds:
        raise InsufficientDataError(
            f"only {n_claims} distinct claim_id values for folds={folds}: one claim may not "
            "sit on both sides of a split, so each fold needs its own claims")
    codes = np.arange(n_claims, dtype=np.int64)
    if split == "group":
        from sklearn.model_selection import GroupKFold

        groups = np.repeat(codes, sizes)
        row_fold = np.empty(n, dtype=np.intp)
        for k, (_, test) in enumerate(GroupKFold(n_splits=folds).split(
                np.zeros((n, 1)), groups=groups)):
            row_fold[test] = k
        fold = row_fold[np.cumsum(sizes) - sizes]
    else:
        first = agg["first_t"].to_numpy(dtype=np.int64) / 1e6
        fold = time_folds_of_claims(first, sizes, agg["claim_id"].to_numpy(dtype=str), folds)
    agg["code"] = codes
    agg["fold"] = fold
    for i, plan in enumerate(iso.values()):
        if plan.index != "platt":
            continue
        for k in [*range(folds), _ALL]:
            train = fold != k
            part = np.full(n_claims, -1, dtype=np.int64)
            part[train] = _split_parts_of_claims(codes[train], plan.cv, plan.random_state)
            agg[_part_col(i, k)] = part
    return agg


def _part_col(i: int, k: int) -> str:
    """The column of the cross-fitting parts of the ``i``-th isotonic calibrator's fit ``k``."""
    return f"part_{i}_{'all' if k == _ALL else k}"


# -- fits -----------------------------------------------------------------------------------------
def _reg_param(C: float | None, weight_sum: float) -> float:
    if C is None or not np.isfinite(C):
        return 0.0
    return 1.0 / (float(C) * weight_sum)


def _logistic(df: DataFrame, vec: str, C: float | None, weight_sum: float,
              n_terms: int, keep: NDArray[np.intp] | None = None) -> tuple[float, FloatArray]:
    """Intercept and coefficients (zeros outside ``keep`` and on terms constant over the
    rows of positive weight, as the single-machine fit does) of an MLlib logistic fit.

    MLlib's ``GeneralizedLinearRegression(family="binomial", link="logit")`` is logistic
    regression fitted by IRLS, Newton's method as the single-machine fit: a few passes over
    the data. Its ridge term is scaled by the sum of the IRLS weights ``S = sum(w * p * (1 -
    p))``, so ``regParam = 1 / (C * S)`` makes its fixed point scikit-learn's ``C`` objective;
    ``S`` is taken from the previous fit until it settles (two or three fits).
    ``LogisticRegression`` (L-BFGS, :data:`SOLVER` ``"lbfgs"``) reaches the same optimum but
    needs hundreds of passes at the tolerance that makes the coefficients agree to 1e-4.
    """
    from pyspark.ml.stat import Summarizer
    from pyspark.sql import functions as F

    keep = np.arange(n_terms) if keep is None else np.asarray(keep)
    live = df.filter(F.col("w") > 0)
    stats = live.agg(Summarizer.metrics("min", "max").summary(F.col(vec)).alias("s"),
                     F.sum(F.col("w") * F.col("y")).alias("wy")).collect()[0]
    lo = np.asarray(stats["s"]["min"].toArray())
    hi = np.asarray(stats["s"]["max"].toArray())
    keep = keep[lo[keep] != hi[keep]]
    coef = np.zeros(n_terms, dtype=np.float64)
    rate = min(max(float(stats["wy"]) / weight_sum, 1e-12), 1.0 - 1e-12)
    if keep.size == 0:
        return float(np.log(rate / (1.0 - rate))), coef
    col = vec
    if keep.size < n_terms:
        from pyspark.ml.feature import VectorSlicer

        col = f"{vec}_kept"
        df = VectorSlicer(inputCol=vec, outputCol=col,
                          indices=[int(i) for i in keep]).transform(df)
    if SOLVER == "lbfgs":
        from pyspark.ml.classification import LogisticRegression

        lr = LogisticRegression(featuresCol=col, labelCol="y", weightCol="w",
                                family="binomial", regParam=_reg_param(C, weight_sum),
                                elasticNetParam=0.0, standardization=False, fitIntercept=True,
                                maxIter=MLLIB_MAX_ITER, tol=MLLIB_TOL)
        model: Any = lr.fit(df)
    else:
        from pyspark.ml.regression import GeneralizedLinearRegression

        s = weight_sum * rate * (1.0 - rate)
        for _ in range(_MAX_OUTER):
            glr = GeneralizedLinearRegression(
                family="binomial", link="logit", featuresCol=col, labelCol="y", weightCol="w",
                regParam=_reg_param(C, s), fitIntercept=True, maxIter=50, tol=IRLS_TOL,
                predictionCol="_mu")
            model = glr.fit(df)
            if _reg_param(C, s) == 0.0:
                break
            mu = F.col("_mu")
            s_new = float(model.transform(df).agg(
                F.sum(F.col("w") * mu * (1.0 - mu))).collect()[0][0])
            settled = abs(s_new - s) <= _S_RTOL * s
            _log.debug("IRLS fit: %d iterations, S %.10g -> %.10g",
                       model.summary.numIterations, s, s_new)
            s = s_new
            if settled:
                break
    coef[keep] = np.asarray(model.coefficients.toArray(), dtype=np.float64)
    return float(model.intercept), coef


def _beta_fit(df: DataFrame, vec: str, plan: _Plan, weight_sum: float
              ) -> tuple[float, FloatArray]:
    """Beta's drop-and-refit rule, every refit an MLlib fit on the kept terms."""
    assert plan.fmap is not None
    n_terms = len(plan.fmap.terms)
    active = np.ones(n_terms, dtype=bool)
    while True:
        b, coef = _logistic(df, vec, plan.C, weight_sum, n_terms, np.flatnonzero(active))
        drop: list[int] = []
        for first, other, sign in plan.constrained:
            if active[first] and sign * coef[first] < 0:
                drop.append(first)
            elif active[other] and sign * coef[other] < 0:
                drop.append(other)
        if not drop:
            return b, coef
        active[drop] = False


def _index_values(fmap: FeatureMap, models: Mapping[int, tuple[float, FloatArray]],
                  part_col: str | None) -> Any:
    """mapInPandas: ``z`` of each row, from the index model of its part (``part_col``) or
    the one model (key 0) when there are no parts."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pandas as pd

        for b in batches:
            X = b[[f"x{j}" for j in range(len(CLAIM_FEATURES))]].to_numpy(dtype=np.float64)
            F = fmap.transform(X)
            z = np.empty(len(b))
            part = b[part_col].to_numpy() if part_col else np.zeros(len(b), dtype=np.int64)
            for k, (b0, coef) in models.items():
                sel = part == k
                z[sel] = F[sel] @ coef + b0
            yield pd.DataFrame({"z": z, "y": b["y"].to_numpy(), "w": b["w"].to_numpy()})

    return run


def _isotonic_fit(spark: SparkSession, df: DataFrame, plan: _Plan, vec: str,
                  part_col: str | None, weight_of_part: Mapping[int, float]
                  ) -> tuple[float, FloatArray, FloatArray, FloatArray]:
    """The cross-fitted index (mean of the part fits), and the isotonic knots over it."""
    from pyspark.ml.regression import IsotonicRegression
    from pyspark.sql import functions as F

    assert plan.fmap is not None
    n_terms = len(plan.fmap.terms)
    if plan.index == "seed":
        seed = seed_prior_calibrator()
        models = {0: (seed.intercept, np.asarray(seed.coef, dtype=np.float64))}
        b_mean, coef_mean = models[0]
        part_col = None
    else:
        assert part_col is not None
        models = {}
        for k in range(plan.cv):
            other = df.filter(F.col(part_col) != k)
            models[k] = _logistic(other, vec, plan.C, weight_of_part[k], n_terms)
        b_mean = float(np.mean([b for b, _ in models.values()]))
        coef_mean = np.mean([c for _, c in models.values()], axis=0)
    sign = 1.0 if plan.increasing else -1.0
    zdf = df.mapInPandas(_index_values(plan.fmap, models, part_col),
                         "z double, y double, w double").filter(F.col("w") > 0)
    if sign < 0:
        zdf = zdf.withColumn("z", -F.col("z"))
    zdf = zdf.cache()
    try:
        model = IsotonicRegression(featuresCol="z", labelCol="y", weightCol="w",
                                   isotonic=True).fit(zdf)
        bounds = np.asarray(model.boundaries.toArray(), dtype=np.float64)
        preds = np.asarray(model.predictions.toArray(), dtype=np.float64)
        if not plan.strict:
            xk, yk = bounds, preds
        else:
            xk, yk = _centred_knots(spark, zdf, bounds, preds)
    finally:
        zdf.unpersist()
    return sign * b_mean, sign * np.asarray(coef_mean), xk, yk


def _centred_knots(spark: SparkSession, zdf: DataFrame, bounds: FloatArray,
                   preds: FloatArray) -> tuple[FloatArray, FloatArray]:
    """One knot per block (a run of equal fitted values) at its weighted mean index."""
    import pandas as pd
    from pyspark.sql import functions as F

    start = np.flatnonzero(np.r_[True, preds[1:] != preds[:-1]])
    lows = bounds[start]
    bc = spark.sparkContext.broadcast(lows)

    def block_of(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for b in batches:
            z = b["z"].to_numpy()
            blk = np.searchsorted(bc.value, z, side="right") - 1
            yield pd.DataFrame({"blk": np.maximum(blk, 0), "wz": b["w"].to_numpy() * z,
                                "w": b["w"].to_numpy()})

    agg = (zdf.mapInPandas(block_of, "blk long, wz double, w double").groupBy("blk")
           .agg(F.sum("wz").alias("wz"), F.sum("w").alias("w")).toPandas()
           .sort_values("blk"))
    bc.unpersist()
    centre = np.full(start.size, np.nan)
    centre[agg["blk"].to_numpy()] = agg["wz"].to_numpy() / agg["w"].to_numpy()
    return centre, preds[start]


def _portable(plan: _Plan, b: float, coef: FloatArray,
              knots: tuple[FloatArray, FloatArray] | None = None) -> PortableCalibrator:
    assert plan.fmap is not None
    xk, yk = ((), ()) if knots is None else knots
    source = {"platt": "platt", "beta": "beta"}.get(
        plan.kind, "isotonic-strict" if plan.strict else "isotonic")
    return PortableCalibrator(
        kind="isotonic" if plan.kind == "isotonic" else "linear", feature_map=plan.fmap,
        intercept=float(b), coef=tuple(float(c) for c in coef),
        x_knots=tuple(float(v) for v in xk), y_knots=tuple(float(v) for v in yk),
        source=source)


def _oof_predictions(portables: Mapping[str, Mapping[int, PortableCalibrator]]) -> Any:
    """mapInPandas: each row's prediction by each calibrator's model of the row's fold."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pandas as pd

        for b in batches:
            X = b[[f"x{j}" for j in range(len(CLAIM_FEATURES))]].to_numpy(dtype=np.float64)
            fold = b["fold"].to_numpy()
            out: dict[str, Any] = {"_row": b["_row"].to_numpy()}
            for i, per_fold in enumerate(portables.values()):
                p = np.full(len(b), np.nan)
                for k, cal in per_fold.items():
                    sel = fold == k
                    if sel.any():
                        p[sel] = cal.predict(X[sel])
                out[f"p{i}"] = p
            yield pd.DataFrame(out)

    return run


# -- the comparison ------------------------------------------------------------------------------
def compare_calibrators_spark(
    claims: Any,
    *,
    spark: SparkSession | None = None,
    master: str = DEFAULT_MASTER,
    **kwargs: Any,
) -> ComparisonResult:
    """:func:`amv_calib.calibration.compare_calibrators` on Spark (module docs: what runs
    where). The same keyword arguments with the same defaults (``kwargs``, bound by
    :func:`~amv_calib.calibration.compare_arguments`), plus ``claims`` as a path (Parquet
    file or directory, CSV, JSONL; read by Spark), a pandas or a Spark DataFrame, and
    ``spark`` (a session) or ``master`` (a master URL for a new one). The result's
    estimators are :class:`SparkCalibrator` objects (their portable forms);
    ``config["engine"]`` is ``"spark"``.
    """
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    from amv_calib.spark._session import spark_session

    args = compare_arguments(kwargs)
    folds: int = args["folds"]
    split: str = args["split"]
    refit: bool = args["refit"]
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds={folds!r} must be an integer >= 2")
    check_choice("split", split, ("time", "group"))
    session = spark if spark is not None else spark_session(master)
    cals = resolve_calibrators(args["calibrators"])
    plans = {name: _plan(name, est) for name, est in cals.items()}
    maps: list[FeatureMap] = []
    vec_of: dict[str, str] = {}
    for name, plan in plans.items():
        if plan.fmap is None or (plan.kind == "isotonic" and plan.index == "seed"):
            continue
        if plan.fmap not in maps:
            maps.append(plan.fmap)
        vec_of[name] = f"v{maps.index(plan.fmap)}"

    t0 = time.perf_counter()
    raw = _read(session, claims)
    weight, fill = weight_column(raw.columns, args["sample_weight"])
    if weight is not None and weight not in raw.columns:
        from amv_calib.exceptions import MissingColumnsError

        raise MissingColumnsError(f"claims lack column(s) [{weight!r}]")
    raw = raw.withColumn("_row", F.monotonically_increasing_id())
    prepared = raw.mapInPandas(_prepare(maps, weight, fill),
                               _prepared_schema([len(m.terms) for m in maps]))
    for i, fmap in enumerate(maps):
        cols = [f"f{i}_{j}" for j in range(len(fmap.terms))]
        prepared = VectorAssembler(inputCols=cols, outputCol=f"v{i}").transform(prepared)
        prepared = prepared.drop(*cols)
    prepared = prepared.persist()

    # Per-claim aggregates -> folds and isotonic parts (driver), joined back to the rows.
    agg = prepared.groupBy("claim_id").agg(F.min("_row").alias("first_row"),
                                           F.min("t_us").alias("first_t"),
                                           F.count(F.lit(1)).alias("n")).toPandas()
    iso = {n: p for n, p in plans.items() if p.kind == "isotonic"}
    ctab = _claim_table(agg, folds, split, iso)
    part_cols = [c for c in ctab.columns if c.startswith("part_")]
    cdf = session.createDataFrame(ctab[["claim_id", "code", "fold", *part_cols]])
    rows = prepared.join(F.broadcast(cdf) if len(ctab) <= 2_000_000 else cdf, "claim_id")
    rows = rows.persist()
    rows.count()
    prepared.unpersist()

    # The per-row numbers the driver scores with (a few per row), in input order.
    meta = (rows.select("_row", "code", "fold", "y", "w", "t_us", "p_true", *part_cols)
            .toPandas().sort_values("_row", kind="stable").reset_index(drop=True))
    y = meta["y"].to_numpy(dtype=np.float64)
    w = meta["w"].to_numpy(dtype=np.float64)
    fold = meta["fold"].to_numpy(dtype=np.intp)
    ext = rows.agg(*[F.min(f"x{j}") for j in range(4)], *[F.max(f"x{j}") for j in range(4)]
                   ).toPandas().to_numpy(dtype=np.float64)[0]
    import pandas as pd

    bounds = pd.DataFrame({c: [ext[j], ext[4 + j]] for j, c in enumerate(CLAIM_FEATURES)})
    check_enough_data(y, bounds, folds, args["allow_constant_features"])
    check_fold_labels(y, fold, folds, split)
    _log.info("spark: %d rows, %d claims prepared in %.1f s", y.size, len(ctab),
              time.perf_counter() - t0)

    fits = [*range(folds), *([_ALL] if refit else [])]
    portables: dict[str, dict[int, PortableCalibrator]] = {n: {} for n in plans}
    fit_seconds = dict.fromkeys(plans, 0.0)
    for k in fits:
        train_rows = fold != k
        train = rows if k == _ALL else rows.filter(F.col("fold") != k)
        w_train = float(w[train_rows].sum())
        for name, plan in plans.items():
            t = time.perf_counter()
            if plan.kind == "seed":
                portables[name][k] = seed_prior_calibrator()
            elif plan.kind == "platt":
                b, coef = _logistic(train, vec_of[name], plan.C, w_train,
                                    len(plan.fmap.terms) if plan.fmap else 0)
                portables[name][k] = _portable(plan, b, coef)
            elif plan.kind == "beta":
                b, coef = _beta_fit(train, vec_of[name], plan, w_train)
                portables[name][k] = _portable(plan, b, coef)
            else:
                pcol = _part_col(list(iso).index(name), k) if plan.index == "platt" \
                    else None
                wpart: dict[int, float] = {}
                if pcol is not None:
                    part = meta[pcol].to_numpy()
                    wpart = {j: float(w[train_rows & (part != j)].sum())
                             for j in range(plan.cv)}
                b, coef, xk, yk = _isotonic_fit(session, train, plan, vec_of.get(name, ""),
                                                pcol, wpart)
                portables[name][k] = _portable(plan, b, coef, (xk, yk))
            fit_seconds[name] += time.perf_counter() - t
        _log.info("spark: fit %s done", "all rows" if k == _ALL else f"fold {k + 1}/{folds}")

    oof_portables = {n: {k: c for k, c in per.items() if k != _ALL}
                     for n, per in portables.items()}
    schema = ", ".join(["_row long", *(f"p{i} double" for i in range(len(plans)))])
    oof_df = (rows.select("_row", "fold", *(f"x{j}" for j in range(4)))
              .mapInPandas(_oof_predictions(oof_portables), schema).toPandas()
              .sort_values("_row", kind="stable").reset_index(drop=True))
    rows.unpersist()
    oof = {name: oof_df[f"p{i}"].to_numpy(dtype=np.float64) for i, name in enumerate(plans)}
    p_true = meta["p_true"].to_numpy(dtype=np.float64) if "p_true" in raw.columns else None
    if p_true is not None and not np.all(np.isfinite(p_true) & (p_true >= 0) & (p_true <= 1)):
        p_true = None
    estimators = {name: SparkCalibrator(portables[name][_ALL], name) for name in plans} \
        if refit else {}
    return comparison_result(
        oof=oof, y=y, w=w, fold=fold, folds=folds, claim_codes=meta["code"].to_numpy(),
        ts=meta["t_us"].to_numpy(dtype=np.int64) / 1e6 if split == "time" else None,
        p_true=p_true, estimators=estimators,
        descriptions={name: describe_calibrator(est) for name, est in cals.items()},
        fit_seconds=fit_seconds, sample_weight=weight, engine="spark",
        **{k: args[k] for k in ("split", "scoring", "tie_break", "n_bins", "n_boot", "alpha",
                                "seed", "allow_constant_features")})


# help() and inspect show the keyword arguments **kwargs takes
compare_calibrators_spark.__signature__ = compare_signature(  # type: ignore[attr-defined]
    compare_calibrators_spark)
