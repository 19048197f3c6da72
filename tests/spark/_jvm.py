"""The JVM flags of the tests' Spark sessions. A test session runs seconds of small jobs, so
the JVM's time goes to compiling, not to running: the client compiler alone (C1, no C2
recompilation of the hot methods) and the serial collector (no concurrent GC threads) cut the
CPU a Spark label of a 20k-line log takes by about 40% (measured on two cores, where the other
test worker competes for the CPU). Neither changes what Spark computes."""

from __future__ import annotations

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: ``conf`` for :func:`amv_calib.spark.spark_session`
JVM_CONF = {"spark.driver.extraJavaOptions": JVM_OPTIONS}
