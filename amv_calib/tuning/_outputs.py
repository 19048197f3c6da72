"""The files of a tuning: ``thresholds.json``, ``trials.csv``, ``tune_report.json``, the
tuning record, and the figures (Optuna's own views of a single-objective study; the Pareto
front of a multi-objective one)."""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from amv_calib.contract import (
    PortableCalibrator,
)
from amv_calib.tuning._episodes import EpisodeSet
from amv_calib.tuning._record import TuningRecord
from amv_calib.tuning._replay import (
    METRICS,
    replay_many,
)

_log = logging.getLogger(__name__)


def _completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n",
                    encoding="utf-8")


def _write_outputs(
    out: Path,
    *,
    study: Any,
    thresholds: dict[str, Any] | None,
    mode: str,  # the study's Mode
    pareto: list[dict[str, Any]],
    es_tune: EpisodeSet,
    cal: PortableCalibrator,
    seed: int,
    lambda_eval: float,
    split: dict[str, Any],
    report: dict[str, Any],
    trials: tuple[list[str], list[list[Any]]],
    space_names: Sequence[str],
) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    # which episodes the thresholds were tuned on: certification must exclude them
    files["tuning"] = str(TuningRecord.of(es_tune.instance_id, split=split).write(out))
    if thresholds is not None:
        _write_json(out / "thresholds.json", thresholds)
        files["thresholds"] = str(out / "thresholds.json")
    names = list(space_names)
    with (out / "trials.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")  # writes None as an empty field
        w.writerow(trials[0])
        w.writerows(trials[1])
    files["trials"] = str(out / "trials.csv")
    if mode == "multi":
        with (out / "pareto.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["number", *names, *METRICS])
            for row in pareto:
                w.writerow([row["number"], *[row[k] for k in names], *[row[k] for k in METRICS]])
        files["pareto"] = str(out / "pareto.csv")
        baselines = replay_many(
            es_tune, ["always-proceed", "always-verify", "seed", "oracle"], seed=seed,
            calibrator=cal, lambda_eval=lambda_eval, n_boot=0,
        )
        pareto_plot(study, out / "pareto.png", baselines={k: v.summary() for k, v in
                                                          baselines.items()})
        files["plot"] = str(out / "pareto.png")
    else:
        files.update(_optuna_views(study, out))
    _write_json(out / "tune_report.json", {**report, "files": files})
    files["report"] = str(out / "tune_report.json")
    return files


#: Optuna's own matplotlib views of a single-objective study, written beside trials.csv.
_OPTUNA_VIEWS: Final = (("optuna_history.png", "plot_optimization_history"),
                        ("optuna_importances.png", "plot_param_importances"),
                        ("optuna_slice.png", "plot_slice"))


def _optuna_views(study: Any, out: Path) -> dict[str, str]:
    """Optimization history, parameter importances and slice plots as PNGs (the views an
    Optuna user knows); a view Optuna cannot draw (too few trials) is left out, logged."""
    import warnings

    import matplotlib
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as views

    from amv_calib.calibration import write_figure_png

    files: dict[str, str] = {}
    for name, fn in _OPTUNA_VIEWS:
        try:
            with warnings.catch_warnings(), matplotlib.rc_context({"backend": "Agg"}):
                warnings.simplefilter("ignore")  # Optuna marks these views experimental
                kwargs: dict[str, Any] = {}
                if fn == "plot_param_importances":
                    # 16 seeded trees: the default 64 cost seconds a run for the same ranking
                    from optuna.importance import FanovaImportanceEvaluator

                    kwargs["evaluator"] = FanovaImportanceEvaluator(n_trees=16, seed=0)
                drawn = getattr(views, fn)(study, **kwargs)
                fig = np.ravel(drawn)[0].figure
                _readable(fig, fn)
                write_figure_png(fig, out / name)
                plt.close(fig)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            _log.info("optuna view %s not drawn: %s", name, exc)
            continue
        files[name.removesuffix(".png")] = str(out / name)
    return files


def _readable(fig: Any, view: str) -> None:
    """Lay out one of Optuna's views so that it reads: the slice plot one panel per
    parameter with its name wrapped under it and the trial colour bar beside the panels (not
    over one); the history plot says what its grey points are."""
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    if view == "plot_slice":
        fig.set_size_inches(max(9.0, 2.3 * len(axes) + 1.5), 5.0)
        for ax in axes:
            ax.set_xlabel(ax.get_xlabel().replace("_", " ").replace(" ", "\n", 1), fontsize=8)
            ax.tick_params(labelsize=7)
        fig.subplots_adjust(left=0.06, right=0.9, bottom=0.2, top=0.88, wspace=0.25)
        for bar in bars:
            bar.set_position((0.92, 0.2, 0.015, 0.68))
        fig.suptitle("Slice plot: each trial's objective (mean total loss on the tuning split) "
                     "against each parameter; grey: infeasible (Gate Harmful above the target)",
                     fontsize=10)
        return
    if view == "plot_optimization_history":
        ax = axes[0]
        handles, labels = ax.get_legend_handles_labels()
        handles.append(ax.scatter([], [], color="#cccccc"))
        labels.append("infeasible trial (Gate Harmful above the target)")
        ax.legend(handles, labels, fontsize=8, loc="upper right")
    fig.set_size_inches(9, 5.5)
    fig.tight_layout()


def _frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The 2-D lower-left frontier (both minimised) of ``points``, sorted by x."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not out or y < out[-1][1]:
            out.append((x, y))
    return out


def pareto_plot(
    study: Any, path: str | os.PathLike[str], *, baselines: Mapping[str, Mapping[str, Any]]
) -> None:
    """Two panels like the paper's Figures 3 and 4 from a multi-objective study.

    Left: Gate Harmful vs verifier calls per instance; right: total loss vs verification cost.
    Grey dots are all trials, blue circles the trials on the three-objective Pareto front
    (harm, cost, coverage), the step line the frontier of the two plotted quantities, and
    labelled squares the baseline policies on the same split (a baseline far above the
    trials is pinned to the top edge with its value written beside it). Written to ``path``
    as a PNG (:func:`~amv_calib.calibration.write_figure_png`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from amv_calib.calibration import write_figure_png

    done = _completed(study)
    front = {t.number for t in study.best_trials}
    fig = Figure(figsize=(11, 4.5))
    FigureCanvasAgg(fig)
    panels = (
        ("queries", "gate_harmful", "verifier calls per instance", "Gate Harmful",
         "Harm vs verification calls (cf. paper Fig. 3)"),
        ("verification_cost", "total_loss", "verification cost per instance",
         "total loss per instance", "Total loss vs verification cost (cf. paper Fig. 4)"),
    )
    for k, (xk, yk, xl, yl, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        pts = [(float(t.user_attrs[xk]), float(t.user_attrs[yk])) for t in done]
        ax.scatter([a for a, _ in pts], [b for _, b in pts], s=9, c="0.75", label="trials")
        fp = [(float(t.user_attrs[xk]), float(t.user_attrs[yk])) for t in done
              if t.number in front]
        ax.scatter([a for a, _ in fp], [b for _, b in fp], s=16, facecolors="none",
                   edgecolors="C0", label="Pareto front (harm, cost, coverage)")
        line = _frontier(pts)
        if line:
            ax.step([a for a, _ in line], [b for _, b in line], where="post", c="C0", lw=1.2,
                    label="frontier of the two axes")
        ys = [b for _, b in pts] + [float(m[yk]) for m in baselines.values()]
        y_trials = max((b for _, b in pts), default=1.0)
        top = max(ys) if max(ys) <= 3.0 * y_trials else 1.6 * y_trials
        x_max = max([a for a, _ in pts] + [float(m[xk]) for m in baselines.values()])
        for j, (name, m) in enumerate(sorted(baselines.items())):
            x, y = float(m[xk]), float(m[yk])
            shown = min(y, top * 0.97)
            ax.scatter([x], [shown], marker="s", s=40, c=f"C{j + 1}", label=name, zorder=3)
            if y > top:
                right = x > 0.6 * x_max
                ax.annotate(f"{name}: {y:.3g}", (x, shown), xytext=(-6 if right else 6, -4),
                            textcoords="offset points", fontsize=8,
                            ha="right" if right else "left")
        ax.set_ylim(bottom=0.0, top=top)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    write_figure_png(fig, path, dpi=120)


