"""The Spark engine of the data stages (``--engine spark``): the label join, the calibrator
comparison, and the session they run in (docs/scale.md).

Importing this package needs no pyspark: Spark is imported when a function runs
(``pip install 'amv-calib[spark]'`` and Java 17 on the driver and the executors).
"""

from __future__ import annotations

from amv_calib.spark._compare import (
    MLLIB_MAX_ITER,
    MLLIB_TOL,
    SparkCalibrator,
    compare_calibrators_spark,
)
from amv_calib.spark._label import (
    DEFAULT_SPLIT_BYTES,
    label_claims_spark,
    label_logs_spark,
    write_label_spark,
)
from amv_calib.spark._session import DEFAULT_MASTER, spark_session, spark_unavailable

__all__ = [
    "DEFAULT_MASTER",
    "DEFAULT_SPLIT_BYTES",
    "MLLIB_MAX_ITER",
    "MLLIB_TOL",
    "SparkCalibrator",
    "compare_calibrators_spark",
    "label_claims_spark",
    "label_logs_spark",
    "spark_session",
    "spark_unavailable",
    "write_label_spark",
]
