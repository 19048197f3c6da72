"""Claim outcomes from gate decision logs: the label join.

The gate appends one JSON line per decision (:mod:`amv_calib.gate._decision_log`). Whether a
premise's claim was really violated is learnt later, from *outcome records*. This module
joins the two into the claim-outcome table of the data contract (DESIGN section 3), one row
per (claim, use), and accounts for every input record in a :class:`JoinReport`.

Uses
----
A *use* is one premise of one action: the key is ``(action_id, premise id)`` (the premise id
falls back to its ``claim_id``). A sequential run logs several records for one action (one
per step); they are one use each premise, and the **last** record of the action (in file
order, files in the order given) supplies the use time and the claim features. A record
without ``action_id`` is an action of its own. Premise entries merged this way are counted
as ``repeated_entries``. A use whose claim id, time or features break the data contract
(``recency_hours >= 0``, scores in [0, 1], a boolean contradiction flag) is ``invalid_use``.

Outcome records
---------------
Columns ``claim_id`` and/or ``action_id``, ``time`` and ``violated`` (camelCase aliases and
``timestamp``/``observed_at`` accepted; CSV, Parquet or JSONL). Outcomes arrive **after**
the use: an outcome only labels uses at or before its ``time``. Three kinds, the most
specific one that has an outcome at or after the use decides:

1. ``action_id`` + ``claim_id``: the claim's truth in that action.
2. ``action_id`` only: the action's truth. ``violated = false`` means every premise held;
   ``violated = true`` labels the premise only when the action has one premise, otherwise it
   is ``ambiguous_action_outcome`` (unless a claim outcome below decides the premise).
3. ``claim_id`` only: the claim's truth as established at ``time``. A use takes the
   **earliest** claim outcome at or after it, so each outcome labels the uses since the
   previous outcome of that claim.

Several outcomes deciding the same use with different ``violated`` values (same kind, and
for claim outcomes the same earliest time) make it ``conflicting_outcomes``. A use with no
outcome at or after it is ``outcome_before_use`` if some outcome of its key predates it, else
``no_outcome_yet``.

Verifier signals as noisy labels
--------------------------------
A verifier call logs one signal per premise it resolves (``true`` = confirmed valid) and the
verifier's symmetric reliability ``r``. With ``soft_labels="posterior"`` (the default) a use
that no outcome decides but that has signals is labelled by its **posterior**
``q = sigmoid(logit(p) + LLR)``, where ``p`` is the probability the gate used (its prior)
and ``LLR = sum over signals of +-log(r / (1 - r))`` (``+`` for a refutation). It becomes two
rows with the ``label_weight`` column: ``violated = true`` with weight ``q`` and ``violated =
false`` with weight ``1 - q`` (a row of weight 0 is dropped). When the gate's ``p`` is
calibrated, ``E[q | features] = P(violated | features)`` (posteriors are a martingale), so
training on these weights is unbiased; when it is not, :func:`fit_noisy_labels` refines the
prior by EM (maximum likelihood of the noisy signals). Signals from several records of one
action are merged as a multiset (each distinct call counted as often as it appears in any
single record), so logs that repeat earlier calls in later records are not double counted.
``soft_labels="off"`` ignores signals.

Accounting
----------
``joined + sum(unjoined.values()) == uses_read`` and ``sum(outcomes.values()) ==
outcomes_read`` always; :meth:`JoinReport.check` verifies both, and the decision-line
counts per file.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib._exceptions import DataContractError, MissingColumnsError
from amv_calib._schema import CLAIM_FEATURES
from amv_calib.gate._decision_log import (
    DecisionLogWarning,
    LogReadStats,
    normalize_decision,
)

__all__ = [
    "OUTCOME_STATUSES",
    "UNJOINED_REASONS",
    "JoinReport",
    "NoisyLabelFit",
    "SoftLabels",
    "fit_noisy_labels",
    "label_claims",
    "load_outcomes",
    "read_uses",
]

SoftLabels = Literal["posterior", "off"]
PathLike = str | os.PathLike[str]

#: Why a use did not become a training row.
UNJOINED_REASONS: Final = (
    "invalid_use",
    "no_outcome_yet",
    "outcome_before_use",
    "conflicting_outcomes",
    "ambiguous_action_outcome",
    "conflicting_signals",
)

#: What became of each outcome record.
OUTCOME_STATUSES: Final = (
    "used",
    "conflicting",
    "ambiguous",
    "superseded",
    "before_use",
    "no_matching_use",
    "invalid",
)

_OUTCOME_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "claim_id": ("claim_id", "claimId"),
    "action_id": ("action_id", "actionId"),
    "time": ("time", "timestamp", "observed_at", "observedAt", "resolved_at", "resolvedAt", "ts"),
    "violated": ("violated", "isViolated", "violation"),
}

_TRUE: Final = frozenset({"true", "t", "yes", "y", "1", "1.0"})
_FALSE: Final = frozenset({"false", "f", "no", "n", "0", "0.0"})

#: Epoch numbers above this are milliseconds (the seed's ``Date.now()``), below it seconds.
_EPOCH_MS_THRESHOLD: Final = 1e11

#: Decision-log bytes parsed per block on the columnar path.
_BLOCK_BYTES: Final = 32 << 20

_NAT: Final = np.iinfo(np.int64).min

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_STR_COLS: Final = ("action_id", "tool_name", "premise_id", "claim_id", "time_str", "calibrator",
                    "regime")
_NUM_COLS: Final = ("time_num", *CLAIM_FEATURES, "p")
_INT_COLS: Final = ("file", "line", "pidx", "n_premises")
_SIG_COLS: Final = ("file", "line", "premise_id", "verifier", "confirmed", "reliability")


# ---------------------------------------------------------------------------------------------
# Reading decision logs into a columnar table of premise entries
# ---------------------------------------------------------------------------------------------
class _Columns:
    """Growing column lists of premise entries and verifier signals (Python path)."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {c: [] for c in (*_INT_COLS, *_STR_COLS, *_NUM_COLS)}
        self.sig: dict[str, list[Any]] = {c: [] for c in _SIG_COLS}
        self.records = 0

    def add(self, rec: Mapping[str, Any], file_idx: int, lineno: int) -> None:
        self.records += 1
        c = self.cols
        t = rec.get("time")
        t_str = t if isinstance(t, str) else None
        t_num = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else math.nan
        action = _as_id(rec.get("action_id"))
        tool = _as_id(rec.get("tool_name"))
        cal = _calibrator_label(rec.get("calibrator"))
        regime = _as_id(rec.get("regime"))
        premises = rec.get("premises")
        plist = premises if isinstance(premises, list) else []
        for idx, prem in enumerate(plist):
            pm = prem if isinstance(prem, Mapping) else {}
            c["file"].append(file_idx)
            c["line"].append(lineno)
            c["pidx"].append(idx)
            c["n_premises"].append(len(plist))
            c["action_id"].append(action)
            c["tool_name"].append(tool)
            c["premise_id"].append(_as_id(pm.get("id")))
            c["claim_id"].append(_as_id(pm.get("claim_id")))
            c["time_str"].append(t_str)
            c["calibrator"].append(cal)
            c["regime"].append(regime)
            c["time_num"].append(t_num)
            c["recency_hours"].append(_as_float(pm.get("recency_hours")))
            c["source_trust_score"].append(_as_float(pm.get("source_trust_score")))
            c["model_confidence"].append(_as_float(pm.get("model_confidence")))
            c["contradiction_flag"].append(_as_flag(pm.get("contradiction_flag")))
            c["p"].append(_as_float(pm.get("p")))
        calls = rec.get("verifier_calls")
        if not isinstance(calls, list):
            return
        s = self.sig
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            signals = call.get("signals")
            if not isinstance(signals, Mapping):
                continue
            r = _as_float(call.get("reliability"))
            verifier = _as_id(call.get("verifier")) or ""
            for pid, val in signals.items():
                if not isinstance(val, bool):
                    continue
                s["file"].append(file_idx)
                s["line"].append(lineno)
                s["premise_id"].append(str(pid))
                s["verifier"].append(verifier)
                s["confirmed"].append(val)
                s["reliability"].append(r)

    def frame(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        c = self.cols
        data: dict[str, Any] = {k: np.asarray(c[k], dtype=np.int64) for k in _INT_COLS}
        for k in _STR_COLS:
            data[k] = pd.array(c[k], dtype="str")
        for k in _NUM_COLS:
            data[k] = np.asarray(c[k], dtype=np.float64)
        sig = pd.DataFrame({
            "file": np.asarray(self.sig["file"], dtype=np.int64),
            "line": np.asarray(self.sig["line"], dtype=np.int64),
            "premise_id": pd.array(self.sig["premise_id"], dtype="str"),
            "verifier": pd.array(self.sig["verifier"], dtype="str"),
            "confirmed": np.asarray(self.sig["confirmed"], dtype=bool),
            "reliability": np.asarray(self.sig["reliability"], dtype=np.float64),
        })
        return pd.DataFrame(data), sig


def _as_id(v: Any) -> str | None:
    if v is None or isinstance(v, (dict, list)):
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    s = str(v)
    return s if s else None


def _as_float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def _as_flag(v: Any) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)) and v in (0, 1):
        return float(v)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in _TRUE:
            return 1.0
        if low in _FALSE:
            return 0.0
    return math.nan


def _calibrator_label(cal: Any) -> str | None:
    if isinstance(cal, Mapping):
        name = _as_id(cal.get("name"))
        version = _as_id(cal.get("version"))
        if name is None:
            return None
        return f"{name}@{version}" if version else name
    return _as_id(cal)


def _arrow_schema() -> Any:
    import pyarrow as pa

    feats = [
        ("recency_hours", pa.float64()), ("recencyHours", pa.float64()),
        ("source_trust_score", pa.float64()), ("sourceTrustScore", pa.float64()),
        ("model_confidence", pa.float64()), ("modelConfidence", pa.float64()),
        ("contradiction_flag", pa.bool_()), ("contradictionFlag", pa.bool_()),
    ]
    claim = pa.struct([("id", pa.string()), ("claim_id", pa.string()),
                       ("claimId", pa.string()), *feats])
    premise = pa.struct([
        ("id", pa.string()), ("premise_id", pa.string()), ("premiseId", pa.string()),
        ("claim_id", pa.string()), ("claimId", pa.string()), *feats,
        ("p", pa.float64()), ("calibratedViolationProbability", pa.float64()),
        ("calibrated_violation_probability", pa.float64()), ("claim", claim),
    ])
    call = pa.struct([("reliability", pa.float64())])
    fields = [(n, pa.string()) for n in ("time", "timestamp", "ts", "decidedAt", "decided_at")]
    fields += [(n, pa.string()) for n in ("action_id", "actionId", "tool_name", "toolName",
                                          "regime")]
    fields += [
        ("calibrator", pa.struct([("name", pa.string()), ("version", pa.string())])),
        ("premises", pa.list_(premise)),
        ("verifier_calls", pa.list_(call)), ("verifierCalls", pa.list_(call)),
    ]
    return pa.schema(fields)


def _coalesce(*arrays: Any) -> Any:
    import pyarrow.compute as pc

    return arrays[0] if len(arrays) == 1 else pc.coalesce(*arrays)


def _columnar_block(block: bytes, file_idx: int, first_line: int, out: _Columns,
                    chunks: list[pd.DataFrame]) -> bool:
    """Parse a block of complete lines with pyarrow; False if the block needs the slow path."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    n_lines = block.count(b"\n")
    try:
        table = pj.read_json(
            pa.BufferReader(block),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(block) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=_arrow_schema(),
                                          unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    if table.num_rows != n_lines:  # blank lines: the slow path numbers lines exactly
        return False
    table = table.combine_chunks()
    col = {name: table.column(name).chunk(0) if table.column(name).num_chunks else
           pa.nulls(0, table.schema.field(name).type) for name in table.column_names}
    calls = pc.fill_null(pc.add(pc.fill_null(pc.list_value_length(col["verifier_calls"]), 0),
                                pc.fill_null(pc.list_value_length(col["verifierCalls"]), 0)), 0)
    with_calls = np.flatnonzero(calls.to_numpy(zero_copy_only=False) > 0)
    premises = col["premises"]
    lens = pc.fill_null(pc.list_value_length(premises), 0).to_numpy(zero_copy_only=False)
    lens = lens.astype(np.int64)
    out.records += int(table.num_rows - with_calls.size)
    if with_calls.size:
        lines = block.split(b"\n")
        for row in with_calls.tolist():
            rec = json.loads(lines[row])
            out.add(normalize_decision(rec), file_idx, first_line + row)
    total = int(lens.sum())
    if total == 0:
        return True
    flat = pc.list_flatten(premises)
    parents = pc.list_parent_indices(premises).to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.repeat(np.cumsum(lens) - lens, lens)
    pidx = np.arange(total, dtype=np.int64) - starts
    keep = ~np.isin(parents, with_calls) if with_calls.size else np.ones(total, dtype=bool)
    if not keep.any():
        return True
    idx = pa.array(np.flatnonzero(keep))
    flat = flat.take(idx)
    par = parents[keep]
    par_idx = pa.array(par)
    claim = flat.field("claim")

    def f(name: str) -> Any:
        return flat.field(name)

    def top(*names: str) -> Any:
        return _coalesce(*(col[n] for n in names)).take(par_idx)

    cal = col["calibrator"]
    cal_name = cal.field("name")
    cal_version = cal.field("version")
    cal_label = pc.if_else(
        pc.is_valid(cal_version),
        pc.binary_join_element_wise(cal_name, cal_version, "@"),
        cal_name,
    ).take(par_idx)
    data: dict[str, Any] = {
        "file": np.full(par.size, file_idx, dtype=np.int64),
        "line": par + first_line,
        "pidx": pidx[keep],
        "n_premises": lens[par],
        "action_id": top("action_id", "actionId"),
        "tool_name": top("tool_name", "toolName"),
        "premise_id": _coalesce(f("id"), f("premise_id"), f("premiseId")),
        "claim_id": _coalesce(f("claim_id"), f("claimId"), claim.field("claim_id"),
                              claim.field("claimId"), claim.field("id")),
        "time_str": top("time", "timestamp", "ts", "decidedAt", "decided_at"),
        "calibrator": cal_label,
        "regime": top("regime"),
    }
    for name in _STR_COLS:
        data[name] = pd.array(pc.if_else(pc.equal(data[name], ""), None, data[name])
                              .to_pandas(), dtype="str")
    data["time_num"] = np.full(par.size, np.nan)
    for canonical, camel in (("recency_hours", "recencyHours"),
                             ("source_trust_score", "sourceTrustScore"),
                             ("model_confidence", "modelConfidence"),
                             ("contradiction_flag", "contradictionFlag")):
        arr = _coalesce(f(canonical), f(camel), claim.field(canonical), claim.field(camel))
        data[canonical] = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    data["p"] = _coalesce(f("p"), f("calibratedViolationProbability"),
                          f("calibrated_violation_probability")).to_numpy(zero_copy_only=False)
    chunks.append(pd.DataFrame(data))
    return True


def _python_block(block: bytes, file_idx: int, first_line: int, out: _Columns,
                  st: LogReadStats, name: str, on_corrupt: str) -> None:
    lines = block.split(b"\n")
    for i, raw in enumerate(lines[:-1]):
        lineno = first_line + i
        if not raw.strip():
            st.blank += 1
            continue
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        except (ValueError, UnicodeDecodeError) as exc:
            if on_corrupt == "raise":
                raise DataContractError(
                    f"{name}: line {lineno} is not a JSON object ({exc}); a damaged or edited "
                    f"log, or the fragment of a crashed writer: pass on_corrupt='skip' "
                    f"(CLI: --skip-corrupt) to skip such lines"
                ) from exc
            st.corrupt += 1
            st.corrupt_lines.append(lineno)
            warnings.warn(f"{name}: skipped corrupt line {lineno} ({exc})", DecisionLogWarning,
                          stacklevel=4)
            continue
        out.add(normalize_decision(obj), file_idx, lineno)


def _read_one_log(path: PathLike, file_idx: int, on_corrupt: str, columnar: bool,
                  out: _Columns, chunks: list[pd.DataFrame]) -> LogReadStats:
    name = os.fspath(path)
    st = LogReadStats()
    records_before = out.records
    next_line = 1
    carry = b""
    with open(name, "rb") as fh:
        while True:
            data = fh.read(_BLOCK_BYTES)
            if not data:
                break
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n") + 1
            carry = buf[cut:]
            if cut == 0:
                continue
            block = buf[:cut]
            n = block.count(b"\n")
            if not (columnar and _columnar_block(block, file_idx, next_line, out, chunks)):
                _python_block(block, file_idx, next_line, out, st, name, on_corrupt)
            next_line += n
            st.lines += n
    if carry:
        st.lines += 1
        if not carry.strip():
            st.blank += 1
        else:
            try:
                obj = json.loads(carry)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                out.add(normalize_decision(obj), file_idx, next_line)
            except (ValueError, UnicodeDecodeError):
                st.torn += 1
                st.corrupt_lines.append(next_line)
                warnings.warn(
                    f"{name}: skipped torn last line {next_line} ({len(carry)} bytes without a "
                    f"newline; a writer was interrupted)",
                    DecisionLogWarning, stacklevel=3,
                )
    st.records = out.records - records_before
    return st


def read_uses(
    paths: PathLike | Sequence[PathLike],
    *,
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame, list[LogReadStats]]:
    """Read decision logs into one row per premise entry.

    Parameters
    ----------
    paths : path or sequence of paths
        Decision logs (JSON lines), read in the order given.
    on_corrupt : {"raise", "skip"}, default "raise"
        As in :func:`amv_calib.gate._decision_log.read_decision_log`.
    columnar : bool, default True
        Parse blocks of well-formed lines with ``pyarrow.json`` (several times faster); a
        block that does not fit the expected types falls back to the line-by-line parser,
        which gives the same result.

    Returns
    -------
    entries : DataFrame
        ``file`` (index into ``paths``), ``line`` (1-based), ``pidx`` (premise position),
        ``n_premises``, ``action_id``, ``tool_name``, ``premise_id``, ``claim_id``,
        ``time_str`` / ``time_num`` (the raw time), the four claim features, ``p``,
        ``calibrator`` (``name@version``) and ``regime``; ordered by file, line, premise.
    signals : DataFrame
        One row per verifier signal: ``file``, ``line``, ``premise_id``, ``verifier``,
        ``confirmed``, ``reliability``.
    stats : list of LogReadStats
        Per file: lines, records, blank, torn and corrupt lines.
    """
    if on_corrupt not in ("raise", "skip"):
        raise ValueError(f"on_corrupt={on_corrupt!r} must be 'raise' or 'skip'")
    plist = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out = _Columns()
    chunks: list[pd.DataFrame] = []
    stats = [_read_one_log(p, i, on_corrupt, columnar, out, chunks) for i, p in enumerate(plist)]
    slow, sig = out.frame()
    frames = [c for c in (*chunks, slow) if len(c)]
    if not frames:
        entries = slow
    elif len(frames) == 1:
        entries = frames[0]
    else:
        entries = pd.concat(frames, ignore_index=True)
    if len(frames) > 1 or (frames and frames[0] is not slow and len(slow)):
        entries = entries.sort_values(["file", "line", "pidx"], kind="stable",
                                      ignore_index=True)
    return entries.reset_index(drop=True), sig, stats


# ---------------------------------------------------------------------------------------------
# Times
# ---------------------------------------------------------------------------------------------
def _times_us(time_str: Any, time_num: FloatArray) -> IntArray:
    """ISO-8601 strings or epoch numbers -> int64 microseconds since the epoch (UTC).

    ``_NAT`` marks a missing or unparseable time. Strings without an offset are taken as
    UTC. Numbers are epoch seconds, or milliseconds when above 1e11 (the seed's
    ``Date.now()``).
    """
    s = pd.Series(time_str, copy=False)
    out = np.full(len(s), _NAT, dtype=np.int64)
    have_str = s.notna().to_numpy()
    if have_str.any():
        parsed = pd.to_datetime(s[have_str], utc=True, format="ISO8601", errors="coerce")
        out[have_str] = _dt_us(parsed)
    num = np.asarray(time_num, dtype=np.float64)
    have_num = ~have_str & np.isfinite(num)
    if have_num.any():
        x = num[have_num]
        secs = np.where(np.abs(x) > _EPOCH_MS_THRESHOLD, x / 1000.0, x)
        ok = np.abs(secs) < 9.2e12
        vals = np.full(x.size, _NAT, dtype=np.int64)
        vals[ok] = np.round(secs[ok] * 1e6).astype(np.int64)
        out[have_num] = vals
    return out


def _dt_us(s: pd.Series) -> IntArray:
    """A tz-aware datetime Series as int64 UTC microseconds (``_NAT`` for NaT)."""
    naive = s.dt.tz_convert("UTC").dt.tz_localize(None)
    return cast(IntArray, naive.to_numpy(dtype="datetime64[us]").view(np.int64).copy())


def _us_to_datetime(t_us: IntArray) -> pd.DatetimeIndex:
    """int64 UTC microseconds (``_NAT`` = missing) as a tz-aware index of unit ``us``."""
    arr = np.asarray(t_us, dtype=np.int64).view("datetime64[us]")
    return pd.DatetimeIndex(arr).tz_localize("UTC")


# ---------------------------------------------------------------------------------------------
# Outcomes
# ---------------------------------------------------------------------------------------------
def _read_table(path: PathLike) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """A raw table and (row, reason) for lines that could not even be parsed (JSONL)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(p), []
    if suffix in (".csv", ".tsv"):
        return pd.read_csv(p, sep="\t" if suffix == ".tsv" else ",", dtype=str,
                           keep_default_na=False), []
    if suffix in (".jsonl", ".ndjson", ".json"):
        return _read_jsonl_table(p)
    raise DataContractError(
        f"{p}: unknown outcome file type {suffix!r}; use .jsonl, .csv or .parquet"
    )


def _read_jsonl_table(p: Path) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    import pyarrow as pa
    import pyarrow.json as pj

    raw = p.read_bytes()
    if raw.lstrip().startswith(b"["):
        try:
            rows = json.loads(raw)
        except ValueError as exc:
            raise DataContractError(f"{p}: not valid JSON ({exc})") from exc
        return pd.DataFrame.from_records([r if isinstance(r, dict) else {} for r in rows]), []
    if raw.endswith(b"\n") and b"\n\n" not in raw and not raw.startswith(b"\n"):
        try:
            table = pj.read_json(pa.BufferReader(raw))
            return table.to_pandas(), []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    row = 0
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        row += 1
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        except (ValueError, UnicodeDecodeError) as exc:
            torn = i == len(lines) - 1
            bad.append((row, "torn last line" if torn else f"not a JSON object ({exc})"))
            records.append({})
            continue
        records.append(obj)
    return pd.DataFrame.from_records(records), bad


def _resolve(columns: Iterable[str], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    cols = list(columns)
    found: dict[str, str] = {}
    for canonical, names in aliases.items():
        for n in names:
            if n in cols:
                found[canonical] = n
                break
    return found


def _id_series(s: pd.Series) -> pd.Series:
    def conv(v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return _as_id(v)

    if s.dtype == object or pd.api.types.is_numeric_dtype(s.dtype):
        s = s.map(conv)
    vals = [None if (v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)))
            else str(v) for v in s.tolist()]
    out = pd.Series(pd.array(vals, dtype="str"), index=s.index)
    return out.where(out != "", None)


def _bool_series(s: pd.Series) -> tuple[FloatArray, BoolArray]:
    """(1.0 / 0.0 / NaN, ok) from bools, 0/1 numbers or true/false/yes/no strings."""
    if s.dtype == bool:
        return s.to_numpy(dtype=np.float64), np.ones(len(s), dtype=bool)
    vals = np.array([_as_flag(v) for v in s.tolist()], dtype=np.float64)
    return vals, ~np.isnan(vals)


def _time_series(s: pd.Series) -> IntArray:
    if pd.api.types.is_datetime64_any_dtype(s.dtype):
        return _dt_us(pd.Series(pd.to_datetime(s, utc=True)))
    if pd.api.types.is_numeric_dtype(s.dtype) and s.dtype != bool:
        return _times_us(pd.Series([None] * len(s), dtype="str"),
                         s.to_numpy(dtype=np.float64))
    vals = s.tolist()
    strs: list[str | None] = []
    nums = np.full(len(vals), np.nan)
    for i, v in enumerate(vals):
        if isinstance(v, str):
            txt = v.strip()
            try:
                nums[i] = float(txt)
                strs.append(None)
            except ValueError:
                strs.append(txt if txt else None)
        else:
            strs.append(None)
            nums[i] = _as_float(v)
    return _times_us(pd.array(strs, dtype="str"), nums)


def load_outcomes(
    paths: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and validate outcome records.

    Parameters
    ----------
    paths : path, DataFrame, or a sequence of them
        Outcome files (``.jsonl``, ``.csv``, ``.parquet``) or frames, concatenated in order.

    Returns
    -------
    outcomes : DataFrame
        The valid records: ``oid`` (position over all inputs), ``source`` (input index),
        ``row`` (1-based row in its input), ``claim_id``, ``action_id`` (None when absent),
        ``t_us`` (int64 UTC microseconds) and ``violated`` (bool).
    invalid : DataFrame
        ``oid``, ``source``, ``row`` and ``reason`` (field, value) of every invalid record.

    Raises
    ------
    MissingColumnsError
        An input lacks ``time`` or ``violated``, or both ``claim_id`` and ``action_id``.
    """
    items: list[Any]
    if isinstance(paths, (str, os.PathLike, pd.DataFrame)):
        items = [paths]
    else:
        items = list(paths)
    valid_parts: list[pd.DataFrame] = []
    invalid_parts: list[pd.DataFrame] = []
    offset = 0
    for src, item in enumerate(items):
        unparsed: list[tuple[int, str]]
        if isinstance(item, pd.DataFrame):
            table, unparsed = item, []
            label = f"outcomes[{src}]"
        else:
            table, unparsed = _read_table(item)
            label = os.fspath(item)
        found = _resolve(table.columns, _OUTCOME_ALIASES)
        missing = [c for c in ("time", "violated") if c not in found]
        if "claim_id" not in found and "action_id" not in found:
            missing.append("claim_id or action_id")
        if missing and len(table) > 0:
            hints = "; ".join(f"{c}: {list(_OUTCOME_ALIASES.get(c, ()))}" for c in missing
                              if c in _OUTCOME_ALIASES)
            raise MissingColumnsError(
                f"{label}: outcome records lack column(s) {missing}"
                + (f" (accepted names: {hints})" if hints else "")
            )
        n = len(table)
        rows = np.arange(1, n + 1, dtype=np.int64)
        reason = np.full(n, "", dtype=object)
        for r, why in unparsed:
            reason[r - 1] = why
        if n == 0:
            offset += 0
            continue
        claim = (_id_series(table[found["claim_id"]]) if "claim_id" in found
                 else pd.Series(pd.array([None] * n, dtype="str")))
        action = (_id_series(table[found["action_id"]]) if "action_id" in found
                  else pd.Series(pd.array([None] * n, dtype="str")))
        t_us = _time_series(table[found["time"]])
        v, v_ok = _bool_series(table[found["violated"]])
        no_key = (claim.isna() & action.isna()).to_numpy()
        bad_t = t_us == _NAT
        todo = reason == ""
        tv = table[found["time"]].tolist()
        vv = table[found["violated"]].tolist()
        for i in np.flatnonzero(todo & no_key):
            reason[i] = "claim_id and action_id both missing"
        for i in np.flatnonzero(todo & ~no_key & bad_t):
            reason[i] = f"time={tv[i]!r} is not ISO-8601 or epoch seconds"
        for i in np.flatnonzero(todo & ~no_key & ~bad_t & ~v_ok):
            reason[i] = f"violated={vv[i]!r} is not a boolean"
        ok = reason == ""
        oid = np.arange(offset, offset + n, dtype=np.int64)
        valid_parts.append(pd.DataFrame({
            "oid": oid[ok], "source": src, "row": rows[ok],
            "claim_id": claim[ok].reset_index(drop=True),
            "action_id": action[ok].reset_index(drop=True),
            "t_us": t_us[ok], "violated": v[ok] > 0.5,
        }))
        if (~ok).any():
            invalid_parts.append(pd.DataFrame({
                "oid": oid[~ok], "source": src, "row": rows[~ok],
                "reason": pd.array(reason[~ok].tolist(), dtype="str"),
            }))
        offset += n
    valid = (pd.concat(valid_parts, ignore_index=True) if valid_parts else pd.DataFrame({
        "oid": np.zeros(0, np.int64), "source": np.zeros(0, np.int64),
        "row": np.zeros(0, np.int64), "claim_id": pd.array([], dtype="str"),
        "action_id": pd.array([], dtype="str"), "t_us": np.zeros(0, np.int64),
        "violated": np.zeros(0, bool)}))
    invalid = (pd.concat(invalid_parts, ignore_index=True) if invalid_parts else pd.DataFrame({
        "oid": np.zeros(0, np.int64), "source": np.zeros(0, np.int64),
        "row": np.zeros(0, np.int64), "reason": pd.array([], dtype="str")}))
    return valid, invalid


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class JoinReport:
    """Where every decision line, use and outcome record went.

    Invariants (checked by :meth:`check`): for each decision file ``lines == records + blank
    + torn + corrupt``; ``joined + sum(unjoined.values()) == uses_read``; ``premise_entries
    == uses_read + repeated_entries``; ``sum(outcomes.values()) == outcomes_read``.
    """

    decision_files: list[dict[str, Any]]
    premise_entries: int
    repeated_entries: int
    uses_read: int
    joined: int
    joined_by_source: dict[str, int]
    unjoined: dict[str, int]
    outcomes_read: int
    outcomes: dict[str, int]
    rows: int
    soft_labels: str
    ignored_signals: int = 0
    unjoined_uses: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    outcome_details: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    @property
    def lines_read(self) -> int:
        """Decision-log lines over all files."""
        return sum(int(f["lines"]) for f in self.decision_files)

    @property
    def records_read(self) -> int:
        """Decision records parsed over all files."""
        return sum(int(f["records"]) for f in self.decision_files)

    def check(self) -> None:
        """Raise ``AssertionError`` if an accounting invariant does not hold."""
        for f in self.decision_files:
            parts = f["records"] + f["blank"] + f["torn_last_line"] + f["corrupt"]
            if f["lines"] != parts:
                raise AssertionError(f"{f['path']}: lines {f['lines']} != {parts}")
        if self.joined + sum(self.unjoined.values()) != self.uses_read:
            raise AssertionError(f"joined {self.joined} + unjoined {self.unjoined} != "
                                 f"uses {self.uses_read}")
        if sum(self.joined_by_source.values()) != self.joined:
            raise AssertionError(f"joined_by_source {self.joined_by_source} != {self.joined}")
        if self.premise_entries != self.uses_read + self.repeated_entries:
            raise AssertionError("premise entries != uses + repeated entries")
        if sum(self.outcomes.values()) != self.outcomes_read:
            raise AssertionError(f"outcomes {self.outcomes} != read {self.outcomes_read}")

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain data (what ``amv-calib label`` prints as one JSON line)."""
        return {
            "decision_lines": self.lines_read,
            "decision_records": self.records_read,
            "skipped_lines": {
                "blank": sum(int(f["blank"]) for f in self.decision_files),
                "torn_last_line": sum(int(f["torn_last_line"]) for f in self.decision_files),
                "corrupt": sum(int(f["corrupt"]) for f in self.decision_files),
            },
            "premise_entries": self.premise_entries,
            "repeated_entries": self.repeated_entries,
            "uses_read": self.uses_read,
            "joined": self.joined,
            "joined_by_source": dict(self.joined_by_source),
            "unjoined": dict(self.unjoined),
            "outcomes_read": self.outcomes_read,
            "outcomes": dict(self.outcomes),
            "rows": self.rows,
            "soft_labels": self.soft_labels,
            "ignored_signals": self.ignored_signals,
            "decision_files": [dict(f) for f in self.decision_files],
        }


# ---------------------------------------------------------------------------------------------
# The join
# ---------------------------------------------------------------------------------------------
def _pairs(u_key: IntArray, o_key: IntArray) -> tuple[IntArray, IntArray]:
    """All (use, outcome) index pairs with equal keys; negative keys never match."""
    order = np.argsort(o_key, kind="stable")
    ok = o_key[order]
    lo = np.searchsorted(ok, u_key, side="left")
    hi = np.searchsorted(ok, u_key, side="right")
    cnt = np.where(u_key < 0, 0, hi - lo)
    total = int(cnt.sum())
    ui = np.repeat(np.arange(u_key.size, dtype=np.int64), cnt)
    starts = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
    oi = order[np.arange(total, dtype=np.int64) + starts]
    return ui, oi


def _factorize(*series: pd.Series) -> list[IntArray]:
    """Shared integer codes for several string columns; missing values get -1."""
    sizes = [len(s) for s in series]
    both = pd.concat([pd.Series(s, copy=False).reset_index(drop=True) for s in series],
                     ignore_index=True)
    codes, _ = pd.factorize(both, use_na_sentinel=True)
    codes = codes.astype(np.int64)
    out: list[IntArray] = []
    start = 0
    for n in sizes:
        out.append(codes[start:start + n])
        start += n
    return out


def _sigmoid(z: FloatArray) -> FloatArray:
    with np.errstate(over="ignore"):
        return cast(FloatArray, np.exp(-np.logaddexp(0.0, -z)))


def _invalid_detail(u: pd.DataFrame, t_us: IntArray) -> tuple[BoolArray, NDArray[np.object_]]:
    """Which uses break the data contract, and the first broken field of each."""
    n = len(u)
    detail = np.full(n, "", dtype=object)
    rh = u["recency_hours"].to_numpy()
    st = u["source_trust_score"].to_numpy()
    mc = u["model_confidence"].to_numpy()
    cf = u["contradiction_flag"].to_numpy()
    with np.errstate(invalid="ignore"):
        checks: list[tuple[BoolArray, str, str | None]] = [
            (u["claim_id"].isna().to_numpy(), "claim_id missing", None),
            (t_us == _NAT, "time={} is not ISO-8601 or epoch seconds", "time"),
            (~(np.isfinite(rh) & (rh >= 0)), "recency_hours={} must be a finite number >= 0",
             "recency_hours"),
            (~(np.isfinite(st) & (st >= 0) & (st <= 1)), "source_trust_score={} outside [0, 1]",
             "source_trust_score"),
            (~(np.isfinite(mc) & (mc >= 0) & (mc <= 1)), "model_confidence={} outside [0, 1]",
             "model_confidence"),
            (np.isnan(cf), "contradiction_flag missing or not a boolean", None),
        ]
    bad = np.zeros(n, dtype=bool)
    for mask, msg, col in checks:
        new = np.flatnonzero(mask & ~bad)
        bad |= mask
        if not new.size:
            continue
        if col is None:
            detail[new] = msg
        elif col == "time":
            ts = u["time_str"].to_numpy(dtype=object)
            tn = u["time_num"].to_numpy()
            for i in new:
                raw = ts[i] if isinstance(ts[i], str) else (None if np.isnan(tn[i]) else tn[i])
                detail[i] = msg.format(repr(raw))
        else:
            vals = u[col].to_numpy()
            for i in new:
                detail[i] = msg.format("missing" if np.isnan(vals[i]) else repr(float(vals[i])))
    return bad, detail


def label_claims(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
) -> tuple[pd.DataFrame, JoinReport]:
    """Join decision logs with outcome records into claim outcomes (module docs: the rules).

    Parameters
    ----------
    decisions : path or sequence of paths
        Decision logs (JSON lines written by the gate, or the seed's camelCase records).
    outcomes : path, DataFrame, sequence of them, or None
        Outcome records (``claim_id`` and/or ``action_id``, ``time``, ``violated``).
        None: only verifier signals label uses.
    soft_labels : {"posterior", "off"}, default "posterior"
        Use verifier signals as posterior soft labels for uses that no outcome decides.
    on_corrupt : {"raise", "skip"}, default "raise"
        A corrupt decision-log line (other than a torn last line) raises, or is skipped and
        counted.
    columnar : bool, default True
        Parse decision logs with pyarrow where possible (same result, faster).

    Returns
    -------
    claims : DataFrame
        The data contract's columns (``claim_id``, ``timestamp`` = use time, the four claim
        features, ``violated``) plus ``label_weight`` (1 for outcome labels; ``q`` / ``1 - q``
        for the two rows of a verifier label), ``action_id``, ``tool_name``, ``premise_id``,
        ``use_id`` (the use's position among all uses), ``label_source`` (``outcome`` or
        ``verifier``), ``signal_llr``, ``p_logged`` (the gate's probability), ``calibrator``,
        ``regime``, ``decision_file`` and ``decision_line``. Rows follow log order.
    report : JoinReport
        Counts by reason and status, with per-record details.
    """
    if soft_labels not in ("posterior", "off"):
        raise ValueError(f"soft_labels={soft_labels!r} must be 'posterior' or 'off'")
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    entries, sig, stats = read_uses(plist, on_corrupt=on_corrupt, columnar=columnar)
    out_df, out_invalid = load_outcomes([] if outcomes is None else outcomes)
    return _join(plist, entries, sig, stats, out_df, out_invalid, soft_labels)


def _premise_keys(entries: pd.DataFrame) -> pd.Series:
    """Premise id, else claim id, else ``#position``."""
    pk = entries["premise_id"]
    na = pk.isna().to_numpy()
    if na.any():
        pk = pk.copy()
        pk[na] = entries["claim_id"][na]
        na = pk.isna().to_numpy()
        if na.any():
            pk[na] = "#" + entries["pidx"][na].astype(str)
    return pk


def _signal_llr(sig: pd.DataFrame, entries: pd.DataFrame, premise_key: pd.Series,
                entry_use: IntArray, n_uses: int) -> tuple[FloatArray, BoolArray, int]:
    """Per use: the summed log-likelihood ratio of its signals (NaN if +inf and -inf)."""
    llr = np.zeros(n_uses)
    has_sig = np.zeros(n_uses, dtype=bool)
    if not len(sig):
        return llr, has_sig, 0
    r = sig["reliability"].to_numpy()
    good = np.isfinite(r) & (r > 0.5) & (r <= 1.0)
    ignored = int((~good).sum())
    s = sig.loc[good]
    gid_e = entries["file"].to_numpy() * (1 << 40) + entries["line"].to_numpy()
    gid_s = s["file"].to_numpy() * (1 << 40) + s["line"].to_numpy()
    near = np.isin(gid_e, gid_s)
    target = pd.DataFrame({"gid": gid_e[near], "premise_id": premise_key[near].to_numpy(),
                           "u": entry_use[near]}).drop_duplicates(["gid", "premise_id"])
    s = pd.DataFrame({"gid": gid_s, "premise_id": s["premise_id"].to_numpy(),
                      "verifier": s["verifier"].to_numpy(), "confirmed": s["confirmed"].to_numpy(),
                      "reliability": s["reliability"].to_numpy()})
    s = s.merge(target, on=["gid", "premise_id"], how="left")
    matched = s["u"].notna().to_numpy()
    ignored += int((~matched).sum())
    s = s.loc[matched]
    if not len(s):
        return llr, has_sig, ignored
    rel = s["reliability"].to_numpy()
    with np.errstate(divide="ignore"):
        w = np.log(rel) - np.log1p(-rel)
    s = s.assign(u=s["u"].to_numpy().astype(np.int64),
                 w=np.where(s["confirmed"].to_numpy(dtype=bool), -w, w))
    # Multiset union over the records of an action: each distinct call counts as often as it
    # appears in any single record, so cumulative logs are not double counted.
    per_rec = s.groupby(["u", "verifier", "confirmed", "reliability", "gid"], sort=False).agg(
        n=("w", "size"), w=("w", "first"))
    mult = per_rec.groupby(level=["u", "verifier", "confirmed", "reliability"], sort=False).agg(
        n=("n", "max"), w=("w", "first"))
    contrib = mult["n"].to_numpy() * mult["w"].to_numpy()
    uu = mult.index.get_level_values("u").to_numpy().astype(np.int64)
    pos_inf = np.bincount(uu, weights=(contrib == np.inf), minlength=n_uses) > 0
    neg_inf = np.bincount(uu, weights=(contrib == -np.inf), minlength=n_uses) > 0
    llr = np.bincount(uu, weights=np.where(np.isfinite(contrib), contrib, 0.0),
                      minlength=n_uses).astype(np.float64)
    llr[pos_inf] = np.inf
    llr[neg_inf] = -np.inf
    llr[pos_inf & neg_inf] = np.nan
    has_sig[uu] = True
    return llr, has_sig, ignored


@dataclass(kw_only=True)
class _Uses:
    """The uses of a set of decision-log entries (one per action and premise)."""

    u: pd.DataFrame  # the entry that represents each use (the action's last)
    pkey: pd.Series  # premise key of each use
    action: IntArray  # action code of each use (shared with the outcome codes)
    t_us: IntArray
    invalid: BoolArray
    detail: NDArray[np.object_]
    entry_use: IntArray  # for every entry, the position of its use
    premise_key: pd.Series  # premise key of every entry
    n_entries: int


def _collect_uses(entries: pd.DataFrame,
                  other_action_ids: pd.Series | None = None) -> tuple[_Uses, IntArray]:
    """One use per (action, premise), the action's last entry winning; the action codes of
    ``other_action_ids`` (outcome records) in the same code space."""
    other = (other_action_ids if other_action_ids is not None
             else pd.Series(pd.array([], dtype="str")))
    o_action, e_action = _factorize(other, entries["action_id"])
    no_action = e_action < 0
    if no_action.any():
        # A record without action_id is an action of its own.
        gid = (entries["file"].to_numpy()[no_action] * (1 << 40)
               + entries["line"].to_numpy()[no_action])
        e_action = e_action.copy()
        e_action[no_action] = (int(max(e_action.max(initial=-1), o_action.max(initial=-1))) + 1
                               + pd.factorize(gid)[0])
    premise_key = _premise_keys(entries)
    (p_codes,) = _factorize(premise_key)
    use_code = e_action * (int(p_codes.max(initial=0)) + 1) + p_codes
    last_idx = np.flatnonzero(~pd.Series(use_code).duplicated(keep="last").to_numpy())
    u = entries.iloc[last_idx].reset_index(drop=True)
    n_uses = len(u)
    order = np.argsort(use_code[last_idx], kind="stable")
    entry_use = (order[np.searchsorted(use_code[last_idx][order], use_code)] if n_uses
                 else np.zeros(0, np.int64))
    t_us = _times_us(u["time_str"], u["time_num"].to_numpy())
    invalid, detail = _invalid_detail(u, t_us)
    uses = _Uses(u=u, pkey=premise_key.iloc[last_idx].reset_index(drop=True),
                 action=e_action[last_idx], t_us=t_us, invalid=invalid, detail=detail,
                 entry_use=entry_use, premise_key=premise_key, n_entries=len(entries))
    return uses, o_action


def _join(plist: list[PathLike], entries: pd.DataFrame, sig: pd.DataFrame,
          stats: list[LogReadStats], out_df: pd.DataFrame, out_invalid: pd.DataFrame,
          soft_labels: str) -> tuple[pd.DataFrame, JoinReport]:
    n_out = len(out_df)
    uses, o_action = _collect_uses(entries, out_df["action_id"])
    n_entries = uses.n_entries
    u, u_pkey, u_action, t_us = uses.u, uses.pkey, uses.action, uses.t_us
    invalid, detail = uses.invalid, uses.detail
    n_uses = len(u)
    n_in_action = np.bincount(u_action)[u_action] if n_uses else np.zeros(0, np.int64)
    llr, has_sig, ignored_signals = _signal_llr(sig, entries, uses.premise_key,
                                                uses.entry_use, n_uses)

    # -- outcomes -------------------------------------------------------------------------------
    o_claim, u_claim = _factorize(out_df["claim_id"], u["claim_id"])
    o_t = out_df["t_us"].to_numpy(dtype=np.int64)
    o_v = out_df["violated"].to_numpy(dtype=bool)
    has_a = o_action >= 0
    has_c = o_claim >= 0
    n_claim_codes = int(max(o_claim.max(initial=-1), u_claim.max(initial=-1))) + 2

    valid = ~invalid
    final = np.zeros(n_uses, dtype=bool)
    label = np.zeros(n_uses, dtype=bool)
    reason = np.full(n_uses, "", dtype=object)
    reason[invalid] = "invalid_use"
    had_before = np.zeros(n_uses, dtype=bool)
    ambiguous = np.zeros(n_uses, dtype=bool)
    o_used = np.zeros(n_out, dtype=bool)
    o_conflict = np.zeros(n_out, dtype=bool)
    o_ambiguous = np.zeros(n_out, dtype=bool)
    o_keymatch = np.zeros(n_out, dtype=bool)
    o_has_earlier_use = np.zeros(n_out, dtype=bool)

    def action_stage(o_mask: BoolArray, u_key: IntArray, o_key: IntArray,
                     single_premise_only: bool) -> None:
        sel = np.flatnonzero(o_mask)
        ui, oj = _pairs(np.where(valid, u_key, -1), o_key[sel])
        oi = sel[oj]
        after = o_t[oi] >= t_us[ui]
        o_keymatch[oi] = True
        o_has_earlier_use[oi[after]] = True
        live = ~final[ui]
        ui, oi, after = ui[live], oi[live], after[live]
        n_after = np.bincount(ui[after], minlength=n_uses)
        n_true = np.bincount(ui[after], weights=o_v[oi[after]], minlength=n_uses)
        n_any = np.bincount(ui, minlength=n_uses)
        had_before[n_any > n_after] = True
        decided = n_after > 0
        conflict = decided & (n_true > 0) & (n_true < n_after)
        lab = decided & ~conflict & (n_true == n_after)
        amb = lab & (n_in_action > 1) if single_premise_only else np.zeros(n_uses, dtype=bool)
        ok = decided & ~conflict & ~amb
        o_used[oi[after & ok[ui]]] = True
        o_conflict[oi[after & conflict[ui]]] = True
        o_ambiguous[oi[after & amb[ui]]] = True
        label[ok] = lab[ok]
        final[ok | conflict] = True
        reason[conflict] = "conflicting_outcomes"
        ambiguous[amb] = True

    # 1. action + claim; 2. action only.
    ac_o = np.where(has_a & has_c, o_action * n_claim_codes + o_claim, -1)
    ac_u = np.where(u_claim >= 0, u_action * n_claim_codes + u_claim, -1)
    action_stage(has_a & has_c, ac_u, ac_o, single_premise_only=False)
    action_stage(has_a & ~has_c, u_action, o_action, single_premise_only=True)

    # 3. claim only: the earliest outcome at or after the use decides.
    c_sel = np.flatnonzero(has_c & ~has_a)
    if c_sel.size and n_uses:
        grp = pd.DataFrame({"c": o_claim[c_sel], "t": o_t[c_sel], "v": o_v[c_sel]})
        agg = grp.groupby(["c", "t"], sort=True).agg(n=("v", "size"), n_true=("v", "sum"))
        g_c = agg.index.get_level_values("c").to_numpy().astype(np.int64)
        g_t = agg.index.get_level_values("t").to_numpy().astype(np.int64)
        g_n = agg["n"].to_numpy()
        g_true = agg["n_true"].to_numpy()
        # Dense time ranks turn (claim, time) into one sortable int64 key.
        uniq_t = np.unique(np.concatenate([g_t, t_us[valid]]))
        n_rank = uniq_t.size + 1
        g_key = g_c * n_rank + np.searchsorted(uniq_t, g_t)
        u_key = u_claim * n_rank + np.searchsorted(uniq_t, t_us)
        pos = np.searchsorted(g_key, u_key, side="left")
        active = valid & ~final & (u_claim >= 0)
        hit = np.zeros(n_uses, dtype=bool)
        inb = pos < g_key.size
        hit[inb] = g_c[pos[inb]] == u_claim[inb]
        before = np.zeros(n_uses, dtype=bool)
        pb = pos >= 1
        before[pb] = g_c[pos[pb] - 1] == u_claim[pb]
        had_before[active & before] = True
        cu = np.flatnonzero(active & hit)
        gi = pos[cu]
        conflict_c = (g_true[gi] > 0) & (g_true[gi] < g_n[gi])
        label[cu[~conflict_c]] = g_true[gi[~conflict_c]] == g_n[gi[~conflict_c]]
        final[cu] = True
        reason[cu[conflict_c]] = "conflicting_outcomes"
        g_used = np.zeros(g_key.size, dtype=bool)
        g_used[gi[~conflict_c]] = True
        g_conf = np.zeros(g_key.size, dtype=bool)
        g_conf[gi[conflict_c]] = True
        o_g = np.searchsorted(g_key, o_claim[c_sel] * n_rank + np.searchsorted(uniq_t, o_t[c_sel]))
        o_used[c_sel] |= g_used[o_g]
        o_conflict[c_sel] |= g_conf[o_g]
        vu = valid & (u_claim >= 0)
        min_t = np.full(n_claim_codes, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(min_t, u_claim[vu], t_us[vu])
        seen = np.zeros(n_claim_codes, dtype=bool)
        seen[u_claim[vu]] = True
        oc = o_claim[c_sel]
        o_keymatch[c_sel] |= seen[oc]
        o_has_earlier_use[c_sel] |= seen[oc] & (min_t[oc] <= o_t[c_sel])

    # -- final reasons and verifier soft labels ------------------------------------------------
    open_ = valid & ~final
    reason[open_ & ambiguous] = "ambiguous_action_outcome"
    reason[open_ & ~ambiguous & had_before] = "outcome_before_use"
    reason[open_ & ~ambiguous & ~had_before] = "no_outcome_yet"
    soft = np.zeros(n_uses, dtype=bool)
    if soft_labels == "posterior":
        soft = open_ & has_sig
        bad_sig = soft & np.isnan(llr)
        reason[bad_sig] = "conflicting_signals"
        soft &= ~bad_sig
        reason[soft] = ""
    hard = final & (reason == "")
    joined = hard | soft

    p_logged = u["p"].to_numpy()
    prior = np.where(np.isfinite(p_logged), np.clip(p_logged, 1e-6, 1 - 1e-6), 0.5)
    q = _sigmoid(np.log(prior) - np.log1p(-prior) + np.where(np.isnan(llr), 0.0, llr))

    # -- rows: one per outcome-labelled use, two (weights q, 1 - q) per verifier-labelled use --
    hi = np.flatnonzero(hard)
    si = np.flatnonzero(soft)
    pos_rows = si[q[si] > 0]
    neg_rows = si[q[si] < 1]
    idx = np.concatenate([hi, pos_rows, neg_rows])
    viol = np.concatenate([label[hi], np.ones(pos_rows.size, bool),
                           np.zeros(neg_rows.size, bool)])
    weight = np.concatenate([np.ones(hi.size), q[pos_rows], 1.0 - q[neg_rows]])
    from_verifier = np.concatenate([np.zeros(hi.size, bool),
                                    np.ones(pos_rows.size + neg_rows.size, bool)])
    order = np.lexsort((~viol, idx))
    idx, viol, weight, from_verifier = idx[order], viol[order], weight[order], from_verifier[order]
    sel = u.iloc[idx]
    file_names = np.array([os.fspath(p) for p in plist] + [""], dtype=object)
    claims = pd.DataFrame({
        "claim_id": sel["claim_id"].to_numpy(),
        "timestamp": _us_to_datetime(t_us[idx]),
        "recency_hours": sel["recency_hours"].to_numpy(),
        "source_trust_score": sel["source_trust_score"].to_numpy(),
        "model_confidence": sel["model_confidence"].to_numpy(),
        "contradiction_flag": sel["contradiction_flag"].to_numpy() > 0.5,
        "violated": viol,
        "label_weight": weight,
        "action_id": sel["action_id"].to_numpy(),
        "tool_name": sel["tool_name"].to_numpy(),
        "premise_id": u_pkey.iloc[idx].to_numpy(),
        "use_id": idx.astype(np.int64),
        "label_source": np.where(from_verifier, "verifier", "outcome").astype(object),
        "signal_llr": np.where(has_sig[idx], llr[idx], 0.0),
        "p_logged": p_logged[idx],
        "calibrator": sel["calibrator"].to_numpy(),
        "regime": sel["regime"].to_numpy(),
        "decision_file": file_names[sel["file"].to_numpy(dtype=np.int64)],
        "decision_line": sel["line"].to_numpy(dtype=np.int64),
    })
    for col in ("claim_id", "action_id", "tool_name", "premise_id", "label_source",
                "calibrator", "regime", "decision_file"):
        claims[col] = pd.array(claims[col].to_numpy(dtype=object), dtype="str")

    # -- report ---------------------------------------------------------------------------------
    unj = np.flatnonzero(~joined)
    reasons = reason[unj]
    us = u.iloc[unj]
    t_unj = t_us[unj]
    unjoined_uses = pd.DataFrame({
        "decision_file": pd.array(file_names[us["file"].to_numpy(dtype=np.int64)].tolist(),
                                  dtype="str"),
        "decision_line": us["line"].to_numpy(dtype=np.int64),
        "action_id": us["action_id"].to_numpy(),
        "premise_id": u_pkey.iloc[unj].to_numpy(),
        "claim_id": us["claim_id"].to_numpy(),
        "time": _us_to_datetime(t_unj),
        "reason": pd.array(reasons.tolist(), dtype="str"),
        "detail": pd.array(detail[unj].tolist(), dtype="str"),
    })
    status = np.full(n_out, "", dtype=object)
    status[o_used] = "used"
    status[~o_used & o_conflict] = "conflicting"
    status[~o_used & ~o_conflict & o_ambiguous] = "ambiguous"
    rest = status == ""
    status[rest & ~o_keymatch] = "no_matching_use"
    status[rest & o_keymatch & o_has_earlier_use] = "superseded"
    status[rest & o_keymatch & ~o_has_earlier_use] = "before_use"
    counts = {s: int((status == s).sum()) for s in OUTCOME_STATUSES}
    counts["invalid"] = len(out_invalid)
    not_used = np.flatnonzero(status != "used")
    od = out_df.iloc[not_used]
    outcome_details = pd.DataFrame({
        "source": np.concatenate([od["source"].to_numpy(dtype=np.int64),
                                  out_invalid["source"].to_numpy(dtype=np.int64)]),
        "row": np.concatenate([od["row"].to_numpy(dtype=np.int64),
                               out_invalid["row"].to_numpy(dtype=np.int64)]),
        "action_id": pd.array(od["action_id"].tolist() + [None] * len(out_invalid),
                              dtype="str"),
        "claim_id": pd.array(od["claim_id"].tolist() + [None] * len(out_invalid), dtype="str"),
        "time": _us_to_datetime(np.concatenate([od["t_us"].to_numpy(dtype=np.int64),
                                                np.full(len(out_invalid), _NAT)])),
        "status": pd.array(status[not_used].tolist() + ["invalid"] * len(out_invalid),
                           dtype="str"),
        "detail": pd.array([""] * len(od) + out_invalid["reason"].tolist(), dtype="str"),
    }).sort_values(["source", "row"], kind="stable", ignore_index=True)
    report = JoinReport(
        decision_files=[{"path": os.fspath(p), **s.to_dict()}
                        for p, s in zip(plist, stats, strict=True)],
        premise_entries=n_entries,
        repeated_entries=n_entries - n_uses,
        uses_read=n_uses,
        joined=int(joined.sum()),
        joined_by_source={"outcome": int(hard.sum()), "verifier": int(soft.sum())},
        unjoined={r: int((reasons == r).sum()) for r in UNJOINED_REASONS},
        outcomes_read=n_out + len(out_invalid),
        outcomes=counts,
        rows=len(claims),
        soft_labels=soft_labels,
        ignored_signals=ignored_signals,
        unjoined_uses=unjoined_uses,
        outcome_details=outcome_details,
    )
    report.check()
    return claims, report


# ---------------------------------------------------------------------------------------------
# Training on verifier soft labels: EM over the signal likelihood
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class NoisyLabelFit:
    """Result of :func:`fit_noisy_labels`: the fitted estimator and how EM went."""

    estimator: Any
    n_iter: int
    converged: bool
    max_delta: float


def fit_noisy_labels(
    estimator: Any,
    claims: pd.DataFrame,
    *,
    max_iter: int = 50,
    tol: float = 1e-5,
) -> NoisyLabelFit:
    """Fit ``estimator`` on claims whose verifier labels are refined by EM.

    Rows with ``label_source == "outcome"`` are fixed labels. Each verifier-labelled use
    (two rows sharing a ``use_id``) gets ``q = sigmoid(logit(p(x)) + signal_llr)`` where
    ``p`` is the current model's prediction (starting from the weights in ``claims``, i.e.
    the gate's logged prior); the estimator is refitted with ``sample_weight`` until no
    ``q`` moves by more than ``tol``. This maximises the likelihood of the observed signals
    given the known reliabilities, so it recovers the calibrator even when the logging gate
    was miscalibrated.

    Parameters
    ----------
    estimator : scikit-learn classifier
        Takes the four claim features and ``fit(X, y, sample_weight=...)``; refitted in place.
    claims : DataFrame
        Output of :func:`label_claims` (needs ``label_weight``, ``label_source``,
        ``use_id`` and ``signal_llr``).
    max_iter : int, default 50
        EM iterations at most.
    tol : float, default 1e-5
        Stop when the largest change of a soft label is below this.
    """
    need = {"label_weight", "label_source", "use_id", "signal_llr", *CLAIM_FEATURES, "violated"}
    missing = sorted(need - set(claims.columns))
    if missing:
        raise MissingColumnsError(f"fit_noisy_labels needs columns {missing}")
    feats = list(CLAIM_FEATURES)
    hard = claims.loc[claims["label_source"] != "verifier"]
    soft = claims.loc[claims["label_source"] == "verifier"]
    uses = soft.drop_duplicates("use_id", keep="first")
    Xs = uses[feats].reset_index(drop=True)
    llr = uses["signal_llr"].to_numpy(dtype=np.float64)
    q0 = soft.loc[soft["violated"].to_numpy(dtype=bool)].set_index("use_id")["label_weight"]
    q = q0.reindex(uses["use_id"].to_numpy()).fillna(0.0).to_numpy(dtype=np.float64)
    Xh = hard[feats].reset_index(drop=True)
    yh = hard["violated"].to_numpy(dtype=bool)
    wh = hard["label_weight"].to_numpy(dtype=np.float64)
    X = pd.concat([Xh, Xs, Xs], ignore_index=True)
    y = np.concatenate([yh, np.ones(len(Xs), bool), np.zeros(len(Xs), bool)])
    delta = math.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        w = np.concatenate([wh, q, 1.0 - q])
        estimator.fit(X, y, sample_weight=w)
        if len(Xs) == 0:
            delta = 0.0
            break
        p = np.clip(estimator.predict_proba(Xs)[:, 1], 1e-12, 1 - 1e-12)
        q_new = _sigmoid(np.log(p) - np.log1p(-p) + llr)
        delta = float(np.max(np.abs(q_new - q)))
        q = q_new
        if delta < tol:
            break
    return NoisyLabelFit(estimator=estimator, n_iter=n_iter, converged=delta < tol,
                         max_delta=delta)
