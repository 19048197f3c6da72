"""The label join's one SQL definition (amv_calib.claims._sql) in Spark's dialect, run by
spark/_sqlrun.py: the example logs as DuckDB decides them, and a generated log as DuckDB and
the plain-Python oracle (tests/claims/oracle.py) decide it, by either search of the
claim-only stage."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib.claims import _duckjoin as dj
from amv_calib.claims._join import read_with_outcomes
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.spark._sqlrun import RELATION_SCHEMAS, run_join_spark


def _spark_relation(spark: Any, name: str, relation: Any) -> Any:
    """``relation`` (an input relation of this process as an Arrow table or a pandas frame,
    as DuckDB's caller builds them) as a Spark frame of ``RELATION_SCHEMAS``: through Arrow
    with the schema's types, so that a missing value is a SQL NULL and a float NaN stays
    NaN, as DuckDB reads the same relation."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    spark_schema = _parse_datatype_string(RELATION_SCHEMAS[name])
    assert isinstance(spark_schema, StructType)
    schema = to_arrow_schema(spark_schema)
    if isinstance(relation, pd.DataFrame):
        columns = []
        for f in schema:
            col = relation[f.name]
            if pd.api.types.is_float_dtype(col.dtype):  # NaN is a value here, not a NULL
                columns.append(pa.array(col.to_numpy(dtype=np.float64), type=f.type))
            else:
                columns.append(pa.array(col.astype(object).where(col.notna(), None).tolist(),
                                        type=f.type))
        table = pa.Table.from_arrays(columns, schema=schema)
    else:
        table = pa.Table.from_arrays(
            [relation.column(f.name).cast(f.type) if relation.column(f.name).type != pa.null()
             else pa.nulls(relation.num_rows, f.type) for f in schema], schema=schema)
    return spark.createDataFrame(table)


def _spark_state(spark: Any, rel: dict[str, Any], few: int = 8) -> dj.JoinState:
    """The relations run by Spark, its results read back as DuckDB's are
    (:func:`~amv_calib.claims._duckjoin.read_state`)."""
    local = {k: v.whole() if isinstance(v, dj.Late) else v for k, v in rel.items()}
    results = run_join_spark(spark, {k: _spark_relation(spark, k, v) for k, v in local.items()},
                             few=few)
    for name, frame in results.items():
        frame.createOrReplaceTempView(name)
    try:
        def query(sql: str) -> dict[str, Any]:
            table = spark.sql(sql).toArrow()
            return {c: table.column(c).to_numpy() for c in table.column_names}

        return dj.read_state(query, len(local["entries"]), local["signals"])
    finally:
        for name in results:
            spark.catalog.dropTempView(name)


def _same(got: dj.JoinState, want: dj.JoinState) -> None:
    for name in ("eid", "valid", "final", "label", "reason", "outcome_status"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.signals_used == want.signals_used
    a, b = got.answers, want.answers
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for c in a.columns:  # the same values, bit for bit (contrib is a product of the same bits)
        np.testing.assert_array_equal(np.asarray(a[c]), np.asarray(b[c]), err_msg=c)


def test_spark_decides_the_example_logs_as_duckdb(spark: Any, examples_dir: Path) -> None:
    logs = examples_dir / "logs"
    log, out_df, _ = read_with_outcomes([logs / "decisions.jsonl"], logs / "outcomes.csv",
                                        on_corrupt="raise")
    want = dj.run_join(dj.connect(threads=1), dj.relations(log, out_df))
    got = _spark_state(spark, dj.relations(log, out_df))
    assert (want.reason == -1).any() and len(want.answers) > 0
    _same(got, want)


def _random_log(seed: int) -> tuple[list[dict[str, Any]], ...]:
    """A log of 300 records over small id pools (keys collide: actions logged twice,
    records without action id, premises without id, repeated premise ids, invalid fields),
    its signals and 120 outcome records of every kind."""
    rng = np.random.default_rng(seed)

    def pick(pool: list[Any]) -> Any:
        return pool[int(rng.integers(len(pool)))]

    odd = [1.0, 0.0, -1.0, 1.5, float("nan"), float("inf")]
    entries: list[dict[str, Any]] = []
    for rec in range(300):
        action, t = pick([None, *[f"a{i}" for i in range(40)]]), pick([None, *range(10)])
        for pidx in range(int(rng.integers(1, 4))):
            bad = rng.random() < 0.1
            entries.append({
                "eid": len(entries), "rec": rec, "pidx": pidx, "action_id": action,
                "premise_id": pick([None, "p0", "p1", "p2"]),
                "claim_id": pick([None, *[f"c{i}" for i in range(30)]]), "t_us": t,
                "recency_hours": pick(odd) if bad else 2.0, "source_trust_score": 0.5,
                "model_confidence": 0.5,
                "contradiction_flag": pick([0.0, 1.0, float("nan")]) if bad else 0.0})
    signals = [{"sid": i, "rec": int(rng.integers(300)), "premise_id": pick(["p0", "p1", None]),
                "verifier": pick(["v", "w"]), "confirmed": bool(rng.random() < 0.5),
                "reliability": pick([0.9, 0.8, 1.0, 0.5, float("nan")])} for i in range(80)]
    outcomes = []
    for oid in range(120):
        action = pick([None, None, *[f"a{i}" for i in range(45)]])
        claim = pick([f"c{i}" for i in range(30)]) if action is None else \
            pick([None, *[f"c{i}" for i in range(30)]])
        outcomes.append({"oid": oid, "action_id": action, "claim_id": claim,
                         "o_t": int(rng.integers(10)), "v": bool(rng.random() < 0.3)})
    return entries, signals, outcomes


def _oracle() -> Any:
    spec = importlib.util.spec_from_file_location(
        "label_oracle", Path(__file__).parents[1] / "claims" / "oracle.py")
    assert spec is not None and spec.loader is not None
    oracle = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = oracle  # its dataclass looks itself up there
    spec.loader.exec_module(oracle)
    return oracle


@pytest.mark.parametrize("few", [8, 0], ids=["joined", "sorted"])
def test_spark_decides_a_random_log_as_duckdb_and_the_oracle(spark: Any, few: int) -> None:
    entries, signals, outcomes = _random_log(7)
    want = _oracle().join(entries, signals, outcomes)
    frame = pd.DataFrame(entries).astype({"t_us": "Int64"})
    rel = dj.encode(frame, pd.DataFrame(signals), pd.DataFrame(outcomes))
    got = _spark_state(spark, rel, few=few)
    assert sorted(set(want.reason)) == [-1, 0, 1, 2, 3, 4]  # every verdict met
    assert got.eid.tolist() == want.use_eid
    assert got.reason.tolist() == want.reason
    decided = got.reason == -1
    assert got.label[decided].tolist() == np.asarray(want.label)[decided].tolist()
    assert got.outcome_status.tolist() == want.status
    _same(got, dj.run_join(dj.connect(threads=1), rel, few=few))



def test_spark_checks_the_values_as_duckdb(spark: Any) -> None:
    # the entries' values_ok column: Spark's transpiled expression over the odd values
    # (NaN a value, None a NULL) against DuckDB's windows
    import pyarrow as pa

    from amv_calib.claims.engine import values_ok_expression

    rows = _oracle().odd_values()
    frame = pd.DataFrame(rows).astype({c: "float64" for c in CLAIM_FEATURES})
    want = dj.values_ok(len(frame), lambda c, lo, hi: frame[c].to_numpy()[lo:hi],
                        frame["kind_bad"].to_numpy())
    table = pa.table({"i": np.arange(len(rows)),
                      **{c: pa.array([r[c] for r in rows], pa.float64())
                         for c in (*CLAIM_FEATURES, "kind_bad")}})
    got = spark.createDataFrame(table.cast(table.schema.set(
        len(CLAIM_FEATURES) + 1, pa.field("kind_bad", pa.bool_())))).selectExpr(
        "i", f"{values_ok_expression('spark')} AS ok")
    assert [r.ok for r in got.orderBy("i").collect()] == want.tolist()
    assert 0 < want.sum() < want.size
