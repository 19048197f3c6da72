"""The parts of the label join that another engine calls instead of copying them.

:mod:`amv_calib.spark` runs the label join on Spark with these (docs/scale.md): the
decision-log reader over consecutive bytes of a log, the data-contract check of premise
entries, the soft-label posterior, the claim rows, the outcome statuses and the report, and
the episode rule. One implementation of each rule: the single-machine join uses the same
functions. :mod:`amv_calib.monitoring` matches keys by the same string hashes
(:func:`hash_strings`, :func:`sort_keys`) that the reader codes a big log's action ids with.
"""

from __future__ import annotations

from amv_calib.claims._codes import categorical
from amv_calib.claims._duckjoin import VIEWS, kind_bad, signal_weights
from amv_calib.claims._episodes import (
    ACTION_REASONS,
    EpisodeReport,
    LogLabels,
    build_episodes,
    verifier_reliabilities,
)
from amv_calib.claims._hashing import GOLDEN, hash_strings, mix64, sort_keys
from amv_calib.claims._join import (
    UNCHECKED_REFUSAL,
    JoinReport,
    SoftLabels,
    invalid_detail,
    join_report,
    llr_per_use,
    verifier_labels,
)
from amv_calib.claims._logread import EntryAccumulator, PathLike, read_chunks
from amv_calib.claims._noisy import label_rows, posterior
from amv_calib.claims._outcomes import load_outcomes, outcome_report, outcome_status
from amv_calib.claims._sql import (
    FEW,
    INVALID_USE,
    JOINED,
    NO_OUTCOME_YET,
    RESULTS,
    UNJOINED_REASONS,
    join_statements,
    values_ok_expression,
)
from amv_calib.claims._times import MISSING_US, us_to_datetime

__all__ = [
    "FEW",
    "INVALID_USE",
    "JOINED",
    "NO_OUTCOME_YET",
    "RESULTS",
    "UNCHECKED_REFUSAL",
    "VIEWS",
    "join_statements",
    "kind_bad",
    "llr_per_use",
    "signal_weights",
    "values_ok_expression",
    "verifier_labels",
    "ACTION_REASONS",
    "GOLDEN",
    "MISSING_US",
    "UNJOINED_REASONS",
    "EntryAccumulator",
    "EpisodeReport",
    "JoinReport",
    "LogLabels",
    "PathLike",
    "SoftLabels",
    "build_episodes",
    "categorical",
    "hash_strings",
    "invalid_detail",
    "join_report",
    "label_rows",
    "load_outcomes",
    "mix64",
    "outcome_report",
    "outcome_status",
    "posterior",
    "read_chunks",
    "sort_keys",
    "us_to_datetime",
    "verifier_reliabilities",
]
