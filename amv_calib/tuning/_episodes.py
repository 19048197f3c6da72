"""Episodes: frozen action instances in padded-array form (:class:`EpisodeSet`), read
from an episodes JSONL file (``docs/data.md``, BRIEF "Episodes JSONL") or built from records,
every row checked before anything is built.

numpy and the standard library only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import (
    CLAIM_FEATURES,
    PortableCalibrator,
    canonical_name,
    loads_strict,
    open_regular,
    premise_memory_kind,
)
from amv_calib.exceptions import DataContractError

if TYPE_CHECKING:
    pass

from amv_calib.tuning._stream import _hash64, _stream_key

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]
U64Array = NDArray[np.uint64]


# -- episodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EpisodeSet:
    """Episodes as padded arrays: ``n`` instances, ``m`` premise and ``V`` verifier slots.

    Premises and verifiers keep their file order; padding slots come last and are masked.
    ``features`` holds the raw claim features in :data:`~amv_calib.contract._schema.CLAIM_FEATURES`
    order; ``stream_key[i, v, j]`` keys the answer stream of verifier ``v`` on premise ``j``.
    ``memory_kind`` holds each premise's kind (None where a premise gives none), or is None
    when no premise gives one.
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
    memory_kind: NDArray[np.object_] | None = None

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
            memory_kind=None if self.memory_kind is None else self.memory_kind[idx],
        )

    def probabilities(self, calibrator: PortableCalibrator) -> FloatArray:
        """Violation probability of every premise slot through ``calibrator`` (0 in padding)."""
        out = np.zeros(self.premise_mask.shape, dtype=np.float64)
        if self.n_premises:
            kinds = (None if self.memory_kind is None
                     else self.memory_kind[self.premise_mask].tolist())
            out[self.premise_mask] = calibrator.predict(self.features[self.premise_mask],
                                                        memory_kinds=kinds)
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


def _premise_kind(pr: Mapping[str, Any], row: int, where: str) -> str | None:
    """A premise's ``memory_kind``, by the contract's rule (:func:`premise_memory_kind`)."""
    try:
        return premise_memory_kind(pr)
    except ValueError as exc:
        raise _err(row, f"{where}{exc}") from None


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
    kinds: list[str | None]
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
    pids, feats, viol, ptrue, kinds = _parse_premises(obj.get("premises"), row)
    vids, res, costs, rels = _parse_verifiers(obj.get("verifiers", []), row, pids)
    return _Parsed(
        instance_id=iid, family=family, tool_name=tool, theta=theta, kappa=kappa,
        premise_ids=tuple(pids), features=feats, violated=viol, p_true=ptrue, kinds=kinds,
        verifier_ids=tuple(vids), resolves=res, cost=costs, reliability=rels,
    )


def _parse_premises(
    premises: Any, row: int
) -> tuple[list[str], list[tuple[float, float, float, float]], list[bool], list[float],
           list[str | None]]:
    """Ids, features, ``violated``, ``p_true`` (NaN when absent) and ``memory_kind`` (None
    when absent) of an episode's premises."""
    if not isinstance(premises, list) or not premises:
        raise _err(row, f"premises={premises!r} must be a non-empty list")
    pids: list[str] = []
    feats: list[tuple[float, float, float, float]] = []
    viol: list[bool] = []
    ptrue: list[float] = []
    kinds: list[str | None] = []
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
        kinds.append(_premise_kind(pr, row, where))
    return pids, feats, viol, ptrue, kinds


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
        self.kind: list[str | None] = []
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
            if type(pr) is not dict or "memory_kind" in pr or "memoryKind" in pr:
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
                     rel, r_v, r_j, [None] * len(pids))

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
                     x.cost, x.reliability, r_v, r_j, x.kinds)

    def _append(self, i: int, iid: str, family: str, tool: str, theta: float, kappa: float,
                pids: list[str], feat: list[float], viol: list[bool], ptrue: list[float],
                vids: list[str], cost: list[float], rel: list[float], r_v: list[int],
                r_j: list[int], kinds: list[str | None]) -> None:
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
        self.kind += kinds
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
    memory_kind = None
    if any(k is not None for k in cols.kind):
        memory_kind = np.full((n, m), None, dtype=object)
        memory_kind[p_row, p_slot] = np.asarray(cols.kind, dtype=object)
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
        memory_kind=memory_kind,
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

