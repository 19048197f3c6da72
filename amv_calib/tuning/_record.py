"""Which episodes shaped a version's thresholds: the record certification must exclude.

A Learn-then-Test certificate holds only on calibration episodes that never touched the
choice of what it certifies. Tuning sees its split; certification then picks a harm price
on its calibration set, so the certified thresholds have seen both. A
:class:`TuningRecord` keeps the 64-bit keys of every such episode
(:func:`episode_keys`, the same hash the tuning split draws from), the rule of the split,
and where each part came from. It is written as two files that an artifact version carries
(``tuning.json`` and ``tuning-episodes.u64``, covered by the manifest and the signature):

- ``tuning-episodes.u64``: the sorted, distinct keys as little-endian unsigned 64-bit
  integers (8 bytes an episode);
- ``tuning.json``: ``{"format", "format_version", "split", "n", "fingerprint", "members",
  "sources"}``, where ``fingerprint`` is the sha256 of the members file and each source is
  ``{"step", "n", "fingerprint"}``.

Two distinct ids share a key with probability about ``n**2 / 2**65`` (1e-7 for a million
episodes); such an episode would be excluded needlessly, never used wrongly.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import (
    LoadedArtifact,
    canonical_json_bytes,
    read_json_object,
    read_regular_bytes,
)
from amv_calib.exceptions import ConfigError
from amv_calib.settings import TuneOptions

#: What ``tuning.json`` says it is.
RECORD_FORMAT: Final = "amv-calib/tuning-record"
RECORD_FORMAT_VERSION: Final = 1
#: File names of a record, in a step folder and in an artifact version.
RECORD_FILE: Final = "tuning.json"
MEMBERS_FILE: Final = "tuning-episodes.u64"
#: The hash behind both the tuning split and the membership keys.
_KEY_PREFIX: Final = "amv-calib/tune-split\x1f"

U64Array = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]


def episode_keys(instance_ids: Iterable[str]) -> U64Array:
    """The 64-bit key of each instance id: ``blake2b(prefix 0x1f id, 8 bytes)``, little-endian.

    :func:`~amv_calib.tuning.split_episodes` puts an episode in the tuning split when
    ``key / 2**64 < tune_fraction``; a record lists the keys of the episodes it covers.
    """
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(f"{_KEY_PREFIX}{iid}".encode(), digest_size=8)
                        .digest(), "little") for iid in instance_ids),
        dtype=np.uint64)


def _members_bytes(keys: U64Array) -> bytes:
    return np.asarray(keys, dtype="<u8").tobytes()


@dataclass(frozen=True, kw_only=True)
class TuningRecord:
    """The episodes that shaped a version's thresholds (see the module docstring).

    Attributes
    ----------
    keys : ndarray of uint64
        Sorted, distinct :func:`episode_keys`.
    split : dict
        The rule that chose the tuning episodes (``{"rule": "hash", "tune_fraction": f}``
        or ``{"rule": "families", "tune_families": [...]}``).
    sources : list of dict
        ``{"step", "n", "fingerprint"}`` per part: the tuning set, then each calibration
        set whose certificate chose among configurations.
    """

    keys: U64Array
    split: dict[str, Any]
    sources: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, instance_ids: Sequence[str], *, split: Mapping[str, Any],
           step: str = "tune") -> TuningRecord:
        """The record of one set of episodes (the tuning split)."""
        keys = episode_keys(instance_ids)
        return cls(keys=np.unique(keys), split=dict(split),
                   sources=[_source(step, keys)])

    def with_episodes(self, instance_ids: Sequence[str], *, step: str) -> TuningRecord:
        """This record and the episodes of ``instance_ids`` (a calibration set that chose)."""
        keys = episode_keys(instance_ids)
        return TuningRecord(keys=np.union1d(self.keys, keys).astype(np.uint64),
                            split=dict(self.split),
                            sources=[*self.sources, _source(step, keys)])

    def __len__(self) -> int:
        return int(self.keys.size)

    def contains(self, instance_ids: Sequence[str]) -> BoolArray:
        """Which of ``instance_ids`` the record covers."""
        return np.isin(episode_keys(instance_ids), self.keys)

    def members_bytes(self) -> bytes:
        """The members file: the keys as little-endian unsigned 64-bit integers."""
        return _members_bytes(self.keys)

    @property
    def fingerprint(self) -> str:
        """sha256 of the members file."""
        return hashlib.sha256(self.members_bytes()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """``tuning.json`` (also the manifest's ``tuning``)."""
        return {"format": RECORD_FORMAT, "format_version": RECORD_FORMAT_VERSION,
                "split": self.split, "n": len(self), "fingerprint": self.fingerprint,
                "members": MEMBERS_FILE, "sources": self.sources}

    def summary(self) -> dict[str, Any]:
        """``{"n", "fingerprint"}``: what a certificate names of a record."""
        return {"n": len(self), "fingerprint": self.fingerprint}

    def write(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write ``tuning.json`` and ``tuning-episodes.u64`` into ``out_dir``; returns the
        path of ``tuning.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / MEMBERS_FILE).write_bytes(self.members_bytes())
        (out / RECORD_FILE).write_bytes(canonical_json_bytes(self.to_dict()))
        return out / RECORD_FILE


def _source(step: str, keys: U64Array) -> dict[str, Any]:
    u = np.unique(keys)
    return {"step": step, "n": int(u.size),
            "fingerprint": hashlib.sha256(_members_bytes(u)).hexdigest()}


def read_tuning_record(path: str | os.PathLike[str]) -> TuningRecord:
    """Read ``tuning.json`` and the members file beside it, checking one against the other.

    Raises
    ------
    ConfigError
        Naming the file: not a record, a members file missing, of the wrong size, unsorted,
        or whose sha256 is not the record's fingerprint.
    """
    p = Path(path)
    data = read_json_object(p, what="tuning record")
    if data.get("format") != RECORD_FORMAT or data.get("format_version") != \
            RECORD_FORMAT_VERSION:
        raise ConfigError(f"{p}: not a tuning record (format {data.get('format')!r}, "
                          f"version {data.get('format_version')!r}; expected "
                          f"{RECORD_FORMAT!r} version {RECORD_FORMAT_VERSION})")
    members = data.get("members")
    if members != MEMBERS_FILE:
        raise ConfigError(f"{p}: members={members!r} must be {MEMBERS_FILE!r}")
    raw = read_regular_bytes(p.parent / MEMBERS_FILE, what="tuning members file")
    return record_from(data, raw, where=p)


def record_from(data: Mapping[str, Any], members: bytes, *, where: object) -> TuningRecord:
    """A record from its ``tuning.json`` object and the members file's bytes (an artifact
    holds both, already hashed); checks the count, order and fingerprint."""
    fp = hashlib.sha256(members).hexdigest()
    if fp != data.get("fingerprint"):
        raise ConfigError(f"{where}: the members file has sha256 {fp}, the record says "
                          f"{data.get('fingerprint')!r}")
    if len(members) % 8:
        raise ConfigError(f"{where}: the members file holds {len(members)} bytes, not a "
                          f"multiple of 8")
    keys = np.frombuffer(members, dtype="<u8").astype(np.uint64)
    if keys.size != data.get("n") or (keys.size > 1 and not np.all(keys[1:] > keys[:-1])):
        raise ConfigError(f"{where}: the members file must hold n={data.get('n')!r} sorted "
                          f"distinct keys, it holds {keys.size}")
    split, sources = data.get("split"), data.get("sources")
    if not isinstance(split, dict) or not isinstance(sources, list):
        raise ConfigError(f"{where}: 'split' must be an object and 'sources' a list")
    return TuningRecord(keys=keys, split=dict(split), sources=[dict(s) for s in sources])


def artifact_record(art: LoadedArtifact) -> TuningRecord | None:
    """The record an artifact version carries (its manifest's ``tuning`` and members file),
    or None for a version exported without one."""
    data = art.manifest.get("tuning")
    if data is None:
        return None
    members = art.path / str(data["members"])
    return record_from(data, read_regular_bytes(members, what="tuning members file"),
                       where=members)


def hash_split(tune_fraction: float) -> dict[str, Any]:
    """The ``split`` of a record made by :func:`~amv_calib.tuning.split_episodes`."""
    TuneOptions.spec()["tune_fraction"].check("tune_fraction", tune_fraction)  # one check
    return {"rule": "hash", "hash": "blake2b-64 of 'amv-calib/tune-split' 0x1f instance_id",
            "tune_fraction": float(tune_fraction)}
