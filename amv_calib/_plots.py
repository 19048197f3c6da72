"""Reliability diagrams drawn on an explicit Agg canvas (no global matplotlib state).

Figures are built from :class:`matplotlib.figure.Figure` with a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`, so drawing never touches
``matplotlib.pyplot`` or the process-wide backend, and the PNG has no time stamp (identical
inputs give identical bytes with one matplotlib version).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    from amv_calib.compare import ComparisonResult

__all__ = ["reliability_figure", "write_reliability_png"]

_COLOURS: Final = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                   "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")


def reliability_figure(result: ComparisonResult, *, strategy: str = "quantile") -> Any:
    """Reliability diagram of every calibrator's out-of-fold predictions.

    Top: observed violation rate against mean prediction per bin (``strategy`` bins, 95%
    binomial error bars) over the diagonal; the legend gives each calibrator's equal-mass
    ECE and log loss with their bootstrap intervals. Bottom: histogram of the predictions
    (log counts).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 8.0), dpi=100)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.08)
    ax = fig.add_subplot(grid[0])
    hist = fig.add_subplot(grid[1], sharex=ax)
    ax.plot([0, 1], [0, 1], linestyle="--", color="#555555", linewidth=1, label="perfect")
    table = {r["name"]: r for r in result.table.to_dict(orient="records")}
    rel = result.reliability[result.reliability["strategy"] == strategy]
    edges = np.linspace(0.0, 1.0, 51)
    for i, name in enumerate(result.oof):
        colour = _COLOURS[i % len(_COLOURS)]
        r = rel[rel["calibrator"] == name]
        t = table[name]
        star = " (champion)" if name == result.champion else ""
        label = (
            f"{name}{star}: ECE {t['ece_mass']:.4f} [{t['ece_mass_low']:.4f}, "
            f"{t['ece_mass_high']:.4f}], log loss {t['log_loss']:.4f} "
            f"[{t['log_loss_low']:.4f}, {t['log_loss_high']:.4f}]"
        )
        x = r["mean_pred"].to_numpy()
        yv = r["observed_rate"].to_numpy()
        err = np.vstack([yv - r["ci_low"].to_numpy(), r["ci_high"].to_numpy() - yv])
        ax.errorbar(x, yv, yerr=np.clip(err, 0.0, None), marker="o", markersize=3,
                    linewidth=1.2, capsize=2, color=colour, label=label)
        counts, _ = np.histogram(result.oof[name], bins=edges)
        hist.stairs(np.maximum(counts, 0.5), edges, color=colour, linewidth=1.2)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("observed violation rate")
    cfg = result.config
    ax.set_title(
        f"Reliability, out of fold ({cfg['folds']} {cfg['split']} folds, "
        f"{cfg['n_rows']} rows, {strategy} bins)", fontsize=10
    )
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.tick_params(labelbottom=False)
    hist.set_yscale("log")
    hist.set_xlabel("predicted P(violated)")
    hist.set_ylabel("rows")
    return fig


def write_reliability_png(result: ComparisonResult, path: str | Path) -> Path:
    """Draw :func:`reliability_figure` into ``path`` (PNG) and return the path."""
    out = Path(path)
    fig = reliability_figure(result)
    fig.savefig(out, format="png", metadata={"Software": None})
    return out
