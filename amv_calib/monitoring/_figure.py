"""The monitoring timeline: the anytime-valid harm band and e-values as of each window's
end, and every descriptive statistic window by window with its interval and thresholds, the
windows shaded by status (explicit Agg canvas, no pyplot state)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from amv_calib.contract import CLAIM_FEATURES

#: At most this many windows are labelled on the time axis.
_MAX_TICKS: Final = 24
_STATUS_COLOURS: Final = {"OK": None, "WARN": "#f5d76e", "ALERT": "#e8837c",
                          "INSUFFICIENT DATA": "#d0d0d0"}


def _drift(feature: str, stat: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda w: w["drift"][feature][stat]


def _series(windows: Sequence[Mapping[str, Any]], get: Callable[[Mapping[str, Any]], Any]
            ) -> list[float]:
    out: list[float] = []
    for w in windows:
        try:
            v = get(w)
        except (KeyError, TypeError, IndexError):
            v = None
        out.append(float("nan") if v is None else float(v))
    return out


def _evalues(ax: Any, x: list[int], seq: Callable[[str], list[float]],
             timeline: Mapping[str, Any]) -> None:
    """The e-value panel: each detector since go-live, and the levels it acts at."""
    for key, colour, label in (
            ("harm_e", "C3", "harm above alpha (danger: ALERTs)"),
            ("in_the_large_e", "C0", "p too low by more than the margin (danger: ALERTs)"),
            ("too_high_e", "C1", "p too high by more than the margin (cost: WARNs)"),
            ("log_loss_e", "C2", "log-loss excess, any direction (WARNs)")):
        # drawn up to 1e12 (past any threshold; a log axis cannot span exp(700))
        ax.plot(x, [min(v, 1e12) for v in seq(key)], "o-", color=colour, label=label)
    first = next(iter(timeline.values()), None)
    if first is not None:
        # one line per level, naming the detectors that act at it
        levels: dict[tuple[str, float], list[str]] = {}
        names = {"harm": "harm", "in_the_large": "p too low", "too_high": "p too high",
                 "log_loss": "log loss"}
        for part, at in first["alert_at"].items():
            levels.setdefault(("ALERT", at), []).append(names.get(part, part))
        for part in ("too_high", "log_loss"):
            if part in first.get("warn_at", {}):
                levels.setdefault(("WARN", first["warn_at"][part]), []).append(names[part])
        for (what, at), parts in levels.items():
            ax.axhline(at, color="k", ls="--" if what == "ALERT" else ":", lw=1,
                       label=f"{what} at {at:.0f} ({', '.join(parts)})")
    ax.set_yscale("log")
    ax.set_title("e-values since go-live as of each window's end (anytime-valid)", y=1.0)
    ax.legend(fontsize=7, loc="upper left")


def timeline_figure(report: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw ``report`` (:meth:`MonitorReport.to_dict`) into the PNG ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from amv_calib.calibration import write_figure_png

    windows = report["windows"]
    cfg = report["config"]
    x = list(range(len(windows)))
    labels = [str(w["end"])[:10] for w in windows]
    timeline = {t["end"]: t for t in report.get("timeline", [])}
    fig = Figure(figsize=(13, 18))
    FigureCanvasAgg(fig)
    axes = fig.subplots(5, 2, sharex=True).ravel()

    def band(ax: Any, lo: str, hi: str, section: str, key: str, colour: str) -> None:
        ax.fill_between(x, _series(windows, lambda w: w[section][f"{key}_{lo}"][0]),
                        _series(windows, lambda w: w[section][f"{key}_{hi}"][1]),
                        color=colour, alpha=0.25, linewidth=0)

    def cal(key: str) -> Callable[[Mapping[str, Any]], Any]:
        return lambda w: w["calibration"][key]

    def curves(ax: Any, title: str,
               specs: Sequence[tuple[Callable[[Mapping[str, Any]], Any], str, str]]) -> None:
        for get, style, label in specs:
            ax.plot(x, _series(windows, get), style, label=label)
        ax.set_title(title, y=1.0)
        ax.legend(fontsize=8, loc="upper left")

    curves(axes[0], "mean predicted p and observed violation rate", [
        (lambda w: w["mean_p"], "o-", "mean p (all uses)"),
        (cal("observed_rate"), "s-", "observed rate (labelled)"),
        (cal("mean_p"), "^--", "mean p (labelled)")])

    ax = axes[1]
    ax.plot(x, _series(windows, cal("in_the_large")), "o-", label="mean p - rate")
    band(ax, "warn_ci", "warn_ci", "calibration", "in_the_large", "C0")
    band(ax, "alert_ci", "alert_ci", "calibration", "in_the_large", "C3")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_title("calibration in the large (descriptive 95% and 99.9% intervals)", y=1.0)

    ax = axes[2]
    ax.axhline(cfg["loss_margin"], color="C3", ls="--", lw=1, label="loss margin")
    band(ax, "warn_ci", "warn_ci", "calibration", "log_loss_excess", "C0")
    band(ax, "alert_ci", "alert_ci", "calibration", "log_loss_excess", "C3")
    curves(ax, "log-loss excess (paired; descriptive 95% and 99.9% intervals)", [
        (cal("log_loss_excess"), "o-", "log loss - expected if calibrated")])

    band(axes[3], "warn_ci", "warn_ci", "calibration", "log_loss", "C0")
    curves(axes[3], "log loss and Brier against the training level", [
        (cal("log_loss"), "o-", "log loss"),
        (cal("training_log_loss"), "k--", "training (OOF)"),
        (cal("brier"), "s-", "Brier"),
        (cal("training_brier"), "k:", "training Brier")])

    curves(axes[4], "ECE and smooth ECE", [
        (cal("ece"), "o-", "ECE (equal mass)"),
        (cal("smooth_ece"), "s-", "smooth ECE")])

    def seq(key: str, i: int | None = None) -> list[float]:
        def get(w: Mapping[str, Any]) -> Any:
            v = timeline[w["end"]][key]
            return v if i is None else v[i]
        return _series(windows, get)

    ax = axes[5]
    ax.fill_between(x, seq("harm_cs", 0), seq("harm_cs", 1), color="C0", alpha=0.25,
                    linewidth=0, label="confidence sequence (since go-live)")
    ax.plot(x, seq("harm_rate"), "o-", label="Gate Harmful since go-live")
    ax.plot(x, _series(windows, lambda w: w["harm"]["rate"]), "s:", color="C7",
            label="this window alone")
    if report.get("alpha") is not None:
        ax.axhline(report["alpha"], color="C3", ls="--", lw=1, label="certified alpha")
    ax.set_title("harm: the anytime-valid band against alpha (ALERT when above it)", y=1.0)
    ax.legend(fontsize=8, loc="upper left")

    _evalues(axes[8], x, seq, timeline)
    axes[9].set_visible(False)

    drift_panels = (("psi", "population stability index per feature",
                     [("psi_warn", "C1", "rule of thumb"), ("psi_alert", "C3", "WARN")]),
                    ("ks", "two-sample KS statistic per feature",
                     [("ks_alert", "C3", "WARN (if significant)")]))
    for ax, (stat, title, lines) in zip(axes[6:8], drift_panels, strict=True):
        for i, f in enumerate(CLAIM_FEATURES):
            ax.plot(x, _series(windows, _drift(f, stat)), "o-", color=f"C{i}", label=f)
        for key, colour, label in lines:
            ax.axhline(cfg[key], color=colour, ls="--", lw=1, label=label)
        ax.set_title(title, y=1.0)
        ax.legend(fontsize=8, loc="upper left")

    # one shaded collection per status and panel, whatever the number of windows (a patch
    # per window took minutes at 2,000 windows)
    edges = np.repeat(np.arange(len(windows)), 2) + np.tile([-0.5, 0.5], len(windows))
    statuses = np.repeat([w["status"] for w in windows], 2)
    for ax in axes:
        for status, shade in _STATUS_COLOURS.items():
            if shade and (statuses == status).any():
                ax.fill_between(edges, 0, 1, where=statuses == status, color=shade,
                                alpha=0.35, linewidth=0, transform=ax.get_xaxis_transform())
        ax.grid(alpha=0.3)
    ticks = x[::max(1, -(-len(x) // _MAX_TICKS))]
    for ax in axes[7:9]:
        ax.set_xticks(ticks)
        ax.set_xticklabels([labels[i] for i in ticks], rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("window end (shaded: yellow WARN, red ALERT, grey insufficient data)")
    # the right column ends a row early: its last panel shows the window ends itself
    axes[7].xaxis.set_tick_params(labelbottom=True)
    fig.suptitle(f"monitoring {report['artifact']}: windows of {report['window']}", y=0.995)
    # fixed margins, not tight_layout: the layout is always this grid, and tight_layout
    # drew the figure an extra time (a third of its cost, which a daily run pays)
    fig.subplots_adjust(left=0.06, right=0.985, top=0.965, bottom=0.075, hspace=0.28,
                        wspace=0.17)
    write_figure_png(fig, path, dpi=90)
