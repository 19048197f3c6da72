"""Episode replay: frozen action instances, common random numbers, baseline policies, metrics.

An *episode set* is the padded-array form of an episodes JSONL file (``docs/data.md``,
BRIEF "Episodes JSONL"). :func:`replay` runs one policy over it:

- verifier answers come from a counter-based random stream keyed by
  ``(seed, instance_id, verifier_id, premise_id, call_index)`` (:func:`answer_uniform`), so
  every policy that calls the same verifier on the same premise sees the same answer
  (common random numbers) and a replay is byte-identical for identical inputs;
- the gate policies step all active instances through :func:`~amv_calib.gate.evaluate_batch`
  together (sequential stopping): decide, draw the chosen verifiers' answers, update the
  posteriors, mark the verifier used, repeat until every instance stops or spends its budget;
- the metrics of the source paper are computed per instance and summarised with seeded
  bootstrap intervals, overall and per family (see :data:`METRICS`).

numpy and the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, Unpack, cast, get_args

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import (
    CLAIM_FEATURES,
    PortableCalibrator,
    canonical_name,
    loads_strict,
    open_regular,
    seed_prior_calibrator,
)
from amv_calib.exceptions import ConfigError, DataContractError

if TYPE_CHECKING:
    from amv_calib.gate import Gate


Policy = Literal[
    "always-proceed", "always-verify", "static", "seed", "myopic", "lookahead", "oracle"
]
POLICIES: Final[tuple[str, ...]] = get_args(Policy)
#: Row labels of the paper-style table.
POLICY_LABELS: Final[dict[str, str]] = {
    "always-proceed": "Always Proceed",
    "always-verify": "Always Verify",
    "static": "Static threshold",
    "seed": "Seed engine",
    "myopic": "AMV-Guard (myopic)",
    "lookahead": "AMV-Guard (lookahead)",
    "oracle": "Oracle",
}
#: The metrics, in table order; all are means over instances (rates as fractions).
METRICS: Final = (
    "gate_harmful",
    "verification_cost",
    "queries",
    "proceed_coverage",
    "abstention_rate",
    "total_loss",
)
#: Price of one unit of verifier cost in the evaluation's total loss (fixed for comparisons;
#: independent of the gate's own ``lambda_cost_scale``, which is a tuned knob).
LAMBDA_EVAL: Final = 1.0
#: Default ``tau`` of the static rule: verify a premise when its probability exceeds it.
DEFAULT_TAU: Final = 0.05

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]
U64Array = NDArray[np.uint64]

_MASK64: Final = (1 << 64) - 1
_GOLDEN: Final = 0x9E3779B97F4A7C15
_M1: Final = 0xBF58476D1CE4E5B9
_M2: Final = 0x94D049BB133111EB


# -- the counter-based answer stream ---------------------------------------------------------


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(),
                          "little")


def _mix_int(x: int) -> int:
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _mix(x: U64Array) -> U64Array:
    # splitmix64's finaliser; uint64 array arithmetic wraps modulo 2**64 silently.
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(_M1)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(_M2)
    return cast(U64Array, x ^ (x >> np.uint64(31)))


def _stream_key(inst: U64Array, pair: U64Array) -> U64Array:
    # key(i, v, j) = mix(h(instance_id) + phi * mix(h(verifier_id \x1f premise_id)))
    return _mix(inst + np.uint64(_GOLDEN) * _mix(pair))


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
        0 <= int(seed) <= _MASK64
    ):
        raise ValueError(f"seed={seed!r} must be an integer in [0, 2**64)")
    return int(seed)


def answer_uniform(
    seed: int, instance_id: str, verifier_id: str, premise_id: str, call_index: int
) -> float:
    """The uniform number behind one verifier answer, in plain Python.

    ``u = mix(mix(key XOR mix(seed + phi)) + (call_index + 1) * phi) / 2**64`` (top 53 bits)
    with ``key = mix(h(instance_id) + phi * mix(h(verifier_id \\x1f premise_id)))``, where
    ``h`` is the first 8 bytes (little-endian) of blake2b, ``mix`` is splitmix64's finaliser
    and ``phi = 0x9E3779B97F4A7C15`` (all modulo 2**64). The answer is correct iff ``u < r``.
    :func:`stream_uniform` is the vectorised twin.
    """
    s = _mix_int(_check_seed(seed) + _GOLDEN)
    key = _mix_int(
        _hash64(instance_id) + _GOLDEN * _mix_int(_hash64(f"{verifier_id}\x1f{premise_id}"))
    )
    x = _mix_int(key ^ s)
    x = _mix_int(x + (int(call_index) + 1) * _GOLDEN)
    return (x >> 11) * 2.0**-53


def stream_uniform(keys: U64Array, seed: int, call_index: IntArray | int) -> FloatArray:
    """Vectorised :func:`answer_uniform` from precomputed stream keys."""
    s = np.uint64(_mix_int(_check_seed(seed) + _GOLDEN))
    k = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    c = np.broadcast_to(np.asarray(call_index, dtype=np.uint64), k.shape)
    x = _mix(k ^ s)
    x = _mix(x + (c + np.uint64(1)) * np.uint64(_GOLDEN))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


# -- episodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EpisodeSet:
    """Episodes as padded arrays: ``n`` instances, ``m`` premise and ``V`` verifier slots.

    Premises and verifiers keep their file order; padding slots come last and are masked.
    ``features`` holds the raw claim features in :data:`~amv_calib.contract._schema.CLAIM_FEATURES`
    order; ``stream_key[i, v, j]`` keys the answer stream of verifier ``v`` on premise ``j``.
    """

    instance_id: tuple[str, ...]
    family: tuple[str, ...]
    tool_name: tuple[str, ...]
    theta: FloatArray
    kappa: FloatArray
    premise_ids: tuple[tuple[str, ...], ...]
    premise_mask: BoolArray
    features: FloatArray
    violated: BoolArray
    p_true: FloatArray
    verifier_ids: tuple[tuple[str, ...], ...]
    verifier_mask: BoolArray
    resolves: BoolArray
    cost: FloatArray
    reliability: FloatArray
    stream_key: U64Array

    def __len__(self) -> int:
        return len(self.instance_id)

    @property
    def n_premises(self) -> int:
        """Number of real premises over all instances."""
        return int(self.premise_mask.sum())

    @property
    def families(self) -> list[str]:
        """The distinct families, sorted."""
        return sorted(set(self.family))

    @property
    def any_violated(self) -> BoolArray:
        """Instances with at least one violated premise (the truth)."""
        return cast(BoolArray, np.any(self.violated & self.premise_mask, axis=1))

    def subset(self, index: Sequence[int] | IntArray | BoolArray) -> EpisodeSet:
        """The instances at ``index`` (integer positions or a boolean mask), same padding."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        pos = [int(i) for i in idx]

        def pick(t: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(t[i] for i in pos)

        return EpisodeSet(
            instance_id=pick(self.instance_id),
            family=pick(self.family),
            tool_name=pick(self.tool_name),
            theta=self.theta[idx],
            kappa=self.kappa[idx],
            premise_ids=pick(self.premise_ids),
            premise_mask=self.premise_mask[idx],
            features=self.features[idx],
            violated=self.violated[idx],
            p_true=self.p_true[idx],
            verifier_ids=pick(self.verifier_ids),
            verifier_mask=self.verifier_mask[idx],
            resolves=self.resolves[idx],
            cost=self.cost[idx],
            reliability=self.reliability[idx],
            stream_key=self.stream_key[idx],
        )

    def probabilities(self, calibrator: PortableCalibrator) -> FloatArray:
        """Violation probability of every premise slot through ``calibrator`` (0 in padding)."""
        out = np.zeros(self.premise_mask.shape, dtype=np.float64)
        if self.n_premises:
            out[self.premise_mask] = calibrator.predict(self.features[self.premise_mask])
        return out


def _err(row: int, msg: str) -> DataContractError:
    return DataContractError(f"episodes row {row}: {msg}")


def _owner(where: str) -> str:
    return f"{where[:-1]} " if where else ""


def _num(obj: Mapping[str, Any], key: str, row: int, where: str = "") -> float:
    if key not in obj:
        raise _err(row, f"{_owner(where)}lacks field {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise _err(row, f"{where}{key}={v!r} must be a finite number")
    return float(v)


def _flag(obj: Mapping[str, Any], key: str, row: int, where: str) -> bool:
    if key not in obj:
        raise _err(row, f"{_owner(where)}lacks field {key!r}")
    v = obj[key]
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise _err(row, f"{where}{key}={v!r} must be a boolean")


def _text(obj: Mapping[str, Any], key: str, row: int, where: str = "") -> str:
    if key not in obj:
        raise _err(row, f"{_owner(where)}lacks field {key!r}")
    v = obj[key]
    if not isinstance(v, str) or not v:
        raise _err(row, f"{where}{key}={v!r} must be a non-empty string")
    return v


def _canonical_premise(pr: Mapping[str, Any]) -> dict[str, Any]:
    # camelCase feature names (the seed's) are accepted; "id" is the premise's own id here,
    # not the claim-id alias it is in a claims table.
    out: dict[str, Any] = {}
    for k, v in pr.items():
        c = None if k == "id" else canonical_name(k)
        out[c if c in (*CLAIM_FEATURES, "violated", "p_true", "claim_id") else k] = v
    return out


@dataclass(frozen=True, kw_only=True)
class _Parsed:
    instance_id: str
    family: str
    tool_name: str
    theta: float
    kappa: float
    premise_ids: tuple[str, ...]
    features: list[tuple[float, float, float, float]]
    violated: list[bool]
    p_true: list[float]
    verifier_ids: tuple[str, ...]
    resolves: list[list[int]]
    cost: list[float]
    reliability: list[float]


def _parse(obj: Any, row: int) -> _Parsed:
    if not isinstance(obj, Mapping):
        raise _err(row, f"must be a JSON object, got {type(obj).__name__}")
    iid = _text(obj, "instance_id", row)
    family = _text(obj, "family", row)
    tool = obj.get("tool_name", "")
    if not isinstance(tool, str):
        raise _err(row, f"tool_name={tool!r} must be a string")
    theta = _num(obj, "impact_cost_theta", row)
    kappa = _num(obj, "abstention_cost_kappa", row)
    if theta <= 0:
        raise _err(row, f"impact_cost_theta={theta!r} must be > 0")
    if kappa <= 0:
        raise _err(row, f"abstention_cost_kappa={kappa!r} must be > 0")
    pids, feats, viol, ptrue = _parse_premises(obj.get("premises"), row)
    vids, res, costs, rels = _parse_verifiers(obj.get("verifiers", []), row, pids)
    return _Parsed(
        instance_id=iid, family=family, tool_name=tool, theta=theta, kappa=kappa,
        premise_ids=tuple(pids), features=feats, violated=viol, p_true=ptrue,
        verifier_ids=tuple(vids), resolves=res, cost=costs, reliability=rels,
    )


def _parse_premises(
    premises: Any, row: int
) -> tuple[list[str], list[tuple[float, float, float, float]], list[bool], list[float]]:
    """Ids, features, ``violated`` and ``p_true`` (NaN when absent) of an episode's premises."""
    if not isinstance(premises, list) or not premises:
        raise _err(row, f"premises={premises!r} must be a non-empty list")
    pids: list[str] = []
    feats: list[tuple[float, float, float, float]] = []
    viol: list[bool] = []
    ptrue: list[float] = []
    for j, raw in enumerate(premises):
        where = f"premises[{j}]."
        if not isinstance(raw, Mapping):
            raise _err(row, f"premises[{j}] must be an object")
        pr = _canonical_premise(raw)
        pid = _text(pr, "id", row, where)
        if pid in pids:
            raise _err(row, f"{where}id={pid!r} appears twice")
        pids.append(pid)
        rec = _num(pr, "recency_hours", row, where)
        trust = _num(pr, "source_trust_score", row, where)
        conf = _num(pr, "model_confidence", row, where)
        if rec < 0:
            raise _err(row, f"{where}recency_hours={rec!r} must be >= 0")
        for name, val in (("source_trust_score", trust), ("model_confidence", conf)):
            if not 0.0 <= val <= 1.0:
                raise _err(row, f"{where}{name}={val!r} must lie in [0, 1]")
        contra = _flag(pr, "contradiction_flag", row, where)
        feats.append((rec, trust, conf, 1.0 if contra else 0.0))
        viol.append(_flag(pr, "violated", row, where))
        if "p_true" in pr and pr["p_true"] is not None:
            pt = _num(pr, "p_true", row, where)
            if not 0.0 <= pt <= 1.0:
                raise _err(row, f"{where}p_true={pt!r} must lie in [0, 1]")
            ptrue.append(pt)
        else:
            ptrue.append(math.nan)
    return pids, feats, viol, ptrue


def _parse_verifiers(
    verifiers: Any, row: int, pids: list[str]
) -> tuple[list[str], list[list[int]], list[float], list[float]]:
    """Ids, resolved premise indexes (into ``pids``), costs and reliabilities of an
    episode's verifiers."""
    if not isinstance(verifiers, list):
        raise _err(row, f"verifiers={verifiers!r} must be a list")
    vids: list[str] = []
    res: list[list[int]] = []
    costs: list[float] = []
    rels: list[float] = []
    index = {p: j for j, p in enumerate(pids)}
    for v, raw in enumerate(verifiers):
        where = f"verifiers[{v}]."
        if not isinstance(raw, Mapping):
            raise _err(row, f"verifiers[{v}] must be an object")
        vid = _text(raw, "id", row, where)
        if vid in vids:
            raise _err(row, f"{where}id={vid!r} appears twice")
        vids.append(vid)
        names = raw.get("resolves_premise_ids", raw.get("resolvesPremiseIds"))
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise _err(row, f"{where}resolves_premise_ids={names!r} must be a list of ids")
        unknown = [x for x in names if x not in index]
        if unknown:
            raise _err(row, f"{where}resolves_premise_ids names unknown premise {unknown[0]!r}")
        res.append(sorted({index[x] for x in names}))
        c = _num(raw, "execution_cost", row, where)
        if c < 0:
            raise _err(row, f"{where}execution_cost={c!r} must be >= 0")
        r = _num(raw, "symmetric_reliability", row, where)
        if not 0.5 < r <= 1.0:
            raise _err(row, f"{where}symmetric_reliability={r!r} must lie in (0.5, 1]")
        costs.append(c)
        rels.append(r)
    return vids, res, costs, rels


def load_episodes(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read an episodes JSONL file (blank lines skipped) into a list of objects.

    Raises
    ------
    DataContractError
        The path is not a regular file (a FIFO, a device: refused before reading), or a
        line is not UTF-8 or not a JSON object (or gives a key twice), with its row number
        (1-based line number).
    """
    out: list[dict[str, Any]] = []
    p = Path(path)
    with open_regular(p, what="episodes file") as fh:
        for row, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _err(row, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            try:
                obj = loads_strict(line)
            except json.JSONDecodeError as exc:
                raise _err(row, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise _err(row, "JSON nested too deeply") from None
            except ValueError as exc:  # a key given twice
                raise _err(row, str(exc)) from None
            if not isinstance(obj, dict):
                raise _err(row, f"must be a JSON object, got {type(obj).__name__}")
            obj.setdefault("_row", row)
            out.append(obj)
    return out


class _Slow(Exception):
    """The fast path met something unusual; the checking parser takes over."""


_FLOATS: Final = (float, int)


def _fnum(v: Any) -> float:
    if type(v) not in _FLOATS:
        raise _Slow
    return float(v)


class _Columns:
    """Flat columns of the records seen so far (the fast path appends to them)."""

    def __init__(self) -> None:
        self.iid: list[str] = []
        self.family: list[str] = []
        self.tool: list[str] = []
        self.theta: list[float] = []
        self.kappa: list[float] = []
        self.pids: list[tuple[str, ...]] = []
        self.vids: list[tuple[str, ...]] = []
        self.p_row: list[int] = []
        self.p_slot: list[int] = []
        self.feat: list[float] = []
        self.viol: list[bool] = []
        self.ptrue: list[float] = []
        self.v_row: list[int] = []
        self.v_slot: list[int] = []
        self.cost: list[float] = []
        self.rel: list[float] = []
        self.r_row: list[int] = []
        self.r_v: list[int] = []
        self.r_j: list[int] = []

    def add_fast(self, obj: Any) -> None:
        """Append one canonical record; raise :class:`_Slow` (before appending) otherwise."""
        if type(obj) is not dict:
            raise _Slow
        iid = obj["instance_id"]
        family = obj["family"]
        tool = obj.get("tool_name", "")
        if type(iid) is not str or type(family) is not str or type(tool) is not str \
                or not iid or not family:
            raise _Slow
        theta = _fnum(obj["impact_cost_theta"])
        kappa = _fnum(obj["abstention_cost_kappa"])
        premises = obj["premises"]
        verifiers = obj.get("verifiers", [])
        if type(premises) is not list or not premises or type(verifiers) is not list:
            raise _Slow
        i = len(self.iid)
        pids: list[str] = []
        feat: list[float] = []
        viol: list[bool] = []
        ptrue: list[float] = []
        for pr in premises:
            if type(pr) is not dict:
                raise _Slow
            pid = pr["id"]
            contra = pr["contradiction_flag"]
            bad = pr["violated"]
            pt = pr.get("p_true")
            if type(pid) is not str or not pid or type(contra) is not bool \
                    or type(bad) is not bool:
                raise _Slow
            feat += (_fnum(pr["recency_hours"]), _fnum(pr["source_trust_score"]),
                     _fnum(pr["model_confidence"]), 1.0 if contra else 0.0)
            viol.append(bad)
            if pt is None:
                ptrue.append(math.nan)
            else:
                x = _fnum(pt)
                if not math.isfinite(x):
                    raise _Slow
                ptrue.append(x)
            pids.append(pid)
        index = {p: j for j, p in enumerate(pids)}
        if len(index) != len(pids):
            raise _Slow
        vids: list[str] = []
        cost: list[float] = []
        rel: list[float] = []
        r_v: list[int] = []
        r_j: list[int] = []
        for v, ve in enumerate(verifiers):
            if type(ve) is not dict:
                raise _Slow
            vid = ve["id"]
            names = ve["resolves_premise_ids"]
            if type(vid) is not str or not vid or type(names) is not list:
                raise _Slow
            js = sorted({index[x] for x in names})  # KeyError / TypeError: slow path
            r_v += [v] * len(js)
            r_j += js
            cost.append(_fnum(ve["execution_cost"]))
            rel.append(_fnum(ve["symmetric_reliability"]))
            vids.append(vid)
        if len(set(vids)) != len(vids):
            raise _Slow
        self._append(i, iid, family, tool, theta, kappa, pids, feat, viol, ptrue, vids, cost,
                     rel, r_v, r_j)

    def add_parsed(self, x: _Parsed) -> None:
        feat: list[float] = []
        for f in x.features:
            feat += f
        r_v: list[int] = []
        r_j: list[int] = []
        for v, js in enumerate(x.resolves):
            r_v += [v] * len(js)
            r_j += js
        self._append(len(self.iid), x.instance_id, x.family, x.tool_name, x.theta, x.kappa,
                     list(x.premise_ids), feat, x.violated, x.p_true, list(x.verifier_ids),
                     x.cost, x.reliability, r_v, r_j)

    def _append(self, i: int, iid: str, family: str, tool: str, theta: float, kappa: float,
                pids: list[str], feat: list[float], viol: list[bool], ptrue: list[float],
                vids: list[str], cost: list[float], rel: list[float], r_v: list[int],
                r_j: list[int]) -> None:
        self.iid.append(iid)
        self.family.append(family)
        self.tool.append(tool)
        self.theta.append(theta)
        self.kappa.append(kappa)
        self.pids.append(tuple(pids))
        self.vids.append(tuple(vids))
        k = len(pids)
        self.p_row += [i] * k
        self.p_slot += range(k)
        self.feat += feat
        self.viol += viol
        self.ptrue += ptrue
        self.v_row += [i] * len(vids)
        self.v_slot += range(len(vids))
        self.cost += cost
        self.rel += rel
        self.r_row += [i] * len(r_v)
        self.r_v += r_v
        self.r_j += r_j


def _first_bad(bad: BoolArray, owner: IntArray) -> int | None:
    """Position of the first record owning a True entry of ``bad``, or None."""
    hit = np.flatnonzero(bad)
    return None if hit.size == 0 else int(owner[hit].min())


def episode_set(records: Iterable[Mapping[str, Any]]) -> EpisodeSet:
    """Validate episode objects and pad them into an :class:`EpisodeSet`.

    A record's row number for error messages is its ``_row`` key when present (as set by
    :func:`load_episodes`), else its 1-based position. Canonical records take a fast path
    whose range checks run vectorised afterwards; a record that fails them, or that is
    unusual (camelCase keys, 0/1 flags, a missing field), goes through the checking parser,
    which names the problem.

    Raises
    ------
    DataContractError
        Naming the row, the field and the value: a missing field, a wrong type, a value out
        of range, a duplicate premise / verifier / instance id, a verifier naming an unknown
        premise, or an empty file.
    """
    cols = _Columns()
    kept: list[Any] = []
    row_no: list[int] = []
    for pos, rec in enumerate(records, start=1):
        row = pos
        if isinstance(rec, Mapping):
            raw_row = rec.get("_row", pos)
            row = raw_row if type(raw_row) is int else pos
        try:
            cols.add_fast(rec)
        except (_Slow, KeyError, TypeError):
            cols.add_parsed(_parse(rec, row))
        kept.append(rec)
        row_no.append(row)
    if not kept:
        raise DataContractError("episodes: no instances")
    n = len(kept)
    rows = np.asarray(row_no)
    theta = np.asarray(cols.theta, dtype=np.float64)
    kappa = np.asarray(cols.kappa, dtype=np.float64)
    feat = np.asarray(cols.feat, dtype=np.float64).reshape(-1, len(CLAIM_FEATURES))
    ptrue = np.asarray(cols.ptrue, dtype=np.float64)
    cost = np.asarray(cols.cost, dtype=np.float64)
    rel = np.asarray(cols.rel, dtype=np.float64)
    p_row = np.asarray(cols.p_row, dtype=np.intp)
    v_row = np.asarray(cols.v_row, dtype=np.intp)
    with np.errstate(invalid="ignore"):
        checks = [
            _first_bad(~(np.isfinite(theta) & (theta > 0)) | ~(np.isfinite(kappa) & (kappa > 0)),
                       np.arange(n)),
            _first_bad(~np.all(np.isfinite(feat), axis=1) | (feat[:, 0] < 0)
                       | ~((feat[:, 1] >= 0) & (feat[:, 1] <= 1))
                       | ~((feat[:, 2] >= 0) & (feat[:, 2] <= 1))
                       | (np.isinf(ptrue) | (ptrue < 0) | (ptrue > 1)), p_row),
            _first_bad(~np.isfinite(cost) | (cost < 0) | ~((rel > 0.5) & (rel <= 1.0)), v_row),
        ]
    offenders = [c for c in checks if c is not None]
    if offenders:
        pos_bad = min(offenders)
        _parse(kept[pos_bad], int(rows[pos_bad]))  # raises, naming the field
        raise _err(int(rows[pos_bad]), "failed a range check")  # pragma: no cover
    seen: dict[str, int] = {}
    for pos, iid in enumerate(cols.iid):
        if iid in seen:
            raise _err(int(rows[pos]), f"instance_id={iid!r} repeats row {rows[seen[iid]]}")
        seen[iid] = pos

    m = int(np.bincount(p_row).max())
    nv = int(np.bincount(v_row, minlength=n).max()) if v_row.size else 0
    p_slot = np.asarray(cols.p_slot, dtype=np.intp)
    v_slot = np.asarray(cols.v_slot, dtype=np.intp)
    premise_mask = np.zeros((n, m), dtype=bool)
    premise_mask[p_row, p_slot] = True
    features = np.zeros((n, m, len(CLAIM_FEATURES)), dtype=np.float64)
    features[p_row, p_slot] = feat
    violated = np.zeros((n, m), dtype=bool)
    violated[p_row, p_slot] = np.asarray(cols.viol, dtype=bool)
    p_true = np.full((n, m), np.nan, dtype=np.float64)
    p_true[p_row, p_slot] = ptrue
    verifier_mask = np.zeros((n, nv), dtype=bool)
    verifier_mask[v_row, v_slot] = True
    cost_a = np.zeros((n, nv), dtype=np.float64)
    cost_a[v_row, v_slot] = cost
    rel_a = np.ones((n, nv), dtype=np.float64)
    rel_a[v_row, v_slot] = rel
    r_row = np.asarray(cols.r_row, dtype=np.intp)
    r_v = np.asarray(cols.r_v, dtype=np.intp)
    r_j = np.asarray(cols.r_j, dtype=np.intp)
    resolves = np.zeros((n, nv, m), dtype=bool)
    resolves[r_row, r_v, r_j] = True
    stream_key = np.zeros((n, nv, m), dtype=np.uint64)
    if r_row.size:
        inst = np.array([_hash64(iid) for iid in cols.iid], dtype=np.uint64)
        pair_cache: dict[tuple[str, str], int] = {}
        pair = np.empty(r_row.size, dtype=np.uint64)
        vids, pids = cols.vids, cols.pids
        for k, (i, v, j) in enumerate(zip(r_row.tolist(), r_v.tolist(), r_j.tolist(),
                                          strict=True)):
            name = (vids[i][v], pids[i][j])
            h = pair_cache.get(name)
            if h is None:
                h = pair_cache[name] = _hash64(f"{name[0]}\x1f{name[1]}")
            pair[k] = h
        stream_key[r_row, r_v, r_j] = _stream_key(inst[r_row], pair)
    return EpisodeSet(
        instance_id=tuple(cols.iid),
        family=tuple(cols.family),
        tool_name=tuple(cols.tool),
        theta=theta,
        kappa=kappa,
        premise_ids=tuple(cols.pids),
        premise_mask=premise_mask,
        features=features,
        violated=violated,
        p_true=p_true,
        verifier_ids=tuple(cols.vids),
        verifier_mask=verifier_mask,
        resolves=resolves,
        cost=cost_a,
        reliability=rel_a,
        stream_key=stream_key,
    )


def read_episodes(path: str | os.PathLike[str]) -> EpisodeSet:
    """:func:`load_episodes` then :func:`episode_set`."""
    return episode_set(load_episodes(path))


def _as_episode_set(episodes: Any) -> EpisodeSet:
    if isinstance(episodes, EpisodeSet):
        return episodes
    if isinstance(episodes, (str, os.PathLike)):
        return read_episodes(episodes)
    return episode_set(episodes)


# -- outcomes and metrics -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Outcomes:
    """What a policy did on each instance.

    Attributes
    ----------
    proceed : ndarray of bool, shape (n,)
        Final decision PROCEED (else ABSTAIN).
    harmful : ndarray of bool, shape (n,)
        PROCEED while a premise is in fact violated.
    queries : ndarray of intp, shape (n,)
        Number of verifier calls.
    cost : ndarray of float64, shape (n,)
        Summed execution cost of those calls.
    loss : ndarray of float64, shape (n,)
        ``theta * harmful + kappa * abstain + lambda_eval * cost``.
    calls : ndarray of intp, shape (n, V)
        Calls per verifier slot.
    """

    proceed: BoolArray
    harmful: BoolArray
    queries: IntArray
    cost: FloatArray
    loss: FloatArray
    calls: IntArray

    def per_instance(self) -> FloatArray:
        """The per-instance values behind :data:`METRICS`, shape (n, 6)."""
        return np.column_stack(
            [
                self.harmful.astype(np.float64),
                self.cost,
                self.queries.astype(np.float64),
                self.proceed.astype(np.float64),
                (~self.proceed).astype(np.float64),
                self.loss,
            ]
        )


@dataclass(frozen=True, kw_only=True)
class MetricCI:
    """A metric's value on the data and its bootstrap percentile interval."""

    value: float
    lo: float
    hi: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """One policy's replay: per-instance outcomes and summarised metrics.

    ``overall`` and each ``by_family[f]`` map every name in :data:`METRICS` to a
    :class:`MetricCI`; ``family_n[f]`` is the family's instance count.
    """

    policy: str
    n: int
    outcomes: Outcomes
    overall: dict[str, MetricCI]
    by_family: dict[str, dict[str, MetricCI]]
    family_n: dict[str, int]
    config: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int]:
        """Point values of every metric plus ``n`` (the ``--json`` object of one policy)."""
        out: dict[str, float | int] = {k: self.overall[k].value for k in METRICS}
        out["n"] = self.n
        return out

    def to_dict(self) -> dict[str, Any]:
        """Everything but the per-instance arrays, as plain data."""
        return {
            "policy": self.policy,
            "n": self.n,
            "overall": {k: v.to_dict() for k, v in self.overall.items()},
            "by_family": {
                f: {k: v.to_dict() for k, v in d.items()} for f, d in self.by_family.items()
            },
            "family_n": dict(self.family_n),
            "config": dict(self.config),
        }


def _bootstrap(
    values: FloatArray, *, n_boot: int, seed: int, ci: float
) -> list[MetricCI]:
    n = values.shape[0]
    point = values.mean(axis=0)
    if n_boot <= 0 or n == 0:
        return [MetricCI(value=float(v), lo=float(v), hi=float(v)) for v in point]
    rng = np.random.default_rng(seed)
    means = np.empty((n_boot, values.shape[1]), dtype=np.float64)
    # A resample is a vector of counts (how often each instance is drawn): bincount of n
    # uniform draws, then one matrix product gives every metric's mean at once.
    chunk = max(1, min(n_boot, 8_000_000 // max(n, 1)))
    counts = np.empty((chunk, n), dtype=np.float64)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        for k in range(b):
            counts[k] = np.bincount(rng.integers(0, n, size=n), minlength=n)
        means[start : start + b] = counts[:b] @ values / n
    a = (1.0 - ci) / 2.0
    lo = np.quantile(means, a, axis=0)
    hi = np.quantile(means, 1.0 - a, axis=0)
    return [
        MetricCI(value=float(v), lo=float(lo_), hi=float(hi_))
        for v, lo_, hi_ in zip(point, lo, hi, strict=True)
    ]


def _group_seed(seed: int, group: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x1fbootstrap\x1f{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def summarise(
    outcomes: Outcomes,
    family: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[dict[str, MetricCI], dict[str, dict[str, MetricCI]], dict[str, int]]:
    """Metric values with percentile bootstrap intervals, overall and per family.

    The resampling indices depend only on ``seed``, the group and its size, so two policies
    replayed on the same episodes are resampled identically (paired intervals).
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci={ci!r} must lie in (0, 1)")
    values = outcomes.per_instance()
    overall = dict(zip(METRICS, _bootstrap(values, n_boot=n_boot, seed=_group_seed(seed, ""),
                                           ci=ci), strict=True))
    fam = np.asarray(family, dtype=object)
    by_family: dict[str, dict[str, MetricCI]] = {}
    counts: dict[str, int] = {}
    for f in sorted(set(family)):
        sel = fam == f
        counts[f] = int(sel.sum())
        by_family[f] = dict(
            zip(
                METRICS,
                _bootstrap(values[sel], n_boot=n_boot, seed=_group_seed(seed, f), ci=ci),
                strict=True,
            )
        )
    return overall, by_family, counts


def _outcomes(
    es: EpisodeSet, proceed: BoolArray, calls: IntArray, lambda_eval: float
) -> Outcomes:
    harmful = proceed & es.any_violated
    queries = calls.sum(axis=1).astype(np.intp)
    cost = (calls * np.where(es.verifier_mask, es.cost, 0.0)).sum(axis=1)
    loss = es.theta * harmful + es.kappa * (~proceed) + lambda_eval * cost
    return Outcomes(proceed=proceed, harmful=harmful, queries=queries, cost=cost, loss=loss,
                    calls=calls)


# -- the policies -------------------------------------------------------------------------------


def _signals(es: EpisodeSet, rows: IntArray, v: IntArray, calls: IntArray, seed: int) -> BoolArray:
    """Confirm (True) / refute signal of verifier ``v[k]`` on every premise of ``rows[k]``."""
    keys = es.stream_key[rows, v, :]
    u = stream_uniform(keys, seed, calls[rows, v][:, None]).reshape(keys.shape)
    correct = u < es.reliability[rows, v][:, None]
    truth_valid = ~es.violated[rows]
    return cast(BoolArray, truth_valid == correct)


def _cheapest(es: EpisodeSet) -> IntArray:
    """Per premise slot, its cheapest verifier (first on ties), -1 if none resolves it."""
    res = es.resolves & es.verifier_mask[:, :, None]
    c = np.where(res, es.cost[:, :, None], np.inf)
    best = np.argmin(c, axis=1)
    has = np.any(res, axis=1)
    return cast(IntArray, np.where(has & es.premise_mask, best, -1).astype(np.intp))


def _static(es: EpisodeSet, flagged: BoolArray, seed: int) -> tuple[BoolArray, IntArray]:
    """Verify the flagged premises once each with their cheapest verifier.

    Each chosen verifier is called once and answers for every premise it resolves. PROCEED iff
    no answer is a refutation and every flagged premise got at least one answer; a flagged
    premise that no verifier resolves therefore forces ABSTAIN.
    """
    n, nv = es.cost.shape
    cheap = _cheapest(es)
    flagged = flagged & es.premise_mask
    chosen = np.zeros((n, nv), dtype=bool)
    rows, cols = np.nonzero(flagged & (cheap >= 0))
    chosen[rows, cheap[rows, cols]] = True
    calls = chosen.astype(np.intp)
    refuted = np.zeros(n, dtype=bool)
    answered = np.zeros(es.premise_mask.shape, dtype=bool)
    zero = np.zeros((n, nv), dtype=np.intp)
    for v in range(nv):
        r = np.flatnonzero(chosen[:, v])
        if r.size == 0:
            continue
        vv = np.full(r.size, v, dtype=np.intp)
        sig = _signals(es, r, vv, zero, seed)
        res = es.resolves[r, v, :] & es.premise_mask[r]
        refuted[r] |= np.any(res & ~sig, axis=1)
        answered[r] |= res
    proceed = ~refuted & ~np.any(flagged & ~answered, axis=1)
    return proceed, calls


def _gate_policy(
    es: EpisodeSet, gate: Gate, p: FloatArray, seed: int, n_jobs: int = 1
) -> tuple[BoolArray, IntArray, IntArray]:
    """Sequential stopping with the batch gate; returns (proceed, calls, steps)."""
    from amv_calib.gate import PROCEED, VERIFY, evaluate_batch, update_batch

    n, nv = es.cost.shape
    post = p.copy()
    avail = es.verifier_mask.copy()
    calls = np.zeros((n, nv), dtype=np.intp)
    proceed = np.zeros(n, dtype=bool)
    steps = np.zeros(n, dtype=np.intp)
    active = np.arange(n)
    budget = int(gate.max_verifications)
    reuse = bool(gate.reuse_verifiers)
    for step in range(budget + 1):
        if active.size == 0:
            break
        left = np.full(active.size, budget - step, dtype=np.intp)
        bd = evaluate_batch(
            gate, post[active], es.premise_mask[active], es.theta[active], es.kappa[active],
            es.resolves[active], es.cost[active], es.reliability[active], avail[active],
            budget=left, n_jobs=n_jobs,
        )
        verify = bd.regime == VERIFY
        done = active[~verify]
        proceed[done] = bd.regime[~verify] == PROCEED
        rows = active[verify]
        if rows.size == 0:
            break
        v = bd.verifier[verify]
        sig = _signals(es, rows, v, calls, seed)
        post[rows] = update_batch(
            gate, post[rows], es.premise_mask[rows], es.resolves[rows, v, :], sig,
            es.reliability[rows, v],
        )
        calls[rows, v] += 1
        if not reuse:
            avail[rows, v] = False
        steps[rows] += 1
        active = rows
    return proceed, calls, steps


def _default_gate(policy: str, calibrator: PortableCalibrator | None, gate: Gate | None) -> Gate:
    from amv_calib.gate import Gate as _Gate

    if policy == "seed":
        return _Gate(mode="seed", planner="myopic", calibrator=seed_prior_calibrator())
    if gate is not None:
        cal = calibrator if calibrator is not None else gate.calibrator
        return _Gate(
            lambda_cost_scale=gate.lambda_cost_scale,
            delta_loss_threshold=gate.delta_loss_threshold,
            epsilon_harm_bound=gate.epsilon_harm_bound,
            harm_price=gate.harm_price,
            planner=cast(Literal["myopic", "lookahead"], policy),
            mode="amv",
            max_verifications=gate.max_verifications,
            reuse_verifiers=gate.reuse_verifiers,
            calibrator=cal,
            refusal=gate.refusal,
        )
    if calibrator is None:
        raise ConfigError(f"policy {policy!r} needs a calibrator (or a gate holding one)")
    return _Gate(planner=cast(Literal["myopic", "lookahead"], policy), calibrator=calibrator)


class _ReplayOptions(TypedDict, total=False):
    """The keyword options of :func:`replay` besides ``seed``, as :func:`replay_many` passes
    them on (an option left out takes :func:`replay`'s default)."""

    gate: Gate | None
    calibrator: PortableCalibrator | None
    tau: float
    lambda_eval: float
    n_boot: int
    ci: float
    n_jobs: int


def replay(
    episodes: EpisodeSet | str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    policy: Policy,
    *,
    seed: int,
    gate: Gate | None = None,
    calibrator: PortableCalibrator | None = None,
    tau: float = DEFAULT_TAU,
    lambda_eval: float = LAMBDA_EVAL,
    n_boot: int = 1000,
    ci: float = 0.95,
    n_jobs: int = 1,
) -> ReplayResult:
    """Replay ``policy`` over frozen episodes and summarise the metrics.

    Parameters
    ----------
    episodes : EpisodeSet, path or iterable of episode objects
    policy : {"always-proceed", "always-verify", "static", "seed", "myopic", "lookahead", \
"oracle"}
        ``always-proceed``: PROCEED, no verification. ``always-verify``: every premise is
        verified once with its cheapest verifier; PROCEED iff every answer confirms.
        ``static``: the same, restricted to premises whose calibrated probability exceeds
        ``tau``. ``seed``: the seed engine (seed prior, seed thresholds, myopic VOI,
        ``mode="seed"``). ``myopic`` / ``lookahead``: AMV-Guard with the learned
        calibrator and that planner, thresholds from ``gate`` (else the gate defaults).
        ``oracle``: PROCEED iff no premise is violated, no verification.
    seed : int
        Seeds the answer stream and the bootstrap.
    gate : Gate, optional
        Thresholds (the harm price included), budget and calibrator for ``myopic`` /
        ``lookahead`` (its planner is replaced by the policy's).
    calibrator : PortableCalibrator, optional
        Overrides the gate's calibrator; ``static`` needs one (or a gate holding one).
    tau : float
        Threshold of ``static``.
    lambda_eval : float
        Price of a unit of verifier cost in ``total_loss`` (fixed at 1.0 to compare policies).
    n_boot : int
        Bootstrap resamples (0: no intervals).
    ci : float
        Interval coverage.
    n_jobs : int
        Threads for the compiled batch engine (same results for any value).

    Returns
    -------
    ReplayResult
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r} is not one of {list(POLICIES)}")
    seed = _check_seed(seed)
    es = _as_episode_set(episodes)
    outcomes, config = _run_policy(es, policy, seed=seed, gate=gate, calibrator=calibrator,
                                   tau=tau, lambda_eval=lambda_eval, n_jobs=n_jobs)
    overall, by_family, counts = summarise(outcomes, es.family, n_boot=n_boot, seed=seed, ci=ci)
    return ReplayResult(policy=policy, n=len(es), outcomes=outcomes, overall=overall,
                        by_family=by_family, family_n=counts, config=config)


def _run_policy(
    es: EpisodeSet,
    policy: str,
    *,
    seed: int,
    gate: Gate | None,
    calibrator: PortableCalibrator | None,
    tau: float,
    lambda_eval: float,
    n_jobs: int = 1,
) -> tuple[Outcomes, dict[str, Any]]:
    n, nv = es.cost.shape
    config: dict[str, Any] = {"policy": policy, "seed": seed, "lambda_eval": lambda_eval}
    if policy == "always-proceed":
        proceed = np.ones(n, dtype=bool)
        calls = np.zeros((n, nv), dtype=np.intp)
    elif policy == "oracle":
        proceed = ~es.any_violated
        calls = np.zeros((n, nv), dtype=np.intp)
    elif policy == "always-verify":
        proceed, calls = _static(es, es.premise_mask.copy(), seed)
    elif policy == "static":
        cal = calibrator if calibrator is not None else (gate.calibrator if gate else None)
        if cal is None:
            raise ConfigError("policy 'static' needs a calibrator (or a gate holding one)")
        if not math.isfinite(tau):
            raise ValueError(f"tau={tau!r} must be finite")
        proceed, calls = _static(es, es.probabilities(cal) > tau, seed)
        config["tau"] = tau
    else:
        g = _default_gate(policy, calibrator, gate)
        if g.calibrator is None:
            raise ConfigError(f"policy {policy!r} needs a calibrator (or a gate holding one)")
        proceed, calls, _ = _gate_policy(es, g, es.probabilities(g.calibrator), seed, n_jobs)
        config.update(
            lambda_cost_scale=g.lambda_cost_scale,
            delta_loss_threshold=g.delta_loss_threshold,
            epsilon_harm_bound=g.epsilon_harm_bound,
            harm_price=g.harm_price,
            planner=g.planner,
            mode=g.mode,
            max_verifications=g.max_verifications,
        )
    return _outcomes(es, proceed, calls, lambda_eval), config


def replay_many(
    episodes: EpisodeSet | str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    policies: Sequence[Policy],
    *,
    seed: int,
    **options: Unpack[_ReplayOptions],
) -> dict[str, ReplayResult]:
    """:func:`replay` for several policies on the same episodes and answer stream.

    ``seed`` and the other keyword options are :func:`replay`'s, with its defaults.
    """
    es = _as_episode_set(episodes)
    return {p: replay(es, p, seed=seed, **options) for p in policies}


# -- the paper-style table ------------------------------------------------------------
_TABLE_COLUMNS = (
    ("gate_harmful", "Gate Harmful %", 100.0),
    ("verification_cost", "Verif. cost", 1.0),
    ("queries", "Queries", 1.0),
    ("proceed_coverage", "Proceed Cov. %", 100.0),
    ("abstention_rate", "Abstain %", 100.0),
    ("total_loss", "Total loss", 1.0),
)


def _fmt(m: Mapping[str, Any], key: str, scale: float) -> str:
    v = m[key]
    if isinstance(v, Mapping):
        return f"{v['value'] * scale:.2f} [{v['lo'] * scale:.2f}, {v['hi'] * scale:.2f}]"
    return f"{float(v) * scale:.2f}"


def format_table(rows: Mapping[str, Mapping[str, Any]], counts: Mapping[str, int],
                 observed_bound: Mapping[str, float] | None = None) -> str:
    """Paper-style table: one row per policy, value [95% interval] per metric.

    ``observed_bound`` maps a policy to the Clopper-Pearson upper bound of its Gate Harmful
    on the calibration episodes of a Learn-then-Test certificate: a column "Calibration harm
    bound % (observed)" then shows it ("-" for the other policies). It is not certified
    (the configuration was chosen on the same episodes); the certificate's statement is
    "Gate Harmful <= alpha with probability >= 1 - delta".
    """
    labels = {**POLICY_LABELS, "tuned": "AMV-Guard (tuned)",
              "untuned": "AMV-Guard (default thresholds)"}
    extra = ["Calibration harm bound % (observed)"] if observed_bound else []
    header = ["Policy", *[c[1] for c in _TABLE_COLUMNS], *extra, "n"]
    body = [
        [labels.get(name, name), *[_fmt(m, k, s) for k, _, s in _TABLE_COLUMNS],
         *([f"{observed_bound[name] * 100:.2f}" if name in observed_bound else "-"]
           if observed_bound else []),
         str(counts[name])]
        for name, m in rows.items()
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)
