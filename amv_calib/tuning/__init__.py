"""Episodes -> replay -> tuned thresholds: the frozen action episodes, their replay under every
policy, and the Optuna search of the gate's thresholds.
"""

from __future__ import annotations

from amv_calib.tuning._replay import (
    DEFAULT_TAU,
    LAMBDA_EVAL,
    METRICS,
    POLICIES,
    POLICY_LABELS,
    EpisodeSet,
    MetricCI,
    Outcomes,
    Policy,
    ReplayResult,
    answer_uniform,
    episode_set,
    format_table,
    load_episodes,
    read_episodes,
    replay,
    replay_many,
    stream_uniform,
    summarise,
)
from amv_calib.tuning._search import (
    SEARCH_SPACE,
    TransferResult,
    TuneResult,
    fail_abandoned_trials,
    make_storage,
    resolve_calibrator,
    split_episodes,
    transfer_check,
    tune_thresholds,
)

__all__ = [
    "DEFAULT_TAU",
    "LAMBDA_EVAL",
    "METRICS",
    "POLICIES",
    "POLICY_LABELS",
    "SEARCH_SPACE",
    "EpisodeSet",
    "MetricCI",
    "Outcomes",
    "Policy",
    "ReplayResult",
    "TransferResult",
    "TuneResult",
    "answer_uniform",
    "episode_set",
    "fail_abandoned_trials",
    "format_table",
    "load_episodes",
    "make_storage",
    "read_episodes",
    "replay",
    "replay_many",
    "resolve_calibrator",
    "split_episodes",
    "stream_uniform",
    "summarise",
    "transfer_check",
    "tune_thresholds",
]
