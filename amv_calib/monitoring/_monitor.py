"""Monitoring a production gate: the evidence accumulated since it went live, and windows.

Each run reads the decision lines not read before (:func:`amv_calib.claims.read_uses` over
byte spans; the state in :mod:`._state` says where each file was left), takes back the
pending uses that new outcomes or new records may decide, and joins both with the outcome
records by the label join's rules (:func:`amv_calib.claims.join_logs` with ``log=``),
with outcome labels only: a verifier's soft label is derived from the gate's own
probability, so it cannot show that probability wrong.

The uses of the monitored version (its logged ``calibrator`` is ``name@version``) decided
since it went live feed the sequential statistics of :mod:`._sequential`: labelled uses
(calibration) and labelled actions (every premise labelled: harm), in buckets by decision
day. Every use falls in a window by its time; the windows' drift, calibration and harm
statistics (:mod:`._stats`) are descriptive context.

Windows
-------
``window`` wide (``"7d"``, ``"12h"``, ``"2w"``), starting at ``since`` when given, else at
midnight UTC of the go-live day, from the first window that holds a use; the latest one
may be partial. Uses before the start and uses without a valid time are left out (and
counted). A window the data passed is frozen with its statistics: labels that arrive for
it later count in the sequential statistics, not in its descriptive ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.contract import CLAIM_FEATURES, loads_strict, read_toml
from amv_calib.exceptions import ArtifactError, ConfigError, check_choice
from amv_calib.monitoring import _stats
from amv_calib.monitoring._state import MonitorState, require_readable_log
from amv_calib.monitoring._stats import WindowStats, safe_float
from amv_calib.settings import MonitorConfig, MonitorOptions

#: The library defaults of a run, from the one source of the options.
_OPTIONS: Final = MonitorOptions.defaults()

PathLike = str | os.PathLike[str]
IntArray = NDArray[np.int64]
_UNITS: Final = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_US: Final = 1_000_000
#: ``MISSING_US`` of the label join: a use whose time is missing or did not parse.
_NAT: Final = np.iinfo(np.int64).min
_DAY_US: Final = 86400 * _US
#: The most windows a state keeps, and one run adds (the newest ones): a narrow window over
#: a long log, or one use dated far from the rest, would otherwise ask for millions.
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
    """One monitoring run: the sequential evidence, the windows (oldest first) and what
    they were computed from."""

    artifact: str
    alpha: float | None
    window: str
    config: MonitorConfig
    windows: list[WindowStats]
    uses_read: int
    uses_outside: int
    labelled_read: int
    join: dict[str, Any] = field(default_factory=dict)
    scope: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    status: str = "INSUFFICIENT DATA"
    reasons: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def latest(self) -> WindowStats | None:
        """The newest window."""
        return self.windows[-1] if self.windows else None

    @property
    def alert(self) -> bool:
        """Whether the run is ALERT (what the exit code and ``--on-alert`` look at)."""
        return self.status == "ALERT"

    @property
    def harm_alert(self) -> bool:
        """Whether the harm detector alerts (what de-risking acts on)."""
        return self.alert and any(r.startswith("harm:") and "above the certified alpha" in r
                                  for r in self.reasons)

    def line(self) -> str:
        """The run in one line: status, the harm confidence sequence against alpha, the
        labelled actions counted, what happened."""
        ev = self.evidence
        what = "; ".join(self.actions) or "nothing done"
        since = self.scope.get("start", "?")
        if ev.get("harm_cs") is None or self.alpha is None:
            harm = "harm not tracked (no certificate)"
        else:
            lo, hi = ev["harm_cs"]
            rate = ev.get("harm_rate")
            both = ev.get("harm_cs_confidence", 0.0)
            side = ev.get("harm_cs_side_confidence", 0.0)
            harm = (f"harm {'-' if rate is None else format(rate, '.4f')}, "
                    f"{100 * both:g} % confidence sequence ({100 * side:g} % each side) "
                    f"[{lo:.4f}, {hi:.4f}] vs alpha {self.alpha:g}")
        return (f"{self.status}: {self.scope.get('calibrator', self.artifact)} {harm}, "
                f"{ev.get('labelled_actions', 0)} labelled actions since {since[:10]}; "
                f"{what}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (non-finite numbers as null)."""
        out: dict[str, Any] = _json_ready({
            "artifact": self.artifact, "alpha": self.alpha, "window": self.window,
            "config": self.config.to_dict(), "uses_read": self.uses_read,
            "uses_outside_windows": self.uses_outside, "labelled_uses": self.labelled_read,
            "status": self.status, "latest_status": self.status, "reasons": self.reasons,
            "line": self.line(), "actions": self.actions, "scope": self.scope,
            "evidence": self.evidence, "counts": self.counts, "run": self.run,
            "timeline": self.timeline,
            "join": self.join, "windows": [w.to_dict() for w in self.windows],
        })
        return out

    def table(self) -> str:
        """The line, the reasons, then one line per window: status, counts, the headline
        statistics and the harm confidence sequence as of the window's end."""
        head = (f"{'window end':<20} {'status':<17} {'uses':>8} {'labels':>7} {'actions':>7} "
                f"{'max PSI':>7} {'p all':>7} {'p lab':>7} {'rate':>7} {'LL exc':>7} "
                f"{'harm':>7} {'CS lo':>7} {'CS hi':>7}")
        lines = [self.line(), *(f"  {r}" for r in self.reasons), "",
                 f"windows of {self.window} (descriptive; status as of each window's end)",
                 "p all: mean p over every use; p lab: mean p over the labelled uses; rate: "
                 "their observed violation rate; harm: Gate Harmful of the labelled actions",
                 head, "-" * len(head)]

        def num(x: Any, fmt: str = "7.4f") -> str:
            return format(x, fmt) if isinstance(x, (int, float)) and math.isfinite(x) \
                else f"{'-':>7}"

        ends = {t["end"]: t for t in self.timeline}
        for w in self.windows:
            c, h = w.calibration, w.harm
            cs = (ends.get(w.end) or {}).get("harm_cs") or [None, None]
            psi_max = max((s["psi"] for s in w.drift.values()), default=None)
            lines.append(
                f"{w.end:<20} {w.status:<17} {w.uses:>8} {w.labelled:>7} "
                f"{w.actions_labelled:>7} {num(psi_max, '7.3f')} {num(w.mean_p)} "
                f"{num(c.get('mean_p'))} {num(c.get('observed_rate'))} "
                f"{num(c.get('log_loss_excess'))} "
                f"{num(h.get('rate'))} {num(cs[0])} {num(cs[1])}")
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


def go_live(art: Any) -> str:
    """When the monitored version went live: the time its alias last moved to it (a
    promotion or a rollback), for an artifact loaded through an alias; else the version's
    creation time (no decision of it can be older)."""
    from amv_calib.contract import read_aliases

    if art.alias is not None:
        entry = read_aliases(art.path.parent)["aliases"].get(art.alias) or {}
        if entry.get("version") == art.version and entry.get("updated_utc"):
            return str(entry["updated_utc"])
    return str(art.manifest.get("created_utc") or "1970-01-01T00:00:00Z")


def _scope(art: Any, since: str | None, width: int, cfg: MonitorConfig) -> dict[str, Any]:
    live = parse_since(go_live(art))
    since_us = parse_since(since) if since is not None else None
    start = live if since_us is None else max(live, since_us)
    anchor = since_us if since_us is not None else (start // _DAY_US) * _DAY_US
    # the artifact itself, not only its name: its manifest binds every file's sha256
    manifest = json.dumps(art.manifest, sort_keys=True, separators=(",", ":"))
    return {"calibrator": f"{art.name}@{art.version}", "go_live": _iso(live),
            "artifact_manifest_sha256": hashlib.sha256(manifest.encode("utf-8")).hexdigest(),
            "since": None if since_us is None else _iso(since_us), "start": _iso(start),
            "start_us": start, "anchor_us": anchor, "window_us": width,
            "loss_margin": cfg.loss_margin, "calibration_margin": cfg.calibration_margin,
            "label_horizon_days": cfg.label_horizon_days}


# -- reading and joining (one function: the reader can change behind it) --------------------
@dataclass(kw_only=True)
class _Batch:
    """The entries joined in one run: pending ones taken again, then the new lines."""

    entries: pd.DataFrame
    n_pending: int
    counted_before: NDArray[np.bool_]
    counted_y: NDArray[np.bool_]  # the label a counted use was counted with
    labelled: NDArray[np.bool_]
    violated: NDArray[np.bool_]
    is_use: NDArray[np.bool_]
    rec: IntArray
    claims: pd.DataFrame
    join: dict[str, Any]
    akey: NDArray[np.uint64]
    ckey: NDArray[np.uint64]


def _read_and_join(st: MonitorState, plist: Sequence[str], outcomes: Any,
                   on_corrupt: str, spans: Sequence[tuple[int, int, int]],
                   file_index: Sequence[int]) -> tuple[_Batch, list[tuple[int, IntArray]]]:
    """Read the new lines, take back the pending entries that new outcomes or new records
    may decide, and join both with the outcomes by the label join's rules; returns the
    batch and, per pending partition, the rows taken back."""
    from amv_calib.claims import LogEntries, join_logs, read_with_outcomes
    from amv_calib.claims.engine import hash_strings
    from amv_calib.contract import LogReadStats
    from amv_calib.monitoring._state import hash_rows, is_in, unique_keys

    log, out_df, _ = read_with_outcomes(
        list(plist), outcomes, on_corrupt="raise" if on_corrupt == "raise" else "skip",
        spans=list(spans))
    new = log.wide()
    new["file"] = np.asarray(file_index, dtype=np.int32)[new["file"].to_numpy()] \
        if len(new) else new["file"]
    for i, (fi, s) in enumerate(zip(file_index, log.stats, strict=True)):
        st.files[fi].offset = spans[i][1]
        st.files[fi].lines += s.lines
    o_akey = hash_strings(out_df["action_id"])
    o_ckey = hash_strings(out_df["claim_id"])
    row_hash = hash_rows([o_ckey, o_akey, out_df["t_us"].to_numpy(np.int64),
                          out_df["violated"].to_numpy(bool)])
    seen = is_in(row_hash, st.outcome_hashes)
    st.outcome_hashes = unique_keys(np.concatenate([st.outcome_hashes, row_hash]))
    if st.pending is not None and st.pending.parts:
        new_akey = hash_strings(new["action_id"])
        cand, taken = st.pending.candidates(
            np.concatenate([o_akey[~seen & (o_akey != 0)], new_akey[new_akey != 0]]),
            o_ckey[~seen & (o_ckey != 0)])
    else:
        cand, taken = pd.DataFrame(), []
    n_pending = len(cand)
    counted_before = np.zeros(n_pending + len(new), dtype=bool)
    counted_y = np.zeros(n_pending + len(new), dtype=bool)
    if n_pending:
        counted_before[:n_pending] = cand.pop("counted").to_numpy(dtype=bool)
        counted_y[:n_pending] = cand.pop("counted_y").to_numpy(dtype=bool)
        entries = _concat_entries(cand, new)
    else:
        entries = new
    # records: consecutive ids in batch order (a record's entries are contiguous)
    fl = entries["file"].to_numpy(np.int64) << 40 | entries["line"].to_numpy(np.int64)
    src = np.zeros(len(entries), np.int64)
    src[n_pending:] = 1
    change = np.ones(len(entries), dtype=bool)
    change[1:] = (fl[1:] != fl[:-1]) | (src[1:] != src[:-1])
    rec = np.cumsum(change) - 1
    entries["rec"] = rec
    bad_times = {int(r) + int(rec[n_pending]) if n_pending < len(rec) else int(r): v
                 for r, v in log.bad_times.items()}
    names = [m.path for m in st.files]
    stats = [LogReadStats() for _ in names]
    for fi, s in zip(file_index, log.stats, strict=True):
        stats[fi] = s
    batch_log = LogEntries.from_wide(entries, signals=log.signals.iloc[:0], offers=log.offers,
                                     stats=stats, bad_times=bad_times)
    b_akey = hash_strings(entries["action_id"])
    b_ckey = hash_strings(entries["claim_id"])
    if n_pending or any(s[0] > 0 for s in spans):
        # a part of the logs: the outcomes that may name it (a collision only keeps one)
        keep = is_in(o_akey, b_akey[b_akey != 0]) | is_in(o_ckey, b_ckey[b_ckey != 0])
        sub = out_df.loc[keep]
    else:  # every line of every log: the join leaves the outcomes naming none unjoined
        sub = out_df
    outcome_frame = pd.DataFrame({
        "claim_id": sub["claim_id"].reset_index(drop=True),
        "action_id": sub["action_id"].reset_index(drop=True),
        "time": pd.DatetimeIndex(sub["t_us"].to_numpy().astype("datetime64[us]"))
        .tz_localize("UTC"),
        "violated": sub["violated"].to_numpy(dtype=bool)})
    # the claim rows only: the unjoined uses are counted in the report, not listed
    joined = join_logs(names, outcome_frame, soft_labels="off", log=batch_log)
    claims, report = joined.claims(), joined.report
    # the entry of each use, as the join found them
    use_pos = np.arange(report.uses_read, dtype=np.int64) if joined.entry_of_use is None \
        else joined.entry_of_use
    del joined
    labelled = np.zeros(len(entries), dtype=bool)
    violated = np.zeros(len(entries), dtype=bool)
    is_use = np.zeros(len(entries), dtype=bool)
    is_use[use_pos] = True
    if len(claims):
        pos = use_pos[claims["use_id"].to_numpy()]
        labelled[pos] = True
        violated[pos] = claims["violated"].to_numpy(dtype=bool)
    d = report.to_dict()
    join: dict[str, Any] = {k: d[k] for k in ("uses_read", "joined", "unjoined") if k in d}
    join["outcomes_read"] = int(len(out_df))
    join["outcomes_new"] = int((~seen).sum())
    join["pending_taken_back"] = n_pending
    batch = _Batch(entries=entries, n_pending=n_pending, counted_before=counted_before,
                   counted_y=counted_y,
                   labelled=labelled, violated=violated, is_use=is_use, rec=rec,
                   claims=claims, join=join, akey=b_akey, ckey=b_ckey)
    return batch, taken


def _concat_entries(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two entry frames as one, categoricals re-encoded over both."""
    cols = list(b.columns)
    out: dict[str, Any] = {}
    for c in cols:
        y = b[c]
        # "rec" is renumbered by the caller
        x = a[c] if c in a else pd.Series(np.zeros(len(a), dtype=np.int64))
        # text through Arrow strings: factorised in C++ (object values were hashed one by
        # one in Python, most of a daily run's merge)
        if isinstance(y.dtype, pd.CategoricalDtype) or isinstance(x.dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical(pd.concat([x.astype("str"), y.astype("str")],
                                              ignore_index=True))
        elif c == "claim_id":
            out[c] = pd.concat([x.astype("str"), y.astype("str")], ignore_index=True).array
        else:
            out[c] = np.concatenate([x.to_numpy(), y.to_numpy()]).astype(y.to_numpy().dtype)
    return pd.DataFrame(out)


# -- one run ------------------------------------------------------------------------------
def monitor(
    artifact: str | os.PathLike[str],
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    window: str = _OPTIONS.window,
    since: str | None = _OPTIONS.since,
    config: MonitorConfig | None = None,
    on_corrupt: str = "raise",
    trusted_keys: PathLike | Sequence[PathLike] | None = None,
    state: PathLike | None = None,
    rebuild: bool = _OPTIONS.rebuild,
    other_artifacts: str = _OPTIONS.other_artifacts,
) -> tuple[MonitorReport, pd.DataFrame | None]:
    """The sequential evidence on the monitored version, and the windows' statistics.

    Parameters
    ----------
    artifact : str or path
        The artifact the gate runs (``models/amv-guard@production``): its ``profile.json``
        is the reference, its certificate's alpha the harm bound, its alias's history the
        go-live (:func:`go_live`).
    decisions : path or sequence of paths
        Decision logs, in time order (append-only; a rotated file is followed by inode).
    outcomes : path, DataFrame, sequence of them, or None
        Outcome records, as for ``amv-calib label`` (read whole every run). None: drift
        only.
    window : str, default "7d"
        Window width (:func:`parse_window`) of the descriptive statistics.
    since : str, optional
        Start of the monitoring (and of the first window) when later than the go-live.
    config : MonitorConfig, optional
        Thresholds; the defaults when None.
    on_corrupt : {"raise", "skip"}
        A corrupt decision-log line raises, or is skipped and counted.
    trusted_keys : path or sequence of paths, optional
        Public keys the artifact must be signed with (see
        :func:`amv_calib.contract.load_artifact`).
    state : path, optional
        The state folder (:mod:`._state`): the run continues from it (reading only new
        decision lines) and leaves it for the next one. None: everything is read, nothing
        kept.
    rebuild : bool, default False
        Ignore the state and recompute from scratch (the state is then replaced).
    other_artifacts : {"warn", "refuse"}, default "warn"
        Uses the logs say another artifact (name or version) decided are never judged
        against this one's profile: they are left out of every statistic and counted
        (``uses_other_versions``), with a warning and a reason line, or refused
        (:class:`ConfigError`, the state left as it was).

    Returns
    -------
    report : MonitorReport
    claims : DataFrame or None
        The outcome-labelled claims of every use (what ``--on-alert`` retrains on) when
        the run read everything; None for an incremental run.
    """
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring._state import plan_reads

    cfg = config or MonitorConfig()
    width = parse_window(window)
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"), ConfigError)
    art = load_artifact(str(artifact), trusted_keys=trusted_keys)
    profile = _profile(art)
    cert = art.manifest.get("certificate") or {}
    alpha = safe_float(cert.get("alpha")) if cert else None
    plist = [os.fspath(p) for p in ([decisions] if isinstance(decisions, (str, os.PathLike))
                                    else decisions)]
    for p in plist:
        require_readable_log(p)
    scope = _scope(art, since, width, cfg)
    folder = None if state is None else Path(state)
    st: MonitorState | None = None
    run: dict[str, Any] = {"mode": "full" if folder is None else "rebuild"}
    if folder is not None and not rebuild:
        st, why = MonitorState.load(folder, scope)
        if st is not None:
            index, spans, refused = plan_reads(plist, st.files)
            if refused:
                why = refused
                st = None
            else:
                run["mode"] = "incremental"
        if st is None:
            run["rebuilt_because"] = why
            if why != "no state yet":
                _log.warning("monitor: state in %s not continued (%s); rebuilding from the logs",
                             folder, why)
    if st is None:
        st = MonitorState.empty(scope, folder)
        index, spans, _ = plan_reads(plist, st.files)
    check_choice("other_artifacts", other_artifacts, ("warn", "refuse"), ConfigError)
    before = st.counts.get("uses_other_versions", 0)
    batch, taken = _read_and_join(st, plist, outcomes, on_corrupt, spans, index)
    _account(st, batch, taken, cfg, profile)
    other = st.counts.get("uses_other_versions", 0)
    if other > before and other_artifacts == "refuse":
        raise ConfigError(
            f"the decision logs hold {other - before} uses decided by other artifacts than "
            f"{scope['calibrator']}: monitor them with their own artifact, or pass "
            f"--other-artifacts warn to leave them out")
    st.save()
    report = _report(st, art, alpha, window, cfg, run, batch.join, profile)
    if other:
        note = (f"{other} uses decided by other artifacts than {scope['calibrator']} since it "
                f"went live were left out: never judged against its profile")
        _log.warning("monitor: %s", note)
        report.reasons.append(note)
    report.reasons.extend(_left_out(st.counts, scope))
    claims = batch.claims if run["mode"] != "incremental" else None
    return report, claims


def harm_alert_recomputed(report: MonitorReport, artifact: str | os.PathLike[str],
                          decisions: PathLike | Sequence[PathLike], outcomes: Any,
                          **kwargs: Any) -> MonitorReport | None:
    """The report whose harm ALERT de-risking may act on, or None.

    A run that read every log (``run.mode`` full or rebuild) is its own evidence. An
    incremental run's evidence comes partly from its state, which a person or program
    with write access to the folder could have forged consistently: the logs are read
    again in full here (:func:`monitor` without a state, ``kwargs`` as given to it), and
    only that recomputation's harm ALERT counts (None when it does not hold).
    """
    if not report.harm_alert:
        return None
    if report.run.get("mode") != "incremental":
        return report
    kwargs = {k: v for k, v in kwargs.items() if k not in ("state", "rebuild")}
    again, _ = monitor(artifact, decisions, outcomes, state=None, **kwargs)
    if not again.harm_alert:
        _log.warning("monitor: the harm ALERT of the state did not hold when recomputed from "
                     "the logs (%s): not de-risked", again.line())
        return None
    return again


def _left_out(counts: Mapping[str, int], scope: Mapping[str, Any]) -> list[str]:
    """Reason lines for the uses no window holds and the windows not made."""
    out = []
    if counts.get("uses_outside"):
        out.append(f"{counts['uses_outside']} uses dated before {scope['start']} (the start: "
                   f"go-live or --since) or without a valid time were left out of the "
                   f"windows and the evidence")
    if counts.get("windows_dropped"):
        out.append(f"{counts['windows_dropped']} older windows were not made (at most "
                   f"{MAX_WINDOWS} are kept: pass --since or a wider --window)")
    return out


def _day(t_us: IntArray, start_us: int) -> IntArray:
    return np.asarray(t_us // _DAY_US - start_us // _DAY_US, dtype=np.int64)


def _account(st: MonitorState, b: _Batch, taken: list[tuple[int, IntArray]],
             cfg: MonitorConfig,
             profile: Mapping[str, Any]) -> None:
    """Count what the batch decided into the buckets, the windows and the pending store."""
    e = b.entries
    scope = st.scope
    start = int(scope["start_us"])
    t = e["t_us"].to_numpy()
    valid_t = (t != _NAT) & (t >= start)
    in_scope = valid_t & (e["calibrator"].astype(object).to_numpy() == scope["calibrator"])
    p = e["p"].to_numpy()
    newly = b.labelled & in_scope & ~b.counted_before & np.isfinite(p)
    day = _day(t, start)
    st.buckets.add_uses(day[newly], b.violated[newly].astype(np.float64), p[newly],
                        cfg.loss_margin, cfg.calibration_margin)
    # actions: a record whose entries are all labelled uses
    n_rec = int(b.rec[-1]) + 1 if len(b.rec) else 0
    first = np.flatnonzero(np.diff(b.rec, prepend=-1) != 0)
    n_lab = np.bincount(b.rec, weights=b.labelled, minlength=n_rec)
    any_v = np.bincount(b.rec, weights=b.labelled & b.violated, minlength=n_rec) > 0
    n_prem = e["n_premises"].to_numpy()[first]
    rec_scope = in_scope[first]
    complete = (n_lab == n_prem) & rec_scope
    proceed = (e["regime"].astype(object).to_numpy()[first] == "PROCEED")
    harmful = proceed & any_v
    # what p too high costs: actions held back (verified or abstained) on valid premises
    cautious = ~proceed & ~any_v
    st.buckets.add_actions(day[first][complete], harmful[complete], cautious[complete])
    done = complete[b.rec]
    counted = b.counted_before | newly
    counted_y = np.where(b.counted_before, b.counted_y, b.violated & newly)
    # a later, more specific outcome that changed a counted label: the count keeps the first
    st.count("relabelled_after_count",
             int((b.counted_before & b.labelled & (b.violated != b.counted_y)).sum()))
    npend = b.n_pending
    if st.pending is not None:
        st.pending.update(taken, counted[:npend], done[:npend], counted_y[:npend])
        keep = np.zeros(len(e), dtype=bool)
        keep[npend:] = (rec_scope & ~complete)[b.rec[npend:]]
        st.pending.add(e.drop(columns=["rec"]), keep, counted, counted_y, b.rec, b.akey,
                       b.ckey)
    new_use = b.is_use.copy()
    new_use[:npend] = False
    st.count("uses_read", int(new_use.sum()))
    st.count("uses_outside", int((new_use & ~valid_t).sum()))
    st.count("uses_other_versions", int((new_use & valid_t & ~in_scope).sum()))
    st.count("labelled_uses", int(newly.sum()))
    st.count("labelled_actions", int(complete.sum()))
    if (new_use & valid_t).any():
        top = int(t[new_use & valid_t].max())
        st.newest_us = top if st.newest_us is None else max(st.newest_us, top)
    if st.pending is not None and st.newest_us is not None:
        horizon = cfg.label_horizon_days * _DAY_US
        uses, records = st.pending.expire(st.newest_us - horizon)
        st.count("expired_uses", uses)
        st.count("expired_actions", records)
    # the windows describe the monitored version's own uses: another artifact's claims are
    # not judged against this one's profile (counted in uses_other_versions, and said)
    _windows(st, e, t, new_use & in_scope, newly, b.violated, first[complete],
             harmful[complete], cfg, profile)


_ARRAYS: Final = (*CLAIM_FEATURES, "p", "y", "py", "harm")


def _windows(st: MonitorState, e: pd.DataFrame, t: IntArray, use: NDArray[np.bool_],
             lab: NDArray[np.bool_], violated: NDArray[np.bool_], act_pos: IntArray,
             act_harm: NDArray[np.bool_], cfg: MonitorConfig,
             profile: Mapping[str, Any]) -> None:
    """Add the batch to the windows: the latest keeps its raw values; a window that the
    new data passed is computed and frozen (late values for a frozen window are counted
    in ``late_for_window`` and left out)."""
    anchor, width = int(st.scope["anchor_us"]), int(st.scope["window_us"])

    def win(tt: IntArray) -> IntArray:
        return np.asarray((tt - anchor) // width, dtype=np.int64)

    use_at, lab_at = np.flatnonzero(use), np.flatnonzero(lab)
    w_use, w_lab, w_act = win(t[use_at]), win(t[lab_at]), win(t[act_pos])
    if not len(w_use) and st.latest is None:
        return
    first = st.latest if st.latest is not None else int(w_use.min())
    last = max(first, int(w_use.max()) if len(w_use) else first)
    if last - first + 1 > MAX_WINDOWS:  # only the newest windows are made
        _log.warning("monitor: the uses span %s windows of %s us; only the newest %s are "
                     "made (pass --since or a wider --window)", f"{last - first + 1:,}",
                     width, f"{MAX_WINDOWS:,}")
        st.count("windows_dropped", last - MAX_WINDOWS + 1 - first)
        first = last - MAX_WINDOWS + 1
        if st.latest is not None and st.latest < first:
            st.latest, st.window_arrays = None, {}
    st.count("late_for_window", int((w_use < first).sum() + (w_lab < first).sum()
                                    + (w_act < first).sum()))
    y = e["p"].to_numpy()
    feats = {f: e[f].to_numpy() for f in CLAIM_FEATURES}
    y_lab = violated[lab_at].astype(np.float64)
    act_harm = act_harm.astype(np.float64)
    # each window's rows, in log order, found once (a mask per window and column scanned
    # every row of the batch once per window)
    use_k, lab_k, act_k = (_by_window(w, first, last) for w in (w_use, w_lab, w_act))
    for k in range(first, last + 1):
        at = use_at[use_k(k)]
        part = {f: feats[f][at] for f in CLAIM_FEATURES}
        part["p"] = y[at]
        rows = lab_k(k)
        part["y"] = y_lab[rows]
        part["py"] = y[lab_at[rows]]
        part["harm"] = act_harm[act_k(k)]
        if k == st.latest and st.window_arrays:
            part = {n: np.concatenate([st.window_arrays[n], part[n]]) for n in _ARRAYS}
        if k < last:
            st.windows.append(_window_stats(k, part, anchor, width, cfg, profile).to_dict())
        else:
            st.latest = k
            st.window_arrays = part
    del st.windows[:-MAX_WINDOWS]


def _by_window(w: IntArray, first: int, last: int) -> Callable[[int], IntArray]:
    """Positions in ``w`` of each window ``first..last``, in order (a stable sort of the
    window numbers, sliced)."""
    order = np.argsort(w, kind="stable")
    bounds = np.searchsorted(w[order], np.arange(first, last + 2))
    return lambda k: order[bounds[k - first]:bounds[k - first + 1]]


def _window_stats(k: int, a: Mapping[str, NDArray[Any]], anchor: int, width: int,
                  cfg: MonitorConfig, profile: Mapping[str, Any]) -> WindowStats:
    """A window's descriptive statistics from its raw values, order-free (values sorted),
    so that an incremental run and a rebuild agree."""
    lo, hi = anchor + k * width, anchor + (k + 1) * width
    n = len(a["p"])
    ws = WindowStats(start=_iso(lo), end=_iso(hi), uses=n, labelled=len(a["y"]),
                     actions_labelled=len(a["harm"]))
    if n:
        # numpy's sort holds no GIL: the five columns on two threads (a 10 M-line
        # rebuild's windows: ~6 s of sorting on one)
        p = a["p"]
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="amv-calib-sort") as pool:
            *feats, ps = pool.map(np.sort, [*(a[f] for f in CLAIM_FEATURES),
                                            p[np.isfinite(p)]])
        frame = pd.DataFrame(dict(zip(CLAIM_FEATURES, feats, strict=True)))
        ws.drift = _stats.drift_stats(frame, profile)
        if len(ps):
            ws.mean_p = float(ps.mean())
            ref = safe_float(profile.get("mean_p"))
            ws.mean_p_shift = None if ref is None else ws.mean_p - ref
    if ws.labelled >= cfg.min_labels:
        order = np.lexsort((a["y"], a["py"]))
        training = {k2: profile.get("oof_metrics", {}).get(k2) for k2 in ("log_loss", "brier")}
        ws.calibration = _stats.calibration_stats(a["y"][order], a["py"][order], training, cfg)
    if ws.actions_labelled:
        ws.harm = _stats.harm_stats(a["harm"] > 0.5, None, cfg)
    return ws


def _report(st: MonitorState, art: Any, alpha: float | None, window: str,
            cfg: MonitorConfig, run: dict[str, Any], join: dict[str, Any],
            profile: Mapping[str, Any]) -> MonitorReport:
    """The report of the state: each window's status as of its end, the run's as of the
    newest decision."""
    from amv_calib.monitoring._sequential import evidence

    start = int(st.scope["start_us"])
    last_day = st.buckets.last_day()
    if st.newest_us is not None:
        last_day = max(last_day, int(_day(np.array([st.newest_us]), start)[0]))
    windows = [WindowStats(**w) for w in st.windows]
    anchor, width = int(st.scope["anchor_us"]), int(st.scope["window_us"])
    if st.latest is not None:
        windows.append(_window_stats(st.latest, st.window_arrays, anchor, width, cfg,
                                     profile))
    timeline: list[dict[str, Any]] = []
    seen = st.buckets.sparse(last_day)  # read once; each window takes its prefix
    for w in windows:
        if w.harm:
            w.harm["alpha"] = alpha
        # from the start: the last window's end may lie past year 9999, which times refuse
        end_us = parse_since(w.start) + width
        d = min(last_day, int(_day(np.array([end_us - 1]), start)[0]))
        ev = evidence(st.buckets, d, alpha, cfg.delta, margin=cfg.calibration_margin,
                      seen=seen)
        _stats.decide(w, ev, cfg)
        timeline.append({"end": w.end, **ev.to_dict()})
    ev = evidence(st.buckets, last_day, alpha, cfg.delta, margin=cfg.calibration_margin,
                  seen=seen)
    if windows:
        status, reasons = windows[-1].status, list(windows[-1].reasons)
    else:
        probe = WindowStats(start="", end="", uses=0, labelled=0, actions_labelled=0)
        _stats.decide(probe, ev, cfg)
        status, reasons = probe.status, probe.reasons
    scope = {k: v for k, v in st.scope.items() if not k.endswith("_us")}
    counts = dict(st.counts)
    if st.pending is not None:
        counts["pending_entries"] = st.pending.size()
    return MonitorReport(
        artifact=str(art.path), alpha=alpha, window=window, config=cfg, windows=windows,
        uses_read=counts.get("uses_read", 0), uses_outside=counts.get("uses_outside", 0),
        labelled_read=counts.get("labelled_uses", 0), join=join, scope=scope,
        evidence=ev.to_dict(), status=status, reasons=reasons, counts=counts, run=run,
        timeline=timeline)


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


def write_monitor_outputs(report: MonitorReport, claims: pd.DataFrame | None,
                          out_dir: PathLike) -> dict[str, Path]:
    """Write ``monitor.json``, ``monitor.txt`` (the line, the reasons, the windows),
    ``timeline.png`` and, when the run read everything, ``claims.parquet`` (the
    outcome-labelled claims, what a retrain starts from; an incremental run removes an
    older one rather than leave it stale)."""
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
    if claims is not None:
        claims.to_parquet(files["claims"], index=False)
    else:
        files["claims"].unlink(missing_ok=True)
        del files["claims"]
    return files
