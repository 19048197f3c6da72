"""The parts of the label join that another engine calls instead of copying them.

:mod:`amv_calib.spark` runs the label join on Spark with these (docs/scale.md): the
decision-log reader over consecutive bytes of a log, the data-contract check of premise
entries, the soft-label posterior, the claim rows, the outcome statuses and the report, and
the episode rule. One implementation of each rule: the single-machine join uses the same
functions.
"""

from __future__ import annotations

from amv_calib.claims._episodes import (
    ACTION_REASONS,
    EpisodeReport,
    LogLabels,
    verifier_reliabilities,
)
from amv_calib.claims._episodes import _episodes as build_episodes
from amv_calib.claims._labels import (
    UNJOINED_REASONS,
    JoinReport,
    PathLike,
    SoftLabels,
    load_outcomes,
)
from amv_calib.claims._labels import _Acc as EntryAccumulator
from amv_calib.claims._labels import _categorical as categorical
from amv_calib.claims._labels import _invalid_detail as invalid_detail
from amv_calib.claims._labels import _join_report as join_report
from amv_calib.claims._labels import _label_rows as label_rows
from amv_calib.claims._labels import _outcome_report as outcome_report
from amv_calib.claims._labels import _outcome_status as outcome_status
from amv_calib.claims._labels import _posterior as posterior
from amv_calib.claims._labels import _read_chunks as read_chunks
from amv_calib.claims._labels import _us_to_datetime as us_to_datetime

__all__ = [
    "ACTION_REASONS",
    "UNJOINED_REASONS",
    "EntryAccumulator",
    "EpisodeReport",
    "JoinReport",
    "LogLabels",
    "PathLike",
    "SoftLabels",
    "build_episodes",
    "categorical",
    "invalid_detail",
    "join_report",
    "label_rows",
    "load_outcomes",
    "outcome_report",
    "outcome_status",
    "posterior",
    "read_chunks",
    "us_to_datetime",
    "verifier_reliabilities",
]
