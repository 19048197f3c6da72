"""Memory kinds in the portable calibrator (``format_version`` 2), against hand-worked sums."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

from amv_calib import PortableFormatError
from amv_calib.contract._features import (
    FeatureMap,
    PortableCalibrator,
    Term,
    seed_prior_calibrator,
)

FEATURES = ("recency_hours", "source_trust_score", "model_confidence", "contradiction_flag")


def _sigmoid(z: float) -> float:
    # the two branches that never overflow (exp of a non-positive number only)
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


@pytest.fixture(scope="module")
def kinded() -> PortableCalibrator:
    """Three kinds; a shared trust slope and a recency slope for "event" and "preference".

    Every value below is a dyadic rational, so the hand-worked sums are exact.
    """
    return PortableCalibrator(
        kind="linear",
        feature_map=FeatureMap((
            Term(column="source_trust_score", transform="identity"),
            Term(column="recency_hours", transform="ramp", scale=100.0, kind="event"),
            Term(column="recency_hours", transform="ramp", scale=100.0, kind="preference"),
        )),
        intercept=-1.0,
        coef=(2.0, 3.0, 0.5),
        kinds=("event", "other", "preference"),
        kind_intercept=(0.5, 0.0, -1.0),
        source="hand-made",
    )


CLAIM = {"recency_hours": 50.0, "source_trust_score": 0.25, "model_confidence": 0.5,
         "contradiction_flag": 0.0}


@pytest.mark.parametrize(("memory_kind", "z"), [
    # -1 + 0.5 (event) + 2 * 0.25 + 3 * ramp(50 / 100)
    ("event", -1.0 + 0.5 + 0.5 + 1.5),
    # -1 - 1 (preference) + 2 * 0.25 + 0.5 * 0.5
    ("preference", -1.0 - 1.0 + 0.5 + 0.25),
    # "other", absent, and a kind outside the vocabulary: no kind term
    ("other", -1.0 + 0.0 + 0.5),
    (None, -0.5),
    ("opinion", -0.5),
    ("", -0.5),
], ids=["event", "preference", "other", "absent", "unknown", "empty"])
def test_predict_one_sums_the_kind_terms_by_hand(kinded: PortableCalibrator,
                                                 memory_kind: str | None, z: float) -> None:
    assert kinded.predict_one(CLAIM, memory_kind) == _sigmoid(z)
    assert kinded.decision_function({k: [v] for k, v in CLAIM.items()}, [memory_kind])[0] == z


def test_kind_codes_map_absent_and_unknown_to_other(kinded: PortableCalibrator) -> None:
    codes = kinded.kind_codes(["preference", None, float("nan"), "opinion", "event", "other"])
    assert codes.tolist() == [2, 1, 1, 1, 0, 1]
    assert kinded.kind_code(None) == 1
    assert kinded.term_kind_codes == (-1, 0, 2)
    with pytest.raises(ValueError, match=r"^memory_kind=3 at row 1 is not a string$"):
        kinded.kind_codes(["event", 3])


def test_predict_matches_predict_one_row_by_row(kinded: PortableCalibrator) -> None:
    rng = np.random.default_rng(53)
    n = 400
    frame: dict[str, Any] = {
        "recency_hours": rng.exponential(80.0, n),
        "source_trust_score": rng.uniform(0, 1, n),
        "model_confidence": rng.uniform(0, 1, n),
        "contradiction_flag": rng.integers(0, 2, n).astype(float),
        "memory_kind": rng.choice(np.array(["event", "preference", "other", "fact", None],
                                           dtype=object), n),
    }
    # the column of the frame, or the same kinds given apart: one answer
    p = kinded.predict(frame)
    np.testing.assert_array_equal(p, kinded.predict(frame, list(frame["memory_kind"])))
    # identity and ramp use no libm: the numpy and scalar paths agree to the bit
    one = [kinded.predict_one({c: float(frame[c][i]) for c in FEATURES}, frame["memory_kind"][i])
           for i in range(n)]
    np.testing.assert_allclose(p, one, rtol=1e-15, atol=0)
    # the index by hand, in the order of the format: intercept, kind, then the terms
    kind = frame["memory_kind"]
    ramp = np.minimum(1.0, frame["recency_hours"] / 100.0)
    base = -1.0 + np.select([kind == "event", kind == "preference"], [0.5, -1.0], 0.0)
    z = base + 2.0 * frame["source_trust_score"]
    z = np.where(kind == "event", z + 3.0 * ramp, np.where(kind == "preference", z + 0.5 * ramp,
                                                          z))
    np.testing.assert_array_equal(kinded.decision_function(frame), z)
    # a frame without the column: every row is "other"
    bare = {c: frame[c] for c in FEATURES}
    np.testing.assert_array_equal(kinded.predict(bare), kinded.predict(bare, [None] * n))


def test_memory_kinds_of_the_wrong_length_are_refused(kinded: PortableCalibrator) -> None:
    with pytest.raises(ValueError, match=r"^memory_kinds has 2 rows for 1 claims$"):
        kinded.predict({k: [v] for k, v in CLAIM.items()}, ["event", "other"])


def test_isotonic_with_kinds_reads_the_table_at_the_kind_index() -> None:
    iso = PortableCalibrator(
        kind="isotonic",
        feature_map=FeatureMap((Term(column="recency_hours", transform="ramp", scale=10.0,
                                     kind="event"),)),
        intercept=0.0, coef=(1.0,), x_knots=(0.0, 1.0, 2.0), y_knots=(0.1, 0.3, 0.7),
        kinds=("event", "other"), kind_intercept=(1.0, 0.0),
    )
    # event at 5 h: 0 + 1 + ramp(0.5) = 1.5, halfway between 0.3 and 0.7; other: 0 -> 0.1
    assert iso.predict_one({"recency_hours": 5.0}, "event") == pytest.approx(0.5, abs=1e-15)
    assert iso.predict_one({"recency_hours": 5.0}, "fact") == 0.1
    np.testing.assert_allclose(
        iso.predict({c: [5.0, 5.0] for c in FEATURES}, ["event", "fact"]), [0.5, 0.1],
        rtol=0, atol=1e-15)


def test_a_calibrator_without_kinds_ignores_the_kind() -> None:
    cal = seed_prior_calibrator()
    assert cal.kind_code("event") == -1
    assert cal.predict_one(CLAIM, "event") == cal.predict_one(CLAIM)
    frame = {k: [v, v] for k, v in CLAIM.items()} | {"memory_kind": ["event", None]}
    np.testing.assert_array_equal(cal.predict(frame), cal.predict({k: [v, v] for k, v in
                                                                  CLAIM.items()}))
    data = cal.to_dict()
    assert data["format_version"] == 1
    assert not {"kinds", "kind_intercept"} & set(data)
    assert all("kind" not in t for t in data["feature_map"])


def test_version_2_round_trips(kinded: PortableCalibrator) -> None:
    data = kinded.to_dict()
    assert data["format_version"] == 2
    assert data["kinds"] == ["event", "other", "preference"]
    assert data["kind_intercept"] == [0.5, 0.0, -1.0]
    assert [t.get("kind") for t in data["feature_map"]] == [None, "event", "preference"]
    back = PortableCalibrator.from_dict(json.loads(json.dumps(data)))
    assert back == kinded
    assert back.predict_one(CLAIM, "event") == kinded.predict_one(CLAIM, "event")
    assert kinded.feature_map.names[1:] == ["ramp(recency_hours, 100)[kind=event]",
                                            "ramp(recency_hours, 100)[kind=preference]"]


def _doctor(kinded: PortableCalibrator, change: dict[str, Any]) -> dict[str, Any]:
    data = kinded.to_dict()
    for key, value in change.items():
        if key.startswith("feature_map."):
            data["feature_map"][int(key.split(".")[1])]["kind"] = value
        elif value is _DROP:
            del data[key]
        else:
            data[key] = value
    return data


_DROP = object()
_TERM = "feature term 1 (ramp(recency_hours, 100)[kind=event])"


@pytest.mark.parametrize(("change", "message"), [
    ({"kinds": ["other", "event", "preference"], "kind_intercept": [0.0, 0.5, -1.0]},
     "kinds are not sorted: kinds[0]='other' comes before kinds[1]='event'"),
    ({"kinds": ["event", "event", "other", "preference"], "kind_intercept": [0, 0, 0, 0]},
     "kinds repeats 'event' (kinds[1])"),
    ({"kinds": ["event", "preference"], "kind_intercept": [0.5, -1.0]},
     "kinds=['event', 'preference'] lacks 'other'"),
    ({"kinds": [], "kind_intercept": []}, "kinds=[] lacks 'other'"),
    ({"kinds": "other"}, "kinds='other' must be a list of strings"),
    ({"kinds": ["event", 7, "preference"]}, "kinds[1]=7 is not a string"),
    ({"kinds": ["", "other", "preference"]}, "kinds[0]='' must have 1 to 64 characters, not 0"),
    ({"kinds": ["e" * 65, "other", "preference"]},
     f"kinds[0]={'e' * 65!r} must have 1 to 64 characters, not 65"),
    ({"kind_intercept": [0.5, 0.0]}, "kind_intercept has 2 entries for 3 kinds"),
    ({"kind_intercept": [0.5, float("nan"), 0.0]}, "kind_intercept[1]=nan is not finite"),
    ({"kind_intercept": [0.5, "0", 0.0]}, "kind_intercept[1]='0' is not a number"),
    ({"feature_map.1": "fact"}, f"{_TERM.replace('event', 'fact')} has kind='fact', which is "
                                "not in kinds=['event', 'other', 'preference']"),
    ({"feature_map.1": 1}, "feature term kind=1 is not a string"),
    ({"format_version": 1},
     "format_version=1 takes no memory kinds, got kinds, kind_intercept, "
     "feature_map[1].kind, feature_map[2].kind; a calibrator with kinds has format_version 2"),
    ({"format_version": 2, "kinds": _DROP}, "format_version=2 needs 'kinds'"),
    ({"kind_intercept": _DROP}, "format_version=2 needs 'kind_intercept'"),
    ({"format_version": 3},
     "unknown format_version=3; this version of amv-calib reads format_version 1 or 2"),
    ({"format_version": True},
     "unknown format_version=True; this version of amv-calib reads format_version 1 or 2"),
], ids=["unsorted", "duplicate", "no-other", "empty", "not-a-list", "not-a-string",
        "empty-kind", "long-kind", "intercept-length", "intercept-nan", "intercept-string",
        "term-kind-unknown", "term-kind-number", "version-1-with-kinds",
        "version-2-without-kinds", "no-kind-intercept", "version-3", "version-true"])
def test_doctored_kind_fields_are_refused(kinded: PortableCalibrator, change: dict[str, Any],
                                          message: str) -> None:
    with pytest.raises(PortableFormatError, match=f"^{re.escape(message)}$"):
        PortableCalibrator.from_dict(_doctor(kinded, change))


def test_version_1_refuses_a_term_kind_alone() -> None:
    data = seed_prior_calibrator().to_dict()
    data["feature_map"][0]["kind"] = "other"
    with pytest.raises(PortableFormatError, match=r"got feature_map\[0\]\.kind;"):
        PortableCalibrator.from_dict(data)


def test_kinds_sort_by_code_point() -> None:
    # Python's str order is the code-point order: upper case before lower case, and an
    # astral character (U+1F600) after U+FF5E, where UTF-16 code units would put it before
    fmap = FeatureMap((Term(column="source_trust_score", transform="identity"),))
    for kinds in (("Zeta", "alpha", "other"), ("other", "\uff5e", "\U0001f600")):
        PortableCalibrator(kind="linear", feature_map=fmap, intercept=0.0, coef=(1.0,),
                           kinds=kinds, kind_intercept=(0.0,) * 3)
    with pytest.raises(PortableFormatError, match="kinds are not sorted"):
        PortableCalibrator(kind="linear", feature_map=fmap, intercept=0.0, coef=(1.0,),
                           kinds=("other", "\U0001f600", "\uff5e"), kind_intercept=(0.0,) * 3)


def test_kind_intercept_without_kinds_is_refused() -> None:
    fmap = FeatureMap((Term(column="source_trust_score", transform="identity", kind="event"),))
    with pytest.raises(PortableFormatError, match=r"^kind_intercept has 1 entries for 0 kinds$"):
        PortableCalibrator(kind="linear", feature_map=fmap, intercept=0.0, coef=(1.0,),
                           kind_intercept=(0.0,))
    with pytest.raises(PortableFormatError, match=r"has kind='event', which is not in kinds=\[\]"):
        PortableCalibrator(kind="linear", feature_map=fmap, intercept=0.0, coef=(1.0,))


def test_the_shipped_calibrator_is_written_back_byte_for_byte() -> None:
    # a calibrator without kinds stays format_version 1, the bytes of before kinds existed
    from repo_paths import REPO_ROOT

    from amv_calib.contract import canonical_json_bytes

    raw = (REPO_ROOT / "models" / "amv-guard" / "v1" / "calibrator.json").read_bytes()
    cal = PortableCalibrator.from_dict(json.loads(raw))
    assert not cal.has_kinds
    assert canonical_json_bytes(cal.to_dict()) == raw
