"""Synthetic worlds with a known truth, for the demo, the tests and the benchmarks.

Claims and action episodes drawn from ten perturbation families whose violation laws are
known (``_synth``: ``p_true`` is the oracle a calibrator can at best reach), and simulated
production (``_production``): the project's own gate, loaded from an artifact, writing its
decision log over synthetic actions, with the outcomes that arrive later. Like
:mod:`sklearn.datasets`, this is where data is made, not where it is read: reading and
labelling real logs and tables is :mod:`amv_calib.claims`'s.
"""

from __future__ import annotations

from amv_calib.datasets._common import EPOCH_START
from amv_calib.datasets._kinds import DEFAULT_KIND_WORLD, KindLaw, KindWorld, synth_kind_claims
from amv_calib.datasets._production import SimulatedLogs, simulate_production
from amv_calib.datasets._synth import (
    CLAIM_COLUMNS,
    FAMILIES,
    Family,
    family_probability,
    synth_claims,
    synth_episodes,
    true_probability,
    write_claims,
    write_episodes,
)

__all__ = [
    "CLAIM_COLUMNS",
    "DEFAULT_KIND_WORLD",
    "EPOCH_START",
    "FAMILIES",
    "Family",
    "KindLaw",
    "KindWorld",
    "SimulatedLogs",
    "family_probability",
    "simulate_production",
    "synth_claims",
    "synth_episodes",
    "synth_kind_claims",
    "true_probability",
    "write_claims",
    "write_episodes",
]
