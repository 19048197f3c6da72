"""Memory kinds on Spark: a log whose premises give kinds (their own or their claim's, either
spelling, some the contract's rule refuses), cut into many byte ranges, labelled by ``label
--engine spark`` and on one machine: the same files to the byte (the claim rows'
``memory_kind``, the refused kinds' ``invalid_use`` details, the episodes' premises' kinds), the
same in-memory tables."""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
import pytest

from amv_calib.claims import label_claims
from amv_calib.spark import label_claims_spark

from ._messy import label_both, same_folders, write_messy


@pytest.fixture(scope="module")
def both(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("kinds")
    logs, outcomes = write_messy(folder, 4000, seed=7, kinds=True)
    assert b"memory" not in logs[1].read_bytes()[:200_000]
    # 64 KiB ranges: tens of tasks, the first of the last file with no kind at all
    local, report = label_both(spark, logs, outcomes, folder, min_verifier_calls=5,
                               split_bytes=64 << 10)
    return folder, logs, outcomes, local, report


def test_the_log_has_kinds_of_every_verdict(both: Any) -> None:
    folder, _, _, local, _ = both
    kinds = local.claims["memory_kind"]
    assert kinds.notna().sum() > 100 and kinds.isna().sum() > 100
    assert {"preference", "event", "fact", "\u4e8b\u4ef6"} <= set(kinds.dropna())
    detail = local.report.unjoined_uses["detail"].astype(str)
    episodes = (folder / "local" / "episodes.jsonl").read_text(encoding="utf-8")
    assert episodes.count('"memory_kind":') > 20
    for words in ("is not a string", "is blank", "begins or ends with whitespace",
                  "more than 64", "differ (give one)", "claim.memory"):
        assert detail.str.contains(words, regex=False).any(), words


def test_same_files_as_one_machine(both: Any) -> None:
    folder, _, _, local, report = both
    same_folders(folder, local.report, report)
    claims = pd.read_parquet(folder / "spark" / "claims.parquet")
    pd.testing.assert_frame_equal(claims, local.claims)


def test_same_tables_in_memory(both: Any, spark: Any) -> None:
    _, logs, outcomes, _, _ = both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local, local_report = label_claims(logs, outcomes, on_corrupt="skip")
        # one range per file: the byte ranges' cuts are the fixture's
        on_spark, spark_report = label_claims_spark(logs, outcomes, spark=spark,
                                                    on_corrupt="skip")
    pd.testing.assert_frame_equal(on_spark, local)
    u_local, u_spark = local_report.unjoined_uses, spark_report.unjoined_uses
    assert u_spark["detail"].astype(str).tolist() == u_local["detail"].astype(str).tolist()
