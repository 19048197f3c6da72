"""The outcome log: what the agent learnt later about its actions, in the format ``label`` reads.

Standard library only, like the decision log (:mod:`amv_calib.gate._decision_log`), whose
locked-append primitive it shares: one JSON object per line, written in one ``O_APPEND``
``os.write``, so threads and processes never interleave inside a line, a crash loses at most
the line being written, and a torn tail is repaired when the file is opened again.

Format
------
::

    {"time": "2026-12-02T09:20:11.000000Z", "action_id": "tx-1", "claim_id": "iban-42",
     "premise_id": "p1", "violated": true, "source": "bank-webhook"}

``time`` (ISO-8601 UTC), ``action_id`` and ``claim_id`` (strings or ``null``, at least one
of them) and ``violated`` are the columns ``amv-calib label`` joins on (docs/logs.md, "Record
outcomes"); ``premise_id`` and ``source`` are kept for people and ignored by the join, which
matches a premise of an action by its claim id.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from amv_calib.contract import utc_now_iso
from amv_calib.gate._closing import Closing
from amv_calib.gate._decision_log import JsonLinesAppender

__all__ = ["OutcomeLog"]

def _identifier(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} must be a non-empty string or None")
    return value


def _is_bool(value: Any) -> bool:
    # a numpy bool too (a 0-d boolean), without importing numpy
    return isinstance(value, bool) or (getattr(value, "ndim", None) == 0
                                       and getattr(getattr(value, "dtype", None), "kind",
                                                   None) == "b")


def _utc_text(value: Any) -> str:
    if value is None:
        return utc_now_iso()
    when = value
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"time={value!r} is not ISO-8601") from None
    if not isinstance(when, datetime):
        raise ValueError(f"time={value!r} must be a datetime, ISO-8601 text or None (now)")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"time={value!r} has no UTC offset; give one (a naive time may be "
                         f"local time)")
    try:
        utc = when.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is in the year 0 in UTC
        raise ValueError(f"time={value!r} is out of range: in UTC it falls outside the years "
                         f"1 to 9999") from None
    # isoformat, not strftime: glibc's %Y does not pad a year before 1000 to four digits
    return utc.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class OutcomeLog(Closing):
    """Append outcome records (module docstring) to a JSON-lines file that ``label`` reads.

    Parameters
    ----------
    path : str or os.PathLike
        The file (``.jsonl``, so that ``label`` knows its type); created with its folders
        if missing, appended to otherwise.
    fsync : bool, default False
        Force every record to disk (a disk flush per record).

    Notes
    -----
    Thread-safe, and several processes may append to one file, each with its own
    ``OutcomeLog``. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        name = os.fspath(path)
        if not name.lower().endswith((".jsonl", ".ndjson")):
            raise ValueError(f"path={name!r} must end in .jsonl: `amv-calib label` reads an "
                             f"outcome file's type from its suffix")
        self._log = JsonLinesAppender(name, fsync=fsync, what="outcome log")

    @property
    def path(self) -> str:
        """The file appended to."""
        return self._log.path

    @property
    def records_written(self) -> int:
        """Records this object has written."""
        return self._log.lines_written

    def record(self, *, action_id: str | None = None, violated: bool,
               claim_id: str | None = None, premise_id: str | None = None,
               time: datetime | str | None = None, source: str | None = None
               ) -> dict[str, Any]:
        """Append one outcome and return the record written.

        Parameters
        ----------
        action_id : str, optional
            The action (``CandidateAction.action_id``) the outcome is about. Alone, it is the
            action's truth: ``violated=False`` means every premise held.
        violated : bool
            Whether the claim (or, without ``claim_id``, some premise of the action) was
            wrong.
        claim_id : str, optional
            The claim: with ``action_id``, its truth in that action; alone, its truth as of
            ``time`` (labelling its uses since its previous outcome).
        premise_id : str, optional
            The premise of the action that used the claim, for people; needs ``claim_id``,
            because the label join matches a premise by its claim id.
        time : datetime or ISO-8601 text, optional
            When it was learnt (with a UTC offset); default now. An outcome labels only the
            uses at or before it.
        source : str, optional
            Who reported it ("bank-webhook", "user"), for people.

        Raises
        ------
        ValueError
            Naming the argument: neither ``action_id`` nor ``claim_id``, ``premise_id``
            without ``claim_id``, a ``violated`` that is not a bool, an empty id, a time
            that is not ISO-8601, has no offset or falls outside the years 1 to 9999 in UTC.
        OSError
            The record could not be written (the log is closed, the disk is full).
        """
        action_id = _identifier(action_id, "action_id")
        claim_id = _identifier(claim_id, "claim_id")
        premise_id = _identifier(premise_id, "premise_id")
        if action_id is None and claim_id is None:
            raise ValueError("an outcome needs action_id or claim_id (or both)")
        if premise_id is not None and claim_id is None:
            raise ValueError(f"premise_id={premise_id!r} needs claim_id: the label join "
                             f"matches a premise of an action by its claim id")
        if not _is_bool(violated):
            raise ValueError(f"violated={violated!r} must be a bool")
        if source is not None and not isinstance(source, str):
            raise ValueError(f"source={source!r} must be a string or None")
        rec = {"time": _utc_text(time), "action_id": action_id, "claim_id": claim_id,
               "premise_id": premise_id, "violated": bool(violated), "source": source}
        self._log.append(rec)
        return rec

    def close(self) -> None:
        """Close the file; further records raise ``OSError``. Idempotent."""
        self._log.close()

    def __repr__(self) -> str:
        return f"OutcomeLog({self.path!r}, fsync={self._log.fsync})"
