"""``compare``: every calibrator fitted on the same leakage-safe folds, scored and written.

The claims are read and validated by :func:`~amv_calib.claims.load_claims` on both paths
(rows that break the contract are left out with a warning). In a pipeline the newest
``holdout_newest`` share is split off first and both parts are written beside the
comparison (``training.parquet``, ``holdout.parquet``): the export and promote steps after
it read them. With the Spark engine the folds are fitted on Spark, on the file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amv_calib.exceptions import AmvCalibError, ConfigError, DataContractError
from amv_calib.settings import DEFAULT_CALIBRATORS, CompareOptions
from amv_calib.stages._stage import Call, Input, Stage

__all__ = ["COMPARE", "Compared"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compared:
    """A :class:`~amv_calib.calibration.ComparisonResult` and the folder it was written to."""

    result: Any
    out: Path


def _run(call: Call) -> Compared:
    from amv_calib.calibration import compare_calibrators, newest_split, write_comparison
    from amv_calib.claims import load_claims

    opts, out, source = call.options, call.out_dir(), Path(call.inputs["claims"])
    prior = call.inputs.get("prior")
    kwargs = {**opts.arguments(compare_calibrators), "seed": call.seed,
              "prior": None if prior is None else str(prior)}
    claims = None
    if call.engine != "spark" or call.step is not None:
        claims, rejects = load_claims(source)
        if len(rejects):
            log.warning("%d of %d rows break the data contract and are left out (run "
                        "`amv-calib ingest` to see them with their reasons)",
                        len(rejects), len(claims) + len(rejects))
    if call.step is not None and claims is not None:
        claims, holdout = newest_split(claims, opts.holdout_newest)
        out.mkdir(parents=True, exist_ok=True)
        holdout.to_parquet(out / "holdout.parquet")
        claims.to_parquet(out / "training.parquet")  # what the calibrators were fitted on
        source = out / "training.parquet"
        if len(holdout):
            log.info("%s%d newest claims held out for promotion, %d compared", call.where(),
                     len(holdout), len(claims))
    if call.engine == "spark":  # the claims are read, validated and fitted on Spark
        from amv_calib.spark import compare_calibrators_spark

        if prior is not None:
            raise ConfigError("compare.prior: the spark engine fits no prior; compare with "
                              "engine local")

        if not source.exists():
            raise DataContractError(f"input {source} does not exist")
        result = compare_calibrators_spark(source, spark=call.spark(), **kwargs)
    else:
        assert claims is not None
        log.info("comparing %s on %d rows", ", ".join(opts.calibrators or DEFAULT_CALIBRATORS),
                 len(claims))
        try:
            result = compare_calibrators(claims, **kwargs)
        except ValueError as exc:
            if isinstance(exc, AmvCalibError):
                raise
            raise ConfigError(str(exc)) from exc
    files = write_comparison(result, out)
    call.tracker.log_comparison(result, files=files, claims=claims,
                                claims_path=call.inputs["claims"])
    return Compared(result, out)


def _summary(c: Compared) -> list[str]:
    row = c.result.table.set_index("name").loc[c.result.champion]
    return [f"champion: {c.result.champion} (log loss {row['log_loss']:.4f}, Brier "
            f"{row['brier']:.4f}, equal-mass ECE {row['ece_mass']:.4f}); wrote {c.out}"]


def _outputs(c: Compared) -> dict[str, Any]:
    out = c.out
    return {"dir": str(out), "champion": str(out / "champion.json"),
            "champion_name": c.result.champion, "table": str(out / "comparison.md"),
            "holdout": str(out / "holdout.parquet"), "training": str(out / "training.parquet")}


COMPARE = Stage(
    name="compare",
    json_indent=None,
    help="cross-validate Platt, Beta, isotonic and the seed prior; write DIR",
    description=(
        "Fit every calibrator on the same leakage-safe folds of CLAIMS (time-ordered "
        "blocks, or groups of claim_id), score the out-of-fold predictions (log loss, "
        "Brier, AUC, ECE equal-width and equal-mass, MCE, smooth ECE, bootstrap "
        "intervals), choose the champion by log loss (Brier breaks ties), refit all on "
        "every row and write DIR: comparison.csv/.md/.json, reliability.png, "
        "reliability_bins.csv, champion.json/.joblib, calibrators/<name>.json/.joblib. "
        "CLAIMS is claims.parquet from `amv-calib ingest`, or any CSV/Parquet/JSONL "
        "claim table (validated the same way). Exit code 2 on too little data."
    ),
    inputs={"claims": Input(help="claim outcomes (claims.parquet, csv, jsonl)", required=True,
                            path=True, positional=True, metavar="CLAIMS"),
            # an input, not an option: in a pipeline its path is the pipeline file's and the
            # artifact's content (an alias's target too) is part of the step's key
            "prior": Input(
                help="an artifact (a version folder or MODEL@ALIAS, verified as the gate "
                "loads it) whose calibrator is a candidate as it is, and the centre of a fit "
                "shrunk towards it (the pull chosen by its marginal likelihood): a first "
                "month's few labels start from it (default: none)", path=True, metavar="ARTIFACT")},
    options=CompareOptions,
    out=Input(help="output directory", required=True, metavar="DIR"),
    shared={"seed": "bootstrap seed",
            "engine": "where the folds are fitted: local (this process, default) or spark "
                      "(MLlib logistic and isotonic fits on --spark-master, the same folds, "
                      "metrics and portable calibrators; docs/scale.md)",
            "spark_master": None},
    run=_run,
    summary=_summary,
    to_json=lambda c: c.result.summary(),
    outputs=_outputs,
    json_help="print one JSON object with the champion and each calibrator's metrics",
)
