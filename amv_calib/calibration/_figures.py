"""The reliability diagram, drawn on an explicit Agg canvas (no global matplotlib state).

One function draws every reliability diagram of the project: the comparison's
``reliability.png`` and the diagrams logged to MLflow. Figures are built from
:class:`matplotlib.figure.Figure` with a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`, so drawing never touches
``matplotlib.pyplot`` or the process-wide backend, and the PNG has no time stamp (identical
inputs give identical bytes with one matplotlib version).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike

from amv_calib.calibration._metrics import TAIL_MIN_ROWS, TAIL_WIDTH
from amv_calib.exceptions import ConfigError

_COLOURS: Final = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                   "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")

#: Accepted spellings of the columns of a bins table (``reliability_bins.csv`` uses the
#: first of each); other tools name them differently.
_BIN_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "calibrator": ("calibrator", "name", "model"),
    "mean_pred": ("mean_pred", "mean_predicted", "mean_prediction", "pred_mean", "confidence",
                  "p_mean", "mean_p"),
    "observed_rate": ("observed_rate", "observed", "frac_pos", "fraction_positive", "obs_rate",
                      "event_rate", "rate"),
    "count": ("count", "n", "n_rows"),
    "ci_low": ("ci_low", "observed_lo", "obs_lo", "ci_lo", "lo", "lower"),
    "ci_high": ("ci_high", "observed_hi", "obs_hi", "ci_hi", "hi", "upper"),
    "strategy": ("strategy", "scheme", "binning"),
}
_REQUIRED: Final = ("mean_pred", "observed_rate")
#: The tail-split equal-mass binning, in words (the figures' titles).
_BINNING_WORDS: Final = (f"each point a bin of about equal row count; bins wider than "
                         f"{TAIL_WIDTH:g} in predicted p\nare split into equal-width pieces "
                         f"(at least {TAIL_MIN_ROWS} rows each)")
_STRATEGY_LABELS: Final = {"uniform": "equal-width", "quantile": "equal-mass",
                            "quantile_tail": "equal-mass, tail split"}


def _canonical_bins(bins: Any) -> Any:
    """``bins`` with its columns under their canonical names; names the missing ones."""
    rename = {}
    for role, names in _BIN_COLUMNS.items():
        found = next((c for c in names if c in bins.columns), None)
        if found is None and role in _REQUIRED:
            raise ConfigError(
                f"reliability bins lack a {role!r} column (looked for {list(names)}, found "
                f"{list(bins.columns)})"
            )
        if found is not None and found != role:
            rename[found] = role
    return bins.rename(columns=rename) if rename else bins


def reliability_figure(
    bins: Any,
    *,
    strategy: str = "quantile",
    predictions: Mapping[str, ArrayLike] | None = None,
    histogram: Any = None,
    labels: Mapping[str, str] | None = None,
    title: str | None = None,
) -> Any:
    """Reliability diagram of one or several calibrators.

    Parameters
    ----------
    bins : pandas.DataFrame
        Reliability bins (the rows of ``reliability_bins.csv``: calibrator, strategy,
        mean_pred, observed_rate, ci_low, ci_high, count, ...; common other spellings are
        accepted). Without a calibrator column the rows are one curve.
    strategy : str, default "quantile"
        The binning drawn when the table holds several (``"quantile"``: equal mass,
        ``"uniform"``: equal width); the first one present when it lacks this one.
    predictions : mapping name -> array, optional
        Each calibrator's predictions, for the histogram (50 equal-width bins, log counts).
    histogram : pandas.DataFrame, optional
        The same histogram already counted (:func:`prediction_histogram`, as written to
        ``prediction_histogram.csv``), when the predictions are not at hand. Without either,
        the histogram shows the rows per reliability bin.
    labels : mapping name -> str, optional
        Panel title per calibrator (default: its name); name the metrics as the tables do.
    title : str, optional
        Figure title (default: "Reliability, out of fold (<strategy> bins)").

    Returns
    -------
    matplotlib.figure.Figure
        One panel per calibrator (two columns when there are several): observed violation
        rate against mean prediction per bin, with the bins' 95% intervals, over the
        diagonal; below it the histogram of the predictions, log scale.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bins = _canonical_bins(bins)
    if "strategy" in bins.columns and len(bins):
        kinds = list(dict.fromkeys(bins["strategy"].astype(str)))
        strategy = strategy if strategy in kinds else kinds[0]
        bins = bins[bins["strategy"].astype(str) == strategy]
    if predictions is not None:
        histogram = prediction_histogram(predictions)
    if "calibrator" in bins.columns:
        names = list(dict.fromkeys(bins["calibrator"].astype(str)))
        curves = [(n, bins[bins["calibrator"].astype(str) == n]) for n in names]
    else:
        curves = [("", bins)]
    # One panel per calibrator (small multiples): overlaid curves and intervals of several
    # calibrators tangle into an unreadable figure.
    cols = 1 if len(curves) == 1 else 2
    rows = -(-len(curves) // cols)
    fig = Figure(figsize=(5.2 * cols, 5.6 * rows + 0.6), dpi=100)
    FigureCanvasAgg(fig)
    outer = fig.add_gridspec(rows, cols, hspace=0.35, wspace=0.25)
    for i, (name, r) in enumerate(curves):
        inner = outer[i // cols, i % cols].subgridspec(2, 1, height_ratios=(3, 1), hspace=0.05)
        ax = fig.add_subplot(inner[0])
        hist = fig.add_subplot(inner[1], sharex=ax)
        counts = None
        if histogram is not None:
            counts = histogram[histogram["calibrator"].astype(str) == name] if name else histogram
        _panel(ax, hist, r, _COLOURS[i % len(_COLOURS)], (labels or {}).get(name, name), counts)
    kind = _STRATEGY_LABELS.get(strategy, strategy)
    fig.suptitle(title if title is not None else f"Reliability, out of fold ({kind} bins)",
                 fontsize=10)
    return fig


def _panel(ax: Any, hist: Any, r: Any, colour: str, label: str, counts: Any) -> None:
    """One calibrator: its curve with intervals over the diagonal, and below the log-scale
    histogram of its predictions (or of the rows per bin, without a histogram)."""
    ax.plot([0, 1], [0, 1], linestyle="--", color="#555555", linewidth=1, label="perfect")
    x = r["mean_pred"].to_numpy(dtype=float)
    yv = r["observed_rate"].to_numpy(dtype=float)
    if {"ci_low", "ci_high"} <= set(r.columns):
        err = np.vstack([yv - r["ci_low"].to_numpy(dtype=float),
                         r["ci_high"].to_numpy(dtype=float) - yv])
        ax.errorbar(x, yv, yerr=np.clip(err, 0.0, None), marker="o", markersize=3,
                    linewidth=1.2, capsize=2, color=colour, label="observed (95% interval)")
    else:
        ax.plot(x, yv, marker="o", markersize=3, linewidth=1.2, color=colour,
                label="observed")
    if counts is not None and len(counts):
        edges = np.append(counts["bin_lower"].to_numpy(dtype=float),
                          counts["bin_upper"].to_numpy(dtype=float)[-1])
        # Empty bins drawn at 0.5 so that the log scale keeps them visible as gaps.
        hist.stairs(np.maximum(counts["count"].to_numpy(dtype=float), 0.5), edges,
                    color=colour, linewidth=1.2)
    elif "count" in r.columns and {"bin_lower", "bin_upper"} <= set(r.columns) and len(r):
        lo = r["bin_lower"].to_numpy(dtype=float)
        hi = r["bin_upper"].to_numpy(dtype=float)
        hist.bar(lo, r["count"].to_numpy(dtype=float), width=hi - lo, align="edge",
                 fill=False, edgecolor=colour, linewidth=1.2)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("observed violation rate")
    ax.set_title(label or "calibrator", fontsize=8)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.tick_params(labelbottom=False)
    hist.set_yscale("log")
    hist.set_xlabel("predicted P(violated)")
    hist.set_ylabel("rows")


def prediction_histogram(predictions: Mapping[str, ArrayLike], n_bins: int = 50) -> Any:
    """Counts of each calibrator's predictions in ``n_bins`` equal-width bins on [0, 1].

    Returns
    -------
    pandas.DataFrame
        Columns ``calibrator``, ``bin_lower``, ``bin_upper``, ``count``: what the figure's
        histogram draws, small enough to write beside the reliability bins.
    """
    import pandas as pd

    edges = np.linspace(0.0, 1.0, n_bins + 1)
    frames = []
    for name, p in predictions.items():
        counts, _ = np.histogram(np.asarray(p, dtype=float), bins=edges)
        frames.append(pd.DataFrame({"calibrator": str(name), "bin_lower": edges[:-1],
                                    "bin_upper": edges[1:], "count": counts.astype(np.int64)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["calibrator", "bin_lower", "bin_upper", "count"])


def comparison_figure(bins: Any, table: Any, *, histogram: Any = None,
                      config: Mapping[str, Any] | None = None,
                      champion: str | None = None) -> Any:
    """The comparison's reliability figure, from the tables ``compare`` writes.

    Drawn the same way for ``reliability.png`` and for the MLflow run, so that the panel
    titles carry the metrics under the names of ``comparison.md`` (log loss and the
    equal-mass ``ece_mass``, with their intervals).

    Parameters
    ----------
    bins : pandas.DataFrame
        ``reliability_bins.csv``.
    table : pandas.DataFrame
        ``comparison.csv``: one row per calibrator with ``name``, ``log_loss`` and
        ``ece_mass`` and their ``_low``/``_high`` bounds.
    histogram : pandas.DataFrame, optional
        ``prediction_histogram.csv``.
    config : mapping, optional
        The comparison's config (``folds``, ``split``, ``n_rows``) for the title.
    champion : str, optional
        Marked "(champion)" in its panel title.
    """
    labels = {}
    for row in table.to_dict(orient="records"):
        name = str(row.get("name", ""))
        star = " (champion)" if name == champion else ""
        try:
            labels[name] = (
                f"{name}{star}\nlog loss {row['log_loss']:.4f} [{row['log_loss_low']:.4f}, "
                f"{row['log_loss_high']:.4f}]; ece_mass {row['ece_mass']:.4f} "
                f"[{row['ece_mass_low']:.4f}, {row['ece_mass_high']:.4f}]")
        except (KeyError, TypeError, ValueError):
            labels[name] = f"{name}{star}"
    cfg = config or {}
    folds = f"{cfg['folds']} {cfg.get('split', '')} folds, ".replace("  ", " ") \
        if "folds" in cfg else ""
    n = cfg.get("n_rows")
    title = (f"Reliability, out of fold: {folds}{'' if n is None else f'n = {n} claims'}\n"
             f"{_BINNING_WORDS}, with 95% intervals")
    return reliability_figure(bins, strategy="quantile_tail", histogram=histogram,
                              labels=labels, title=title)


def overlay_figure(bins: Any, *, champion: str | None = None,
                   strategy: str = "quantile_tail") -> Any:
    """Every calibrator's reliability curve on one axes, over the diagonal (the comparison's
    ``reliability.png`` gives each its own panel with its prediction histogram).

    Parameters
    ----------
    bins : pandas.DataFrame
        ``reliability_bins.csv``.
    champion : str, optional
        Drawn thicker and named so in the legend.
    strategy : str, default "quantile_tail"
        The binning drawn (:func:`reliability_figure`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bins = _canonical_bins(bins)
    if "strategy" in bins.columns and len(bins):
        kinds = list(dict.fromkeys(bins["strategy"].astype(str)))
        bins = bins[bins["strategy"].astype(str) == (strategy if strategy in kinds
                                                     else kinds[0])]
    fig = Figure(figsize=(7.5, 6.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.1, 0.1, 0.6, 0.78))
    ax.plot([0, 1], [0, 1], "--", color="0.4", linewidth=1, label="perfect calibration")
    names = list(dict.fromkeys(bins["calibrator"].astype(str))) if "calibrator" in \
        bins.columns else [""]
    for k, name in enumerate(names):
        b = bins[bins["calibrator"].astype(str) == name] if name else bins
        lead = name == champion
        ax.errorbar(b["mean_pred"], b["observed_rate"],
                    # clipped as in reliability_figure: an interval end equal to the rate
                    # may differ from it by a rounding error of either sign
                    yerr=np.clip([b["observed_rate"] - b["ci_low"],
                                  b["ci_high"] - b["observed_rate"]], 0.0, None),
                    fmt="o-", markersize=4 if lead else 3, linewidth=2.0 if lead else 1.0,
                    capsize=2, color=f"C{k}", alpha=1.0 if lead else 0.8,
                    label=f"{name} (champion)" if lead else name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted P(violated), bin mean")
    ax.set_ylabel("observed violation rate (95% interval)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    ax.set_title(f"Reliability of every calibrator, out of fold\n{_BINNING_WORDS}", fontsize=9)
    return fig


def write_figure_png(fig: Any, path: str | os.PathLike[str], *, dpi: float | None = None
                     ) -> Path:
    """Write ``fig`` to ``path`` as a PNG; the one way the package writes a figure.

    Every PNG file the package writes itself goes through here (the reliability diagram, the
    certified frontier, the Pareto plot and Optuna's views of a tuning run, the monitoring
    timeline), so all of them are written alike. Figures logged to MLflow are written by
    MLflow's ``log_figure``.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure, drawn on an Agg canvas (or under the Agg backend).
    path : str or os.PathLike
        Where to write; the format is PNG whatever the ending.
    dpi : float, optional
        Resolution; by default matplotlib's ``savefig.dpi`` (the figure's own dpi unless
        configured otherwise).

    Returns
    -------
    pathlib.Path
        ``path``.

    Notes
    -----
    The ``Software`` text chunk (matplotlib's version) is left out, so the same figure gives
    the same bytes wherever the same matplotlib draws it. The certified ``frontier.png`` is
    hashed into each artifact's manifest, and ``make demo`` reuses the shipped version only
    while it exports the same bytes: ``dpi=None`` keeps matplotlib's default, the resolution
    that figure has always been written at.
    """
    out = Path(path)
    fig.savefig(out, format="png", dpi=dpi, metadata={"Software": None})
    return out
