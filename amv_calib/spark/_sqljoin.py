"""The label join on Spark SQL: the premises exploded, one use per (action, premise) from
the action's last record, the verifier signals' log-likelihood ratios (the multiset rule),
the three time-aware stages against the outcome records, and each outcome record's status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession




# ---------------------------------------------------------------------------------------------
# The join on Spark SQL
# ---------------------------------------------------------------------------------------------
#: The action key: a record without ``action_id`` is an action of its own, keyed by its
#: (file, line); ``ak`` is the action id or "" (never an id: an empty id reads as missing), so
#: that the keys join without nulls.
_AKEY: Final = ("ak", "ak_f", "ak_l")
_UKEY: Final = (*_AKEY, "pk_kind", "pk_val")


def _entries(parsed: DataFrame) -> DataFrame:
    """One row per premise entry, with its action and premise keys."""
    from pyspark.sql import functions as F

    rec = parsed.filter("kind = 0")
    e = rec.select("task", "file", "line", "t_us", "action_id", "tool_name", "calibrator",
                   "regime", F.explode("premises").alias("e")).select(
        "task", "file", "line", "t_us", "action_id", "tool_name", "calibrator", "regime",
        "e.*")
    return e.withColumns(_key_columns()).withColumns({
        "pk_kind": F.when(F.col("premise_id").isNotNull(), 0)
        .when(F.col("claim_id").isNotNull(), 1).otherwise(2),
        "pk_val": F.coalesce("premise_id", "claim_id", F.col("pidx").cast("string")),
        "pk_str": F.coalesce("premise_id", "claim_id",
                             F.concat(F.lit("#"), F.col("pidx").cast("string"))),
    })


def _key_columns() -> dict[str, Column]:
    """The action key columns (:data:`_AKEY`)."""
    from pyspark.sql import functions as F

    named = F.col("action_id").isNotNull()
    return {"ak": F.coalesce(F.col("action_id"), F.lit("")),
            "ak_f": F.when(named, -1).otherwise(F.col("file")),
            "ak_l": F.when(named, F.lit(-1).cast("long")).otherwise(F.col("line"))}


def _uses(entries: DataFrame) -> DataFrame:
    """The use of each (action, premise): the entry of the action's last record. Narrow
    (keys, claim, time, validity): the join runs on these; the wide columns of the entries
    are joined back once, to the results (by ``eid``)."""
    from pyspark.sql import functions as F

    last = entries.groupBy(*_UKEY).agg(F.max(F.struct(
        "eid", "action_id", "claim_id", "t_us", F.col("detail").isNull().alias("valid")))
        .alias("u")).select(*_UKEY, "u.*")
    per_action = last.groupBy(*_AKEY).agg(F.count(F.lit(1)).alias("n_in_action"))
    return last.join(per_action, list(_AKEY))


def _signal_llr(parsed: DataFrame, entries: DataFrame, spark: SparkSession
                ) -> tuple[DataFrame, DataFrame, int]:
    """Per use (``_UKEY``) its summed LLR and ``has_sig``; the answers (use, verifier,
    confirmed, reliability, n); the number of signals ignored."""
    from pyspark.sql import functions as F

    rec = parsed.filter("kind = 0").withColumns(_key_columns())
    sig = rec.select("file", "line", *_AKEY, F.posexplode("signals").alias("seq", "s")) \
        .select("file", "line", *_AKEY, "seq", "s.*")
    r = F.col("reliability")
    good = r.isNotNull() & ~F.isnan(r) & (r > 0.5) & (r <= 1.0)
    sig = sig.withColumn("good", good).persist()
    n_all = sig.count()
    ok = sig.filter("good").join(
        entries.filter(F.col("premise_id").isNotNull())
        .select("file", "line", "premise_id").distinct(),
        ["file", "line", "premise_id"], "left_semi")
    ok = ok.persist()
    n_ok = ok.count()
    rels = np.array(sorted(x[0] for x in ok.select("reliability").distinct().collect()),
                    dtype=np.float64)
    with np.errstate(divide="ignore"):
        w = np.log(rels) - np.log1p(-rels)
    weights = spark.createDataFrame(pd.DataFrame({"reliability": rels, "w": w}),
                                    "reliability double, w double")
    ok = ok.join(F.broadcast(weights), "reliability").withColumn(
        "sw", F.when(F.col("confirmed"), -F.col("w")).otherwise(F.col("w")))
    answer = [*_AKEY, "premise_id", "verifier", "confirmed", "reliability"]
    per_rec = ok.groupBy(*answer, "file", "line").agg(
        F.count(F.lit(1)).alias("n"), F.first("sw").alias("sw"),
        F.min(F.struct("file", "line", "seq")).alias("first"))
    mult = per_rec.groupBy(*answer).agg(F.max("n").alias("n"), F.first("sw").alias("sw"),
                                        F.min("first").alias("first"))
    mult = mult.withColumns({"pk_kind": F.lit(0), "pk_val": F.col("premise_id"),
                             "contrib": F.col("n") * F.col("sw")}).persist()
    inf = float("inf")
    c = F.col("c")
    llr = mult.groupBy(*_UKEY).agg(
        F.array_sort(F.collect_list(F.struct("first", F.col("contrib").alias("x"))))
        .alias("c"))
    total = F.aggregate(c, F.lit(0.0), lambda acc, x: acc + F.when(
        F.abs(x["x"]) == inf, F.lit(0.0)).otherwise(x["x"]))
    pos = F.exists(c, lambda x: x["x"] == inf)
    neg = F.exists(c, lambda x: x["x"] == -inf)
    llr = llr.select(*_UKEY, F.lit(True).alias("has_sig"), F.when(pos & neg, F.lit(float("nan")))
                     .when(pos, F.lit(inf)).when(neg, F.lit(-inf)).otherwise(total).alias("llr"))
    answers = mult.select(*_UKEY, "verifier", "confirmed", "reliability", "n")
    sig.unpersist()
    ok.unpersist()
    return llr, answers, (n_all - n_ok)


def _stage_counts(pairs: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    after = F.col("after")
    return pairs.groupBy("eid").agg(
        F.sum(after.cast("long")).alias("n_after"),
        F.sum((after & F.col("v")).cast("long")).alias("n_true"),
        F.count(F.lit(1)).alias("n_any"))


def _decide(counts: DataFrame, single_premise_only: bool, tag: str) -> DataFrame:
    """Per use of an action stage: had-before, conflict, label, ambiguous, ok."""
    from pyspark.sql import functions as F

    na, nt = F.col("n_after"), F.col("n_true")
    decided = na > 0
    conflict = decided & (nt > 0) & (nt < na)
    lab = decided & ~conflict & (nt == na)
    # an action outcome labels no premise of a multi-premise action, whatever it says
    # (:mod:`amv_calib.claims._join`, rule 2)
    amb = decided & ~conflict & (F.col("n_in_action") > 1) if single_premise_only \
        else F.lit(False)
    return counts.select("eid", (F.col("n_any") > na).alias(f"hb{tag}"),
                         conflict.alias(f"conflict{tag}"), lab.alias(f"lab{tag}"),
                         amb.alias(f"amb{tag}"),
                         (decided & ~conflict & ~amb).alias(f"ok{tag}"))


def _outcome_flags(pairs: DataFrame, decided: DataFrame | None, tag: str) -> DataFrame:
    """Per outcome record of an action stage: used, conflict, ambiguous (from the pairs of
    still-open uses, ``decided``) or keymatch / has an earlier use (all pairs)."""
    from pyspark.sql import functions as F

    if decided is None:
        return pairs.groupBy("oid").agg(F.lit(True).alias("keymatch"),
                                        F.max("after").alias("earlier"))
    j = pairs.join(decided, "eid")
    a = F.col("after")
    return j.groupBy("oid").agg(
        F.max(a & F.col(f"ok{tag}")).alias("used"),
        F.max(a & F.col(f"conflict{tag}")).alias("conflict"),
        F.max(a & F.col(f"amb{tag}")).alias("ambiguous"))


def _join_stages(uses: DataFrame, outcomes: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The three stages (module docs of :mod:`amv_calib.claims._join`): per use its final
    state; per outcome record its flags."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    uv = uses.filter("valid").select("eid", "action_id", "claim_id", "t_us", "n_in_action")
    o = outcomes
    o1 = o.filter(F.col("action_id").isNotNull() & F.col("claim_id").isNotNull())
    o2 = o.filter(F.col("action_id").isNotNull() & F.col("claim_id").isNull())
    o3 = o.filter(F.col("action_id").isNull() & F.col("claim_id").isNotNull())

    # 1. action + claim
    p1 = uv.join(o1.select("oid", "action_id", "claim_id", "o_t", "v"),
                 ["action_id", "claim_id"]).withColumn("after", F.col("o_t") >= F.col("t_us"))
    p1 = p1.persist()
    d1 = _decide(_stage_counts(p1), False, "1").persist()
    f1 = _outcome_flags(p1, None, "1").join(_outcome_flags(p1, d1, "1"), "oid", "outer")
    # 2. action only, for the uses stage 1 left open
    p2 = uv.join(o2.select("oid", "action_id", "o_t", "v"), "action_id") \
        .withColumn("after", F.col("o_t") >= F.col("t_us"))
    p2 = p2.persist()
    closed = d1.filter(F.col("ok1") | F.col("conflict1")).select("eid")
    live = p2.join(closed, "eid", "left_anti")
    counts2 = _stage_counts(live).join(uv.select("eid", "n_in_action"), "eid")
    d2 = _decide(counts2, True, "2").persist()
    f2 = _outcome_flags(p2, None, "2").join(_outcome_flags(live, d2, "2"), "oid", "left")

    state = uses.join(d1, "eid", "left").join(d2, "eid", "left")
    state = state.na.fill(False, [f"{k}{t}" for k in ("hb", "conflict", "lab", "amb", "ok")
                                  for t in ("1", "2")])
    state = state.withColumns({
        "final12": F.col("ok1") | F.col("conflict1") | F.col("ok2") | F.col("conflict2"),
        "label12": F.when(F.col("ok1"), F.col("lab1")).when(F.col("ok2"), F.col("lab2"))
        .otherwise(False),
    }).persist()

    # 3. claim only: the earliest outcome at or after the use decides
    groups = o3.groupBy("claim_id", "o_t").agg(F.count(F.lit(1)).alias("g_n"),
                                               F.sum(F.col("v").cast("long")).alias("g_true"))
    active = state.filter(F.col("valid") & ~F.col("final12"))
    both = active.select("eid", "claim_id", F.col("t_us").alias("t"), F.lit(1).alias("kind"),
                         F.lit(None).cast("long").alias("g_n"),
                         F.lit(None).cast("long").alias("g_true")).unionByName(
        groups.select(F.lit(None).cast("long").alias("eid"),
                      "claim_id", F.col("o_t").alias("t"), F.lit(0).alias("kind"),
                      "g_n", "g_true"))
    g = F.when(F.col("kind") == 0, F.struct("t", "g_n", "g_true"))
    down = Window.partitionBy("claim_id").orderBy(F.desc("t"), F.asc("kind")) \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    up = Window.partitionBy("claim_id").orderBy(F.asc("t"), F.desc("kind")) \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    s3 = both.withColumns({"nxt": F.last(g, ignorenulls=True).over(down),
                           "hb3": F.max((F.col("kind") == 0).cast("int")).over(up) > 0}) \
        .filter("kind = 1")
    hit = F.col("nxt").isNotNull()
    gn, gt = F.col("nxt.g_n"), F.col("nxt.g_true")
    conflict3 = hit & (gt > 0) & (gt < gn)
    s3 = s3.select("eid", "claim_id", "hb3", hit.alias("hit3"), conflict3.alias("conflict3"),
                   (hit & ~conflict3 & (gt == gn)).alias("lab3"),
                   F.col("nxt.t").alias("g_t")).persist()
    g_flags = s3.filter("hit3").groupBy("claim_id", "g_t").agg(
        F.max(~F.col("conflict3")).alias("used"), F.max("conflict3").alias("conflict"))
    first_use = uv.groupBy("claim_id").agg(F.min("t_us").alias("min_t"))
    f3 = o3.join(g_flags.withColumnRenamed("g_t", "o_t"), ["claim_id", "o_t"], "left") \
        .join(first_use, "claim_id", "left").select(
            "oid", "used", "conflict", F.lit(False).alias("ambiguous"),
            F.col("min_t").isNotNull().alias("keymatch"),
            (F.col("min_t") <= F.col("o_t")).alias("earlier"))
    cols = ["oid", "used", "conflict", "ambiguous", "keymatch", "earlier"]
    flags = f1.withColumn("ambiguous", F.lit(False)).select(*cols) \
        .unionByName(f2.select(*cols)).unionByName(f3.select(*cols)).na.fill(False)

    final = state.join(s3.drop("claim_id", "g_t"), "eid", "left") \
        .na.fill(False, ["hb3", "hit3", "conflict3", "lab3"])
    final = final.withColumns({
        "final": F.col("final12") | F.col("hit3"),
        "label": F.when(F.col("final12"), F.col("label12")).otherwise(F.col("lab3")),
        "conflict": F.col("conflict1") | F.col("conflict2") | F.col("conflict3"),
        "had_before": F.col("hb1") | F.col("hb2") | F.col("hb3"),
    })
    return final, flags

