"""The plain-Python reading of a decision record's values: the line parser's rules for ids,
numbers, flags and memory kinds (the reader of a block that the compiled extraction does not
take, :mod:`amv_calib.claims._logread`), and the column helpers both readers share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.contract import premise_memory_kind

_TRUE: Final = frozenset({"true", "t", "yes", "y", "1", "1.0"})
_FALSE: Final = frozenset({"false", "f", "no", "n", "0", "0.0"})

_REC_STR: Final = ("action_id", "tool_name", "calibrator", "regime")
_REC_NUM: Final = ("theta", "kappa", "has_verifiers")
_OFFER_COLUMNS: Final = ("rec", "id", "resolves", "cost", "reliability")


def _offers_table(cols: Mapping[str, Any]) -> Any:
    """The offered verifiers of a block as a pyarrow table (columns :data:`_OFFER_COLUMNS`):
    ``rec`` and ``id`` (ints, strings), ``resolves`` (lists of strings), ``cost`` and
    ``reliability`` (floats; sequences or Arrow arrays)."""
    import pyarrow as pa

    def column(values: Any, typ: Any) -> Any:
        return values if isinstance(values, pa.Array) else pa.array(values, type=typ)

    return pa.table({
        "rec": pa.array(np.asarray(cols["rec"], dtype=np.int64), type=pa.int64()),
        "id": column(cols["id"], pa.string()),
        "resolves": column(cols["resolves"], pa.list_(pa.string())),
        "cost": pa.array(np.asarray(cols["cost"], dtype=np.float64), type=pa.float64()),
        "reliability": pa.array(np.asarray(cols["reliability"], dtype=np.float64),
                                type=pa.float64()),
    })


def _no_empty(arr: Any) -> Any:
    """Empty strings as nulls, as the line parser reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pc.fill_null(pc.equal(arr, ""), False)
    return pc.if_else(empty, pa.scalar(None, pa.string()), arr)


def _number_column(values: Any) -> NDArray[np.float64]:
    """``values`` (a sequence or array of floats) as float64, every zero ``+0.0``.

    ``-0`` is one value on both read paths: the compiled extraction reads the text ``-0``
    as ``-0.0``, Python's ``json`` as the integer 0; adding ``+0.0`` maps ``-0.0`` to
    ``0.0`` (IEEE 754) and leaves every other value as it is."""
    out: NDArray[np.float64] = np.asarray(values, dtype=np.float64) + 0.0
    return out


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
    try:
        return float(v)
    except OverflowError:  # an integer out of float range: +-inf, as pyarrow reads it
        return math.inf if v > 0 else -math.inf


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


def entry_kind(premise: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(kind, why refused)`` of a premise entry of a decision record (as parsed): the kind
    the contract's rule (:func:`~amv_calib.contract.premise_memory_kind`) reads from the
    premise, else from its ``claim`` (whose fields fill what the premise lacks, as
    :func:`~amv_calib.contract.normalize_decision` fills them); the reason names the field
    and the value. Both None: no kind is given."""
    claim = premise.get("claim")
    for where, obj in (("", premise), ("claim.", claim)):
        if not isinstance(obj, Mapping):
            continue
        try:
            kind = premise_memory_kind(obj)
        except ValueError as exc:
            return None, f"{where}{exc}"
        if kind is not None:
            return kind, None
    return None, None


def _kind_columns(arrays: Sequence[Any]) -> tuple[Any, Any] | None:
    """:data:`KIND_COLUMNS` of a block's entries from the string arrays of the premises'
    ``memory_kind``, ``memoryKind`` and their claims' (Arrow; empty strings as given), by
    :func:`entry_kind` run once per distinct combination; None when none gives a kind."""
    import pyarrow as pa

    n = len(arrays[0])
    if all(a.null_count == n for a in arrays):
        return None
    codes, words = [], []
    for a in arrays:
        enc = a.dictionary_encode()
        codes.append(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64))
        words.append(enc.dictionary.to_pylist())
    sizes = [len(w) + 1 for w in words]
    if math.prod(sizes) < 1 << 62:  # one int64 key per combination: hashed, not sorted
        key = np.zeros(n, dtype=np.int64)
        for c, size in zip(codes, sizes, strict=True):
            key = key * size + (c + 1)
        inverse = pd.factorize(key)[0]
        combos = np.stack(codes, axis=1)[np.unique(inverse, return_index=True)[1]]
    else:  # (each value distinct: never seen)
        combos, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    verdicts = []
    for row in combos.tolist():
        ps, pc_, cs, cc = (None if c < 0 else w[c] for c, w in zip(row, words, strict=True))
        verdicts.append(entry_kind({"memory_kind": ps, "memoryKind": pc_,
                                    "claim": {"memory_kind": cs, "memoryKind": cc}}))
    take = pa.array(inverse.reshape(-1).astype(np.int64))
    return (pa.array([k for k, _ in verdicts], type=pa.string()).take(take),
            pa.array([r for _, r in verdicts], type=pa.string()).take(take))


def _signals_of(calls: Any, i: int, out: dict[str, list[Any]]) -> None:
    """Add the signals of record ``i``'s verifier calls (as :func:`decision_verifier_calls`
    gives them) to ``out``."""
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
