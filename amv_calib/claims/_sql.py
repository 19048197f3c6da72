"""The label join written once, as SQL over named relations (DuckDB's dialect; Spark SQL by
SQLGlot's transpiler).

:func:`join_statements` gives the join's steps as ``(name, SELECT)`` pairs, in the order
they must be created; each reads the input relations below or earlier steps. The rules are
those of :mod:`amv_calib.claims._join` (its module docs); what SQL cannot state byte for
byte in both engines stays in Python on the small tables the steps give: each use's summed
log-likelihood ratio (a float sum in a fixed order, from ``answers``), the posterior and the
claim rows (:func:`amv_calib.claims._noisy.label_rows`).

Every key is an integer code, not a string: the caller numbers the ids once (a log read by
:func:`~amv_calib.claims._logread.read_uses` holds them as categoricals, whose codes are
the numbers), and equal codes mean equal ids wherever a step compares them. The steps are
shaped by where a big log's rows are: most actions are logged once and most uses meet no
outcome, so the join never groups the entries whole. Supersession (one use per action and
premise, the last record's) and the records that give a premise key twice are searched
among the entries of the actions that give a key twice (few); every other entry is a use of
its own.
The outcome stages read only the uses of the actions and claims that outcomes name.

Input relations
---------------
A code is an integer of any width (the steps compute in BIGINT), or NULL throughout a column
of SQL's NULL type.

``entries``
    One row per premise entry, in file and line order: ``eid`` (BIGINT, the entry's
    position), ``rec`` (BIGINT, its record's position over all files), ``pidx`` (INTEGER,
    position in the record), ``a`` (its record's action's code; NULL when the record has
    no ``action_id``), ``pid`` (the premise id's code; NULL when absent), ``pc`` (the claim
    id's code among the entries without premise id; NULL
    elsewhere and when absent), ``c``
    (the claim id's code as the outcomes number it: a claim no outcome names may
    share a code with another such claim; NULL when absent), ``t_us`` (BIGINT, the record's
    time in UTC microseconds, NULL when missing or unparseable) and ``values_ok``
    (BOOLEAN: :data:`VALUES_OK` over the entry's own values, which the caller evaluates
    by :func:`values_ok_expression` where it holds them, so that no step reads the
    features).
``signals``
    One row per verifier signal, in log order: ``sid`` (BIGINT, its position), ``rec``,
    ``pid`` (its premise id's code as the entries number it, NULL when absent), ``verifier``
    (VARCHAR), ``confirmed`` (BOOLEAN), ``reliability`` (DOUBLE, as declared).
``weights``
    The usable reliabilities (finite, ``0.5 < r <= 1``) and their log-likelihood ratio
    ``w = log(r) - log1p(-r)`` (DOUBLE): computed by the caller with numpy, so that both
    engines use the same bits.
``outcomes``
    The valid outcome records: ``oid`` (BIGINT, position), ``a`` (the action's code, one
    no record has for an action the log does not name) and ``c`` (the claim's code), at
    least one not NULL, ``o_t`` (BIGINT, UTC microseconds), ``v`` (BOOLEAN).

Steps a caller reads
--------------------
``superseded``
    The entries that are not uses: ``eid`` and ``use_eid``, the entry of the later record
    that names their use (uses are numbered in the order of their entries); ``in_rec``,
    whether a later entry of the same record has its premise key.
``invalid_uses``
    ``eid`` of each use that breaks the data contract (its fields, or its record gives one
    premise key twice).
``use_verdicts``
    The valid uses an outcome's key names: ``eid``, ``label`` and ``reason`` (an index into
    :data:`UNJOINED_REASONS`, :data:`JOINED` for an outcome label; a use left
    open is ``no_outcome_yet``, ``outcome_before_use`` or ``ambiguous_action_outcome`` here
    and may still take a verifier label). Every other valid use is ``no_outcome_yet``.
``answers``
    The verifier answers counted, one row per (use, verifier, answer, reliability): ``eid``,
    ``verifier``, ``confirmed``, ``reliability``, ``n`` (multiplicity: the most in any one
    record), ``contrib`` (``n`` times the signed ``w``), ``first`` (the ``sid`` of its first
    signal: the order of the sum).
``outcome_state``
    One row per outcome record: ``oid`` and ``status``, an index into
    :data:`amv_calib.claims._outcomes.OUTCOME_STATUSES`.
``signals_used``
    The count of signals that found their premise (the rest are ignored).

The claim-only stage takes, for each open use, the earliest outcome of its claim at or
after the use. For a claim with few outcome times (most claims) the use is joined to each
and the smallest kept, a hash join and a GROUP BY; for the others the product would grow
with the uses times the outcomes, and they are searched by a running minimum over the uses
and outcome times of each claim, ordered by time descending (:data:`NEXT_OUTCOME`), which
both engines run as one sort per claim (DuckDB also as an ``ASOF JOIN``, which Spark lacks).
"""

from __future__ import annotations

from typing import Final

#: The dialects :func:`join_statements` writes.
DIALECTS: Final = ("duckdb", "spark")

#: Why a use did not become a training row. A use's ``reason`` in the steps' results is an
#: index into it, or :data:`JOINED` for a use an outcome labels.
UNJOINED_REASONS: Final = (
    "invalid_use",
    "no_outcome_yet",
    "outcome_before_use",
    "conflicting_outcomes",
    "ambiguous_action_outcome",
    "conflicting_signals",
)
(INVALID_USE, NO_OUTCOME_YET, OUTCOME_BEFORE_USE, CONFLICTING_OUTCOMES,
 AMBIGUOUS_ACTION_OUTCOME, CONFLICTING_SIGNALS) = range(len(UNJOINED_REASONS))
JOINED: Final = -1

_INF: Final = "CAST('Infinity' AS DOUBLE)"

#: The claims the claim-only stage joins to every outcome time by default: those with at
#: most this many (a product of at most as many rows per use); the rest are searched by a
#: sort per claim.
FEW: Final = 8
# where join_statements puts its ``few``
_FEW: Final = "{few}"
_MANY: Final = f"SELECT c FROM claim_first3 WHERE n_t > {_FEW}"

# The premise key of an entry: its premise id, else its claim id, else its position (three
# kinds, never equal across: even, odd, negative).
_PK: Final = ("CASE WHEN pid IS NOT NULL THEN 2 * CAST(pid AS BIGINT) "
              "WHEN pc IS NOT NULL THEN 2 * CAST(pc AS BIGINT) + 1 ELSE -1 - pidx END")

#: A premise entry's own values keep the data contract, over the columns
#: ``recency_hours``, ``source_trust_score``, ``model_confidence`` (DOUBLE, NULL or NaN when
#: missing or of the wrong type), ``contradiction_flag`` (DOUBLE 0/1, NULL or NaN likewise)
#: and ``kind_bad`` (BOOLEAN: the premise's memory kind breaks the contract's rule).
VALUES_OK: Final = f"""COALESCE(recency_hours >= 0 AND recency_hours < {_INF}
         AND source_trust_score >= 0 AND source_trust_score <= 1
         AND model_confidence >= 0 AND model_confidence <= 1
         AND contradiction_flag IS NOT NULL AND NOT isnan(contradiction_flag)
         AND NOT kind_bad,
         FALSE)"""

_FIELDS_OK: Final = "COALESCE(e.c IS NOT NULL AND e.t_us IS NOT NULL AND e.values_ok, FALSE)"

# The steps, in DuckDB's dialect. Every construct is one SQLGlot transpiles to Spark SQL
# (tests/claims/test_sql.py checks the transpiled text).
_STEPS: Final[tuple[tuple[str, str], ...]] = (
    # An entry is superseded, or its record refused, only when its action (a record without
    # action_id is an action of its own) gives one premise key (id, else claim id, else
    # position) to two entries. The actions that may are found by one aggregate per action,
    # not a group per key: each key sets one bit of 61 (its code modulo 61), and an action
    # whose keys set fewer bits than it has entries may repeat one (a repeat always does;
    # distinct keys rarely share a bit). Only the candidates' entries are then grouped.
    ("repeat_actions", f"""
SELECT ak FROM (SELECT COALESCE(a, -1 - rec) AS ak, {_PK} AS pk FROM entries) k
GROUP BY ak
HAVING bit_count(BIT_OR(CAST(1 AS BIGINT) << CAST((pk % 61 + 61) % 61 AS INTEGER)))
       < COUNT(*)"""),
    ("repeat_entries", f"""
SELECT eid, rec, ak, pk, pid IS NOT NULL OR pc IS NOT NULL AS named FROM (
  SELECT eid, rec, pid, pc, COALESCE(a, -1 - rec) AS ak, {_PK} AS pk FROM entries) k
WHERE ak IN (SELECT ak FROM repeat_actions)"""),
    # a record giving one premise key (id, else claim id) to two premises is refused whole
    ("bad_records", """
SELECT DISTINCT rec FROM (
  SELECT rec FROM repeat_entries WHERE named GROUP BY rec, pk HAVING COUNT(*) > 1) d"""),
    # one use per (action, premise): the entry of the action's last record (``in_rec``: a
    # later entry of the same record has the same key)
    ("superseded", """
SELECT eid, use_eid, eid < rec_last AS in_rec FROM (
  SELECT eid, MAX(eid) OVER (PARTITION BY ak, pk) AS use_eid,
         MAX(eid) OVER (PARTITION BY rec, pk) AS rec_last FROM repeat_entries) s
WHERE eid < use_eid"""),
    # verifier signals: a usable reliability and a premise id of the record; a signal's use
    # is that premise's (a record giving the id twice gives it to one use: the signal meets
    # the last of its entries alone)
    ("signal_hits", """
SELECT s.sid, s.rec, s.verifier, s.confirmed, s.reliability,
       CASE WHEN s.confirmed THEN -w.w ELSE w.w END AS sw, COALESCE(x.use_eid, e.eid) AS eid
FROM signals s
JOIN weights w ON w.reliability = s.reliability
JOIN entries e ON e.rec = s.rec AND e.pid = s.pid
LEFT JOIN superseded x ON x.eid = e.eid
WHERE NOT COALESCE(x.in_rec, FALSE)"""),
    ("signals_used", "SELECT COUNT(*) AS n FROM signal_hits"),
    # the multiset rule: each distinct answer counts as often as in any single record
    ("answers", """
SELECT eid, verifier, confirmed, reliability, MAX(n) AS n, MAX(n) * MIN(sw) AS contrib,
       MIN(first) AS first
FROM (SELECT eid, verifier, confirmed, reliability, rec, COUNT(*) AS n, MIN(sw) AS sw,
             MIN(sid) AS first
      FROM signal_hits GROUP BY eid, verifier, confirmed, reliability, rec) per_record
GROUP BY eid, verifier, confirmed, reliability"""),
    ("invalid_uses", f"""
SELECT e.eid FROM entries e LEFT JOIN bad_records b ON b.rec = e.rec
WHERE (b.rec IS NOT NULL OR NOT {_FIELDS_OK})
  AND e.eid NOT IN (SELECT eid FROM superseded)"""),
    # the valid uses an outcome's key names (the only ones the stages below can decide)
    ("valid_uses", f"""
SELECT e.eid, e.a, e.c, e.t_us FROM entries e LEFT JOIN bad_records b ON b.rec = e.rec
WHERE (e.a IN (SELECT a FROM outcomes) OR e.c IN (SELECT c FROM outcomes WHERE a IS NULL))
  AND b.rec IS NULL AND {_FIELDS_OK}
  AND e.eid NOT IN (SELECT eid FROM superseded)"""),
    # 1. outcomes of a claim in an action
    ("pairs1", """
SELECT u.eid, u.c, o.oid, o.v, o.o_t >= u.t_us AS after
FROM valid_uses u JOIN outcomes o ON o.a = u.a AND o.c = u.c"""),
    ("decided1", """
SELECT eid, c, n_any > n_after AS hb1,
       n_after > 0 AND n_true > 0 AND n_true < n_after AS conflict1,
       n_after > 0 AND n_true = n_after AS lab1,
       n_after > 0 AND NOT (n_true > 0 AND n_true < n_after) AS ok1
FROM (SELECT eid, c, SUM(CASE WHEN after THEN 1 ELSE 0 END) AS n_after,
             SUM(CASE WHEN after AND v THEN 1 ELSE 0 END) AS n_true, COUNT(*) AS n_any
      FROM pairs1 GROUP BY eid, c) n"""),
    # 2. outcomes of an action, for the uses stage 1 left open; an action's uses counted
    # (valid or not) for the actions these outcomes name
    ("action_sizes", """
SELECT e.a, COUNT(*) AS n_in_action FROM entries e
WHERE e.a IN (SELECT a FROM outcomes WHERE c IS NULL)
  AND e.eid NOT IN (SELECT eid FROM superseded)
GROUP BY e.a"""),
    ("pairs2", """
SELECT u.eid, u.c, o.oid, o.v, o.o_t >= u.t_us AS after, s.n_in_action
FROM valid_uses u JOIN outcomes o ON o.a = u.a AND o.c IS NULL
JOIN action_sizes s ON s.a = u.a"""),
    ("live2", """
SELECT p.* FROM pairs2 p LEFT JOIN decided1 d ON d.eid = p.eid
WHERE d.eid IS NULL OR NOT (d.ok1 OR d.conflict1)"""),
    # an action outcome on a multi-premise action labels none of its premises, whatever it
    # says (labelling them all "held" when it is false but none when it is true would keep
    # a premise only when it held: selection on the label)
    ("decided2", """
SELECT eid, c, hb2, conflict2, lab2, decided AND NOT conflict2 AND n_in_action > 1 AS amb2,
       decided AND NOT conflict2 AND n_in_action <= 1 AS ok2
FROM (SELECT eid, c, n_in_action, n_any > n_after AS hb2, n_after > 0 AS decided,
             n_after > 0 AND n_true > 0 AND n_true < n_after AS conflict2,
             n_after > 0 AND n_true = n_after AS lab2
      FROM (SELECT eid, c, MAX(n_in_action) AS n_in_action,
                   SUM(CASE WHEN after THEN 1 ELSE 0 END) AS n_after,
                   SUM(CASE WHEN after AND v THEN 1 ELSE 0 END) AS n_true,
                   COUNT(*) AS n_any
            FROM live2 GROUP BY eid, c) n) d"""),
    # the uses the action stages touched (few beside the log's)
    ("state12", """
SELECT COALESCE(d1.eid, d2.eid) AS eid, COALESCE(d1.c, d2.c) AS c,
       COALESCE(d1.hb1, FALSE) OR COALESCE(d2.hb2, FALSE) AS hb12,
       COALESCE(d1.conflict1, FALSE) OR COALESCE(d2.conflict2, FALSE) AS conflict12,
       COALESCE(d1.ok1, FALSE) OR COALESCE(d1.conflict1, FALSE) OR COALESCE(d2.ok2, FALSE)
           OR COALESCE(d2.conflict2, FALSE) AS final12,
       CASE WHEN COALESCE(d1.ok1, FALSE) THEN d1.lab1
            WHEN COALESCE(d2.ok2, FALSE) THEN d2.lab2 ELSE FALSE END AS label12,
       COALESCE(d2.amb2, FALSE) AS amb
FROM decided1 d1 FULL OUTER JOIN decided2 d2 ON d2.eid = d1.eid"""),
    # 3. outcomes of a claim: the earliest at or after the use decides
    # per claim and outcome time: the outcomes, the violated ones and the claim's outcome
    # time before (NULL for its first)
    ("groups3", """
SELECT c, o_t, g_n, g_true, LAG(o_t) OVER (PARTITION BY c ORDER BY o_t) AS prev_t
FROM (SELECT c, o_t, COUNT(*) AS g_n, SUM(CASE WHEN v THEN 1 ELSE 0 END) AS g_true
      FROM outcomes WHERE a IS NULL GROUP BY c, o_t) g"""),
    # per claim its first outcome time and its number of outcome times
    ("claim_first3", """
SELECT c, MIN(o_t) AS first_t, COUNT(*) AS n_t FROM groups3 GROUP BY c"""),
    ("claim_uses3", """
SELECT u.c, MIN(u.t_us) AS min_t FROM valid_uses u
WHERE u.c IN (SELECT c FROM claim_first3) GROUP BY u.c"""),
    # the uses left open whose claim has a claim outcome (the rest keep their verdicts of
    # stages 1 and 2)
    ("open3", """
SELECT u.eid, u.c, u.t_us, f.first_t, f.n_t
FROM valid_uses u JOIN claim_first3 f ON f.c = u.c
WHERE u.eid NOT IN (SELECT eid FROM state12 WHERE final12)"""),
    # the search for a claim with few outcome times (most): the open use joined to the
    # time at or after it whose time before is before it (the hash join meets at most
    # ``few`` times per use); for the rest, :data:`NEXT_OUTCOME` (a sort per claim, never
    # a product of its uses and times)
    ("next3_few", f"""
SELECT o.eid, o.c, o.t_us, g.o_t AS g_t, g.g_n, g.g_true, o.first_t
FROM open3 o LEFT JOIN groups3 g
  ON g.c = o.c AND o.t_us <= g.o_t AND (g.prev_t IS NULL OR g.prev_t < o.t_us)
WHERE o.n_t <= {_FEW}"""),
    ("next3", "{next_outcome}"),
    ("verdicts3", f"""
SELECT n.eid, n.c, n.g_t, COALESCE(n.g_true = n.g_n, FALSE) AS label,
       CASE WHEN n.g_true > 0 AND n.g_true < n.g_n THEN {CONFLICTING_OUTCOMES}
            WHEN n.g_t IS NOT NULL THEN {JOINED}
            WHEN COALESCE(s.amb, FALSE) THEN {AMBIGUOUS_ACTION_OUTCOME}
            WHEN COALESCE(s.hb12, FALSE) OR n.first_t < n.t_us THEN {OUTCOME_BEFORE_USE}
            ELSE {NO_OUTCOME_YET} END AS reason
FROM (SELECT * FROM next3_few
      UNION ALL
      SELECT m.eid, m.c, m.t_us, m.g_t, g.g_n, g.g_true, f.first_t
      FROM next3 m JOIN claim_first3 f ON f.c = m.c
      LEFT JOIN groups3 g ON g.c = m.c AND g.o_t = m.g_t) n
LEFT JOIN state12 s ON s.eid = n.eid"""),
    # (the claims without a claim outcome by a join, not ``NOT IN`` under ``OR``, which
    # Spark plans as a nested loop over the two tables; c is never NULL on either side)
    ("use_verdicts", f"""
SELECT s.eid, s.label12 AS label,
       CASE WHEN s.conflict12 THEN {CONFLICTING_OUTCOMES} WHEN s.final12 THEN {JOINED}
            WHEN s.amb THEN {AMBIGUOUS_ACTION_OUTCOME} WHEN s.hb12 THEN {OUTCOME_BEFORE_USE}
            ELSE {NO_OUTCOME_YET} END AS reason
FROM state12 s LEFT JOIN claim_first3 f ON f.c = s.c
WHERE s.final12 OR f.c IS NULL
UNION ALL
SELECT eid, label, reason FROM verdicts3"""),
    # each outcome record's status
    ("flags12", """
SELECT p.oid, TRUE AS keymatch, MAX(p.after) AS earlier,
       MAX(p.after AND COALESCE(d.ok1, FALSE)) AS used,
       MAX(p.after AND COALESCE(d.conflict1, FALSE)) AS conflict, FALSE AS ambiguous
FROM pairs1 p LEFT JOIN decided1 d ON d.eid = p.eid GROUP BY p.oid
UNION ALL
SELECT p.oid, TRUE, MAX(p.after),
       MAX(p.after AND COALESCE(d.ok2, FALSE)), MAX(p.after AND COALESCE(d.conflict2, FALSE)),
       MAX(p.after AND COALESCE(d.amb2, FALSE))
FROM pairs2 p LEFT JOIN decided2 d ON d.eid = p.eid GROUP BY p.oid"""),
    ("groups3_used", f"""
SELECT g_t, c, MAX(reason = {JOINED}) AS used, MAX(reason = {CONFLICTING_OUTCOMES}) AS conflict
FROM verdicts3 WHERE g_t IS NOT NULL GROUP BY c, g_t"""),
    ("flags3", """
SELECT o.oid, u.min_t IS NOT NULL AS keymatch, COALESCE(u.min_t <= o.o_t, FALSE) AS earlier,
       COALESCE(g.used, FALSE) AS used, COALESCE(g.conflict, FALSE) AS conflict,
       FALSE AS ambiguous
FROM outcomes o LEFT JOIN groups3_used g ON g.c = o.c AND g.g_t = o.o_t
LEFT JOIN claim_uses3 u ON u.c = o.c
WHERE o.a IS NULL"""),
    ("outcome_state", """
SELECT o.oid,
       CASE WHEN COALESCE(f.used, FALSE) THEN 0
            WHEN COALESCE(f.conflict, FALSE) THEN 1
            WHEN COALESCE(f.ambiguous, FALSE) THEN 2
            WHEN COALESCE(f.keymatch, FALSE) AND COALESCE(f.earlier, FALSE) THEN 3
            WHEN COALESCE(f.keymatch, FALSE) THEN 4
            ELSE 5 END AS status
FROM outcomes o
LEFT JOIN (SELECT * FROM flags12 UNION ALL SELECT * FROM flags3) f ON f.oid = o.oid"""),
)

#: The claim-only stage's search for the claims with more than ``few`` outcome times
#: (:func:`join_statements`), portable: for each open use (``kind`` 1) the smallest
#: outcome time of its claim at or after it (NULL when there is none), as a running minimum
#: over the claim's uses and outcome times in descending time (an outcome before a use at
#: the same time).
NEXT_OUTCOME: Final = f"""
SELECT eid, c, t AS t_us, g_t FROM (
  SELECT eid, c, t, kind,
         MIN(CASE WHEN kind = 0 THEN t END) OVER (
           PARTITION BY c ORDER BY t DESC, kind ASC
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS g_t
  FROM (SELECT eid, c, t_us AS t, 1 AS kind FROM open3 WHERE n_t > {_FEW}
        UNION ALL
        SELECT CAST(NULL AS BIGINT), c, o_t, 0 FROM groups3 WHERE c IN ({_MANY})) both_sides
) s WHERE kind = 1"""

#: The same search as DuckDB's ``ASOF JOIN`` (measured against :data:`NEXT_OUTCOME`).
NEXT_OUTCOME_ASOF: Final = f"""
SELECT o.eid, o.c, o.t_us, g.o_t AS g_t
FROM open3 o ASOF LEFT JOIN groups3 g ON g.c = o.c AND o.t_us <= g.o_t
WHERE o.n_t > {_FEW}"""

#: The steps a caller reads (the rest feed them).
RESULTS: Final = ("superseded", "invalid_uses", "use_verdicts", "answers", "outcome_state",
                  "signals_used")


def values_ok_expression(dialect: str = "duckdb") -> str:
    """:data:`VALUES_OK` in ``dialect`` (one of :data:`DIALECTS`), the expression that
    gives the ``values_ok`` column of the ``entries`` relation."""
    return _in_dialect(VALUES_OK, dialect)


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ValueError(f"dialect={dialect!r}: expected one of {', '.join(DIALECTS)}")


def _in_dialect(sql: str, dialect: str) -> str:
    """``sql`` (DuckDB's dialect) in ``dialect``, one of :data:`DIALECTS`."""
    _check_dialect(dialect)
    if dialect == "duckdb":
        return sql
    import sqlglot

    return str(sqlglot.transpile(sql, read="duckdb", write=dialect)[0])


def join_statements(dialect: str = "duckdb", *, asof: bool = False, few: int = FEW
                    ) -> list[tuple[str, str]]:
    """The label join's steps as ``(name, SELECT statement)`` pairs, in order.

    Parameters
    ----------
    dialect : {"duckdb", "spark"}, default "duckdb"
        The SQL dialect of the statements (Spark's by SQLGlot from DuckDB's).
    asof : bool, default False
        DuckDB only: the claim-only stage's search as an ``ASOF JOIN``
        (:data:`NEXT_OUTCOME_ASOF`) instead of the portable window (:data:`NEXT_OUTCOME`).
    few : int, default :data:`FEW`
        The claim-only stage joins the uses of a claim with at most ``few`` outcome times
        to each of them; the other claims' uses are searched as ``asof`` says.

    Returns
    -------
    list of (str, str)
        Create each as a table or view in order, over the input relations the module docs
        list.
    """
    _check_dialect(dialect)
    if asof and dialect != "duckdb":
        raise ValueError(f"asof=True: an ASOF JOIN is DuckDB's only, not {dialect}'s")
    if not (isinstance(few, int) and few >= 0):
        raise ValueError(f"few={few!r}: expected an integer, 0 or more")
    steps: list[tuple[str, str]] = []
    for name, sql in _STEPS:
        if name == "next3":
            sql = NEXT_OUTCOME_ASOF if asof else NEXT_OUTCOME
        steps.append((name, sql.replace(_FEW, str(few)).strip()))
    return [(name, _in_dialect(sql, dialect)) for name, sql in steps]
