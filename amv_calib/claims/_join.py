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
(``recency_hours >= 0``, scores in [0, 1], a boolean contradiction flag, a memory kind the
contract's rule reads, :func:`~amv_calib.contract.premise_memory_kind`) is ``invalid_use``.
A premise's kind (its own, else its claim's) is carried to its claim rows.

Outcome records
---------------
Columns ``claim_id`` and/or ``action_id``, ``time`` and ``violated`` (camelCase aliases and
``timestamp``/``observed_at`` accepted; CSV, Parquet or JSONL). Outcomes arrive **after**
the use: an outcome only labels uses at or before its ``time``. Three kinds, the most
specific one that has an outcome at or after the use decides:

1. ``action_id`` + ``claim_id``: the claim's truth in that action.
2. ``action_id`` only: the action's truth. It labels the premise only when the action has
   one premise; on an action with several premises it labels none of them, whether it says
   violated or not, and they are ``ambiguous_action_outcome`` (unless a claim outcome below
   or verifier signals decide the premise). Labelling every premise "held" from a
   ``false`` outcome but none from a ``true`` one would select the premises on their label
   and bias the stale rate low.
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

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, Unpack

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._arrow import BoolArray, FloatArray, IntArray
from amv_calib.claims._codes import (
    Codes,
    _cat_subset,
    _cat_take,
    _factorize,
    _floats_at,
    _narrow,
    categorical,
)
from amv_calib.claims._logread import _NAT, LogEntries, PathLike, read_uses
from amv_calib.claims._noisy import label_rows, posterior
from amv_calib.claims._outcomes import load_outcomes, outcome_report
from amv_calib.claims._spill import SpilledColumns
from amv_calib.claims._sql import (
    CONFLICTING_OUTCOMES,
    CONFLICTING_SIGNALS,
    INVALID_USE,
    JOINED,
    UNJOINED_REASONS,
)
from amv_calib.claims._times import _time_reasons, us_to_datetime
from amv_calib.contract import CLAIM_FEATURES, LogReadStats
from amv_calib.exceptions import DataContractError, check_choice

SoftLabels = Literal["posterior", "off"]

#: The error when the SQL join refuses a use that the data contract's checks accept: the
#: refusal would have no reason to give.
UNCHECKED_REFUSAL: Final = ("the SQL join refused a use that the data contract's checks "
                            "accept (a bug: please report)")


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
@dataclass(kw_only=True)
class _Uses:
    """The uses of decision-log entries (one per (action, premise), the action's last
    entry) and the data contract's verdict on each, for the log adapters."""

    u: pd.DataFrame  # the entry that represents each use
    idx: IntArray | None  # position of that entry among the entries (None: use i is entry i)
    invalid: BoolArray
    detail_codes: NDArray[np.int32]  # into detail_categories; 0 = ""
    detail_categories: list[str]


def _premise_ids(u: pd.DataFrame, which: IntArray, *, categorical: bool = False) -> Any:
    """The premise key (premise id, else claim id, else ``#position``) of the uses
    ``u[which]``, as strings (or a categorical when every one has a premise id)."""
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


def _premise_keys(entries: pd.DataFrame) -> tuple[Codes, int]:
    """Per entry its premise-key code (premise id, else claim id, else position;
    :func:`_narrow`) and the number of premise-key codes."""
    pk = entries["premise_id"].cat.codes.to_numpy().astype(np.int64)
    n_pid = len(entries["premise_id"].cat.categories)
    na = pk < 0
    if na.any():
        (claim_codes,) = _factorize(pd.Series(entries["claim_id"].array[np.flatnonzero(na)]))
        n_claim = int(claim_codes.max(initial=-1)) + 1
        fill = np.where(claim_codes >= 0, n_pid + claim_codes,
                        n_pid + n_claim + entries["pidx"].to_numpy()[na])
        pk[na] = fill
    return _narrow(pk), int(pk.max(initial=-1)) + 1


def _use_codes(log: LogEntries) -> IntArray:
    """Per entry its use code (action x premise key; a record without ``action_id`` is an
    action of its own)."""
    entries = log.entries
    actions = log.records["action_id"]
    e_action: IntArray = np.asarray(actions.codes, dtype=np.int64)[entries["rec"].to_numpy()]
    no_action = e_action < 0
    if no_action.any():
        e_action[no_action] = len(actions.categories) + pd.factorize(
            entries["rec"].to_numpy()[no_action])[0]
    pk, n_pk = _premise_keys(entries)
    use_code = e_action * (n_pk + 1)
    use_code += pk  # in place: one array of the entries' size less at once
    return use_code


def _superseded(use_code: IntArray) -> BoolArray:
    """Which entries a later record of the same (action, premise) supersedes:
    ``pandas.Series(use_code).duplicated(keep="last")`` by a stable sort (the codes come in
    nearly sorted runs, records in log order, which the sort takes in near-linear time, and
    it needs two arrays of the codes' size where a hash table needs four)."""
    order = np.argsort(use_code, kind="stable")
    ks = use_code[order]
    dup_sorted = np.zeros(use_code.size, dtype=bool)
    dup_sorted[:-1] = ks[1:] == ks[:-1]  # a later equal code follows (the sort is stable)
    del ks
    out = np.empty(use_code.size, dtype=bool)
    out[order] = dup_sorted
    return out


def use_entries(log: LogEntries) -> IntArray:
    """Positions in ``log.entries`` of the uses: one per (action, premise), the action's
    last record (the label join's rule)."""
    return np.flatnonzero(~_superseded(_use_codes(log)))


def _collect_uses(log: LogEntries) -> _Uses:
    """One use per (action, premise), the action's last entry, and the data contract's
    verdict on each (the log adapters' uses; the label join's are the SQL's)."""
    entries = log.entries
    dup = _superseded(_use_codes(log))
    idx: IntArray | None = None
    u = entries
    if dup.any():
        idx = np.flatnonzero(~dup)
        u = entries.iloc[idx].reset_index(drop=True)
    del dup
    no_time = (log.records["t_us"] == _NAT)[entries["rec"].to_numpy()]
    # judged per entry (a record that repeats a premise id is invalid as a whole), then
    # taken for the uses
    invalid, detail_codes, detail_cats = invalid_detail(entries, no_time, log.bad_times,
                                                        log.spilled)
    if idx is not None:
        invalid, detail_codes = invalid[idx], detail_codes[idx]
    return _Uses(u=u, idx=idx, invalid=invalid, detail_codes=detail_codes,
                 detail_categories=detail_cats)


def _repeated_premises(u: pd.DataFrame) -> tuple[BoolArray, list[str]]:
    """Which entries belong to a record that gives one premise key (its id, else its claim
    id) to two premises, and per entry the repeated key (one per record).

    The label join keys a use by (action, premise): the second premise would silently
    replace the first, so the whole record is refused instead.
    """
    rec = u["rec"].to_numpy().astype(np.int64, copy=False)
    pid = pd.Series(u["premise_id"], copy=False)
    if not isinstance(pid.dtype, pd.CategoricalDtype):
        pid = pid.astype("category")
    # Keys as codes (premise ids first, then claim ids): no string per entry is built.
    key = pid.cat.codes.to_numpy().astype(np.int64)
    n_pid = len(pid.cat.categories)
    no_pid = np.flatnonzero(key < 0)
    claim = u["claim_id"].array
    if no_pid.size:
        (claim_codes,) = _factorize(pd.Series(claim[no_pid]))
        key[no_pid] = np.where(claim_codes >= 0, n_pid + claim_codes, -1)
    from amv_calib.claims._kernels import repeated_in_records

    dup = np.flatnonzero(repeated_in_records(rec, key))
    if not dup.size:
        return np.zeros(len(rec), dtype=bool), []
    recs, first = np.unique(rec[dup], return_index=True)
    names = [f"premise id\0{pid.cat.categories[key[i]]}" if key[i] < n_pid
             else f"claim id\0{claim[i]}" for i in dup[first].tolist()]
    has_repeat = np.zeros(int(rec[-1]) + 1, dtype=bool)  # rec ascends
    has_repeat[recs] = True
    repeated = has_repeat[rec]
    return repeated, [names[j] for j in np.searchsorted(recs, rec[repeated]).tolist()]


def invalid_detail(u: pd.DataFrame, no_time: BoolArray, bad_times: Mapping[int, Any],
                   spilled: SpilledColumns | None = None
                   ) -> tuple[BoolArray, NDArray[np.int32], list[str]]:
    """Which premise entries break the data contract, and the first problem of each (as
    codes into a list of messages whose entry 0 is the empty string): a record repeating a
    premise id, then the fields of the entry. ``u`` needs the columns ``rec``,
    ``premise_id``, ``claim_id`` and the four features (or ``spilled`` them, row for row:
    they are then read window by window), and ``kind_error`` (a categorical) when some
    premise gives a memory kind; ``no_time`` says which entries' record has no time
    (missing or unparseable)."""
    n = len(u)
    messages: list[str] = [""]
    index: dict[str, int] = {"": 0}
    codes = np.zeros(n, dtype=np.int32)

    def code(msg: str) -> int:
        if msg not in index:
            index[msg] = len(messages)
            messages.append(msg)
        return index[msg]

    def faulty(col: str, fault: Callable[[FloatArray], BoolArray]) -> BoolArray:
        if spilled is None:
            return fault(u[col].to_numpy())
        out = np.empty(n, dtype=bool)
        for lo, v in spilled.windows(col):
            out[lo:lo + v.size] = fault(v)
        return out

    def in_unit(v: FloatArray) -> BoolArray:
        return ~(np.isfinite(v) & (v >= 0) & (v <= 1))

    with np.errstate(invalid="ignore"):
        checks: list[tuple[BoolArray, str, str | None]] = [
            (u["claim_id"].isna().to_numpy(), "claim_id missing", None),
            (np.asarray(no_time, dtype=bool), "time", "time"),
            (faulty("recency_hours", lambda v: ~(np.isfinite(v) & (v >= 0))),
             "recency_hours={} must be a finite number >= 0", "recency_hours"),
            (faulty("source_trust_score", in_unit), "source_trust_score={} outside [0, 1]",
             "source_trust_score"),
            (faulty("model_confidence", in_unit), "model_confidence={} outside [0, 1]",
             "model_confidence"),
            (faulty("contradiction_flag", np.isnan),
             "contradiction_flag missing or not a boolean", None),
        ]
    if "kind_error" in u.columns:  # some premise gives a memory kind: the rule's verdict
        checks.append((u["kind_error"].notna().to_numpy(), "", "kind_error"))
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
        elif col == "kind_error":  # the rule's words: the field and the value
            reasons = u["kind_error"].cat.codes.to_numpy()[new]
            cats = u["kind_error"].cat.categories
            for i, r in zip(new.tolist(), reasons.tolist(), strict=True):
                codes[i] = code(str(cats[r]))
        elif col == "time":
            rec = u["rec"].to_numpy()
            raws = [bad_times.get(int(r)) for r in rec[new].tolist()]
            for i, reason in zip(new.tolist(), _time_reasons("time", raws), strict=True):
                codes[i] = code(reason)
        else:
            vals = u[col].to_numpy()[new] if spilled is None else spilled.take(col, new)
            for i, v in zip(new.tolist(), vals.tolist(), strict=True):
                codes[i] = code(msg.format("missing" if math.isnan(v) else repr(float(v))))
    return bad, codes, messages


class JoinLogsOptions(TypedDict, total=False):
    """The keyword options of :func:`join_logs`, for :func:`label_claims` to pass on (their
    defaults are written once, in :func:`join_logs`)."""

    soft_labels: SoftLabels
    on_corrupt: Literal["raise", "skip"]
    columnar: bool
    log: LogEntries | None


def label_claims(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    **options: Unpack[JoinLogsOptions],
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
        features, ``memory_kind`` only when some premise of the logs gives a kind (null
        where the use's premise gives none), ``violated``) plus ``label_weight`` (1 for
        outcome labels; ``q`` / ``1 - q``
        for the two rows of a verifier label), ``action_id``, ``tool_name``, ``premise_id``,
        ``use_id`` (the use's position among all uses), ``label_source`` (``outcome`` or
        ``verifier``), ``signal_llr``, ``p_logged`` (the gate's probability), ``calibrator``,
        ``regime``, ``decision_file`` and ``decision_line``. Rows follow log order.
    report : JoinReport
        Counts by reason and status, with per-record details.
    """
    return join_logs(decisions, outcomes, **options).tables()


def join_logs(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    log: LogEntries | None = None,
) -> JoinedUses:
    """:func:`label_claims` without building its tables: what the join decided for each
    use, from which the claim rows and the unjoined uses are built whole or in parts
    (``label --out`` writes them part by part). Parameters as :func:`label_claims`."""
    check_choice("soft_labels", soft_labels, ("posterior", "off"))
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    if log is None:  # a batch given as ``log`` (the monitor's new lines) may be empty
        # A big log's features and p wait in a temporary file until the rows are written
        # (1 GB of memory at 10 M lines); a log given is the caller's, read as it chose.
        log, out_df, out_invalid = read_with_outcomes(plist, outcomes, on_corrupt=on_corrupt,
                                                      columnar=columnar,
                                                      spill=_log_bytes(plist) >= SPILL_BYTES)
        require_records(plist, log)
    else:
        out_df, out_invalid = load_outcomes([] if outcomes is None else outcomes)
    return _join(plist, log, out_df, out_invalid, soft_labels)


#: Decision-log bytes from which :func:`join_logs` keeps the features and ``p`` in a
#: temporary file while it joins (``read_uses(spill=True)``). Measured: 1 M lines (0.7 GiB)
#: 92 MiB less and no slower (4.84-4.96 s against 4.96-5.17 s); 10 M lines 0.95 GiB less.
#: Below 64 MiB (about 90 k lines) the features hold under 10 MB: no file is made.
SPILL_BYTES: Final = 1 << 26


def _log_bytes(paths: Sequence[PathLike]) -> int:
    """The logs' total size (a path that is not a file counts 0: the reader reports it)."""
    return sum(os.stat(p).st_size for p in paths if os.path.isfile(p))


def read_with_outcomes(
    decisions: Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None,
    *,
    on_corrupt: Literal["raise", "skip"],
    columnar: bool = True,
    spans: Sequence[tuple[int, int, int] | None] | None = None,
    spill: bool = False,
    offers: bool = False,
) -> tuple[LogEntries, pd.DataFrame, pd.DataFrame]:
    """:func:`read_uses` of the logs and :func:`load_outcomes` of the outcomes, the outcomes
    loaded on a thread while the logs are read (Arrow's CSV reader holds no GIL, and the
    read waits on its own parse threads). An error of the logs is raised first.
    ``on_corrupt`` is the caller's (no default of its own); the rest as :func:`read_uses`."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="amv-calib-outcomes") as pool:
        loading = pool.submit(load_outcomes, [] if outcomes is None else outcomes)
        log = read_uses(list(decisions), on_corrupt=on_corrupt, columnar=columnar,
                        spans=spans, spill=spill, offers=offers)
        out_df, out_invalid = loading.result()
    return log, out_df, out_invalid


def require_records(plist: Sequence[PathLike], log: LogEntries) -> None:
    """Raise :class:`DataContractError` when the logs read hold no decision record, naming
    each file with its count of lines, blank, torn and corrupt."""
    if not sum(st.records for st in log.stats):
        seen = ", ".join(f"{os.fspath(p)} ({st.lines} lines: {st.blank} blank, {st.torn} "
                         f"torn, {st.corrupt} corrupt)" for p, st in zip(plist, log.stats,
                                                                          strict=True))
        raise DataContractError(f"no decision record to label in {seen or 'no file'}")


@dataclass(kw_only=True)
class _UseMap:
    """What the episodes read of the uses the SQL join found
    (:func:`~amv_calib.claims._episodes.build_episodes`)."""

    u: pd.DataFrame  # the entry of each use
    entry_use: IntArray | None  # for every entry, the position of its use (None: the same)
    entry_pkey: Codes  # premise-key code of every entry
    n_pkey_codes: int

    def premise_ids(self, which: IntArray, *, categorical: bool = False) -> Any:
        """:func:`_premise_ids` of some uses."""
        return _premise_ids(self.u, which, categorical=categorical)

    def use_of(self, entries: IntArray) -> IntArray:
        """The position of the use of each of the ``entries``."""
        return entries if self.entry_use is None else self.entry_use[entries]


def _invalid_details(log: LogEntries, valid: BoolArray, entry_of_use: IntArray | None
                     ) -> tuple[NDArray[np.int32], list[str]]:
    """The first problem of each use the SQL join refused (:func:`invalid_detail`'s codes,
    0 for the others, and its messages), judged over the entries of those uses' records
    alone (a record's repeated premise key needs its every entry)."""
    codes = np.zeros(valid.size, dtype=np.int32)
    bad_uses = np.flatnonzero(~valid)
    if not bad_uses.size:
        return codes, [""]
    entries = log.entries
    e_bad = bad_uses if entry_of_use is None else entry_of_use[bad_uses]
    rec = entries["rec"].to_numpy()
    in_bad = np.zeros(int(rec.max(initial=-1)) + 1, dtype=bool)
    in_bad[rec[e_bad]] = True
    sub = np.flatnonzero(in_bad[rec])
    del in_bad
    frame: dict[str, Any] = {
        "rec": rec[sub], "premise_id": _cat_subset(entries["premise_id"], sub),
        "claim_id": entries["claim_id"].array[sub]}
    for c in ("recency_hours", "source_trust_score", "model_confidence",
              "contradiction_flag"):
        frame[c] = _floats_at(entries, c, sub, log.spilled, None)
    if "kind_error" in entries.columns:
        frame["kind_error"] = _cat_subset(entries["kind_error"], sub)
    no_time = (log.records["t_us"] == _NAT)[rec[sub]]
    bad, detail, messages = invalid_detail(pd.DataFrame(frame, copy=False), no_time,
                                           log.bad_times)
    at = np.searchsorted(sub, e_bad)
    if not bad[at].all():
        raise RuntimeError(UNCHECKED_REFUSAL)
    codes[bad_uses] = detail[at]
    return codes, messages


def llr_per_use(answers: pd.DataFrame) -> tuple[IntArray, FloatArray]:
    """The uses with signals (ascending) and the summed log-likelihood ratio of each one's
    answers (NaN if +inf and -inf), summed in the order of ``answers`` (by first signal)."""
    uu = answers["uid"].to_numpy().astype(np.int64)
    contrib = answers["contrib"].to_numpy(dtype=np.float64)
    sig_use, at = np.unique(uu, return_inverse=True)
    pos_inf = np.bincount(at, weights=(contrib == np.inf), minlength=sig_use.size) > 0
    neg_inf = np.bincount(at, weights=(contrib == -np.inf), minlength=sig_use.size) > 0
    llr = np.bincount(at, weights=np.where(np.isfinite(contrib), contrib, 0.0),
                      minlength=sig_use.size).astype(np.float64)
    llr[pos_inf] = np.inf
    llr[neg_inf] = -np.inf
    llr[pos_inf & neg_inf] = np.nan
    return sig_use.astype(np.int64), llr


def verifier_labels(reason: NDArray[np.int8], has_sig: BoolArray, nan_llr: BoolArray,
                    soft_labels: str) -> tuple[BoolArray, BoolArray]:
    """Which uses an outcome labels (``hard``) and which the verifiers do (``soft``), from
    the SQL join's ``reason`` of each use (-1 joined by an outcome, else an
    :data:`UNJOINED_REASONS` index), whether it has signals (``has_sig``) and whether
    their summed log-likelihood ratio is NaN (``nan_llr``: +inf and -inf).

    With ``soft_labels="posterior"`` a valid use no outcome decided that has signals is
    verifier-labelled, unless its signals contradict (``conflicting_signals``); ``reason``
    is updated in place (the labelled ones -1). Both engines decide the uses by this
    function, one machine on all the uses at once, Spark on each batch of them.
    """
    hard = reason == JOINED
    if soft_labels != "posterior":
        return hard, np.zeros(reason.size, dtype=bool)
    soft = has_sig & (reason != INVALID_USE) & ~hard & (reason != CONFLICTING_OUTCOMES)
    bad = soft & nan_llr
    reason[bad] = CONFLICTING_SIGNALS
    soft &= ~bad
    reason[soft] = JOINED
    return hard, soft


def _join(plist: list[PathLike], log: LogEntries, out_df: pd.DataFrame,
          out_invalid: pd.DataFrame, soft_labels: str,
          collect: dict[str, Any] | None = None) -> JoinedUses:
    """The join (module docs): the uses decided by the SQL of :mod:`amv_calib.claims._sql`
    on DuckDB; the refused uses' reasons, the verifier labels and the rows from what it
    decided. ``collect``, when given, receives the per-use state the episodes are built
    from (:mod:`amv_calib.claims._episodes`)."""
    from amv_calib.claims import _duckjoin

    n_out = len(out_df)
    entries = log.entries
    with _duckjoin.session() as con:
        state = _duckjoin.run_join(con, _duckjoin.relations(log, out_df))
    entry_of_use = state.entry_of_use  # None: use i is entry i
    u = entries if entry_of_use is None else entries.iloc[entry_of_use].reset_index(drop=True)
    n_uses = len(u)
    valid, label = state.valid, state.label
    detail_codes, detail_categories = _invalid_details(log, valid, entry_of_use)
    reason = state.reason.copy()
    sig_use, sig_llr = llr_per_use(state.answers)
    ignored_signals = len(log.signals) - state.signals_used
    has_sig = np.zeros(n_uses, dtype=bool)
    has_sig[sig_use] = True
    nan_llr = np.zeros(n_uses, dtype=bool)
    nan_llr[sig_use[np.isnan(sig_llr)]] = True
    hard, soft = verifier_labels(reason, has_sig, nan_llr, soft_labels)
    del has_sig, nan_llr
    joined = hard | soft

    # q is read at the verifier-labelled uses alone (a few percent of a big log's)
    si = np.flatnonzero(soft)
    q_soft = posterior(_floats_at(u, "p", si, log.spilled, entry_of_use),
                       sig_llr[np.searchsorted(sig_use, si)])  # soft uses have signals
    row_use, row_viol, row_weight, row_verifier = label_rows(hard, soft, label, q_soft)
    # int32 positions a million uses at a time (most of a big log's uses can be unjoined)
    unjoined = np.concatenate([_narrow(lo + np.flatnonzero(~joined[lo:lo + _STAGE_ROWS]))
                               for lo in range(0, max(n_uses, 1), _STAGE_ROWS)])
    reasons = reason[unjoined]
    counts, outcome_details = outcome_report(out_df, out_invalid, state.outcome_status)
    report = join_report(
        plist, log.stats, n_entries=len(entries), n_uses=n_uses, n_hard=int(hard.sum()),
        n_soft=int(soft.sum()), reasons=reasons, n_outcomes=n_out + len(out_invalid),
        counts=counts, rows=row_use.size, soft_labels=soft_labels,
        ignored_signals=ignored_signals, unjoined_uses=pd.DataFrame(),
        outcome_details=outcome_details)
    if collect is not None:
        pk, n_pk = _premise_keys(entries)
        answers = state.answers.rename(columns={"uid": "u"})[
            ["u", "verifier", "confirmed", "reliability", "n"]]
        collect.update(uses=_UseMap(u=u, entry_use=state.entry_use, entry_pkey=pk,
                                    n_pkey_codes=n_pk),
                       hard=hard, soft=soft, label=label, reason=reason, answers=answers)
    # only the columns the outputs need: the rest of the log's frame can go while the rows
    # are written
    kept = [c for c in (*_OUTPUT_COLUMNS, "memory_kind")
            if c in u.columns and (log.spilled is None or c not in log.spilled.names)]
    u_out = pd.DataFrame({c: u[c] for c in kept}, copy=False)
    records = {c: pd.Series(log.records[c], copy=False) for c in _OUTPUT_RECORD_COLUMNS}
    return JoinedUses(u=u_out, records=records, spilled=log.spilled,
                      entry_of_use=entry_of_use,
                      detail_codes=detail_codes,
                      detail_categories=detail_categories, report=report,
                      file_names=[os.fspath(p) for p in plist],
                      row_use=row_use, row_violated=row_viol, row_weight=row_weight,
                      row_verifier=row_verifier, signal_uses=sig_use,
                      signal_llr=sig_llr,
                      unjoined=unjoined, reasons=reasons)


#: The columns of the log's entries that the claim rows and the unjoined uses are built from.
_OUTPUT_COLUMNS: Final = ("rec", "claim_id", *CLAIM_FEATURES, "p", "premise_id", "pidx")
#: The columns of the log's records that they are built from.
_OUTPUT_RECORD_COLUMNS: Final = ("t_us", "action_id", "tool_name", "calibrator", "regime",
                                 "file", "line")

#: Uses searched at once by the claim-only stage of the join.
_STAGE_ROWS: Final = 1 << 20

#: Rows of a part built by :meth:`JoinedUses.claim_parts` and
#: :meth:`JoinedUses.unjoined_parts`.
PART_ROWS: Final = 1 << 16


@dataclass(kw_only=True)
class JoinedUses:
    """What the label join decided for each use; the claim rows and the unjoined uses are
    built from it, whole (:meth:`claims`, :meth:`unjoined_uses`) or in parts
    (:meth:`claim_parts`, :meth:`unjoined_parts`) so that a writer never holds either table.

    ``report`` is complete but for its ``unjoined_uses``, which is empty.
    """

    u: pd.DataFrame  # the entry of each use (the columns of _OUTPUT_COLUMNS not spilled)
    records: dict[str, pd.Series]  # the log's records (_OUTPUT_RECORD_COLUMNS), by ``rec``
    spilled: SpilledColumns | None  # the rest, by entry (see read_uses)
    entry_of_use: IntArray | None  # the entry of each use (None: use i is entry i)
    detail_codes: NDArray[np.int32]
    detail_categories: list[str]
    report: JoinReport
    file_names: list[str]
    # the claim rows: the use of each, violated, weight, from a verifier (0/1)
    row_use: IntArray
    row_violated: BoolArray
    row_weight: FloatArray
    row_verifier: NDArray[np.int8]
    signal_uses: IntArray  # the uses with signals, ascending
    signal_llr: FloatArray  # their summed log-likelihood ratio
    # the unjoined uses, in use order, and their reason codes
    unjoined: Codes
    reasons: NDArray[np.int8]

    def claims(self, lo: int = 0, hi: int | None = None) -> pd.DataFrame:
        """Claim rows ``lo:hi`` (all by default), in the columns of :func:`label_claims`."""
        sl = slice(lo, hi)
        idx = self.row_use[sl]
        u, r = self.u, self.records
        rec = u["rec"].to_numpy()[idx]

        def floats(c: str) -> FloatArray:
            return _floats_at(u, c, idx, self.spilled, self.entry_of_use)

        # the kind only when some premise of the logs gives one: a log without kinds gives
        # the table it gave before kinds were read
        kind = {"memory_kind": _cat_take(u["memory_kind"], idx)} \
            if "memory_kind" in u.columns else {}
        return pd.DataFrame({
            "claim_id": u["claim_id"].array[idx],
            "timestamp": us_to_datetime(r["t_us"].to_numpy()[rec]),
            **{c: floats(c) for c in CLAIM_FEATURES if c != "contradiction_flag"},
            "contradiction_flag": floats("contradiction_flag") > 0.5,
            **kind,
            "violated": self.row_violated[sl],
            "label_weight": self.row_weight[sl],
            "action_id": _cat_take(r["action_id"], rec),
            "tool_name": _cat_take(r["tool_name"], rec),
            "premise_id": _premise_ids(u, idx),
            "use_id": idx.astype(np.int64),
            "label_source": categorical(self.row_verifier[sl], ["outcome", "verifier"]),
            "signal_llr": self.signal_llr_at(idx),
            "p_logged": floats("p"),
            "calibrator": _cat_subset(r["calibrator"], rec),
            "regime": _cat_subset(r["regime"], rec),
            "decision_file": categorical(r["file"].to_numpy()[rec], self.file_names),
            "decision_line": r["line"].to_numpy(dtype=np.int64)[rec],
        }, copy=False)

    def signal_llr_at(self, which: IntArray) -> FloatArray:
        """The summed log-likelihood ratio of the signals of the uses ``which`` (0 for a use
        without signals)."""
        out = np.zeros(which.size)
        pos = np.searchsorted(self.signal_uses, which)
        hit = pos < self.signal_uses.size
        hit[hit] = self.signal_uses[pos[hit]] == which[hit]
        out[hit] = self.signal_llr[pos[hit]]
        return out

    def unjoined_uses(self, lo: int = 0, hi: int | None = None) -> pd.DataFrame:
        """Unjoined uses ``lo:hi`` (all by default), the columns of
        ``JoinReport.unjoined_uses``."""
        unj = self.unjoined[lo:hi]
        u, r = self.u, self.records
        rec = u["rec"].to_numpy()[unj]
        # Categoricals: most uses of a big log can be unjoined, and these columns repeat a
        # few values (or share the log's own categories).
        return pd.DataFrame({
            "decision_file": categorical(r["file"].to_numpy()[rec], self.file_names),
            "decision_line": r["line"].to_numpy(dtype=np.int64)[rec],
            "action_id": _cat_subset(r["action_id"], rec),
            "premise_id": _premise_ids(u, unj, categorical=True),
            "claim_id": u["claim_id"].array[unj],
            "time": us_to_datetime(r["t_us"].to_numpy()[rec]),
            "reason": categorical(self.reasons[lo:hi], UNJOINED_REASONS),
            "detail": categorical(self.detail_codes[unj], self.detail_categories),
        }, copy=False)

    def tables(self) -> tuple[pd.DataFrame, JoinReport]:
        """The claim rows and the report with its unjoined uses, whole (what
        :func:`label_claims` returns)."""
        self.report.unjoined_uses = self.unjoined_uses()
        return self.claims(), self.report

    def claim_parts(self, rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The claim rows in consecutive parts of ``rows`` (default :data:`PART_ROWS`;
        one part, empty, if there are none)."""
        step = rows or PART_ROWS
        for lo in range(0, max(self.row_use.size, 1), step):
            yield self.claims(lo, lo + step)

    def unjoined_parts(self, rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The unjoined uses in consecutive parts of ``rows`` (default :data:`PART_ROWS`;
        one part, empty, if there are none)."""
        step = rows or PART_ROWS
        for lo in range(0, max(self.unjoined.size, 1), step):
            yield self.unjoined_uses(lo, lo + step)


def join_report(files: Sequence[PathLike], stats: Sequence[LogReadStats], *, n_entries: int,
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
