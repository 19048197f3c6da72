"""The label join on Spark: the same claim rows, report counts, episodes and verifiers.

What runs where (docs/scale.md):

- **Spark executors**: reading the decision logs, by byte ranges (``split_bytes``) of each
  file, with the single-machine parser (:func:`amv_calib.claims.engine.read_chunks`: the
  same aliases, types, blank / torn / corrupt lines, line numbers) and the single-machine
  message of each premise entry that breaks the data contract (``invalid_detail``);
  Parquet decision logs
  (``.parquet``/``.pq``) are read by row groups, each row a record (line = row number).
  Every executor needs amv-calib installed.
- **Spark SQL**: the join, as one machine runs it on DuckDB: the statements of
  :mod:`amv_calib.claims._sql` (:mod:`amv_calib.spark._sqlrun`) over its input relations,
  built from the parsed records (each id an integer code) and the outcome records. They
  decide the uses (one per action and premise), which break the data contract, the
  verdict of each, the verifier answers (the multiset rule) and each outcome record's
  status.
- **The executors, for the results**: every use with its wide columns, range-partitioned
  and sorted by entry id (log order), with what the join decided; each task turns them into
  claim rows with the single-machine code (the LLR sum of each use, ``verifier_labels``,
  ``posterior``, ``label_rows``) and writes them, with its unjoined
  uses, as Parquet part files into a scratch folder (``scratch``: a location the driver
  reads too), and reports one line of counts.
- **The driver**: the list of byte ranges and their line offsets (a few numbers per range),
  the outcome records (read and validated by :func:`amv_calib.claims.load_outcomes`; they are
  one per several decision lines, and their file formats stay the single-machine ones) and
  their statuses, the weight ``log(r / (1 - r))`` of each distinct declared reliability, the
  categories (calibrators, regimes), the counts of each task (``use_id`` = the task's first
  use + the position in the task), and the report. :func:`write_label_spark` streams the
  part files, one batch at a time, into ``label``'s files (the same bytes);
  :func:`label_claims_spark` and :func:`label_logs_spark` read them back into memory.
  Episodes: the per-action rule runs on the executors (``build_episodes`` of
  :mod:`amv_calib.claims.engine` on each group of actions, the same code), and the
  episode lines, sorted by file and line, are written as part files that the driver
  streams (one part at a time); the verifier reliabilities are computed by the driver from
  per-verifier answer counts that Spark aggregates
  (:func:`~amv_calib.claims.verifier_reliabilities`, the same code).

The driver never holds the parsed log (records, premise entries, signals) nor, writing the
files, the claim rows, the unjoined uses or the episodes.

Floating point: the LLR of a use is summed by the single-machine code in its order (each
distinct answer at its first signal), with the weights computed by numpy, so
``signal_llr`` and ``label_weight`` are equal bit for bit.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import pandas as pd

from amv_calib.claims.engine import (
    INVALID_USE,
    JOINED,
    NO_OUTCOME_YET,
    UNCHECKED_REFUSAL,
    UNJOINED_REASONS,
    JoinReport,
    PathLike,
    SoftLabels,
    categorical,
    join_report,
    label_rows,
    llr_per_use,
    load_outcomes,
    outcome_report,
    posterior,
    us_to_datetime,
    verifier_labels,
)
from amv_calib.exceptions import ConfigError, check_choice
from amv_calib.spark._read import (
    _FEATS,
    _arrow_schema,
    _batch,
    _expand,
    _filesystem,
    _read_logs,
)
from amv_calib.spark._sqlrun import relations, run_join_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_log = logging.getLogger(__name__)

#: Bytes of a decision log per Spark task (a Parquet log is split by row groups).
DEFAULT_SPLIT_BYTES: Final = 64 << 20


# -- categories of the driver's frames ------------------------------------------------------

def _first_seen(parsed: DataFrame, column: str) -> list[str]:
    """The distinct values of a record column in order of first appearance in the logs (the
    categories the single-machine reader gives it)."""
    from pyspark.sql import functions as F

    rows = parsed.filter(F.col("kind") == 0).filter(F.col(column).isNotNull()) \
        .groupBy(column).agg(F.min(F.struct("file", "line")).alias("at")) \
        .orderBy("at").select(column).collect()
    return [str(r[0]) for r in rows]


def _str(values: Any) -> Any:
    return pd.array(values, dtype="str")


def _cat(values: Any, categories: Sequence[str]) -> pd.Categorical:
    dtype = pd.CategoricalDtype(pd.Index(list(categories), dtype="str"))
    return pd.Categorical(pd.array(values, dtype="str"), dtype=dtype)


def _order_cat(values: Any) -> pd.Categorical:
    """A categorical of the values present, in order of first appearance."""
    arr = pd.array(values, dtype="str")
    codes, uniques = pd.factorize(arr)
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype="str"))


def _entries(parsed: DataFrame) -> DataFrame:
    """One row per premise entry, with its record's columns and its premise key (kind, value,
    and the string the outputs name it by: premise id, else claim id, else ``#position``)."""
    from pyspark.sql import functions as F

    cols = ("rec", "file", "line", "t_us", "action_id", "tool_name", "calibrator", "regime")
    e = parsed.filter("kind = 0").select(*cols, F.explode("premises").alias("e")) \
        .select(*cols, "e.*")
    return e.withColumns({
        "pk_kind": F.when(F.col("premise_id").isNotNull(), 0)
        .when(F.col("claim_id").isNotNull(), 1).otherwise(2),
        "pk_val": F.coalesce("premise_id", "claim_id", F.col("pidx").cast("string")),
        "pk_str": F.coalesce("premise_id", "claim_id",
                             F.concat(F.lit("#"), F.col("pidx").cast("string"))),
    })


# ---------------------------------------------------------------------------------------------
# The claim rows and the unjoined uses: computed and written by the executors
# ---------------------------------------------------------------------------------------------
#: What each task of the row stage reports: its partition (in ``eid`` order) and attempt (which
#: names its part files, so that a retried or speculative attempt never writes into another's
#: files), its uses, its claim rows, its outcome- and verifier-labelled uses, and its unjoined
#: uses by reason.
_PART_SUMMARY: Final = ("part int, attempt int, uses long, rows long, hard long, soft long, "
                        "reasons array<long>")
#: Rows of a part file the driver reads at a time.
_READ_ROWS: Final = 1 << 16


def _part_schemas() -> tuple[Any, Any]:
    """The Arrow schemas of the claim-row and unjoined-use part files."""
    import pyarrow as pa

    s, f, i64 = pa.string(), pa.float64(), pa.int64()
    claims = pa.schema([
        ("use", i64), ("claim_id", s), ("t_us", i64), *((c, f) for c in _FEATS),
        ("memory_kind", s), ("violated", pa.bool_()), ("label_weight", f), ("action_id", s),
        ("tool_name", s),
        ("pk_str", s), ("from_verifier", pa.int8()), ("signal_llr", f), ("p_logged", f),
        ("calibrator", s), ("regime", s), ("file", pa.int32()), ("line", i64)])
    uses = pa.schema([("file", pa.int32()), ("line", i64), ("action_id", s), ("pk_str", s),
                      ("claim_id", s), ("t_us", i64), ("reason", pa.int8()), ("detail", s)])
    return claims, uses


def _llr(answers: Any) -> tuple[Any, Any]:
    """Per use of a batch (``answers``: each use's answers, ``first`` and ``contrib``, by
    first signal; null for none) whether it has answers, and their summed log-likelihood
    ratio as one machine sums them (:func:`~amv_calib.claims.engine.llr_per_use`; 0 for
    none)."""
    import pyarrow.compute as pc

    contrib = pc.list_flatten(answers).field("contrib").to_numpy(zero_copy_only=False)
    uid = pc.list_parent_indices(answers).to_numpy(zero_copy_only=False)
    sig_use, sig_llr = llr_per_use(pd.DataFrame({"uid": uid, "contrib": contrib}))
    has_sig = np.zeros(len(answers), dtype=bool)
    has_sig[sig_use] = True
    llr = np.zeros(len(answers))
    llr[sig_use] = sig_llr
    return has_sig, llr


class _PartWriter:
    """One task of the row stage: the uses of one range of ``eid`` in ``eid`` order (log
    order), turned into claim rows by the single-machine ``posterior`` and ``label_rows``
    and written, with the unjoined uses, as two Parquet part files of the scratch folder."""

    def __init__(self, folder: str, part: int, attempt: int, soft_labels: str) -> None:
        self.soft_labels = soft_labels
        self.fs, inner = _filesystem(folder)
        self.paths = {k: f"{inner}/{_part_name(k, part, attempt)}" for k in ("claims", "uses")}
        self.attempt = attempt
        self.schemas = dict(zip(("claims", "uses"), _part_schemas(), strict=True))
        self.writers: dict[str, Any] = {}
        self.part = part
        self.uses = self.rows = self.hard = self.soft = 0
        self.reasons = np.zeros(len(UNJOINED_REASONS), dtype=np.int64)

    def _write(self, kind: str, cols: dict[str, Any]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if kind not in self.writers:
            self.writers[kind] = pq.ParquetWriter(self.paths[kind], self.schemas[kind],
                                                  filesystem=self.fs)
        schema = self.schemas[kind]
        self.writers[kind].write_table(pa.table(
            [pa.array(cols[f.name], type=f.type) if not isinstance(cols[f.name], pa.Array)
             else cols[f.name].cast(f.type) for f in schema], schema=schema))

    def add(self, batch: Any) -> None:
        """The claim rows and unjoined uses of the next batch of uses."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def arr(k: str, fill: Any, dtype: Any) -> Any:
            return pc.fill_null(batch.column(k), fill).to_numpy(zero_copy_only=False).astype(dtype)

        nan = float("nan")
        reason = arr("reason", NO_OUTCOME_YET, np.int8)  # the SQL join's
        # each use the SQL refused has the message of the contract's checks (the executors'
        # parse), as on one machine
        refused = pa.array(reason == INVALID_USE)
        if batch.column("detail").filter(refused).null_count:
            raise RuntimeError(UNCHECKED_REFUSAL)
        p = arr("p", nan, np.float64)
        has_sig, llr = _llr(batch.column("answers"))
        hard, soft = verifier_labels(reason, has_sig, np.isnan(llr), self.soft_labels)
        si = np.flatnonzero(soft)
        rows, viol, weight, from_verifier = label_rows(
            hard, soft, arr("label", False, bool), posterior(p[si], llr[si]))
        take = pa.array(rows, type=pa.int64())
        self._write("claims", {
            "use": self.uses + rows, "violated": viol, "label_weight": weight,
            "from_verifier": from_verifier.astype(np.int8),
            "signal_llr": np.where(has_sig[rows], llr[rows], 0.0), "p_logged": p[rows],
            **{c: arr(c, nan, np.float64)[rows] for c in _FEATS},
            **{k: pc.take(batch.column(k), take) for k in ("claim_id", "t_us", "memory_kind",
                                                   "action_id", "tool_name", "pk_str",
                                                   "calibrator", "regime", "file", "line")}})
        out = np.flatnonzero(reason != JOINED)
        self._write("uses", {
            "reason": reason[out].astype(np.int8),
            **{k: pc.take(batch.column(k), pa.array(out, type=pa.int64()))
               for k in ("file", "line", "action_id", "pk_str", "claim_id", "t_us",
                         "detail")}})
        self.uses += batch.num_rows
        self.rows += rows.size
        self.hard += int(hard.sum())
        self.soft += int(soft.sum())
        self.reasons += np.bincount(reason[out], minlength=len(UNJOINED_REASONS))

    def close(self) -> dict[str, Any]:
        """Close the part files; this task's counts (:data:`_PART_SUMMARY`)."""
        for w in self.writers.values():
            w.close()
        return {"part": [self.part], "attempt": [self.attempt], "uses": [self.uses],
                "rows": [self.rows],
                "hard": [self.hard], "soft": [self.soft], "reasons": [self.reasons.tolist()]}


def _task_attempt() -> tuple[int, int]:
    """The running task's partition and attempt (0, 0 outside a task): a part file's name."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)


def _part_name(kind: str, part: int, attempt: int) -> str:
    return f"{kind}-{part:05d}-{attempt}.parquet"


def _parts_fn(folder: str, soft_labels: str) -> Any:
    """The mapInArrow function of the row stage (one :class:`_PartWriter` per task)."""
    schema = _arrow_schema(_PART_SUMMARY)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        writer = _PartWriter(folder, *_task_attempt(), soft_labels)
        for batch in batches:
            if batch.num_rows:
                writer.add(batch)
        yield pa.RecordBatch.from_pydict(writer.close(), schema=schema)

    return run


#: What each task of the episode stage reports: its part, attempt and episodes written.
_EPISODE_PART_SUMMARY: Final = "part int, attempt int, rows long"


def _episode_parts_fn(folder: str) -> Any:
    """The mapInArrow function that writes one task's episodes (``episode``, ``action``; a
    range of (file, line), sorted) as a Parquet part file of the scratch folder."""
    schema = _arrow_schema(_EPISODE_PART_SUMMARY)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        part, attempt = _task_attempt()
        fs, inner = _filesystem(folder)
        cols = pa.schema([("episode", pa.string()), ("action", pa.string())])
        rows = 0
        with pq.ParquetWriter(f"{inner}/{_part_name('episodes', part, attempt)}", cols,
                              filesystem=fs) as writer:
            for batch in batches:
                if batch.num_rows:
                    writer.write_table(pa.table([batch.column("episode"),
                                                 batch.column("action")], schema=cols))
                    rows += batch.num_rows
        yield pa.RecordBatch.from_pydict({"part": [part], "attempt": [attempt],
                                          "rows": [rows]}, schema=schema)

    return run


def _claim_frame(batch: Any, first_use: int, names: list[str], cal_cats: list[str],
                 reg_cats: list[str], kinds: bool) -> pd.DataFrame:
    """Claim rows of a part file as the single-machine ``label_claims`` builds them
    (``memory_kind`` when ``kinds``: some premise of the logs gives a kind)."""
    def a(k: str) -> Any:
        return batch.column(k).to_numpy(zero_copy_only=False)

    return pd.DataFrame({
        "claim_id": _str(a("claim_id")),
        "timestamp": us_to_datetime(a("t_us").astype(np.int64)),
        **{c: a(c) for c in _FEATS if c != "contradiction_flag"},
        "contradiction_flag": a("contradiction_flag") > 0.5,
        **({"memory_kind": _str(a("memory_kind"))} if kinds else {}),
        "violated": a("violated").astype(bool),
        "label_weight": a("label_weight"),
        "action_id": _str(a("action_id")),
        "tool_name": _str(a("tool_name")),
        "premise_id": _str(a("pk_str")),
        "use_id": first_use + a("use").astype(np.int64),
        "label_source": categorical(a("from_verifier").astype(np.int64),
                                    ["outcome", "verifier"]),
        "signal_llr": a("signal_llr"),
        "p_logged": a("p_logged"),
        "calibrator": _cat(a("calibrator"), cal_cats),
        "regime": _cat(a("regime"), reg_cats),
        "decision_file": categorical(a("file").astype(np.int64), names),
        "decision_line": a("line").astype(np.int64),
    })


def _use_frame(batch: Any, names: list[str]) -> pd.DataFrame:
    """Unjoined uses of a part file: the columns of ``JoinReport.unjoined_uses`` (strings
    where the single-machine report has categoricals; the same values)."""
    def a(k: str) -> Any:
        return batch.column(k).to_numpy(zero_copy_only=False)

    detail = a("detail")
    return pd.DataFrame({
        "decision_file": categorical(a("file").astype(np.int64), names),
        "decision_line": a("line").astype(np.int64),
        "action_id": _str(a("action_id")),
        "premise_id": _str(a("pk_str")),
        "claim_id": _str(a("claim_id")),
        "time": us_to_datetime(a("t_us").astype(np.int64)),
        "reason": categorical(a("reason").astype(np.int64), UNJOINED_REASONS),
        "detail": _str(np.where(pd.isna(detail), "", detail)),
    })


class _Labelled:
    """A label join on Spark whose claim rows and unjoined uses are part files of a scratch
    folder (one pair per task, in log order): the report, and the parts read back one
    batch at a time."""

    def __init__(self, folder: str, summary: pd.DataFrame, report: JoinReport,
                 names: list[str], cal_cats: list[str], reg_cats: list[str],
                 frames: dict[str, Any], *, kinds: bool, soft_labels: str) -> None:
        self.soft_labels = soft_labels
        self.folder = folder
        self.kinds = kinds  # the claim rows have ``memory_kind``
        self.summary = summary
        self.report = report
        self.names = names
        self.cats = (cal_cats, reg_cats)
        self.frames = frames
        self.episode_summary = pd.DataFrame({"part": [], "attempt": [], "rows": []})

    def _batches(self, kind: str) -> Iterator[tuple[int, Any]]:
        """(first use of the part, batch) of every part file of ``kind``, in log order; one
        empty batch when there are none."""
        import pyarrow.parquet as pq

        fs, inner = _filesystem(self.folder)
        first = 0
        for part, attempt, n_uses in zip(self.summary["part"], self.summary["attempt"],
                                         self.summary["uses"], strict=True):
            if n_uses:
                name = _part_name(kind, int(part), int(attempt))
                with fs.open_input_file(f"{inner}/{name}") as fh:
                    for batch in pq.ParquetFile(fh).iter_batches(batch_size=_READ_ROWS):
                        yield first, batch
            first += int(n_uses)
        yield first, _empty_batch(_part_schemas()[0 if kind == "claims" else 1])

    def episode_parts(self) -> Iterator[Any]:
        """The episode parts (``episode``, ``action``: pyarrow tables), in log order, written
        by :func:`_episodes_and_verifiers`."""
        import pyarrow.parquet as pq

        fs, inner = _filesystem(self.folder)
        for part, attempt, rows in zip(self.episode_summary["part"],
                                       self.episode_summary["attempt"],
                                       self.episode_summary["rows"], strict=True):
            if rows:
                name = _part_name("episodes", int(part), int(attempt))
                with fs.open_input_file(f"{inner}/{name}") as fh:
                    yield pq.read_table(fh)

    def claim_parts(self) -> Iterator[pd.DataFrame]:
        """The claim rows, in order, one part at a time (the last one empty)."""
        for first, batch in self._batches("claims"):
            yield _claim_frame(batch, first, self.names, *self.cats, self.kinds)

    def use_parts(self) -> Iterator[pd.DataFrame]:
        """The unjoined uses, in log order, one part at a time (the last one empty)."""
        for _, batch in self._batches("uses"):
            yield _use_frame(batch, self.names)

    def held(self) -> tuple[pd.DataFrame, JoinReport]:
        """The claim rows and the report with its unjoined uses, in memory (the API of
        :func:`label_claims_spark`)."""
        claims = pd.concat(list(self.claim_parts()), ignore_index=True)
        u = pd.concat(list(self.use_parts()), ignore_index=True)
        pk = u["premise_id"]
        u["action_id"] = _order_cat(u["action_id"])
        u["premise_id"] = _order_cat(pk) if pk.notna().all() and \
            not pk.str.startswith("#").any() else pk
        u["detail"] = _order_cat(u["detail"])
        self.report.unjoined_uses = u
        return claims, self.report

    def close(self) -> None:
        """Remove the part files and release the cached Spark frames."""
        _remove_folder(self.folder)
        for frame in self.frames.values():
            if hasattr(frame, "unpersist"):
                frame.unpersist()


def _remove_folder(folder: str) -> None:
    fs, inner = _filesystem(folder)
    fs.delete_dir(inner)


def _empty_batch(schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema],
                                      schema=schema)


def _check_scratch(scratch: PathLike | None, master: str) -> None:
    """Without ``scratch`` the part files go to a temporary folder of this machine, which
    only a local ``master`` shares with its executors: refuse any other master."""
    if scratch is None and not master.startswith("local"):
        raise ConfigError(
            f"the Spark label on master {master!r} needs a scratch location that the "
            "executors and this process both reach (an object-store prefix or a shared "
            "folder): give --spark-scratch URI, or [pipeline] spark_scratch")


def _scratch_folder(scratch: PathLike | None) -> str:
    """A new folder for the part files: under ``scratch`` (a path or URI the executors and
    the driver both reach), else a temporary folder of this machine (local mode)."""
    import tempfile
    import uuid

    if scratch is None:
        return tempfile.mkdtemp(prefix="amv-label-parts-")
    folder = f"{os.fspath(scratch).rstrip('/')}/label-parts-{uuid.uuid4().hex}"
    fs, inner = _filesystem(folder)
    fs.create_dir(inner, recursive=True)
    return folder


def _check_options(soft_labels: str, on_corrupt: str, split_bytes: int) -> None:
    check_choice("soft_labels", soft_labels, ("posterior", "off"))
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"))
    if isinstance(split_bytes, bool) or not isinstance(split_bytes, int) or split_bytes < 1:
        raise ValueError(f"split_bytes={split_bytes!r} must be an int >= 1")


def _label(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None,
    *,
    spark: SparkSession,
    offers: bool,
    scratch: PathLike | None,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
) -> _Labelled:
    """The label join on Spark, its rows written as part files (:class:`_Labelled`)."""
    from pyspark.sql import functions as F

    _check_options(soft_labels, on_corrupt, split_bytes)
    _check_scratch(scratch, spark.sparkContext.master or "")
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    names = _expand([os.fspath(p) for p in plist])
    out_df, out_invalid = load_outcomes([] if outcomes is None else outcomes)
    t0 = time.perf_counter()
    parsed, stats, _, kinds = _read_logs(spark, names, on_corrupt, columnar, offers,
                                         split_bytes)
    _log.info("label on Spark: logs read in %.1f s", time.perf_counter() - t0)
    entries = _entries(parsed).persist()
    n_entries = entries.count()
    rel = relations(spark, parsed, out_df)
    joined = run_join_spark(spark, rel)
    superseded = joined["superseded"]
    n_uses = n_entries - superseded.count()
    ignored = rel["signals"].count() - int(joined["signals_used"].collect()[0][0])
    _log.info("label on Spark: %d entries, %d uses, joined at %.1f s", n_entries, n_uses,
              time.perf_counter() - t0)
    # per use what the SQL decided: its reason (an UNJOINED_REASONS index, -1 joined by an
    # outcome), label, and its answers' contributions in the order of their first signals
    # (summed by the executors as one machine sums them: :func:`_llr`)
    answers = joined["answers"].groupBy("eid").agg(
        F.array_sort(F.collect_list(F.struct("first", "contrib"))).alias("answers"))
    final = entries.select("eid").join(superseded, "eid", "left_anti") \
        .join(joined["invalid_uses"].withColumn("invalid", F.lit(True)), "eid", "left") \
        .join(joined["use_verdicts"], "eid", "left").join(answers, "eid", "left").select(
            "eid", F.when(F.col("invalid"), INVALID_USE)
            .otherwise(F.coalesce(F.col("reason"), F.lit(NO_OUTCOME_YET))).alias("reason"),
            F.coalesce(F.col("label"), F.lit(False)).alias("label"), "answers").persist()
    final.count()

    # -- the rows: every use with its wide columns, in eid (log) order by ranges of eid; each
    # task writes its claim rows and unjoined uses; the driver gets one summary per task ----
    folder = _scratch_folder(scratch)
    rows = entries.select("eid", "claim_id", "t_us", *_FEATS, "p", "memory_kind",
                          "action_id", "tool_name", "pk_str", "calibrator", "regime", "file",
                          "line", "detail") \
        .join(final, "eid")
    try:  # a failed label leaves no part files behind
        summary = rows.repartitionByRange("eid").sortWithinPartitions("eid") \
            .mapInArrow(_parts_fn(folder, soft_labels), _PART_SUMMARY).toPandas() \
            .sort_values("part", ignore_index=True)
        if int(summary["uses"].sum()) != n_uses:
            raise AssertionError(f"the row stage wrote {int(summary['uses'].sum())} uses of "
                                 f"{n_uses}")
        _log.info("label on Spark: rows written at %.1f s", time.perf_counter() - t0)
        cal_cats = _first_seen(parsed, "calibrator")
        reg_cats = _first_seen(parsed, "regime")

        # -- the outcome records ----------------------------------------------------------------
        st = joined["outcome_state"].toArrow()
        status = np.empty(len(out_df), dtype=np.int64)
        status[st.column("oid").to_numpy()] = st.column("status").to_numpy()
        counts, outcome_details = outcome_report(out_df, out_invalid, status)
        reasons = np.sum(np.stack(summary["reasons"].map(np.asarray).to_list()), axis=0) \
            if len(summary) else np.zeros(len(UNJOINED_REASONS), dtype=np.int64)
        report = join_report(
            names, stats, n_entries=n_entries, n_uses=n_uses, n_hard=int(summary["hard"].sum()),
            n_soft=int(summary["soft"].sum()), reasons=None,
            n_outcomes=len(out_df) + len(out_invalid),
            counts=counts, rows=int(summary["rows"].sum()), soft_labels=soft_labels,
            ignored_signals=ignored, unjoined_uses=_use_frame(_empty_batch(_part_schemas()[1]),
                                                              names),
            outcome_details=outcome_details, unjoined_counts=[int(r) for r in reasons])
        return _Labelled(folder, summary, report, names, cal_cats, reg_cats, {
            "parsed": parsed, "entries": entries, "final": final, **joined},
            kinds=kinds, soft_labels=soft_labels)
    except BaseException:
        _remove_folder(folder)
        raise


def label_claims_spark(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    spark: SparkSession,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    scratch: PathLike | None = None,
) -> tuple[pd.DataFrame, JoinReport]:
    """:func:`amv_calib.claims.label_claims` on Spark: the same claim rows and report, held
    in memory (for tests and small logs; :func:`write_label_spark` writes ``label``'s files
    without holding the rows).

    Parameters
    ----------
    decisions, outcomes, soft_labels, on_corrupt, columnar
        As in :func:`~amv_calib.claims.label_claims`; a decision log may also be Parquet
        (``.parquet``/``.pq``, one record per row, the JSON fields as columns) and any path
        may be a URI that pyarrow opens (``s3://``, ``gs://``, ``hdfs://``) or a folder /
        prefix, which stands for its log files in name order (the executors open them; the
        driver reads the outcome files, local paths or URIs, whole).
    spark : SparkSession
        Where the join runs (:func:`amv_calib.spark.spark_session`).
    split_bytes : int, default 64 MiB
        Bytes of a JSONL log per Spark task.
    scratch : path or URI, optional
        Where the executors write the claim rows and unjoined uses as part files for the
        driver to read back (removed afterwards): a location both reach. Default: a
        temporary folder of this machine (local mode).

    Returns
    -------
    claims, report
        As :func:`~amv_calib.claims.label_claims` returns them. Difference: the categorical
        columns ``action_id``, ``premise_id`` and ``detail`` of ``report.unjoined_uses``
        list only the values present (the single-machine ones list every value of the
        log), so the driver never holds every action id.
    """
    done = _label(decisions, outcomes, spark=spark, soft_labels=soft_labels,
                  on_corrupt=on_corrupt, columnar=columnar, split_bytes=split_bytes,
                  offers=False, scratch=scratch)
    try:
        return done.held()
    finally:
        done.close()


# ---------------------------------------------------------------------------------------------
# Episodes and verifier reliabilities
# ---------------------------------------------------------------------------------------------
class _BatchUses:
    """What ``build_episodes`` reads of the uses, for the entries of one batch of last records
    (each entry stands for its use: the last record of an action holds the last entry of
    each of its premise keys)."""

    def __init__(self, pk_codes: Any, pk_str: Any) -> None:
        self.entry_pkey = pk_codes
        self.n_pkey_codes = int(pk_codes.max(initial=-1)) + 1
        self._pk = pk_str

    def use_of(self, entries: Any) -> Any:
        return entries

    def premise_ids(self, which: Any) -> Any:
        return _str(self._pk[which])


def _episode_batch(batch: Any, files: list[str], min_calls: int,
                   verifiers: dict[str, dict[str, Any]], soft_labels: str, schema: Any) -> Any:
    """The episodes of one batch of last records (``build_episodes``, the single-machine code)."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.compute as pc

    from amv_calib.claims.engine import ACTION_REASONS, build_episodes

    def floats(a: Any) -> Any:
        return pc.fill_null(a, float("nan")).to_numpy(zero_copy_only=False).astype(np.float64)

    recs = {
        "n": batch.column("n_premises").to_numpy(zero_copy_only=False).astype(np.int64),
        "action_id": pd.Categorical(batch.column("action_id").to_pandas()),
        "tool_name": pd.Categorical(batch.column("tool_name").to_pandas()),
        "theta": floats(batch.column("theta")), "kappa": floats(batch.column("kappa")),
        "has_verifiers": batch.column("has_verifiers").to_numpy(zero_copy_only=False).astype(bool),
        "line": batch.column("line").to_numpy(zero_copy_only=False).astype(np.int64),
        "file": batch.column("file").to_numpy(zero_copy_only=False).astype(np.int64),
    }
    prem = batch.column("premises")
    flat = pc.list_flatten(prem)
    entries = pd.DataFrame({
        "rec": pc.list_parent_indices(prem).to_numpy(zero_copy_only=False).astype(np.int64),
        "premise_id": pd.Categorical(flat.field("premise_id").to_pandas()),
        "claim_id": _str(flat.field("claim_id").to_pandas()),
        **{k: floats(flat.field(k)) for k in (*_FEATS, "p")},
        # null where a premise gives no kind: build_episodes then writes none, as one
        # machine does where the log gives no kind at all
        "memory_kind": pd.Categorical(flat.field("memory_kind").to_pandas()),
    })
    st = pc.list_flatten(batch.column("st"))
    pk = pd.factorize(pd.Series(st.field("pk_kind").to_numpy(zero_copy_only=False)).astype(str)
                      + ":" + st.field("pk_val").to_pandas().astype(str))[0]
    uses = _BatchUses(np.asarray(pk, dtype=np.int64),
                      st.field("pk_str").to_numpy(zero_copy_only=False))
    reason = st.field("reason").to_numpy(zero_copy_only=False).astype(np.int8)
    has_sig, llr = _llr(st.field("answers"))
    hard, soft = verifier_labels(reason, has_sig, np.isnan(llr), soft_labels)
    state: dict[str, Any] = {
        "uses": uses, "hard": hard, "soft": soft,
        "label": st.field("label").to_numpy(zero_copy_only=False).astype(bool),
        "reason": reason.astype(np.int64),
    }
    offers = batch.column("offers")
    of = pc.list_flatten(offers)
    o_table = pa.table({
        "rec": pc.list_parent_indices(offers).cast(pa.int64()),
        "id": of.field("id"), "resolves": of.field("resolves"),
        "cost": pc.fill_null(of.field("cost"), float("nan")),
        "reliability": pc.fill_null(of.field("reliability"), float("nan")),
    })
    log = SimpleNamespace(records=recs, entries=entries, offers=o_table)
    lines, report, _, names = build_episodes(files, log, state, min_calls,
                                               verifiers=verifiers)
    crec = state["records"]
    n = len(lines)
    eps = _batch(schema, n, {
        "kind": pa.array(np.zeros(n, np.int8)),
        "file": pa.array(recs["file"][crec].astype(np.int32)),
        "line": pa.array(recs["line"][crec]),
        "episode": lines.cast(pa.string()),
        "action": pa.array(names, type=pa.string()),
    })
    counts = _batch(schema, 1, {
        "kind": [1], "actions": [report.actions_read],
        "counts": [[int(report.unlabelled[r]) for r in ACTION_REASONS]],
    })
    return [eps, counts]


_EPISODE_SCHEMA: Final = ("kind byte, file int, line long, episode string, action string, "
                          "actions long, counts array<long>")


def _episode_fn(files: list[str], min_calls: int, verifiers: dict[str, dict[str, Any]],
                soft_labels: str) -> Any:
    schema = _arrow_schema(_EPISODE_SCHEMA)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            if batch.num_rows:
                yield from _episode_batch(batch, files, min_calls, verifiers, soft_labels,
                                          schema)

    return run


def _episodes_and_verifiers(done: _Labelled, min_verifier_calls: int
                            ) -> tuple[Any, dict[str, dict[str, Any]]]:
    """The episodes' report and the verifier reliabilities, from a join run with the offers;
    the episodes themselves are part files of the scratch folder, in log order
    (:meth:`_Labelled.episode_parts`): the driver never holds them all."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from amv_calib.claims.engine import ACTION_REASONS, EpisodeReport, verifier_reliabilities

    parsed, entries, final, answers, superseded = (done.frames[k] for k in (
        "parsed", "entries", "final", "answers", "superseded"))
    names = done.names

    # -- verifier reliabilities: answer counts by verifier and label (Spark), the rest here --
    counted = answers.join(final.select("eid", (F.col("reason") == JOINED).alias("hard"),
                                        "label"), "eid") \
        .groupBy("verifier", "confirmed", "reliability", "hard", "label") \
        .agg(F.sum("n").alias("n")).toPandas()
    code = np.where(counted["hard"].to_numpy(bool),
                    1 + counted["label"].to_numpy(bool).astype(np.int64), 0)
    synthetic = pd.DataFrame({"u": code, "verifier": _str(counted["verifier"].to_numpy(object)),
                              "confirmed": counted["confirmed"].to_numpy(bool),
                              "reliability": counted["reliability"].to_numpy(np.float64),
                              "n": counted["n"].to_numpy(np.int64)})
    # an action's last record (a record without action id is an action of its own)
    last = Window.partitionBy("action_id", F.when(F.col("action_id").isNull(), F.col("rec"))) \
        .orderBy(F.desc("rec"))
    records = parsed.filter("kind = 0")
    chosen = records.withColumn("_r", F.row_number().over(last)).filter("_r = 1").drop("_r")
    chosen = chosen.persist()
    done.frames["chosen"] = chosen
    declared_rows = chosen.select(F.explode("offers").alias("o")).select("o.id", "o.reliability") \
        .filter(F.col("id").isNotNull() & ~F.isnan("reliability")) \
        .groupBy("id", "reliability").count().collect()
    declared: dict[str, dict[float, int]] = {}
    for row in declared_rows:
        declared.setdefault(str(row[0]), {})[float(row[1])] = int(row[2])
    verifiers = verifier_reliabilities(
        synthetic, np.array([False, True, True]), np.array([False, False, True]),
        min_verifier_calls=min_verifier_calls, declared_offers=declared)

    # -- episodes: each batch of last records through the single-machine rule ----------------
    # each entry of those records with what the join decided for its use
    st = entries.join(chosen.select("rec"), "rec", "left_semi") \
        .join(superseded.select("eid", "use_eid"), "eid", "left") \
        .withColumn("use", F.coalesce("use_eid", "eid")) \
        .join(final.withColumnRenamed("eid", "use"), "use") \
        .groupBy("rec").agg(F.array_sort(F.collect_list(F.struct(
            "pidx", "reason", "label", "answers", "pk_kind", "pk_val", "pk_str")))
            .alias("st"))
    eps = chosen.select("rec", "file", "line", "action_id", "tool_name", "theta", "kappa",
                        "n_premises", "has_verifiers", "premises", "offers") \
        .join(st, "rec", "left") \
        .mapInArrow(_episode_fn(names, min_verifier_calls, verifiers, done.soft_labels),
                    _EPISODE_SCHEMA)
    eps = eps.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tallies = eps.filter("kind = 1").select("actions", "counts").toPandas()
        done.episode_summary = eps.filter("kind = 0") \
            .select("file", "line", "episode", "action") \
            .repartitionByRange("file", "line").sortWithinPartitions("file", "line") \
            .mapInArrow(_episode_parts_fn(done.folder), _EPISODE_PART_SUMMARY).toPandas() \
            .sort_values("part", ignore_index=True)
    finally:
        eps.unpersist()
    unlabelled = np.zeros(len(ACTION_REASONS), dtype=np.int64)
    for c in tallies["counts"]:
        unlabelled += np.asarray(c, dtype=np.int64)
    ep_report = EpisodeReport(
        actions_read=int(tallies["actions"].sum()),
        episodes=int(done.episode_summary["rows"].sum()),
        unlabelled={r: int(unlabelled[i]) for i, r in enumerate(ACTION_REASONS)},
        min_verifier_calls=min_verifier_calls)
    ep_report.check()
    return ep_report, verifiers


def _check_min_calls(min_verifier_calls: int) -> None:
    if isinstance(min_verifier_calls, bool) or not isinstance(min_verifier_calls, int) \
            or min_verifier_calls < 0:
        raise ValueError(f"min_verifier_calls={min_verifier_calls!r} must be an int >= 0")


def label_logs_spark(
    decisions: PathLike | Sequence[PathLike],
    outcomes: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame] | None = None,
    *,
    spark: SparkSession,
    min_verifier_calls: int = 200,
    soft_labels: SoftLabels = "posterior",
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    scratch: PathLike | None = None,
) -> Any:
    """:func:`amv_calib.claims.label_logs` on Spark: the same claims, report, episodes and
    verifier reliabilities (a :class:`~amv_calib.claims.LogLabels`), held in memory (for
    tests and small logs; :func:`write_label_spark` writes the files without holding the
    rows).

    Parameters
    ----------
    decisions, outcomes, spark, soft_labels, on_corrupt, columnar, split_bytes, scratch
        As in :func:`label_claims_spark`.
    min_verifier_calls : int, default 200
        As in :func:`~amv_calib.claims.label_logs`.
    """
    import pyarrow as pa

    from amv_calib.claims.engine import LogLabels

    _check_min_calls(min_verifier_calls)
    done = _label(decisions, outcomes, spark=spark, soft_labels=soft_labels,
                  on_corrupt=on_corrupt, columnar=columnar, split_bytes=split_bytes,
                  offers=True, scratch=scratch)
    try:
        claims, report = done.held()
        ep_report, verifiers = _episodes_and_verifiers(done, min_verifier_calls)
        held = pa.concat_tables([*done.episode_parts(), pa.table(
            {"episode": pa.array([], pa.string()), "action": pa.array([], pa.string())})])
        episodes = held.column("episode").combine_chunks()
        actions = held.column("action").to_pylist()
    finally:
        done.close()
    return LogLabels(claims=claims, report=report, episodes=episodes,
                     episode_report=ep_report, verifiers=verifiers, episode_actions=actions)


def write_label_spark(
    decisions: PathLike | Sequence[PathLike],
    outcomes: Sequence[PathLike] = (),
    *,
    spark: SparkSession,
    out: PathLike,
    min_verifier_calls: int = 200,
    scratch: PathLike | None = None,
    **options: Any,
) -> tuple[dict[str, Any], JoinReport, Any]:
    """Write what ``amv-calib label --out OUT`` writes, the join run on Spark, without the
    driver holding the claim rows or the unjoined uses: the same files, to the byte.

    The executors compute the claim rows (the single-machine ``posterior`` and
    ``label_rows``) and write them, with the unjoined uses, as Parquet part files in log
    order; the driver streams the parts into the outputs one batch at a time (a Parquet row
    group at most). The caller claims the output folder first
    (:func:`~amv_calib.claims.claim_outputs`); a folder is recorded in its
    ``written_by.json``, a table is not.

    Parameters
    ----------
    decisions : path or sequence of paths
        As in :func:`label_claims_spark`.
    outcomes : sequence of paths
        The outcome files (named in the report and the unjoined CSV).
    spark : SparkSession
        Where the join runs.
    out : path
        A folder (``claims.parquet``, ``claims.join_report.json``, ``claims.unjoined.csv``,
        ``episodes.jsonl``, ``verifiers.json``) or a claims table (``.parquet``, ``.csv``,
        ``.jsonl``; with its join report and unjoined CSV beside it; no episodes).
    min_verifier_calls, scratch
        As in :func:`label_logs_spark`.
    **options
        ``soft_labels``, ``on_corrupt``, ``columnar``, ``split_bytes``: as in
        :func:`label_logs_spark`.

    Returns
    -------
    line : dict
        The summary line ``label`` prints.
    report : JoinReport
        The counts; its ``unjoined_uses`` is empty and ``unjoined_uses_file`` names the CSV.
    episode_report : EpisodeReport or None
        The episodes' counts (None for a table).
    """
    from amv_calib.claims import (
        TABLE_SUFFIXES,
        write_claims_table,
        write_join_report,
        write_label_folder,
    )
    from amv_calib.claims.engine import LogLabels

    _check_min_calls(min_verifier_calls)
    target = Path(out)
    table = target.suffix.lower() in TABLE_SUFFIXES
    files = [os.fspath(o) for o in outcomes]
    done = _label(decisions, files or None, spark=spark, offers=not table, scratch=scratch,
                  **options)
    t0 = time.perf_counter()
    try:
        if table:
            write_claims_table(done.claim_parts(), target)
            line = write_join_report(done.report, target, files, use_parts=done.use_parts())
            ep_report = None
        else:
            ep_report, verifiers = _episodes_and_verifiers(done, min_verifier_calls)
            result = LogLabels(claims=pd.DataFrame(), report=done.report, episodes=None,
                               episode_report=ep_report, verifiers=verifiers)
            line = write_label_folder(
                result, target, files, claim_parts=done.claim_parts(),
                use_parts=done.use_parts(),
                episode_parts=(t.column("episode") for t in done.episode_parts()))
    finally:
        done.close()
    _log.info("label on Spark: files written in %.1f s", time.perf_counter() - t0)
    return line, done.report, ep_report

