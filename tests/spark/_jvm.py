"""The settings of the tests' Spark sessions.

A test session runs seconds of small jobs, so the JVM's time goes to compiling, not to
running: the client compiler alone (C1, no C2 recompilation of the hot methods) and the serial
collector (no concurrent GC threads) cut the CPU a Spark label of a 20k-line log takes by
about 40% (measured on two cores, where the other test worker competes for the CPU). Neither
changes what Spark computes.

The driver may collect at most :data:`RESULT_CAP` per job (Spark's default is 1g): every Spark
test thus also checks that the driver collects no per-use rows, and
tests/spark/test_label_cli.py labels a log whose rows are several times the cap.
"""

from __future__ import annotations

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: what the driver may collect per job (``spark.driver.maxResultSize``; Spark's least is 1m)
RESULT_CAP = "2m"
#: ``conf`` for :func:`amv_calib.spark.spark_session`
SESSION_CONF = {"spark.driver.extraJavaOptions": JVM_OPTIONS,
                "spark.driver.maxResultSize": RESULT_CAP}
