"""Feature maps and the portable calibrator, checked against hand-written formulas."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from amv_calib import ArtifactError, PortableFormatError
from amv_calib.contract._artifact import load_artifact, read_aliases
from amv_calib.contract._features import (
    SEED_FEATURE_MAP,
    FeatureMap,
    PortableCalibrator,
    Term,
    _check_format,
    seed_prior_calibrator,
)


def _seed_formula(h: float, trust: float, conf: float, contra: bool) -> float:
    """The seed's calibratePremiseFailureProbability, transcribed line by line."""
    recency_penalty = min(1.0, h / (24 * 30))
    logit_conf = math.log(max(1e-5, conf) / max(1e-5, 1 - conf))
    z = -0.85 - 1.42 * logit_conf + 2.15 * recency_penalty - 1.80 * trust + (2.5 if contra else 0)
    return max(0.001, min(0.999, 1.0 / (1.0 + math.exp(-z))))


@pytest.fixture(scope="module")
def claims() -> np.ndarray:
    rng = np.random.default_rng(7)
    n = 500
    x = np.column_stack([
        rng.exponential(400.0, n),
        rng.uniform(0, 1, n),
        rng.uniform(0, 1, n),
        rng.integers(0, 2, n),
    ])
    x[:5, 2] = [0.0, 1.0, 1e-9, 1 - 1e-12, 0.5]  # the edges of the logit
    return x


def test_seed_prior_matches_the_seed_formula(claims: np.ndarray) -> None:
    cal = seed_prior_calibrator()
    expected = np.array([_seed_formula(*row) for row in claims])
    np.testing.assert_allclose(cal.predict(claims), expected, rtol=0, atol=1e-14)
    for row, e in zip(claims, expected, strict=True):
        one = cal.predict_one(dict(zip(
            ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"],
            row, strict=True)))
        assert one == pytest.approx(e, abs=1e-14)


@pytest.mark.parametrize(
    ("term", "x", "expected"),
    [
        (Term(column="model_confidence", transform="identity"), 0.3, 0.3),
        (Term(column="model_confidence", transform="logit"), 0.8, math.log(4.0)),
        (Term(column="model_confidence", transform="logit"), 1.0, math.log(1 / 1e-5)),
        (Term(column="model_confidence", transform="log"), 0.0, math.log(1e-5)),
        (Term(column="model_confidence", transform="log1m", eps=1e-3), 1.0, -math.log(1e-3)),
        (Term(column="model_confidence", transform="logit", eps=2.0**-52), 0.0,
         math.log(2.0**-52)),
        (Term(column="model_confidence", transform="log1m", eps=2.0**-52), 1.0,
         52 * math.log(2.0)),
        (Term(column="model_confidence", transform="log", eps=2.0**-52), 1e-300,
         math.log(2.0**-52)),
        (Term(column="recency_hours", transform="ramp", scale=720.0), 360.0, 0.5),
        (Term(column="recency_hours", transform="ramp", scale=720.0), 9000.0, 1.0),
        (Term(column="recency_hours", transform="log1p", scale=24.0), 24.0, math.log(2.0)),
        (Term(column="contradiction_flag", transform="indicator"), 1.0, 1.0),
        (Term(column="contradiction_flag", transform="indicator"), 0.0, 0.0),
    ],
    ids=["identity", "logit", "logit-at-1", "log-at-0", "log1m-eps", "logit-machine-eps-at-0",
         "log1m-machine-eps-at-1", "log-machine-eps-below", "ramp", "ramp-cap",
         "log1p", "indicator-1", "indicator-0"],
)
def test_transform_closed_forms(term: Term, x: float, expected: float) -> None:
    assert term.apply(np.array([x]))[0] == pytest.approx(expected, rel=1e-12)
    assert term.apply_scalar(x) == pytest.approx(expected, rel=1e-12)


def test_dataframe_like_and_array_inputs_agree(claims: np.ndarray) -> None:
    as_dict = {
        "recency_hours": claims[:, 0], "source_trust_score": claims[:, 1],
        "model_confidence": claims[:, 2], "contradiction_flag": claims[:, 3] > 0.5,
    }
    np.testing.assert_array_equal(SEED_FEATURE_MAP.transform(as_dict),
                                  SEED_FEATURE_MAP.transform(claims))


def test_round_trip_through_json_is_exact() -> None:
    iso = PortableCalibrator(
        kind="isotonic", feature_map=SEED_FEATURE_MAP, intercept=0.1,
        coef=(-1.0, 2.0, -1.5, 2.0), x_knots=(-3.0, 0.0, 2.5), y_knots=(0.01, 0.2, 0.9),
        clamp=(0.001, 0.999),
    )
    back = PortableCalibrator.from_dict(json.loads(json.dumps(iso.to_dict())))
    assert back == iso
    z = np.array([-5.0, -3.0, -1.5, 0.0, 2.5, 9.0])
    np.testing.assert_array_equal(np.interp(z, iso.x_knots, iso.y_knots),
                                  [0.01, 0.01, 0.105, 0.2, 0.9, 0.9])


def _seed_dict() -> dict[str, object]:
    return seed_prior_calibrator().to_dict()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 99}, "unknown format_version=99"),
        ({"kind": "forest"}, "kind='forest'"),
        ({"coef": [1.0, float("nan"), 0.0, 0.0]}, r"coef\[1\]=nan is not finite"),
        ({"intercept": float("inf")}, "intercept=inf is not finite"),
        ({"coef": [1.0]}, "coef has 1 entries for 4 terms"),
        ({"feature_map": [{"column": "model_confidence", "transform": "exp"}]},
         "transform='exp' is not in the vocabulary"),
        ({"feature_map": [{"column": "age", "transform": "identity"}]},
         "column='age' is not a claim feature"),
        ({"clamp": [0.9, 0.1]}, "must satisfy 0 <= lo < hi <= 1"),
        ({"weights": [1]}, "unknown keys"),
    ],
    ids=["version", "kind", "nan-coef", "inf-intercept", "coef-length", "transform", "column",
         "clamp", "unknown-key"],
)
def test_from_dict_refuses(change: dict[str, object], message: str) -> None:
    data = {**_seed_dict(), **change}
    with pytest.raises(PortableFormatError, match=message):
        PortableCalibrator.from_dict(data)


def test_non_monotone_isotonic_table_is_refused() -> None:
    data = {**_seed_dict(), "kind": "isotonic", "x_knots": [0.0, 1.0, 2.0],
            "y_knots": [0.1, 0.5, 0.4]}
    with pytest.raises(PortableFormatError, match=r"not monotone: y_knots\[1\]=0.5"):
        PortableCalibrator.from_dict(data)


def test_ramp_needs_a_positive_scale() -> None:
    with pytest.raises(PortableFormatError, match="needs a finite scale > 0"):
        FeatureMap.from_list([{"column": "recency_hours", "transform": "ramp", "scale": 0}])


def test_interaction_term_multiplies_by_the_raw_feature(claims: np.ndarray) -> None:
    term = Term(column="contradiction_flag", transform="indicator", by="source_trust_score")
    fm = FeatureMap((term,))
    expected = (claims[:, 3] > 0.5) * claims[:, 1]
    np.testing.assert_array_equal(fm.transform(claims)[:, 0], expected)
    assert term.name == "indicator(contradiction_flag)*source_trust_score"
    assert FeatureMap.from_list(fm.to_list()) == fm
    cal = PortableCalibrator(kind="linear", feature_map=fm, intercept=-1.0, coef=(2.0,))
    row = dict(zip(["recency_hours", "source_trust_score", "model_confidence",
                    "contradiction_flag"], claims[7], strict=True))
    assert cal.predict_one(row) == pytest.approx(cal.predict(claims[7:8])[0], rel=1e-15)


@pytest.mark.parametrize("by", ["age", "contradiction_flag"], ids=["unknown", "itself"])
def test_interaction_with_unknown_or_same_column_is_refused(by: str) -> None:
    with pytest.raises(PortableFormatError, match=f"by='{by}' must be a claim feature"):
        Term(column="contradiction_flag", transform="indicator", by=by)


@pytest.mark.parametrize(("found", "message"), [
    ({}, "format=None, expected 'amv-calib/portable-calibrator'"),
    ({"format": "x", "format_version": 1}, "format='x', expected 'amv-calib/portable-calibrator'"),
    ({"format": "amv-calib/portable-calibrator", "format_version": 2},
     "unknown format_version=2; this version of amv-calib reads format_version 1"),
    ({"format": "amv-calib/portable-calibrator"},
     "unknown format_version=None; this version of amv-calib reads format_version 1"),
])
def test_check_format(found: dict[str, object], message: str) -> None:
    with pytest.raises(PortableFormatError, match=f"^{re.escape(message)}$"):
        _check_format(found, "amv-calib/portable-calibrator", 1)
    _check_format({"format": "amv-calib/portable-calibrator", "format_version": 1},
                  "amv-calib/portable-calibrator", 1)


@pytest.mark.parametrize(("file", "fmt"), [
    ("manifest.json", "amv-calib/artifact"), ("aliases.json", "amv-calib/aliases")])
def test_artifact_files_check_their_format_alike(tmp_path: Path, file: str, fmt: str) -> None:
    # manifest.json and aliases.json share the format check, prefixed by the file's path.
    for data, message in (({"format": "x"}, f"format='x', expected {fmt!r}"),
                          ({"format": fmt, "format_version": 7},
                           "unknown format_version=7; this version of amv-calib reads "
                           "format_version 1")):
        (tmp_path / file).write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(ArtifactError, match=f"^{re.escape(f'{tmp_path / file}: {message}')}$"):
            if file == "manifest.json":
                load_artifact(tmp_path)
            else:
                read_aliases(tmp_path)


def test_sigmoid_matches_exact_arithmetic_down_to_tiny_probabilities() -> None:
    from decimal import Decimal, getcontext

    from amv_calib.contract import sigmoid

    getcontext().prec = 50
    z = np.array([-700.0, -100.0, -30.0, -1e-9, 0.0, 0.5, 30.0, 40.0, 700.0])
    exact = [float(1 / (1 + (-Decimal(v)).exp())) for v in z.tolist()]
    got = sigmoid(z)
    assert got.dtype == np.float64
    for v, g, e in zip(z.tolist(), got.tolist(), exact, strict=True):
        # exp carries logaddexp's rounding, so the relative error grows like |z| * eps.
        assert g == pytest.approx(e, rel=2.5e-16 * max(1.0, abs(v)), abs=0.0), (v, g, e)
    assert sigmoid([-np.inf, np.inf]).tolist() == [0.0, 1.0]
    # A list, a scalar and an integer array give the same numbers as float64 input.
    assert sigmoid([-30, 2]).tolist() == sigmoid(np.array([-30.0, 2.0])).tolist()
    assert float(sigmoid(-30.0)) == got[2]
