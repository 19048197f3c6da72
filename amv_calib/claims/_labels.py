"""Claim outcomes from gate decision logs: the label join.

The gate appends one JSON line per decision (:mod:`amv_calib.gate._decision_log`). Whether a
premise's claim was really violated is learnt later, from *outcome records*. This module
joins the two into the claim-outcome table of the data contract (DESIGN section 3), one row
per (claim, use), and accounts for every input record in a :class:`JoinReport`.

Uses
----
A *use* is one premise of one action: the key is ``(action_id, premise id)`` (the premise id
falls back to its ``claim_id``). An action logged several times (a caller that evaluates it
again after each verification) is one use per premise, and the **last** record of the
action (in file order, files in the order given) supplies the use time and the claim
features; ``Gate.run`` logs one record per action, with all its verifier calls. A record
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
``soft_labels="off"`` ignores signals. The two rows of a soft label share ``claim_id`` and
``timestamp``; the ingest validator (:func:`amv_calib.claims._ingest.load_claims`) keys rows that
carry a ``label_weight`` by their label too, so such a pair ingests as one use, and training
uses the weights (``sample_weight="label_weight"``).

Accounting
----------
``joined + sum(unjoined.values()) == uses_read`` and ``sum(outcomes.values()) ==
outcomes_read`` always; :meth:`JoinReport.check` verifies both, and the decision-line
counts per file.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._arrow import strip_ids
from amv_calib.claims._times import MISSING_US, parse_timestamps
from amv_calib.contract import (
    CLAIM_FEATURES,
    loads_strict,
    open_regular,
    require_regular,
    sigmoid,
)
from amv_calib.exceptions import DataContractError, MissingColumnsError, check_choice
from amv_calib.gate import (
    DECISION_ALIASES,
    OFFERED_VERIFIER_ALIASES,
    LogReadStats,
    normalize_decision,
    parse_decision_line,
)

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
_INVALID, _NO_OUTCOME, _BEFORE, _CONFLICT, _AMBIGUOUS, _BAD_SIGNALS = range(6)
_JOINED: Final = -1

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

#: Decision-log bytes parsed per block.
_BLOCK_BYTES: Final = 16 << 20

#: A time that is missing or did not parse, among int64 microseconds.
_NAT: Final = MISSING_US

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_REC_STR: Final = ("action_id", "tool_name", "calibrator", "regime")
_REC_NUM: Final = ("theta", "kappa", "has_verifiers")
_FEATURE_ALIASES: Final = (("recency_hours", "recencyHours"),
                           ("source_trust_score", "sourceTrustScore"),
                           ("model_confidence", "modelConfidence"),
                           ("contradiction_flag", "contradictionFlag"))


# ---------------------------------------------------------------------------------------------
# Reading decision logs: records and premise entries, column by column
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class LogEntries:
    """The premise entries of decision logs, as read by :func:`read_uses`.

    ``entries`` has one row per premise of each record, in file and line order: ``rec``
    (record index over all files), ``file`` (index into the paths), ``line`` (1-based),
    ``pidx`` (position in the record), ``n_premises``, ``action_id``, ``tool_name``,
    ``calibrator`` (``name@version``) and ``regime`` (categoricals, per record),
    ``theta`` and ``kappa`` (per record, NaN when missing), ``has_verifiers`` (the record
    lists its offered verifiers),
    ``premise_id`` (categorical), ``claim_id``, ``t_us`` (use time, int64 UTC microseconds,
    ``_NAT`` if missing or unparseable), the four claim features (float, NaN when missing
    or of the wrong type) and ``p`` (the gate's probability). ``signals`` has one row per
    verifier signal: ``rec``, ``premise_id``, ``verifier``, ``confirmed``, ``reliability``.
    ``offers`` (a pyarrow table) has one row per verifier offered in a record: ``rec``,
    ``id``, ``resolves`` (list of premise ids), ``cost`` and ``reliability`` as declared
    (null / NaN where missing or of the wrong type).
    ``bad_times`` maps a record index to a time value that did not parse.
    """

    entries: pd.DataFrame
    signals: pd.DataFrame
    offers: Any
    records: dict[str, Any]
    stats: list[LogReadStats]
    bad_times: dict[int, Any]


class _Acc:
    """Per-block column chunks of records, premise entries and signals."""

    def __init__(self, offers: bool = False) -> None:
        self.want_offers = offers  # read the offered verifiers (for the episodes)
        self.n_records = 0
        self.rec: dict[str, list[Any]] = {k: [] for k in ("file", "line", "t_us", "n",
                                                          *_REC_STR, *_REC_NUM)}
        self.offers: list[Any] = []  # pyarrow tables, see LogEntries.offers
        self.ent: dict[str, list[Any]] = {k: [] for k in ("rec", "pidx", "premise_id",
                                                          "claim_id", *CLAIM_FEATURES, "p")}
        self.sig: dict[str, list[Any]] = {k: [] for k in ("rec", "premise_id", "verifier",
                                                          "confirmed", "reliability")}
        self.bad_times: dict[int, Any] = {}
        self.rec_num: dict[str, Any] = {}  # per record: numbers and categoricals

    def add_block(self, file_idx: int, lines: IntArray, rec_str: Mapping[str, Any],
                  times: Any, n_prem: IntArray, ent: Mapping[str, Any],
                  rec_num: Mapping[str, Any], offers: Any) -> None:
        """Append one block: record columns (``rec_str`` as arrow string arrays, ``rec_num``
        as numpy arrays), the raw times (an arrow array or a list of Python values), entry
        columns whose ``rec`` indexes the block's records, and the offered verifiers (a
        pyarrow table whose ``rec`` does too)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = int(lines.size)
        base = self.n_records
        t_us = parse_timestamps(times).us(_NAT)
        for i in np.flatnonzero(t_us == _NAT).tolist():
            raw = times[i].as_py() if isinstance(times, (pa.Array, pa.ChunkedArray)) else times[i]
            if raw is not None:
                self.bad_times[base + i] = raw
        r = self.rec
        r["file"].append(np.full(n, file_idx, dtype=np.int32))
        r["line"].append(lines.astype(np.int64))
        r["t_us"].append(t_us)
        r["n"].append(n_prem.astype(np.int32))
        for k in _REC_NUM:
            r[k].append(np.asarray(rec_num[k], dtype=bool if k == "has_verifiers"
                                   else np.float64))
        if offers.num_rows:
            self.offers.append(offers.set_column(0, "rec", pc.add(offers.column("rec"),
                                                                   pa.scalar(base, pa.int64()))))
        for k in _REC_STR:
            arr = rec_str[k] if isinstance(rec_str[k], pa.Array) \
                else pa.array(rec_str[k], type=pa.string())
            # few distinct values: keep them dictionary-encoded while the log is read
            r[k].append(arr if k == "action_id" else arr.dictionary_encode())
        e = self.ent
        e["rec"].append(np.asarray(ent["rec"], dtype=np.int64) + base)
        e["pidx"].append(np.asarray(ent["pidx"], dtype=np.int32))
        for k in ("premise_id", "claim_id"):
            arr = ent[k] if isinstance(ent[k], pa.Array) else pa.array(ent[k], type=pa.string())
            e[k].append(arr.dictionary_encode() if k == "premise_id" else arr)
        for k in (*CLAIM_FEATURES, "p"):
            e[k].append(np.asarray(ent[k], dtype=np.float64))
        self.n_records += n

    def add_signals(self, rec_local: Sequence[int], premise_id: Sequence[str],
                    verifier: Sequence[str], confirmed: Sequence[bool],
                    reliability: Sequence[float], base: int) -> None:
        s = self.sig
        s["rec"].extend(base + i for i in rec_local)
        s["premise_id"].extend(premise_id)
        s["verifier"].extend(verifier)
        s["confirmed"].extend(confirmed)
        s["reliability"].extend(reliability)

    def finish(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The entries and signals frames; the chunks are released as they are joined."""
        import pyarrow as pa

        r, e = self.rec, self.ent

        def cat(d: dict[str, list[Any]], k: str, codes_at: IntArray | None) -> pd.Categorical:
            chunks = [c for c in d.pop(k) if len(c)]  # an empty block adds no chunk
            if not chunks:
                return pd.Categorical.from_codes(np.zeros(0, np.int64),
                                                 categories=pd.Index([], dtype="str"))
            if pa.types.is_dictionary(chunks[0].type):
                enc = pa.chunked_array(chunks).unify_dictionaries()
            else:
                enc = pa.chunked_array(chunks, type=pa.string()).dictionary_encode()
            del chunks
            if not enc.num_chunks:  # no record at all (an empty file, or nothing new)
                return pd.Categorical.from_codes(np.zeros(0, np.int64),
                                                 categories=pd.Index([], dtype="str"))
            codes = np.concatenate([c.indices.fill_null(-1).to_numpy(zero_copy_only=False)
                                    for c in enc.chunks]).astype(np.int64)
            cats = pd.Index(enc.chunks[0].dictionary.to_pandas(), dtype="str")
            if codes_at is not None:
                codes = codes[codes_at]
            return pd.Categorical.from_codes(codes, categories=cats)

        def cat_np(d: dict[str, list[Any]], k: str, dtype: Any) -> NDArray[Any]:
            chunks = d.pop(k)
            return np.concatenate(chunks).astype(dtype, copy=False) if chunks \
                else np.zeros(0, dtype)

        e_rec = cat_np(e, "rec", np.int64)
        per_rec = self.rec_num
        for k in ("file", "line", "n"):
            per_rec[k] = cat_np(r, k, np.int64)
        data: dict[str, Any] = {
            "rec": e_rec,
            "file": per_rec["file"].astype(np.int32)[e_rec],
            "line": per_rec["line"][e_rec],
            "pidx": cat_np(e, "pidx", np.int32),
            "n_premises": per_rec["n"].astype(np.int32)[e_rec],
        }
        for k in _REC_STR:
            whole = cat(r, k, None)
            if k in ("action_id", "tool_name"):  # kept per record for the episodes
                per_rec[k] = whole
            data[k] = pd.Categorical.from_codes(whole.codes[e_rec], dtype=whole.dtype)
        data["premise_id"] = cat(e, "premise_id", None)
        claim = pa.chunked_array(e.pop("claim_id"), type=pa.string()).combine_chunks()
        claim = _no_empty(strip_ids(claim))  # docs/data.md: one claim, whatever the spaces
        data["claim_id"] = pd.array(claim, dtype="str")
        del claim
        data["t_us"] = cat_np(r, "t_us", np.int64)[e_rec]
        for k in _REC_NUM:  # per record: entries index them by "rec"
            self.rec_num[k] = cat_np(r, k, bool if k == "has_verifiers" else np.float64)
        for k in (*CLAIM_FEATURES, "p"):
            data[k] = cat_np(e, k, np.float64)
        entries = pd.DataFrame(data, copy=False)  # no consolidation copy of ~80 B per entry
        del data
        s = self.sig
        signals = pd.DataFrame({
            "rec": np.asarray(s["rec"], dtype=np.int64),
            "premise_id": pd.array(s["premise_id"], dtype="str"),
            "verifier": pd.array(s["verifier"], dtype="str"),
            "confirmed": np.asarray(s["confirmed"], dtype=bool),
            "reliability": np.asarray(s["reliability"], dtype=np.float64),
        })
        return entries, signals


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


def _signals_of(rec: Mapping[str, Any], i: int, out: dict[str, list[Any]]) -> None:
    calls = rec.get("verifier_calls")
    if not isinstance(calls, list):
        return
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        signals = call.get("signals")
        if not isinstance(signals, Mapping):
            continue
        r = _as_float(call.get("reliability"))
        verifier = _as_id(call.get("verifier")) or ""
        for pid, val in signals.items():
            if isinstance(val, bool):
                out["rec"].append(i)
                out["premise_id"].append(str(pid))
                out["verifier"].append(verifier)
                out["confirmed"].append(val)
                out["reliability"].append(r)


#: How the plain-Python reader takes a record's string columns: (column, reader).
_REC_STR_READERS: Final[tuple[tuple[str, Callable[[Any], Any]], ...]] = (
    ("action_id", _as_id), ("tool_name", _as_id), ("calibrator", _calibrator_label),
    ("regime", _as_id))
#: ... and a premise entry's columns: (column, key in the premise, reader).
_PREMISE_READERS: Final[tuple[tuple[str, str, Callable[[Any], Any]], ...]] = (
    ("premise_id", "id", _as_id), ("claim_id", "claim_id", _as_id),
    ("recency_hours", "recency_hours", _as_float),
    ("source_trust_score", "source_trust_score", _as_float),
    ("model_confidence", "model_confidence", _as_float),
    ("contradiction_flag", "contradiction_flag", _as_flag), ("p", "p", _as_float),
)


def _python_records(recs: Sequence[tuple[int, Mapping[str, Any]]], file_idx: int,
                    acc: _Acc) -> None:
    """Add normalised records ``(line, record)`` through plain Python."""
    rec_str: dict[str, list[Any]] = {k: [] for k in _REC_STR}
    lines = np.fromiter((ln for ln, _ in recs), dtype=np.int64, count=len(recs))
    raw_times: list[Any] = []
    n_prem = np.zeros(len(recs), dtype=np.int64)
    ent: dict[str, list[Any]] = {k: [] for k in ("rec", "pidx", "premise_id", "claim_id",
                                                 *CLAIM_FEATURES, "p")}
    sig: dict[str, list[Any]] = {k: [] for k in ("rec", "premise_id", "verifier",
                                                 "confirmed", "reliability")}
    rec_num: dict[str, list[Any]] = {k: [] for k in _REC_NUM}
    off: dict[str, list[Any]] = {k: [] for k in _OFFER_COLUMNS}
    for i, (_, rec) in enumerate(recs):
        raw_times.append(rec.get("time"))
        rec_num["theta"].append(_as_float(rec.get("theta")))
        rec_num["kappa"].append(_as_float(rec.get("kappa")))
        offered = rec.get("verifiers") if acc.want_offers else None
        rec_num["has_verifiers"].append(isinstance(offered, list))
        for v in offered if isinstance(offered, list) else ():
            vm = v if isinstance(v, Mapping) else {}
            res = vm.get("resolves_premise_ids")
            off["rec"].append(i)
            off["id"].append(_as_id(vm.get("id")))
            off["resolves"].append(
                [str(x) for x in res] if isinstance(res, list)
                and all(isinstance(x, str) for x in res) else None)
            off["cost"].append(_as_float(vm.get("execution_cost")))
            off["reliability"].append(_as_float(vm.get("symmetric_reliability")))
        for col, read in _REC_STR_READERS:
            rec_str[col].append(read(rec.get(col)))
        premises = rec.get("premises")
        plist = premises if isinstance(premises, list) else []
        n_prem[i] = len(plist)
        for idx, prem in enumerate(plist):
            pm = prem if isinstance(prem, Mapping) else {}
            ent["rec"].append(i)
            ent["pidx"].append(idx)
            for col, key, read in _PREMISE_READERS:
                ent[col].append(read(pm.get(key)))
        _signals_of(rec, i, sig)
    base = acc.n_records
    acc.add_block(file_idx, lines, rec_str, raw_times, n_prem, ent, rec_num,
                  _offers_table(off))
    acc.add_signals(sig["rec"], sig["premise_id"], sig["verifier"], sig["confirmed"],
                    sig["reliability"], base)


_OFFER_COLUMNS: Final = ("rec", "id", "resolves", "cost", "reliability")


def _offers_table(cols: Mapping[str, Any]) -> Any:
    """The offered verifiers of a block as a pyarrow table (columns :data:`_OFFER_COLUMNS`)."""
    import pyarrow as pa

    return pa.table({
        "rec": pa.array(cols["rec"], type=pa.int64()),
        "id": pa.array(cols["id"], type=pa.string()),
        "resolves": pa.array(cols["resolves"], type=pa.list_(pa.string())),
        "cost": pa.array(np.asarray(cols["cost"], dtype=np.float64), type=pa.float64()),
        "reliability": pa.array(np.asarray(cols["reliability"], dtype=np.float64),
                                type=pa.float64()),
    })


def _arrow_schema(offers: bool) -> Any:
    import pyarrow as pa

    feats = []
    for snake, camel in _FEATURE_ALIASES:
        typ = pa.bool_() if snake == "contradiction_flag" else pa.float64()
        feats += [(snake, typ), (camel, typ)]
    claim = pa.struct([("id", pa.string()), ("claim_id", pa.string()),
                       ("claimId", pa.string()), *feats])
    premise = pa.struct([
        ("id", pa.string()), ("premise_id", pa.string()), ("premiseId", pa.string()),
        ("claim_id", pa.string()), ("claimId", pa.string()), *feats,
        ("p", pa.float64()), ("calibratedViolationProbability", pa.float64()),
        ("calibrated_violation_probability", pa.float64()), ("claim", claim),
    ])
    call = pa.struct([("reliability", pa.float64())])
    offered = pa.struct(
        [(n, pa.string()) for n in OFFERED_VERIFIER_ALIASES["id"]]
        + [(n, pa.list_(pa.string())) for n in OFFERED_VERIFIER_ALIASES["resolves_premise_ids"]]
        + [(n, pa.float64()) for n in (*OFFERED_VERIFIER_ALIASES["execution_cost"],
                                       *OFFERED_VERIFIER_ALIASES["symmetric_reliability"])])
    fields = [(n, pa.string()) for n in ("time", "timestamp", "ts", "decidedAt", "decided_at",
                                         "action_id", "actionId", "tool_name", "toolName",
                                         "regime")]
    fields += [
        ("calibrator", pa.struct([("name", pa.string()), ("version", pa.string())])),
        ("premises", pa.list_(premise)),
        ("verifier_calls", pa.list_(call)), ("verifierCalls", pa.list_(call)),
    ]
    fields += [(n, pa.float64()) for n in (*DECISION_ALIASES["theta"],
                                           *DECISION_ALIASES["kappa"])]
    if offers:  # only the episodes need them: the label join alone does not parse them
        fields += [(n, pa.list_(offered)) for n in DECISION_ALIASES["verifiers"]]
    return pa.schema(fields)


def _coalesce(*arrays: Any) -> Any:
    import pyarrow.compute as pc

    return arrays[0] if len(arrays) == 1 else pc.coalesce(*arrays)


def _no_empty(arr: Any) -> Any:
    """Empty strings as nulls, as the line parser reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pc.fill_null(pc.equal(arr, ""), False)
    return pc.if_else(empty, pa.scalar(None, pa.string()), arr)


def _columnar_block(block: bytes, n_lines: int, file_idx: int, first_line: int,
                    acc: _Acc) -> bool:
    """Parse a block of ``n_lines`` complete lines with pyarrow; False if it needs the line
    parser."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        table = pj.read_json(
            pa.BufferReader(block),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(block) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=_arrow_schema(acc.want_offers),
                                          unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    if table.num_rows != n_lines:  # blank lines: the line parser numbers them exactly
        return False
    table = table.combine_chunks()
    col = {name: (table.column(name).chunk(0) if table.column(name).num_chunks
                  else pa.nulls(0, table.schema.field(name).type))
           for name in table.column_names}
    premises = col["premises"]
    lens = pc.fill_null(pc.list_value_length(premises), 0).to_numpy(zero_copy_only=False)
    lens = lens.astype(np.int64)
    cal = col["calibrator"]
    version = _no_empty(cal.field("version"))
    name = _no_empty(cal.field("name"))
    rec_str = {
        "action_id": _no_empty(_coalesce(col["action_id"], col["actionId"])),
        "tool_name": _no_empty(_coalesce(col["tool_name"], col["toolName"])),
        "calibrator": pc.if_else(pc.is_valid(version),
                                 pc.binary_join_element_wise(name, version, "@"), name),
        "regime": _no_empty(col["regime"]),
    }
    time_str = _coalesce(col["time"], col["timestamp"], col["ts"], col["decidedAt"],
                         col["decided_at"])
    flat = pc.list_flatten(premises)
    parents = pc.list_parent_indices(premises).to_numpy(zero_copy_only=False).astype(np.int64)
    total = int(lens.sum())
    claim = flat.field("claim")

    def f(n: str) -> Any:
        return flat.field(n)

    ent: dict[str, Any] = {
        "rec": parents,
        "pidx": np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens),
        "premise_id": _no_empty(_coalesce(f("id"), f("premise_id"), f("premiseId"))),
        "claim_id": _no_empty(_coalesce(f("claim_id"), f("claimId"), claim.field("claim_id"),
                                        claim.field("claimId"), claim.field("id"))),
        "p": _coalesce(f("p"), f("calibratedViolationProbability"),
                       f("calibrated_violation_probability")).to_numpy(zero_copy_only=False),
    }
    for snake, camel in _FEATURE_ALIASES:
        arr = _coalesce(f(snake), f(camel), claim.field(snake), claim.field(camel))
        ent[snake] = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    rec_num = {
        "theta": pc.fill_null(_coalesce(*(col[n] for n in DECISION_ALIASES["theta"])),
                              math.nan).to_numpy(zero_copy_only=False),
        "kappa": pc.fill_null(_coalesce(*(col[n] for n in DECISION_ALIASES["kappa"])),
                              math.nan).to_numpy(zero_copy_only=False),
        "has_verifiers": np.zeros(n_lines, dtype=bool),
    }
    offers_table = _offers_table({k: [] for k in _OFFER_COLUMNS})
    if acc.want_offers:
        offers = _coalesce(*(col[n] for n in DECISION_ALIASES["verifiers"]))
        rec_num["has_verifiers"] = pc.is_valid(offers).to_numpy(zero_copy_only=False)
        of = pc.list_flatten(offers)

        def o(key: str) -> Any:
            return _coalesce(*(of.field(n) for n in OFFERED_VERIFIER_ALIASES[key]))

        offers_table = pa.table({
            "rec": pc.list_parent_indices(offers).cast(pa.int64()),
            "id": _no_empty(o("id")),
            "resolves": o("resolves_premise_ids"),
            "cost": pc.fill_null(o("execution_cost"), math.nan),
            "reliability": pc.fill_null(o("symmetric_reliability"), math.nan),
        })
    # pyarrow refuses a key given twice only in the fields of the schema: every line is
    # parsed again, strictly, so that a line giving any key twice goes to the line parser
    # (as corrupt) whatever block it is in. Signals sit in objects with free-form keys
    # (premise ids): they are read from the same parse.
    calls = pc.add(pc.fill_null(pc.list_value_length(col["verifier_calls"]), 0),
                   pc.fill_null(pc.list_value_length(col["verifierCalls"]), 0))
    has_calls = calls.to_numpy(zero_copy_only=False) > 0
    sig: dict[str, list[Any]] = {k: [] for k in ("rec", "premise_id", "verifier",
                                                 "confirmed", "reliability")}
    try:
        for row, line in enumerate(block.split(b"\n")[:n_lines]):
            obj = _json_object(line)
            if has_calls[row]:
                _signals_of(normalize_decision(obj), row, sig)
    except (ValueError, RecursionError):
        return False
    base = acc.n_records
    acc.add_block(file_idx, np.arange(first_line, first_line + n_lines, dtype=np.int64),
                  rec_str, time_str, lens, ent, rec_num, offers_table)
    if sig["rec"]:
        acc.add_signals(sig["rec"], sig["premise_id"], sig["verifier"], sig["confirmed"],
                        sig["reliability"], base)
    return True


def _json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object, each key given once; ValueError (UnicodeDecodeError) if it is
    anything else."""
    obj = loads_strict(raw)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _parse_lines(data: bytes, first_line: int, st: LogReadStats, name: str,
                 on_corrupt: str) -> list[tuple[int, dict[str, Any]]]:
    """The records of the lines of ``data``, numbered from ``first_line``.

    Blank lines are counted; a line that is not a JSON object raises or is skipped as
    ``on_corrupt`` says, except an unterminated last line (``data`` not ending in a newline),
    which a writer was cut off in: that one is always skipped as torn.
    """
    lines = data.split(b"\n")
    complete = data.endswith(b"\n")
    if complete:
        lines.pop()
    out: list[tuple[int, dict[str, Any]]] = []
    for i, raw in enumerate(lines):
        lineno = first_line + i
        if not raw.strip():
            st.blank += 1
            continue
        obj = parse_decision_line(raw, name=name, lineno=lineno,
                                  last=not complete and i == len(lines) - 1,
                                  on_corrupt=on_corrupt, stats=st, stacklevel=4)
        if obj is None:
            continue
        out.append((lineno, normalize_decision(obj)))
    return out


def _read_one_log(path: PathLike, file_idx: int, on_corrupt: str, columnar: bool,
                  acc: _Acc, span: tuple[int, int, int] | None = None) -> LogReadStats:
    name = os.fspath(path)
    start, stop, first_line = (0, -1, 1) if span is None else span
    with open_regular(name, what="decision log") as fh:
        fh.seek(start)
        left = [stop - start if stop >= 0 else -1]

        def block() -> bytes:
            if left[0] == 0:
                return b""
            data = fh.read(_BLOCK_BYTES if left[0] < 0 else min(_BLOCK_BYTES, left[0]))
            if left[0] > 0:
                left[0] -= len(data)
            return data

        return _read_chunks(iter(block, b""), name, file_idx, first_line, on_corrupt,
                            columnar, acc)


def _read_chunks(chunks: Iterable[bytes], name: str, file_idx: int, first_line: int,
                 on_corrupt: str, columnar: bool, acc: _Acc) -> LogReadStats:
    """Read the lines of ``chunks`` (consecutive bytes of the log ``name``, starting at the
    start of line ``first_line``) into ``acc``; the Spark engine reads a file's byte ranges
    with it (:mod:`amv_calib.spark._label`)."""
    st = LogReadStats()
    records_before = acc.n_records
    next_line = first_line
    carry = b""
    for data in chunks:
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n") + 1
        carry = buf[cut:]
        if cut == 0:
            continue
        block = buf[:cut]
        n = block.count(b"\n")
        if not (columnar and _columnar_block(block, n, file_idx, next_line, acc)):
            recs = _parse_lines(block, next_line, st, name, on_corrupt)
            if recs:
                _python_records(recs, file_idx, acc)
        next_line += n
        st.lines += n
    if carry:  # the last line, without its newline
        st.lines += 1
        recs = _parse_lines(carry, next_line, st, name, on_corrupt)
        if recs:
            _python_records(recs, file_idx, acc)
    st.records = acc.n_records - records_before
    return st


def read_uses(
    paths: PathLike | Sequence[PathLike],
    *,
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    offers: bool = False,
    spans: Sequence[tuple[int, int, int] | None] | None = None,
) -> LogEntries:
    """Read decision logs into one row per premise entry (see :class:`LogEntries`).

    Parameters
    ----------
    paths : path or sequence of paths
        Decision logs (JSON lines), read in the order given.
    on_corrupt : {"raise", "skip"}, default "raise"
        As in :func:`amv_calib.gate._decision_log.read_decision_log`.
    columnar : bool, default True
        Parse blocks of well-formed lines with ``pyarrow.json`` (several times faster); a
        block whose values do not fit the expected types (numbers as times, camelCase
        objects given as strings, blank lines, a corrupt line) falls back to the line
        parser, which gives the same result.
    offers : bool, default False
        Also read each record's offered verifiers (``LogEntries.offers``), which the
        episodes need; without it ``offers`` is empty and ``has_verifiers`` false.
    spans : sequence of (start, stop, first_line) or None, optional
        Per file, read only the bytes ``[start, stop)`` (``stop`` -1: to the end), which
        begin at the start of line ``first_line``: what a monitor that has read the rest
        before reads (:mod:`amv_calib.monitoring`). None reads every file whole.
    """
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"))
    plist = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if spans is not None and len(spans) != len(plist):
        raise ValueError(f"spans: {len(spans)} given for {len(plist)} files")
    acc = _Acc(offers)
    stats = [_read_one_log(p, i, on_corrupt, columnar, acc,
                           None if spans is None else spans[i]) for i, p in enumerate(plist)]
    if not acc.rec["file"]:
        _python_records([], 0, acc)
    entries, signals = acc.finish()
    import pyarrow as pa

    offers = (pa.concat_tables(acc.offers) if acc.offers
              else _offers_table({k: [] for k in _OFFER_COLUMNS}))
    return LogEntries(entries=entries, signals=signals, offers=offers, records=acc.rec_num,
                      stats=stats, bad_times=acc.bad_times)


# ---------------------------------------------------------------------------------------------
# Times
# ---------------------------------------------------------------------------------------------
def _time_series(s: Any) -> IntArray:
    """Times (datetimes, ISO-8601 text, epoch numbers or their text, or a mix) as int64 UTC
    microseconds, ``_NAT`` where missing or not a time; the rule of
    :func:`~amv_calib.claims._times.parse_timestamps`."""
    if isinstance(s, pd.Series):
        s = s.reset_index(drop=True)
    return parse_timestamps(s).us(_NAT)


def _time_reasons(field: str, raws: Sequence[Any]) -> list[str]:
    """Why each of ``raws`` (times that did not parse) is not a time, naming the value."""
    far = parse_timestamps(list(raws)).out_of_range if len(raws) else np.zeros(0, bool)
    return [f"{field}={raw!r} is out of range (years 1 to 9999)" if o
            else f"{field}={raw!r} is not ISO-8601 or epoch seconds"
            for raw, o in zip(raws, far, strict=True)]


def _us_to_datetime(t_us: IntArray) -> pd.DatetimeIndex:
    """int64 UTC microseconds (``_NAT`` = missing) as a tz-aware index of unit ``us``."""
    arr = np.asarray(t_us, dtype=np.int64).view("datetime64[us]")
    return pd.DatetimeIndex(arr).tz_localize("UTC")


# ---------------------------------------------------------------------------------------------
# Outcomes
# ---------------------------------------------------------------------------------------------
def _read_table(path: PathLike) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """A raw table and (row, reason) for lines that could not even be parsed (JSONL).

    ``path`` may be a URI that pyarrow opens (``s3://``, ``gs://``, ``hdfs://``): the file
    is read whole, as a local one is.
    """
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in (".parquet", ".pq", ".csv", ".tsv", ".jsonl", ".ndjson", ".json"):
        raise DataContractError(
            f"{name}: unknown outcome file type {suffix!r}; use .jsonl, .csv or .parquet"
        )
    if "://" in name:
        import pyarrow.fs as pafs

        try:
            fs, inner = pafs.FileSystem.from_uri(name)
            with fs.open_input_stream(inner) as fh:
                source: Any = io.BytesIO(fh.read())
        except (OSError, ValueError) as exc:  # missing object, bad URI, no credentials
            raise DataContractError(f"{name}: cannot read the outcome file ({exc})") from exc
    else:
        source = Path(name)
        require_regular(source, what="outcome file")
    if suffix in (".parquet", ".pq"):
        import pyarrow as pa

        try:
            return pd.read_parquet(source), []
        except (pa.ArrowException, OSError) as exc:
            raise DataContractError(f"{name}: cannot read the outcome file as Parquet "
                                    f"({exc})") from None
    raw = source.getvalue() if isinstance(source, io.BytesIO) else source.read_bytes()
    if suffix in (".csv", ".tsv"):
        return _read_csv_table(raw, name, "\t" if suffix == ".tsv" else ",")
    return _read_jsonl_table(raw, name)


def _read_csv_table(raw: bytes, name: str, sep: str
                    ) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """An outcome CSV as text columns, and (row, reason) for rows that cannot be read.

    pyarrow reads a well-formed file; a file it refuses (a row with more or fewer fields
    than the header, bad UTF-8) is read again row by row, each such row rejected with its
    line and reason (pandas would shift the columns of a row with one field too many, or
    cut it, without a word). An empty file holds no record."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    text = raw.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    try:
        header = next(rows, None)
        if header is None:
            return pd.DataFrame(), []
        if _undecodable(header):
            raise DataContractError(f"{name}: line 1 (the header) is not UTF-8 text")
        try:
            table = pacsv.read_csv(
                pa.BufferReader(raw), parse_options=pacsv.ParseOptions(delimiter=sep),
                convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(
                    header, pa.string())))
            if table.column_names == header:
                return table.to_pandas(), []
        except pa.ArrowInvalid:
            pass
        records: list[dict[str, str]] = []
        bad: list[tuple[int, str]] = []
        for fields in rows:
            if not fields:
                continue  # a blank line is no record
            where = f"line {rows.line_num}"
            if _undecodable(fields):
                bad.append((len(records) + 1, f"{where}: not UTF-8 text"))
            elif len(fields) != len(header):
                bad.append((len(records) + 1, f"{where}: the row has {len(fields)} fields, "
                                              f"the header {len(header)}"))
            else:
                records.append(dict(zip(header, fields, strict=True)))
                continue
            records.append({})
    except csv.Error as exc:
        raise DataContractError(f"{name}: line {rows.line_num}: {exc}") from None
    return pd.DataFrame(records, columns=header), bad


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _undecodable(fields: Sequence[str]) -> bool:
    """Whether text decoded with ``surrogateescape`` held bytes that are not UTF-8."""
    try:
        for f in fields:
            f.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _read_jsonl_table(raw: bytes, name: str) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    import pyarrow as pa
    import pyarrow.json as pj

    if raw.lstrip().startswith(b"["):
        try:
            rows = loads_strict(raw)
        except (ValueError, RecursionError) as exc:
            raise DataContractError(f"{name}: not valid JSON ({exc})") from exc
        return pd.DataFrame.from_records([r if isinstance(r, dict) else {} for r in rows]), []
    if raw.endswith(b"\n") and b"\n\n" not in raw and not raw.startswith(b"\n") \
            and _is_utf8(raw):  # pyarrow's JSON reader takes bad UTF-8 into its strings
        try:
            return pj.read_json(pa.BufferReader(raw)).to_pandas(), []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = _json_object(line)
        except (ValueError, UnicodeDecodeError) as exc:
            torn = i == len(lines) - 1
            bad.append((len(records) + 1, "torn last line" if torn
                        else f"not a JSON object ({exc})"))
            records.append({})
            continue
        records.append(obj)
    return pd.DataFrame(records), bad  # a row of {} each line that did not parse


def _resolve(columns: Iterable[str], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    cols = list(columns)
    found: dict[str, str] = {}
    for canonical, names in aliases.items():
        for n in names:
            if n in cols:
                found[canonical] = n
                break
    return found


def _is_str_dtype(s: pd.Series) -> bool:
    return isinstance(s.dtype, pd.StringDtype) or str(s.dtype) in ("str", "string")


def _id_series(s: pd.Series) -> pd.Series:
    """Identifiers as strings (integral numbers without ``.0``); empty / missing -> NA."""
    s = s.reset_index(drop=True)
    if _is_str_dtype(s):
        out = s.astype("str")
    elif isinstance(s.dtype, pd.CategoricalDtype):
        out = s.astype("str")
    else:
        out = pd.Series(pd.array([None if _missing(v) else _as_id(v) for v in s.tolist()],
                                 dtype="str"))
    return out.where(out != "", None)


def _claim_ids(s: pd.Series) -> pd.Series:
    """:func:`_id_series` of outcome claim ids, without surrounding white space (the rule
    of every claim id reader, :func:`amv_calib.claims._arrow.strip_ids`)."""
    import pyarrow as pa

    ids = _id_series(s)
    stripped = pd.Series(pd.array(strip_ids(pa.array(ids, type=pa.string())), dtype="str"))
    return stripped.where(stripped != "", None)


def _missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, (str, bytes, list, tuple, dict, Mapping)):
        return False
    return bool(pd.isna(v))


def _bool_series(s: pd.Series) -> tuple[FloatArray, BoolArray]:
    """(1.0 / 0.0 / NaN, ok) from bools, 0/1 numbers or true/false/yes/no strings."""
    if s.dtype == bool:
        return s.to_numpy(dtype=np.float64), np.ones(len(s), dtype=bool)
    if _is_str_dtype(s):
        low = s.str.strip().str.lower()
        vals = np.where(low.isin(list(_TRUE)).to_numpy(), 1.0,
                        np.where(low.isin(list(_FALSE)).to_numpy(), 0.0, np.nan))
    else:
        vals = np.array([_as_flag(v) for v in s.tolist()], dtype=np.float64)
    return vals, ~np.isnan(vals)


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
        ``row`` (1-based row in its input), ``claim_id``, ``action_id`` (NA when absent),
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
            table, unparsed = item.reset_index(drop=True), []
            label = f"outcomes[{src}]"
        else:
            table, unparsed = _read_table(item)
            label = os.fspath(item)
        found = _resolve(table.columns, _OUTCOME_ALIASES)
        missing = [c for c in ("time", "violated") if c not in found]
        if "claim_id" not in found and "action_id" not in found:
            missing.append("claim_id or action_id")
        n = len(table)
        if missing and n > len(unparsed):
            hints = "; ".join(f"{c}: {list(_OUTCOME_ALIASES.get(c, ()))}" for c in missing
                              if c in _OUTCOME_ALIASES)
            raise MissingColumnsError(
                f"{label}: outcome records lack column(s) {missing}"
                + (f" (accepted names: {hints})" if hints else "")
            )
        if n == 0:
            continue
        rows = np.arange(1, n + 1, dtype=np.int64)
        reason = np.full(n, "", dtype=object)
        for r, why in unparsed:
            reason[r - 1] = why
        if missing:  # no row could be read at all: each is invalid, with its reason
            oid = np.arange(offset, offset + n, dtype=np.int64)
            invalid_parts.append(pd.DataFrame({
                "oid": oid, "source": np.full(n, src, dtype=np.int64), "row": rows,
                "reason": pd.array(reason.tolist(), dtype="str")}))
            offset += n
            continue
        none = pd.Series(pd.array([None] * n, dtype="str"))
        claim = _claim_ids(table[found["claim_id"]]) if "claim_id" in found else none
        action = _id_series(table[found["action_id"]]) if "action_id" in found else none
        t_us = _time_series(table[found["time"]])
        v, v_ok = _bool_series(table[found["violated"]])
        no_key = (claim.isna() & action.isna()).to_numpy()
        bad_t = t_us == _NAT
        todo = reason == ""
        tv = table[found["time"]]
        vv = table[found["violated"]]
        for i in np.flatnonzero(todo & no_key):
            reason[i] = "claim_id and action_id both missing"
        where = np.flatnonzero(todo & ~no_key & bad_t)
        raws = [None if _missing(tv.iloc[i]) else tv.iloc[i] for i in where.tolist()]
        reason[where] = _time_reasons("time", raws)
        for i in np.flatnonzero(todo & ~no_key & ~bad_t & ~v_ok):
            raw = None if _missing(vv.iloc[i]) else vv.iloc[i]
            reason[i] = f"violated={raw!r} is not a boolean"
        ok = reason == ""
        oid = np.arange(offset, offset + n, dtype=np.int64)
        valid_parts.append(pd.DataFrame({
            "oid": oid[ok], "source": np.full(int(ok.sum()), src, dtype=np.int64),
            "row": rows[ok], "claim_id": claim[ok].reset_index(drop=True),
            "action_id": action[ok].reset_index(drop=True),
            "t_us": t_us[ok], "violated": v[ok] > 0.5,
        }))
        if (~ok).any():
            invalid_parts.append(pd.DataFrame({
                "oid": oid[~ok], "source": np.full(int((~ok).sum()), src, dtype=np.int64),
                "row": rows[~ok], "reason": pd.array(reason[~ok].tolist(), dtype="str"),
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

    #: Per decision file: its name and how its lines went (lines, records, blank, torn,
    #: corrupt).
    decision_files: list[dict[str, Any]]
    #: Premise entries in the records, and those a later record of the same action and
    #: premise replaced (the last record wins).
    premise_entries: int
    repeated_entries: int
    #: The uses left, and where they went: joined (by label source) or not (by reason).
    uses_read: int
    joined: int
    joined_by_source: dict[str, int]
    unjoined: dict[str, int]
    #: Outcome records read, and what became of each (:data:`OUTCOME_STATUSES`).
    outcomes_read: int
    outcomes: dict[str, int]
    rows: int
    soft_labels: str
    ignored_signals: int = 0
    unjoined_uses: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    outcome_details: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    #: Set when the engine streamed the unjoined uses into this CSV instead of holding them
    #: (the Spark engine writing ``label``'s files); ``unjoined_uses`` is then empty.
    unjoined_uses_file: str | None = None

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
                "fragments": sum(int(f["fragments"]) for f in self.decision_files),
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


def _arrow_chunks(s: Any) -> list[Any]:
    """The string data of a pandas column as pyarrow ``large_string`` chunks (no copy of the
    characters for pyarrow-backed columns)."""
    import pyarrow as pa

    ser = pd.Series(s, copy=False)
    if isinstance(ser.dtype, pd.CategoricalDtype) or not _is_str_dtype(ser):
        ser = ser.astype("str")
    if not len(ser):
        return []
    arr = pa.array(ser.array)
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    return [c if c.type == pa.large_string() else c.cast(pa.large_string()) for c in chunks]


def _codes(chunked: Any) -> IntArray:
    """Dictionary codes of a chunked string array (one dictionary across chunks), -1 = null."""
    enc = chunked.dictionary_encode()
    parts = [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in enc.chunks]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _factorize(*series: Any) -> list[IntArray]:
    """Shared integer codes for several string columns, in order of first appearance
    (so unique values given first get codes 0, 1, ...); missing values get -1."""
    import pyarrow as pa

    chunk_lists = [_arrow_chunks(s) for s in series]
    sizes = [sum(len(c) for c in cl) for cl in chunk_lists]
    codes = _codes(pa.chunked_array([c for cl in chunk_lists for c in cl],
                                    type=pa.large_string()))
    out: list[IntArray] = []
    start = 0
    for n in sizes:
        out.append(codes[start:start + n])
        start += n
    return out


def _from_codes(codes: NDArray[Any], categories: Any) -> Any:
    """A pandas ``str`` array from integer codes into ``categories`` (-1 = missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    c = np.asarray(codes, dtype=np.int64)
    cats = pa.array(list(categories) if not isinstance(categories, pa.Array) else categories,
                    type=pa.string())
    if len(cats) == 0:
        return pd.array([None] * c.size, dtype="str")
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array(np.where(c < 0, 0, c).astype(np.int32), mask=c < 0), cats)
    return pd.array(pc.cast(dictionary, pa.string()), dtype="str")


def _categorical(codes: NDArray[Any], categories: Any) -> pd.Categorical:
    """A categorical of string ``categories`` from integer codes (-1 = missing)."""
    cats = pd.Index(list(categories) if not isinstance(categories, pd.Index) else categories,
                    dtype="str")
    return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), categories=cats)


def _cat_subset(col: pd.Series, idx: IntArray) -> pd.Categorical:
    """``col[idx]`` of a categorical column, sharing its categories (no copy of them)."""
    dtype = cast(pd.CategoricalDtype, col.dtype)
    return cast(pd.Categorical, pd.Categorical.from_codes(col.cat.codes.to_numpy()[idx],
                                                          dtype=dtype))


def _cat_take(col: pd.Series, idx: IntArray) -> Any:
    """``col[idx]`` of a categorical column as a pandas ``str`` array."""
    import pyarrow as pa

    codes = col.cat.codes.to_numpy()[idx]
    return _from_codes(codes, pa.array(col.cat.categories.array, type=pa.string()))


def _sorted_unique(x: IntArray) -> IntArray:
    """``np.unique`` by sorting (much faster than hashing for tens of millions of times)."""
    v = np.sort(x, kind="stable")
    if v.size:
        v = v[np.concatenate([[True], v[1:] != v[:-1]])]
    return v


@dataclass(kw_only=True)
class _Uses:
    """The uses of decision-log entries: one per (action, premise), the action's last entry."""

    u: pd.DataFrame  # the entry that represents each use
    idx: IntArray  # position of that entry among the entries
    action: IntArray  # action code of each use (shared with the outcome codes)
    pkey: IntArray  # premise-key code of each use
    t_us: IntArray
    invalid: BoolArray
    detail_codes: NDArray[np.int32]  # into detail_categories; 0 = ""
    detail_categories: list[str]
    entry_use: IntArray  # for every entry, the position of its use
    entry_pkey: IntArray  # premise-key code of every entry
    n_entries: int
    n_pkey_codes: int

    def premise_ids(self, which: IntArray, *, categorical: bool = False) -> Any:
        """The premise key (premise id, else claim id, else ``#position``) of some uses,
        as strings (or a categorical when every use has a premise id)."""
        u = self.u
        codes = u["premise_id"].cat.codes.to_numpy()[which]
        na = codes < 0
        if categorical and not na.any():
            return _cat_subset(u["premise_id"], which)
        pid = _cat_take(u["premise_id"], which)
        if not na.any():
            return pid
        out = pd.Series(pid)
        claim = pd.Series(u["claim_id"].array[which])
        pos = "#" + pd.Series(u["pidx"].to_numpy()[which]).astype(str)
        out = out.where(~na, claim.where(claim.notna(), pos))
        return pd.array(out.to_numpy(dtype=object), dtype="str")


def _use_codes(log: LogEntries, other_action_ids: Any = None
               ) -> tuple[IntArray, IntArray, IntArray, int, IntArray]:
    """Per entry its use code (action x premise key), action code and premise-key code; the
    number of premise-key codes; and the action codes of ``other_action_ids`` (outcome
    records) in the same code space (an unknown action gets a code of its own)."""
    entries = log.entries
    cats = entries["action_id"].cat.categories
    other = pd.Series(pd.array([], dtype="str")) if other_action_ids is None else \
        pd.Series(other_action_ids, copy=False)
    cat_codes, o_action = _factorize(pd.Series(cats.array), other)
    assert np.array_equal(cat_codes, np.arange(len(cats)))
    e_action = entries["action_id"].cat.codes.to_numpy().astype(np.int64)
    no_action = e_action < 0
    if no_action.any():
        # A record without action_id is an action of its own.
        top = int(max(len(cats) - 1, o_action.max(initial=-1)))
        e_action = e_action.copy()
        e_action[no_action] = top + 1 + pd.factorize(entries["rec"].to_numpy()[no_action])[0]
    # premise key: premise id, else claim id, else position
    pk = entries["premise_id"].cat.codes.to_numpy().astype(np.int64)
    n_pid = len(entries["premise_id"].cat.categories)
    na = pk < 0
    if na.any():
        (claim_codes,) = _factorize(pd.Series(entries["claim_id"].array[np.flatnonzero(na)]))
        n_claim = int(claim_codes.max(initial=-1)) + 1
        fill = np.where(claim_codes >= 0, n_pid + claim_codes,
                        n_pid + n_claim + entries["pidx"].to_numpy()[na])
        pk = pk.copy()
        pk[na] = fill
    n_pk = int(pk.max(initial=-1)) + 1
    return e_action * (n_pk + 1) + pk, e_action, pk, n_pk, o_action


def _superseded(use_code: IntArray) -> BoolArray:
    """Which entries a later record of the same (action, premise) supersedes."""
    if not len(use_code):
        return np.zeros(0, bool)
    return np.asarray(pd.Series(use_code).duplicated(keep="last").to_numpy(), dtype=bool)


def use_entries(log: LogEntries) -> IntArray:
    """Positions in ``log.entries`` of the uses: one per (action, premise), the action's
    last record (the label join's rule)."""
    return np.flatnonzero(~_superseded(_use_codes(log)[0]))


def _collect_uses(log: LogEntries, other_action_ids: Any = None) -> tuple[_Uses, IntArray]:
    """One use per (action, premise); the action codes of ``other_action_ids`` (outcome
    records) in the same code space (an unknown action gets a code of its own)."""
    entries = log.entries
    n = len(entries)
    use_code, e_action, pk, n_pk, o_action = _use_codes(log, other_action_ids)
    dup = _superseded(use_code)
    if dup.any():
        idx = np.flatnonzero(~dup)
        u = entries.iloc[idx].reset_index(drop=True)
        order = np.argsort(use_code[idx], kind="stable")
        entry_use = order[np.searchsorted(use_code[idx][order], use_code)]
        action, pkey = e_action[idx], pk[idx]
    else:
        # the common case (every action logged once): the entries are the uses, no copies
        idx = np.arange(n, dtype=np.int64)
        u = entries
        entry_use = idx
        action, pkey = e_action, pk
    del use_code, dup
    t_us = u["t_us"].to_numpy()
    # judged per entry (a record that repeats a premise id is invalid as a whole), as the
    # Spark engine does, then taken for the uses
    invalid, detail_codes, detail_cats = _invalid_detail(entries, log.bad_times)
    invalid, detail_codes = invalid[idx], detail_codes[idx]
    uses = _Uses(u=u, idx=idx, action=action, pkey=pkey, t_us=t_us, invalid=invalid,
                 detail_codes=detail_codes, detail_categories=detail_cats,
                 entry_use=entry_use, entry_pkey=pk, n_entries=n, n_pkey_codes=n_pk)
    return uses, o_action


def _repeated_premises(u: pd.DataFrame) -> tuple[BoolArray, list[str]]:
    """Which entries belong to a record that gives one premise key (its id, else its claim
    id) to two premises, and per entry the repeated key (one per record).

    The label join keys a use by (action, premise): the second premise would silently
    replace the first, so the whole record is refused instead.
    """
    rec = u["rec"].to_numpy().astype(np.int64)
    pid = pd.Series(u["premise_id"], copy=False).astype("str")
    cid = pd.Series(u["claim_id"], copy=False).astype("str")
    key = ("premise id\0" + pid).where(pid.notna(), "claim id\0" + cid).to_numpy(dtype=object)
    has_key = pd.notna(key)
    codes = pd.factorize(key)[0].astype(np.int64)
    pair = pd.Series(rec * (int(codes.max(initial=0)) + 2) + codes)
    dup = pair.duplicated(keep=False).to_numpy() & has_key
    if not dup.any():
        return np.zeros(len(rec), dtype=bool), []
    first = pd.Series(key[dup], index=rec[dup]).groupby(level=0).first()
    repeated = np.isin(rec, first.index.to_numpy())
    return repeated, [str(k) for k in first.reindex(rec[repeated]).to_numpy()]


def _invalid_detail(u: pd.DataFrame, bad_times: Mapping[int, Any]
                    ) -> tuple[BoolArray, NDArray[np.int32], list[str]]:
    """Which premise entries break the data contract, and the first problem of each (as
    codes into a list of messages whose entry 0 is the empty string): a record repeating a
    premise id, then the fields of the entry. ``u`` needs the columns ``rec``,
    ``premise_id``, ``claim_id``, ``t_us`` and the four features."""
    n = len(u)
    messages: list[str] = [""]
    index: dict[str, int] = {"": 0}
    codes = np.zeros(n, dtype=np.int32)

    def code(msg: str) -> int:
        if msg not in index:
            index[msg] = len(messages)
            messages.append(msg)
        return index[msg]

    rh = u["recency_hours"].to_numpy()
    st = u["source_trust_score"].to_numpy()
    mc = u["model_confidence"].to_numpy()
    cf = u["contradiction_flag"].to_numpy()
    with np.errstate(invalid="ignore"):
        checks: list[tuple[BoolArray, str, str | None]] = [
            (u["claim_id"].isna().to_numpy(), "claim_id missing", None),
            (u["t_us"].to_numpy() == _NAT, "time", "time"),
            (~(np.isfinite(rh) & (rh >= 0)), "recency_hours={} must be a finite number >= 0",
             "recency_hours"),
            (~(np.isfinite(st) & (st >= 0) & (st <= 1)), "source_trust_score={} outside [0, 1]",
             "source_trust_score"),
            (~(np.isfinite(mc) & (mc >= 0) & (mc <= 1)), "model_confidence={} outside [0, 1]",
             "model_confidence"),
            (np.isnan(cf), "contradiction_flag missing or not a boolean", None),
        ]
    bad, keys = _repeated_premises(u)
    for i, k in zip(np.flatnonzero(bad).tolist(), keys, strict=True):
        kind, _, value = k.partition("\0")
        codes[i] = code(f"the record gives {kind} {value!r} to two premises (which one a "
                        f"label would be for is ambiguous)")
    for mask, msg, col in checks:
        new = np.flatnonzero(mask & ~bad)
        bad |= mask
        if not new.size:
            continue
        if col is None:
            codes[new] = code(msg)
        elif col == "time":
            rec = u["rec"].to_numpy()
            raws = [bad_times.get(int(r)) for r in rec[new].tolist()]
            for i, reason in zip(new.tolist(), _time_reasons("time", raws), strict=True):
                codes[i] = code(reason)
        else:
            vals = u[col].to_numpy()
            for i in new.tolist():
                v = vals[i]
                codes[i] = code(msg.format("missing" if np.isnan(v) else repr(float(v))))
    return bad, codes, messages


def label_claims(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    log: LogEntries | None = None,
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
    log : LogEntries, optional
        ``decisions`` as already read by :func:`read_uses` (monitoring reads the logs once
        for its drift statistics and its labels); ``decisions`` then only names the files.

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
    check_choice("soft_labels", soft_labels, ("posterior", "off"))
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    if log is None:  # a batch given as ``log`` (the monitor's new lines) may be empty
        log = read_uses(plist, on_corrupt=on_corrupt, columnar=columnar)
        require_records(plist, log)
    out_df, out_invalid = load_outcomes([] if outcomes is None else outcomes)
    return _join(plist, log, out_df, out_invalid, soft_labels)


def require_records(plist: Sequence[PathLike], log: LogEntries) -> None:
    """Raise :class:`DataContractError` when the logs read hold no decision record, naming
    each file with its count of lines, blank, torn and corrupt."""
    if not sum(st.records for st in log.stats):
        seen = ", ".join(f"{os.fspath(p)} ({st.lines} lines: {st.blank} blank, {st.torn} "
                         f"torn, {st.corrupt} corrupt)" for p, st in zip(plist, log.stats,
                                                                          strict=True))
        raise DataContractError(f"no decision record to label in {seen or 'no file'}")


def _signal_llr(log: LogEntries, uses: _Uses, n_uses: int
                ) -> tuple[FloatArray, BoolArray, int, pd.DataFrame]:
    """Per use: the summed log-likelihood ratio of its signals (NaN if +inf and -inf); the
    number of signals ignored; and the answers counted, one row per (use, verifier, answer,
    declared reliability) with its multiplicity ``n``."""
    sig = log.signals
    llr = np.zeros(n_uses)
    has_sig = np.zeros(n_uses, dtype=bool)
    answers = pd.DataFrame({"u": np.zeros(0, np.int64), "verifier": pd.array([], dtype="str"),
                            "confirmed": np.zeros(0, bool), "reliability": np.zeros(0),
                            "n": np.zeros(0, np.int64)})
    if not len(sig):
        return llr, has_sig, 0, answers
    r = sig["reliability"].to_numpy()
    good = np.isfinite(r) & (r > 0.5) & (r <= 1.0)
    ignored = int((~good).sum())
    s = sig.loc[good].reset_index(drop=True)
    # signal premise id -> premise-key code (premise ids are codes 0..n_pid-1)
    pid_cats = log.entries["premise_id"].cat.categories
    pk = pd.Index(pid_cats).get_indexer(pd.Index(s["premise_id"].astype("str")))
    rec_e = log.entries["rec"].to_numpy()
    key_e = rec_e * (uses.n_pkey_codes + 1) + uses.entry_pkey
    near = np.flatnonzero(np.isin(rec_e, s["rec"].to_numpy()))
    order = near[np.argsort(key_e[near], kind="stable")]
    key_sorted = key_e[order]
    key_s = np.where(pk >= 0, s["rec"].to_numpy() * (uses.n_pkey_codes + 1) + pk, -1)
    pos = np.searchsorted(key_sorted, key_s)
    inb = (pos < key_sorted.size) & (key_s >= 0)
    hit = np.zeros(len(s), dtype=bool)
    hit[inb] = key_sorted[pos[inb]] == key_s[inb]
    ignored += int((~hit).sum())
    if not hit.any():
        return llr, has_sig, ignored, answers
    use = uses.entry_use[order[pos[hit]]]
    rel = s["reliability"].to_numpy()[hit]
    with np.errstate(divide="ignore"):
        w = np.log(rel) - np.log1p(-rel)
    frame = pd.DataFrame({
        "u": use, "verifier": s["verifier"].to_numpy()[hit],
        "confirmed": s["confirmed"].to_numpy()[hit], "reliability": rel,
        "rec": s["rec"].to_numpy()[hit],
        "w": np.where(s["confirmed"].to_numpy()[hit], -w, w),
    })
    # Multiset union over the records of an action: each distinct call counts as often as it
    # appears in any single record, so logs that repeat earlier calls are not double counted.
    per_rec = frame.groupby(["u", "verifier", "confirmed", "reliability", "rec"],
                            sort=False).agg(n=("w", "size"), w=("w", "first"))
    mult = per_rec.groupby(level=["u", "verifier", "confirmed", "reliability"],
                           sort=False).agg(n=("n", "max"), w=("w", "first"))
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
    answers = mult["n"].reset_index()
    return llr, has_sig, ignored, answers


def _join(plist: list[PathLike], log: LogEntries, out_df: pd.DataFrame,
          out_invalid: pd.DataFrame, soft_labels: str,
          collect: dict[str, Any] | None = None) -> tuple[pd.DataFrame, JoinReport]:
    """The join (module docs). ``collect``, when given, receives the per-use state the
    episodes are built from (:mod:`amv_calib.claims._episodes`)."""
    n_out = len(out_df)
    uses, o_action = _collect_uses(log, out_df["action_id"])
    u, u_action, t_us, invalid = uses.u, uses.action, uses.t_us, uses.invalid
    n_uses = len(u)
    n_in_action = np.bincount(u_action)[u_action] if n_uses else np.zeros(0, np.int64)
    llr, has_sig, ignored_signals, answers = _signal_llr(log, uses, n_uses)

    # -- outcomes -------------------------------------------------------------------------------
    o_claim, u_claim = _factorize(out_df["claim_id"], u["claim_id"])
    o_t = out_df["t_us"].to_numpy(dtype=np.int64)
    o_v = out_df["violated"].to_numpy(dtype=bool)
    has_a = out_df["action_id"].notna().to_numpy()
    has_c = o_claim >= 0
    n_claim_codes = int(max(o_claim.max(initial=-1), u_claim.max(initial=-1))) + 2

    valid = ~invalid
    final = np.zeros(n_uses, dtype=bool)
    label = np.zeros(n_uses, dtype=bool)
    reason = np.full(n_uses, _JOINED, dtype=np.int8)
    reason[invalid] = _INVALID
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
        if not sel.size:
            return
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
        reason[conflict] = _CONFLICT
        ambiguous[amb] = True

    # 1. action + claim; 2. action only.
    ac_o = np.where(has_a & has_c, o_action * n_claim_codes + o_claim, -1)
    ac_u = np.where(u_claim >= 0, u_action * n_claim_codes + u_claim, -1)
    action_stage(has_a & has_c, ac_u, ac_o, single_premise_only=False)
    action_stage(has_a & ~has_c, u_action, o_action, single_premise_only=True)

    # 3. claim only: the earliest outcome at or after the use decides. (A function, so
    # that its large temporaries are freed before the output is built.)
    def claim_stage(c_sel: IntArray, o_claim: IntArray, u_claim: IntArray) -> None:
        grp = pd.DataFrame({"c": o_claim[c_sel], "t": o_t[c_sel], "v": o_v[c_sel]})
        agg = grp.groupby(["c", "t"], sort=True).agg(n=("v", "size"), n_true=("v", "sum"))
        g_c = agg.index.get_level_values("c").to_numpy().astype(np.int64)
        g_t = agg.index.get_level_values("t").to_numpy().astype(np.int64)
        g_n = agg["n"].to_numpy()
        g_true = agg["n_true"].to_numpy()
        # Dense time ranks turn (claim, time) into one sortable int64 key.
        uniq_t = _sorted_unique(np.concatenate([g_t, t_us[valid]]))
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
        reason[cu[conflict_c]] = _CONFLICT
        g_used = np.zeros(g_key.size, dtype=bool)
        g_used[gi[~conflict_c]] = True
        g_conf = np.zeros(g_key.size, dtype=bool)
        g_conf[gi[conflict_c]] = True
        o_g = np.searchsorted(g_key, o_claim[c_sel] * n_rank
                              + np.searchsorted(uniq_t, o_t[c_sel]))
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

    c_sel = np.flatnonzero(has_c & ~has_a)
    if c_sel.size and n_uses:
        claim_stage(c_sel, o_claim, u_claim)
    del ac_o, ac_u, u_claim, o_claim

    # -- final reasons and verifier soft labels ------------------------------------------------
    open_ = valid & ~final
    reason[open_ & ambiguous] = _AMBIGUOUS
    reason[open_ & ~ambiguous & had_before] = _BEFORE
    reason[open_ & ~ambiguous & ~had_before] = _NO_OUTCOME
    soft = np.zeros(n_uses, dtype=bool)
    if soft_labels == "posterior":
        soft = open_ & has_sig
        bad_sig = soft & np.isnan(llr)
        reason[bad_sig] = _BAD_SIGNALS
        soft &= ~bad_sig
        reason[soft] = _JOINED
    hard = final & (reason == _JOINED)
    joined = hard | soft

    p_logged = u["p"].to_numpy()
    q = _posterior(p_logged, llr)
    idx, viol, weight, from_verifier = _label_rows(hard, soft, label, q)
    file_names = [os.fspath(p) for p in plist]
    file_of = u["file"].to_numpy()
    claims = pd.DataFrame({
        "claim_id": u["claim_id"].array[idx],
        "timestamp": _us_to_datetime(t_us[idx]),
        **{c: u[c].to_numpy()[idx] for c in CLAIM_FEATURES if c != "contradiction_flag"},
        "contradiction_flag": u["contradiction_flag"].to_numpy()[idx] > 0.5,
        "violated": viol,
        "label_weight": weight,
        "action_id": _cat_take(u["action_id"], idx),
        "tool_name": _cat_take(u["tool_name"], idx),
        "premise_id": uses.premise_ids(idx),
        "use_id": idx.astype(np.int64),
        "label_source": _categorical(from_verifier, ["outcome", "verifier"]),
        "signal_llr": np.where(has_sig[idx], llr[idx], 0.0),
        "p_logged": p_logged[idx],
        "calibrator": _cat_subset(u["calibrator"], idx),
        "regime": _cat_subset(u["regime"], idx),
        "decision_file": _categorical(file_of[idx], file_names),
        "decision_line": u["line"].to_numpy(dtype=np.int64)[idx],
    }, copy=False)

    # -- report ---------------------------------------------------------------------------------
    unj = np.flatnonzero(~joined)
    reasons = reason[unj]
    # Categoricals: most uses of a big log can be unjoined, and these columns repeat a few
    # values (or share the log's own categories).
    unjoined_uses = pd.DataFrame({
        "decision_file": _categorical(file_of[unj], file_names),
        "decision_line": u["line"].to_numpy(dtype=np.int64)[unj],
        "action_id": _cat_subset(u["action_id"], unj),
        "premise_id": uses.premise_ids(unj, categorical=True),
        "claim_id": u["claim_id"].array[unj],
        "time": _us_to_datetime(t_us[unj]),
        "reason": _categorical(reasons, UNJOINED_REASONS),
        "detail": _categorical(uses.detail_codes[unj], uses.detail_categories),
    }, copy=False)
    status = _outcome_status(o_used, o_conflict, o_ambiguous, o_keymatch, o_has_earlier_use)
    counts, outcome_details = _outcome_report(out_df, out_invalid, status)
    report = _join_report(
        plist, log.stats, n_entries=uses.n_entries, n_uses=n_uses, n_hard=int(hard.sum()),
        n_soft=int(soft.sum()), reasons=reasons, n_outcomes=n_out + len(out_invalid),
        counts=counts, rows=len(claims), soft_labels=soft_labels,
        ignored_signals=ignored_signals, unjoined_uses=unjoined_uses,
        outcome_details=outcome_details)
    if collect is not None:
        collect.update(uses=uses, hard=hard, soft=soft, label=label, reason=reason,
                       answers=answers)
    return claims, report


def _join_report(files: Sequence[PathLike], stats: Sequence[LogReadStats], *, n_entries: int,
                 n_uses: int, n_hard: int, n_soft: int, reasons: NDArray[Any] | None,
                 n_outcomes: int, counts: dict[str, int], rows: int, soft_labels: str,
                 ignored_signals: int, unjoined_uses: pd.DataFrame,
                 outcome_details: pd.DataFrame,
                 unjoined_counts: Sequence[int] | None = None) -> JoinReport:
    """The checked :class:`JoinReport`; ``reasons`` holds the reason code of each unjoined
    use, or ``unjoined_counts`` the number of unjoined uses of each reason (in the order of
    :data:`UNJOINED_REASONS`; an engine that does not hold the unjoined uses)."""
    if unjoined_counts is None:
        if reasons is None:
            raise ValueError("give the unjoined uses' reasons or their counts")
        unjoined_counts = [int((reasons == i).sum()) for i in range(len(UNJOINED_REASONS))]
    report = JoinReport(
        decision_files=[{"path": os.fspath(p), **s.to_dict()}
                        for p, s in zip(files, stats, strict=True)],
        premise_entries=n_entries,
        repeated_entries=n_entries - n_uses,
        uses_read=n_uses,
        joined=n_hard + n_soft,
        joined_by_source={"outcome": n_hard, "verifier": n_soft},
        unjoined={r: int(unjoined_counts[i]) for i, r in enumerate(UNJOINED_REASONS)},
        outcomes_read=n_outcomes,
        outcomes=counts,
        rows=rows,
        soft_labels=soft_labels,
        ignored_signals=ignored_signals,
        unjoined_uses=unjoined_uses,
        outcome_details=outcome_details,
    )
    report.check()
    return report


def _posterior(p_logged: FloatArray, llr: FloatArray) -> FloatArray:
    """A verifier label's ``q = sigmoid(logit(prior) + LLR)``; the prior is the gate's ``p``
    clipped to [1e-6, 1 - 1e-6] (0.5 when missing), a NaN LLR counts as 0."""
    prior = np.where(np.isfinite(p_logged), np.clip(p_logged, 1e-6, 1 - 1e-6), 0.5)
    return np.asarray(sigmoid(np.log(prior) - np.log1p(-prior)
                              + np.where(np.isnan(llr), 0.0, llr)), dtype=np.float64)


def _label_rows(hard: BoolArray, soft: BoolArray, label: BoolArray, q: FloatArray
                ) -> tuple[IntArray, BoolArray, FloatArray, IntArray]:
    """The claim rows of some uses, in use order (violated first): one per outcome-labelled
    (``hard``) use, two (weights ``q``, ``1 - q``; weight 0 dropped) per verifier-labelled
    (``soft``) one. Returns the use position, ``violated``, the weight and whether the row
    comes from a verifier (0/1) of each row."""
    hi = np.flatnonzero(hard)
    si = np.flatnonzero(soft)
    pos_rows = si[q[si] > 0]
    neg_rows = si[q[si] < 1]
    idx = np.concatenate([hi, pos_rows, neg_rows])
    viol = np.concatenate([label[hi], np.ones(pos_rows.size, bool),
                           np.zeros(neg_rows.size, bool)])
    weight = np.concatenate([np.ones(hi.size), q[pos_rows], 1.0 - q[neg_rows]])
    from_verifier = np.concatenate([np.zeros(hi.size, np.int64),
                                    np.ones(pos_rows.size + neg_rows.size, np.int64)])
    order = np.lexsort((~viol, idx))
    return idx[order], viol[order], weight[order], from_verifier[order]


def _outcome_status(used: BoolArray, conflict: BoolArray, ambiguous: BoolArray,
                    keymatch: BoolArray, has_earlier_use: BoolArray) -> IntArray:
    """Each outcome record's status (a code into :data:`OUTCOME_STATUSES`, "invalid" aside)
    from what the join stages did with it."""
    status = np.full(used.size, -1, dtype=np.int64)
    status[used] = 0
    status[~used & conflict] = 1
    status[~used & ~conflict & ambiguous] = 2
    rest = status < 0
    status[rest & keymatch & has_earlier_use] = 3
    status[rest & keymatch & ~has_earlier_use] = 4
    status[rest & ~keymatch] = 5
    return status


def _outcome_report(out_df: pd.DataFrame, out_invalid: pd.DataFrame, status: IntArray
                    ) -> tuple[dict[str, int], pd.DataFrame]:
    """The outcome counts by status and the details of every record not used."""
    counts = {s: int((status == i).sum()) for i, s in enumerate(OUTCOME_STATUSES)}
    counts["invalid"] = len(out_invalid)
    not_used = np.flatnonzero(status != 0)
    od = out_df.iloc[not_used]
    n_inv = len(out_invalid)
    outcome_details = pd.DataFrame({
        "source": np.concatenate([od["source"].to_numpy(dtype=np.int64),
                                  out_invalid["source"].to_numpy(dtype=np.int64)]),
        "row": np.concatenate([od["row"].to_numpy(dtype=np.int64),
                               out_invalid["row"].to_numpy(dtype=np.int64)]),
        "action_id": pd.array(pd.concat([od["action_id"], pd.Series([None] * n_inv,
                                                                    dtype="str")]),
                              dtype="str"),
        "claim_id": pd.array(pd.concat([od["claim_id"], pd.Series([None] * n_inv,
                                                                  dtype="str")]),
                             dtype="str"),
        "time": _us_to_datetime(np.concatenate([od["t_us"].to_numpy(dtype=np.int64),
                                                np.full(n_inv, _NAT)])),
        "status": _from_codes(np.concatenate([status[not_used], np.full(n_inv, 6)]),
                              OUTCOME_STATUSES),
        "detail": pd.array([""] * len(od) + out_invalid["reason"].tolist(), dtype="str"),
    }).sort_values(["source", "row"], kind="stable", ignore_index=True)
    return counts, outcome_details


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
        q_new = sigmoid(np.log(p) - np.log1p(-p) + llr)
        delta = float(np.max(np.abs(q_new - q)))
        q = q_new
        if delta < tol:
            break
    return NoisyLabelFit(estimator=estimator, n_iter=n_iter, converged=delta < tol,
                         max_delta=delta)
