"""The Platt fit under two BLAS kernels: the same ``calibrator.json`` bytes, or not.

OpenBLAS picks its kernels by CPU (``OPENBLAS_CORETYPE`` forces one); scikit-learn's
``newton-cholesky`` solver goes through them, and the champion's correlated feature terms
amplify their last-bit differences into the coefficients (about 1e-14). The artifact would
carry the same bytes on every x86-64 only with a fit whose arithmetic does not go through
those kernels, or with coefficients written at a precision that absorbs the noise: until
then this test records the difference (strict: it fails the day the bytes agree).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIT = """
import sys
import pandas as pd
from amv_calib.calibration import PlattCalibrator
from amv_calib.calibration._calibrators import RICH_PLATT_MAP
from amv_calib.contract import CLAIM_FEATURES, canonical_json_bytes
claims = pd.read_csv(sys.argv[1]).sort_values("timestamp", kind="stable").head(16000)
cal = PlattCalibrator(feature_map=RICH_PLATT_MAP).fit(claims[list(CLAIM_FEATURES)],
                                                      claims["violated"])
sys.stdout.buffer.write(canonical_json_bytes(cal.to_portable().to_dict()))
"""


def _fit_under(kernel: str, claims: Path) -> bytes:
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", FIT, str(claims)], env=env,
                          capture_output=True, check=True)
    return done.stdout


@pytest.mark.xfail(strict=True, reason="the Platt fit's last bits follow the BLAS kernel")
def test_platt_fit_has_the_same_bytes_under_two_blas_kernels(sample_dir: Path) -> None:
    a, b = (_fit_under(k, sample_dir / "claims.csv") for k in ("Sandybridge", "Prescott"))
    assert a.startswith(b"{") and b.startswith(b"{")
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()
