"""Logs and tables -> validated claim outcomes.

Ingest of CSV, Parquet and JSONL claim tables (every row accepted or rejected with a reason),
the one timestamp rule every stage reads times by (``parse_timestamps``), the decision-log x
outcome join (``label``) with the episodes and verifier reliabilities it yields, which
command wrote which output (``written_by.json``) and memory-store adapters (mem0, Graphiti).
The synthetic worlds used by the demo and the tests are :mod:`amv_calib.datasets`.
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
from amv_calib.claims._episodes import (
    ACTION_REASONS,
    DEFAULT_MIN_VERIFIER_CALLS,
    EpisodeReport,
    LogLabels,
    beta_interval,
    label_logs,
    label_logs_parts,
    verifier_reliabilities,
    write_episodes_jsonl,
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
from amv_calib.claims._ingest_columns import LABEL_COLUMNS
from amv_calib.claims._join import (
    JoinedUses,
    JoinReport,
    SoftLabels,
    join_logs,
    label_claims,
    read_with_outcomes,
    use_entries,
)
from amv_calib.claims._logread import LogEntries, read_uses
from amv_calib.claims._noisy import NoisyLabelFit, fit_noisy_labels
from amv_calib.claims._outcomes import OUTCOME_STATUSES, load_outcomes
from amv_calib.claims._outputs import (
    LABEL_FOLDER_FILES,
    TABLE_SUFFIXES,
    WRITTEN_BY,
    OutputConflictError,
    claim_outputs,
    label_report_paths,
    record_outputs,
    unknown_table_ending,
    write_claims_table,
    write_join_report,
    write_label_folder,
    write_label_table,
)
from amv_calib.claims._sql import UNJOINED_REASONS
from amv_calib.claims._times import ParsedTimestamps, parse_timestamps
from amv_calib.settings import LabelOptions

__all__ = [
    "ACTION_REASONS",
    "ADAPTER_UNJOINED_REASONS",
    "CLAIMS_SCHEMA",
    "DEFAULT_CHUNKSIZE",
    "DEFAULT_FEATURES",
    "DEFAULT_MIN_VERIFIER_CALLS",
    "FORMATS",
    "LABEL_COLUMNS",
    "LABEL_FOLDER_FILES",
    "LabelOptions",
    "OUTCOME_STATUSES",
    "TABLE_SUFFIXES",
    "UNJOINED_REASONS",
    "WRITTEN_BY",
    "AdapterReport",
    "EpisodeReport",
    "Format",
    "IngestSummary",
    "JoinReport",
    "JoinedUses",
    "LogEntries",
    "LogLabels",
    "NoisyLabelFit",
    "OutputConflictError",
    "ParsedTimestamps",
    "SoftLabels",
    "beta_interval",
    "claim_outputs",
    "detect_format",
    "fit_noisy_labels",
    "graphiti_adapter",
    "graphiti_edges_to_claims",
    "ingest_file",
    "iter_claim_chunks",
    "join_logs",
    "label_claims",
    "label_logs",
    "label_logs_parts",
    "label_report_paths",
    "load_claims",
    "load_graphiti_edges",
    "load_mem0_history",
    "load_outcomes",
    "load_uses_table",
    "mem0_adapter",
    "mem0_history_to_claims",
    "parse_timestamps",
    "read_uses",
    "read_with_outcomes",
    "use_entries",
    "record_outputs",
    "unknown_table_ending",
    "verifier_reliabilities",
    "write_claims_table",
    "write_episodes_jsonl",
    "write_join_report",
    "write_label_folder",
    "write_label_table",
]
