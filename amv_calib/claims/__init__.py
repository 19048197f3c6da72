"""Logs and tables -> validated claim outcomes.

Ingest of CSV, Parquet and JSONL claim tables (every row accepted or rejected with a reason),
the one timestamp rule every stage reads times by (``parse_timestamps``), the decision-log x
outcome join (``label``), memory-store adapters (mem0, Graphiti) and the synthetic worlds used
by the demo and the tests.
"""

from __future__ import annotations

from amv_calib.claims._adapters import (
    ADAPTER_UNJOINED_REASONS,
    DEFAULT_FEATURES,
    AdapterReport,
    graphiti_adapter,
    graphiti_edges_to_claims,
    load_graphiti_edges,
    load_mem0_history,
    load_uses_table,
    mem0_adapter,
    mem0_history_to_claims,
)
from amv_calib.claims._ingest import (
    CLAIMS_SCHEMA,
    DEFAULT_CHUNKSIZE,
    FORMATS,
    Format,
    IngestSummary,
    detect_format,
    ingest_file,
    iter_claim_chunks,
    load_claims,
)
from amv_calib.claims._labels import (
    OUTCOME_STATUSES,
    UNJOINED_REASONS,
    JoinReport,
    LogEntries,
    NoisyLabelFit,
    SoftLabels,
    fit_noisy_labels,
    label_claims,
    load_outcomes,
    read_uses,
)
from amv_calib.claims._synth import (
    CLAIM_COLUMNS,
    EPOCH_START,
    FAMILIES,
    Family,
    family_probability,
    synth_claims,
    synth_episodes,
    true_probability,
    write_claims,
    write_episodes,
)
from amv_calib.claims._times import ParsedTimestamps, parse_timestamps

__all__ = [
    "ADAPTER_UNJOINED_REASONS",
    "CLAIMS_SCHEMA",
    "CLAIM_COLUMNS",
    "DEFAULT_CHUNKSIZE",
    "DEFAULT_FEATURES",
    "EPOCH_START",
    "FAMILIES",
    "FORMATS",
    "OUTCOME_STATUSES",
    "UNJOINED_REASONS",
    "AdapterReport",
    "Family",
    "Format",
    "IngestSummary",
    "JoinReport",
    "LogEntries",
    "NoisyLabelFit",
    "ParsedTimestamps",
    "SoftLabels",
    "detect_format",
    "family_probability",
    "fit_noisy_labels",
    "graphiti_adapter",
    "graphiti_edges_to_claims",
    "ingest_file",
    "iter_claim_chunks",
    "label_claims",
    "load_claims",
    "load_graphiti_edges",
    "load_mem0_history",
    "load_outcomes",
    "load_uses_table",
    "mem0_adapter",
    "mem0_history_to_claims",
    "parse_timestamps",
    "read_uses",
    "synth_claims",
    "synth_episodes",
    "true_probability",
    "write_claims",
    "write_episodes",
]
