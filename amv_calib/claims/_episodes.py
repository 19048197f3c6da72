"""Episodes and verifier reliabilities from decision logs: closing the loop from production.

:func:`label_logs` runs the label join of :mod:`amv_calib.claims._join` (the same code,
not a copy) and adds what the tune and certify steps need, from the same read of the logs:

Episodes
--------
Each logged *action* (records sharing an ``action_id``; a record without one is an action
of its own) becomes one replayable episode in the episode format of
:mod:`amv_calib.tuning` when **every premise of its last record has a hard label** (an
outcome record decided it). The episode holds ``theta`` and ``kappa`` as logged, the
premises with their four features, ``memory_kind`` (where the premise gives one) and
``violated`` from the outcome, and every verifier
that was offered (the record's ``verifiers`` field) with its cost and the reliability to
use (below). ``instance_id`` is the action id, ``family`` the tool name.

Soft labels are not enough for an episode: a verifier's posterior is not ground truth, and
replaying the gate against answers drawn from labels that the same verifiers produced would
be circular. An action whose premises are labelled only by verifier signals is therefore
counted as ``verifier_label_only`` (its premises still become soft-labelled claim rows).

Every action read is an episode or is counted under one reason, the first that applies:
``no_premises``; ``invalid_action`` (theta or kappa missing, not finite or not > 0, or a
premise id twice); ``verifiers_not_logged`` (a log written before the gate recorded the
offered verifiers); ``invalid_verifier`` (an offered verifier without id, with a cost < 0,
a declared reliability outside (0.5, 1], a premise it resolves that the action lacks, or
its id twice); then the first unlabelled premise's reason in the order ``invalid_use``,
``conflicting_outcomes``, ``conflicting_signals``, ``ambiguous_action_outcome``,
``outcome_before_use``, ``no_outcome_yet``, ``verifier_label_only``. So
``episodes + sum(unlabelled) == actions_read``, always.

Verifier reliabilities
----------------------
An *answer* is one signal of one verifier call about one premise (a call that resolves two
premises gives two answers; calls repeated in later records of an action count once, as in
the join). An answer is *labelled* when its premise's use received a hard label. It
*agrees* when it confirmed a valid premise or refuted a violated one. With a uniform prior,
the symmetric reliability has the posterior ``Beta(1 + agree, 1 + disagree)``; the estimate
is its mean and the interval the equal-tailed 95% one. Sensitivity ``P(refute | violated)``
and specificity ``P(confirm | valid)`` are reported the same way (the gate keeps the
symmetric model). The declared value is the reliability logged with the verifier's calls
(the most frequent one), and it is flagged when it lies outside the interval.

Episodes use the estimate for a verifier with at least ``min_verifier_calls`` labelled
answers, and the declared value (as offered in each action) otherwise. An estimate at or
below 0.5 (no better than chance) is used as ``0.5 + 1e-6``: the episode format needs a
reliability in (0.5, 1], and that value makes the verifier uninformative.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, Unpack, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._codes import _floats_at
from amv_calib.claims._join import (
    SPILL_BYTES,
    JoinedUses,
    JoinReport,
    SoftLabels,
    _join,
    _log_bytes,
    read_with_outcomes,
    require_records,
)
from amv_calib.claims._logread import PathLike
from amv_calib.claims._sql import UNJOINED_REASONS
from amv_calib.exceptions import check_choice
from amv_calib.settings import LabelOptions

#: Why an action did not become an episode, in the order they are tried.
ACTION_REASONS: Final = (
    "no_premises",
    "invalid_action",
    "verifiers_not_logged",
    "invalid_verifier",
    "invalid_use",
    "conflicting_outcomes",
    "conflicting_signals",
    "ambiguous_action_outcome",
    "outcome_before_use",
    "no_outcome_yet",
    "verifier_label_only",
)
_NO_PREMISES, _BAD_ACTION, _NO_VERIFIERS, _BAD_VERIFIER = range(4)
#: Action-reason code of each premise reason of :data:`UNJOINED_REASONS`.
_PREMISE_CODE: Final = np.array([ACTION_REASONS.index(r) for r in UNJOINED_REASONS],
                                dtype=np.int64)
_SOFT_ONLY: Final = ACTION_REASONS.index("verifier_label_only")
_LABELLED: Final = len(ACTION_REASONS)

#: Default least number of labelled answers before episodes use a verifier's estimate.
#: The defaults of :func:`label_logs` (its command line's and step's too).
_LABEL: Final = LabelOptions()
DEFAULT_MIN_VERIFIER_CALLS: Final = _LABEL.min_verifier_calls
#: The reliability an estimate at or below chance is replaced by (module docs).
_UNINFORMATIVE_R: Final = 0.5 + 1e-6
_LEVEL: Final = 0.95


def beta_interval(successes: float, failures: float, level: float = _LEVEL
                  ) -> tuple[float, float, float]:
    """Mean and equal-tailed ``level`` interval of ``Beta(1 + successes, 1 + failures)``."""
    from scipy.stats import beta

    a, b = 1.0 + successes, 1.0 + failures
    tail = (1.0 - level) / 2.0
    return a / (a + b), float(beta.ppf(tail, a, b)), float(beta.ppf(1.0 - tail, a, b))


def _interval(successes: float, n: float) -> dict[str, float]:
    mean, lo, hi = beta_interval(successes, n - successes)
    return {"estimate": mean, "lower": lo, "upper": hi, "n": int(n)}


def verifier_reliabilities(answers: pd.DataFrame, hard: NDArray[np.bool_],
                           violated: NDArray[np.bool_], *,
                           min_verifier_calls: int = DEFAULT_MIN_VERIFIER_CALLS,
                           declared_offers: Mapping[str, Mapping[float, int]] | None = None,
                           ) -> dict[str, dict[str, Any]]:
    """Each verifier's answers against the outcomes, and its estimated reliability.

    Parameters
    ----------
    answers : DataFrame
        One row per (use ``u``, ``verifier``, ``confirmed``, declared ``reliability``) with
        its multiplicity ``n``, as the join counts them.
    hard, violated : bool arrays over uses
        Whether a use has an outcome label, and that label.
    min_verifier_calls : int
        Labelled answers needed before episodes use the estimate.
    declared_offers : mapping, optional
        Declared reliabilities (value -> times offered) of verifiers, used when a verifier
        was offered but never answered.

    Returns
    -------
    dict
        Verifier id -> the report described in the module docs.
    """
    u = answers["u"].to_numpy(dtype=np.int64)
    n = answers["n"].to_numpy(dtype=np.int64)
    lab = hard[u]
    bad = violated[u] & lab
    conf = answers["confirmed"].to_numpy(dtype=bool)
    frame = pd.DataFrame({
        "verifier": answers["verifier"].astype("str").to_numpy(dtype=object),
        "answers": n,
        "labelled": n * lab,
        "confirm_valid": n * (lab & conf & ~bad),
        "confirm_violated": n * (conf & bad),
        "refute_valid": n * (lab & ~conf & ~bad),
        "refute_violated": n * (~conf & bad),
    })
    sums = frame.groupby("verifier", sort=True).sum()
    declared = (pd.DataFrame({"verifier": frame["verifier"],
                              "r": answers["reliability"].to_numpy(dtype=np.float64), "n": n})
                .groupby(["verifier", "r"], sort=True)["n"].sum())
    out: dict[str, dict[str, Any]] = {}
    names = sorted(set(sums.index) | set(declared_offers or {}))
    for vid in names:
        c = {str(k): int(sums.loc[vid, k]) if vid in sums.index else 0  # type: ignore[arg-type]
             for k in sums.columns}
        if vid in sums.index:
            values = {float(r): int(k) for r, k in declared.loc[vid].items()}
        else:
            values = {float(r): int(k) for r, k in (declared_offers or {})[vid].items()}
        agree = c["confirm_valid"] + c["refute_violated"]
        disagree = c["confirm_violated"] + c["refute_valid"]
        mean, lo, hi = beta_interval(agree, disagree)
        # the most frequent declared value; ties go to the smaller (sorted, first max)
        top = max(sorted(values), key=lambda r: values[r]) if values else None
        use_estimate = c["labelled"] >= min_verifier_calls
        out[vid] = {
            **c,
            "agree": agree,
            "disagree": disagree,
            "reliability": {"estimate": mean, "lower": lo, "upper": hi},
            "sensitivity": _interval(c["refute_violated"],
                                     c["refute_violated"] + c["confirm_violated"]),
            "specificity": _interval(c["confirm_valid"], c["confirm_valid"] + c["refute_valid"]),
            "declared": top,
            "declared_values": {repr(r): k for r, k in sorted(values.items())},
            "declared_outside_interval": top is not None and not lo <= top <= hi,
            "used_in_episodes": "estimate" if use_estimate else "declared",
            "reliability_used": (max(mean, _UNINFORMATIVE_R) if use_estimate else top),
        }
    return out


@dataclass(kw_only=True)
class EpisodeReport:
    """Where every logged action went: ``episodes + sum(unlabelled) == actions_read``."""

    actions_read: int
    episodes: int
    unlabelled: dict[str, int]
    min_verifier_calls: int

    def check(self) -> None:
        """Raise ``AssertionError`` if the accounting does not hold."""
        if self.episodes + sum(self.unlabelled.values()) != self.actions_read:
            raise AssertionError(f"episodes {self.episodes} + unlabelled {self.unlabelled} "
                                 f"!= actions {self.actions_read}")

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as printed and written into the join report."""
        return {"actions_read": self.actions_read, "episodes": self.episodes,
                "unlabelled": dict(self.unlabelled),
                "min_verifier_calls": self.min_verifier_calls}


@dataclass(kw_only=True)
class LogLabels:
    """What :func:`label_logs` returns."""

    claims: pd.DataFrame
    report: JoinReport
    episodes: Any  # pyarrow string array: one JSON object (an episode) per element
    episode_report: EpisodeReport
    verifiers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per episode, the action id (None for a record without one), for tests and reports
    episode_actions: list[str | None] = field(default_factory=list, repr=False)


class LabelLogsOptions(TypedDict, total=False):
    """The keyword options of :func:`label_logs_parts`, for :func:`label_logs` to pass on
    (their defaults are written once, in :func:`label_logs_parts`)."""

    min_verifier_calls: int
    soft_labels: SoftLabels
    on_corrupt: Literal["raise", "skip"]
    columnar: bool


def label_logs(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    **options: Unpack[LabelLogsOptions],
) -> LogLabels:
    """Claims, episodes and verifier reliabilities from decision logs and outcomes.

    The claims and the report are exactly :func:`~amv_calib.claims.label_claims`'s; the
    episodes and the verifier reliabilities follow the rules of the module docs.

    Parameters
    ----------
    decisions, outcomes, soft_labels, on_corrupt, columnar
        As in :func:`~amv_calib.claims.label_claims`.
    min_verifier_calls : int, default 200
        Labelled answers a verifier needs before episodes use its estimated reliability
        instead of the declared one.

    The keyword options and their defaults are :func:`label_logs_parts`'s.
    """
    joined, labels = label_logs_parts(decisions, outcomes, **options)
    labels.claims, labels.report = joined.tables()
    return labels


def label_logs_parts(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    min_verifier_calls: int = _LABEL.min_verifier_calls,
    soft_labels: SoftLabels = _LABEL.soft_labels,
    on_corrupt: Literal["raise", "skip"] = "skip" if _LABEL.skip_corrupt else "raise",
    columnar: bool = True,
) -> tuple[JoinedUses, LogLabels]:
    """:func:`label_logs` without building its tables (what ``label --out DIR`` writes, part
    by part): the join, from which the claim rows and the unjoined uses are built in parts
    (:meth:`~amv_calib.claims.JoinedUses.claim_parts`), and the labels with an empty
    ``claims`` table and a report whose ``unjoined_uses`` is empty. Parameters as
    :func:`label_logs` (whose keyword options these are, defaults included);
    :func:`~amv_calib.claims.write_label_folder` writes the two."""
    if isinstance(min_verifier_calls, bool) or not isinstance(min_verifier_calls, int) \
            or min_verifier_calls < 0:
        raise ValueError(f"min_verifier_calls={min_verifier_calls!r} must be an int >= 0")
    check_choice("soft_labels", soft_labels, ("posterior", "off"))
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    # as join_logs reads: a big log's features and p wait in a temporary file
    log, out_df, out_invalid = read_with_outcomes(plist, outcomes, on_corrupt=on_corrupt,
                                                  columnar=columnar, offers=True,
                                                  spill=_log_bytes(plist) >= SPILL_BYTES)
    require_records(plist, log)
    state: dict[str, Any] = {}
    joined = _join(plist, log, out_df, out_invalid, soft_labels, collect=state)
    episodes, ep_report, verifiers, actions = build_episodes(
        [os.fspath(p) for p in plist], log, state, min_verifier_calls)
    return joined, LogLabels(claims=pd.DataFrame(), report=joined.report, episodes=episodes,
                             episode_report=ep_report, verifiers=verifiers,
                             episode_actions=actions)


# ---------------------------------------------------------------------------------------------
# building the episodes, column by column
# ---------------------------------------------------------------------------------------------
def _quoted(values: Any) -> Any:
    """JSON string literals of a string array (nulls as ``null``); each distinct value is
    encoded once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pa.chunked_array([values]) if isinstance(values, pa.Array) else \
        pa.chunked_array([pa.array(values, type=pa.string())])
    enc = arr.combine_chunks().dictionary_encode() if arr.num_chunks else \
        pa.array([], type=pa.string()).dictionary_encode()
    words = pa.array([json.dumps(w, ensure_ascii=False) for w in enc.dictionary.to_pylist()],
                     type=pa.string())
    return pc.fill_null(pc.take(words, enc.indices), "null")


def _numbers(x: NDArray[Any]) -> Any:
    """JSON numbers (shortest round-trip text) of a finite float array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(np.asarray(x, dtype=np.float64)), pa.string())


def _bools(x: NDArray[np.bool_]) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(np.asarray(x, dtype=bool)), pa.string())


def _concat(*parts: Any) -> Any:
    """Element-wise concatenation of string arrays and literal strings."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(*parts, "")


def _kind_fields(entries: pd.DataFrame, which: NDArray[np.int64]) -> Any:
    """``,"memory_kind":"..."`` of each entry ``which`` whose premise gives a kind, else
    the empty string: a premise without a kind is written as before kinds were read."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "memory_kind" not in entries.columns:
        return ""
    col = entries["memory_kind"]
    codes = col.cat.codes.to_numpy().astype(np.int64)[which]
    kinds = pc.take(pa.array(col.cat.categories.array, type=pa.string()),
                    pa.array(codes, mask=codes < 0, type=pa.int64()))
    return pc.if_else(pc.is_valid(kinds), _concat(',"memory_kind":', _quoted(kinds)), "")


def _values_at(col: pd.Categorical, rows: NDArray[np.int64]) -> NDArray[np.object_]:
    """``col[rows]`` as objects (None where missing), made from those rows' categories alone
    (a log's action ids are about as many as its records)."""
    codes = np.asarray(col.codes[rows], dtype=np.int64)
    out = np.full(codes.size, None, dtype=object)
    have = codes >= 0
    out[have] = col.categories.take(codes[have]).to_numpy(dtype=object)
    return out


def _grouped(items: Any, counts: NDArray[np.int64], sep: str = ",") -> Any:
    """``items`` (in group order) joined by ``sep`` within consecutive groups of ``counts``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()),
                                          items.cast(pa.large_string()))
    return pc.binary_join(lists, pa.scalar(sep, pa.large_string())).cast(pa.string())


#: Premise entries whose actions are checked at once (:func:`_action_checks`): the per-entry
#: arrays of the checks are a window's, not the whole log's (twenty of 25 M entries each
#: held 3.6 GB beside the join at 10 M lines).
_CHECK_ROWS: Final = 1 << 20


def _record_windows(e_rec: NDArray[np.int64], o_rec: NDArray[np.int64], n_rec: int,
                    rows: int) -> list[tuple[slice, slice]]:
    """Consecutive windows of whole records, of about ``rows`` entries each: the span of
    each in the entries and in the offers (both in record order)."""
    if e_rec.size > 1 and bool((e_rec[1:] < e_rec[:-1]).any()) \
            or o_rec.size > 1 and bool((o_rec[1:] < o_rec[:-1]).any()):
        raise RuntimeError("premise entries and offered verifiers must come in record order")
    cuts = np.unique(np.concatenate([[0], e_rec[::rows], [n_rec]]).astype(np.int64))
    e_at, o_at = np.searchsorted(e_rec, cuts), np.searchsorted(o_rec, cuts)
    return [(slice(int(e_at[i]), int(e_at[i + 1])), slice(int(o_at[i]), int(o_at[i + 1])))
            for i in range(cuts.size - 1)]


@dataclass
class _Checks:
    """What :func:`_action_checks` found, per candidate action."""

    twice: NDArray[np.bool_]  # a premise key given twice
    bad_verifier: NDArray[np.bool_]  # an offered verifier refused
    worst: NDArray[np.int64]  # the first premise reason (``_LABELLED``: all hard-labelled)
    declared: dict[str, dict[float, int]]  # offers per verifier id and declared reliability


def _action_checks(log: Any, state: Mapping[str, Any], pos: NDArray[np.int64], n_act: int,
                   rows: int = _CHECK_ROWS) -> _Checks:
    """The premise and verifier checks of the candidate actions (``pos``: the action of each
    record, -1 for a record that is not an action's last), window by window of records:
    every check reads one action's entries and offers, and an action is one record."""
    import pyarrow as pa
    import pyarrow.compute as pc

    uses = state["uses"]
    hard, soft, reason = state["hard"], state["soft"], state["reason"]
    entries, offers = log.entries, log.offers
    e_rec = np.asarray(entries["rec"].to_numpy(), dtype=np.int64)
    o_rec = np.asarray(offers.column("rec").to_numpy(), dtype=np.int64)
    pid_codes = entries["premise_id"].cat.codes.to_numpy()
    n_pid = len(entries["premise_id"].cat.categories) + 1
    pid_index = pd.Index(entries["premise_id"].cat.categories)
    n_pk = uses.n_pkey_codes + 1
    out = _Checks(twice=np.zeros(n_act, dtype=bool), bad_verifier=np.zeros(n_act, dtype=bool),
                  worst=np.full(n_act, _LABELLED, dtype=np.int64), declared={})
    for es, os_ in _record_windows(e_rec, o_rec, int(pos.size), rows):
        ent = es.start + np.flatnonzero(pos[e_rec[es]] >= 0)
        e_act = pos[e_rec[ent]]
        key = e_act * n_pk + uses.entry_pkey[ent]
        out.twice[e_act[pd.Series(key).duplicated(keep=False).to_numpy()]] = True
        # the first premise reason of each action
        e_use = uses.use_of(ent)
        prem_why = np.where(hard[e_use], _LABELLED,
                            np.where(soft[e_use], _SOFT_ONLY,
                                     _PREMISE_CODE[np.clip(reason[e_use], 0, None)]))
        np.minimum.at(out.worst, e_act, prem_why)
        # offered verifiers
        orows = os_.start + np.flatnonzero(pos[o_rec[os_]] >= 0)
        if not orows.size:
            continue
        off = offers.take(pa.array(orows, type=pa.int64()))
        o_act = pos[o_rec[orows]]
        o_id = off.column("id").combine_chunks()
        o_cost = off.column("cost").to_numpy()
        o_rel = off.column("reliability").to_numpy()
        resolves = off.column("resolves").combine_chunks()
        with np.errstate(invalid="ignore"):
            o_bad = (pc.is_null(o_id).to_numpy(zero_copy_only=False)
                     | pc.is_null(resolves).to_numpy(zero_copy_only=False)
                     | ~(np.isfinite(o_cost) & (o_cost >= 0))
                     | ~(np.isfinite(o_rel) & (o_rel > 0.5) & (o_rel <= 1.0)))
        ids = pd.Series(o_id.to_pandas(), dtype="str")
        id_codes = pd.factorize(ids)[0].astype(np.int64)
        o_bad |= pd.Series(o_act * (int(id_codes.max(initial=-1)) + 2) + id_codes
                           ).duplicated(keep=False).to_numpy()
        # every premise a verifier resolves must be one of the action's premise ids
        flat = pc.list_flatten(resolves)
        parent = pc.list_parent_indices(resolves).to_numpy(zero_copy_only=False) \
            .astype(np.int64)
        r_code = pid_index.get_indexer(pd.Index(flat.to_pandas(), dtype="str")) \
            if len(flat) else np.zeros(0, np.int64)
        known = np.isin(o_act[parent] * n_pid + r_code,
                        e_act * n_pid + pid_codes[ent].astype(np.int64)) & (r_code >= 0)
        o_bad[parent[~known]] = True
        out.bad_verifier[o_act[o_bad]] = True
        counts = pd.DataFrame({"v": ids, "r": o_rel}).dropna().groupby(["v", "r"]).size()
        for k, n in counts.items():
            vid, r = cast(tuple[Any, Any], k)
            seen = out.declared.setdefault(str(vid), {})
            seen[float(r)] = seen.get(float(r), 0) + int(n)
    # the declared values in the order one pass over every offer gives them
    out.declared = {v: dict(sorted(by_r.items())) for v, by_r in sorted(out.declared.items())}
    return out


def build_episodes(files: list[str], log: Any, state: Mapping[str, Any], min_verifier_calls: int,
                   verifiers: dict[str, dict[str, Any]] | None = None,
                   ) -> tuple[Any, EpisodeReport, dict[str, dict[str, Any]], list[str | None]]:
    """The episode lines (in record order; ``state["records"]`` receives the record index of
    each, when ``state`` is a dict), the report, the verifier reliabilities (``verifiers``
    when given: the Spark engine computes them over all actions and builds the episodes of
    each group of actions with this function) and the action of each episode."""
    import pyarrow as pa
    import pyarrow.compute as pc

    uses = state["uses"]
    hard, label = state["hard"], state["label"]
    recs = log.records
    n_rec = int(recs["n"].size)
    rec_idx = np.arange(n_rec, dtype=np.int64)

    # -- the actions and the last record of each ------------------------------------------------
    acodes = np.asarray(recs["action_id"].codes, dtype=np.int64)
    named = acodes >= 0
    last = np.full(len(recs["action_id"].categories), -1, dtype=np.int64)
    np.maximum.at(last, acodes[named], rec_idx[named])
    chosen = np.sort(np.concatenate([last[last >= 0], rec_idx[~named]]))
    del acodes, named, last, rec_idx
    n_act = int(chosen.size)
    pos = np.full(n_rec, -1, dtype=np.int64)
    pos[chosen] = np.arange(n_act)
    checks = _action_checks(log, state, pos, n_act, _CHECK_ROWS)

    # -- each action's reason, the first that applies ------------------------------------------
    why = np.full(n_act, _LABELLED, dtype=np.int64)

    def mark(mask: NDArray[np.bool_], code: int) -> None:
        why[mask & (why == _LABELLED)] = code

    n_prem = recs["n"][chosen]
    theta, kappa = recs["theta"][chosen], recs["kappa"][chosen]
    mark(n_prem == 0, _NO_PREMISES)
    with np.errstate(invalid="ignore"):
        mark(~(np.isfinite(theta) & (theta > 0) & np.isfinite(kappa) & (kappa > 0)),
             _BAD_ACTION)
    mark(checks.twice, _BAD_ACTION)
    mark(~recs["has_verifiers"][chosen], _NO_VERIFIERS)
    mark(checks.bad_verifier, _BAD_VERIFIER)
    why = np.where(why == _LABELLED, checks.worst, why)
    ok = why == _LABELLED
    report = EpisodeReport(
        actions_read=n_act, episodes=int(ok.sum()),
        unlabelled={r: int((why == i).sum()) for i, r in enumerate(ACTION_REASONS)},
        min_verifier_calls=min_verifier_calls)
    report.check()
    if verifiers is None:
        verifiers = verifier_reliabilities(state["answers"], hard, label,
                                           min_verifier_calls=min_verifier_calls,
                                           declared_offers=checks.declared)

    # -- the episodes' entries and offers ------------------------------------------------------
    entries, offers = log.entries, log.offers
    crec = chosen[ok]
    ok_rec = np.zeros(n_rec, dtype=bool)
    ok_rec[crec] = True
    e_rec = entries["rec"].to_numpy()
    pe = np.flatnonzero(ok_rec[e_rec])
    pe_act = pos[e_rec[pe]]
    pu = uses.use_of(pe)
    o_rec = offers.column("rec").to_numpy()
    vrows = np.flatnonzero(ok_rec[o_rec]) if o_rec.size else np.zeros(0, np.int64)
    del ok_rec
    off = offers.take(pa.array(vrows, type=pa.int64()))
    v_act = pos[o_rec[vrows]]
    o_cost = off.column("cost").to_numpy()
    o_rel = off.column("reliability").to_numpy()
    resolves = off.column("resolves").combine_chunks() if off.num_rows \
        else pa.array([], pa.list_(pa.string()))

    # -- the episode lines -----------------------------------------------------------------------
    spilled = getattr(log, "spilled", None)

    def floats(name: str) -> NDArray[np.float64]:
        return _floats_at(entries, name, pe, spilled, None)

    premise_json = _concat(
        '{"id":', _quoted(pa.array(uses.premise_ids(pu), type=pa.string())),
        ',"claim_id":', _quoted(pa.array(entries["claim_id"].array[pe], type=pa.string())),
        ',"recency_hours":', _numbers(floats("recency_hours")),
        ',"source_trust_score":', _numbers(floats("source_trust_score")),
        ',"model_confidence":', _numbers(floats("model_confidence")),
        ',"contradiction_flag":', _bools(floats("contradiction_flag") > 0.5),
        _kind_fields(entries, pe), ',"violated":', _bools(label[pu]), "}")
    okpos = np.cumsum(ok) - 1
    n_ok = int(ok.sum())
    premises = _grouped(premise_json, np.bincount(okpos[pe_act], minlength=n_ok))
    res_json = _grouped(_quoted(pc.list_flatten(resolves)),
                        pc.list_value_length(resolves).to_numpy(zero_copy_only=False)
                        .astype(np.int64))
    vids = off.column("id").combine_chunks() if off.num_rows else pa.array([], pa.string())
    rel = o_rel.copy()
    for vid, rep in verifiers.items():
        if rep["used_in_episodes"] == "estimate":
            rel[pc.equal(vids, vid).to_numpy(zero_copy_only=False)] = rep["reliability_used"]
    verifier_json = _concat('{"id":', _quoted(vids), ',"resolves_premise_ids":[', res_json,
                            '],"execution_cost":', _numbers(o_cost),
                            ',"symmetric_reliability":', _numbers(rel), "}")
    verifiers_list = _grouped(verifier_json, np.bincount(okpos[v_act], minlength=n_ok))
    if isinstance(state, dict):
        state["records"] = crec
    files_q = [json.dumps(f, ensure_ascii=False) for f in files]
    line = recs["line"][crec]
    file_idx = recs["file"][crec]
    instance = _values_at(recs["action_id"], crec)
    unnamed = pd.isna(instance)
    instance[unnamed] = [f"{files[int(f)]}:{int(n)}" for f, n in
                         zip(file_idx[unnamed], line[unnamed], strict=True)]
    family = _values_at(recs["tool_name"], crec)
    family[pd.isna(family)] = "logged"
    lines = _concat(
        '{"instance_id":', _quoted(pa.array(instance.tolist(), type=pa.string())),
        ',"family":', _quoted(pa.array(family.tolist(), type=pa.string())),
        ',"tool_name":', _quoted(pa.array(family.tolist(), type=pa.string())),
        ',"impact_cost_theta":', _numbers(theta[ok]),
        ',"abstention_cost_kappa":', _numbers(kappa[ok]),
        ',"premises":[', premises, '],"verifiers":[', verifiers_list,
        '],"decision_file":', pc.take(pa.array(files_q, type=pa.string()),
                                      pa.array(file_idx, type=pa.int64())),
        ',"decision_line":', _numbers(line.astype(np.float64)), "}")
    names: list[str | None] = [None if u else str(a) for a, u in
                               zip(instance.tolist(), unnamed.tolist(), strict=True)]
    return lines, report, verifiers, names


def write_episodes_jsonl(lines: Any, path: PathLike) -> None:
    """Write episode lines (a pyarrow string array, or an iterable of them in order) as
    JSONL, one per line."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [lines] if isinstance(lines, (pa.Array, pa.ChunkedArray)) else lines
    with open(path, "wb") as fh:
        for part in parts:
            if isinstance(part, pa.ChunkedArray):
                part = part.combine_chunks()
            if len(part):
                whole = pc.binary_join(pa.LargeListArray.from_arrays(
                    pa.array([0, len(part)], type=pa.int64()), part.cast(pa.large_string())),
                    pa.scalar("\n", pa.large_string()))[0].as_py()
                fh.write(whole.encode("utf-8") + b"\n")
