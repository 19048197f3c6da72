"""Monitoring a production gate: decision logs and outcomes, window by window.

The decision logs are read once (:func:`amv_calib.claims.read_uses`), and the same entries
go through the label join (:func:`amv_calib.claims.label_claims` with ``log=``) with
outcome labels only: a verifier's soft label is derived from the gate's own probability,
so it cannot show that probability wrong. Every use falls in a window by its time; per
window :mod:`._stats` computes the drift of the features (every use), calibration (the
labelled uses) and Gate Harmful (the actions whose premises are all labelled), and
:func:`~._stats.decide` gives the status.

Windows
-------
``window`` wide (``"7d"``, ``"12h"``, ``"2w"``; at most :data:`MAX_WINDOW_DAYS` days). With
``since``, windows start there and follow each other up to the newest use (the last one may
be partial); without it, the last window ends at the whole second after the newest use, so
the latest window is always a full one, and the first one covers the oldest use. At most
:data:`MAX_WINDOWS` windows are made, the newest ones: one use dated centuries early, or a
narrow window over a long log, would otherwise ask for millions. Uses before the first window
(before ``since``, or older than the windows kept) and uses without a valid time are left
out, counted, and the earliest such time named (``outliers`` in the report, and a warning).
The work is bounded by the uses and the windows: each use is placed once, and a window
without uses costs a few microseconds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.contract import CLAIM_FEATURES, loads_strict, read_toml
from amv_calib.exceptions import ArtifactError, ConfigError, check_choice
from amv_calib.monitoring import _stats
from amv_calib.monitoring._stats import MonitorConfig, WindowStats, safe_float

PathLike = str | os.PathLike[str]
IntArray = NDArray[np.int64]
_UNITS: Final = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_US: Final = 1_000_000
#: ``MISSING_US`` of the label join: a use whose time is missing or did not parse.
_NAT: Final = np.iinfo(np.int64).min
#: The most windows one run makes (the newest ones; module docstring).
MAX_WINDOWS: Final = 2000
#: The widest window, in days (a century).
MAX_WINDOW_DAYS: Final = 36_525

_log = logging.getLogger(__name__)


def parse_window(text: str) -> int:
    """A window width such as ``"7d"``, ``"12h"``, ``"30m"`` or ``"2w"``, in microseconds.

    Raises
    ------
    ConfigError
        Not a positive number followed by m, h, d or w, or wider than
        :data:`MAX_WINDOW_DAYS` days.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", str(text))
    if m is None or float(m.group(1)) <= 0:
        raise ConfigError(f"window={text!r}: expected a positive number and a unit m, h, d "
                          f"or w, e.g. '7d'")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not seconds <= MAX_WINDOW_DAYS * 86400:
        raise ConfigError(f"window={text!r} is wider than {MAX_WINDOW_DAYS} days (a century)")
    width = int(round(seconds * _US))
    if width < 1:
        raise ConfigError(f"window={text!r} is shorter than a microsecond")
    return width


def parse_since(text: str) -> int:
    """``since`` (ISO-8601 or a date; UTC when no offset) in UTC microseconds, by the data
    contract's rule for times (:func:`amv_calib.claims.parse_timestamps`: years 1 to 9999).
    """
    from amv_calib.claims import parse_timestamps

    parsed = parse_timestamps([str(text)])
    if parsed.out_of_range[0]:
        raise ConfigError(f"since={text!r} is out of range (years 1 to 9999)")
    t_us = int(parsed.us(_NAT)[0])
    if t_us == _NAT:
        raise ConfigError(f"since={text!r} is not an ISO-8601 time or date")
    return t_us


def _iso(t_us: int) -> str:
    """UTC time of ``t_us`` as ``YYYY-MM-DDTHH:MM:SSZ`` (any year numpy can write)."""
    return f"{np.datetime_as_string(np.datetime64(int(t_us), 'us'), unit='s')}Z"


@dataclass(kw_only=True)
class MonitorReport:
    """The windows of one monitoring run, oldest first, and what they were computed from."""

    artifact: str
    alpha: float | None
    window: str
    config: MonitorConfig
    windows: list[WindowStats]
    uses_read: int
    uses_outside: int
    labelled_read: int
    join: dict[str, Any] = field(default_factory=dict)
    #: Uses left out of the windows: ``{"before_windows", "no_valid_time", "earliest",
    #: "earliest_at"}`` (the earliest left-out time and its file and line), or empty.
    outliers: dict[str, Any] = field(default_factory=dict)
    #: Uses per artifact the logs name as their decider (``"name@version"``, ``"(none)"``).
    deciders: dict[str, int] = field(default_factory=dict)
    #: ``"name@version"`` of the artifact monitored.
    artifact_label: str = ""

    @property
    def latest(self) -> WindowStats | None:
        """The newest window (what the exit code and ``--on-alert`` look at)."""
        return self.windows[-1] if self.windows else None

    @property
    def alert(self) -> bool:
        """Whether the latest window is ALERT."""
        return self.latest is not None and self.latest.status == "ALERT"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (non-finite numbers as null)."""
        out: dict[str, Any] = _json_ready({
            "artifact": self.artifact, "alpha": self.alpha, "window": self.window,
            "config": self.config.to_dict(), "uses_read": self.uses_read,
            "uses_outside_windows": self.uses_outside, "labelled_uses": self.labelled_read,
            "latest_status": None if self.latest is None else self.latest.status,
            "join": self.join, "outliers": self.outliers, "deciders": self.deciders,
            "windows": [w.to_dict() for w in self.windows],
        })
        return out

    def table(self) -> str:
        """One line per window: status, counts, the headline statistics and the reasons."""
        head = (f"{'window end':<20} {'status':<17} {'uses':>8} {'labels':>7} {'actions':>7} "
                f"{'max PSI':>7} {'mean p':>7} {'rate':>7} {'LL exc':>7} {'harm':>7} "
                f"{'harm hi':>7}")
        lines = [f"monitor {self.artifact} (alpha {self.alpha}), windows of {self.window}"]
        if self.outliers:
            lines.append(_outlier_line(self.outliers))
        mine = self.artifact_label
        other = {k: v for k, v in self.deciders.items() if k not in (mine, "(none)")}
        if other:
            lines.append("decided by other artifacts, judged against this one's profile: "
                         + ", ".join(f"{k}: {v} uses" for k, v in other.items()))
        lines += [head, "-" * len(head)]

        def num(x: Any, fmt: str = "7.4f") -> str:
            return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) \
                else f"{'-':>7}"

        for w in self.windows:
            c, h = w.calibration, w.harm
            psi_max = max((s["psi"] for s in w.drift.values()), default=None)
            lines.append(
                f"{w.end:<20} {w.status:<17} {w.uses:>8} {w.labelled:>7} "
                f"{w.actions_labelled:>7} {num(psi_max, '7.3f')} {num(w.mean_p)} "
                f"{num(c.get('observed_rate'))} {num(c.get('log_loss_excess'))} "
                f"{num(h.get('rate'))} {num((h.get('warn_ci') or [None, None])[1])}")
            lines.extend(f"{'':<20}   {r}" for r in w.reasons)
        return "\n".join(lines) + "\n"


def _json_ready(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return safe_float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _profile(artifact: Any) -> dict[str, Any]:
    from amv_calib.artifacts import PROFILE_FILE

    path = Path(artifact.path) / PROFILE_FILE
    raw = artifact.contents.get(PROFILE_FILE) if PROFILE_FILE in artifact.files else None
    if raw is None:
        raise ArtifactError(f"{artifact.path}: no {PROFILE_FILE} (exported before monitoring "
                            f"existed); re-export the version to monitor it")
    # the bytes the loader read and hashed, not the folder again
    try:
        profile: dict[str, Any] = loads_strict(raw)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from None
    missing = [f for f in CLAIM_FEATURES if f not in profile.get("features", {})]
    if missing:
        raise ArtifactError(f"{path}: features {missing} missing from the profile")
    return profile


def _record_index(entries: pd.DataFrame) -> tuple[IntArray, IntArray]:
    """Per record (entries come in file, line order): its sort key and premise count."""
    rec = entries["rec"].to_numpy()
    first = np.flatnonzero(np.diff(rec, prepend=-1) != 0) if len(rec) else \
        np.zeros(0, np.int64)
    key = (entries["file"].to_numpy(dtype=np.int64)[first] << 40) \
        | entries["line"].to_numpy(dtype=np.int64)[first]
    return key, entries["n_premises"].to_numpy(dtype=np.int64)[first]


def monitor(
    artifact: str | os.PathLike[str],
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    window: str = "7d",
    since: str | None = None,
    config: MonitorConfig | None = None,
    on_corrupt: str = "raise",
    trusted_keys: PathLike | Sequence[PathLike] | None = None,
    other_artifacts: str = "warn",
) -> tuple[MonitorReport, pd.DataFrame]:
    """Drift, calibration and harm of the gate's logged decisions, window by window.

    Parameters
    ----------
    artifact : str or path
        The artifact the gate runs (``models/amv-guard@production``): its ``profile.json``
        is the reference, its certificate's alpha the harm bound.
    decisions : path or sequence of paths
        Decision logs, in time order.
    outcomes : path, DataFrame, sequence of them, or None
        Outcome records, as for ``amv-calib label``. None: drift only.
    window : str, default "7d"
        Window width (:func:`parse_window`).
    since : str, optional
        Start of the first window (module docstring).
    config : MonitorConfig, optional
        Thresholds; the defaults when None.
    on_corrupt : {"raise", "skip"}
        A corrupt decision-log line raises, or is skipped and counted.
    trusted_keys : path or sequence of paths, optional
        Public keys the artifact must be signed with (see
        :func:`amv_calib.contract.load_artifact`).
    other_artifacts : {"warn", "refuse"}, default "warn"
        What uses the logs say another artifact (name or version) decided do: judged
        against this artifact's profile all the same, with a warning and a line in the
        table, or refused (:class:`ConfigError`). Uses whose record names no artifact (a
        gate without one) are judged; every use is counted by its decider in
        ``report.deciders``.

    Returns
    -------
    report : MonitorReport
    claims : DataFrame
        The outcome-labelled claims of the join (what ``--on-alert`` retrains on).

    Raises
    ------
    ConfigError
        The logs hold uses another artifact decided, and ``other_artifacts="refuse"``.
    """
    from amv_calib.claims import label_claims, read_uses, use_entries
    from amv_calib.contract import load_artifact

    cfg = config or MonitorConfig()
    width = parse_window(window)
    art = load_artifact(str(artifact), trusted_keys=trusted_keys)
    profile = _profile(art)
    cert = art.manifest.get("certificate") or {}
    alpha = safe_float(cert.get("alpha")) if cert else None
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"), ConfigError)
    log = read_uses(plist, on_corrupt="raise" if on_corrupt == "raise" else "skip")
    check_choice("other_artifacts", other_artifacts, ("warn", "refuse"), ConfigError)
    mine = f"{art.name}@{art.version}"
    deciders = _deciders(log, mine, other_artifacts == "refuse")
    claims, report = label_claims(plist, outcomes, soft_labels="off", log=log)
    entries = log.entries

    # -- uses and their windows -------------------------------------------------------
    use_pos = use_entries(log)
    t_use = entries["t_us"].to_numpy()[use_pos]
    valid_t = t_use != _NAT
    if not valid_t.any():
        return MonitorReport(artifact=str(art.path), alpha=alpha, window=window, config=cfg,
                             windows=[], uses_read=len(use_pos), uses_outside=len(use_pos),
                             labelled_read=len(claims), join=_join_summary(report),
                             outliers={"before_windows": 0, "no_valid_time": len(use_pos)},
                             deciders=deciders, artifact_label=mine), claims
    start, n_win = _windows(t_use[valid_t], width, since, window)

    def window_of(t: Any) -> Any:
        w = np.full(len(t), -1, dtype=np.int64)
        ok = (t != _NAT) & (t >= start)
        w[ok] = (t[ok] - start) // width
        w[w >= n_win] = -1
        return w

    w_use = window_of(t_use)
    outliers = _outliers(t_use, w_use, entries, use_pos, [os.fspath(p) for p in plist])
    if outliers:
        _log.warning("monitor: %s", _outlier_line(outliers))
    X = {f: entries[f].to_numpy()[use_pos] for f in CLAIM_FEATURES}
    p_use = entries["p"].to_numpy()[use_pos]

    # -- labelled uses and actions -------------------------------------------------------
    # the join writes datetime64[us, UTC] (NaT as the int64 minimum, like the log's times)
    t_lab = np.asarray(pd.DatetimeIndex(claims["timestamp"]).tz_convert("UTC")
                       .tz_localize(None).as_unit("us").asi8, dtype=np.int64)
    w_lab = window_of(t_lab)
    y_lab = claims["violated"].to_numpy(dtype=np.float64)
    p_lab = claims["p_logged"].to_numpy(dtype=np.float64)
    rec_key, rec_n = _record_index(entries)
    file_code = claims["decision_file"].cat.codes.to_numpy()
    lab_key = (file_code.astype(np.int64) << 40) | claims["decision_line"].to_numpy(np.int64)
    lab_rec = np.searchsorted(rec_key, lab_key)
    if len(claims):
        uniq, inv, counts = np.unique(lab_rec, return_inverse=True, return_counts=True)
        any_v = np.zeros(len(uniq), dtype=bool)
        np.logical_or.at(any_v, inv, y_lab > 0.5)
        first = np.zeros(len(uniq), dtype=np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]
        complete = counts == rec_n[uniq]
        proceed = (claims["regime"] == "PROCEED").to_numpy(dtype=bool)[first]
        a_win = w_lab[first][complete]
        a_harm = (proceed & any_v)[complete]
    else:
        a_win = np.zeros(0, np.int64)
        a_harm = np.zeros(0, bool)

    training = {k: profile.get("oof_metrics", {}).get(k) for k in ("log_loss", "brier")}
    ref_mean_p = safe_float(profile.get("mean_p"))
    # each window's rows, found once by sorting (not one pass over every row per window)
    by_use = _by_window(w_use, n_win)
    by_lab = _by_window(np.where(np.isfinite(p_lab), w_lab, -1), n_win)
    by_act = _by_window(a_win, n_win)
    windows: list[WindowStats] = []
    for k in range(n_win):
        lo, hi = start + k * width, start + (k + 1) * width
        sel = by_use[k]
        ws = WindowStats(start=_iso(lo), end=_iso(hi), uses=len(sel), labelled=0,
                         actions_labelled=0)
        if ws.uses:
            ws.drift = _stats.drift_stats(
                pd.DataFrame({f: X[f][sel] for f in CLAIM_FEATURES}), profile)
            ps = p_use[sel]
            ps = ps[np.isfinite(ps)]
            if len(ps):
                ws.mean_p = float(ps.mean())
                ws.mean_p_shift = None if ref_mean_p is None else ws.mean_p - ref_mean_p
        lab = by_lab[k]
        ws.labelled = len(lab)
        if ws.labelled >= cfg.min_labels:
            ws.calibration = _stats.calibration_stats(y_lab[lab], p_lab[lab], training, cfg)
        acts = by_act[k]
        ws.actions_labelled = len(acts)
        if ws.actions_labelled:
            ws.harm = _stats.harm_stats(a_harm[acts], alpha, cfg)
        _stats.decide(ws, cfg)
        windows.append(ws)
    outside = int((w_use < 0).sum())
    return MonitorReport(artifact=str(art.path), alpha=alpha, window=window, config=cfg,
                         windows=windows, uses_read=len(use_pos), uses_outside=outside,
                         labelled_read=len(claims), join=_join_summary(report),
                         outliers=outliers, deciders=deciders, artifact_label=mine), claims


def _deciders(log: Any, expected: str, refuse: bool) -> dict[str, int]:
    """Uses per artifact the log records name (``"(none)"``: no artifact named); warns of,
    or refuses, uses another artifact decided (its profile, not this one's, is what their
    claims are to be compared with)."""
    from amv_calib.claims import use_entries

    cal = log.entries["calibrator"].to_numpy(dtype=object)[use_entries(log)]
    named = pd.Series(cal).fillna("(none)").value_counts()
    counts = {str(k): int(v) for k, v in sorted(named.items())}
    other = {k: v for k, v in counts.items() if k not in (expected, "(none)")}
    if other:
        text = ", ".join(f"{k}: {v}" for k, v in other.items())
        message = (f"the decision logs hold {sum(other.values())} uses decided by other "
                   f"artifacts ({text}), not {expected}")
        if refuse:
            raise ConfigError(f"{message}: their claims would be judged against {expected}'s "
                              f"profile; monitor them with their own artifact, or pass "
                              f"--other-artifacts warn to judge them against this one")
        _log.warning("monitor: %s; judged against %s's profile all the same", message,
                     expected)
    return counts


def _windows(t: IntArray, width: int, since: str | None, window: str) -> tuple[int, int]:
    """``(start, count)`` of the windows over the valid use times ``t`` (module docs)."""
    t_min, t_max = int(t.min()), int(t.max())
    if since is not None:
        start = parse_since(since)
        n_all = max(1, -(-(t_max + 1 - start) // width))
    else:
        end = (t_max // _US + 1) * _US  # the whole second after the newest use
        n_all = max(1, -(-(end - t_min) // width))
        start = end - n_all * width
    n_win = min(n_all, MAX_WINDOWS)
    if n_all > n_win:
        _log.warning("monitor: the uses span %s windows of %s; only the newest %s are made "
                     "(pass --since or a wider --window)", f"{n_all:,}", window, f"{n_win:,}")
    return start + (n_all - n_win) * width, n_win


def _by_window(w: IntArray, n_win: int) -> list[IntArray]:
    """The rows of each window ``0 .. n_win - 1`` (``w`` = -1: in none), in row order."""
    order = np.argsort(w, kind="stable")
    bounds = np.searchsorted(w[order], np.arange(n_win + 1))
    return [order[bounds[k]:bounds[k + 1]] for k in range(n_win)]


def _outliers(t: IntArray, w: IntArray, entries: pd.DataFrame, use_pos: IntArray,
              files: Sequence[str]) -> dict[str, Any]:
    """The uses left out of every window (module docs), and the earliest of their times."""
    before = (t != _NAT) & (w < 0)
    no_time = int((t == _NAT).sum())
    if not before.any():
        return {"before_windows": 0, "no_valid_time": no_time} if no_time else {}
    i = int(np.flatnonzero(before)[np.argmin(t[before])])
    row = entries.iloc[int(use_pos[i])]
    return {"before_windows": int(before.sum()), "no_valid_time": no_time,
            "earliest": _iso(int(t[i])),
            "earliest_at": {"file": files[int(row["file"])], "line": int(row["line"])}}


def _outlier_line(o: Mapping[str, Any]) -> str:
    """One line saying which uses no window holds."""
    parts = []
    if o.get("before_windows"):
        at = o["earliest_at"]
        parts.append(f"{o['before_windows']} uses before the first window, the earliest at "
                     f"{o['earliest']} ({at['file']}, line {at['line']})")
    if o.get("no_valid_time"):
        parts.append(f"{o['no_valid_time']} uses without a valid time")
    return "left out of the windows: " + "; ".join(parts)


def _join_summary(report: Any) -> dict[str, Any]:
    d = report.to_dict()
    return {k: d[k] for k in ("uses_read", "joined", "unjoined", "outcomes_read", "outcomes")
            if k in d}


def load_monitor_config(path: PathLike | None,
                        overrides: Mapping[str, Any] | None = None) -> MonitorConfig:
    """The ``[monitor]`` table of a TOML file (other tables are ignored), then overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        doc = read_toml(p, "--config file")
        section = doc.get("monitor", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{p.name}: [monitor] must be a table")
        data.update(section)
    data.update(overrides or {})
    return MonitorConfig.from_mapping(data)


def write_monitor_outputs(report: MonitorReport, claims: pd.DataFrame,
                          out_dir: PathLike) -> dict[str, Path]:
    """Write ``monitor.json``, ``monitor.txt`` (the table), ``timeline.png`` and
    ``claims.parquet`` (the outcome-labelled claims, what a retrain starts from)."""
    from amv_calib.monitoring._figure import timeline_figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    files = {"report": out / "monitor.json", "table": out / "monitor.txt",
             "timeline": out / "timeline.png", "claims": out / "claims.parquet"}
    files["report"].write_text(json.dumps(data, indent=2, sort_keys=True) + "\n",
                               encoding="utf-8")
    files["table"].write_text(report.table(), encoding="utf-8")
    timeline_figure(data, files["timeline"])
    claims.to_parquet(files["claims"], index=False)
    return files
