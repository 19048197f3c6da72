"""A gate that follows an alias: production picks up a promotion or a rollback without a restart.

:class:`LiveGate` serves one verified artifact version at a time, an ordinary
:class:`~amv_calib.gate.Gate` built by :func:`~amv_calib.contract.gate_from_artifact`, and
looks at the alias again at most every ``poll_seconds``, on the calling thread (no background
thread: a process that makes no decision has nothing to keep current, and the check costs one
``time.monotonic()`` comparison on the other calls).

A check ``stat``\\ s ``MODEL_DIR/aliases.json``. Its identity (device, inode, size, change
times) unchanged means the alias is unchanged, unless the file changed within the last two
seconds: a timestamp is coarser than two writes can be apart (and an inode number is reused),
so a recent file is read again, as git does with a "racily clean" index. A changed file is read,
and only a change of the alias's own entry (its version and its ``manifest_sha256``) loads
anything: the new target is loaded and verified in full (hashes, format, signature under the
trusted keys, certificate binding) before it serves. Then one reference is swapped: a call
reads it once, so every decision, and every step of a ``run``, comes from one version, the
old or the new, never a mix.

A target that is refused never serves: the last verified version keeps serving, the refusal
is logged, counted in :meth:`LiveGate.status` and written into every decision record as
``refused`` (the target's version and the reason) for as long as the alias points at it; the
target is tried again at each check meanwhile (a signature added later is picked up). With no
verified version at all every decision is ABSTAIN with the reason.

An alias that is gone withdraws what it served: when ``aliases.json`` reads and no longer
names the alias (or is absent), or the model folder is gone, every decision is ABSTAIN with
``artifact refused: alias 'production' is gone, version vN no longer serves: ...`` until the
alias names a version again. A torn or unreadable ``aliases.json`` says nothing about the
alias, so the last verified version keeps serving meanwhile. Standard library only.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from amv_calib.contract import (
    ALIASES_FILE,
    gate_from_artifact,
    read_aliases,
    resolve_reference,
    utc_now_iso,
)
from amv_calib.exceptions import ArtifactError
from amv_calib.gate._closing import Closing
from amv_calib.gate._engine import Decision, Gate
from amv_calib.gate._model import CandidateAction, Verifier
from amv_calib.gate._records import open_decision_log
from amv_calib.settings import champion_reference

__all__ = ["LiveGate"]

_log = logging.getLogger(__name__)

#: A file changed this recently may change again within one timestamp tick: read it again.
_RACY_NS: Final = 2_000_000_000

_monotonic = time.monotonic

_Entry = tuple[str, "str | None"]  # an alias entry: (version, manifest_sha256)

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _AliasGone(ArtifactError):
    """The alias file reads and does not name the alias, or the model folder is gone."""


def _identity(path: Path) -> tuple[int, int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _by_the_version_serving(method: Callable[Concatenate[Gate, _P], _R]
                            ) -> Callable[Concatenate[LiveGate, _P], _R]:
    """``method`` of :class:`Gate` as a :class:`LiveGate` method, with Gate's parameters
    (not written a second time): the alias checked when a check is due, then ``method`` of
    the version serving."""
    name = method.__name__

    def call(self: LiveGate, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if _monotonic() >= self._due:
            self._poll_now()
        # self._gate is read once: the whole call is decided by one version
        return method(self._gate, *args, **kwargs)

    call.__name__ = name
    call.__qualname__ = f"LiveGate.{name}"
    call.__doc__ = (f":meth:`Gate.{name} <amv_calib.gate.Gate.{name}>` by the version serving: "
                    f"every step of the call by that one version.")
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature: Gate's
    return call


class LiveGate(Closing):
    """A gate that serves the version an alias points at, and follows it.

    Parameters
    ----------
    ref : str or path-like, optional
        ``MODEL_DIR@ALIAS`` (``models/amv-guard@production``; a relative reference is also
        looked up under :func:`amv_calib.settings.models_dir`); default
        :func:`amv_calib.settings.champion_reference`.
    trusted_keys : sequence of path-like, optional
        As for :func:`~amv_calib.contract.load_artifact`: with trusted keys (or
        ``$AMV_CALIB_TRUSTED_KEYS``), only a version one of them signed serves.
    poll_seconds : float, default 5.0
        Least time between two checks of the alias (0: every call checks).
    decision_log : path or callable, optional
        As for :class:`~amv_calib.gate.Gate`: one record per decision, each naming the
        version that decided it (``calibrator``) and, while the alias points at a refused
        target, ``refused``.

    Notes
    -----
    The first version is loaded by the constructor. Thread-safe: any number of threads may
    call :meth:`evaluate` and :meth:`run`; one of them at a time checks the alias (the others
    carry on with the version serving), and a new version is loaded by the call that found
    it, before that call decides.
    """

    __slots__ = ("_ref", "_alias", "_keys", "_poll", "_due", "_lock", "_gate", "_sink",
                 "_writer", "_mdir", "_ident", "_served", "_since", "_refused", "_last_refusal",
                 "_checks", "_swaps", "_refusals")

    def __init__(
        self,
        ref: str | os.PathLike[str] | None = None,
        *,
        trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
        poll_seconds: float = 5.0,
        decision_log: str | os.PathLike[str] | Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        text = champion_reference() if ref is None else os.fspath(ref)
        head, sep, alias = text.rpartition("@")
        if not (sep and head and alias) or "/" in alias or os.sep in alias:
            raise ValueError(f"ref={text!r} must name an alias, MODEL_DIR@ALIAS (for example "
                             f"models/amv-guard@production); for one fixed version use "
                             f"Gate.from_artifact")
        if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) \
                or not math.isfinite(poll_seconds) or poll_seconds < 0:
            raise ValueError(f"poll_seconds={poll_seconds!r} must be a finite number >= 0")
        self._ref = text
        self._alias = alias
        self._keys = trusted_keys
        self._poll = float(poll_seconds)
        self._lock = threading.Lock()
        self._sink, self._writer = open_decision_log(decision_log)
        self._mdir: Path | None = None
        self._ident: tuple[int, int, int, int, int] | None = None
        self._served: _Entry | None = None
        self._since: str | None = None
        self._refused: dict[str, Any] | None = None
        self._last_refusal: dict[str, Any] | None = None
        self._checks = self._swaps = self._refusals = 0
        self._gate = Gate(refusal="artifact refused: not loaded yet",
                          decision_log=self._record if self._sink else None)
        self._due = _monotonic() + self._poll
        self._check(force=True)

    # -- decisions ---------------------------------------------------------------------------
    def evaluate(self, action: CandidateAction, verifiers: Sequence[Verifier] = ()) -> Decision:
        """:meth:`Gate.evaluate <amv_calib.gate.Gate.evaluate>` by the version serving."""
        # Written out rather than made by _by_the_version_serving: forwarding *args costs
        # about 0.1 us a call, a tenth of the cheapest decision (bench_live_gate's target).
        if _monotonic() >= self._due:
            self._poll_now()
        return self._gate.evaluate(action, verifiers)

    run = _by_the_version_serving(Gate.run)

    # -- what serves -----------------------------------------------------------------------
    @property
    def version(self) -> str | None:
        """The version serving (``"v3"``), None when no version could be verified."""
        return self._gate.artifact_version

    @property
    def gate(self) -> Gate:
        """The gate serving now (a :class:`Gate`; its every decision is ABSTAIN when no
        version could be verified)."""
        return self._gate

    def status(self) -> dict[str, Any]:
        """What serves and how the alias has been followed, as plain data.

        Keys: ``ref``, ``alias``, ``name`` and ``version`` serving (None when none could be
        verified), ``manifest_sha256`` (the alias entry it was loaded through),
        ``serving_since_utc``, ``verified`` (False: every decision is ABSTAIN),
        ``poll_seconds``, ``checks`` (of the alias), ``swaps`` (versions that took over after
        the first), ``refusals`` (refused targets: a target refused again for the same reason
        counts once), ``refused`` (the refusal in force while the alias points at a refused
        target, else None) and ``last_refusal``.
        """
        gate, served = self._gate, self._served
        return {
            "ref": self._ref,
            "alias": self._alias,
            "name": gate.artifact_name,
            "version": gate.artifact_version,
            "manifest_sha256": None if served is None else served[1],
            "serving_since_utc": self._since,
            "verified": gate.refusal is None,
            "poll_seconds": self._poll,
            "checks": self._checks,
            "swaps": self._swaps,
            "refusals": self._refusals,
            "refused": None if self._refused is None else dict(self._refused),
            "last_refusal": None if self._last_refusal is None else dict(self._last_refusal),
        }

    def refresh(self) -> str | None:
        """Check the alias now (waiting for a check under way) and return the version
        serving afterwards."""
        with self._lock:
            self._due = _monotonic() + self._poll
            self._guarded_check(force=True)
        return self.version

    def close(self) -> None:
        """Close the decision log this gate opened (a path given as ``decision_log``)."""
        if self._writer is not None:
            self._writer.close()

    def __repr__(self) -> str:
        return (f"LiveGate({self._ref!r}, version={self.version!r}, "
                f"poll_seconds={self._poll!r})")

    # -- following the alias -----------------------------------------------------------------
    def _poll_now(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # another thread is checking; this call decides with what serves
        try:
            if _monotonic() < self._due:
                return
            self._due = _monotonic() + self._poll
            self._guarded_check(force=False)
        finally:
            self._lock.release()

    def _guarded_check(self, *, force: bool) -> None:
        try:
            self._check(force=force)
        except Exception as exc:  # never let a check break a decision: keep what serves
            _log.exception("checking alias %s failed; keeping version %s", self._ref,
                           self.version)
            self._refuse(None, exc)

    def _check(self, *, force: bool) -> None:
        self._checks += 1
        mdir = self._mdir
        if mdir is None:
            try:
                mdir = self._mdir = resolve_reference(self._ref).parent
            except ArtifactError as exc:
                self._refuse(None, exc)
                return
        ident = _identity(mdir / ALIASES_FILE)
        steady = self._refused is None and self._served is not None
        if (steady and not force and ident is not None and ident == self._ident
                and time.time_ns() - max(ident[3], ident[4]) >= _RACY_NS):
            return
        try:
            entry = self._entry(mdir)
        except _AliasGone as exc:
            self._ident = ident
            self._withdraw(exc)
            return
        except ArtifactError as exc:  # torn or unreadable: what the alias names is unknown
            self._ident = ident
            self._refuse(None, exc)
            return
        self._ident = ident
        if entry == self._served:
            if self._refused is not None:
                _log.info("alias %s points at %s again, which serves", self._ref, entry[0])
                self._refused = None
            return
        self._load(entry)

    def _entry(self, mdir: Path) -> _Entry:
        entry = read_aliases(mdir)["aliases"].get(self._alias)
        if entry is None:  # the file reads and does not name it, or is absent
            if not os.path.isdir(mdir):
                raise _AliasGone(f"{mdir}: the model folder is gone (no alias "
                                 f"{self._alias!r})")
            raise _AliasGone(f"{mdir / ALIASES_FILE}: no alias {self._alias!r}")
        return entry["version"], entry.get("manifest_sha256")

    def _withdraw(self, exc: _AliasGone) -> None:
        """The alias no longer names any version: nothing serves, every decision ABSTAINs."""
        if self._served is not None:
            # _refuse, seeing nothing served, puts an ABSTAIN gate in place with the reason
            exc = _AliasGone(f"alias {self._alias!r} is gone, version {self._served[0]} no "
                             f"longer serves: {exc}")
            self._served, self._since, self._refused = None, None, None
        self._refuse(None, exc)

    def _load(self, entry: _Entry) -> None:
        try:
            gate = gate_from_artifact(Gate, self._ref, strict=True, trusted_keys=self._keys,
                                      decision_log=self._record if self._sink else None)
        except Exception as exc:  # refused, or unreadable: never serve what was not verified
            self._refuse(entry, exc)
            return
        old, had = self._gate.artifact_version, self._served
        # The alias may have moved between reading the entry and loading through it: what
        # serves is what the loader verified, and the entry is read again next check.
        if gate.artifact_version == entry[0]:
            self._served = entry
        else:
            self._served, self._ident = (str(gate.artifact_version), None), None
        self._since = utc_now_iso()
        self._gate = gate
        self._refused = None
        if had is not None:
            self._swaps += 1
        _log.info("%s: version %s serves (was %s)", self._ref, gate.artifact_version, old)

    def _refuse(self, entry: _Entry | None, exc: BaseException) -> None:
        reason = str(exc) or type(exc).__name__
        info = {"version": None if entry is None else entry[0],
                "manifest_sha256": None if entry is None else entry[1],
                "reason": reason, "utc": utc_now_iso()}
        prev = self._refused
        if prev is None or (prev["version"], prev["manifest_sha256"], prev["reason"]) != (
                info["version"], info["manifest_sha256"], reason):
            self._refusals += 1
            if self._served is None:
                _log.warning("%s refused, the gate abstains: %s", self._ref, reason)
                self._gate = Gate(refusal=f"artifact refused: {reason}",
                                  decision_log=self._record if self._sink else None)
            else:
                _log.warning("%s refused, version %s keeps serving: %s", self._ref,
                             self._gate.artifact_version, reason)
        self._refused = info
        self._last_refusal = info

    def _record(self, record: dict[str, Any]) -> None:
        refused = self._refused
        if refused is not None:
            record["refused"] = {"version": refused["version"], "reason": refused["reason"]}
        sink = self._sink
        if sink is not None:
            sink(record)
