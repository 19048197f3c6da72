"""One local[2] Spark session for every Spark test (start-up takes seconds), stopped at the
end. Every test here is marked ``requires_spark``: where Java or pyspark is missing it skips
with the reason, or fails naming it when ``CI`` is set (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from amv_calib.spark import spark_session

from ._jvm import SESSION_CONF


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.requires_spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` session: UI off, bound to 127.0.0.1, two shuffle partitions, the
    settings of ``_jvm.py`` (among them a small cap on what the driver collects)."""
    session = spark_session("local[2]", app_name="amv-calib-tests", driver_memory="2g",
                            shuffle_partitions=2, conf=SESSION_CONF)
    yield session
    session.stop()
