"""The label join (:mod:`amv_calib.claims._sql`) run by Spark: the same statements, in
Spark's dialect (SQLGlot's transpilation of DuckDB's), over the same input relations as
temporary views.

:func:`relations` builds the input relations from the records the executors parsed
(:mod:`amv_calib.spark._read`) and the outcome records the driver read; :func:`run_join_spark`
creates the steps and returns the results a caller reads (:data:`~amv_calib.claims._sql.RESULTS`)
as Spark frames: they stay on the executors.

Each step that later steps read is computed once and checkpointed (``localCheckpoint``)
before it becomes a temporary view: what DuckDB's temporary tables are to the one-machine
run. A view would keep its whole lineage in every later step's plan, which then grows with
the steps before it (the last steps took minutes to plan, and ran the driver out of heap).
The steps DuckDB runs as views (:data:`~amv_calib.claims._duckjoin.VIEWS`, each read once)
are views here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd

from amv_calib.claims.engine import (
    FEW,
    MISSING_US,
    RESULTS,
    VIEWS,
    join_statements,
    signal_weights,
    values_ok_expression,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The Spark schema of each input relation (the module docs of :mod:`amv_calib.claims._sql`).
RELATION_SCHEMAS: Final[dict[str, str]] = {
    "entries": ("eid long, rec long, pidx int, a long, pid long, pc long, c long, t_us long, "
                "values_ok boolean"),
    "signals": ("sid long, rec long, pid long, verifier string, confirmed boolean, "
                "reliability double"),
    "weights": "reliability double, w double",
    "outcomes": "oid long, a long, c long, o_t long, v boolean",
}


def _codes(values: DataFrame) -> DataFrame:
    """A code for each distinct value of the one column ``s`` of ``values`` (nulls left out):
    ``s``, ``code``. Checkpointed, so that the codes are computed once."""
    from pyspark.sql import functions as F

    return values.filter(F.col("s").isNotNull()).distinct() \
        .withColumn("code", F.monotonically_increasing_id()).localCheckpoint(eager=True)


def relations(spark: SparkSession, parsed: DataFrame, out_df: pd.DataFrame
              ) -> dict[str, DataFrame]:
    """The input relations of :mod:`amv_calib.claims._sql` from the parsed records
    (``kind = 0`` rows of :mod:`amv_calib.spark._read`'s frame) and the valid outcome
    records (:func:`~amv_calib.claims.load_outcomes`).

    The ids become codes: one per distinct action id, premise id and claim id (over the log
    and the outcomes), joined to the rows that name them. The record, entry and signal
    positions are the parse's ids (task and position in the task: in log order). The
    relations are checkpointed.
    """
    from pyspark.sql import functions as F

    recs = parsed.filter("kind = 0")
    flat = recs.select("rec", "action_id", "t_us", F.explode("premises").alias("e")) \
        .select("rec", "action_id", "t_us", "e.*")
    outcomes = spark.createDataFrame(pd.DataFrame({
        "oid": np.arange(len(out_df), dtype=np.int64),
        "action_id": out_df["action_id"].astype(object).where(out_df["action_id"].notna(),
                                                              None),
        "claim_id": out_df["claim_id"].astype(object).where(out_df["claim_id"].notna(), None),
        "o_t": out_df["t_us"].to_numpy(np.int64),
        "v": out_df["violated"].to_numpy(bool)}),
        "oid long, action_id string, claim_id string, o_t long, v boolean")
    actions = _codes(recs.select(F.col("action_id").alias("s"))
                     .union(outcomes.select(F.col("action_id").alias("s"))))
    claims = _codes(flat.select(F.col("claim_id").alias("s"))
                    .union(outcomes.select(F.col("claim_id").alias("s"))))
    premises = _codes(flat.select(F.col("premise_id").alias("s")))

    def coded(frame: DataFrame, column: str, codes: DataFrame, name: str) -> DataFrame:
        return frame.join(codes.withColumnsRenamed({"s": column, "code": name}), column, "left")

    e = coded(coded(coded(flat, "action_id", actions, "a"), "premise_id", premises, "pid"),
              "claim_id", claims, "c")
    entries = e.select(
        # never null: Spark then plans the steps' ``NOT IN`` as a plain anti join
        F.coalesce(F.col("eid"), F.lit(0)).alias("eid"), "rec", "pidx", "a", "pid",
        F.when(F.col("pid").isNull(), F.col("c")).alias("pc"), "c",
        F.when(F.col("t_us") != MISSING_US, F.col("t_us")).alias("t_us"),
        F.expr(values_ok_expression("spark")).alias("values_ok"))
    s = recs.select("rec", F.explode("signals").alias("s")).select("rec", "s.*")
    signals = coded(s, "premise_id", premises, "pid").select(
        "sid", "rec", "pid", "verifier", "confirmed", "reliability")
    distinct_r = np.array([r[0] for r in signals.select("reliability").distinct().collect()
                           if r[0] is not None], dtype=np.float64)
    weights = spark.createDataFrame(signal_weights(distinct_r), RELATION_SCHEMAS["weights"])
    o = coded(coded(outcomes, "action_id", actions, "a"), "claim_id", claims, "c")
    # checkpointed: most steps read entries, several read signals and outcomes, and as views
    # each read would explode the records and join the codes again (the join took 1.6x as
    # long at 60k lines)
    return {"entries": entries.localCheckpoint(eager=True),
            "signals": signals.localCheckpoint(eager=True), "weights": weights,
            "outcomes": o.select("oid", "a", "c", "o_t", "v").localCheckpoint(eager=True)}


def run_join_spark(spark: SparkSession, relations: Mapping[str, DataFrame], *, few: int = FEW
                   ) -> dict[str, DataFrame]:
    """Create the join's steps over ``relations`` (Spark frames of the input relations) and
    return the results a caller reads (:data:`~amv_calib.claims._sql.RESULTS`), each
    checkpointed (``few``: as :func:`~amv_calib.claims._sql.join_statements` takes it). The
    temporary views are dropped before it returns."""
    views: list[str] = []
    out: dict[str, DataFrame] = {}
    try:
        for name, rel in relations.items():
            rel.createOrReplaceTempView(name)
            views.append(name)
        for name, sql in join_statements("spark", few=few):
            step = spark.sql(sql)
            if name not in VIEWS or name in RESULTS:
                step = step.localCheckpoint(eager=True)
            step.createOrReplaceTempView(name)
            views.append(name)
            if name in RESULTS:
                out[name] = step
    finally:
        for name in views:
            spark.catalog.dropTempView(name)
    return out
