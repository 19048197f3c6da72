"""The Spark session the engine runs in: any master URL, sensible defaults for one machine."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The master of ``--engine spark`` when none is given: every core of this machine.
DEFAULT_MASTER: Final = "local[*]"


def spark_unavailable() -> str | None:
    """Why the Spark engine cannot run here (no pyspark, no Java), or None when it can."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'amv-calib[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) \
            and shutil.which("java") is None:
        return "no Java runtime (Spark 4 needs Java 17+: apt-get install openjdk-17-jre-headless)"
    return None


def spark_session(master: str = DEFAULT_MASTER, *, app_name: str = "amv-calib",
                  driver_memory: str | None = None, shuffle_partitions: int | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark session on ``master`` (``local[N]``, ``spark://...``, ``yarn``, ``k8s://...``).

    An existing session is reused (``getOrCreate``); under ``spark-submit`` the options given
    there win. In local mode the driver binds to 127.0.0.1, the UI is off, Python workers run
    this interpreter and ``driver_memory`` defaults to 4g (the results the driver collects
    keep Spark's cap, ``spark.driver.maxResultSize``, 1g); the session time zone is UTC (the
    data contract's times are UTC). ``shuffle_partitions`` defaults to twice the local cores
    (Spark's 200 is for clusters). ``conf`` adds or overrides settings.
    """
    import warnings

    from pyspark.sql import SparkSession

    # pandas 3 works for what the engine converts (Arrow-backed frames); PySpark 4.x warns
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning)
    warnings.filterwarnings("ignore", message="The copy keyword is deprecated",
                            module="pyspark")
    why = spark_unavailable()
    if why is not None:
        raise RuntimeError(f"the Spark engine cannot start: {why}")
    local = master.startswith("local")
    builder: Any = SparkSession.builder.master(master).appName(app_name)
    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    }
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        cores = os.cpu_count() or 2
        inside = master[len("local["):-1] if master.startswith("local[") else "1"
        if inside.isdigit():
            cores = int(inside)
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": driver_memory or "4g",
            "spark.sql.shuffle.partitions": str(shuffle_partitions or 2 * cores),
        })
    else:
        if driver_memory:
            settings["spark.driver.memory"] = driver_memory
        if shuffle_partitions:
            settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
