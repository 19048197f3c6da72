"""``comparison.md``: the comparison's table, with intervals, as text a person reads."""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

#: Metric columns of every table, in order.
METRIC_NAMES: Final = ("log_loss", "brier", "auc", "ece", "ece_mass", "mce", "smooth_ece")
#: The calibration errors: biased upward under resampling, so their intervals are centred
#: and the table carries their bootstrap bias (``<metric>_bias``).
_CALIBRATION_ERRORS: Final = ("ece", "ece_mass", "mce", "smooth_ece")


def _num(v: Any) -> float | int | None:
    """A table cell as a JSON number: bools as 0/1, non-finite as None."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    f = float(v)
    if not math.isfinite(f):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    return f

_LABELS: Final = {
    "log_loss": "log loss",
    "brier": "Brier",
    "auc": "AUC",
    "ece": "ECE",
    "ece_mass": "ECE (equal mass)",
    "mce": "MCE",
    "smooth_ece": "smooth ECE",
}


def _fmt(v: Any) -> str:
    x = _num(v)
    return "n/a" if x is None else f"{x:.4f}"


def comparison_markdown(result: Any) -> str:
    """``comparison.md``: the table with intervals, the champion and the per-fold log loss."""
    cfg = result.config
    lines = ["# Calibrator comparison", ""]
    split = "time-ordered blocked" if cfg["split"] == "time" else "claim-grouped"
    lines.append(
        f"Champion: **{result.champion}** (lowest out-of-fold {_LABELS[cfg['scoring']]}; "
        f"{_LABELS[cfg['tie_break']]} breaks ties). {cfg['folds']} {split} folds over "
        f"{cfg['n_rows']} rows ({cfg['n_claims']} claims, violation rate "
        f"{cfg['violation_rate']:.4f}); {100 * (1 - cfg['alpha']):g}% bootstrap intervals "
        f"from {cfg['n_boot']} resamples (percentile for log loss, Brier and AUC; for ECE, "
        "MCE and smooth ECE, which resampling biases upward, the basic interval centred on "
        "the value). ECE and MCE use 15 bins (ECE equal-width and equal-mass); they describe "
        "calibration and never choose the champion."
    )
    lines.append("")
    cols = ["calibrator", *(_LABELS[m] for m in METRIC_NAMES)]
    oracle = result.has_oracle
    if oracle:
        cols += ["excess log loss", "excess (relative)"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|")
    for r in result.table.to_dict(orient="records"):
        name = str(r["name"])
        label = f"**{name}**" if r["champion"] else ("oracle (p_true)" if name == "oracle"
                                                     else name)
        if r.get("baseline") is True:
            label = f"{name} (baseline)"
        cells = [label]
        for m in METRIC_NAMES:
            cells.append(f"{_fmt(r[m])} [{_fmt(r[f'{m}_low'])}, {_fmt(r[f'{m}_high'])}]")
        if oracle:
            cells.append(f"{_fmt(r['excess_log_loss'])} [{_fmt(r['excess_log_loss_low'])}, "
                         f"{_fmt(r['excess_log_loss_high'])}]")
            rel = _num(r["excess_log_loss_rel"])
            cells.append("n/a" if rel is None else f"{100 * rel:.2f}%")
        lines.append("| " + " | ".join(cells) + " |")
    lines += _debiased_lines(result)
    lines += ["", "## Log loss per test fold", ""]
    pf = result.per_fold.pivot(index="calibrator", columns="fold", values="log_loss")
    pf = pf.reindex(list(result.oof))
    lines.append("| calibrator | " + " | ".join(f"fold {k}" for k in pf.columns) + " |")
    lines.append("|---|" + "|".join(["---:"] * len(pf.columns)) + "|")
    for cal, vals in pf.iterrows():
        lines.append(f"| {cal} | " + " | ".join(_fmt(v) for v in vals) + " |")
    lines.append("")
    return "\n".join(lines)


def _debiased_lines(result: Any) -> list[str]:
    """The calibration errors less their bootstrap bias (none without resamples)."""
    table = result.table
    if not int(result.config["n_boot"]) or f"{_CALIBRATION_ERRORS[0]}_bias" not in table:
        return []
    lines = ["", "## Calibration errors less their bootstrap bias", "",
             "Value minus (median resample - value), floored at 0: an estimate of the "
             "calibration error with the upward bias of a finite sample removed.", "",
             "| calibrator | " + " | ".join(_LABELS[m] for m in _CALIBRATION_ERRORS) + " |",
             "|---|" + "|".join(["---:"] * len(_CALIBRATION_ERRORS)) + "|"]
    for r in table.to_dict(orient="records"):
        cells = []
        for m in _CALIBRATION_ERRORS:
            v = _num(r[m] - r[f"{m}_bias"])
            cells.append("n/a" if v is None else f"{max(v, 0.0):.4f}")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return lines
