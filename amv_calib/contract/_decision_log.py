"""The decision log's format: field names and their aliases, the line encoding, the reader.

Standard library only (and the contract's own strict-JSON and regular-file rules): the
runtime gate writes records in this format (:mod:`amv_calib.gate._decision_log` holds its
writer) and training reads them (``amv-calib label``, the monitor) without importing the
gate.

Format
------
One JSON object per line, UTF-8, ``\\n``-terminated, in the order the decisions were made::

    {"time": "2026-12-02T09:14:03.512204Z", "action_id": "tx-1", "tool_name": "bank_transfer",
     "theta": 120.0, "kappa": 4.0,
     "premises": [{"id": "p1", "claim_id": "iban-42", "recency_hours": 310.0,
                   "source_trust_score": 0.8, "model_confidence": 0.93,
                   "contradiction_flag": false, "p": 0.041}],
     "calibrator": {"name": "amv-guard", "version": "3"}, "regime": "VERIFY",
     "verifier": "bank-api", "voi": 0.8, "reason": "...", "planner": "lookahead", "mode": "amv",
     "verifiers": [{"id": "bank-api", "resolves_premise_ids": ["p1"],
                    "execution_cost": 0.2, "symmetric_reliability": 0.95}],
     "verifier_calls": [{"verifier": "bank-api", "signals": {"p1": true},
                         "cost": 0.2, "reliability": 0.95}]}

A premise carries ``memory_kind`` when the gate was given one (the kind of memory the claim
is), and ``memory_kind_evaluated_as`` when a calibrator with kinds computed its ``p``: the kind
of its vocabulary it used, ``"other"`` for an absent kind or one outside the vocabulary.
Records without kinds lack both fields.

``verifiers`` lists every verifier offered to the gate for the action, as declared (cost,
symmetric reliability, resolved premises); logs written before it was added lack the field
and stay readable (``amv-calib label`` then makes no episode of the action, reason
``verifiers_not_logged``). ``signals`` maps a premise id to ``true`` when the verifier
confirmed the premise valid and ``false`` when it reported it violated. Non-finite numbers
(a VOI of ``-inf`` when there is no verifier) are written as ``null``, because JSON has no
infinity.

Every record starts with its ``time`` field (``{"time":``, :data:`RECORD_START`), which lets
the reader find a record again inside a line that holds the fragment of a failed write first
(how the writer keeps fragments on lines of their own is in its module).

Reading
-------
:func:`read_decision_log` yields one dict per line. A torn **last** line (no ``\\n`` and not
valid JSON) is skipped with a :class:`DecisionLogWarning`. A corrupt line elsewhere (not a
JSON object, or one giving a key twice) means the file was damaged or edited, or is the
fragment of an earlier crash: by default it raises
:class:`~amv_calib.exceptions.DataContractError` naming the file and line; with
``on_corrupt="skip"`` it is skipped with a warning and counted in :class:`LogReadStats`. A
corrupt line that holds a fragment followed by a whole record (written glued on by a writer
that did not check the tail) is resynchronised: the record is read from its ``{"time":``
on, and the fragment before it is treated as a corrupt line would be (raised, or skipped and
counted as a fragment).
Blank lines are skipped and counted. Records are normalised to the snake_case names above;
the seed TypeScript gate's camelCase names (``actionId``, ``toolName``, ``impactCostTheta``,
``abstentionCostKappa``, ``claimId``, ``calibratedViolationProbability``, ...) are accepted.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from amv_calib.contract._files import open_regular
from amv_calib.contract._json import loads_line
from amv_calib.exceptions import DataContractError, check_choice

__all__ = [
    "DECISION_ALIASES",
    "PREMISE_ALIASES",
    "VERIFIER_CALL_ALIASES",
    "DecisionLogWarning",
    "OFFERED_VERIFIER_ALIASES",
    "LogReadStats",
    "decision_verifier_calls",
    "encode_record",
    "normalize_decision",
    "parse_decision_line",
    "read_decision_log",
    "utc_now_iso",
]

#: Canonical top-level field -> accepted spellings (canonical first).
DECISION_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "time": ("time", "timestamp", "ts", "decidedAt", "decided_at"),
    "action_id": ("action_id", "actionId"),
    "tool_name": ("tool_name", "toolName"),
    "theta": ("theta", "impactCostTheta", "impact_cost_theta"),
    "kappa": ("kappa", "abstentionCostKappa", "abstention_cost_kappa"),
    "premises": ("premises",),
    "calibrator": ("calibrator",),
    "regime": ("regime",),
    "verifier": ("verifier", "selectedVerifier", "selected_verifier"),
    "voi": ("voi", "maxVOI", "maxVoi", "max_voi"),
    "reason": ("reason",),
    "planner": ("planner",),
    "mode": ("mode",),
    "verifier_calls": ("verifier_calls", "verifierCalls"),
    "verifiers": ("verifiers", "offeredVerifiers", "offered_verifiers"),
}

#: Canonical premise field -> accepted spellings. A premise may also carry the whole claim
#: under ``claim`` (the seed's ``MemoryClaim``); its fields fill what the premise lacks.
PREMISE_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "id": ("id", "premise_id", "premiseId"),
    "claim_id": ("claim_id", "claimId"),
    "recency_hours": ("recency_hours", "recencyHours"),
    "source_trust_score": ("source_trust_score", "sourceTrustScore"),
    "model_confidence": ("model_confidence", "modelConfidence"),
    "contradiction_flag": ("contradiction_flag", "contradictionFlag"),
    "p": ("p", "calibratedViolationProbability", "calibrated_violation_probability"),
    "memory_kind": ("memory_kind", "memoryKind"),
    "memory_kind_evaluated_as": ("memory_kind_evaluated_as", "memoryKindEvaluatedAs"),
}

#: Canonical verifier-call field -> accepted spellings.
VERIFIER_CALL_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "verifier": ("verifier", "verifier_id", "verifierId", "id"),
    "signals": ("signals",),
    "cost": ("cost", "execution_cost", "executionCost"),
    "reliability": ("reliability", "symmetric_reliability", "symmetricReliability"),
}

#: Canonical field of an offered verifier -> accepted spellings (the seed's ``Verifier``).
OFFERED_VERIFIER_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "id": ("id", "verifier_id", "verifierId"),
    "resolves_premise_ids": ("resolves_premise_ids", "resolvesPremiseIds"),
    "execution_cost": ("execution_cost", "executionCost", "cost"),
    "symmetric_reliability": ("symmetric_reliability", "symmetricReliability", "reliability"),
}

_CLAIM_FEATURE_KEYS: Final = ("recency_hours", "source_trust_score", "model_confidence",
                              "contradiction_flag")


class DecisionLogWarning(UserWarning):
    """A decision-log line was skipped (torn last line, or corrupt with ``on_corrupt="skip"``)."""


def utc_now_iso() -> str:
    """The current time as ISO-8601 UTC with microseconds and a ``Z`` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays (np.bool_, np.int64, ndarray) expose .tolist() without our
    # importing numpy; datetimes become ISO text.
    if isinstance(obj, datetime):
        return obj.isoformat()
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"decision record field of type {type(obj).__name__} is not JSON-serialisable")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One decision record as a compact UTF-8 JSON line ending in ``\\n``.

    Non-finite floats become ``null``; numpy scalars are converted; keys keep their order.
    """
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                          default=_json_default)
    except ValueError:
        # Rare path (a NaN or an infinity somewhere): sanitise, then encode again.
        text = json.dumps(_finite(json.loads(json.dumps(record, default=_json_default))),
                          ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text + "\n").encode("utf-8")


#: How every record the writer writes begins (the reader resynchronises on it).
RECORD_START: Final = b'{"time":'
#: At most this many record starts are tried inside one corrupt line.
_MAX_RESYNC: Final = 16


@dataclass(kw_only=True)
class LogReadStats:
    """What :func:`read_decision_log` saw in one file.

    ``lines == records + blank + torn + corrupt`` always (a line holding a fragment and then
    a record counts as a record); ``fragments`` counts the fragments skipped before a record
    on the same line; ``corrupt_lines`` lists the 1-based numbers of skipped corrupt lines,
    of the torn last line and of the lines whose leading fragment was skipped.
    """

    lines: int = 0
    records: int = 0
    blank: int = 0
    torn: int = 0
    corrupt: int = 0
    fragments: int = 0
    corrupt_lines: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form for reports."""
        return {"lines": self.lines, "records": self.records, "blank": self.blank,
                "torn_last_line": self.torn, "corrupt": self.corrupt,
                "fragments": self.fragments, "corrupt_lines": list(self.corrupt_lines)}


def _pick(data: Mapping[str, Any], names: tuple[str, ...]) -> tuple[bool, Any]:
    # The first spelling with a non-null value wins; an explicit null is kept as null.
    found = False
    for name in names:
        if name in data:
            if data[name] is not None:
                return True, data[name]
            found = True
    return found, None


def _names(aliases: Mapping[str, tuple[str, ...]]) -> tuple[frozenset[str], frozenset[str]]:
    """(every spelling, the spellings that stand for a field of another name) of an alias
    map. A name can be both canonical and another field's alias (a nested claim's ``id``
    is its ``claim_id``): a record using it must be renamed too."""
    every = frozenset(n for names in aliases.values() for n in names)
    return every, frozenset(n for canonical, names in aliases.items() for n in names
                            if n != canonical)


_CLAIM_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    **PREMISE_ALIASES, "claim_id": ("claim_id", "claimId", "id")}
_NAMES: Final = {id(a): _names(a) for a in (DECISION_ALIASES, PREMISE_ALIASES,
                                           VERIFIER_CALL_ALIASES, _CLAIM_ALIASES,
                                           OFFERED_VERIFIER_ALIASES)}


def _normalize_fields(data: Mapping[str, Any],
                      aliases: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    known, alias_only = _NAMES.get(id(aliases)) or _names(aliases)
    if alias_only.isdisjoint(data.keys()):
        return dict(data)  # already canonical (what this package's gate writes)
    out: dict[str, Any] = {}
    for canonical, names in aliases.items():
        found, value = _pick(data, names)
        if found:
            out[canonical] = value
    for key, value in data.items():
        if key not in known:
            out[key] = value
    return out


def _normalize_premise(premise: Any) -> Any:
    if not isinstance(premise, Mapping):
        return premise
    out = _normalize_fields(premise, PREMISE_ALIASES)
    claim = out.pop("claim", None)
    if isinstance(claim, Mapping):
        c = _normalize_fields(claim, _CLAIM_ALIASES)
        for key in ("claim_id", *_CLAIM_FEATURE_KEYS, "memory_kind"):
            if out.get(key) is None and c.get(key) is not None:
                out[key] = c[key]
        for key in ("statement", "source"):
            if out.get(key) is None and claim.get(key) is not None:
                out[key] = claim[key]
    return out


def normalize_decision(record: Mapping[str, Any]) -> dict[str, Any]:
    """Rename a decision record's fields to the canonical snake_case names.

    Unknown fields are kept as they are. ``selectedVerifier`` given as a verifier object
    becomes its ``id``; a ``calibrator`` given as ``"name@version"`` becomes an object.
    Values are not validated here (the label join does that, per field and line).
    """
    out = _normalize_fields(record, DECISION_ALIASES)
    verifier = out.get("verifier")
    if isinstance(verifier, Mapping):
        out["verifier"] = verifier.get("id")
    calibrator = out.get("calibrator")
    if isinstance(calibrator, str):
        name, _, version = calibrator.partition("@")
        out["calibrator"] = {"name": name, "version": version or None}
    premises = out.get("premises")
    if isinstance(premises, list):
        out["premises"] = [_normalize_premise(p) for p in premises]
    calls = out.get("verifier_calls")
    if isinstance(calls, list):
        out["verifier_calls"] = _normalize_calls(calls)
    offered = out.get("verifiers")
    if isinstance(offered, list):
        out["verifiers"] = [
            _normalize_fields(v, OFFERED_VERIFIER_ALIASES) if isinstance(v, Mapping) else v
            for v in offered
        ]
    return out


def _normalize_calls(calls: list[Any]) -> list[Any]:
    return [_normalize_fields(c, VERIFIER_CALL_ALIASES) if isinstance(c, Mapping) else c
            for c in calls]


def decision_verifier_calls(record: Mapping[str, Any]) -> Any:
    """``normalize_decision(record).get("verifier_calls")``, without normalising the rest.

    The label join reads only the verifier calls of the lines that have them; normalising
    each record's premises too cost it as much as parsing the line.
    """
    _, calls = _pick(record, DECISION_ALIASES["verifier_calls"])
    return _normalize_calls(calls) if isinstance(calls, list) else calls


def _json_record(raw: bytes) -> dict[str, Any]:
    obj = loads_line(raw)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _resync(raw: bytes) -> tuple[int, dict[str, Any]] | None:
    """``(offset, record)`` of the first record start after the beginning of a corrupt
    line from which the rest of the line is one JSON object; None if there is none."""
    at = raw.find(RECORD_START, 1)
    for _ in range(_MAX_RESYNC):
        if at < 0:
            return None
        try:
            return at, _json_record(raw[at:])
        except (ValueError, UnicodeDecodeError, RecursionError):
            at = raw.find(RECORD_START, at + 1)
    return None


def parse_decision_line(raw: bytes, *, name: str, lineno: int, last: bool,
                        on_corrupt: Literal["raise", "skip"] | str, stats: LogReadStats,
                        stacklevel: int = 2) -> dict[str, Any] | None:
    """One non-blank line of a decision log as a JSON object, or None when it is skipped.

    A line that is not a JSON object (or gives a key twice) but holds a whole record after a
    fragment (from a ``{"time":``) yields that record; the fragment is raised as a corrupt
    line would be, or with ``on_corrupt="skip"`` skipped with a warning and counted in
    ``stats.fragments``. Otherwise such a line is *torn* when it is the file's unterminated
    last line (``last``; a writer was cut off): skipped with a :class:`DecisionLogWarning`,
    always; any other is *corrupt*: :class:`DataContractError` naming the file and line with
    ``on_corrupt="raise"``, else skipped with a warning. Both are counted in ``stats``.
    """
    try:
        return _json_record(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        found = _resync(raw)
        if found is not None:
            at, obj = found
            if on_corrupt == "raise":
                raise DataContractError(
                    f"{name}: line {lineno} starts with {at} bytes that are not a record (the "
                    f"fragment of a failed write?) before a whole record: pass "
                    f"on_corrupt='skip' (CLI: --skip-corrupt) to read the record and skip "
                    f"the fragment") from exc
            stats.fragments += 1
            stats.corrupt_lines.append(lineno)
            warnings.warn(f"{name}: line {lineno}: skipped a {at}-byte fragment before the "
                          f"record it holds ({exc})", DecisionLogWarning,
                          stacklevel=stacklevel + 1)
            return obj
        stats.corrupt_lines.append(lineno)
        if last:
            stats.torn += 1
            warnings.warn(f"{name}: skipped torn last line {lineno} ({len(raw)} bytes without "
                          f"a newline; a writer was interrupted)", DecisionLogWarning,
                          stacklevel=stacklevel + 1)
            return None
        if on_corrupt == "raise":
            stats.corrupt_lines.pop()
            raise DataContractError(
                f"{name}: line {lineno} is not a JSON object ({exc}); a damaged or "
                f"edited log, or the fragment of a crashed writer: pass "
                f"on_corrupt='skip' (CLI: --skip-corrupt) to skip such lines"
            ) from exc
        stats.corrupt += 1
        warnings.warn(f"{name}: skipped corrupt line {lineno} ({exc})", DecisionLogWarning,
                      stacklevel=stacklevel + 1)
        return None


def read_decision_log(
    path: str | os.PathLike[str],
    *,
    on_corrupt: Literal["raise", "skip"] = "raise",
    normalize: bool = True,
    stats: LogReadStats | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield the decision records of a JSON-lines log, in file order.

    Parameters
    ----------
    path : str or os.PathLike
        The log file.
    on_corrupt : {"raise", "skip"}, default "raise"
        What to do with a line that is not a JSON object and is not the torn last line:
        raise :class:`DataContractError` (naming the file and 1-based line), or skip it
        with a :class:`DecisionLogWarning`. A torn last line is always skipped with a warning.
    normalize : bool, default True
        Apply :func:`normalize_decision` (camelCase aliases -> snake_case).
    stats : LogReadStats, optional
        Filled in while reading (counts of records, blank, torn and corrupt lines).
    """
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"))
    st = stats if stats is not None else LogReadStats()
    name = os.fspath(path)
    with open_regular(name, what="decision log") as fh:
        lineno = 0
        for raw in fh:
            lineno += 1
            st.lines += 1
            if not raw.strip():
                st.blank += 1
                continue
            obj = parse_decision_line(raw, name=name, lineno=lineno,
                                      last=not raw.endswith(b"\n"), on_corrupt=on_corrupt,
                                      stats=st, stacklevel=3)
            if obj is None:
                continue
            st.records += 1
            yield normalize_decision(obj) if normalize else obj
