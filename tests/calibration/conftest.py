"""Fixtures of the calibration tests."""

from __future__ import annotations

import pandas as pd
import pytest

from amv_calib.datasets import synth_kind_claims


@pytest.fixture(scope="module")
def kind_claims() -> pd.DataFrame:
    """3,000 claims of the default world whose memory kinds age differently."""
    return synth_kind_claims(3000, seed=5)
