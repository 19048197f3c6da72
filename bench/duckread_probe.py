"""Probe: can DuckDB (in process) be the decision-log reader, with our strictness rules on top?

Runs, in one process and on one log, today's reader (``read_uses``, fastest of 3) beside a
DuckDB read that does the least the rules need (fastest of 3), stage by stage:

- ``split``: the log's bytes cut into lines by numpy (blocks of whole lines), each line's
  number; a line with a byte >= 0x80 decoded by Python (invalid UTF-8: to the strict check),
  one with a control byte, a BOM or only whitespace set aside; each line's count of ``{``;
- ``valid``: ``json_valid`` (yyjson), and the text screens for what it accepts and RFC 8259
  does not: ``NaN``/``Infinity`` literals (any case), trailing commas, lone-surrogate escapes;
- ``keys``: every key of every object the reader knows (the record, its calibrator, each
  premise, each offered verifier; each verifier call and its signals on the lines that have
  them), each object's keys distinct, and no other object in the line (its ``{`` count);
- ``types``: each read field's JSON type (``json_type``), where a value of another type
  than the typed extraction takes must go to the Python rules;
- ``values``: the typed extraction (``json_transform``), premises unnested, signals
  (``json_each``), fetched as Arrow.

It also runs bench_labels.py's DuckDB baseline read (``read_json`` typed, ``unnest``) and
checks that the values the DuckDB read gives for the log equal today's (records, entries,
signals). Run: ``.venv/bin/python bench/duckread_probe.py LOG [--stage-only]``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import numpy as np

_BLOCK = 64 << 20
_V, _D, _B = "VARCHAR", "DOUBLE", "BOOLEAN"
_FEATS = ("recency_hours", "recencyHours", "source_trust_score", "sourceTrustScore",
          "model_confidence", "modelConfidence")
_FLAGS = ("contradiction_flag", "contradictionFlag")
_CLAIM = {**{k: _V for k in ("claim_id", "claimId", "id", "memory_kind", "memoryKind")},
          **{k: _D for k in _FEATS}, **{k: _B for k in _FLAGS}}
_PREM = {**{k: _V for k in ("id", "premise_id", "premiseId", "claim_id", "claimId",
                            "memory_kind", "memoryKind")},
         **{k: _D for k in (*_FEATS, "p", "calibratedViolationProbability",
                            "calibrated_violation_probability")},
         **{k: _B for k in _FLAGS}}
_TOP = {**{k: _V for k in ("time", "timestamp", "ts", "decidedAt", "decided_at", "action_id",
                           "actionId", "tool_name", "toolName", "regime")},
        **{k: _D for k in ("theta", "impactCostTheta", "impact_cost_theta", "kappa",
                           "abstentionCostKappa", "abstention_cost_kappa")}}
_NUM = "('UBIGINT','BIGINT','DOUBLE','HUGEINT','UHUGEINT')"
#: A byte class per byte value: 1 not whitespace, 2 a control byte (not \t \n \r), 4 >= 0x80.
_LUT = np.zeros(256, np.uint8)
_LUT[[i for i in range(256) if bytes([i]) not in b" \t\n\r\x0b\x0c"]] = 1
_LUT[[i for i in range(32) if i not in (9, 10, 13)]] |= 2
_LUT[128:] |= 4


def _paths(d: dict[str, Any]) -> str:
    return "[" + ",".join(f"'$.{k}'" for k in d) + "]"


def _type_ok(types: str, fields: dict[str, str]) -> str:
    """SQL: every field of ``fields`` in the type list ``types`` is missing, null or of the
    type the typed extraction takes."""
    conds = []
    for i, (_, t) in enumerate(fields.items(), start=1):
        allowed = {"VARCHAR": "('VARCHAR')", "DOUBLE": _NUM, "BOOLEAN": "('BOOLEAN')"}[t]
        conds.append(f"coalesce({types}[{i}] IN {allowed} OR {types}[{i}] = 'NULL', true)")
    return " AND ".join(conds)


def split(block: bytes, first: int) -> tuple[Any, dict[str, Any]]:
    import pyarrow as pa

    arr = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(arr == 10) + 1
    starts = np.concatenate(([0], ends[:-1]))
    cls = np.bitwise_or.reduceat(_LUT[arr], starts)
    braces = np.add.reduceat(arr == 123, starts, dtype=np.int32)
    blank = (cls & 1) == 0
    routed = (cls & 2) != 0
    for i in np.flatnonzero(cls & 4).tolist():
        raw = block[starts[i]:ends[i]]
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            routed[i] = True
        if raw.startswith(b"\xef\xbb\xbf"):
            routed[i] = True
    keep = ~(blank | routed)
    offs = np.concatenate(([0], ends)).astype(np.int32)
    lines = pa.StringArray.from_buffers(starts.size, pa.py_buffer(offs), pa.py_buffer(block),
                                        pa.py_buffer(np.packbits(keep, bitorder="little")))
    n = np.arange(first, first + starts.size, dtype=np.int64)
    return pa.table({"n": n, "line": lines, "braces": braces}), {
        "lines": starts.size, "blank": int(blank.sum()), "routed": int(routed.sum())}


_SCREEN = r"""
CREATE OR REPLACE TEMP TABLE s AS SELECT n, line, braces FROM blk
WHERE line IS NOT NULL AND json_valid(line) AND starts_with(ltrim(line, ' \t\r\n'), '{')
  AND NOT ((contains(line,'N') OR contains(line,'I') OR contains(line,'A')
            OR contains(line,'F') OR contains(line,'nan') OR contains(line,'inf'))
           AND regexp_matches(line, '(?i)[:,\[]\s*-?(nan|inf)'))
  AND NOT (contains(line, ',') AND regexp_matches(line, ',\s*[\]}]'))
  AND NOT (contains(line, '\u') AND regexp_matches(line, '\\u[dD][89a-fA-F]'))
"""
_KEYS = """
CREATE OR REPLACE TEMP TABLE k AS SELECT n, braces,
  json_keys(line, ['$', '$.calibrator']) AS kt,
  json_keys(line, '$.verifiers[*]') AS kv,
  json_extract(line, '$.premises[*]') AS pl,
  json_type(line, TOPP) AS ty,
  json_type(line, ['$.calibrator', '$.calibrator.name', '$.calibrator.version',
                   '$.premises', '$.verifier_calls', '$.verifierCalls', '$.verifiers']) AS ty2,
  contains(line, 'erifier_calls') OR contains(line, 'erifierCalls') AS has_calls
FROM s
"""
_PREMS = """
CREATE OR REPLACE TEMP TABLE p AS SELECT n, unnest(pl) AS pj,
  unnest(range(len(pl))) AS pidx FROM k WHERE pl IS NOT NULL
"""
_PREMS2 = """
CREATE OR REPLACE TEMP TABLE p2 AS SELECT n, pidx, json_keys(pj) AS kp,
  json_type(pj, PREMP) AS tp, json_type(pj, ['$', '$.claim']) AS tc,
  json_transform(pj, PREMT) AS v
FROM p
"""


def duck_read(log: str, con: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """The DuckDB read of ``log`` (fast path only): per-stage seconds and the columns."""
    stages = dict.fromkeys(("split", "valid", "keys_types", "premises", "values"), 0.0)
    con.execute("SET threads = 2")
    topp = _paths({**_TOP})
    keys_sql = _KEYS.replace("TOPP", topp)
    prems2 = _PREMS2.replace("PREMP", _paths(_PREM)).replace(
        "PREMT", "'" + json.dumps({**_PREM, "claim": _CLAIM}) + "'")
    topt = "'" + json.dumps({**_TOP, "calibrator": {"name": _V, "version": _V}}) + "'"
    out: dict[str, list[Any]] = {"rec": [], "ent": [], "sig": []}
    counts = {"lines": 0, "blank": 0, "routed": 0, "py": 0}
    first = 1
    with open(log, "rb") as fh:
        carry = b""
        while True:
            t = time.perf_counter()
            data = fh.read(_BLOCK)
            if not data and not carry:
                break
            data = carry + data
            cut = data.rfind(b"\n") + 1
            if not cut:
                break  # the torn tail: the Python line parser's
            block, carry = data[:cut], data[cut:]
            blk, c = split(block, first)
            first += c["lines"]
            for key in ("lines", "blank", "routed"):
                counts[key] += c[key]
            con.register("blk", blk)
            stages["split"] += time.perf_counter() - t
            t = time.perf_counter()
            con.execute(_SCREEN)
            stages["valid"] += time.perf_counter() - t
            t = time.perf_counter()
            con.execute(keys_sql)
            stages["keys_types"] += time.perf_counter() - t
            t = time.perf_counter()
            con.execute(_PREMS)
            con.execute(prems2)
            stages["premises"] += time.perf_counter() - t
            t = time.perf_counter()
            # a line goes to the Python rules if an object gives a key twice, holds an
            # object the reader does not know, or a value is of another type than taken
            bad_p = con.execute(f"""
              SELECT DISTINCT n FROM p2 WHERE len(list_distinct(kp)) <> len(kp)
                OR NOT ({_type_ok('tp', _PREM)}) OR tc[1] <> 'OBJECT'
                OR coalesce(tc[2], 'NULL') NOT IN ('NULL')""").fetchnumpy()["n"]
            n_prem_obj = "len(coalesce(pl, []))"
            rec = con.sql(f"""
              SELECT n, json_transform_line.v AS v, ok FROM (
                SELECT k.n, ({_type_ok('ty', _TOP)})
                  AND len(list_distinct(kt[1])) = len(kt[1])
                  AND len(list_distinct(kt[2])) = len(kt[2])
                  AND list_bool_and([len(list_distinct(x)) = len(x) for x in coalesce(kv, [])])
                  AND coalesce(ty2[1] IN ('OBJECT','NULL'), true)
                  AND coalesce(ty2[2] IN ('VARCHAR','NULL'), true)
                  AND coalesce(ty2[3] IN ('VARCHAR','NULL'), true)
                  AND coalesce(ty2[4] IN ('ARRAY','NULL'), true)
                  AND NOT has_calls
                  AND braces = 1 + (ty2[1] = 'OBJECT')::INT + {n_prem_obj} + len(coalesce(kv, []))
                  AS ok
                FROM k) k2
              JOIN (SELECT n, json_transform(line, {topt}) AS v FROM s) json_transform_line
                USING (n)
              ORDER BY n""").to_arrow_table()
            ent = con.sql("SELECT n, pidx, v FROM p2 ORDER BY n, pidx").to_arrow_table()
            # verifier calls: the lines that have them
            sig = con.sql("""
              SELECT n, c.ci, json_keys(c.cj) AS kc, json_type(c.cj, ['$.verifier',
                '$.verifier_id', '$.verifierId', '$.id', '$.reliability',
                '$.symmetric_reliability', '$.symmetricReliability', '$.signals']) AS tcall,
                c.cj->>'$.verifier' AS verifier, (c.cj->'$.reliability')::DOUBLE AS rel,
                e.key AS premise_id, e.value::BOOLEAN AS confirmed, e.type AS st
              FROM (SELECT n, unnest(json_extract(line, '$.verifier_calls[*]')) AS cj,
                           unnest(range(json_array_length(line, '$.verifier_calls')::BIGINT)) AS ci
                    FROM s WHERE contains(line, 'erifier_calls')) c,
                   json_each(c.cj, '$.signals') e
              ORDER BY n, c.ci, e.id""").to_arrow_table()
            stages["values"] += time.perf_counter() - t
            counts["py"] += int(bad_p.size)
            out["rec"].append(rec)
            out["ent"].append(ent)
            out["sig"].append(sig)
    return stages, {**counts, **out}


def old_read(log: str) -> Any:
    import warnings

    from amv_calib.claims._logread import read_uses

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_uses(log)


def baseline(log: str, con: Any) -> int:
    prem = ("STRUCT(id VARCHAR, claim_id VARCHAR, recency_hours DOUBLE, source_trust_score "
            "DOUBLE, model_confidence DOUBLE, contradiction_flag BOOLEAN, p DOUBLE)[]")
    con.execute("SET threads = 2")
    con.execute(
        "CREATE OR REPLACE TABLE u AS SELECT time::TIMESTAMP AS t, action_id, pr.id AS "
        "premise_id, pr.claim_id AS claim_id, pr.recency_hours, pr.source_trust_score, "
        "pr.model_confidence, pr.contradiction_flag, pr.p FROM (SELECT time, action_id, "
        "unnest(premises) AS pr FROM read_json(?, format = 'newline_delimited', "
        f"columns = {{time: 'VARCHAR', action_id: 'VARCHAR', premises: '{prem}'}}))", [log])
    row = con.execute("SELECT count(*) FROM u").fetchone()
    return int(row[0]) if row else 0


def check_equal(log: str, res: dict[str, Any]) -> dict[str, Any]:
    """Today's values against the DuckDB read's (records, entries, signals)."""
    import pyarrow as pa

    old = old_read(log)
    wide = old.wide()
    rec = pa.concat_tables(res["rec"])
    v = rec.column("v").combine_chunks()
    got_action = v.field("action_id").to_pylist()
    want = {int(ln): str(a) for ln, a in zip(old.records["line"].tolist(),
                                              old.records["action_id"], strict=True)}
    ok_action = all(want[int(n)] == a for n, a in zip(rec.column("n").to_pylist(),
                                                      got_action, strict=True))
    ent = pa.concat_tables(res["ent"])
    ev = ent.column("v").combine_chunks()
    feats = {}
    for k in ("recency_hours", "source_trust_score", "model_confidence", "p"):
        got = np.asarray(ev.field(k).to_numpy(zero_copy_only=False), dtype=np.float64) + 0.0
        feats[k] = bool(np.array_equal(got, wide[k].to_numpy(), equal_nan=True))
    flag = np.where(np.asarray(ev.field("contradiction_flag").to_pylist(), dtype=object)
                    == None, np.nan,  # noqa: E711
                    np.asarray(ev.field("contradiction_flag").to_pylist(), dtype=float))
    feats["contradiction_flag"] = bool(np.array_equal(flag.astype(float),
                                                      wide["contradiction_flag"].to_numpy(),
                                                      equal_nan=True))
    feats["claim_id"] = ev.field("claim_id").to_pylist() == wide["claim_id"].astype(
        object).tolist()
    feats["premise_id"] = ev.field("id").to_pylist() == wide["premise_id"].astype(
        object).tolist()
    feats["entry_lines"] = ent.column("n").to_pylist() == wide["line"].tolist()
    sig = pa.concat_tables(res["sig"])
    s = old.signals
    feats["signals"] = (sig.column("premise_id").to_pylist() == s["premise_id"].tolist()
                        and sig.column("confirmed").to_pylist() == s["confirmed"].tolist()
                        and sig.column("verifier").to_pylist() == s["verifier"].tolist())
    return {"records": len(old.records["line"]) == rec.num_rows and ok_action, **feats}


def main() -> None:
    import duckdb

    log = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "all"
    if mode == "old":
        best = min(_timed(lambda: old_read(log)) for _ in range(3))
        print(json.dumps({"old_seconds": best, "peak_mib": _peak()}))
        return
    if mode == "duck":
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            stages, _ = duck_read(log, duckdb.connect())
            runs.append((time.perf_counter() - t, stages))
        best = min(runs, key=lambda r: r[0])
        print(json.dumps({"duck_seconds": best[0], "stages": best[1], "peak_mib": _peak()}))
        return
    if mode == "baseline":
        best = min(_timed(lambda: baseline(log, duckdb.connect())) for _ in range(3))
        print(json.dumps({"baseline_seconds": best, "peak_mib": _peak()}))
        return
    stages, res = duck_read(log, duckdb.connect())
    print(json.dumps({"counts": {k: res[k] for k in ("lines", "blank", "routed", "py")},
                      "equal": check_equal(log, res)}))


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


if __name__ == "__main__" and not (len(sys.argv) > 2 and sys.argv[2] == "primitives"):
    main()


#: The rules' DuckDB work one by one, each as an aggregate (nothing materialised).
PRIMITIVES: dict[str, str] = {
    "json_valid": "SELECT count(*) FROM blk WHERE json_valid(line)",
    "screens (NaN/Inf, trailing comma, surrogate)": (
        "SELECT count(*) FROM blk WHERE ((contains(line,'N') OR contains(line,'I') OR "
        "contains(line,'A') OR contains(line,'F') OR contains(line,'nan') OR "
        "contains(line,'inf')) AND regexp_matches(line, '(?i)[:,\\[]\\s*-?(nan|inf)')) OR "
        "regexp_matches(line, ',\\s*[\\]}]') OR (contains(line, '\\u') AND "
        "regexp_matches(line, '\\\\u[dD][89a-fA-F]'))"),
    "keys: record + calibrator": (
        "SELECT sum(len(json_keys(line, ['$', '$.calibrator']))) FROM blk"),
    "keys: each premise": "SELECT sum(len(json_keys(line, '$.premises[*]'))) FROM blk",
    "keys: each offered verifier": "SELECT sum(len(json_keys(line, '$.verifiers[*]'))) FROM blk",
    "types: record fields": (
        "SELECT count(*) FROM (SELECT json_type(line, TOPP) t FROM blk) WHERE t[1] IS NOT NULL"),
    "premises as text (unnest)": (
        "SELECT sum(length(p)) FROM (SELECT unnest(json_extract(line, '$.premises[*]')) p "
        "FROM blk)"),
    "types: premise fields": (
        "SELECT count(*) FROM (SELECT json_type(p, PREMP) t FROM (SELECT "
        "unnest(json_extract(line, '$.premises[*]')) p FROM blk)) WHERE t[1] IS NOT NULL"),
    "values: typed json_transform (record + premises)": (
        "SELECT count(*) FROM (SELECT json_transform(line, ALLT) v FROM blk) "
        "WHERE v.action_id IS NOT NULL"),
}


def primitives(log: str) -> dict[str, float]:
    """Seconds of each :data:`PRIMITIVES` query over the log (64 MiB blocks handed over as
    Arrow record batches of 1 MiB, so that both threads scan)."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    con.execute("SET threads = 2")
    allt = "'" + json.dumps({**_TOP, "calibrator": {"name": _V, "version": _V},
                             "premises": [{**_PREM, "claim": _CLAIM}]}) + "'"
    sql = {k: v.replace("TOPP", _paths(_TOP)).replace("PREMP", _paths(_PREM))
           .replace("ALLT", allt) for k, v in PRIMITIVES.items()}
    secs = dict.fromkeys(sql, 0.0)
    secs["split (numpy, Arrow)"] = 0.0
    with open(log, "rb") as fh:
        carry = b""
        first = 1
        while True:
            data = fh.read(_BLOCK)
            if not data:
                break
            t = time.perf_counter()
            data = carry + data
            cut = data.rfind(b"\n") + 1
            block, carry = data[:cut], data[cut:]
            blk, c = split(block, first)
            first += c["lines"]
            blk = pa.Table.from_batches(blk.to_batches(max_chunksize=2000))
            con.register("blk", blk)
            secs["split (numpy, Arrow)"] += time.perf_counter() - t
            for k, q in sql.items():
                t = time.perf_counter()
                con.execute(q).fetchall()
                secs[k] += time.perf_counter() - t
    return secs


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[2] == "primitives":
    print(json.dumps(primitives(sys.argv[1])))
