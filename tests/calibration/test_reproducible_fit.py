"""The fits under other BLAS kernels and SIMD paths: the same ``calibrator.json`` bytes.

OpenBLAS picks its kernels by CPU (``OPENBLAS_CORETYPE`` forces one) and numpy its SIMD
``exp``/``log`` (``NPY_DISABLE_CPU_FEATURES`` turns the AVX-512 ones off); scikit-learn's
``newton-cholesky`` solver goes through both, and the champion's correlated feature terms
amplify their last-bit differences into the coefficients (about 1e-13). The fitted
coefficients are rounded to ``COEF_DIGITS`` significant digits and the isotonic index to
``INDEX_DECIMALS`` decimals, which absorbs that noise: each variant below writes the bytes
the default one does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numpy._core._multiarray_umath import __cpu_features__

from amv_calib.calibration._calibrators import COEF_DIGITS

FIT = """
import sys
import pandas as pd
from amv_calib.calibration import BetaCalibrator, IsotonicCalibrator, PlattCalibrator
from amv_calib.calibration._calibrators import RICH_BETA_EXTRA_MAP, RICH_PLATT_MAP
from amv_calib.contract import CLAIM_FEATURES, canonical_json_bytes
claims = pd.read_csv(sys.argv[1]).sort_values("timestamp", kind="stable").head(16000)
X, y = claims[[*CLAIM_FEATURES, "claim_id"]], claims["violated"]
for cal in (PlattCalibrator(feature_map=RICH_PLATT_MAP),
            BetaCalibrator(extra_map=RICH_BETA_EXTRA_MAP),
            IsotonicCalibrator(feature_map=RICH_PLATT_MAP)):
    sys.stdout.buffer.write(canonical_json_bytes(cal.fit(X, y).to_portable().to_dict()) + b"\\0")
"""

#: Environment changes that alter the fit's arithmetic on this machine: other OpenBLAS
#: kernels, and numpy without its AVX-512 loops where the CPU has them.
VARIANTS = [{"OPENBLAS_CORETYPE": "Sandybridge"}, {"OPENBLAS_CORETYPE": "Prescott"}]
if __cpu_features__.get("AVX512_SKX"):
    VARIANTS.append({"NPY_DISABLE_CPU_FEATURES": "AVX512_ICL X86_V4"})


def _fit_under(extra: dict[str, str], claims: Path) -> list[bytes]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    env.update({"OPENBLAS_NUM_THREADS": "1", **extra})
    done = subprocess.run([sys.executable, "-c", FIT, str(claims)], env=env,
                          capture_output=True, check=True)
    return done.stdout.split(b"\0")[:-1]


@pytest.fixture(scope="module")
def default_fit(sample_dir: Path) -> list[bytes]:
    """The three portable forms under this machine's own kernels."""
    return _fit_under({}, sample_dir / "claims.csv")


def test_platt_and_beta_write_rounded_coefficients(default_fit: list[bytes]) -> None:
    assert len(default_fit) == 3
    for line in default_fit[:2]:
        values = [json.loads(line)["intercept"], *json.loads(line)["coef"]]
        assert values == [float(f"{v:.{COEF_DIGITS}g}") for v in values]
        # Not trivially so: the values carry COEF_DIGITS significant digits, not fewer.
        assert max(len(f"{abs(v):.{COEF_DIGITS}e}".split("e")[0].rstrip("0")) for v in values) \
            == COEF_DIGITS + 1


@pytest.mark.parametrize("extra", VARIANTS, ids=lambda e: "-".join(e.values()))
def test_fits_have_the_same_bytes_under_other_kernels(
    extra: dict[str, str], default_fit: list[bytes], sample_dir: Path
) -> None:
    other = _fit_under(extra, sample_dir / "claims.csv")
    assert [line[:1] for line in other] == [b"{"] * 3
    for kind, a, b in zip(("platt", "beta", "isotonic"), default_fit, other, strict=True):
        assert a == b, f"{kind}: the portable form differs under {extra}"
